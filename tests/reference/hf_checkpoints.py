"""Random-weight Hugging Face checkpoints (config.json + safetensors written by the `safetensors`
package) of every architecture libsitsrt loads, and a NumPy reference forward over the exact
stored weights (numpy_forward.Model fed from the checkpoint instead of a GGUF file).

HF conventions the reference follows, independent of the C++ loader: weights are [out, in];
q/k rotate halves (neox); Gemma 3 norms multiply by (1 + w); Gemma's attention scale is
query_pre_attn_scalar ** -0.5 (the tests set it to head_dim, which numpy_forward assumes).
"""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import safetensors

from numpy_forward import Model

SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, vocab_size=300, max_position_embeddings=256)

# variant -> (HF architecture, extra config keys)
VARIANTS = {
    "llama": ("LlamaForCausalLM", {"rms_norm_eps": 1e-5}),
    "llama-llama3-rope": ("LlamaForCausalLM", {"rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}, "rope_theta": 500000.0}),
    "mistral": ("MistralForCausalLM", {"sliding_window": 8}),
    "qwen2-yarn": ("Qwen2ForCausalLM", {"rope_theta": 1000.0, "tie_word_embeddings": True, "rope_scaling": {
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}),
    "qwen3": ("Qwen3ForCausalLM", {"head_dim": 32}),
    "gemma3": ("Gemma3ForCausalLM", {"head_dim": 32, "num_hidden_layers": 7, "sliding_window": 8,
                                     "sliding_window_pattern": 6, "query_pre_attn_scalar": 32,
                                     "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                                     "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                                     "final_logit_softcapping": 10.0}),
    "gemma3-multimodal": ("Gemma3ForConditionalGeneration", {"head_dim": 32, "num_hidden_layers": 7,
                                                             "sliding_window": 8, "query_pre_attn_scalar": 32,
                                                             "layer_types": None}),
}


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even)."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _stored(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(buffer to write, its float64 value, safetensors dtype name)."""
    if dtype == "f32":
        b = x.astype(np.float32)
        return b, b.astype(np.float64), "float32"
    if dtype == "f16":
        b = x.astype(np.float16)
        return b, b.astype(np.float64), "float16"
    b = _round_bf16(x)
    return b, (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64), "bfloat16"


def config_for(variant: str, dtype: str, shape: dict | None = None) -> dict:
    hf_arch, extra = VARIANTS[variant]
    text = dict(SHAPE, **(shape or {}))
    text.update({k: v for k, v in extra.items() if v is not None})
    torch_dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype]
    if hf_arch == "Gemma3ForConditionalGeneration":
        text["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                               for i in range(text["num_hidden_layers"])]
        text["model_type"] = "gemma3_text"
        return {"architectures": [hf_arch], "model_type": "gemma3", "text_config": text,
                "vision_config": {"hidden_size": 16}, "torch_dtype": torch_dtype}
    return {"architectures": [hf_arch], "torch_dtype": torch_dtype, **text}


def write_checkpoint(directory: pathlib.Path, variant: str, dtype: str, seed: int = 7, shards: int = 1,
                     shape: dict | None = None, quantizer=None) -> dict:
    """Writes config.json and the weights; returns {gguf name: float64 array as the reference uses it}.

    quantizer: None, or an object with `config` (the quantization_config) and `quantize(name, w)`
    -> ({suffix: (buffer, safetensors dtype)}, float64 dequantized weight), applied to the seven
    linear layers of every block (the other tensors are stored as `dtype`)."""
    hf_arch, _ = VARIANTS[variant]
    config = config_for(variant, dtype, shape)
    if quantizer is not None:
        config["quantization_config"] = quantizer.config
    c = config.get("text_config", config)
    gemma = hf_arch.startswith("Gemma3")
    qwen2, qk_norm = hf_arch == "Qwen2ForCausalLM", hf_arch in ("Qwen3ForCausalLM",) or gemma
    d, ff, vocab, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    hd = c.get("head_dim", d // c["num_attention_heads"])
    qw, kvw = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    tied = c.get("tie_word_embeddings", config.get("tie_word_embeddings", gemma))
    prefix = "model.language_model." if hf_arch == "Gemma3ForConditionalGeneration" else "model."
    rng = np.random.default_rng(seed)

    def matrix(rows, cols):
        return rng.uniform(-1, 1, (rows, cols)) * math.sqrt(3.0 / cols)

    def norm(n):
        return rng.uniform(-0.2, 0.2, n) if gemma else 1.0 + rng.uniform(-0.2, 0.2, n)

    weights = {prefix + "embed_tokens.weight": ("token_embd.weight", rng.uniform(-1, 1, (vocab, d))),
               prefix + "norm.weight": ("output_norm.weight", norm(d))}
    if not tied:
        weights["lm_head.weight"] = ("output.weight", matrix(vocab, d))
    for l in range(layers):
        p, g = f"{prefix}layers.{l}.", f"blk.{l}."
        layer = {"self_attn.q_proj.weight": ("attn_q.weight", matrix(qw, d)),
                 "self_attn.k_proj.weight": ("attn_k.weight", matrix(kvw, d)),
                 "self_attn.v_proj.weight": ("attn_v.weight", matrix(kvw, d)),
                 "self_attn.o_proj.weight": ("attn_output.weight", matrix(d, qw)),
                 "mlp.gate_proj.weight": ("ffn_gate.weight", matrix(ff, d)),
                 "mlp.up_proj.weight": ("ffn_up.weight", matrix(ff, d)),
                 "mlp.down_proj.weight": ("ffn_down.weight", matrix(d, ff)),
                 "input_layernorm.weight": ("attn_norm.weight", norm(d))}
        if gemma:
            layer["post_attention_layernorm.weight"] = ("post_attention_norm.weight", norm(d))
            layer["pre_feedforward_layernorm.weight"] = ("ffn_norm.weight", norm(d))
            layer["post_feedforward_layernorm.weight"] = ("post_ffw_norm.weight", norm(d))
        else:
            layer["post_attention_layernorm.weight"] = ("ffn_norm.weight", norm(d))
        if qwen2:
            for n, w in (("q", qw), ("k", kvw), ("v", kvw)):
                layer[f"self_attn.{n}_proj.bias"] = (f"attn_{n}.bias", rng.uniform(-0.5, 0.5, w))
        if qk_norm:
            layer["self_attn.q_norm.weight"] = ("attn_q_norm.weight", norm(hd))
            layer["self_attn.k_norm.weight"] = ("attn_k_norm.weight", norm(hd))
        weights.update({p + k: (g + n, w) for k, (n, w) in layer.items()})
    if gemma and hf_arch == "Gemma3ForConditionalGeneration":  # not part of the text model
        weights["model.vision_tower.patch.weight"] = (None, rng.uniform(-1, 1, (4, 4)))

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    reference, buffers, specs = {}, [], {}
    for hf_name, (gguf_name, value) in weights.items():
        if quantizer is not None and hf_name.startswith(prefix + "layers.") and hf_name.endswith("_proj.weight"):
            parts, stored = quantizer.quantize(hf_name, value)
            parts = {hf_name[: -len("weight")] + suffix: part for suffix, part in parts.items()}
        else:
            buf, stored, dt = _stored(value, dtype)
            parts = {hf_name: (buf, dt)}
        for name, (buf, dt) in parts.items():
            buf = np.ascontiguousarray(buf)
            buffers.append(buf)
            specs[name] = safetensors.TensorSpec(dtype=dt, shape=buf.shape, data_ptr=buf.ctypes.data,
                                                 data_len=buf.nbytes)
        if gguf_name is not None:
            reference[gguf_name] = stored + 1.0 if gemma and gguf_name.endswith("norm.weight") else stored
    names = sorted(specs)
    if shards == 1:
        safetensors.serialize_file(specs, str(directory / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            safetensors.serialize_file({n: specs[n] for n in part}, str(directory / file), metadata={"format": "pt"})
            weight_map.update({n: file for n in part})
        (directory / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": sum(b.nbytes for b in buffers)}, "weight_map": weight_map}))
    return reference


# Quantized checkpoints need input widths that are whole groups of 128.
QUANT_SHAPE = dict(hidden_size=128, intermediate_size=256)

E4M3 = np.array([(-1.0 if c & 0x80 else 1.0) * (((c & 7) / 8.0) * 2.0 ** -6 if (c >> 3) & 15 == 0 else
                                                (1 + (c & 7) / 8.0) * 2.0 ** (((c >> 3) & 15) - 7))
                 for c in range(256)])
E4M3[[0x7F, 0xFF]] = np.nan


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """Nearest finite E4M3 code of each value (saturating at +-448)."""
    finite = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
    values = E4M3[finite]
    order = np.argsort(values)
    values, finite = values[order], finite[order]
    i = np.clip(np.searchsorted(values, x), 1, len(values) - 1)
    pick = np.where(np.abs(values[i - 1] - x) <= np.abs(values[i] - x), i - 1, i)
    return finite[pick]


def _fp16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float16)


class Fp8:
    """FP8 E4M3 weights (quant_method fp8): `weight` F8_E4M3 [out, in] with a per-tensor or
    per-channel `weight_scale` (w = e4m3 * scale), or DeepSeek-V3 style 128x128 blocks with
    `weight_scale_inv` [ceil(out/128), ceil(in/128)] (w = e4m3 * scale_inv)."""

    def __init__(self, scales: str):
        self.scales = scales
        self.config = {"quant_method": "fp8", "activation_scheme": "dynamic"}
        if scales == "block":
            self.config["weight_block_size"] = [128, 128]

    def quantize(self, name: str, w: np.ndarray):
        rows, cols = w.shape
        if self.scales == "tensor":
            scale = np.float32(np.abs(w).max() / 448)
            codes = e4m3_encode(w / np.float64(scale))
            return ({"weight": (codes, "float8_e4m3fn"), "weight_scale": (np.array(scale), "float32")},
                    E4M3[codes] * np.float64(scale))
        if self.scales == "channel":
            scale = (np.abs(w).max(axis=1, keepdims=True) / 448).astype(np.float32)  # [out, 1]
            codes = e4m3_encode(w / scale.astype(np.float64))
            return ({"weight": (codes, "float8_e4m3fn"), "weight_scale": (scale, "float32")},
                    E4M3[codes] * scale.astype(np.float64))
        br = bc = 128
        inv = np.zeros(((rows + br - 1) // br, (cols + bc - 1) // bc), dtype=np.float32)
        for i in range(inv.shape[0]):
            for j in range(inv.shape[1]):
                inv[i, j] = np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max() / 448
        full = np.repeat(np.repeat(inv.astype(np.float64), br, axis=0), bc, axis=1)[:rows, :cols]
        codes = e4m3_encode(w / full)
        return {"weight": (codes, "float8_e4m3fn"), "weight_scale_inv": (inv, "float32")}, E4M3[codes] * full


def _int4_groups(w: np.ndarray, group: int, group_of_column: np.ndarray, min_zero: int, sym: bool = False):
    """4-bit quantization per (output, group), min-max asymmetric or (sym) GPTQ's symmetric rule
    (scale = 2 max|w| / 15, zero 8): levels [out, in], zeros and fp16 scales [groups, out], and
    the dequantized weight scale * (level - zero)."""
    rows, cols = w.shape
    groups = int(group_of_column.max()) + 1
    scales = np.zeros((groups, rows), dtype=np.float16)
    zeros = np.zeros((groups, rows), dtype=np.int64)
    for g in range(groups):
        block = w[:, group_of_column == g]
        if sym:
            scales[g] = _fp16(2 * np.abs(block).max(axis=1) / 15)
            zeros[g] = 8
            continue
        lo, hi = np.minimum(block.min(axis=1), 0), np.maximum(block.max(axis=1), 0)
        scales[g] = _fp16((hi - lo) / 15)
        zeros[g] = np.clip(np.round(-lo / scales[g].astype(np.float64)), min_zero, 15)
    s = scales[group_of_column].T.astype(np.float64)  # [out, in]
    z = zeros[group_of_column].T
    levels = np.clip(np.round(w / s) + z, 0, 15).astype(np.int64)
    return levels, zeros, scales, s * (levels - z)


def _pack_nibbles(values: np.ndarray, order=range(8)) -> np.ndarray:
    """[n, 8m] values 0..15 -> int32 [n, m]: nibble k of word j = values[:, 8j + order[k]]."""
    out = np.zeros((values.shape[0], values.shape[1] // 8), dtype=np.uint32)
    for k, o in enumerate(order):
        out |= values[:, o::8].astype(np.uint32) << np.uint32(4 * k)
    return out.view(np.int32)


class Awq:
    """AutoAWQ GEMM: qweight int32 [in, out/8] with the output features of a word in the order
    0 2 4 6 1 3 5 7, qzeros int32 [groups, out/8] alike, scales f16 [groups, out]."""

    order = (0, 2, 4, 6, 1, 3, 5, 7)

    def __init__(self, group_size: int = 128):
        self.config = {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True,
                       "version": "gemm"}
        self.group = group_size

    def quantize(self, name: str, w: np.ndarray):
        cols = w.shape[1]
        levels, zeros, scales, value = _int4_groups(w, self.group, np.arange(cols) // self.group, 0)
        return ({"qweight": (_pack_nibbles(levels.T, self.order), "int32"),
                 "qzeros": (_pack_nibbles(zeros, self.order), "int32"), "scales": (scales, "float16")}, value)


class Gptq:
    """AutoGPTQ: qweight int32 [in/8, out] (nibble k of word i: input 8i + k), qzeros int32
    [groups, out/8] holding zero - 1 (checkpoint_format gptq) or the zero (gptq_v2), scales f16
    [groups, out], g_idx int32 [in]. act_order: None (g_idx = c // 128), "blocks" (desc_act with
    whole 128-column blocks taking their groups in reverse order: non-trivial wherever a layer has
    two or more blocks) or "columns" (a random column-level act-order permutation)."""

    def __init__(self, act_order: str | None = None, seed: int = 3, sym: bool = False, v2: bool = False):
        self.config = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": act_order is not None,
                       "sym": sym, "checkpoint_format": "gptq_v2" if v2 else "gptq"}
        self.act_order, self.sym, self.v2 = act_order, sym, v2
        self.rng = np.random.default_rng(seed)

    def quantize(self, name: str, w: np.ndarray):
        cols = w.shape[1]
        if self.act_order == "blocks":
            g_idx = cols // 128 - 1 - np.arange(cols) // 128  # groups in reverse block order
        elif self.act_order == "columns":
            g_idx = self.rng.permutation(cols) // 128
        else:
            g_idx = np.arange(cols) // 128
        # v1 cannot store a zero of 0 (zero - 1 = -1 spills into the other nibbles)
        levels, zeros, scales, value = _int4_groups(w, 128, g_idx, 0 if self.v2 else 1, self.sym)
        return ({"qweight": (_pack_gptq_weight(levels), "int32"),
                 "qzeros": (_pack_nibbles(zeros if self.v2 else zeros - 1), "int32"), "scales": (scales, "float16"),
                 "g_idx": (g_idx.astype(np.int32), "int32")}, value)


def _pack_gptq_weight(levels: np.ndarray) -> np.ndarray:
    """levels [out, in] -> int32 [in/8, out]: nibble k of word (i, r) = levels[r, 8i + k]."""
    return np.ascontiguousarray(_pack_nibbles(levels).T)


class Reference(Model):
    """numpy_forward.Model over HF weights and config (no GGUF file)."""

    def __init__(self, config: dict, weights: dict):
        c = config.get("text_config", config)
        self.arch = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                     "Qwen3ForCausalLM": "qwen3"}.get(config["architectures"][0], "gemma3")
        self.gemma = self.arch == "gemma3"
        self.dim, self.layers = c["hidden_size"], c["num_hidden_layers"]
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.layer_heads, self.layer_kv_heads = [self.heads] * self.layers, [self.kv_heads] * self.layers
        self.head_dim = c.get("head_dim", self.dim // self.heads)
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.base = c.get("rope_theta", 1000000.0 if self.gemma else 10000.0)
        self.window = c.get("sliding_window", 0) or 0
        period = c.get("sliding_window_pattern", 6) if self.gemma else 0  # Gemma 3: 5 local, 1 global
        self.windowed_flags = [period == 0 or (layer + 1) % period != 0 for layer in range(self.layers)]
        self.softcap = c.get("final_logit_softcapping", 0.0) or 0.0
        self.neox = True  # HF checkpoints rotate halves
        self.local_base = c.get("rope_local_base_freq", 10000.0) if self.gemma else self.base
        scaling = c.get("rope_scaling") or {}
        self.scaling = scaling.get("rope_type", scaling.get("type", "none"))
        self.factor = scaling.get("factor", 1.0)
        self.original_ctx = scaling.get("original_max_position_embeddings", c["max_position_embeddings"])
        self.rope_divisors = None
        if self.scaling == "llama3":  # Llama 3.1's per-frequency divisors, from its reference code
            inv = self.base ** (-np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim)
            wavelen = 2 * math.pi / inv
            lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
            smooth = np.clip((self.original_ctx / wavelen - lo) / (hi - lo), 0, 1)
            self.rope_divisors = 1.0 / ((1 - smooth) / self.factor + smooth)
            self.scaling = "none"
        self.tensors = weights
        self.cache = weights

    def weight(self, name: str) -> np.ndarray:
        return self.tensors[name]
