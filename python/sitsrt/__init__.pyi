"""libsitsrt: an auditable LLM inference runtime (type stubs)."""

import os
from typing import AsyncIterator, Any, Iterator, Sequence

import numpy

from . import audit as audit

__version__: str

def available_backends() -> list[tuple[str, str]]:
    """The backends this build can run models on, as (name, summary); the first is the default."""
    ...

class Error(RuntimeError):
    """Base of every error the runtime reports. ``code`` names the kind (e.g. "invalid_model")."""
    code: str

class InvalidArgumentError(Error, ValueError):
    """A parameter or option is out of range."""
class InvalidModelError(Error):
    """A model file is malformed, truncated or inconsistent (the message names file and field)."""
class UnsupportedError(Error):
    """Valid input that this build cannot handle (tensor type, architecture, ISA)."""
class IOError(Error, OSError):
    """The operating system refused a file operation."""
class OutOfMemoryError(Error, MemoryError):
    """An allocation or a memory budget could not be satisfied."""
class RejectedError(Error):
    """The engine refused the request (open circuit breaker, a failing audit sink, another model)."""
class InternalError(Error):
    """A broken invariant inside the library (a bug)."""

class TokenEvent:
    """One generated token. Log-probabilities describe the model's raw distribution."""
    @property
    def index(self) -> int:
        """0 for the first generated token."""
    @property
    def token_id(self) -> int: ...
    @property
    def text(self) -> str:
        """Text released at this step (a character split across tokens arrives whole)."""
    @property
    def logprob(self) -> float:
        """Natural log of the model's probability of this token."""
    @property
    def top(self) -> list[tuple[int, float]]:
        """The k most likely (token id, logprob), most likely first (k = logprobs)."""
    @property
    def entropy(self) -> float:
        """Entropy of the next-token distribution, in nats."""
    @property
    def seconds_since_start(self) -> float: ...

class Timings:
    prompt_tokens: int
    generated_tokens: int
    prefill_seconds: float
    decode_seconds: float
    total_seconds: float
    prefill_tokens_per_second: float
    decode_tokens_per_second: float

class Result:
    """A finished generation."""
    text: str
    """Generated text (prompt excluded, stop string removed)."""
    tokens: list[int]
    """Generated token ids."""
    prompt_tokens: list[int]
    """The prompt as fed to the model (BOS included when added)."""
    finish_reason: str
    """"length", "eos", "stop", "cancelled", "context_full", "circuit_breaker", ..."""
    seed: int
    """The seed actually used (drawn at random when none was given)."""
    request_id: str
    """As in the audit records (empty when not audited)."""
    timings: Timings
    events: list[TokenEvent]
    logprobs: list[float]
    """Per generated token."""
    top_logprobs: list[list[tuple[int, float]]]
    """Per generated token: the top-k alternatives as (id, logprob)."""

class Request:
    """A generation running on its own thread (Engine.submit / stream / submit_chat / chat_stream).

    Iterating yields TokenEvent in order (also `async for`); the end of iteration is the end of
    the generation, or raises its error. Waiting happens in Python's poll() (or asyncio's reader
    callbacks on fileno()), so Ctrl-C interrupts a wait and cancels the request. Safe to use from
    any Python thread; requests still running at interpreter exit are cancelled and waited for.
    """
    def __iter__(self) -> Iterator[TokenEvent]: ...
    def __next__(self) -> TokenEvent: ...
    def __aiter__(self) -> AsyncIterator[TokenEvent]: ...
    async def __anext__(self) -> TokenEvent: ...
    def cancel(self) -> None:
        """Asks the generation to stop after the current token (finish_reason "cancelled")."""
    def done(self) -> bool: ...
    def fileno(self) -> int:
        """A descriptor that becomes readable on each token and at the end (for select/asyncio)."""
    def result(self, timeout: float | None = None) -> Result:
        """Waits for the end; raises the request's error, or TimeoutError after `timeout` s (None or
        inf: no limit; NaN or negative: ValueError)."""
    async def wait(self) -> Result:
        """asyncio: the Result without holding a thread; cancelling the task cancels the request."""

