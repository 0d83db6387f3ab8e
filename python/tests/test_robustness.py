"""The Python cases of reliability round 2: crashes, deadlocks, interrupts, audit records from
failing sinks, consistency of logprobs and logits, asyncio without threads, argument checks and
engine lifetime. Everything that could crash the interpreter runs in a child process; every
in-process wait has a timeout and faulthandler dumps the stacks of a hang, so a deadlock fails
instead of hanging CI.
"""

import asyncio
import concurrent.futures
import faulthandler
import gc
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import sitsrt

HANG_SECONDS = 60


@pytest.fixture(autouse=True)
def dump_stacks_on_hang():
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def run_child(model_path, body, timeout=60, runs=1):
    """Runs `body` (with `sitsrt`, `model` and `engine` defined) in fresh interpreters."""
    script = "import sitsrt, sys, threading, time\nmodel = sys.argv[1]\nengine = sitsrt.Engine(model, threads=2)\n"
    script += textwrap.dedent(body)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    results = []
    for _ in range(runs):
        results.append(subprocess.run([sys.executable, "-c", script, model_path], capture_output=True, text=True,
                                      timeout=timeout, env=env))
    return results


class Recorder:
    def __init__(self):
        self.begins, self.tokens, self.ends = [], [], []

    def on_request_begin(self, record):
        self.begins.append(record)

    def on_token(self, request_id, event):
        self.tokens.append(event)

    def on_request_end(self, summary):
        self.ends.append(summary)


def test_a_sink_holding_its_own_request_does_not_abort(model_path):
    body = """
    class Job(sitsrt.audit.Sink):
        def __init__(self, prompt):
            self.handle = engine.submit(prompt, max_tokens=16, audit=self)
    for _ in range(20):
        Job("Once")
    time.sleep(1.0)
    print("survived")
    """
    (r,) = run_child(model_path, body)
    assert r.returncode == 0 and "survived" in r.stdout, r.stderr


def test_interpreter_exit_with_running_requests_does_not_abort(model_path):
    body = """
    class Slow(sitsrt.audit.Sink):
        def on_token(self, request_id, event):
            time.sleep(0.01)
    handle = engine.submit("Once upon a time", max_tokens=400, stop_at_eos=False, audit=Slow())
    for _ in range(3):
        next(handle)
    def daemon():
        engine.generate("Once upon a time", max_tokens=400, stop_at_eos=False)
    threading.Thread(target=daemon, daemon=True).start()
    time.sleep(0.2)
    print("exiting")
    """
    for r in run_child(model_path, body, runs=5):
        assert r.returncode == 0 and "exiting" in r.stdout, r.stderr[-2000:]
        assert "FATAL" not in r.stderr and "terminate" not in r.stderr


def test_done_while_another_thread_iterates_does_not_deadlock(engine):
    handle = engine.submit("Once upon a time", max_tokens=200, stop_at_eos=False)
    stop = threading.Event()

    def poll_done():
        while not stop.is_set():
            handle.done()

    pollers = [threading.Thread(target=poll_done) for _ in range(3)]
    for t in pollers:
        t.start()
    count = sum(1 for _ in handle)
    result = handle.result(timeout=30)
    stop.set()
    for t in pollers:
        t.join(timeout=10)
    assert count == len(result.tokens) == 200
    assert not any(t.is_alive() for t in pollers)


def test_result_timeouts(engine):
    handle = engine.submit("Once upon a time", max_tokens=16)
    assert len(handle.result(timeout=math.inf).tokens) > 0
    assert handle.result(timeout=1e12).tokens == handle.result().tokens
    for bad in (math.nan, -1.0):
        with pytest.raises(ValueError):
            handle.result(timeout=bad)
    with pytest.raises(TypeError):
        handle.result(timeout="1")
    slow = engine.submit("Once upon a time", max_tokens=2000, stop_at_eos=False)
    with pytest.raises(TimeoutError):
        slow.result(timeout=0.001)
    slow.cancel()
    assert slow.result(timeout=30).finish_reason in ("cancelled", "context_full")


