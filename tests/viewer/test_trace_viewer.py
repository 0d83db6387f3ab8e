"""The browser trace viewer (examples/trace-viewer) in headless Chromium: it verifies audit logs as
`sitsrt audit verify` does (clean, a flipped byte, a torn tail, HMAC with the right, no and a wrong
key, a rotated series, a one-request excerpt from /v1/audit/ID) and shows every token, anomaly and
attribution heat map; plus a screenshot for reviewers.

The pages are served by http.server from a temporary directory (the viewer at /viewer/, as
`sitsrt serve` places it) and read back with `chromium --dump-dom`. Needs Chromium (PATH or
SITSRT_CHROMIUM), SITSRT_BIN (the CLI) and SITSRT_MODELS_DIR (SmolLM2-135M-Instruct, fetched by
scripts/fetch-models.sh); what is absent skips with the reason. SITSRT_ARTIFACTS_DIR receives
trace-viewer.png (default: pytest's temporary directory)."""

import functools
import hashlib
import html.parser
import http.server
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VIEWER = ROOT / "examples" / "trace-viewer"
BIN = os.environ.get("SITSRT_BIN", "build/bin/sitsrt")
MODELS = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", "build/models"))
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
CHROMIUM = os.environ.get("SITSRT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ZERO = "0" * 64


# --- serving and reading pages ----------------------------------------------------------------

class Site:
    """A temporary web root: the viewer under /viewer/, logs under /logs/, and a stand-in for the
    server's GET /v1/audit/ID?format=jsonl (excerpts registered in `audit`, guarded by `api_key`)."""

    def __init__(self, root):
        self.root = root
        shutil.copytree(VIEWER, root / "viewer", ignore=shutil.ignore_patterns("*.md"))
        (root / "logs").mkdir()
        self.audit, self.api_key, self.seen_auth = {}, None, []
        site = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):  # quiet: series discovery asks for FILE.N until a 404
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if not url.path.startswith("/v1/audit/"):
                    return super().do_GET()
                site.seen_auth.append(self.headers.get("Authorization"))
                rid = urllib.parse.unquote(url.path.rsplit("/", 1)[1])
                if site.api_key and self.headers.get("Authorization") != f"Bearer {site.api_key}":
                    return self.reply(401, b'{"error":{"message":"invalid API key"}}', "application/json")
                if rid not in site.audit or "format=jsonl" not in url.query:
                    return self.reply(404, b'{"error":{"message":"no audit records"}}', "application/json")
                self.reply(200, site.audit[rid], "application/x-ndjson")

            def reply(self, status, body, kind):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                     functools.partial(Handler, directory=str(root)))
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def log(self, name):
        return self.root / "logs" / name

    def page(self, query="", fragment=""):
        return f"{self.base}/viewer/{'?' + query if query else ''}{'#' + fragment if fragment else ''}"


class Dom(html.parser.HTMLParser):
    """What the tests read from a dumped page: #chain-status, the .tok spans (index, text, classes,
    request), .heat cells and anomaly list items."""

    VOID = {"meta", "link", "input", "br", "img", "hr", "wbr"}

    def __init__(self, text):
        super().__init__()
        self.stack, self.tokens, self.heat, self.anomaly_items = [], [], [], []
        self.status, self.req = {"state": None, "text": ""}, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        a = dict(attrs)
        cls = set((a.get("class") or "").split())
        if tag == "section" and a.get("data-req"):
            self.req = a["data-req"]
        cap = None
        if "tok" in cls:
            cap = {"i": int(a["data-i"]), "classes": cls, "text": "", "req": self.req}
            self.tokens.append(cap)
        elif a.get("id") == "chain-status":
            cap = self.status = {"state": a.get("data-state"), "text": ""}
        elif "heat" in cls:
            cap = {"text": ""}
            self.heat.append(cap)
        elif "anomaly-item" in cls:
            cap = {"text": ""}
            self.anomaly_items.append(cap)
        self.stack.append((tag, cap))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        for _, cap in self.stack:
            if cap is not None:
                cap["text"] += data

    def texts(self, req=None):
        return [t["text"] for t in self.tokens if req is None or t["req"] == req]


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    if not CHROMIUM or not shutil.which(CHROMIUM):
        pytest.skip(f"Chromium is absent ({CHROMIUM or 'chromium not on PATH'}; install it or set SITSRT_CHROMIUM)")
    profiles = tmp_path_factory.mktemp("chromium")
    counter = iter(range(1_000_000))

    def run(url, *mode):
        profile = profiles / f"p{next(counter)}"  # fresh: nothing cached between pages
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
               "--virtual-time-budget=15000", *(mode or ["--dump-dom"]), url]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    run.dom = lambda url: Dom(run(url))
    return run


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("site"))
    yield s
    s.httpd.shutdown()


