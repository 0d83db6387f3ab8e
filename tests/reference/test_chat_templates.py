"""`sitsrt template` against Python's jinja2 set up exactly as Hugging Face transformers'
apply_chat_template sets it up (transformers/utils/chat_template_utils.py: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols and the
{% generation %} tag; tojson, raise_exception and strftime_now as transformers defines them).

Every template in tests/data/chat_templates is rendered over the conversations below, with
add_generation_prompt true and false. Where jinja2 renders, the output of `sitsrt template` must
be the same bytes; where jinja2 raises (at load or render), `sitsrt template` must exit 1.
KNOWN_FAILURES lists the templates this implementation cannot render like jinja2 and why; the
test is strict both ways, so a regression and an unlisted fix both fail.

Run: SITSRT_BIN=build/bin/sitsrt python -m pytest tests/reference/test_chat_templates.py
"""

import datetime
import json
import os
import pathlib
import subprocess
import tempfile

import pytest

jinja2 = pytest.importorskip("jinja2")
import jinja2.ext  # noqa: E402
import jinja2.nodes  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "tests" / "data" / "chat_templates").glob("*.jinja"))
NOW = 1721995200  # 2024-07-26 12:00:00 UTC, the fixed clock of strftime_now()
BOS, EOS = "<|bos|>", "<|eos|>"

# template file stem -> why sitsrt cannot render it as jinja2 does
KNOWN_FAILURES = {}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. 'Paris'"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "description": "Forecast days"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "limit": {"type": "number", "description": "At most this many results"},
                },
                "required": ["query"],
            },
        },
    },
]

# Cohere's tool format (name, description, parameter_definitions), which Command R's template reads.
COHERE_TOOLS = [
    {
        "name": "internet_search",
        "description": "Returns a list of relevant document snippets for a textual query.",
        "parameter_definitions": {
            "query": {"description": "Query to search the internet with", "type": "str", "required": True},
            "max_results": {"description": "How many results", "type": "int", "required": False},
        },
    },
    {"name": "directly_answer", "description": "Answer without tools.", "parameter_definitions": {}},
]
FUNCTIONS_CONTEXT = {"functions": json.dumps([t["function"] for t in TOOLS], indent=2), "datetime": "26 Jul 2024"}
SYSTEM_USER = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
CONVERSATIONS = {
    "system_user": (SYSTEM_USER, {}),
    "user_only": ([{"role": "user", "content": "Hello!"}], {}),
    "multi_turn": (
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
            {"role": "user", "content": "Why?"},
        ],
        {},
    ),
    "ends_with_assistant": (
        [
            {"role": "user", "content": "Count to three."},
            {"role": "assistant", "content": "One, two, three."},
        ],
        {},
    ),
    "empty_content": (
        [
            {"role": "system", "content": ""},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": " "},
        ],
        {},
    ),
    "unicode": (
        [
            {"role": "system", "content": "Réponds en français. 日本語も話せます。"},
            {
                "role": "user",
                "content": "Emoji 👋🏽👨‍👩‍👧 CJK 你好，世界 Arabic مرحبا\n"
                "quotes \"double\" 'single' backslash \\ tab\t<b>&amp;</b> {{ not a tag }} %}",
            },
            {"role": "assistant", "content": "Ça va ! 😀\u00a0\u3000 ok"},
            {"role": "user", "content": "Ελληνικά, русский, עברית ✓"},
        ],
        {},
    ),
    "tool_calls": (
        [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What's the weather in Paris and in Tōkyō?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Tōkyō", "days": 2}},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temperature": 21.5, "sky": "clear"}'},
            {"role": "tool", "tool_call_id": "call_2", "name": "get_weather", "content": "Rain, 18 °C"},
            {"role": "assistant", "content": "Paris is clear at 21.5 °C; Tōkyō will see rain."},
            {"role": "user", "content": "Thanks!"},
        ],
        {"tools": TOOLS},
    ),
    "thinking_off": (SYSTEM_USER, {"context": {"enable_thinking": False}}),
    # Tool-use templates that need `tools` (and firefunction's `functions` and `datetime`), and
    # templates without a system role, get these; the others ignore the extra variables.
    "tools_system_user": (SYSTEM_USER, {"tools": TOOLS, "context": FUNCTIONS_CONTEXT}),
    "tools_user_only": ([{"role": "user", "content": "Search for jinja2."}], {"tools": TOOLS, "context": FUNCTIONS_CONTEXT}),
    "tools_multi_turn": (
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Is it sunny in Lyon?"},
        ],
        {"tools": TOOLS, "context": FUNCTIONS_CONTEXT},
    ),
    "cohere_tools_system_user": (SYSTEM_USER, {"tools": COHERE_TOOLS}),
    "cohere_tools_multi_turn": (
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Find news about Lyon."},
        ],
        {"tools": COHERE_TOOLS},
    ),
    "cohere_tools_unicode": ([{"role": "user", "content": "Cherche «café» ☕ 咖啡"}], {"tools": COHERE_TOOLS}),
    "tools_unicode": (
        [{"role": "user", "content": "天気は？ ☀️ «Zürich» — ok\n\tend"}],
        {"tools": TOOLS, "context": FUNCTIONS_CONTEXT},
    ),
    "no_special_tokens": (SYSTEM_USER, {"no_special_tokens": True}),
}