def read_log(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_failing_sinks_leave_complete_audit_records(model_path, tmp_path):
    log = tmp_path / "engine.jsonl"
    engine = sitsrt.Engine(model_path, threads=2, audit=str(log))

    class FailsAtBegin(Recorder):
        def on_request_begin(self, record):
            raise RuntimeError("begin refused")

    class FailsAtToken(Recorder):
        def on_token(self, request_id, event):
            if len(self.tokens) == 3:
                raise RuntimeError("token refused")
            super().on_token(request_id, event)

    with pytest.raises(sitsrt.RejectedError) as begin_error:
        engine.generate("Once upon a time", max_tokens=8, audit=FailsAtBegin())
    assert isinstance(begin_error.value.__cause__, RuntimeError)
    failing = FailsAtToken()
    with pytest.raises(sitsrt.RejectedError):
        engine.generate("Once upon a time", max_tokens=8, temperature=0, audit=failing)
    engine.close()
    report = sitsrt.audit.verify(str(log))
    assert report.clean and report.open_requests == 0, report
    records = read_log(log)
    ends = [r for r in records if r["type"] == "end"]
    assert len(ends) == 2 and all(e["finish"] == "error" for e in ends)
    assert "begin refused" in ends[0]["error"] and "RuntimeError" in ends[0]["error"]
    second = ends[1]["req"]
    token_records = [r for r in records if r["type"] == "token" and r["req"] == second]
    assert ends[1]["generated_tokens"] == len(token_records) == 4
    for e in ends:  # the sink's message, not a traceback with the caller's file paths
        assert "Traceback" not in e["error"] and __file__ not in e["error"] and ".py" not in e["error"]


def test_keyboard_interrupt_in_a_sink_is_raised_as_itself(engine):
    class Interrupts(Recorder):
        def on_token(self, request_id, event):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.generate("Once upon a time", max_tokens=8, audit=Interrupts())

    class Fails(Recorder):
        def on_token(self, request_id, event):
            raise ValueError("bad token")

    with pytest.raises(sitsrt.RejectedError) as error:
        engine.generate("Once upon a time", max_tokens=8, audit=Fails())
    assert isinstance(error.value.__cause__, ValueError) and "bad token" in str(error.value)


def test_ctrl_c_interrupts_generate_and_result(model_path):
    body = """
    import signal, threading, os
    # A Python started with SIGINT ignored (e.g. under a job a script put in the background with &)
    # keeps it ignored: install the handler Ctrl-C normally reaches, which this test is about.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    class Slow(sitsrt.audit.Sink):  # keeps the tiny model busy for seconds
        def on_token(self, request_id, event):
            time.sleep(0.01)
    for call in ("generate", "result"):
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            if call == "generate":
                engine.generate("Once upon a time", max_tokens=100000, stop_at_eos=False, audit=Slow())
            else:
                engine.submit("Once upon a time", max_tokens=100000, stop_at_eos=False, audit=Slow()).result()
            print(call, "finished without an interrupt")
        except KeyboardInterrupt:
            print(call, "interrupted after", round(time.monotonic() - start, 2))
    """
    (r,) = run_child(model_path, body, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all("interrupted after" in line for line in lines), r.stdout
    assert all(float(line.split()[-1]) < 5 for line in lines)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_f32_activations_make_logprobs_and_logits_agree(model_path):
    # A float kernel level: at "amx" the prompts' prefill (logits() included) runs on bf16 tiles,
    # 2^-7 relative per operand, while decode steps stay float.
    engine = sitsrt.Engine(model_path, threads=2, activations="f32", kv_dtype="f32", cpu_isa="avx512vnni")
    prompt = engine.tokenize("Once upon a time")
    result = engine.generate(prompt, max_tokens=12, temperature=0, logprobs=3)
    rows = log_softmax(engine.logits(prompt + result.tokens[:-1]).astype(np.float64))[len(prompt) - 1:]
    for step, event in enumerate(result.events):
        for token, logprob in event.top:
            assert abs(logprob - rows[step, token]) < 2e-4
    last_all = engine.logits(prompt)[-1]
    last_only = engine.logits(prompt, all_positions=False)[0]
    assert np.abs(last_all - last_only).max() < 1e-4 * max(1.0, np.abs(last_all).max())
    with pytest.raises(ValueError):
        sitsrt.Engine(model_path, activations="int4")


def test_awaiting_requests_holds_no_executor_thread(engine):
    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        tasks = [asyncio.create_task(engine.agenerate("Once upon a time", max_tokens=300, stop_at_eos=False))
                 for _ in range(6)]
        await asyncio.sleep(0.05)
        # The one executor thread is free for unrelated work while six requests are awaited.
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: 42), timeout=5) == 42
        streamed = [e.token_id async for e in engine.stream("Once upon a time", max_tokens=8, temperature=0)]
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        return streamed, results

    streamed, results = asyncio.run(main())
    assert all(len(r.tokens) == 300 for r in results)
    assert streamed == engine.generate("Once upon a time", max_tokens=8, temperature=0).tokens


def test_argument_checks(model_path, engine):
    with pytest.raises(TypeError):
        engine.generate("x", stop_at_eos="no")
    with pytest.raises(TypeError):
        engine.generate("x", add_bos=1)
    with pytest.raises(TypeError):
        engine.logits([1, 2], all_positions="yes")
    with pytest.raises(TypeError):
        sitsrt.Engine(model_path, deterministic="no")
    with pytest.raises(TypeError):
        engine.generate({1: 2, 3: 4})
    with pytest.raises(ValueError):
        engine.generate("lone \ud800 surrogate")
    with pytest.raises(ValueError):
        engine.tokenize("\udfff")
    with pytest.raises(ValueError):
        engine.generate("x", stop="\ud800")
    with pytest.raises(ValueError):
        sitsrt.Engine(model_path, ctx=2**63)
    with pytest.raises(ValueError):
        sitsrt.Engine(model_path, max_batch_tokens=2**40)


def test_close_frees_an_engine_and_its_own_sink(model_path):
    class Holder(Recorder):
        pass

    sink = Holder()
    engine = sitsrt.Engine(model_path, threads=1, audit=sink)
    sink.engine = engine  # a cycle through the C++ engine, invisible to the garbage collector
    engine.generate("Once", max_tokens=2)
    watch = weakref.ref(sink)
    engine.close()
    assert engine.closed
    del sink, engine
    gc.collect()
    assert watch() is None
    with sitsrt.Engine(model_path, threads=1) as scoped:
        assert len(scoped.generate("Once", max_tokens=2).tokens) == 2
    with pytest.raises(RuntimeError, match="closed"):
        scoped.generate("Once")
