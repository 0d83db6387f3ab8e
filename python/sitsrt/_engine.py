"""The Python face of sitsrt._sitsrt.Engine: keyword arguments, validation, asyncio."""

from __future__ import annotations

import json
import numbers
import os
from typing import Any, Iterable, Sequence

from . import _sitsrt
from ._request import Request

_UINT64_MAX = 2**64 - 1


def _int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ValueError(f"{name}: {value} is outside {bounds}")
    return value


def _float(name: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    value = float(value)
    if not lo <= value <= hi:  # also rejects NaN
        raise ValueError(f"{name}: {value} is outside [{lo}, {hi}]")
    return value


def _bool(name: str, value: Any) -> bool:
    """A real bool (numpy's included): 'no', 0 or None are not silently truthy or falsy."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")


def _text(name: str, value: Any) -> str:
    """A str that is valid Unicode (a lone surrogate cannot become UTF-8)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name}: not valid Unicode text ({e.reason} at index {e.start})") from None
    return value


def _prompt(prompt: Any) -> str | list[int]:
    if isinstance(prompt, str):
        return _text("prompt", prompt)
    if isinstance(prompt, (bytes, bytearray)):
        raise TypeError("prompt: expected str or a sequence of token ids, got bytes (decode it first)")
    if isinstance(prompt, (dict, set, frozenset)) or hasattr(prompt, "keys"):
        raise TypeError(f"prompt: expected str or a sequence of token ids, got {type(prompt).__name__}")
    if isinstance(prompt, Iterable):
        tokens = [_int("prompt token", t, 0, 2**31 - 1) for t in prompt]
        if not tokens:
            raise ValueError("prompt: the token list is empty")
        return tokens
    raise TypeError(f"prompt: expected str or a sequence of token ids, got {type(prompt).__name__}")


