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

__all__ = [
    "Engine", "Request", "Result", "Timings", "TokenEvent", "audit", "__version__",
    "Error", "InvalidArgumentError", "InvalidModelError", "UnsupportedError", "IOError",
    "OutOfMemoryError", "RejectedError", "InternalError",
]