class GenerationTracker(jinja2.ext.Extension):
    """transformers' AssistantTracker, without the mask bookkeeping: renders the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        # naive UTC, like datetime.now() on a machine whose clock reads NOW in UTC
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).replace(tzinfo=None).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def reference_compile(source):
    """The jinja2 template, or the exception compiling it raised. Compiled once per template, as
    transformers does (its compiled templates are cached): compiling was ~90% of each render."""
    try:
        return make_environment().from_string(source), None
    except Exception as error:  # noqa: BLE001 - any failure of jinja2 is an expected failure of ours
        return None, f"{type(error).__name__}: {error}"


def reference_render(compiled, messages, add_generation_prompt, case):
    """jinja2's rendering, or the exception it raises (as apply_chat_template would)."""
    template, compile_error = compiled
    if compile_error is not None:
        return None, compile_error
    try:
        variables = {
            "messages": messages,
            "tools": case.get("tools"),
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        if not case.get("no_special_tokens"):
            variables.update(bos_token=BOS, eos_token=EOS)
        variables.update(case.get("context", {}))
        return template.render(**variables), None
    except Exception as error:  # noqa: BLE001 - any failure of jinja2 is an expected failure of ours
        return None, f"{type(error).__name__}: {error}"


def sitsrt_render(binary, template_path, messages, add_generation_prompt, case, workdir):
    messages_path = pathlib.Path(workdir) / "messages.json"
    messages_path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    command = [binary, "template", "--template", str(template_path), "--messages", str(messages_path), "--now", str(NOW)]
    if add_generation_prompt:
        command.append("--add-generation-prompt")
    if not case.get("no_special_tokens"):
        command += ["--bos-token", BOS, "--eos-token", EOS]
    if "tools" in case:
        tools_path = pathlib.Path(workdir) / "tools.json"
        tools_path.write_text(json.dumps(case["tools"], ensure_ascii=False), encoding="utf-8")
        command += ["--tools", str(tools_path)]
    if "context" in case:
        command += ["--context", json.dumps(case["context"])]
    return subprocess.run(command, capture_output=True, timeout=60)


def compare_template(binary, template_path):
    """The (case, difference) pairs where sitsrt and jinja2 disagree, and the count of checks."""
    compiled = reference_compile(template_path.read_text(encoding="utf-8"))
    problems = []
    checks = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name, (messages, case) in CONVERSATIONS.items():
            for add_generation_prompt in (True, False):
                label = f"{name}/add_generation_prompt={add_generation_prompt}"
                expected, error = reference_render(compiled, messages, add_generation_prompt, case)
                result = sitsrt_render(binary, template_path, messages, add_generation_prompt, case, workdir)
                checks += 1
                if error is not None:
                    if result.returncode != 1:
                        problems.append((label, f"jinja2 raised {error!r}; sitsrt exited {result.returncode}"))
                    continue
                if result.returncode != 0:
                    problems.append((label, f"jinja2 rendered; sitsrt failed: {result.stderr.decode(errors='replace').strip()}"))
                elif result.stdout != expected.encode("utf-8"):
                    problems.append((label, first_difference(expected, result.stdout.decode("utf-8", errors="replace"))))
    return problems, checks


def first_difference(expected, actual):
    at = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    return f"differs at {at}: jinja2 {expected[max(0, at - 40):at + 40]!r} vs sitsrt {actual[max(0, at - 40):at + 40]!r}"


@pytest.fixture(scope="module")
def binary():
    path = os.environ.get("SITSRT_BIN", str(ROOT / "build" / "bin" / "sitsrt"))
    if not pathlib.Path(path).exists():
        pytest.skip(f"no sitsrt binary at {path} (set SITSRT_BIN)")
    return path


def test_the_template_corpus_is_complete():
    assert len(TEMPLATES) >= 69, [t.name for t in TEMPLATES]
    assert set(KNOWN_FAILURES) <= {t.stem for t in TEMPLATES}


@pytest.mark.parametrize("template_path", TEMPLATES, ids=[t.stem for t in TEMPLATES])
def test_template_renders_like_jinja2(binary, template_path):
    problems, checks = compare_template(binary, template_path)
    if template_path.stem in KNOWN_FAILURES:
        assert problems, f"{template_path.stem} now matches jinja2: remove it from KNOWN_FAILURES"
        pytest.xfail(KNOWN_FAILURES[template_path.stem])
    report = "\n".join(f"  {label}: {detail}" for label, detail in problems)
    assert not problems, f"{len(problems)} of {checks} renderings differ from jinja2:\n{report}"
