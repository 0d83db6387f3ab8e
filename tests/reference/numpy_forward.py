"""Independent NumPy forward passes of the architectures libsitsrt supports.

Written from the published model definitions (Llama / Llama 3.1 rope scaling, Mistral's sliding
window, Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm, Gemma 3's scaled embedding,
sandwich norms, GeGLU(tanh) and 5 local : 1 global layers, YaRN as in HF transformers) and the
GGUF layout written by llama.cpp's converter. It reads a GGUF file with the `gguf` package
(weights dequantized by gguf.quants), computes in float64 and shares no code with the C++
engine or its C++ reference.
"""
from __future__ import annotations

import math

import gguf
import numpy as np
from gguf.quants import dequantize


class Model:
    def __init__(self, path: str):
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.meta("general.architecture")
        self.dim = self.hp("embedding_length")
        self.layers = self.hp("block_count")
        # Head counts and the FFN width: a scalar, or one value per layer (llama.cpp's key-or-array).
        self.layer_heads = self.per_layer("attention.head_count")
        self.layer_kv_heads = self.per_layer("attention.head_count_kv") or self.layer_heads
        self.heads, self.kv_heads = self.layer_heads[0], self.layer_kv_heads[0]
        self.head_dim = self.hp("attention.key_length", self.dim // self.heads)
        self.eps = self.hp("attention.layer_norm_rms_epsilon")
        self.base = self.hp("rope.freq_base", 10000.0)
        self.window = self.hp("attention.sliding_window", 0)
        # Which layers are windowed: a bool per layer, or a period (every n-th layer global; 0:
        # none global); Gemma 3 without the key: period 6.
        pattern = self.meta(f"{self.arch}.attention.sliding_window_pattern")
        if isinstance(pattern, list):
            self.windowed_flags = [bool(v) for v in pattern]
        else:
            period = int(pattern) if pattern is not None else (6 if self.arch == "gemma3" else 0)
            self.windowed_flags = [period == 0 or (layer + 1) % period != 0 for layer in range(self.layers)]
        self.softcap = self.hp("final_logit_softcapping", 0.0)
        self.gemma = self.arch == "gemma3"
        self.neox = self.arch != "llama"  # llama.cpp permutes llama q/k for adjacent pairs
        self.local_base = self.hp("rope.freq_base_swa", 10000.0 if self.gemma else self.base)
        self.scaling = self.hp("rope.scaling.type", "none")
        self.factor = self.hp("rope.scaling.factor", 1.0)
        self.original_ctx = self.hp("rope.scaling.original_context_length", 0)
        self.rope_divisors = self.weight("rope_freqs.weight") if "rope_freqs.weight" in self.tensors else None
        self.cache: dict[str, np.ndarray] = {}

    def meta(self, key, default=None):
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()

    def hp(self, key, default=None):
        return self.meta(f"{self.arch}.{key}", default)

    def per_layer(self, key):
        value = self.hp(key)
        if value is None:
            return None
        return [int(v) for v in value] if isinstance(value, list) else [int(value)] * self.layers

    def weight(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        w = dequantize(t.data, t.tensor_type).astype(np.float64)
        return w.reshape([int(d) for d in reversed(t.shape)])  # GGUF dims are innermost-first

    def w(self, name: str) -> np.ndarray:
        if name not in self.cache:
            self.cache[name] = self.weight(name)
        return self.cache[name]

    def has(self, name: str) -> bool:
        return name in self.tensors

    def rms_norm(self, x: np.ndarray, name: str) -> np.ndarray:
        # GGUF Gemma norms already hold 1 + w (the converter adds the 1), so x * w for every arch.
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * self.w(name)

    def windowed(self, layer: int) -> bool:
        return self.window > 0 and self.windowed_flags[layer]

    def inverse_frequencies(self, layer: int) -> tuple[np.ndarray, float]:
        d = self.head_dim
        local = self.gemma and self.windowed(layer)
        base = self.local_base if local else self.base
        inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        if local:
            return inv, 1.0
        if self.rope_divisors is not None:
            inv = inv / self.rope_divisors
        if self.scaling == "linear":
            inv = inv / self.factor
        if self.scaling == "yarn":
            # YaRN (Peng et al.): pairs that turn fast over the original context keep their
            # frequency, slow ones are interpolated, linear ramp over the pair index between.
            def dim_at(turns):
                return d * math.log(self.original_ctx / (turns * 2 * math.pi)) / (2 * math.log(base))
            low = max(math.floor(dim_at(32)), 0)
            high = min(math.ceil(dim_at(1)), d - 1)
            ramp = np.clip((np.arange(d // 2) - low) / max(high - low, 0.001), 0, 1)
            inv = inv / self.factor * ramp + inv * (1 - ramp)
            return inv, 0.1 * math.log(self.factor) + 1.0
        return inv, 1.0

    def rope(self, x: np.ndarray, positions: np.ndarray, layer: int) -> np.ndarray:
        """x: [T, heads, head_dim]."""
        inv, mscale = self.inverse_frequencies(layer)
        angle = positions[:, None] * inv[None, :]  # [T, d/2]
        cos, sin = np.cos(angle)[:, None, :] * mscale, np.sin(angle)[:, None, :] * mscale
        half = self.head_dim // 2
        if self.neox:
            a, b = x[..., :half], x[..., half:]
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * cos - b * sin, a * sin + b * cos
        out = np.empty_like(x)
        if self.neox:
            out[..., :half], out[..., half:] = ra, rb
        else:
            out[..., 0::2], out[..., 1::2] = ra, rb
        return out

    def logits(self, tokens: list[int]) -> np.ndarray:
        """Next-token logits after every token, [T, vocab]."""
        T = len(tokens)
        hd = self.head_dim
        x = self.w("token_embd.weight")[tokens]
        if self.gemma:
            x = x * math.sqrt(self.dim)
        positions = np.arange(T, dtype=np.float64)
        for l in range(self.layers):
            p = f"blk.{l}."
            H, KV = self.layer_heads[l], self.layer_kv_heads[l]
            h = self.rms_norm(x, p + "attn_norm.weight")
            proj = {}
            for name in ("attn_q", "attn_k", "attn_v"):
                y = h @ self.w(p + name + ".weight").T
                if self.has(p + name + ".bias"):
                    y = y + self.w(p + name + ".bias")
                proj[name] = y
            q = proj["attn_q"].reshape(T, H, hd)
            k = proj["attn_k"].reshape(T, KV, hd)
            v = proj["attn_v"].reshape(T, KV, hd)
            if self.has(p + "attn_q_norm.weight"):
                q = self.rms_norm(q, p + "attn_q_norm.weight")
                k = self.rms_norm(k, p + "attn_k_norm.weight")
            q, k = self.rope(q, positions, l), self.rope(k, positions, l)
            k = np.repeat(k, H // KV, axis=1)
            v = np.repeat(v, H // KV, axis=1)
            scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
            i, j = np.arange(T)[:, None], np.arange(T)[None, :]
            allowed = j <= i
            if self.windowed(l):
                allowed &= i - j < self.window
            scores = np.where(allowed[None], scores, -np.inf)
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = np.einsum("hts,shd->thd", probs, v).reshape(T, H * hd)
            o = attn @ self.w(p + "attn_output.weight").T
            if self.gemma:
                o = self.rms_norm(o, p + "post_attention_norm.weight")
            x = x + o
            h = self.rms_norm(x, p + "ffn_norm.weight")
            gate = h @ self.w(p + "ffn_gate.weight").T
            up = h @ self.w(p + "ffn_up.weight").T
            if self.gemma:
                act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
            else:
                act = gate / (1 + np.exp(-gate))
            down = (act * up) @ self.w(p + "ffn_down.weight").T
            if self.gemma:
                down = self.rms_norm(down, p + "post_ffw_norm.weight")
            x = x + down
        x = self.rms_norm(x, "output_norm.weight")
        head = self.w("output.weight") if self.has("output.weight") else self.w("token_embd.weight")
        logits = x @ head.T
        if self.softcap:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return logits