class Engine:
    """A loaded GGUF model; immutable and thread-safe (share one between threads).

    Bad arguments raise TypeError/ValueError before anything is loaded; a bad model file raises
    InvalidModelError (or IOError) naming the file and field.
    """
    model: str
    def __init__(self, model: str | os.PathLike[str], *, threads: int | None = None, ctx: int | None = None,
                 kv_dtype: str = "f16", max_batch_tokens: int = 256, cpu_isa: str = "auto",
                 memory_budget_bytes: int = 0, deterministic: bool = False, audit: Any = None,
                 audit_key: str | bytes | None = None, audit_append: bool = False, weights: str = "as-stored",
                 mmap_weights: bool = False,
                 devices: str | Sequence[str] | None = None, chat_template: str | None = None,
                 activations: str = "int8", k_dtype: str | None = None, v_dtype: str | None = None,
                 kv_hadamard: bool = True, kv_centering: bool = True, max_num_seqs: int = 16,
                 max_num_batched_tokens: int | None = None,
                 kv_block_size: int = 16, kv_pool_tokens: int | None = None, preemption: str = "recompute",
                 prefix_caching: bool = True, tenant_max_seqs: int = 0, tenant_max_kv_blocks: int = 0,
                 reject_over_quota: bool = False, kv_recent_window: int = 32,
                 device_graphs: bool = True) -> None:
        """threads None: all cores; ctx None: min(training context, 4096); kv_dtype / k_dtype / v_dtype
        "f32"|"f16"|"int8"|"int4"; serving limits (max_num_seqs, ..., tenant quotas) as EngineOptions::serving;
        weights: "as-stored" or a load-time conversion: "f16", "bf16", "q8", "q4", "fp8" (output
        head kept 16-bit), "fp8-channel" (one scale per output row), "fp8-block"
        (one scale per 128 x 128 block), "fp8-all", "q4g128" (ValueError
        otherwise);
        audit: sink(s) for every request (a path, an object with on_request_begin/on_token/
        on_request_end, or a list); audit_key: HMAC key for path sinks; audit_append: continue existing
        path logs (last file verified first) instead of refusing them."""
    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 256, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 repeat_last_n: int = 64, seed: int | None = None, stop: str | Sequence[str] | None = None,
                 logprobs: int = 5, add_bos: bool | None = None, stop_at_eos: bool = True, audit: Any = None,
                 audit_key: str | bytes | None = None, audit_level: str = "tokens",
                 tenant: str = "", user: str = "", priority: int = 0) -> Result:
        """Generates a continuation of `prompt` (text, or token ids without an added BOS).

        temperature 0 is greedy; top_k 0, top_p 1 and min_p 0 turn those filters off; logprobs
        is the number of alternatives per token (0..64); audit adds sinks for this request;
        audit_level "off"|"tokens"|"topk"|"full"; tenant: the request's quota tenant (recorded
        in its audit records); priority: higher first, for admission and against preemption
        (equal priorities in arrival order). Runs without the GIL.
        """
    def submit(self, prompt: str | Sequence[int], **options: Any) -> Request:
        """Starts generate(prompt, **options) on its own thread and returns its handle."""
    def stream(self, prompt: str | Sequence[int], **options: Any) -> Request:
        """Iterator of TokenEvent for generate(prompt, **options)."""
    async def agenerate(self, prompt: str | Sequence[int], **options: Any) -> Result:
        """asyncio form of generate(); cancelling the awaiting task cancels the generation."""
    def chat(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True,
             tools: Sequence[dict[str, Any]] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
             **options: Any) -> Result:
        """Renders OpenAI-style `messages` ({"role", "content", and e.g. "tool_calls"}) with the
        model's chat template and generates the next turn; generation ends at the template's
        end-of-turn token. Options as for generate(). Raises sitsrt.UnsupportedError when the
        model has no chat template."""
    def submit_chat(self, messages: Sequence[dict[str, Any]], **options: Any) -> Request:
        """Starts chat(messages, **options) on its own thread and returns its handle."""
    def chat_stream(self, messages: Sequence[dict[str, Any]], **options: Any) -> Request:
        """Iterator of TokenEvent for chat(messages, **options)."""
    async def achat(self, messages: Sequence[dict[str, Any]], **options: Any) -> Result:
        """asyncio form of chat(); cancelling the awaiting task cancels the generation."""
    def apply_chat_template(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True,
                            tokenize: bool = False, tools: Sequence[dict[str, Any]] | None = None,
                            chat_template_kwargs: dict[str, Any] | None = None) -> str | list[int]:
        """The prompt chat() feeds the model, as text or (tokenize=True) token ids."""
    @property
    def has_chat_template(self) -> bool: ...
    def close(self) -> None:
        """Releases the model and its sinks; later calls raise RuntimeError (also `with Engine(...)`)."""
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Engine: ...
    def __exit__(self, *exc: Any) -> None: ...
    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...
    def token_bytes(self, token: int) -> bytes: ...
    def logits(self, tokens: str | Sequence[int], *, all_positions: bool = True) -> numpy.ndarray:
        """float32 [positions, vocab] next-token logits after each token (zero-copy; needs numpy)."""
    def plan(self) -> dict[str, Any]:
        """Devices with their weights/KV/activation bytes and budget, and each stage's layers."""
    def queue_stats(self) -> dict[str, Any]:
        """requests, sessions, queued, queued_seconds, in_flight, peak_in_flight."""
    def graph(self) -> dict[str, Any]:
        """The computation graph and memory plan, as `sitsrt graph --json` prints it."""
    @property
    def info(self) -> dict[str, Any]:
        """Model and engine metadata (n_vocab, n_layer, context_length, threads, cpu_isa, ...)."""
    def model_sha256(self) -> str: ...
    @property
    def circuit_breaker_open(self) -> bool: ...
    def reset_circuit_breaker(self) -> None: ...
