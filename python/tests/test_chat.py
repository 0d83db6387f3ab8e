"""Engine.chat / chat_stream / achat / submit_chat / apply_chat_template.

On stories260K with a ChatML template given as chat_template= (the model has none), and on
SmolLM2-135M-Instruct (its own template; fetched into build/models by scripts/fetch-models.sh,
skipped with a message when absent).
"""

import asyncio
import json
import os
import pathlib

import pytest

import sitsrt

from conftest import REPO

MODELS = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", REPO / "build" / "models"))
SMOLLM2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}]


@pytest.fixture(scope="module")
def chat_engine(model_path):
    return sitsrt.Engine(model_path, threads=2, chat_template=CHATML)


@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2.is_file():
        pytest.skip(f"skipped: {SMOLLM2} is absent (scripts/fetch-models.sh fetches it from PyPI)")
    return sitsrt.Engine(str(SMOLLM2), threads=2)


def test_apply_chat_template_text_and_ids(chat_engine):
    text = chat_engine.apply_chat_template(MESSAGES)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nOnce upon a time<|im_end|>\n"
                    "<|im_start|>assistant\n")
    assert chat_engine.apply_chat_template(MESSAGES, add_generation_prompt=False).endswith("<|im_end|>\n")
    assert chat_engine.apply_chat_template(MESSAGES, tokenize=True) == chat_engine.tokenize(text)
    assert chat_engine.has_chat_template


def test_chat_generates_from_the_rendered_ids(chat_engine):
    ids = chat_engine.apply_chat_template(MESSAGES, tokenize=True)
    chat = chat_engine.chat(MESSAGES, max_tokens=8, temperature=0)
    assert chat.prompt_tokens == ids
    assert chat.tokens == chat_engine.generate(ids, max_tokens=8, temperature=0).tokens
    streamed = list(chat_engine.chat_stream(MESSAGES, max_tokens=8, temperature=0))
    assert [e.token_id for e in streamed] == chat.tokens
    assert asyncio.run(chat_engine.achat(MESSAGES, max_tokens=8, temperature=0)).tokens == chat.tokens
    assert chat_engine.submit_chat(MESSAGES, max_tokens=8, temperature=0).result().tokens == chat.tokens


def test_chat_audit_records_messages_and_template(chat_engine, tmp_path):
    log = tmp_path / "chat.jsonl"
    chat_engine.chat(MESSAGES, max_tokens=4, temperature=0, audit=str(log))
    request = json.loads(log.read_text().splitlines()[1])
    assert request["type"] == "request"
    assert request["chat"]["messages"] == MESSAGES
    assert len(request["chat"]["template_sha256"]) == 64 and request["chat"]["add_generation_prompt"] is True
    report = sitsrt.audit.verify(str(log))
    assert report.clean and report.open_requests == 0


def test_chat_argument_errors(chat_engine, engine):
    with pytest.raises(TypeError):
        chat_engine.chat("not a list")
    with pytest.raises(TypeError):
        chat_engine.chat([("user", "hi")])
    with pytest.raises(ValueError):
        chat_engine.chat([{"content": "no role"}])
    with pytest.raises(TypeError):
        chat_engine.chat(MESSAGES, tools={"not": "a list"})
    with pytest.raises(sitsrt.UnsupportedError):
        engine.chat(MESSAGES)  # stories260K carries no chat template
    with pytest.raises(sitsrt.UnsupportedError):
        sitsrt.Engine(engine.model, threads=1, chat_template="{{ messages | frobnicate }}")


def test_content_parts_and_extra_fields_reach_the_template(model_path):
    template = ("{% for m in messages %}{{ m.role }}:{% if m.content is string %}{{ m.content }}{% else %}"
                "{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endif %}"
                "{% if m.tool_calls %}<{{ m.tool_calls[0].function.name }}>{% endif %};{% endfor %}")
    e = sitsrt.Engine(model_path, threads=1, chat_template=template)
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    ]
    assert e.apply_chat_template(messages, add_generation_prompt=False) == "user:[a][b];assistant:<f>;"


def test_smollm2_chat_stops_at_end_of_turn(smollm2):
    messages = [{"role": "user", "content": "List three fruits that are red."}]
    text = smollm2.apply_chat_template(messages)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    ids = smollm2.apply_chat_template(messages, tokenize=True)
    assert ids.count(1) == 3  # <|im_start|> is one id per turn header
    result = smollm2.chat(messages, max_tokens=64, temperature=0)
    assert result.finish_reason == "eos" and result.tokens[-1] == 2  # <|im_end|>
    assert "<|im_end|>" not in result.text and result.text.strip()
