"""Request: the handle of one generation running on its own C++ thread.

The native handle signals every change (a token, the end) on an eventfd; waiting happens here, in
Python's own poll() or in asyncio's reader callbacks, so it releases the GIL the ordinary way,
Ctrl-C interrupts it (and cancels the request), and awaiting a request costs no executor thread.
Requests still running when the interpreter exits are cancelled and waited for first (atexit),
so no generation thread calls into Python while it shuts down.
"""

from __future__ import annotations

import asyncio
import atexit
import math
import numbers
import select
import time
import weakref
from typing import Any

from . import _sitsrt

_live: "weakref.WeakSet[Request]" = weakref.WeakSet()


def _timeout(value: Any) -> float | None:
    """None or inf: no limit; a finite number >= 0: seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"timeout: expected a number of seconds or None, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"timeout: {value} is not a number of seconds >= 0")
    return None if math.isinf(value) else value


class Request:
    """A running generation: iterate it for TokenEvents (also `async for`), `result()` /
    `await request.wait()` for the Result, `cancel()` to stop it after the token in flight."""

    __slots__ = ("_native", "__weakref__")

    def __init__(self, native: _sitsrt.Request) -> None:
        self._native = native
        _live.add(self)

    def fileno(self) -> int:
        """A file descriptor that becomes readable on every token and at the end."""
        return self._native.fileno()

    def done(self) -> bool:
        return self._native.done()

    def cancel(self) -> None:
        self._native.cancel()

    def _wait_for_change(self, timeout: float | None) -> None:
        poller = select.poll()
        poller.register(self._native.fileno(), select.POLLIN)
        poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000)))
        self._native.drain()

    def _interruptible(self, wait) -> Any:
        try:
            return wait()
        except BaseException:  # KeyboardInterrupt and friends: stop the generation too
            self._native.cancel()
            raise

    def result(self, timeout: float | None = None) -> _sitsrt.Result:
        """Waits for the end (at most `timeout` seconds: TimeoutError) and returns the Result,
        or raises the request's error. Ctrl-C cancels the request and raises KeyboardInterrupt."""
        limit = _timeout(timeout)

        def wait():
            deadline = None if limit is None else time.monotonic() + limit
            while not self._native.done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("sitsrt: the request did not finish within the timeout")
                self._wait_for_change(left)
            return self._native.result_now()

        return self._interruptible(wait)

    def __iter__(self) -> Request:
        return self

    def __next__(self) -> _sitsrt.TokenEvent:
        def wait():
            while True:
                event = self._native.take()  # StopIteration at the end, or the request's error
                if event is not None:
                    return event
                self._wait_for_change(None)

        return self._interruptible(wait)

    async def _changed(self) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        fd = self._native.fileno()

        def ready() -> None:
            if not future.done():
                future.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await future
        finally:
            loop.remove_reader(fd)
            self._native.drain()

    async def wait(self) -> _sitsrt.Result:
        """asyncio: the Result, without holding a thread; cancelling the task cancels the request."""
        try:
            while not self._native.done():
                await self._changed()
        except asyncio.CancelledError:
            self._native.cancel()
            raise
        return self._native.result_now()

    def __aiter__(self) -> Request:
        return self

    async def __anext__(self) -> _sitsrt.TokenEvent:
        try:
            while True:
                try:
                    event = self._native.take()
                except StopIteration:
                    raise StopAsyncIteration from None
                if event is not None:
                    return event
                await self._changed()
        except asyncio.CancelledError:
            self._native.cancel()
            raise

    def __repr__(self) -> str:
        return f"sitsrt.Request(done={self.done()})"


@atexit.register
def _finish_running_requests() -> None:
    requests = list(_live)
    for r in requests:
        r.cancel()
    deadline = time.monotonic() + 30.0  # a cancelled request ends after the token in flight
    for r in requests:
        try:
            while not r.done() and time.monotonic() < deadline:
                r._wait_for_change(1.0)
        except BaseException:  # noqa: BLE001 - exiting anyway; never block the exit on one request
            pass
    # Threads of requests whose handles were dropped before they ended (cancelled there).
    _sitsrt._finish_abandoned_workers(max(0.0, deadline - time.monotonic()))