def sitsrt_run(log, *extra, tokens=16):
    if not SMOL.exists():
        pytest.skip(f"{SMOL} is absent (scripts/fetch-models.sh build/models)")
    subprocess.run([BIN, "run", "-m", str(SMOL), "-p", "Once upon a time", "-n", str(tokens), "--temp", "0", "-t", "2",
                    "-q", "--audit-log", str(log), "--audit-level", "topk", "--audit-tenant", "acme",
                    "--audit-user", "viewer-test", *extra], check=True, capture_output=True)
    return log


def audit_verify(*args):
    if not shutil.which(BIN):
        pytest.skip(f"{BIN} is absent (set SITSRT_BIN to the built CLI)")
    return subprocess.run([BIN, "audit", "verify", *map(str, args)], capture_output=True, text=True)


def records(*paths):
    return [json.loads(line) for p in paths for line in pathlib.Path(p).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def greedy(site):
    return sitsrt_run(site.log("greedy.jsonl"))


# --- cases ------------------------------------------------------------------------------------

def test_recorded_log_is_verified_and_every_token_shown_in_order(chromium, site, greedy):
    assert audit_verify(greedy).returncode == 0
    tokens = [r for r in records(greedy) if r["type"] == "token"]
    assert len(tokens) == 16
    dom = chromium.dom(site.page("log=../logs/greedy.jsonl"))
    assert dom.status["text"].startswith("chain verified"), dom.status
    assert dom.status["state"] == "verified"
    assert dom.texts() == [r["text"] for r in tokens]
    assert [t["i"] for t in dom.tokens] == list(range(16))
    assert not any("tampered" in t["classes"] for t in dom.tokens)


def test_a_flipped_digit_in_a_token_record_is_tampered_at_that_line(chromium, site, greedy):
    lines = greedy.read_bytes().split(b"\n")
    n = next(k for k, line in enumerate(lines) if b'"type":"token"' in line and b'"i":5,' in line)
    m = re.search(rb'"lp":-?[0-9.]+', lines[n])
    digit = m.end() - 1
    lines[n] = lines[n][:digit] + str((int(lines[n][digit:digit + 1]) + 1) % 10).encode() + lines[n][digit + 1:]
    bad = site.log("flipped.jsonl")
    bad.write_bytes(b"\n".join(lines))
    cli = audit_verify(bad)
    assert cli.returncode == 1 and f"{bad}:{n + 1}: modified" in cli.stdout + cli.stderr
    dom = chromium.dom(site.page("log=../logs/flipped.jsonl"))
    assert dom.status["text"].startswith("tampered"), dom.status
    assert dom.status["state"] == "tampered"
    assert f"flipped.jsonl line {n + 1}" in dom.status["text"]
    assert [t["i"] for t in dom.tokens if "tampered" in t["classes"]] == [5]
    assert len(dom.tokens) == 16  # the records are still shown


def test_a_torn_last_line_is_a_truncated_tail(chromium, site, greedy):
    torn = site.log("torn.jsonl")
    torn.write_bytes(greedy.read_bytes()[:-40])  # the end record loses its last 39 bytes and newline
    assert audit_verify(torn).returncode == 3
    dom = chromium.dom(site.page("log=../logs/torn.jsonl"))
    assert dom.status["text"].startswith("truncated tail"), dom.status
    assert dom.status["state"] == "truncated"
    assert len(dom.tokens) == 16


def test_hmac_log_needs_its_key(chromium, site, tmp_path):
    key = "viewer key & = %?"  # characters that must survive URI encoding in the fragment
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")  # the key is the file's bytes less one trailing newline
    log = sitsrt_run(site.log("hmac.jsonl"), "--audit-key-file", str(key_file))
    assert audit_verify(log, "--key-file", key_file).returncode == 0
    url = site.page("log=../logs/hmac.jsonl")
    good = chromium.dom(f"{url}#key={urllib.parse.quote(key, safe='')}")
    assert good.status["text"].startswith("chain verified") and "HMAC" in good.status["text"], good.status
    assert good.texts() == [r["text"] for r in records(log) if r["type"] == "token"]
    none = chromium.dom(url)
    assert none.status["text"].startswith("key needed") and none.status["state"] == "key", none.status
    wrong = chromium.dom(f"{url}#key=not-the-key")
    assert wrong.status["text"].startswith(("wrong key", "tampered")), wrong.status
    assert wrong.status["state"] in ("key", "tampered")


def sealed(records_without_hash):
    """Lines of a log the test writes itself: canonical JSON (sorted keys, no whitespace, raw UTF-8),
    each hashed as SHA-256(prev || body) and chained. Only floats whose shortest float32 text is
    Python's repr (0.5, -1.5, ...) appear, so Python's text is the canonical one."""
    lines, prev = [], ZERO
    for seq, rec in enumerate(records_without_hash):
        rec = dict(rec, seq=seq, prev=prev)
        body = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        rec["hash"] = prev = hashlib.sha256((rec["prev"] + body).encode()).hexdigest()
        lines.append(json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    return lines


def synthetic_log():
    """Two interleaved requests: r1 with a chat, an anomaly, shadow scores and one evidence record
    (the provisional attribution type); r2 plain."""
    def request(req, tokens, chat=None):
        rec = {"type": "request", "req": req, "ts_ns": 1700000000000000000, "level": "topk",
               "model": {"path": "m.gguf", "sha256": "ab" * 32}, "input_tokens": tokens,
               "sampling": {"temperature": 0.5, "top_k": 40, "top_p": 0.5, "min_p": 0, "seed": 2**63 + 5,
                            "max_new_tokens": 4}, "meta": {"tenant": "acme", "user": "ann", "tags": ["t1"]}}
        return dict(rec, chat=chat) if chat else rec

    def token(req, i, tid, text, lp, t_ns):
        return {"type": "token", "req": req, "i": i, "id": tid, "text": text, "lp": lp, "t_ns": t_ns,
                "top": [[tid, lp], [tid + 1, -2.5]], "entropy": 0.75}

    def end(req, n, prompt):
        return {"type": "end", "req": req, "finish": "length", "prompt_tokens": prompt, "generated_tokens": n,
                "prefill_ns": 2000000, "decode_ns": 6000000, "total_ns": 8000000}

    r1 = ["Hello", " wörld", "\n\t", " 🙂"]
    recs = [{"type": "file", "version": 1, "file_index": 0, "alg": "sha256"},
            request("r1", [11, 12, 13, 14, 15], {"messages": [{"role": "user", "content": "Say hello"}]}),
            request("r2", [21, 22])]
    for i, text in enumerate(r1):
        recs.append(token("r1", i, 100 + i, text, [-0.25, -1.5, -0.125, -0.5][i], 1000000 * (i + 1) ** 2))
        recs.append(token("r2", i, 200 + i, f" two{i}", -0.5, 500000 * (i + 1)))
    recs += [{"type": "anomaly", "req": "r1", "rule": "low_logprob", "action": "continue", "i": 1,
              "detail": "lp -1.5 below -1"},
             {"type": "evidence", "req": "r1", "i": 2, "method": "gradient-x-input",
              "scores": [0.5, -0.25, 0.125, 0, 0.75]},
             end("r1", 4, 5), end("r2", 4, 2),
             {"type": "shadow", "req": "r1", "shadow_model_sha256": "cd" * 32, "lp_diff": [0.25, -0.5, 0, 0.125],
              "topk_kl": [0.125, 0.25, 0, 0.5], "max_abs_lp_diff": 0.5, "mean_topk_kl": 0.25, "tripped": False},
             {"type": "future_kind", "req": "r1", "x": 1}]  # readers ignore unknown types
    return recs, r1


def test_python_written_log_with_anomaly_and_evidence(chromium, site):
    recs, r1_texts = synthetic_log()
    log = site.log("synthetic.jsonl")
    log.write_text("\n".join(sealed(recs)) + "\n", encoding="utf-8")
    cli = audit_verify(log)
    assert cli.returncode == 0 and cli.stdout.startswith("clean"), cli.stdout + cli.stderr
    dom = chromium.dom(site.page("log=../logs/synthetic.jsonl"))
    assert dom.status["text"].startswith("chain verified"), dom.status
    assert dom.texts("r1") == r1_texts
    assert dom.texts("r2") == [f" two{i}" for i in range(4)]
    assert [t["i"] for t in dom.tokens if "anomaly" in t["classes"]] == [1]
    assert len(dom.anomaly_items) == 1 and "low_logprob" in dom.anomaly_items[0]["text"]
    assert [t["i"] for t in dom.tokens if "has-ev" in t["classes"]] == [2]
    assert len(dom.heat) == 5  # the first evidence record opens by itself: one cell per input token
    assert [c["text"] for c in dom.heat] == ["#11", "#12", "#13", "#14", "#15"]


def test_one_request_excerpt_from_the_audit_endpoint(chromium, site):
    lines = sealed(synthetic_log()[0])
    excerpt = [lines[0]] + [line for line in lines[1:] if json.loads(line).get("req") == "r2"]
    site.audit["r2"] = ("\n".join(excerpt) + "\n").encode()
    site.api_key = "sk-viewer"
    dom = chromium.dom(site.page("audit=r2", "apikey=sk-viewer"))
    assert site.seen_auth[-1] == "Bearer sk-viewer"
    assert dom.status["text"].startswith("records verified"), dom.status
    assert dom.status["state"] == "excerpt"
    assert dom.texts() == [f" two{i}" for i in range(4)]
    refused = chromium.dom(site.page("audit=r2"))
    assert refused.status["state"] == "unavailable" and "401" in refused.status["text"], refused.status
    # The same lines as a whole log: a gap is a deletion, as `sitsrt audit verify` says.
    cut = site.log("excerpt.jsonl")
    cut.write_bytes(site.audit["r2"])
    assert "deleted" in audit_verify(cut).stdout
    whole = chromium.dom(site.page("log=../logs/excerpt.jsonl"))
    assert whole.status["text"].startswith("tampered") and "deleted" in whole.status["text"], whole.status


def test_rotated_series_is_one_chain(chromium, site):
    log = sitsrt_run(site.log("rotated.jsonl"), "--audit-rotate-bytes", "2000")
    files = [log] + sorted(log.parent.glob("rotated.jsonl.*"), key=lambda p: int(p.suffix[1:]))
    assert len(files) >= 3
    assert audit_verify(log).returncode == 0
    tokens = [r["text"] for r in records(*files) if r["type"] == "token"]
    listed = "&".join(f"log=../logs/{p.name}" for p in files)
    for query in (listed, "log=../logs/rotated.jsonl&series=1"):
        dom = chromium.dom(site.page(query))
        assert dom.status["text"].startswith("chain verified") and f"in {len(files)} files" in dom.status["text"], \
            (query, dom.status)
        assert dom.texts() == tokens


def test_file_url_page_boots(chromium):
    # From file:// the page must run (no module scripts, no blocked assets) and wait for files.
    dom = chromium.dom((VIEWER / "index.html").as_uri())
    assert dom.status["state"] == "empty", dom.status


def test_screenshot(chromium, site, greedy, tmp_path):
    out = pathlib.Path(os.environ.get("SITSRT_ARTIFACTS_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "trace-viewer.png"
    chromium(site.page("log=../logs/greedy.jsonl&hover=3"), "--hide-scrollbars", "--window-size=1280,900",
             f"--screenshot={png}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert int.from_bytes(data[16:20], "big") == 1280 and int.from_bytes(data[20:24], "big") == 900


def test_the_server_serves_the_viewer_over_its_own_audit_endpoint(chromium, tmp_path):
    """`sitsrt serve --enable-trace`: /viewer/?audit=ID shows that request's tokens, each record's
    hash checked, under the server's own content security policy."""
    if not SMOL.exists():
        pytest.skip(f"{SMOL} is absent (scripts/fetch-models.sh build/models)")
    log = tmp_path / "serve.jsonl"
    proc = subprocess.Popen([BIN, "serve", "-m", str(SMOL), "--port", "0", "-t", "2", "--audit-log", str(log),
                             "--enable-trace"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on "), (line, proc.stderr.read() if proc.poll() is not None else "")
        url, model = line.split()[2], line.split("'")[1]
        ids = []
        for prompt in ("Say hello.", "Name three colours."):  # two requests: the second's excerpt has a seq gap
            body = json.dumps({"model": model, "max_tokens": 24, "temperature": 0,
                               "messages": [{"role": "user", "content": prompt}]}).encode()
            request = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                ids.append(response.headers["x-sitsrt-audit-id"])
        deadline = time.time() + 10
        while sum('"type":"end"' in line for line in log.read_text().splitlines()) < 2:
            assert time.time() < deadline, "the server's audit log has no end records after 10 s"
            time.sleep(0.05)
        for n, audit_id in enumerate(ids):
            dom = chromium.dom(f"{url}/viewer/?audit={audit_id}")
            expected = [r["text"] for r in records(log) if r["type"] == "token" and r["req"] == audit_id]
            assert dom.texts() == expected and expected
            assert dom.status["state"] in ("verified", "excerpt"), dom.status
            assert dom.status["text"].startswith("chain verified" if n == 0 else "records verified"), dom.status
        # Alternatives the log holds only as ids get their text from the server's POST /detokenize.
        page = chromium(f"{url}/viewer/?audit={ids[0]}&hover=2")
        tip = page[page.index('id="tip"'):]
        tip = tip[:tip.index("</table>")]
        assert tip.count('class="lbl') >= 5 and 'class="lbl id"' not in tip, tip
        missing = chromium.dom(f"{url}/viewer/?audit=no-such-request")
        assert missing.status["state"] == "unavailable" and "404" in missing.status["text"], missing.status
        out = pathlib.Path(os.environ.get("SITSRT_ARTIFACTS_DIR") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        chromium(f"{url}/viewer/?audit={ids[1]}&hover=4", "--hide-scrollbars", "--window-size=1280,720",
                 f"--screenshot={out / 'trace-viewer-served.png'}")
        assert (out / "trace-viewer-served.png").stat().st_size > 20_000
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