def _chat_prompt(messages: Any, add_generation_prompt: Any = True, tools: Any = None,
                 chat_template_kwargs: Any = None) -> _sitsrt.ChatPrompt:
    """OpenAI-style messages ([{"role": ..., "content": ...}, ...]) -> the C++ chat prompt."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise TypeError("messages: expected a list of {'role': ..., 'content': ...} dicts")
    converted = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TypeError(f"messages[{i}]: expected a dict, got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}]: 'role' must be a non-empty str")
        _text(f"messages[{i}].role", role)
        content = m.get("content", "")
        if isinstance(content, str):
            _text(f"messages[{i}].content", content)
        extra = {k: v for k, v in m.items() if k not in ("role", "content")}
        if content is None:
            content = ""
        if not isinstance(content, str):  # e.g. a list of content parts: passed through to the template
            extra["content"] = content
            content = ""
        try:
            extra_json = json.dumps(extra, ensure_ascii=False) if extra else ""
        except (TypeError, ValueError) as e:
            raise TypeError(f"messages[{i}]: fields must be JSON-serialisable ({e})") from None
        converted.append((role, content, extra_json))
    if tools is not None and not isinstance(tools, (list, tuple)):
        raise TypeError("tools: expected a list of tool definitions")
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise TypeError("chat_template_kwargs: expected a dict of template variables")
    return _sitsrt.ChatPrompt(
        converted, _bool("add_generation_prompt", add_generation_prompt),
        tools_json="" if tools is None else json.dumps(list(tools), ensure_ascii=False),
        extra_context_json="" if not chat_template_kwargs else json.dumps(chat_template_kwargs, ensure_ascii=False))


def _chat_template_source(template: Any) -> str:
    if template is None:
        return ""
    if not isinstance(template, str) or not template:
        raise TypeError("chat_template: expected the Jinja source as a non-empty str")
    return _text("chat_template", template)


def _key(key: Any) -> bytes:
    if key is None:
        return b""
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError(f"audit_key: expected str or bytes, got {type(key).__name__}")


def _devices(devices: Any) -> str:
    """Validates `devices` and returns the one device the engine runs on ("cpu", "cpu:0", ...)."""
    if devices is None:
        return "cpu"
    names = [devices] if isinstance(devices, str) else devices
    if not isinstance(names, (list, tuple)) or not all(isinstance(d, str) for d in names):
        raise TypeError("devices: expected a str or a list of str")
    backends = [b[0] for b in _sitsrt.available_backends()]
    if len(names) != 1 or names[0].split(":", 1)[0] not in backends:
        raise ValueError(f"devices: {devices!r} is not available; this build runs on one device of: "
                         f"{', '.join(backends)} (multi-device plans come with the partitioner)")
    return names[0]


def _sinks(audit: Any, key: Any, append: bool = False) -> list:
    """None, a path, a sink object, or a list of those -> C++ sinks (append: continue existing logs)."""
    if audit is None:
        return []
    specs = audit if isinstance(audit, (list, tuple)) else [audit]
    return [_sitsrt.make_sink(s, _key(key), append) for s in specs]


_WEIGHT_FORMATS = ("as-stored", "f16", "bf16", "q8", "q4", "fp8", "q4g128", "fp8-all", "fp8-channel",
                   "fp8-block")


class Engine:
    """A loaded model. Immutable and thread-safe: share one engine between threads.

    Args:
        model: path to a GGUF file or a Hugging Face model directory.
        threads: CPU threads for the model (None: all hardware threads).
        ctx: context window in tokens (None: min(training context, 4096)).
        kv_dtype: KV cache element type: "f32", "f16", "int8" (f16 scale per position and head) or
            "int4" (16 levels, 8-bit scale per 32 values); quantized K/V are stored Hadamard-rotated.
        k_dtype, v_dtype: the keys' and the values' element types apart (None: kv_dtype).
        kv_hadamard: rotate int8/int4 K and V per head before quantizing (lower error; default).
        kv_centering: store int8/int4 K minus the per-layer mean key and divided by channel
            scales, both measured at load (lower error; default; exact for attention).
        kv_recent_window: int8/int4 K and V keep f16 copies of each request's latest positions,
            which queries read instead of the quantized rows (lower error; 0: off).
        max_num_seqs: requests in the scheduler's running batch.
        max_num_batched_tokens: tokens per batched step, decode rows plus prompt chunks (None:
            max_batch_tokens).
        kv_block_size: positions per KV cache block.
        kv_pool_tokens: positions the KV block pool holds over all requests (None: 2 x ctx).
        preemption: when KV blocks run out, "recompute" a preempted request's cache or "swap" its
            blocks to host memory; either way it resumes with identical tokens.
        prefix_caching: share full prompt blocks between requests with the same prefix.
        tenant_max_seqs, tenant_max_kv_blocks: per-tenant quotas (0: none); the tenant is the
            request's `tenant=` (its audit metadata).
        reject_over_quota: a request over its tenant's quota fails (sitsrt.RejectedError) instead
            of waiting.
        max_batch_tokens: prompt tokens per forward pass.
        cpu_isa: "auto", "amx", "avx512vnni", "avx512", "avx2" or "generic" (clamped to the CPU;
            "avx512vnni" on a CPU with AMX keeps prefill in float instead of bf16 tiles).
        memory_budget_bytes: limit for weights + KV caches + activations (0: unlimited); too small
            for the weights and one request: refused at load; full: requests wait for a session.
        weights: matmul weight format: "as-stored" (read in place), or converted at load to
            "f16", "bf16", "q8" (Q8_0), "q4" (Q4_0), "fp8" (E4M3; the output head stays 16-bit,
            bf16 for an f32 head: info()["weights_output_head"]), "fp8-channel" (as fp8, one scale
            per output row), "fp8-block" (as fp8, one scale per 128 x 128 block), "fp8-all" (E4M3,
            the head too) or "q4g128" (INT4 g128); the cost is in info() (weights_convert_seconds,
            weights_converted_bytes).
        mmap_weights: True reads the weights in place from the mmapped file (instant load, pages
            shared between processes); False (default) copies them into huge-page memory, Q8_0/Q4_0
            repacked for the decode kernels (faster decode; info()["weights_copy_seconds"]).
        deterministic: results depend only on model, prompt, sampling and the recorded engine
            digest, never on the thread count (see docs/audit-log.md).
        audit: sinks for every request: a path (a new hash-chained JSONL log), an object with
            on_request_begin/on_token/on_request_end methods, or a list of those.
        audit_key: HMAC key (str or bytes) for path sinks.
        audit_append: continue existing path logs (their last file is verified first; IOError if it
            does not verify) instead of refusing them.
        activations: decode matmuls of quantized weights (one row at a time: generation, and the
            output head of a prefill that returns one row) with "int8" activations (default:
            faster, adds the int8 rounding of the input row) or "f32". With "int8", generation's
            logprobs and logits(all_positions=False) differ slightly from logits() rows, which
            prefill in float; with "f32" (and kv_dtype "f32") all three agree to float rounding
            (docs/quantization.md).
        chat_template: Jinja source of a chat template to use instead of the model's own (chat(),
            apply_chat_template()); a construct this version does not support fails the load.
        devices: where the model runs: None (the default backend), a device such as "cpu" or
            "cpu:0", or a list of one (multi-device plans come with the partitioner); the backends
            this build has: sitsrt.available_backends(). See plan().
        device_graphs: on a GPU device, replay decode steps as captured CUDA graphs (default; the
            same results); False launches every kernel from the host. queue_stats() counts them.

    Raises:
        sitsrt.InvalidModelError, sitsrt.IOError, ...: the model cannot be loaded.
        TypeError, ValueError: a bad argument (before anything is loaded).
    """

    def __init__(self, model: str | os.PathLike, *, threads: int | None = None, ctx: int | None = None,
                 kv_dtype: str = "f16", max_batch_tokens: int = 256, cpu_isa: str = "auto",
                 memory_budget_bytes: int = 0, deterministic: bool = False, audit: Any = None,
                 audit_key: str | bytes | None = None, audit_append: bool = False, weights: str = "as-stored",
                 mmap_weights: bool = False, devices: str | Sequence[str] | None = None,
                 chat_template: str | None = None, activations: str = "int8", k_dtype: str | None = None,
                 v_dtype: str | None = None, kv_hadamard: bool = True, kv_centering: bool = True,
                 kv_recent_window: int = 32, max_num_seqs: int = 16,
                 max_num_batched_tokens: int | None = None, kv_block_size: int = 16,
                 kv_pool_tokens: int | None = None, preemption: str = "recompute", prefix_caching: bool = True,
                 tenant_max_seqs: int = 0, tenant_max_kv_blocks: int = 0, reject_over_quota: bool = False,
                 device_graphs: bool = True) -> None:
        if not isinstance(model, (str, os.PathLike)):
            raise TypeError(f"model: expected a path, got {type(model).__name__}")
        for name, value in (("kv_dtype", kv_dtype), ("k_dtype", k_dtype), ("v_dtype", v_dtype)):
            if value is None and name != "kv_dtype":
                continue
            if value not in ("f32", "f16", "int8", "int4"):
                raise ValueError(f"{name}: expected 'f32', 'f16', 'int8' or 'int4', got {value!r}")
        if preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption: expected 'recompute' or 'swap', got {preemption!r}")
        serving = {
            "max_num_seqs": _int("max_num_seqs", max_num_seqs, 1, 4096),
            "max_num_batched_tokens": 0 if max_num_batched_tokens is None else _int(
                "max_num_batched_tokens", max_num_batched_tokens, 1, 2**20),
            "kv_block_size": _int("kv_block_size", kv_block_size, 1, 4096),
            "kv_pool_tokens": 0 if kv_pool_tokens is None else _int("kv_pool_tokens", kv_pool_tokens, 1, 2**30),
            "preempt_by_swap": preemption == "swap",
            "prefix_caching": _bool("prefix_caching", prefix_caching),
            "tenant_max_seqs": _int("tenant_max_seqs", tenant_max_seqs, 0, 2**31 - 1),
            "tenant_max_kv_blocks": _int("tenant_max_kv_blocks", tenant_max_kv_blocks, 0, 2**40),
            "reject_over_quota": _bool("reject_over_quota", reject_over_quota),
        }
        if cpu_isa not in ("auto", "amx", "avx512vnni", "avx512", "avx2", "generic"):
            raise ValueError("cpu_isa: expected 'auto', 'amx', 'avx512vnni', 'avx512', 'avx2' or 'generic', "
                             f"got {cpu_isa!r}")
        if activations not in ("int8", "f32"):
            raise ValueError(f"activations: expected 'int8' or 'f32', got {activations!r}")
        if weights not in _WEIGHT_FORMATS:
            raise ValueError(f"weights: expected one of {', '.join(_WEIGHT_FORMATS)}, got {weights!r}")
        device = _devices(devices)
        self.model = os.fspath(model)
        self._native = None
        self._native = _sitsrt.Engine(
            self.model,
            threads=0 if threads is None else _int("threads", threads, 1, 4096),
            ctx=0 if ctx is None else _int("ctx", ctx, 1, 2**31 - 1),
            kv_dtype=kv_dtype,
            max_batch_tokens=_int("max_batch_tokens", max_batch_tokens, 1, 65536),
            cpu_isa=cpu_isa,
            memory_budget_bytes=_int("memory_budget_bytes", memory_budget_bytes, 0, _UINT64_MAX),
            deterministic=_bool("deterministic", deterministic),
            sinks=_sinks(audit, audit_key, _bool("audit_append", audit_append)),
            weights=weights,
            mmap_weights=_bool("mmap_weights", mmap_weights),
            chat_template=_chat_template_source(chat_template),
            int8_activations=activations == "int8",
            device=device,
            k_dtype=k_dtype,
            v_dtype=v_dtype,
            kv_hadamard=_bool("kv_hadamard", kv_hadamard),
            kv_k_centering=_bool("kv_centering", kv_centering),
            kv_recent_window=_int("kv_recent_window", kv_recent_window, 0, 256),
            serving=serving,
            device_graphs=_bool("device_graphs", device_graphs))

    @property
    def _engine(self) -> _sitsrt.Engine:
        if self._native is None:
            raise RuntimeError("sitsrt.Engine: the engine is closed")
        return self._native

    def close(self) -> None:
        """Releases the model and the engine's audit sinks (also a cycle of an engine and a sink
        that refers to it). Requests still running keep what they use until they end; every
        other call afterwards raises RuntimeError. Idempotent."""
        self._native = None

    @property
    def closed(self) -> bool:
        return self._native is None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    def _config(self, max_tokens: int = 256, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                seed: int | None = None, stop: str | Sequence[str] | None = None, logprobs: int = 5,
                add_bos: bool | None = None, stop_at_eos: bool = True, audit: Any = None,
                audit_key: str | bytes | None = None, audit_level: str = "tokens", tenant: str = "",
                user: str = "", priority: int = 0) -> tuple:
        c = _sitsrt.GenerationConfig()
        c.max_new_tokens = _int("max_tokens", max_tokens, 0, 2**31 - 1)
        c.temperature = _float("temperature", temperature, 0.0, 1e6)
        c.top_k = _int("top_k", top_k, 0, 2**31 - 1)
        c.top_p = _float("top_p", top_p, 0.0, 1.0)
        c.min_p = _float("min_p", min_p, 0.0, 1.0)
        c.repeat_penalty = _float("repeat_penalty", repeat_penalty, 0.0, 1e6)
        c.repeat_last_n = _int("repeat_last_n", repeat_last_n, 0, 2**31 - 1)
        c.seed = None if seed is None else _int("seed", seed, 0, _UINT64_MAX)
        if stop is None:
            c.stop = []
        elif isinstance(stop, str):
            c.stop = [_text("stop", stop)]
        else:
            stops = list(stop)
            if not all(isinstance(s, str) and s and _text("stop", s) for s in stops):
                raise TypeError("stop: expected a non-empty str or a list of non-empty str")
            c.stop = stops
        c.top_logprobs = _int("logprobs", logprobs, 0, 64)
        c.add_bos = None if add_bos is None else _bool("add_bos", add_bos)
        c.stop_at_end_of_sequence = _bool("stop_at_eos", stop_at_eos)
        if audit_level not in ("off", "tokens", "topk", "full"):
            raise ValueError(f"audit_level: expected 'off', 'tokens', 'topk' or 'full', got {audit_level!r}")
        c.audit_level = audit_level
        # The tenant id is recorded in the audit records and is the scheduler's quota tenant.
        c.set_metadata(_text("tenant", tenant), _text("user", user), [])
        sinks = _sinks(audit, audit_key)
        for s in sinks:
            c.add_audit_sink(s)
        # Higher first, for admission and against preemption (SubmitOptions::priority).
        return c, sinks, _int("priority", priority, -2**31, 2**31 - 1)

    def _run(self, prompt: Any, options: dict) -> _sitsrt.Result:
        # Through a submitted request, so the wait is Python's: Ctrl-C interrupts it (and cancels
        # the generation), and interpreter exit never meets a thread blocked in C++.
        config, sinks, priority = self._config(**options)
        result = Request(_sitsrt.Request(self._engine, prompt, config, priority)).result()
        for s in sinks:  # per-request logs are complete on return
            s.flush()
        return result

    def _submit(self, prompt: Any, options: dict) -> Request:
        config, _, priority = self._config(**options)
        return Request(_sitsrt.Request(self._engine, prompt, config, priority))

    def generate(self, prompt: str | Sequence[int], **options: Any) -> _sitsrt.Result:
        """Generates a continuation and waits for it (without the GIL). See the .pyi stub."""
        return self._run(_prompt(prompt), options)

    def submit(self, prompt: str | Sequence[int], **options: Any) -> Request:
        """Starts a generation on its own thread; returns a Request (iterate it, result(), cancel())."""
        return self._submit(_prompt(prompt), options)

    def stream(self, prompt: str | Sequence[int], **options: Any) -> Request:
        """Iterator (also `async for`) of TokenEvent in generation order (a submitted Request)."""
        return self.submit(prompt, **options)

    async def agenerate(self, prompt: str | Sequence[int], **options: Any) -> _sitsrt.Result:
        """asyncio: awaits a submitted request (no thread held); cancelling the task cancels it."""
        return await self.submit(prompt, **options).wait()

    # -- chat ---------------------------------------------------------------------------------

    def chat(self, messages: Sequence[dict], *, add_generation_prompt: bool = True, tools: Sequence[dict] | None = None,
             chat_template_kwargs: dict | None = None, **options: Any) -> _sitsrt.Result:
        """Renders `messages` with the model's chat template and generates the next turn, ending at
        the template's end-of-turn token. Options as for generate(). See the .pyi stub."""
        return self._run(_chat_prompt(messages, add_generation_prompt, tools, chat_template_kwargs), options)

    def submit_chat(self, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                    tools: Sequence[dict] | None = None, chat_template_kwargs: dict | None = None,
                    **options: Any) -> Request:
        """Starts chat(messages, ...) on its own thread; returns a Request (iterate it, result(), cancel())."""
        return self._submit(_chat_prompt(messages, add_generation_prompt, tools, chat_template_kwargs), options)

    def chat_stream(self, messages: Sequence[dict], **options: Any) -> Request:
        """Iterator (also `async for`) of TokenEvent for chat(messages, **options)."""
        return self.submit_chat(messages, **options)

    async def achat(self, messages: Sequence[dict], **options: Any) -> _sitsrt.Result:
        """asyncio form of chat(); cancelling the awaiting task cancels the generation."""
        return await self.submit_chat(messages, **options).wait()

    def apply_chat_template(self, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                            tokenize: bool = False, tools: Sequence[dict] | None = None,
                            chat_template_kwargs: dict | None = None) -> str | list[int]:
        """The rendering chat() feeds the model (tokenize=False), or its token ids (tokenize=True,
        special tokens as single ids, BOS as chat() adds it). Hugging Face's conventions."""
        prompt = _chat_prompt(messages, add_generation_prompt, tools, chat_template_kwargs)
        return self._engine.chat_tokens(prompt) if _bool("tokenize", tokenize) else self._engine.apply_chat_template(prompt)

    @property
    def has_chat_template(self) -> bool:
        return self._engine.has_chat_template

    # -- model --------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        _text("text", text)
        return self._engine.tokenize(text, _bool("add_bos", add_bos))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._engine.detokenize([_int("token", t, 0, 2**31 - 1) for t in tokens])

    def token_bytes(self, token: int) -> bytes:
        return self._engine.token_bytes(_int("token", token, 0, 2**31 - 1))

    def logits(self, tokens: str | Sequence[int], *, all_positions: bool = True):
        """numpy.ndarray float32 [positions, vocab] of next-token logits (zero-copy).

        A str is tokenized first (with BOS). all_positions=False returns the last row only,
        shape [1, vocab]. Needs numpy (pip install sitsrt[numpy]).
        """
        try:
            import numpy  # noqa: F401  (the array type lives there)
        except ImportError as e:
            raise ImportError("Engine.logits needs numpy: pip install numpy") from e
        ids = self.tokenize(tokens) if isinstance(tokens, str) else _prompt(tokens)
        return self._engine.logits(ids, _bool("all_positions", all_positions))

    def plan(self) -> dict:
        """Devices, their memory (weights, KV and activations per request, budget) and the layers of
        each pipeline stage, as a dict (what `DevicePlan::to_json` writes)."""
        return json.loads(self._engine.plan_json())

    def queue_stats(self) -> dict:
        """Admission of concurrent requests: requests served, sessions allocated (KV cache +
        activations each), requests that waited because memory_budget_bytes was full and for how
        long in total, and requests in flight now and at most."""
        return self._engine.queue_stats()

    def graph(self) -> dict:
        """The computation graph and activation memory plan (what `sitsrt graph --json` prints)."""
        return json.loads(self._engine.graph_json())

    @property
    def info(self) -> dict:
        """Model and engine metadata: vocabulary, shapes, context, KV type, threads, ISA."""
        return self._engine.info()

    def model_sha256(self) -> str:
        return self._engine.model_sha256()

    @property
    def circuit_breaker_open(self) -> bool:
        return self._engine.circuit_breaker_open

    def reset_circuit_breaker(self) -> None:
        self._engine.reset_circuit_breaker()

    def __repr__(self) -> str:
        return f"sitsrt.Engine({self.model!r})"
