"""Engine(weights=...): load-time conversion of the matmul weights."""

import numpy as np
import pytest

import sitsrt


def test_bad_weights_value_is_a_value_error(model_path):
    with pytest.raises(ValueError) as info:
        sitsrt.Engine(model_path, weights="int3")
    assert "weights" in str(info.value) and "q4g128" in str(info.value)


def test_fp8_weights_convert_and_stay_close(model_path):
    f32 = sitsrt.Engine(model_path, threads=2)
    fp8 = sitsrt.Engine(model_path, threads=2, weights="fp8")
    info = fp8.info
    assert info["weights"] == "fp8"
    # stories260K: every matmul weight but the five 172-wide ffn_down rows (not whole 64-blocks).
    assert info["weights_converted_tensors"] == 31 and info["weights_kept_tensors"] == 5
    assert info["weights_output_head"] == "bf16"  # fp8 keeps the F32 head at 16 bits
    all_fp8 = sitsrt.Engine(model_path, threads=2, weights="fp8-all").info
    assert all_fp8["weights_output_head"] == "" and all_fp8["weights_converted_tensors"] == 31
    assert info["weights_converted_bytes"] > info["weights_converted_to_bytes"] > 0
    assert info["weights_convert_seconds"] >= 0.0
    assert f32.info["weights"] == "as-stored" and f32.info["weights_converted_tensors"] == 0
    tokens = f32.tokenize("Once upon a time")
    a, b = f32.logits(tokens), fp8.logits(tokens)
    assert a.shape == b.shape
    assert 0.0 < np.sqrt(np.mean((a - b) ** 2) / np.mean(a ** 2)) < 0.05
    # one scale per 128 x 128 block (a 64-wide row: one block of 64 columns)
    block = sitsrt.Engine(model_path, threads=2, weights="fp8-block")
    assert block.info["weights"] == "fp8-block" and block.info["weights_converted_tensors"] == 31
    c = block.logits(tokens)
    assert 0.0 < np.sqrt(np.mean((a - c) ** 2) / np.mean(a ** 2)) < 0.05


def test_mmap_and_resident_weights_give_the_same_logits(model_path):
    resident = sitsrt.Engine(model_path, threads=2, weights="q8")
    mapped = sitsrt.Engine(model_path, threads=2, weights="q8", mmap_weights=True)
    assert resident.info["weights_mmapped"] is False and mapped.info["weights_mmapped"] is True
    assert resident.info["weights_copy_seconds"] > 0.0 and mapped.info["weights_copy_seconds"] == 0.0
    assert mapped.info["weights_repacked_tensors"] == 0
    tokens = resident.tokenize("Once upon a time")
    assert np.array_equal(resident.logits(tokens), mapped.logits(tokens))  # repacking is lossless
