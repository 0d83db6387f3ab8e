"""Every tokenizer.ggml.pre name llama.cpp maps, against Hugging Face `tokenizers`.

For each name a GGUF is written (`gguf` package) with that tokenizer.ggml.pre and a byte-level BPE
vocabulary: SmolLM2-135M-Instruct's (read from build/models, fetched by scripts/fetch-models.sh;
skipped with a message when absent) and a small one trained here. The reference is a `tokenizers`
Tokenizer with the same vocabulary and merges whose pre-tokenizer is a Sequence of
Split(Regex, "isolated") for the name's regexes (llama.cpp's regex_exprs for its
LLAMA_VOCAB_PRE_TYPE, transcribed below independently of the C++ table) and ByteLevel without its
own regex. `sitsrt tokenize FILE --batch` must give the reference's ids on a corpus of code, digit
runs, CJK, emoji sequences, combining marks, whitespace runs, contractions and punctuation.
Invalid UTF-8 goes in as {"hex": ...}; as llama.cpp, each byte outside a well-formed character
stands for U+FFFD, so the reference is the package on the text with those replacements.
The names llama.cpp runs as BPE over raw UTF-8 (Gemma 4's, Sarvam's) are checked against the
package's byte_fallback BPE on a SentencePiece-style vocabulary trained here.
"""

import json
import os
import pathlib
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", REPO / "build" / "models"))
SMOLLM = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

