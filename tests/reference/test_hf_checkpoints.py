"""Hugging Face directories: `sitsrt logits -m DIR` against the NumPy reference on the stored
weights, for every architecture and F32/F16/BF16 checkpoints (one of them sharded), and
`sitsrt convert` to GGUF against the same reference (and against the `gguf` package's reading
of the converted file through numpy_forward.Model). Run: SITSRT_BIN=build/bin/sitsrt pytest tests/reference
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from hf_checkpoints import VARIANTS, Reference, config_for, write_checkpoint
from numpy_forward import Model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITSRT = os.environ.get("SITSRT_BIN", str(ROOT / "build" / "bin" / "sitsrt"))
TOKENS = [5, 77, 12, 290, 41, 3, 150, 151, 9, 200, 64, 18, 33, 250, 7, 99, 120, 45, 260, 11, 6, 180, 71, 30]
ENGINE = ["--all", "--kv-type", "f32", "--activations", "f32", "--batch", "8", "-t", "2"]


@pytest.fixture(scope="module")
def binary():
    if not os.access(SITSRT, os.X_OK):
        pytest.skip(f"{SITSRT} is not built (set SITSRT_BIN)")
    return SITSRT


def logits(binary: str, model: pathlib.Path) -> np.ndarray:
    run = subprocess.run([binary, "logits", "-m", str(model), *ENGINE, "--tokens", ",".join(map(str, TOKENS))],
                         check=True, capture_output=True, text=True)
    return np.array(json.loads(run.stdout)["logits"], dtype=np.float64)


def check(label: str, got: np.ndarray, want: np.ndarray, tolerance: float = 1e-4) -> None:
    assert got.shape == want.shape
    scale = np.abs(want).max()
    err = np.abs(got - want).max()
    print(f"{label}: max |error| {err:.3g}, logit scale {scale:.3g}")
    # float32 engine against float64 NumPy on the same stored weights.
    assert err <= tolerance * scale, f"{label}: max |error| {err} > {tolerance} x {scale}"


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hf_directory_logits_match_reference(binary, tmp_path, variant, dtype):
    shards = 3 if (variant, dtype) in (("llama", "bf16"), ("gemma3-multimodal", "f16")) else 1
    weights = write_checkpoint(tmp_path / "hf", variant, dtype, shards=shards)
    want = Reference(config_for(variant, dtype), weights).logits(TOKENS)
    check(f"hf {variant} {dtype} ({shards} shard(s))", logits(binary, tmp_path / "hf"), want)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_convert_matches_reference(binary, tmp_path, variant):
    weights = write_checkpoint(tmp_path / "hf", variant, "f32")
    want = Reference(config_for(variant, "f32"), weights).logits(TOKENS)
    out = tmp_path / "model.gguf"
    run = subprocess.run([binary, "convert", str(tmp_path / "hf"), "-o", str(out), "--type", "f32", "--json"],
                         check=True, capture_output=True, text=True)
    summary = json.loads(run.stdout)
    assert summary["type"] == "f32" and summary["output"] == str(out)
    check(f"converted {variant}", logits(binary, out), want)
    # The converted file read by the gguf package (llama.cpp's layout: permuted llama q/k,
    # Gemma norms as 1 + w, rope_freqs.weight for llama3) gives the same logits; both sides are
    # float64 NumPy, so only f32 metadata (rope factors, eps, bases) separates them: 1e-7.
    check(f"converted {variant} via gguf package", Model(str(out)).logits(TOKENS), want, 1e-7)


@pytest.mark.parametrize("weight_type", ["q8_0", "q4_0"])
def test_convert_quantizes(binary, tmp_path, weight_type):
    write_checkpoint(tmp_path / "hf", "qwen3", "bf16")
    out = tmp_path / "model.gguf"
    subprocess.run([binary, "convert", str(tmp_path / "hf"), "-o", str(out), "--type", weight_type],
                   check=True, capture_output=True)
    # The engine against the reference reading the same quantized file.
    check(f"converted qwen3 {weight_type}", logits(binary, out), Model(str(out)).logits(TOKENS))


def test_hf_directory_without_tokenizer_refuses_text(binary, tmp_path):
    write_checkpoint(tmp_path / "hf", "llama", "f16")
    run = subprocess.run([binary, "run", "-m", str(tmp_path / "hf"), "-p", "hello", "-n", "2"],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "tokenizer.json support is pending" in run.stderr
