"""`sitsrt serve` over HTTP on a loopback port: the official openai client for completions and chat
(streamed and not, logprobs), greedy output against `sitsrt run`, logprobs against the audit log,
32 concurrent clients, malformed requests (4xx with an OpenAI error object), API keys, limits,
client disconnects and SIGTERM mid-stream.

Needs SITSRT_BIN (the CLI) and SITSRT_MODELS_DIR (SmolLM2-135M-Instruct, fetched by
scripts/fetch-models.sh); cases needing a model that is absent skip with the reason."""

import hashlib
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

openai = pytest.importorskip("openai")

BIN = os.environ.get("SITSRT_BIN", "build/bin/sitsrt")
MODELS = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", "build/models"))
SHARED = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "models"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
STORIES = SHARED / "stories260K.gguf"


class Server:
    """A `sitsrt serve` process on a free port; stop() sends SIGTERM and waits."""

    def __init__(self, model, *extra, tmp=None):
        if not pathlib.Path(model).exists():
            pytest.skip(f"{model} is absent (scripts/fetch-models.sh build/models)")
        self.proc = subprocess.Popen([BIN, "serve", "-m", str(model), "--port", "0", "-t", "2", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"sitsrt serve did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split()[2]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.model = line.split("'")[1]

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)

    def raw(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, data, dict(response.getheaders())

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "audit.jsonl"
    server = Server(SMOL, "--audit-log", str(log), "--enable-trace")
    server.audit_log = log
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stories():
    server = Server(STORIES, "--deterministic", "--max-concurrent-requests", "64")
    yield server
    server.stop()


def run_cli(*args):
    return subprocess.run([BIN, "run", "-t", "2", "-q", "--temp", "0", *args], capture_output=True, text=True,
                          check=True).stdout.removesuffix("\n")  # the CLI ends its output with a newline


def test_models_and_health(smol):
    models = smol.client().models.list()
    assert [m.id for m in models.data] == [smol.model] == ["SmolLM2-135M-Instruct.Q4_1"]
    status, body, _ = smol.raw("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_completion_greedy_equals_sitsrt_run(smol):
    result = smol.client().completions.create(model=smol.model, prompt="Once upon a time", max_tokens=24,
                                              temperature=0)
    assert result.object == "text_completion" and len(result.choices) == 1
    assert result.choices[0].text == run_cli("-m", str(SMOL), "-p", "Once upon a time", "-n", "24")
    assert result.choices[0].finish_reason == "length"
    assert result.usage.completion_tokens == 24 and result.usage.total_tokens == result.usage.prompt_tokens + 24


def test_chat_greedy_equals_sitsrt_run_chat(smol):
    question = "What is the capital of France?"
    result = smol.client().chat.completions.create(model=smol.model, temperature=0, max_tokens=40,
                                                   messages=[{"role": "user", "content": question}])
    message = result.choices[0].message
    assert message.role == "assistant"
    assert message.content == run_cli("-m", str(SMOL), "--chat", "-p", question, "-n", "40")


def test_chat_stream_equals_the_whole_answer_and_reports_usage(smol):
    client = smol.client()
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name three colours."}]
    whole = client.chat.completions.create(model=smol.model, messages=messages, temperature=0, max_tokens=30)
    chunks = list(client.chat.completions.create(model=smol.model, messages=messages, temperature=0, max_tokens=30,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert len({c.id for c in chunks}) == 1


def test_completion_stream_with_logprobs(smol):
    chunks = list(smol.client().completions.create(model=smol.model, prompt="The sky is", max_tokens=8,
                                                   temperature=0, logprobs=3, stream=True))
    pieces = [c.choices[0] for c in chunks if c.choices and c.choices[0].logprobs]
    assert len(pieces) == 8
    for p in pieces:
        assert len(p.logprobs.tokens) == 1 and len(p.logprobs.top_logprobs[0]) <= 3
        # greedy: the token taken is the most likely one
        assert abs(p.logprobs.token_logprobs[0] - max(p.logprobs.top_logprobs[0].values())) < 1e-6


def audit_tokens(log, audit_id):
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r.get("type") == "token" and r.get("req") == audit_id]


def test_chat_logprobs_equal_the_audit_log(smol):
    raw = smol.client().chat.completions.with_raw_response.create(
        model=smol.model, temperature=0, max_tokens=12, logprobs=True, top_logprobs=2,
        messages=[{"role": "user", "content": "Say hello."}])
    audit_id = raw.headers["x-sitsrt-audit-id"]
    result = raw.parse()
    content = result.choices[0].logprobs.content
    assert len(content) == result.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 2 and bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    deadline = time.time() + 10
    while time.time() < deadline:  # the writer thread flushes the log shortly after
        tokens = audit_tokens(smol.audit_log, audit_id)
        if len(tokens) == len(content):
            break
        time.sleep(0.1)
    assert [round(t["lp"], 5) for t in tokens] == [round(e.logprob, 5) for e in content]


def audit_excerpt(server, audit_id, headers=None):
    """GET /v1/audit/{id}?format=jsonl once the request's end record is written: the raw lines."""
    deadline = time.time() + 10
    while True:
        status, body, response_headers = server.raw("GET", f"/v1/audit/{audit_id}?format=jsonl", headers=headers)
        lines = body.decode().splitlines()
        if status == 200 and '"type":"end"' in lines[-1] or time.time() > deadline:
            return status, lines, response_headers
        time.sleep(0.05)


def test_audit_jsonl_excerpt_is_the_log_header_and_lines_as_written(smol):
    raw = smol.client().completions.with_raw_response.create(model=smol.model, prompt="Once upon a time",
                                                             max_tokens=6, temperature=0, logprobs=2)
    audit_id = raw.headers["x-sitsrt-audit-id"]
    status, lines, headers = audit_excerpt(smol, audit_id)
    assert status == 200 and headers["Content-Type"].startswith("application/x-ndjson")
    log_lines = set(smol.audit_log.read_text().splitlines())
    assert all(line in log_lines for line in lines)  # byte for byte as in the log
    records = [json.loads(line) for line in lines]
    assert records[0]["type"] == "file" and records[0]["seq"] == 0
    assert [r["type"] for r in records[1:]] == ["request"] + ["token"] * 6 + ["end"]
    assert all(r["req"] == audit_id for r in records[1:])
    for line, record in zip(lines, records):  # each record's hash checks against its own line
        body = re.sub(r'^\{"hash":"[0-9a-f]{64}",|,"hash":"[0-9a-f]{64}"', lambda m: "{" if m[0][0] == "{" else "", line,
                      count=1)
        assert hashlib.sha256((record["prev"] + body).encode()).hexdigest() == record["hash"]
    for earlier, later in zip(records[1:], records[2:]):  # one request's records, interleaved with others'
        assert later["seq"] > earlier["seq"]
    # --enable-trace records five alternatives per token whatever the client asked (2 here)
    assert all(len(r["top"]) == 5 and "entropy" in r for r in records if r["type"] == "token")
    assert all(len(top) == 2 for top in raw.parse().choices[0].logprobs.top_logprobs)


def test_without_enable_trace_requests_get_begin_and_end_records_only(tmp_path):
    log = tmp_path / "audit.jsonl"
    server = Server(STORIES, "--audit-log", str(log))
    try:
        raw = server.client().completions.with_raw_response.create(model=server.model, prompt="Once", max_tokens=4,
                                                                   temperature=0)
        status, lines, _ = audit_excerpt(server, raw.headers["x-sitsrt-audit-id"])
        assert status == 200 and [json.loads(line)["type"] for line in lines] == ["file", "request", "end"]
    finally:
        server.stop()
    assert subprocess.run([BIN, "serve", "-m", str(STORIES), "--enable-trace"], capture_output=True).returncode == 2


def test_the_trace_viewer_is_served(smol):
    status, _, headers = smol.raw("GET", "/viewer")
    assert status == 301 and headers["Location"].endswith("/viewer/")
    status, page, headers = smol.raw("GET", "/viewer/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["X-Content-Type-Options"] == "nosniff"
    source = pathlib.Path(__file__).resolve().parents[2] / "examples" / "trace-viewer"
    assert page == (source / "index.html").read_bytes()  # the embedded copy is the source file
    for name, kind in (("viewer.js", "text/javascript"), ("viewer.css", "text/css")):
        status, data, headers = smol.raw("GET", f"/viewer/{name}")
        assert status == 200 and headers["Content-Type"].startswith(kind) and data == (source / name).read_bytes()
    status, body, _ = smol.raw("GET", "/viewer/secret.txt")
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"


def test_tokenize_and_detokenize(smol):
    def post(path, body):
        status, data, _ = smol.raw("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        return status, json.loads(data)

    status, out = post("/tokenize", {"content": "Once upon a time"})
    assert status == 200 and all(isinstance(t, int) for t in out["tokens"]) and len(out["tokens"]) == 4
    ids = out["tokens"]
    status, out = post("/detokenize", {"tokens": ids, "with_pieces": True})
    assert status == 200 and out["content"] == "Once upon a time"
    assert [p["id"] for p in out["pieces"]] == ids and "".join(p["piece"] for p in out["pieces"]) == "Once upon a time"
    status, out = post("/tokenize", {"content": "Once upon", "with_pieces": True})
    assert status == 200 and [t["piece"] for t in out["tokens"]] == ["Once", " upon"]
    vocab = 49152
    for body, param in (({"tokens": [1, -1]}, "tokens"), ({"tokens": [vocab]}, "tokens"), ({"tokens": ["a"]}, "tokens"),
                        ({"tokens": [1.5]}, "tokens"), ({"tokens": 3}, "tokens"), ({}, "tokens"),
                        ({"tokens": [1], "with_pieces": "yes"}, "with_pieces")):
        status, out = post("/detokenize", body)
        assert status == 400 and out["error"]["param"] == param, (body, out)
    for body in ({}, {"content": 5}, {"content": "x", "add_special": 1}):
        assert post("/tokenize", body)[0] == 400, body
    assert smol.raw("POST", "/detokenize", "[1, 2", {"Content-Type": "application/json"})[0] == 400


def test_32_clients_20_requests_each_get_their_own_tokens(stories):
    prompts = [f"Once upon a time there was a {w}" for w in ("cat", "dog", "girl", "boy", "bird", "tree", "king", "fish")]
    expected = {p: stories.client().completions.create(model=stories.model, prompt=p, max_tokens=8,
                                                       temperature=0).choices[0].text for p in prompts}
    failures = []

    def client_thread(k):
        client = stories.client()
        for i in range(20):
            p = prompts[(k + i) % len(prompts)]
            try:
                stream = (k + i) % 3 == 0
                if stream:
                    text = "".join(c.choices[0].text for c in client.completions.create(
                        model=stories.model, prompt=p, max_tokens=8, temperature=0, stream=True) if c.choices)
                else:
                    text = client.completions.create(model=stories.model, prompt=p, max_tokens=8,
                                                     temperature=0).choices[0].text
                if text != expected[p]:
                    failures.append((k, i, p, text, expected[p]))
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failures.append((k, i, p, repr(e)))

    threads = [threading.Thread(target=client_thread, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


MALFORMED = [
    ("not json", b"{", 400),
    ("array body", b"[]", 400),
    ("string body", b'"hi"', 400),
    ("no model", {"prompt": "x"}, 400),
    ("model not a string", {"model": 3, "prompt": "x"}, 400),
    ("unknown model", {"model": "nope", "prompt": "x"}, 404),
    ("no prompt", {"model": "M"}, 400),
    ("prompt a number", {"model": "M", "prompt": 5}, 400),
    ("prompt an object", {"model": "M", "prompt": {"a": 1}}, 400),
    ("several prompts", {"model": "M", "prompt": ["a", "b"]}, 400),
    ("token id out of range", {"model": "M", "prompt": [1, 10 ** 9]}, 400),
    ("negative token id", {"model": "M", "prompt": [-1]}, 400),
    ("max_tokens a string", {"model": "M", "prompt": "x", "max_tokens": "5"}, 400),
    ("max_tokens negative", {"model": "M", "prompt": "x", "max_tokens": -1}, 400),
    ("max_tokens fractional", {"model": "M", "prompt": "x", "max_tokens": 2.5}, 400),
    ("max_tokens huge", {"model": "M", "prompt": "x", "max_tokens": 10 ** 12}, 400),
    ("temperature a string", {"model": "M", "prompt": "x", "temperature": "hot"}, 400),
    ("temperature above 2", {"model": "M", "prompt": "x", "temperature": 3}, 400),
    ("temperature negative", {"model": "M", "prompt": "x", "temperature": -0.5}, 400),
    ("top_p zero", {"model": "M", "prompt": "x", "top_p": 0}, 400),
    ("top_p above 1", {"model": "M", "prompt": "x", "top_p": 1.5}, 400),
    ("n of 2", {"model": "M", "prompt": "x", "n": 2}, 400),
    ("stream a string", {"model": "M", "prompt": "x", "stream": "yes"}, 400),
    ("stream_options without stream", {"model": "M", "prompt": "x", "stream_options": {"include_usage": True}}, 400),
    ("stream_options not an object", {"model": "M", "prompt": "x", "stream": True, "stream_options": 1}, 400),
    ("stop a number", {"model": "M", "prompt": "x", "stop": 3}, 400),
    ("stop too many", {"model": "M", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400),
    ("stop empty string", {"model": "M", "prompt": "x", "stop": [""]}, 400),
    ("seed a string", {"model": "M", "prompt": "x", "seed": "s"}, 400),
    ("logprobs above 5", {"model": "M", "prompt": "x", "logprobs": 6}, 400),
    ("echo", {"model": "M", "prompt": "x", "echo": True}, 400),
    ("presence_penalty", {"model": "M", "prompt": "x", "presence_penalty": 1}, 400),
    ("user a number", {"model": "M", "prompt": "x", "user": 7}, 400),
    ("chat: no messages", {"model": "M"}, 400, "/v1/chat/completions"),
    ("chat: messages not an array", {"model": "M", "messages": "hi"}, 400, "/v1/chat/completions"),
    ("chat: empty messages", {"model": "M", "messages": []}, 400, "/v1/chat/completions"),
    ("chat: message not an object", {"model": "M", "messages": ["hi"]}, 400, "/v1/chat/completions"),
    ("chat: no role", {"model": "M", "messages": [{"content": "hi"}]}, 400, "/v1/chat/completions"),
    ("chat: unknown role", {"model": "M", "messages": [{"role": "wizard", "content": "hi"}]}, 400,
     "/v1/chat/completions"),
    ("chat: content a number", {"model": "M", "messages": [{"role": "user", "content": 1}]}, 400,
     "/v1/chat/completions"),
    ("chat: image part", {"model": "M", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "/v1/chat/completions"),
    ("chat: top_logprobs without logprobs", {"model": "M", "messages": [{"role": "user", "content": "x"}],
                                             "top_logprobs": 2}, 400, "/v1/chat/completions"),
    ("chat: top_logprobs above 20", {"model": "M", "messages": [{"role": "user", "content": "x"}],
                                     "logprobs": True, "top_logprobs": 21}, 400, "/v1/chat/completions"),
    ("chat: tools", {"model": "M", "messages": [{"role": "user", "content": "x"}], "tools": []}, 400,
     "/v1/chat/completions"),
    ("nesting 100000 deep", b"[" * 100000 + b"]" * 100000, 400),
    ("a number past double's range", b'{"model":"M","prompt":"x","max_tokens":2e1402}', 400),
    ("chat: an extra field nesting 100000 deep",
     b'{"model":"M","messages":[{"role":"user","content":"hi","x":' + b"[" * 100000 + b"]" * 100000 + b"}]}", 400,
     "/v1/chat/completions"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_requests_get_4xx_with_an_error_object(smol, case):
    name, body, status = case[:3]
    path = case[3] if len(case) > 3 else "/v1/completions"
    if isinstance(body, dict):
        body = json.dumps({k: (smol.model if v == "M" and k == "model" else v) for k, v in body.items()}).encode()
    got, data, _ = smol.raw("POST", path, body, {"Content-Type": "application/json"})
    assert got == status, data
    error = json.loads(data)["error"]
    assert error["message"] and error["type"]


def test_wrong_method_route_and_oversized_body(smol):
    status, data, _ = smol.raw("GET", "/v1/completions")
    assert status == 405 and json.loads(data)["error"]["message"]
    status, data, _ = smol.raw("POST", "/v1/nothing", b"{}")
    assert status == 404 and json.loads(data)["error"]["type"] == "not_found_error"
    status, data, _ = smol.raw("POST", "/v1/completions", b"x" * (5 << 20), {"Content-Type": "application/json"})
    assert status == 413 and "limit" in json.loads(data)["error"]["message"]
    assert smol.raw("GET", "/health")[0] == 200  # and the server still serves


def test_api_keys(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# key tenant\nsecret-key-1 alice\nsecret-key-2\n")
    server = Server(STORIES, "--api-key-file", str(keys))
    try:
        with pytest.raises(openai.AuthenticationError):
            server.client("wrong-key-0").models.list()
        status, data, _ = server.raw("POST", "/v1/completions", json.dumps({"model": server.model, "prompt": "x"}))
        assert status == 401 and json.loads(data)["error"]["type"] == "authentication_error"
        assert server.client("secret-key-1").completions.create(model=server.model, prompt="Once", max_tokens=2).choices
        assert server.client("secret-key-2").models.list().data[0].id == server.model
    finally:
        server.stop()


def test_metrics_parse_and_count_what_was_answered(tmp_path):
    parser = pytest.importorskip("prometheus_client.parser")
    server = Server(STORIES, "--price-per-hour", "3.6")
    try:
        client = server.client()
        for _ in range(3):
            client.completions.create(model=server.model, prompt="Once", max_tokens=5, temperature=0)
        list(client.completions.create(model=server.model, prompt="Once", max_tokens=5, stream=True))
        server.raw("POST", "/v1/completions", b"{")
        status, body, headers = server.raw("GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        families = {f.name: f for f in parser.text_string_to_metric_families(body.decode())}
        requests = {(s.labels["endpoint"], s.labels["status"]): s.value for s in families["sitsrt_requests"].samples
                    if s.name == "sitsrt_requests_total"}
        assert requests == {("completions", "200"): 4, ("completions", "400"): 1}
        value = lambda family, name: [s.value for s in families[family].samples if s.name == name][0]
        assert value("sitsrt_generation_tokens", "sitsrt_generation_tokens_total") == 20
        assert value("sitsrt_time_to_first_token_seconds", "sitsrt_time_to_first_token_seconds_count") == 4
        assert value("sitsrt_kv_blocks_free", "sitsrt_kv_blocks_free") > 0
        assert value("process_resident_memory_bytes", "process_resident_memory_bytes") > 1e6
        costs = {s.labels["basis"]: s.value for s in families["sitsrt_cost_dollars"].samples}
        assert costs["accrued"] > 0 and abs(costs["per_request"] * 5 - costs["accrued"]) < 1e-3 * costs["accrued"] + 1e-9
    finally:
        server.stop()


def test_audit_records_of_a_request_to_its_own_tenant_only(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("alice-key-123 alice\nbob-key-4567 bob\n")
    log = tmp_path / "audit.jsonl"
    server = Server(STORIES, "--api-key-file", str(keys), "--audit-log", str(log), "--enable-trace")
    try:
        raw = server.client("alice-key-123").completions.with_raw_response.create(
            model=server.model, prompt="Once", max_tokens=4, temperature=0)
        audit_id, result = raw.headers["x-sitsrt-audit-id"], raw.parse()
        deadline = time.time() + 10
        while True:
            status, body, _ = server.raw("GET", f"/v1/audit/{audit_id}", headers={"Authorization": "Bearer alice-key-123"})
            records = json.loads(body).get("data", [])
            if status == 200 and any(r["type"] == "end" for r in records) or time.time() > deadline:
                break
            time.sleep(0.05)
        assert status == 200
        kinds = [r["type"] for r in records]
        assert kinds[0] == "request" and kinds[-1] == "end" and kinds.count("token") == 4
        assert records[0]["meta"]["tenant"] == "alice"
        assert [r["id"] for r in records if r["type"] == "token"] == records[-1]["tokens"]
        assert server.raw("GET", f"/v1/audit/{audit_id}", headers={"Authorization": "Bearer bob-key-4567"})[0] == 404
        assert server.raw("GET", f"/v1/audit/{audit_id}")[0] == 401
        assert server.raw("GET", "/v1/audit/no-such-id", headers={"Authorization": "Bearer alice-key-123"})[0] == 404
        assert result.choices[0].text
    finally:
        server.stop()


def expect_cancelled_at_once(server, matches, seen=0):
    """The end record of the closed connection's request (the first after line `seen` that
    `matches`) says cancelled within a few tokens of the disconnect, not run to its 2000; and
    nothing stays in flight."""
    deadline = time.time() + 20
    while time.time() < deadline:
        ends = [json.loads(line) for line in server.audit_log.read_text().splitlines()[seen:]
                if matches(line) and '"type":"end"' in line]
        if ends:
            assert ends[0]["finish"] == "cancelled" and ends[0]["generated_tokens"] < 200, ends[0]
            break
        time.sleep(0.05)
    else:
        pytest.fail("no end record for the request of the closed connection after 20 s")
    while json.loads(server.raw("GET", "/health")[1])["requests_in_flight"] != 0:
        assert time.time() < deadline, "the request of a closed connection is still in flight"
        time.sleep(0.05)


def test_client_disconnect_cancels_the_request(smol):
    sock = socket.create_connection(("127.0.0.1", smol.port))
    body = json.dumps({"model": smol.model, "prompt": "Once upon a time", "max_tokens": 2000, "stream": True})
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    received = b""
    while b"data:" not in received:  # the headers may come on their own first
        chunk = sock.recv(4096)
        assert chunk, "the server closed the stream before its first token"
        received += chunk
    sock.close()
    audit_id = [line.split(b": ", 1)[1].strip().decode() for line in received.split(b"\r\n")
                if line.lower().startswith(b"x-sitsrt-audit-id")][0]
    expect_cancelled_at_once(smol, lambda line: audit_id in line)


def test_client_disconnect_cancels_a_non_streamed_request(smol):
    seen = len(smol.audit_log.read_text().splitlines())
    sock = socket.create_connection(("127.0.0.1", smol.port))
    body = json.dumps({"model": smol.model, "prompt": "Once upon a time", "max_tokens": 2000})
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    deadline = time.time() + 20
    while not any('"type":"token"' in line for line in smol.audit_log.read_text().splitlines()[seen:]):
        assert time.time() < deadline, "no token of the request after 20 s"
        time.sleep(0.02)
    sock.close()  # before any byte of the answer
    expect_cancelled_at_once(smol, lambda line: True, seen)
    metrics = smol.raw("GET", "/metrics")[1].decode()
    assert re.search(r'sitsrt_requests_total\{[^}]*status="499"[^}]*\} 1', metrics), metrics


def test_sigterm_mid_stream_leaves_a_verifiable_audit_log(tmp_path):
    log = tmp_path / "audit.jsonl"
    server = Server(STORIES, "--audit-log", str(log), "--drain-seconds", "0")
    stream = server.client().completions.create(model=server.model, prompt="Once upon a time", max_tokens=400,
                                                stream=True)
    next(iter(stream))
    assert server.stop() == 0
    verify = subprocess.run([BIN, "audit", "verify", str(log)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