# --- llama.cpp's regex sets (src/llama-vocab.cpp, llm_tokenizer_bpe), tokenizer.json originals
# where llama.cpp quotes the pattern it adapted for std::regex.
CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{CONTRACTIONS}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CJK_KANA = r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+"
CJK_HANGUL = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+"
ASCII_PUNCT = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"""
DEEPSEEK3_WORDS = (ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PORO = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+"
CASED = ("A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}"
         "\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}"
         "\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
         "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"
         "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}"
         "\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
         "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
         "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
         "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
         "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
         "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
         "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
         "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}")
NOT_HAN_UPPER = r"(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
NOT_HAN_LOWER = r"(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])"
SPELLED = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

SETS = {
    "DEFAULT": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "GPT2": [GPT2],
    "GPT2_PUBLISHED": [GPT2 + r"|\s+"],
    "LLAMA3": [LLAMA3],
    "QWEN2": [QWEN2],
    "QWEN35": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+"],
    "JAIS2": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}"],
    "DEEPSEEK_LLM": [r"[\r\n]", r"\s?[" + CASED + r"]+",
                     r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+", r"\s+$",
                     CJK_HANGUL, r"\p{N}+"],
    "DEEPSEEK3": [r"\p{N}{1,3}", CJK_KANA, DEEPSEEK3_WORDS],
    "SPARK2_5": [r"\p{N}{1,3}", CJK_KANA,
                 ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+",
                 r"\p{N}"],
    "YOUTU": [r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}"
              r"\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|" + CJK_KANA,
              rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{SPELLED}?|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{SPELLED}?"
              r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "DEEPSEEK_CODER": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_HANGUL, r"\p{N}"],
    "FALCON": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "STARCODER": [r"\p{N}", GPT2],
    "PORO": [PORO],
    "VIKING": [PORO, r"\p{N}"],
    "TEKKEN": [rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*"
               r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "CHAMELEON": [r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2],
    "GPT4O": [GPT4O],
    "TINY_AYA": [r"\d{1,3}(?=(?:\d{3})*\b)", GPT4O],
    "KIMI_K2": [rf"[\p{{Han}}]+|[^\r\n\p{{L}}\p{{N}}]?{NOT_HAN_UPPER}*{NOT_HAN_LOWER}+{CONTRACTIONS}?"
                rf"|[^\r\n\p{{L}}\p{{N}}]?{NOT_HAN_UPPER}+{NOT_HAN_LOWER}*{CONTRACTIONS}?"
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "SUPERBPE": [r"\p{N}+", r"(?=(\d{3})+(?!\d))"],
    "BAILINGMOE": [r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]"
                   r"|\s+(?!\S)|\s+"],
    "SEED_CODER": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "UFAKZEKA": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "AFMOE": [r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))",
              r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F}"
              r"\x{2F00}-\x{2FDF}\x{0E00}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F}"
              r"\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+", DEEPSEEK3_WORDS],
    "LAGUNA": [r"[^\n]+|[\n]+",
               SPELLED + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "EXAONE_MOE": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
                   r"|\s*[\r\n]|\s+(?!\S)|\s+"],
    "MINICPM5": [r"\p{N}{1,3}",
                 CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}

# name -> (regex set, ignore_merges), from llama_vocab::impl::load ("gpt2" is ours: GPT-2's pattern).
IGNORE = True
NAMES = {
    "default": ("DEFAULT", False), "gpt2": ("GPT2_PUBLISHED", False), "minicpm5": ("MINICPM5", IGNORE),
    **{n: ("LLAMA3", IGNORE) for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                       "midm-2.0", "lfm2", "jina-v5-nano")},
    "deepseek-llm": ("DEEPSEEK_LLM", False), "deepseek-coder": ("DEEPSEEK_CODER", False),
    "deepseek-v3": ("DEEPSEEK3", False), "spark2_5": ("SPARK2_5", False), "youtu": ("YOUTU", IGNORE),
    "falcon": ("FALCON", False), "mpt": ("GPT2", False), "starcoder": ("STARCODER", False),
    **{n: ("GPT2", False) for n in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                                    "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                                    "olmo", "jais", "exaone4", "trillion", "granite-docling")},
    "jais-2": ("JAIS2", False), "refact": ("STARCODER", False), "command-r": ("STARCODER", False),
    **{n: ("QWEN2", False) for n in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan",
                                     "grok-2", "solar-open")},
    "qwen35": ("QWEN35", False), "dbrx": ("LLAMA3", False), "smaug-bpe": ("LLAMA3", False),
    "poro-chat": ("PORO", False), "bloom": ("PORO", False), "gpt3-finnish": ("PORO", False),
    "glm4": ("LLAMA3", False), "chatglm-bpe": ("LLAMA3", False), "viking": ("VIKING", False),
    "tekken": ("TEKKEN", IGNORE),
    **{n: ("STARCODER", False) for n in ("smollm", "codeshell", "exaone", "minerva-7b", "mellum2")},
    "exaone-moe": ("EXAONE_MOE", False), "chameleon": ("CHAMELEON", False),
    **{n: ("GPT4O", False) for n in ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")},
    "granite-embed-multi-97m": ("GPT4O", IGNORE), "tiny_aya": ("TINY_AYA", False), "cohere2moe": ("TINY_AYA", False),
    "superbpe": ("SUPERBPE", False),
    **{n: ("BAILINGMOE", False) for n in ("bailingmoe", "bailingmoe2", "llada-moe")},
    "seed-coder": ("SEED_CODER", False),
    **{n: ("DEEPSEEK3", False) for n in ("hunyuan-dense", "hy_v4", "joyai-llm")},
    "kimi-k2": ("KIMI_K2", False), "ufakzeka": ("UFAKZEKA", False), "afmoe": ("AFMOE", False),
    "laguna": ("LAGUNA", False),
}
# BPE over raw UTF-8 (llama.cpp's byte_encode = false): name -> (regex, spaces as U+2581).
RAW_UTF8 = {"gemma4": (r"[^\n]+|[\n]+", True), "granite-embed-multi-311m": (r"[^\n]+|[\n]+", True),
            "sarvam-moe": (r"[^\n]+|[\n]+", True), "whitespace": (r"\S+", False)}

CORPUS = [
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text]  # 42\n\tif x != y: pass\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }  // C++\r\n#include <vector>\r\n",
    "1234567890 3.14159 1,000,000 x=12345 007 99999999999999999999 \u0663\u0664\u0665\u0666\u0667",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u5b57\u7b26\uff0c\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\u3002",
    "emoji \U0001F600\U0001F389 \U0001F469\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 flags \U0001F1EB\U0001F1F7"
    "\U0001F1EF\U0001F1F5 \U0001F44D\U0001F3FD \u2764\ufe0f",
    "caf\u00e9 cafe\u0301 na\u0131\u0308ve \u0915\u094d\u0937 \u0e01\u0e34\u0e19 \u00c5ngstr\u00f6m \u1e9e\u00df",
    "  leading   and\t\ttrailing \t mixed \n \n \r\n\r\n\n\n\n  x  ",
    "I'M HERE, DON'T GO! IT'S WE'VE THEY'LL SHE'D 'll'LL'Re o'clock rock'n'roll",
    "!!!???... ---- ____ //// ~~~ +++ ==> <=> |||| $$$ ^^^ ``` ''' \"\"\" \u2026\u2026 \u3002\u3001\uff01",
    "HelloWorld camelCaseName XMLHttpRequest \u00c9t\u00e9\u00c9T\u00c9 \u0394\u03b5\u03bb\u03c4\u03b1 \u041f\u0440\u0438\u0432\u0435\u0442",
    "<sentinel:12> IMGIMGABCZ x<html><body class=\"main\">Hello &amp; welcome</body></html>",
    "",
    " ",
    "\u00a0\u2009\u3000\u200b\u2028\u0085 nbsp",
]
# Invalid UTF-8 (through {"hex": ...}): lone continuation bytes, truncated sequences, overlong
# forms, surrogates, bytes that never occur.
INVALID = [b"ab\xffcd", b"\xe2\x82 euro", b"\xc0\x80 overlong", b"\xed\xa0\x80 surrogate", b"x\x80\x80\x80y 12",
           b"\xf0\x9f\x98 cut emoji \xf0\x9f\x98\x80", b"\xf5\xfe\xff"]


def with_replacements(data: bytes) -> str:
    """llama.cpp's reading of bytes: each byte outside a well-formed character is U+FFFD."""
    out, pos = [], 0
    while pos < len(data):
        lead = data[pos]
        size = 1 if lead < 0x80 else 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else \
            4 if 0xF0 <= lead <= 0xF4 else 0
        try:
            out.append(data[pos:pos + size].decode("utf-8") if size else None)
        except UnicodeDecodeError:
            out.append(None)
        if out[-1] is None:
            out[-1], size = "\ufffd", 1
        pos += size
    return "".join(out)


