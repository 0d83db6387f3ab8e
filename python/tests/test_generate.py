import json
import subprocess

import pytest

import sitsrt
from conftest import REFERENCE, REFERENCE_40

GREEDY = dict(max_tokens=32, temperature=0)


def test_reference_continuation(engine):
    r = engine.generate("Once upon a time", **GREEDY)
    assert r.text == REFERENCE
    assert r.finish_reason == "length"
    assert len(r.tokens) == 32
    assert engine.generate("Once upon a time", max_tokens=40, temperature=0).text == REFERENCE_40


def test_greedy_tokens_match_cli(engine, model_path, cli):
    out = subprocess.run([cli, "run", "-m", model_path, "-p", "Once upon a time", "-n", "32", "--temp", "0", "--json"],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    cli_tokens = [line["id"] for line in lines if line.get("type") == "token"]
    cli_logprobs = [line["logprob"] for line in lines if line.get("type") == "token"]
    r = engine.generate("Once upon a time", **GREEDY)
    assert r.tokens == cli_tokens
    assert r.logprobs == pytest.approx(cli_logprobs, abs=1e-5)


def test_result_fields(engine):
    r = engine.generate("Once upon a time", max_tokens=8, temperature=0, logprobs=3)
    assert len(r.events) == len(r.tokens) == len(r.logprobs) == len(r.top_logprobs) == 8
    for i, (e, top) in enumerate(zip(r.events, r.top_logprobs)):
        assert e.index == i and len(top) == 3
        assert top[0][0] == e.token_id  # greedy picks the most likely token
        assert e.logprob <= 0 and e.entropy >= 0
    assert r.prompt_tokens == engine.tokenize("Once upon a time")
    assert r.timings.generated_tokens == 8 and r.timings.total_seconds > 0
    assert "".join(e.text for e in r.events) == r.text


def test_token_prompt_equals_text_prompt(engine):
    ids = engine.tokenize("Once upon a time")
    assert engine.generate(ids, **GREEDY).tokens == engine.generate("Once upon a time", **GREEDY).tokens


def test_sampling_is_seeded(engine):
    a = engine.generate("Once upon a time", max_tokens=16, temperature=1.0, seed=7)
    b = engine.generate("Once upon a time", max_tokens=16, temperature=1.0, seed=7)
    assert a.tokens == b.tokens and a.seed == 7


def test_stop_string(engine):
    r = engine.generate("Once upon a time", max_tokens=32, temperature=0, stop="Lily")
    assert r.finish_reason == "stop" and r.text == ", there was a little girl named "


def test_tokenize_roundtrip(engine):
    text = "Once upon a time, there was a cat."
    ids = engine.tokenize(text)
    assert ids[0] == engine.info["bos"]
    assert engine.detokenize(ids) == text


def test_logits_numpy(engine):
    np = pytest.importorskip("numpy")
    ids = engine.tokenize("Once upon a time")
    logits = engine.logits(ids)
    assert isinstance(logits, np.ndarray) and logits.dtype == np.float32
    assert logits.shape == (len(ids), engine.info["n_vocab"])
    first = engine.generate("Once upon a time", max_tokens=1, temperature=0).tokens[0]
    assert int(np.argmax(logits[-1])) == first
    last = engine.logits(ids, all_positions=False)
    assert last.shape == (1, engine.info["n_vocab"])


def test_graph_and_info(engine):
    g = engine.graph()
    assert g["nodes"] and g["memory_plan"]["arena_bytes"] > 0
    assert engine.info["n_vocab"] == 512


def test_version():
    assert sitsrt.__version__.count(".") == 2


@pytest.mark.parametrize("kwargs, exc", [
    (dict(max_tokens=-1), ValueError),
    (dict(max_tokens="3"), TypeError),
    (dict(temperature=-0.5), ValueError),
    (dict(top_p=1.5), ValueError),
    (dict(logprobs=65), ValueError),
    (dict(seed=-1), ValueError),
    (dict(stop=[1]), TypeError),
    (dict(audit_level="loud"), ValueError),
    (dict(audit=42), TypeError),
    (dict(bogus=1), TypeError),
])
def test_bad_generate_arguments(engine, kwargs, exc):
    with pytest.raises(exc):
        engine.generate("Once", **kwargs)


def test_bad_prompt(engine):
    with pytest.raises(TypeError):
        engine.generate(b"bytes")
    with pytest.raises(ValueError):
        engine.generate([])
    with pytest.raises(ValueError):
        engine.generate([-1])


def test_plan_describes_the_cpu_device(engine):
    plan = engine.plan()
    assert [d["name"] for d in plan["devices"]] == ["cpu0"]
    cpu = plan["devices"][0]
    assert cpu["kind"] == "cpu" and cpu["weight_bytes"] > 0
    assert cpu["kv_bytes_per_request"] > 0 and cpu["activation_bytes_per_request"] > 0
    assert plan["context_length"] == engine.info["context_length"]
    stage = plan["stages"][0]
    assert stage["device"] == "cpu0" and stage["embedding"] and stage["output_head"]
    assert (stage["first_layer"], stage["last_layer"]) == (0, engine.info["n_layer"] - 1)


def test_budget_refusal_and_queueing(model_path):
    plan = sitsrt.Engine(model_path, threads=1).plan()["devices"][0]
    per_request = plan["kv_bytes_per_request"] + plan["activation_bytes_per_request"]
    with pytest.raises(sitsrt.OutOfMemoryError, match="short"):
        sitsrt.Engine(model_path, threads=1, memory_budget_bytes=plan["weight_bytes"])
    engine = sitsrt.Engine(model_path, threads=1, memory_budget_bytes=plan["weight_bytes"] + per_request,
                           deterministic=True)
    import threading
    results = []
    def client():
        results.append(engine.generate("Once upon a time", max_tokens=8, temperature=0).text)
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1
    stats = engine.queue_stats()
    # The four ran through the scheduler, sharing the KV block pool the budget left.
    assert stats["finished"] == 4 and stats["running"] == 0 and stats["waiting"] == 0
    assert stats["kv_blocks_free"] == stats["kv_blocks"] and stats["kv_pool_tokens"] >= engine.info["context_length"]


def test_devices_option(model_path):
    assert sitsrt.Engine(model_path, devices="cpu", threads=1).plan()["devices"][0]["kind"] == "cpu"
    assert sitsrt.Engine(model_path, devices=["cpu"], threads=1).generate("Once", max_tokens=2).tokens
    with pytest.raises(ValueError, match="tpu:0"):
        sitsrt.Engine(model_path, devices="tpu:0")
    if "cuda" in [name for name, _ in sitsrt.available_backends()]:
        import subprocess
        has_gpu = subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0
        if not has_gpu:  # a CUDA build on a machine without a GPU: the backend says why
            with pytest.raises(sitsrt.UnsupportedError, match="cuda:0"):
                sitsrt.Engine(model_path, devices="cuda:0")
    with pytest.raises(TypeError):
        sitsrt.Engine(model_path, devices=[0])
