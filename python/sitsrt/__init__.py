"""libsitsrt: an auditable LLM inference runtime (Python bindings).

    import sitsrt
    engine = sitsrt.Engine("stories260K.gguf")
    print(engine.generate("Once upon a time", max_tokens=32, temperature=0).text)

See ``Engine`` for generation, streaming, concurrent requests and logits, and ``sitsrt.audit``
for audit sinks, log verification and replay.
"""

from . import _sitsrt
from ._engine import Engine
from ._request import Request
from ._sitsrt import (
    Error,
    InternalError,
    InvalidArgumentError,
    InvalidModelError,
    IOError,
    OutOfMemoryError,
    RejectedError,
    Result,
    Timings,
    TokenEvent,
    UnsupportedError,
)
from . import audit

__version__: str = _sitsrt.__version__


def available_backends() -> list[tuple[str, str]]:
    """The backends this build can run models on, as (name, summary); the first is the default."""
    return list(_sitsrt.available_backends())


__all__ = [
    "Engine", "Request", "Result", "Timings", "TokenEvent", "audit", "__version__", "available_backends",
    "Error", "InvalidArgumentError", "InvalidModelError", "UnsupportedError", "IOError",
    "OutOfMemoryError", "RejectedError", "InternalError",
]
