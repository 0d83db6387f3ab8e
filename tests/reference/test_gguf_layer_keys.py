"""GGUF keys that llama.cpp reads as "scalar or per-layer array" (sliding_window_pattern,
head_count, head_count_kv, feed_forward_length), in both forms.

A random F32 model from `sitsrt make-model` is rewritten with the `gguf` package: the same key as
a scalar and as a uniform array must give bit-identical logits; per-layer values that differ
(FFN widths, query head counts; the tensors cut to match) and a sliding-window period other than
Gemma's 6 must match the NumPy reference (numpy_forward.py reads both forms itself). Run:
SITSRT_BIN=build/bin/sitsrt pytest tests/reference
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from numpy_forward import Model
from test_numpy_reference import TOKENS, binary  # noqa: F401  (fixture)

gguf = pytest.importorskip("gguf")
from gguf import GGUFValueType  # noqa: E402

SHAPE = ["--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "96", "--vocab", "300", "--ctx", "256",
         "--seed", "11", "--threads", "1", "--type", "f32"]


def make_model(binary, path, *extra):
    subprocess.run([binary, "make-model", "-o", str(path), *SHAPE, *extra], check=True, capture_output=True)
    return path


def rewrite(src, dst, metadata=None, tensors=None):
    """Copies GGUF `src` to `dst`, replacing metadata keys ({key: (value, type, element type)}; a
    value of None drops the key) and tensors ({name: function(array) -> array}, F32 only)."""
    metadata = metadata or {}
    tensors = tensors or {}
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key in metadata:
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub)
    for key, spec in metadata.items():
        if spec is not None:
            writer.add_key_value(key, *spec)
    for t in reader.tensors:
        data = np.array(t.data)
        if t.name in tensors:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            data = np.ascontiguousarray(tensors[t.name](data))
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def logits(binary, path):
    run = subprocess.run([binary, "logits", "-m", str(path), "--all", "--kv-type", "f32", "--activations", "f32",
                          "--batch", "8", "-t", "2", "--isa", "avx512vnni", "--tokens", ",".join(map(str, TOKENS))],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return np.array(json.loads(run.stdout)["logits"], dtype=np.float64)


def failure(binary, path):
    run = subprocess.run([binary, "graph", "-m", str(path)], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    return run.stderr


def assert_matches_reference(binary, path):
    got = logits(binary, path)
    want = Model(str(path)).logits(TOKENS)
    err = np.abs(got - want).max()
    assert err <= 1e-4 * np.abs(want).max(), f"max |error| {err}"


U32, BOOL, ARRAY = GGUFValueType.UINT32, GGUFValueType.BOOL, GGUFValueType.ARRAY


def test_sliding_window_pattern_scalar_and_array(binary, tmp_path):
    base = make_model(binary, tmp_path / "gemma.gguf", "--arch", "gemma3", "--layers", "7", "--head-dim", "32",
                      "--sliding-window", "6", "--tied")
    key = "gemma3.attention.sliding_window_pattern"
    want = logits(binary, base)  # no key: Gemma 3's fixed period of 6
    period6 = rewrite(base, tmp_path / "p6.gguf", {key: (6, U32)})
    flags = rewrite(base, tmp_path / "flags.gguf", {key: ([(l + 1) % 6 != 0 for l in range(7)], ARRAY, BOOL)})
    np.testing.assert_array_equal(logits(binary, period6), want)
    np.testing.assert_array_equal(logits(binary, flags), want)
    # Another period changes which layers are global; the reference reads the key too.
    period3 = rewrite(base, tmp_path / "p3.gguf", {key: (3, U32)})
    assert not np.array_equal(logits(binary, period3), want)
    assert_matches_reference(binary, period3)
    assert "sliding_window_pattern" in failure(binary, rewrite(base, tmp_path / "bad.gguf",
                                                                {key: ([True, False], ARRAY, BOOL)}))


def test_head_counts_and_ffn_as_uniform_arrays(binary, tmp_path):
    base = make_model(binary, tmp_path / "llama.gguf", "--layers", "3")
    arrays = rewrite(base, tmp_path / "arrays.gguf", {
        "llama.attention.head_count": ([4] * 3, ARRAY, U32),
        "llama.attention.head_count_kv": ([2] * 3, ARRAY, U32),
        "llama.feed_forward_length": ([96] * 3, ARRAY, U32),
    })
    np.testing.assert_array_equal(logits(binary, arrays), logits(binary, base))


def test_per_layer_ffn_widths_and_head_counts(binary, tmp_path):
    base = make_model(binary, tmp_path / "llama.gguf", "--layers", "3")
    head_dim = 16
    widths, heads = [96, 40, 72], [4, 2, 4]
    cut = {}
    for l, (ff, h) in enumerate(zip(widths, heads)):
        # numpy arrays are [out, in] (GGUF dims reversed): gate/up keep ff outputs, down ff inputs;
        # q keeps h heads of outputs, attn_output h heads of inputs.
        cut[f"blk.{l}.ffn_gate.weight"] = lambda a, ff=ff: a[:ff, :]
        cut[f"blk.{l}.ffn_up.weight"] = lambda a, ff=ff: a[:ff, :]
        cut[f"blk.{l}.ffn_down.weight"] = lambda a, ff=ff: a[:, :ff]
        cut[f"blk.{l}.attn_q.weight"] = lambda a, h=h: a[:h * head_dim, :]
        cut[f"blk.{l}.attn_output.weight"] = lambda a, h=h: a[:, :h * head_dim]
    varied = rewrite(base, tmp_path / "varied.gguf", {
        "llama.attention.head_count": (heads, ARRAY, U32),
        "llama.feed_forward_length": (widths, ARRAY, U32),
        "llama.attention.key_length": (head_dim, U32),
        "llama.attention.value_length": (head_dim, U32),
    }, cut)
    assert_matches_reference(binary, varied)
    info = subprocess.run([binary, "graph", "-m", str(varied), "--json"], capture_output=True, text=True, check=True)
    assert "blk.1.ffn_gate" in info.stdout


def test_per_layer_key_errors(binary, tmp_path):
    base = make_model(binary, tmp_path / "llama.gguf", "--layers", "3")
    short = rewrite(base, tmp_path / "short.gguf", {"llama.feed_forward_length": ([96, 96], ARRAY, U32)})
    assert "llama.feed_forward_length" in failure(binary, short) and "one per layer (3)" in failure(binary, short)
    kv = rewrite(base, tmp_path / "kv.gguf", {"llama.attention.head_count_kv": ([2, 1, 2], ARRAY, U32)})
    assert "differs between layers" in failure(binary, kv)
    zero = rewrite(base, tmp_path / "zero.gguf", {"llama.attention.head_count": ([4, 0, 4], ARRAY, U32)})
    assert "head_count'[1] = 0" in failure(binary, zero)
    strings = rewrite(base, tmp_path / "strings.gguf",
                      {"llama.feed_forward_length": (["a", "b", "c"], ARRAY, GGUFValueType.STRING)})
    assert "array of string" in failure(binary, strings)
