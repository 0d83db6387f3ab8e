"""Hugging Face directories: `sitsrt logits -m DIR` against the NumPy reference on the stored
weights, for every architecture and F32/F16/BF16 checkpoints (one of them sharded), FP8
(per-tensor, per-channel, 128x128 blocks), AWQ and GPTQ checkpoints against the reference on
their dequantized weights, and `sitsrt convert` to GGUF against the same reference (and against
the `gguf` package's reading of the converted file through numpy_forward.Model).
Run: SITSRT_BIN=build/bin/sitsrt pytest tests/reference
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from hf_checkpoints import QUANT_SHAPE, VARIANTS, Awq, Fp8, Gptq, Reference, config_for, write_checkpoint
from numpy_forward import Model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITSRT = os.environ.get("SITSRT_BIN", str(ROOT / "build" / "bin" / "sitsrt"))
TOKENS = [5, 77, 12, 290, 41, 3, 150, 151, 9, 200, 64, 18, 33, 250, 7, 99, 120, 45, 260, 11, 6, 180, 71, 30]
# --isa avx512vnni: float prefill (the default on AMX CPUs rounds prefill operands to bf16);
# clamped to the CPU like any level.
ENGINE = ["--all", "--kv-type", "f32", "--activations", "f32", "--batch", "8", "-t", "2", "--isa", "avx512vnni"]


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


@pytest.mark.parametrize("weight_type", ["fp8_e4m3", "fp8-channel", "fp8-block"])
def test_convert_fp8(binary, tmp_path, weight_type):
    # FP8 E4M3 with a scale per block of 64, per output row (fp8-channel) or per 128 x 128 block
    # (fp8-block); against the unquantized reference within FP8's error (3 mantissa bits on every
    # matrix, the head included): max |error| / logit scale measured 0.075 (per block) and 0.067 (per
    # row); a wrong scale or layout is order 1
    weights = write_checkpoint(tmp_path / "hf", "qwen3", "bf16")
    want = Reference(config_for("qwen3", "bf16"), weights).logits(TOKENS)
    out = tmp_path / "model.gguf"
    run = subprocess.run([binary, "convert", str(tmp_path / "hf"), "-o", str(out), "--type", weight_type, "--json"],
                         check=True, capture_output=True, text=True)
    assert json.loads(run.stdout)["type"] == weight_type
    check(f"converted qwen3 {weight_type}", logits(binary, out), want, 0.15)


def test_hf_directory_without_tokenizer_refuses_text(binary, tmp_path):
    write_checkpoint(tmp_path / "hf", "llama", "f16")
    run = subprocess.run([binary, "run", "-m", str(tmp_path / "hf"), "-p", "hello", "-n", "2"],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "the model has no tokenizer" in run.stderr


# label -> (quantizer, variant, dtype of the unquantized tensors)
QUANTIZED = {
    "fp8 per-tensor": (lambda: Fp8("tensor"), "llama", "bf16"),
    "fp8 per-channel": (lambda: Fp8("channel"), "qwen3", "bf16"),
    "fp8 128x128 blocks": (lambda: Fp8("block"), "gemma3", "bf16"),
    "awq": (lambda: Awq(), "qwen2-yarn", "f16"),
    "awq llama": (lambda: Awq(), "llama", "f16"),
    "gptq": (lambda: Gptq(), "mistral", "f16"),
    "gptq act-order by whole groups": (lambda: Gptq("blocks"), "llama", "f16"),
    "gptq symmetric": (lambda: Gptq(sym=True), "qwen3", "bf16"),
    "gptq_v2": (lambda: Gptq(v2=True), "gemma3", "f16"),
}


def info_types(binary: str, model: pathlib.Path) -> dict:
    run = subprocess.run([binary, "info", "-m", str(model), "--json"], check=True, capture_output=True, text=True)
    return {t["name"]: t["type"] for t in json.loads(run.stdout)["tensors"]}


@pytest.mark.parametrize("label", list(QUANTIZED))
def test_quantized_hf_directory_logits_match_dequantized_reference(binary, tmp_path, label):
    make, variant, dtype = QUANTIZED[label]
    weights = write_checkpoint(tmp_path / "hf", variant, dtype, shape=QUANT_SHAPE, quantizer=make())
    want = Reference(config_for(variant, dtype, QUANT_SHAPE), weights).logits(TOKENS)
    # Served in the internal format that holds the stored values (no float round trip).
    internal = "fp8_e4m3" if label.startswith("fp8") else "q4_g128"
    types = info_types(binary, tmp_path / "hf")
    assert types["blk.0.attn_q.weight"] == internal and types["blk.1.ffn_down.weight"] == internal
    check(f"hf {label} ({variant})", logits(binary, tmp_path / "hf"), want)


@pytest.mark.parametrize("quantizer,message", [
    (lambda: Gptq("columns"), "act-order g_idx puts input features"),
    (lambda: Awq(group_size=64), "group_size 64 is not supported"),
])
def test_quantized_hf_directory_refusals(binary, tmp_path, quantizer, message):
    write_checkpoint(tmp_path / "hf", "llama", "f16", shape=QUANT_SHAPE, quantizer=quantizer())
    run = subprocess.run([binary, "logits", "-m", str(tmp_path / "hf"), "--tokens", "1,2"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and message in run.stderr, run.stderr


@pytest.mark.parametrize("label", ["gptq", "fp8 128x128 blocks", "awq llama"])
def test_convert_keeps_quantized_linears(binary, tmp_path, label):
    make, variant, dtype = QUANTIZED[label]
    weights = write_checkpoint(tmp_path / "hf", variant, dtype, shape=QUANT_SHAPE, quantizer=make())
    want = Reference(config_for(variant, dtype, QUANT_SHAPE), weights).logits(TOKENS)
    out = tmp_path / "model.gguf"
    run = subprocess.run([binary, "convert", str(tmp_path / "hf"), "-o", str(out), "--json"],
                         check=True, capture_output=True, text=True)
    assert json.loads(run.stdout)["type"] == "as-stored"
    internal = "fp8_e4m3" if label.startswith("fp8") else "q4_g128"
    types = info_types(binary, out)
    assert types["blk.0.attn_q.weight"] == internal and types["blk.1.ffn_up.weight"] == internal
    assert types["token_embd.weight"] == dtype
    check(f"converted {label} ({variant})", logits(binary, out), want)


def test_hf_directory_with_tokenizer_json_generates_text(binary, tmp_path):
    """A checkpoint with a tokenizer.json beside it runs from text: the engine's tokenizer is the
    one `tokenizers` wrote, and `run` generates."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    corpus = ["the cat sat on the mat", "a dog ran far away", "once upon a time there was a tiny model"] * 50
    trainer = trainers.BpeTrainer(vocab_size=300, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    directory = tmp_path / "hf"
    write_checkpoint(directory, "qwen3", "bf16", shape={"vocab_size": tok.get_vocab_size()})
    tok.save(str(directory / "tokenizer.json"))
    text = "the cat ran far"
    ids = json.loads(subprocess.run([binary, "tokenize", str(directory), "--text", text, "--json"], check=True,
                                    capture_output=True, text=True).stdout)["ids"]
    assert ids == tok.encode(text).ids
    run = subprocess.run([binary, "run", "-m", str(directory), "-p", text, "-n", "4", "--ignore-eos", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    tokens = [json.loads(line) for line in run.stdout.splitlines() if '"logprob"' in line]
    assert len(tokens) == 4
