"""Audit from Python: sinks, log verification and replay (see docs/audit-log.md)."""

import os
from dataclasses import dataclass
from typing import Any

from . import TokenEvent

class Sink:
    """Base class for Python sinks; methods run on the generating thread with the GIL held."""
    def on_request_begin(self, record: dict[str, Any]) -> None: ...
    def on_token(self, request_id: str, event: TokenEvent) -> None: ...
    def on_anomaly(self, event: dict[str, Any]) -> None: ...
    def on_request_end(self, summary: dict[str, Any]) -> None: ...

@dataclass(frozen=True)
class VerifyReport:
    """Outcome of verify(); true when the log is clean."""
    clean: bool
    problem: str
    file: str
    line: int
    message: str
    records: int
    files: int
    open_requests: int
    last_hash: str
    def __bool__(self) -> bool: ...

@dataclass(frozen=True)
class ReplayOutcome:
    request_id: str
    match: bool
    deterministic: bool
    tokens: int
    message: str

def verify(path: str | os.PathLike[str], key: str | bytes | None = None) -> VerifyReport:
    """Checks canonical form, hash chain and HMAC (when `key` is given) across rotated files."""
def replay(path: str | os.PathLike[str], model: str | os.PathLike[str], *, threads: int | None = None) -> list[ReplayOutcome]:
    """Re-runs every recorded request; raises sitsrt.RejectedError when the model differs."""
