"""`sitsrt logits` against the NumPy reference (numpy_forward.py) for every architecture.

Models are written by `sitsrt make-model` (random weights, F32 and Q8_0); the reference reads
the same files with the `gguf` package. Run: SITSRT_BIN=build/bin/sitsrt pytest tests/reference
(default binary: build/bin/sitsrt beside this checkout).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from numpy_forward import Model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITSRT = os.environ.get("SITSRT_BIN", str(ROOT / "build" / "bin" / "sitsrt"))

SHAPE = ["--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "96", "--vocab", "300",
         "--ctx", "256", "--seed", "7", "--threads", "1"]
VARIANTS = {
    "llama": [],
    "llama-llama3-rope": ["--rope-scaling", "llama3", "--rope-factor", "8", "--rope-original-ctx", "64"],
    "mistral": ["--arch", "mistral", "--sliding-window", "8"],
    "qwen2-yarn": ["--arch", "qwen2", "--rope-scaling", "yarn", "--rope-factor", "4", "--rope-original-ctx", "64",
                   "--rope-base", "1000", "--tied"],
    "qwen3": ["--arch", "qwen3", "--head-dim", "32"],
    "gemma3": ["--arch", "gemma3", "--head-dim", "32", "--layers", "7", "--sliding-window", "8",
               "--rope-base", "1000000", "--rope-scaling", "linear", "--rope-factor", "4", "--logit-softcap", "10",
               "--tied"],
}
TOKENS = [5, 77, 12, 290, 41, 3, 150, 151, 9, 200, 64, 18, 33, 250, 7, 99, 120, 45, 260, 11, 6, 180, 71, 30]


@pytest.fixture(scope="module")
def binary():
    if not os.access(SITSRT, os.X_OK):
        pytest.skip(f"{SITSRT} is not built (set SITSRT_BIN)")
    return SITSRT


@pytest.mark.parametrize("weight_type", ["f32", "q8_0"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_match_numpy_reference(binary, tmp_path, variant, weight_type):
    path = tmp_path / f"{variant}-{weight_type}.gguf"
    subprocess.run([binary, "make-model", "-o", str(path), "--type", weight_type, *SHAPE, *VARIANTS[variant]],
                   check=True, capture_output=True)
    # --isa avx512vnni: float prefill (at "amx", the default on AMX CPUs, prefill rounds to bf16)
    run = subprocess.run([binary, "logits", "-m", str(path), "--all", "--kv-type", "f32", "--activations", "f32",
                          "--batch", "8", "-t", "2", "--isa", "avx512vnni", "--tokens", ",".join(map(str, TOKENS))],
                         check=True, capture_output=True, text=True)
    got = np.array(json.loads(run.stdout)["logits"], dtype=np.float64)
    want = Model(str(path)).logits(TOKENS)
    assert got.shape == want.shape
    scale = np.abs(want).max()
    err = np.abs(got - want).max()
    print(f"numpy parity {variant} {weight_type}: max |error| {err:.3g}, logit scale {scale:.3g}")
    # float32 engine against float64 NumPy on the same stored weights: ~1e-5 of the scale.
    assert err <= 1e-4 * scale, f"max |error| {err} at {np.unravel_index(np.abs(got - want).argmax(), got.shape)}"
