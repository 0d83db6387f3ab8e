"""Audit from Python: sinks, log verification and replay (see docs/audit-log.md).

A sink is a path (a new hash-chained JSONL log; the file must not exist) or any object with
``on_request_begin(record: dict)``, ``on_token(request_id: str, event: TokenEvent)`` and
``on_request_end(summary: dict)`` (``on_anomaly(event: dict)`` optional). Pass it as
``Engine(..., audit=sink)`` for every request or ``engine.generate(..., audit=sink)`` for one.
Sink methods run on the generating thread with the GIL held: keep them short. An exception
raised by a sink fails the request with sitsrt.RejectedError.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import _sitsrt
from ._engine import _key


class Sink:
    """Convenience base class: override the methods you need (all default to doing nothing)."""

    def on_request_begin(self, record: dict) -> None:
        pass

    def on_token(self, request_id: str, event: _sitsrt.TokenEvent) -> None:
        pass

    def on_anomaly(self, event: dict) -> None:
        pass

    def on_request_end(self, summary: dict) -> None:
        pass


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of verify(); true when the log is clean."""
    clean: bool
    problem: str        # "none", "truncated", "modified", "deleted", "inserted", "reordered", ...
    file: str           # where the problem is
    line: int           # 1-based
    message: str
    records: int        # records verified good before the problem
    files: int
    open_requests: int  # requests without an end record
    last_hash: str      # hash of the last good record

    def __bool__(self) -> bool:
        return self.clean


@dataclass(frozen=True)
class ReplayOutcome:
    request_id: str
    match: bool          # token ids and logprobs equal bit for bit
    deterministic: bool  # recorded in deterministic mode (then a mismatch is a defect)
    tokens: int
    message: str


def verify(path: str | os.PathLike, key: str | bytes | None = None) -> VerifyReport:
    """Checks canonical form, hash chain and HMAC (when `key` is given) across rotated files."""
    return VerifyReport(**_sitsrt.verify_log(os.fspath(path), _key(key)))


def replay(path: str | os.PathLike, model: str | os.PathLike, *, threads: int | None = None) -> list[ReplayOutcome]:
    """Re-runs every recorded request on `model` and compares tokens and logprobs bit for bit.

    Raises sitsrt.RejectedError when the model's SHA-256 differs from the recorded one.
    """
    n = 0 if threads is None else int(threads)
    return [ReplayOutcome(**o) for o in _sitsrt.replay_log(os.fspath(path), os.fspath(model), n)]


__all__ = ["Sink", "VerifyReport", "ReplayOutcome", "verify", "replay"]
