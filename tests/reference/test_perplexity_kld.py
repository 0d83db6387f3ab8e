"""`sitsrt perplexity` on the real models (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M in
build/models, fetched by scripts/fetch-models.sh; skipped with a message when absent):

- the base file, read here with NumPy from its documented layout (docs/perplexity.md), holds the
  token ids and uint16 log-probabilities that `sitsrt logits` gives, and the KL divergence,
  perplexity and top-1 agreement the command reports equal NumPy's over the same logits;
- int8 against f32 decode activations (`--decode`: every scored position a one-token step, where
  int8 activations apply) over 8 chunks of 512 tokens of tests/data/text/architecture-notes.txt,
  with a sane bound (the numbers are printed: pytest -s);
- prefill rows never use int8 activations: the same comparison without --decode is ~0.
Run: SITSRT_BIN=build/bin/sitsrt [SITSRT_MODELS_DIR=build/models] pytest tests/reference
"""
from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import time

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITSRT = os.environ.get("SITSRT_BIN", str(ROOT / "build" / "bin" / "sitsrt"))
MODELS_DIR = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", str(ROOT / "build" / "models")))
TEXT = ROOT / "tests" / "data" / "text" / "architecture-notes.txt"
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
ENGINE = ["-t", "2", "--isa", "avx512vnni"]  # float prefill (clamped to the CPU)


@pytest.fixture(scope="module")
def binary():
    if not os.access(SITSRT, os.X_OK):
        pytest.skip(f"{SITSRT} is not built (set SITSRT_BIN)")
    return SITSRT


def model_path(name: str) -> pathlib.Path:
    path = MODELS_DIR / name
    if not path.exists():
        pytest.skip(f"{path} is absent (scripts/fetch-models.sh fetches it; or set SITSRT_MODELS_DIR)")
    return path