def read_vocab(path: pathlib.Path):
    reader = gguf.GGUFReader(str(path))
    field = reader.fields
    return (field["tokenizer.ggml.tokens"].contents(), field["tokenizer.ggml.token_type"].contents(),
            field["tokenizer.ggml.merges"].contents())


def train_vocab():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 5, trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in spec["model"]["merges"]]
    return tokens, [1] * len(tokens), merges


def write_gguf(path, pre, tokens, types, merges):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_add_bos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class Reference:
    """The package's BPE on the vocabulary, with the pre-tokenizer of a regex set."""

    def __init__(self, tokens, merges):
        vocab = {piece: i for i, piece in enumerate(tokens)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        self.models = {flag: models.BPE(vocab=vocab, merges=pairs, ignore_merges=flag) for flag in (False, True)}
        self.cache = {}

    def tokenizer(self, regex_set, ignore_merges):
        key = (regex_set, ignore_merges)
        if key not in self.cache:
            tok = Tokenizer(self.models[ignore_merges])
            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in SETS[regex_set]]
                + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            self.cache[key] = tok
        return self.cache[key]


@pytest.fixture(scope="module", params=["trained", "SmolLM2"])
def vocabulary(request, tmp_path_factory):
    if request.param == "SmolLM2":
        if not SMOLLM.is_file():
            pytest.skip(f"skipped: {SMOLLM} is absent (scripts/fetch-models.sh fetches it from PyPI)")
        tokens, types, merges = read_vocab(SMOLLM)
    else:
        tokens, types, merges = train_vocab()
    return request.param, tokens, types, merges, Reference(tokens, merges), tmp_path_factory.mktemp(request.param)


