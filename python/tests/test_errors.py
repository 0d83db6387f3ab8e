import pytest

import sitsrt


def test_hierarchy():
    for cls in (sitsrt.InvalidArgumentError, sitsrt.InvalidModelError, sitsrt.UnsupportedError, sitsrt.IOError,
                sitsrt.OutOfMemoryError, sitsrt.RejectedError, sitsrt.InternalError):
        assert issubclass(cls, sitsrt.Error) and issubclass(cls, RuntimeError)
    assert issubclass(sitsrt.InvalidArgumentError, ValueError)
    assert issubclass(sitsrt.IOError, OSError)
    assert sitsrt.InvalidModelError.code == "invalid_model"


def test_missing_file(tmp_path):
    with pytest.raises(sitsrt.Error) as info:
        sitsrt.Engine(tmp_path / "absent.gguf")
    assert "absent.gguf" in str(info.value)


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a model file" * 10)
    with pytest.raises(sitsrt.InvalidModelError) as info:
        sitsrt.Engine(bad)
    assert "bad.gguf" in str(info.value)


def test_truncated_model(tmp_path, model_path):
    data = open(model_path, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(sitsrt.InvalidModelError):
        sitsrt.Engine(cut)


def test_bad_engine_arguments(model_path):
    with pytest.raises(ValueError):
        sitsrt.Engine(model_path, kv_dtype="q4")
    with pytest.raises(ValueError):
        sitsrt.Engine(model_path, threads=0)
    with pytest.raises(TypeError):
        sitsrt.Engine(123)
    with pytest.raises(TypeError):
        sitsrt.Engine(model_path, ctx="big")


def test_context_full_is_reported(model_path):
    engine = sitsrt.Engine(model_path, threads=1, ctx=16)
    r = engine.generate("Once upon a time", max_tokens=64, temperature=0)
    assert r.finish_reason == "context_full"
