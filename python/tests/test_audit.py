import threading

import pytest

import sitsrt
import sitsrt.audit

GREEDY = dict(max_tokens=16, temperature=0)


class Recorder(sitsrt.audit.Sink):
    def __init__(self):
        self.lock = threading.Lock()
        self.begins, self.ends, self.tokens = {}, {}, {}

    def on_request_begin(self, record):
        with self.lock:
            assert record["request_id"] not in self.begins
            self.begins[record["request_id"]] = record
            self.tokens[record["request_id"]] = []

    def on_token(self, request_id, event):
        with self.lock:
            assert request_id in self.begins and request_id not in self.ends
            self.tokens[request_id].append((event.index, event.token_id))

    def on_request_end(self, summary):
        with self.lock:
            self.ends[summary["request_id"]] = summary


def test_python_sink_gets_every_token_once(engine):
    sink = Recorder()
    prompts = ["Once upon a time", "The cat", "One day", "Lily"] * 2
    results = [None] * len(prompts)

    def work(i):
        results[i] = engine.generate(prompts[i], audit=sink, **GREEDY)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sink.begins) == len(sink.ends) == len(prompts)
    for r in results:
        got = sink.tokens[r.request_id]
        assert [i for i, _ in got] == list(range(len(r.tokens)))  # each index once, in order
        assert [t for _, t in got] == r.tokens
        assert sink.ends[r.request_id]["tokens"] == r.tokens
        assert sink.begins[r.request_id]["input_tokens"] == r.prompt_tokens


def test_engine_level_sink_and_streaming(model_path):
    sink = Recorder()
    engine = sitsrt.Engine(model_path, threads=1, audit=sink)
    streamed = [e.token_id for e in engine.stream("Once upon a time", **GREEDY)]
    (rid, tokens), = sink.tokens.items()
    assert [t for _, t in tokens] == streamed


def test_failing_sink_fails_the_request(engine):
    class Broken(sitsrt.audit.Sink):
        def on_token(self, request_id, event):
            raise RuntimeError("disk on fire")

    with pytest.raises(sitsrt.RejectedError, match="disk on fire"):
        engine.generate("Once upon a time", audit=Broken(), **GREEDY)


def test_jsonl_log_verify_and_replay(model_path, tmp_path):
    log = tmp_path / "audit.jsonl"
    engine = sitsrt.Engine(model_path, threads=1, deterministic=True, audit=str(log), audit_key="k3y")
    results = [engine.generate(p, max_tokens=12, temperature=0.9, seed=5) for p in ("Once upon a time", "The cat")]
    del engine  # closes the log
    report = sitsrt.audit.verify(log, key="k3y")
    assert report and report.records > 0 and report.open_requests == 0
    assert not sitsrt.audit.verify(log)  # authenticated log checked without the key
    outcomes = sitsrt.audit.replay(log, model_path)
    assert [o.request_id for o in outcomes] == [r.request_id for r in results]
    assert all(o.match and o.deterministic for o in outcomes)

    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(',"', ', "', 1)  # no longer canonical
    log.write_text("".join(lines))
    bad = sitsrt.audit.verify(log, key="k3y")
    assert not bad and bad.line == 2 and bad.problem == "modified"


def test_audit_append_continues_a_log_across_engines(model_path, tmp_path):
    log = tmp_path / "appended.jsonl"
    ids = []
    for prompt in ("Once upon a time", "The cat"):
        engine = sitsrt.Engine(model_path, threads=1, audit=str(log), audit_key="k3y", audit_append=True)
        ids.append(engine.generate(prompt, **GREEDY).request_id)
        del engine  # closes the log
    report = sitsrt.audit.verify(log, key="k3y")
    assert report and report.open_requests == 0 and report.files == 1
    assert [o.request_id for o in sitsrt.audit.replay(log, model_path)] == ids
    with pytest.raises(IOError, match="cannot append to the audit log"):
        sitsrt.Engine(model_path, threads=1, audit=str(log), audit_key="wrong", audit_append=True)
    with pytest.raises(IOError, match="never overwritten"):
        sitsrt.Engine(model_path, threads=1, audit=str(log), audit_key="k3y")  # no append: refused as before


def test_per_request_log_is_complete_on_return(engine, tmp_path):
    log = tmp_path / "one.jsonl"
    r = engine.generate("Once upon a time", audit=log, **GREEDY)
    report = sitsrt.audit.verify(log)
    assert report and report.open_requests == 0 and r.request_id


def test_existing_log_is_not_overwritten(engine, tmp_path):
    log = tmp_path / "exists.jsonl"
    log.write_text("keep me\n")
    with pytest.raises(sitsrt.IOError):
        engine.generate("Once", audit=log, max_tokens=1)
    assert log.read_text() == "keep me\n"