def our_ids(cli, path, items):
    run = subprocess.run([cli, "tokenize", str(path), "--batch"], input=json.dumps(items), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return [entry["ids"] for entry in json.loads(run.stdout)]


@pytest.mark.parametrize("name", sorted(NAMES))
def test_pre_tokenizer_matches_hugging_face(cli, vocabulary, name):
    label, tokens, types, merges, reference, folder = vocabulary
    path = folder / f"{name}.gguf"
    write_gguf(path, name, tokens, types, merges)
    regex_set, ignore_merges = NAMES[name]
    tok = reference.tokenizer(regex_set, ignore_merges)
    items = CORPUS + [{"hex": data.hex()} for data in INVALID]
    texts = CORPUS + [with_replacements(data) for data in INVALID]
    for text, got in zip(texts, our_ids(cli, path, items)):
        assert got == tok.encode(text, add_special_tokens=False).ids, f"{name} ({regex_set}) on {label}: {text!r}"


def test_ignore_merges_where_llama_cpp_sets_it(cli, vocabulary):
    # Whole-word pieces no merge reaches: with ignore_merges (Llama 3's "llama-bpe") a pre-token
    # that is a piece is one id; with Llama 3's regex but not its flag ("dbrx") it is merged.
    label, tokens, types, merges, reference, folder = vocabulary
    split = reference.tokenizer("LLAMA3", False).pre_tokenizer
    known = set(tokens)
    words = [w for t in CORPUS for w, _ in split.pre_tokenize_str(t) if len(w) > 2 and w not in known]
    extra = sorted(set(words))[:8]
    tokens, types = tokens + extra, list(types) + [1] * len(extra)
    reference = Reference(tokens, merges)
    on = [reference.tokenizer("LLAMA3", True).encode(t, add_special_tokens=False).ids for t in CORPUS]
    off = [reference.tokenizer("LLAMA3", False).encode(t, add_special_tokens=False).ids for t in CORPUS]
    assert on != off, f"the extra pieces should matter on {label}"
    for name, expected in (("llama-bpe", on), ("dbrx", off)):
        path = folder / f"flag-{name}.gguf"
        write_gguf(path, name, tokens, types, merges)
        assert our_ids(cli, path, CORPUS) == expected, name


def test_unknown_names_are_refused_listing_the_supported(cli, tmp_path):
    tokens, types, merges = train_vocab()
    path = tmp_path / "v.gguf"
    write_gguf(path, "no-such-pre", tokens, types, merges)
    run = subprocess.run([cli, "tokenize", str(path), "--text", "x"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "tokenizer.ggml.pre" in run.stderr and "'no-such-pre'" in run.stderr and str(path) in run.stderr
    assert all(f" {n}," in run.stderr or run.stderr.rstrip().endswith(n) for n in list(NAMES) + list(RAW_UTF8))


def train_raw_utf8(escape: bool):
    """A SentencePiece-style BPE: pieces are UTF-8 (U+2581 for spaces when `escape`), <0xNN>
    byte fallback; returns the package's tokenizer and the GGUF arrays."""
    base = Tokenizer(models.BPE())
    if escape:
        base.normalizer = normalizers.Replace(" ", "\u2581")
    base.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
    base.train_from_iterator(CORPUS * 5, trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False))
    spec = json.loads(base.to_str())
    vocab = spec["model"]["vocab"]
    # A few characters of the corpus stay without a piece, for byte fallback.
    for rare in ("\U0001F466", "\u0937", "\u2028"):
        vocab.pop(rare, None)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["model"]["merges"]]
    merges = [m for m in merges if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    # GGUF writes a merge as "left right": one with spaces inside its parts would be ambiguous.
    merges = [m for m in merges if " " not in m[0] + m[1]]
    pieces = sorted(vocab, key=vocab.get)
    pieces += [f"<0x{b:02X}>" for b in range(256)]
    vocab = {p: i for i, p in enumerate(pieces)}
    types = [6 if p.startswith("<0x") and len(p) == 6 else 1 for p in pieces]
    return vocab, pieces, types, merges


@pytest.mark.parametrize("name", sorted(RAW_UTF8) + ["model=gemma4"])
def test_raw_utf8_bpe_matches_hugging_face(cli, tmp_path, name):
    pre = "gemma4" if name == "model=gemma4" else name
    regex, escape = RAW_UTF8[pre]
    vocab, pieces, types, merges = train_raw_utf8(escape)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True))
    if escape:
        tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(regex), behavior="isolated")
    path = tmp_path / "raw.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gemma4" if name == "model=gemma4" else "gpt2")
    writer.add_tokenizer_pre("default" if name == "model=gemma4" else pre)
    writer.add_token_list(pieces)
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in merges])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    items = CORPUS + [{"hex": data.hex()} for data in INVALID]
    texts = CORPUS + [with_replacements(data) for data in INVALID]
    run = subprocess.run([cli, "tokenize", str(path), "--batch"], input=json.dumps(items), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    fallback = 0
    for text, entry in zip(texts, got):
        expected = tok.encode(text, add_special_tokens=False).ids
        assert entry["ids"] == expected, f"{name}: {text!r}"
        assert entry["decoded"] == text, f"{name}: {text!r}"
        fallback += sum(types[i] == 6 for i in expected)
    assert fallback > 0, "the corpus should exercise byte fallback"