def perplexity(binary: str, *args) -> dict:
    run = subprocess.run([binary, "perplexity", *ENGINE, "--json", *map(str, args)], capture_output=True, text=True)
    if run.returncode != 0 and "pre-tokenizer" in run.stderr and "is not supported" in run.stderr:
        pytest.skip(f"this build cannot tokenize the text: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def read_base(path: pathlib.Path):
    """The base file's header and rows (log-probabilities dequantized), per docs/perplexity.md."""
    data = path.read_bytes()
    assert data[:8] == b"SITSKLD\n"
    version, n_vocab, n_ctx, n_chunks, first, flags, bos = struct.unpack_from("<6Ii", data, 8)
    assert version == 1
    (description_bytes,) = struct.unpack_from("<I", data, 100)
    at = 104 + description_bytes
    tokens = np.frombuffer(data, dtype="<i4", count=n_chunks * n_ctx, offset=at)
    at += 4 * n_chunks * n_ctx + 8
    row_bytes = (24 + 2 * n_vocab + 7) // 8 * 8
    rows = []
    while at < len(data):
        low, scale, target_log_prob, top = struct.unpack_from("<fffi", data, at + 8)
        codes = np.frombuffer(data, dtype="<u2", count=n_vocab, offset=at + 24).astype(np.float64)
        rows.append((low + np.float64(scale) * codes, scale, target_log_prob, top))
        at += row_bytes
    assert at == len(data) and len(rows) == n_chunks * (n_ctx - 1 - first)
    return {"n_vocab": n_vocab, "n_ctx": n_ctx, "first": first, "add_bos": bool(flags & 1), "bos": bos,
            "decode": bool(flags & 2), "tokens": tokens, "rows": rows}


def logits(binary: str, model: pathlib.Path, tokens, activations: str) -> np.ndarray:
    # -b 1: every position a one-token step, as perplexity -b 1 runs them.
    run = subprocess.run([binary, "logits", "-m", str(model), *ENGINE, "-b", "1", "--activations", activations,
                          "--all", "--tokens", ",".join(map(str, tokens))], check=True, capture_output=True, text=True)
    return np.array(json.loads(run.stdout)["logits"], dtype=np.float64)


def log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("name", MODELS)
def test_base_file_and_statistics_match_numpy(binary, tmp_path, name):
    model = model_path(name)
    base = tmp_path / "base.kld"
    small = ["-m", model, "-c", "16", "--chunks", "2", "-b", "1"]
    f32 = perplexity(binary, *small, "-f", TEXT, "--activations", "f32", "--kl-divergence-base", base)
    int8 = perplexity(binary, *small, "--activations", "int8", "--kl-divergence", "--kl-divergence-base", base)
    b = read_base(base)
    assert (b["n_ctx"], b["first"], len(b["rows"])) == (16, 8, 14)
    nll_f32, nll_int8, kld, same_top = [], [], [], []
    for chunk in range(2):
        ids = b["tokens"][chunk * 16:(chunk + 1) * 16].copy()
        targets = ids[9:16]
        if b["add_bos"]:
            ids[0] = b["bos"]
        p = log_softmax(logits(binary, model, ids[:15], "f32"))[8:15]
        q = log_softmax(logits(binary, model, ids[:15], "int8"))[8:15]
        for j in range(7):
            stored, scale, target_log_prob, top = b["rows"][chunk * 7 + j]
            # codes round to the nearest step of `scale`; the floor (64 nats below the top) clamps
            above = p[j] > p[j].max() - 63.9
            assert np.abs(stored - p[j])[above].max() <= scale / 2 + 1e-5
            assert target_log_prob == pytest.approx(p[j][targets[j]], abs=1e-5)
            assert top == int(np.argmax(p[j]))
            nll_f32.append(-p[j][targets[j]])
            nll_int8.append(-q[j][targets[j]])
            kld.append(float((np.exp(p[j]) * (p[j] - q[j])).sum()))
            same_top.append(int(np.argmax(p[j]) == np.argmax(q[j])))
    k = int8["kl_divergence"]
    assert f32["ppl"] == pytest.approx(np.exp(np.mean(nll_f32)), rel=1e-5)
    assert k["ppl_base"]["value"] == pytest.approx(np.exp(np.mean(nll_f32)), rel=1e-5)
    assert k["ppl"]["value"] == pytest.approx(np.exp(np.mean(nll_int8)), rel=1e-5)
    # The uint16 base moves each log-probability by at most one step (~1e-3 nats): the mean KLD
    # by at most ~(e^step - 1) * max|log p - log q| + step; in practice far less.
    assert k["kld"]["value"] == pytest.approx(np.mean(kld), abs=2e-5, rel=1e-2)
    assert k["same_top"]["value"] == pytest.approx(np.mean(same_top))
    print(f"{name}: 14 positions, KLD int8 vs f32 {k['kld']['value']:.6f} (NumPy {np.mean(kld):.6f})")


@pytest.mark.parametrize("name", MODELS)
def test_int8_decode_activations_kld(binary, tmp_path, name):
    model = model_path(name)
    base = tmp_path / "f32.kld"  # ~1 GB for Gemma's 262,144-token vocabulary; deleted below
    # Three chunks (765 scored positions): the bounds below are sanity bounds, and the full
    # 4080-position measurement (docs/performance.md) took 5 of CI's minutes.
    run = ["-m", model, "-c", "512", "--chunks", "3", "--decode"]
    try:
        start = time.monotonic()
        f32 = perplexity(binary, *run, "-f", TEXT, "--activations", "f32", "--kl-divergence-base", base)
        int8 = perplexity(binary, *run, "--activations", "int8", "--kl-divergence", "--kl-divergence-base", base)
        wall = time.monotonic() - start
    finally:
        base.unlink(missing_ok=True)
    assert f32["scored"] == 3 * 255 and int8["scored"] == 3 * 255
    k = int8["kl_divergence"]
    q = k["kld_quantiles"]
    print(f"{name}: int8 vs f32 decode activations over {k['count']} positions: mean KLD {k['kld']['value']:.6f} "
          f"± {k['kld']['error']:.6f}, median {q['median']:.6f}, p99 {q['p99']:.6f}, max {q['max']:.6f}, "
          f"same top {100 * k['same_top']['value']:.2f}%, PPL base {k['ppl_base']['value']:.4f} "
          f"Q {k['ppl']['value']:.4f}, ln ratio {k['ln_ppl_ratio']['value']:.5f} ± {k['ln_ppl_ratio']['error']:.5f}, "
          f"RMS dp {100 * k['rms_p_diff']['value']:.3f}%; f32 run {f32['seconds']:.1f} s "
          f"({f32['tokens_per_second']:.0f} tok/s), int8 run {int8['seconds']:.1f} s "
          f"({int8['tokens_per_second']:.0f} tok/s); {wall:.1f} s in all")
    assert k["ppl_base"]["value"] == pytest.approx(f32["ppl"], rel=1e-5)
    # Measured (docs/performance.md): 0.0030 (SmolLM2 Q4_1) and 0.0022 (Gemma 3 Q4_K_M). The
    # bound is sane, not the 0.002 goal (missed): int8 activations must change the decode rows
    # (far above the base file's own rounding, 1e-8 here) and keep them close.
    assert 1e-4 < k["kld"]["value"] < 0.01
    assert q["p99"] < 0.05
    assert k["same_top"]["value"] > 0.9
    assert abs(k["ln_ppl_ratio"]["value"]) < 0.02


@pytest.mark.parametrize("name", MODELS)
def test_prefill_rows_use_int8_activations_closely(binary, tmp_path, name):
    # Prefill rows run the int8 GEMM (each row as the int8 decode computes it) where a format has
    # one: Q4_1 and Q4_K up to 64 rows per step, so the context half of a 128-token chunk does.
    model = model_path(name)
    base = tmp_path / "prefill.kld"
    run = ["-m", model, "-c", "128", "--chunks", "2"]
    try:
        perplexity(binary, *run, "-f", TEXT, "--activations", "f32", "--kl-divergence-base", base)
        int8 = perplexity(binary, *run, "--activations", "int8", "--kl-divergence", "--kl-divergence-base", base)
    finally:
        base.unlink(missing_ok=True)
    k = int8["kl_divergence"]
    # The activation rounding shows (far above the base file's own, 1e-8) and stays small.
    assert 1e-5 < k["kld"]["value"] < 0.01
    assert k["same_top"]["value"] > 0.9
