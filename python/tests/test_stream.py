import asyncio
import threading
import time

import pytest

import sitsrt
import sitsrt.audit
from conftest import REFERENCE

GREEDY = dict(max_tokens=32, temperature=0)


def test_stream_order_matches_generate(engine):
    events = list(engine.stream("Once upon a time", **GREEDY))
    assert [e.index for e in events] == list(range(32))
    assert [e.token_id for e in events] == engine.generate("Once upon a time", **GREEDY).tokens
    assert "".join(e.text for e in events) == REFERENCE


def test_stream_result_after_iteration(engine):
    request = engine.stream("Once upon a time", **GREEDY)
    n = sum(1 for _ in request)
    r = request.result()
    assert n == len(r.tokens) == 32 and r.text == REFERENCE and request.done()


class Slow(sitsrt.audit.Sink):
    """Slows the producer (stories260K makes a token in ~50 us) so cancel() lands mid-stream."""

    def on_token(self, request_id, event):
        time.sleep(0.01)


def test_cancel_while_streaming(engine):
    request = engine.stream("Once upon a time", max_tokens=200, temperature=0, stop_at_eos=False, audit=Slow())
    seen = []
    for e in request:
        seen.append(e.token_id)
        if len(seen) == 3:
            request.cancel()
    r = request.result()
    assert r.finish_reason == "cancelled"
    # Tokens already queued when cancel() arrived are still delivered, and nothing is lost.
    assert 3 <= len(r.tokens) <= 6 and seen == r.tokens


def test_dropping_a_request_cancels_it(engine):
    request = engine.stream("Once upon a time", max_tokens=100000, temperature=0, stop_at_eos=False)
    next(request)
    start = time.perf_counter()
    del request  # cancels and joins the generation thread
    assert time.perf_counter() - start < 5


def test_result_timeout(engine):
    request = engine.submit("Once upon a time", max_tokens=100000, temperature=0, stop_at_eos=False)
    with pytest.raises(TimeoutError):
        request.result(timeout=0.01)
    request.cancel()
    assert request.result().finish_reason in ("cancelled", "context_full")


def test_error_surfaces_through_the_handle(model_path):
    engine = sitsrt.Engine(model_path, threads=1)
    request = engine.submit(list(range(1, 3000)), max_tokens=4)  # longer than the context
    with pytest.raises(sitsrt.Error):
        request.result()
    with pytest.raises(sitsrt.Error):
        list(request)


def test_sixteen_threads_submit_concurrently(engine):
    expected = engine.generate("Once upon a time", **GREEDY).tokens
    prompts = ["Once upon a time", "The cat", "Lily and Ben", "One day"]
    serial = {p: engine.generate(p, **GREEDY).tokens for p in prompts}
    results = [None] * 16
    errors = []
    start = threading.Barrier(16)

    def work(i):
        try:
            start.wait()
            prompt = prompts[i % 4]
            if i % 2:
                results[i] = (prompt, engine.submit(prompt, **GREEDY).result().tokens)
            else:
                results[i] = (prompt, [e.token_id for e in engine.stream(prompt, **GREEDY)])
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for prompt, tokens in results:
        assert tokens == serial[prompt]
    assert serial["Once upon a time"] == expected


def test_agenerate(engine):
    async def main():
        return await asyncio.gather(*(engine.agenerate("Once upon a time", **GREEDY) for _ in range(4)))

    for r in asyncio.run(main()):
        assert r.text == REFERENCE


def test_agenerate_cancel(engine):
    async def main():
        # The Slow sink keeps the whole run (context-limited to 512 tokens) near 5 s, so the
        # cancel cannot race with a generation that has already finished on a fast machine.
        task = asyncio.ensure_future(engine.agenerate("Once upon a time", max_tokens=100000, temperature=0,
                                                     stop_at_eos=False, audit=Slow()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
