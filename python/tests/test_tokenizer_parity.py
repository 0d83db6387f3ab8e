"""Byte-level BPE parity with the Hugging Face `tokenizers` package.

For each pre-tokenizer family (GPT-2, Llama 3, Qwen2) a small vocabulary is trained at test time
with the package's BPE trainer, saved as tokenizer.json, and written again as a GGUF file (with
the `gguf` package) carrying the same tokens, types and merges. Our tokenizer is reached through
the CLI (`sitsrt tokenize FILE --batch --special`, one process per file) and must give the
package's ids on a table of tricky strings through both load paths.
"""

import json
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

# The published pre-tokenizer patterns (Llama 3's and Qwen2's tokenizer.json).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# family -> GGUF tokenizer.ggml.pre
FAMILIES = {"gpt2": "gpt2", "llama3": "llama-bpe", "qwen2": "qwen2"}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<user_tag>"]  # a non-special added token (user-defined in GGUF)

CORPUS = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "It's what we'd've done; they're sure you'll see. I'm HERE, DON'T go! We've 12 apples and 3456 pears.",
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text]  # 42\n\tif x != y: pass\n",
    "The year 2024 had 365 days; pi is 3.14159 and e is 2.71828. Call 555-0123 now!!!",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3068\u4e2d\u6587\u5b57\u7b26\uff0c\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8.",
    "Emoji time \U0001F600\U0001F389 \U0001F469\u200d\U0001F467 caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "    indented\n\n\nblank lines\r\n\r\nwindows \t\ttabs   spaces  ",
    "<html><body class=\"main\">Hello &amp; welcome</body></html> {\"key\": [1, 2, 3]}",
] * 20

TRICKY = [
    "Hello world",
    "I'm can't we'll they've she'd he's IT'S don't DON'T 'll'LL",
    "1234567890 3.14159 1,000,000 x=12345 007",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587\u5b57\u7b26 \ud55c\uad6d\uc5b4",
    "emoji \U0001F600\U0001F389\U0001F469\u200d\U0001F467 flags \U0001F1EB\U0001F1F7",
    "def f(x):\n    return x**2  # square\n\tif a != b: pass\n",
    "  leading and trailing spaces  ",
    "\n\n\nnewlines\r\n\r\nwindows",
    "tabs\t\tand  \t mixed \n \n ",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|endoftext|><|endoftext|>",
    "a<user_tag>b <user_tag> <|im_end|>x",
    "<|im_start <|im_end|| <|endof",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "x" * 60,
    "",
    " ",
    "\u2115\u00bd\u216b \u0663\u0664\u0665 numbers \u00b2\u00b3",
    "a\u00a0b\u2009c\u3000d\u200be",
    "MiXeD CaSe'S 'S 'Ll",
    "!!!???... ---- ____ ////",
    "<html><body>Hello &amp; welcome</body></html>",
]


def train(family: str) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=(family == "llama3")))
    if family == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pattern = LLAMA3_PATTERN if family == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if family == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens(ADDED)
    return tok


def write_gguf(tok: Tokenizer, path, pre: str) -> None:
    spec = json.loads(tok.to_str())
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * (max(vocab.values()) + 1)
    for piece, i in vocab.items():
        tokens[i] = piece
    assert None not in tokens
    types = [1] * len(tokens)  # normal
    for added in spec["added_tokens"]:
        types[added["id"]] = 3 if added["special"] else 4  # control / user-defined
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in spec["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def our_ids(cli: str, path, texts: list[str]) -> list[dict]:
    run = subprocess.run([cli, "tokenize", str(path), "--batch", "--special"], input=json.dumps(texts),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def trained(request, tmp_path_factory):
    family = request.param
    folder = tmp_path_factory.mktemp(family)
    tok = train(family)
    tok.save(str(folder / "tokenizer.json"))
    write_gguf(tok, folder / "vocab.gguf", FAMILIES[family])
    return family, tok, folder


@pytest.mark.parametrize("load_path", ["tokenizer.json", "vocab.gguf"])
def test_ids_match_hugging_face(cli, trained, load_path):
    family, tok, folder = trained
    ours = our_ids(cli, folder / load_path, TRICKY)
    for text, got in zip(TRICKY, ours):
        expected = tok.encode(text, add_special_tokens=False).ids
        assert got["ids"] == expected, f"{family} via {load_path}: {text!r}"


def test_decode_round_trips(cli, trained):
    family, tok, folder = trained
    plain = [t for t in TRICKY if "<" not in t]
    for load_path in ("tokenizer.json", "vocab.gguf"):
        for text, got in zip(plain, our_ids(cli, folder / load_path, plain)):
            assert got["decoded"] == text, f"{family} via {load_path}: {text!r}"
            assert tok.decode(got["ids"]) == text


def test_malformed_tokenizer_json_names_the_key(cli, trained, tmp_path):
    _, tok, _ = trained
    spec = json.loads(tok.to_str())
    del spec["model"]["merges"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    run = subprocess.run([cli, "tokenize", str(tmp_path / "tokenizer.json"), "--text", "x"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1
    assert "model.merges" in run.stderr and "tokenizer.json" in run.stderr


def train_sentencepiece_style() -> Tokenizer:
    """A SentencePiece-style BPE as Llama 2 ships it in tokenizer.json: U+2581 for spaces
    (Metaspace), <0xNN> byte-fallback tokens, rank-ordered merges that never cross a word."""
    metaspace = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.pre_tokenizer = metaspace
    base.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=800, min_frequency=1, show_progress=False,
                                                         special_tokens=["<unk>", "<s>", "</s>"]))
    spec = json.loads(base.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.pre_tokenizer = metaspace
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return tok


def test_sentencepiece_style_tokenizer_json_matches_hugging_face(cli, tmp_path):
    # tokenizer.json only: the package writes no SentencePiece GGUF scores. Special-token
    # strings are left out (Hugging Face prefixes U+2581 to every text between added tokens,
    # llama.cpp and we only after a special token; see docs/tokenizers.md).
    tok = train_sentencepiece_style()
    tok.save(str(tmp_path / "tokenizer.json"))
    texts = [t for t in TRICKY if "<" not in t]
    ours = our_ids(cli, tmp_path / "tokenizer.json", texts)
    for text, got in zip(texts, ours):
        assert got["ids"] == tok.encode(text, add_special_tokens=False).ids, repr(text)
    assert any(id_ >= 0 and tok.id_to_token(id_).startswith("<0x") for got in ours for id_ in got["ids"]), \
        "the table should exercise byte fallback"
