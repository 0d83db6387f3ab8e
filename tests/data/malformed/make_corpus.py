#!/usr/bin/env python3
"""Writes the malformed-model corpus: one bad file (or folder) per defect, named for it.

    python3 tests/data/malformed/make_corpus.py build/bin/sitsrt

Each GGUF case starts from `valid_base.gguf` (a tiny random llama written by `sitsrt make-model`)
and breaks exactly one thing; each safetensors case is written from scratch. expected.tsv lists,
per case, the loader to use, the sitsrt::ErrorCode and a substring the message must contain; the
C++ test tests/unit/malformed_corpus_test.cpp checks them. The files are committed, so the test
needs neither Python nor this script; rerun it only to change the corpus. Standard library only.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# GGUF value types (specification numbering).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
          U64: "<Q", I64: "<q", F64: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def enc_string(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(s)) + s


def enc_value(t, v):
    if t == STRING:
        return enc_string(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(enc_value(et, i) for i in items)
    return struct.pack(SCALAR[t], v)


class Gguf:
    """A parsed GGUF image that can be re-serialized after edits (alignment 32)."""

    def __init__(self, data):
        r = Reader(data)
        assert data[:4] == b"GGUF"
        r.pos = 4
        self.version = r.take("<I")
        n_tensors, n_kv = r.take("<Q"), r.take("<Q")
        self.kv = []
        for _ in range(n_kv):
            key = r.string().decode()
            t = r.take("<I")
            self.kv.append([key, t, r.value(t)])
        self.tensors = []
        for _ in range(n_tensors):
            name = r.string().decode()
            dims = [r.take("<Q") for _ in range(r.take("<I"))]
            self.tensors.append([name, dims, r.take("<I"), r.take("<Q")])
        self.data_start = (r.pos + 31) // 32 * 32
        self.data = data[self.data_start:]

    def get(self, key):
        return next(kv for kv in self.kv if kv[0] == key)

    def tensor(self, name):
        return next(t for t in self.tensors if t[0] == name)

    def header(self, n_tensors=None, n_kv=None):
        out = b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors) if n_tensors is None else n_tensors,
                                    len(self.kv) if n_kv is None else n_kv)
        for key, t, v in self.kv:
            out += enc_string(key) + struct.pack("<I", t) + enc_value(t, v)
        for name, dims, t, off in self.tensors:
            out += enc_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            out += struct.pack("<IQ", t, off)
        return out

    def bytes(self, **counts):
        h = self.header(**counts)
        return h + b"\0" * ((32 - len(h) % 32) % 32) + self.data


def safetensors(entries, metadata=None, raw_header=None, extra=b"", pad=0):
    """entries: list of (name, dtype, shape, payload bytes, offsets or None for automatic)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload, offsets in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": offsets if offsets is not None else [len(data), len(data) + len(payload)]}
        data += payload
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    text += b" " * pad
    return struct.pack("<Q", len(text)) + text + data + extra


def f32(n, seed=1.0):
    return b"".join(struct.pack("<f", seed + 0.25 * i) for i in range(n))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    cli = sys.argv[1]
    for entry in os.listdir(HERE):
        path = os.path.join(HERE, entry)
        if entry.startswith(("gguf_", "st_", "hf_")):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    base_path = os.path.join(HERE, "valid_base.gguf")
    subprocess.run([cli, "make-model", "-o", base_path, "--dim", "32", "--layers", "1", "--heads", "2",
                    "--kv-heads", "1", "--ffn", "32", "--vocab", "260", "--type", "q8_0", "--seed", "7", "-t", "1",
                    "--force"],
                   check=True, stdout=subprocess.DEVNULL)
    base = open(base_path, "rb").read()
    cases = []  # (file, loader, code, message substring)

    def gguf_case(name, data, code, message):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
        cases.append((name, "engine", code, message))

    def edited(edit, **counts):
        g = Gguf(base)
        edit(g)
        return g.bytes(**counts)

    g = Gguf(base)
    # --- container ----------------------------------------------------------------------------
    gguf_case("gguf_bad_magic.gguf", b"GGUX" + base[4:], "invalid_model", "not a GGUF file")
    gguf_case("gguf_version_1.gguf", base[:4] + struct.pack("<I", 1) + base[8:], "unsupported", "version 1")
    gguf_case("gguf_version_99.gguf", base[:4] + struct.pack("<I", 99) + base[8:], "unsupported", "version 99")
    gguf_case("gguf_truncated_in_header.gguf", base[:10], "invalid_model", "truncated")
    gguf_case("gguf_truncated_in_metadata.gguf", base[:200], "invalid_model", "truncated")
    gguf_case("gguf_truncated_tensor_data.gguf", base[:-100], "invalid_model", "output.weight")
    gguf_case("gguf_tensor_count_huge.gguf", g.bytes(n_tensors=1 << 62), "invalid_model", "tensor count")
    gguf_case("gguf_metadata_count_huge.gguf", g.bytes(n_kv=1 << 62), "invalid_model", "metadata")
    first_key = g.kv[0][0]
    bad = bytearray(base)
    struct.pack_into("<Q", bad, 24, 1 << 60)  # length of the first key
    gguf_case("gguf_key_length_huge.gguf", bytes(bad), "invalid_model", "length")

    # tokenizer.ggml.tokens declares a length far past the end of the file.
    data = base
    marker = enc_string("tokenizer.ggml.tokens") + struct.pack("<I", ARRAY) + struct.pack("<I", STRING)
    at = data.index(marker) + len(marker)
    data = data[:at] + struct.pack("<Q", 1 << 61) + data[at + 8:]
    gguf_case("gguf_array_length_huge.gguf", data, "invalid_model", "tokenizer.ggml.tokens")

    data = base
    marker = enc_string(first_key)
    at = data.index(marker) + len(marker)
    gguf_case("gguf_unknown_value_type.gguf", data[:at] + struct.pack("<I", 99) + data[at + 4:], "invalid_model",
              first_key)

    def set_tensor(name, field, value):
        def edit(gg):
            gg.tensor(name)[field] = value
        return edit
    gguf_case("gguf_tensor_type_unknown.gguf", edited(set_tensor("output.weight", 2, 1000)), "invalid_model",
              "output.weight")
    gguf_case("gguf_tensor_type_iq1_s.gguf", edited(set_tensor("output.weight", 2, 19)), "unsupported",
              "output.weight")
    gguf_case("gguf_tensor_offset_past_end.gguf", edited(set_tensor("output.weight", 3, 1 << 40)), "invalid_model",
              "output.weight")
    off = g.tensor("output.weight")[3]
    gguf_case("gguf_tensor_offset_misaligned.gguf", edited(set_tensor("output.weight", 3, off + 4)),
              "invalid_model", "output.weight")
    gguf_case("gguf_tensor_five_dims.gguf", edited(set_tensor("blk.0.attn_norm.weight", 1, [8, 2, 1, 1, 2])),
              "invalid_model", "blk.0.attn_norm.weight")
    gguf_case("gguf_tensor_dim_zero.gguf", edited(set_tensor("blk.0.attn_norm.weight", 1, [0])), "invalid_model",
              "blk.0.attn_norm.weight")
    gguf_case("gguf_tensor_elements_overflow.gguf",
              edited(set_tensor("blk.0.attn_norm.weight", 1, [1 << 40, 1 << 40])), "invalid_model",
              "blk.0.attn_norm.weight")
    gguf_case("gguf_tensor_rows_not_whole_blocks.gguf", edited(set_tensor("output.weight", 1, [30, 260])),
              "invalid_model", "output.weight")

    def duplicate_tensor(gg):
        gg.tensor("blk.0.attn_k.weight")[0] = "blk.0.attn_q.weight"
    gguf_case("gguf_duplicate_tensor_name.gguf", edited(duplicate_tensor), "invalid_model", "blk.0.attn_q.weight")

    def duplicate_key(gg):
        gg.kv.append(list(gg.get("llama.block_count")))
    gguf_case("gguf_duplicate_metadata_key.gguf", edited(duplicate_key), "invalid_model", "llama.block_count")

    def alignment(value):
        def edit(gg):
            gg.kv.append(["general.alignment", U32, value])
        return edit
    gguf_case("gguf_alignment_not_power_of_two.gguf", edited(alignment(24)), "invalid_model", "general.alignment")
    gguf_case("gguf_alignment_zero.gguf", edited(alignment(0)), "invalid_model", "general.alignment")

    # --- model level (the file parses; the model it describes is inconsistent) -------------------
    def drop_key(key):
        def edit(gg):
            gg.kv = [kv for kv in gg.kv if kv[0] != key]
        return edit

    def set_key(key, t, value):
        def edit(gg):
            kv = gg.get(key)
            kv[1], kv[2] = t, value
        return edit
    gguf_case("gguf_missing_architecture.gguf", edited(drop_key("general.architecture")), "invalid_model",
              "general.architecture")
    gguf_case("gguf_unknown_architecture.gguf", edited(set_key("general.architecture", STRING, "gpt-j-unknown")),
              "unsupported", "gpt-j-unknown")
    # A key that is present but 0 is reported as such, not as missing.
    gemma_path = os.path.join(HERE, "gemma3_base.tmp.gguf")
    subprocess.run([cli, "make-model", "-o", gemma_path, "--arch", "gemma3", "--dim", "32", "--layers", "2",
                    "--heads", "2", "--kv-heads", "1", "--ffn", "32", "--vocab", "260", "--type", "q8_0", "--seed", "7",
                    "-t", "1", "--force"], check=True, stdout=subprocess.DEVNULL)
    gemma = Gguf(open(gemma_path, "rb").read())
    os.remove(gemma_path)
    gemma.get("gemma3.attention.sliding_window")[2] = 0
    gguf_case("gguf_gemma3_sliding_window_zero.gguf", gemma.bytes(), "invalid_model",
              "'gemma3.attention.sliding_window' = 0")
    # Strings from the file reach the message escaped: a NUL does not cut it, ESC does not reach a terminal.
    gguf_case("gguf_architecture_control_chars.gguf",
              edited(set_key("general.architecture", STRING, b"lla\x00ma\x1b[2J")), "unsupported",
              "'lla\\0ma\\x1B[2J' is not supported")
    gguf_case("gguf_architecture_wrong_type.gguf", edited(set_key("general.architecture", U32, 7)),
              "invalid_model", "general.architecture")
    gguf_case("gguf_missing_block_count.gguf", edited(drop_key("llama.block_count")), "invalid_model",
              "llama.block_count")
    gguf_case("gguf_head_count_zero.gguf", edited(set_key("llama.attention.head_count", U32, 0)), "invalid_model",
              "llama.attention.head_count")
    gguf_case("gguf_head_count_not_dividing_width.gguf", edited(set_key("llama.attention.head_count", U32, 3)),
              "invalid_model", "head_count 3")
    gguf_case("gguf_kv_heads_not_dividing_heads.gguf",
              edited(set_key("llama.attention.head_count_kv", U32, 3)), "invalid_model", "head_count_kv")
    gguf_case("gguf_block_count_larger_than_tensors.gguf", edited(set_key("llama.block_count", U32, 2)),
              "invalid_model", "blk.1.")

    def rename(old, new):
        def edit(gg):
            gg.tensor(old)[0] = new
        return edit
    gguf_case("gguf_missing_tensor_attn_q.gguf", edited(rename("blk.0.attn_q.weight", "blk.0.attn_query.weight")),
              "invalid_model", "blk.0.attn_q.weight")
    gguf_case("gguf_wrong_shape_ffn_down.gguf", edited(set_tensor("blk.0.ffn_down.weight", 1, [32, 16])),
              "invalid_model", "blk.0.ffn_down.weight")
    gguf_case("gguf_quantized_norm.gguf", edited(set_tensor("blk.0.attn_norm.weight", 2, 8)), "unsupported",
              "blk.0.attn_norm.weight")

    def short_vocab(gg):
        kv = gg.get("tokenizer.ggml.tokens")
        kv[2] = (kv[2][0], kv[2][1][:200])
    gguf_case("gguf_vocab_shorter_than_embedding.gguf", edited(short_vocab), "invalid_model", "vocab")
    gguf_case("gguf_bos_id_out_of_range.gguf", edited(set_key("tokenizer.ggml.bos_token_id", U32, 99999)),
              "invalid_model", "bos")
    gguf_case("gguf_tokenizer_model_unknown.gguf", edited(set_key("tokenizer.ggml.model", STRING, "wordpiece-x")),
              "unsupported", "tokenizer.ggml.model")

    # --- safetensors ------------------------------------------------------------------------------
    def st_case(name, data, message, code="invalid_model"):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
        cases.append((name, "safetensors", code, message))

    w = ("model.embed_tokens.weight", "F32", [4, 8], f32(32), None)
    n = ("model.norm.weight", "BF16", [8], b"\x80\x3f" * 8, None)
    st_case("st_valid_base.safetensors", safetensors([w, n], metadata={"format": "pt"}), "", code="none")
    st_case("st_too_short.safetensors", b"\x10\0\0\0", "too short")
    st_case("st_header_length_past_end.safetensors", struct.pack("<Q", 4096) + b'{"a":1}', "past the end")
    st_case("st_header_length_over_limit.safetensors", struct.pack("<Q", 1 << 40) + b"{}", "limit")
    st_case("st_header_not_an_object.safetensors", safetensors([], raw_header=b"[1, 2, 3]"), "'{'")
    st_case("st_header_invalid_json.safetensors", safetensors([], raw_header=b'{"a": [1, 2'), "not valid JSON")
    st_case("st_header_invalid_utf8.safetensors", safetensors([], raw_header=b'{"a\xff\xfe": 1}'), "not valid JSON")
    st_case("st_header_duplicate_tensor.safetensors",
            safetensors([], raw_header=b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
                                       b'"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                        extra=f32(1)), "'x' twice")
    st_case("st_unknown_dtype.safetensors", safetensors([("t", "F128", [2], f32(8), None)]), "'F128'")
    st_case("st_shape_negative.safetensors",
            safetensors([], raw_header=b'{"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}',
                        extra=f32(1)), "shape[0]")
    st_case("st_shape_float.safetensors",
            safetensors([], raw_header=b'{"t": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}',
                        extra=f32(1)), "shape[0]")
    st_case("st_shape_overflow.safetensors",
            safetensors([("t", "F32", [1 << 40, 1 << 40], f32(1), [0, 4])]), "overflows")
    st_case("st_shape_too_many_dims.safetensors", safetensors([("t", "F32", [1] * 9, f32(1), None)]), "dimensions")
    st_case("st_offsets_size_mismatch.safetensors", safetensors([("t", "F32", [3], f32(4), None)]), "needs 12 bytes")
    st_case("st_offsets_end_before_begin.safetensors", safetensors([("t", "F32", [1], f32(1), [8, 4])],
                                                                   extra=f32(1)), "end before begin")
    st_case("st_offsets_overlap.safetensors",
            safetensors([("a", "F32", [2], f32(2), [0, 8]), ("b", "F32", [2], b"", [4, 12])], extra=f32(1)),
            "overlaps")
    st_case("st_offsets_gap.safetensors",
            safetensors([("a", "F32", [1], f32(1), [0, 4]), ("b", "F32", [1], f32(2), [8, 12])]), "gap")
    st_case("st_data_past_end.safetensors", safetensors([("t", "F32", [4], f32(2), [0, 16])]), "past the end")
    st_case("st_trailing_bytes.safetensors", safetensors([w], extra=b"\x01" * 12), "unaccounted")
    st_case("st_metadata_not_strings.safetensors", safetensors([w], metadata={"format": 3}), "__metadata__")
    st_case("st_tensor_unknown_field.safetensors",
            safetensors([], raw_header=b'{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}',
                        extra=f32(1)), "unknown field 'x'")
    st_case("st_offsets_missing.safetensors",
            safetensors([], raw_header=b'{"t": {"dtype": "F32", "shape": [1]}}', extra=f32(1)), "data_offsets")

    def shard_dir(name, weight_map, shards, message, code="invalid_model"):
        folder = os.path.join(HERE, name)
        os.makedirs(folder)
        for shard, entries in shards.items():
            with open(os.path.join(folder, shard), "wb") as f:
                f.write(safetensors(entries))
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 1}, "weight_map": weight_map}, f)
        cases.append((name, "safetensors", code, message))
    a = ("a", "F32", [2], f32(2), None)
    b = ("b", "F32", [2], f32(2, 3.0), None)
    shard_dir("st_index_path_traversal", {"a": "../outside.safetensors"}, {}, "not a plain file name")
    shard_dir("st_index_tensor_missing_from_shard", {"a": "s1.safetensors", "b": "s1.safetensors"},
              {"s1.safetensors": [a]}, "'b'")
    shard_dir("st_index_tensor_in_wrong_shard", {"a": "s1.safetensors", "b": "s1.safetensors"},
              {"s1.safetensors": [a], "s2.safetensors": [b]}, "'s1.safetensors'")
    shard_dir("st_index_missing_shard_file", {"a": "s1.safetensors", "b": "s9.safetensors"},
              {"s1.safetensors": [a]}, "s9.safetensors", code="io")

    # --- Hugging Face directories (config.json + model.safetensors), loaded by the engine ------------
    def hf_dir(name, config, entries, message, code="invalid_model"):
        folder = os.path.join(HERE, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w" if isinstance(config, str) else "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config, indent=1))
        with open(os.path.join(folder, "model.safetensors"), "wb") as f:
            f.write(safetensors(entries, metadata={"format": "pt"}))
        cases.append((name, "engine", code, message))

    base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 1, "num_key_value_heads": 1, "vocab_size": 4, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 64, "torch_dtype": "float32"}

    def cfg(**edits):
        c = dict(base)
        for k, v in edits.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        return c

    def llama_tensors(skip=(), shapes=None, dtype="F32"):
        shapes = shapes or {}
        names = {"model.embed_tokens.weight": [4, 8], "model.norm.weight": [8], "lm_head.weight": [4, 8]}
        for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            names[f"model.layers.0.{proj}.weight"] = [8, 8]
        names["model.layers.0.input_layernorm.weight"] = [8]
        names["model.layers.0.post_attention_layernorm.weight"] = [8]
        out = []
        for i, (n, shape) in enumerate(sorted(names.items())):
            if n in skip:
                continue
            shape = shapes.get(n, shape)
            count = 1
            for d in shape:
                count *= d
            out.append((n, dtype if len(shape) == 2 else "F32", shape, f32(count, 0.01 * i), None))
        return out

    def awq_tensors(scales_shape=(1, 8)):
        """One AWQ GEMM layer set (group 8): qweight [in, out/8], qzeros [groups, out/8], scales f16."""
        out = [e for e in llama_tensors() if not e[0].endswith("_proj.weight")]
        for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            p = f"model.layers.0.{proj}."
            out.append((p + "qweight", "I32", [8, 1], struct.pack("<8I", *[0x76543210] * 8), None))
            out.append((p + "qzeros", "I32", [1, 1], struct.pack("<I", 0x88888888), None))
            n = scales_shape[0] * scales_shape[1]
            out.append((p + "scales", "F16", list(scales_shape), struct.pack(f"<{n}e", *[0.5] * n), None))
        return out

    def quantized_tensors(parts):
        """llama_tensors with every projection replaced by `parts` (name suffix, dtype, shape, bytes)."""
        out = [e for e in llama_tensors() if not e[0].endswith("_proj.weight")]
        for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            out += [(f"model.layers.0.{proj}.{suffix}", dt, shape, data, None) for suffix, dt, shape, data in parts]
        return out

    hf_dir("hf_valid_llama", base, llama_tensors(), "", code="none")
    hf_dir("hf_config_invalid_json", '{"architectures": ["LlamaForCausalLM"], "hidden_size": ', llama_tensors(),
           "not valid JSON")
    hf_dir("hf_config_not_an_object", "[1, 2]", llama_tensors(), "not a JSON object")
    # A repeated key: JSON parsers disagree on which value wins, so it is refused, naming the key.
    hf_dir("hf_config_duplicate_key", json.dumps(cfg(), indent=1)[:-2] + ',\n "hidden_size": 16\n}', llama_tensors(),
           "key 'hidden_size' appears twice")
    nested = json.dumps(cfg(rope_scaling={"rope_type": "linear", "factor": 2.0}))
    hf_dir("hf_config_duplicate_nested_key", nested.replace('"factor": 2.0', '"factor": 2.0, "factor": 4.0'),
           llama_tensors(), "key 'rope_scaling.factor' appears twice")
    hf_dir("hf_config_missing_hidden_size", cfg(hidden_size=None), llama_tensors(), "key 'hidden_size' is missing")
    hf_dir("hf_config_hidden_size_string", cfg(hidden_size="8"), llama_tensors(), "'hidden_size' must be an integer")
    hf_dir("hf_config_heads_zero", cfg(num_attention_heads=0), llama_tensors(), "'num_attention_heads' = 0")
    hf_dir("hf_config_kv_heads_not_divisor", cfg(num_attention_heads=2, num_key_value_heads=3), llama_tensors(),
           "'num_key_value_heads'")
    hf_dir("hf_config_eps_negative", cfg(rms_norm_eps=-1e-5), llama_tensors(), "'rms_norm_eps'")
    hf_dir("hf_config_architectures_missing", cfg(architectures=None), llama_tensors(), "'architectures' is missing")
    hf_dir("hf_config_unknown_architecture", cfg(architectures=["GPT2LMHeadModel"]), llama_tensors(),
           "'GPT2LMHeadModel' is not supported", code="unsupported")
    hf_dir("hf_config_rope_type_unknown", cfg(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), llama_tensors(),
           "'rope_scaling.rope_type' = 'dynamic'", code="unsupported")
    hf_dir("hf_config_llama3_rope_without_context", cfg(rope_scaling={"rope_type": "llama3", "factor": 8.0}),
           llama_tensors(), "'rope_scaling.original_max_position_embeddings' is missing")
    hf_dir("hf_config_hidden_act_gelu", cfg(hidden_act="gelu"), llama_tensors(), "'hidden_act' = 'gelu'",
           code="unsupported")
    hf_dir("hf_config_gemma3_text_config_missing", cfg(architectures=["Gemma3ForConditionalGeneration"]),
           llama_tensors(), "'text_config' is missing")
    hf_dir("hf_config_gemma3_layer_types_short",
           {"architectures": ["Gemma3ForConditionalGeneration"],
            "text_config": {**base, "architectures": None, "layer_types": ["sliding_attention"] * 3}},
           llama_tensors(), "'text_config.layer_types' must list 1 layers")
    hf_dir("hf_config_torch_dtype_unknown", cfg(torch_dtype="float8"), llama_tensors(), "'torch_dtype'")
    hf_dir("hf_config_quant_method_unknown", cfg(quantization_config={"quant_method": "bitsandbytes"}),
           llama_tensors(), "'quantization_config.quant_method' = 'bitsandbytes'", code="unsupported")
    awq = {"quant_method": "awq", "bits": 4, "group_size": 8, "zero_point": True, "version": "gemm"}
    hf_dir("hf_awq_group_size_8_refused", cfg(quantization_config=awq), awq_tensors(),
           "group_size 8 is not supported", code="unsupported")
    hf_dir("hf_awq_scales_wrong_shape", cfg(quantization_config=awq), awq_tensors(scales_shape=(2, 8)),
           "model.layers.0.self_attn.q_proj.scales")
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 8, "desc_act": True, "sym": True}
    gptq_parts = [("qweight", "I32", [1, 8], struct.pack("<8I", *[0x76543210] * 8)),
                  ("qzeros", "I32", [1, 1], struct.pack("<I", 0x77777777)),
                  ("scales", "F16", [1, 8], struct.pack("<8e", *[0.25] * 8)),
                  ("g_idx", "I32", [8], struct.pack("<8i", *[0] * 8))]
    hf_dir("hf_gptq_group_size_8_refused", cfg(quantization_config=gptq), quantized_tensors(gptq_parts),
           "group_size 8 is not supported", code="unsupported")
    hf_dir("hf_gptq_g_idx_out_of_range", cfg(quantization_config=gptq),
           quantized_tensors(gptq_parts[:3] + [("g_idx", "I32", [8], struct.pack("<8i", *[0] * 7, 5))]),
           "g_idx[7] = 5")
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    fp8_parts = [("weight", "F8_E4M3", [8, 8], bytes(range(0x30, 0x70))),
                 ("weight_scale_inv", "F32", [1, 1], struct.pack("<f", 0.5))]
    hf_dir("hf_fp8_width_not_blocks_of_64", cfg(quantization_config=fp8), quantized_tensors(fp8_parts),
           "8 input features are not whole FP8 E4M3 blocks of 64", code="unsupported")
    hf_dir("hf_fp8_scale_missing", cfg(quantization_config=fp8), quantized_tensors(fp8_parts[:1]),
           "missing tensor 'model.layers.0.self_attn.q_proj.weight_scale_inv'")
    hf_dir("hf_tensor_missing", base, llama_tensors(skip=("model.layers.0.self_attn.k_proj.weight",)),
           "missing tensor 'model.layers.0.self_attn.k_proj.weight'")
    hf_dir("hf_tensor_wrong_shape", base, llama_tensors(shapes={"model.layers.0.mlp.up_proj.weight": [8, 4]}),
           "'model.layers.0.mlp.up_proj.weight' ('blk.0.ffn_up.weight') has shape [4, 8]")
    hf_dir("hf_tensor_int_dtype", base, llama_tensors(dtype="I32"), "unquantized checkpoints must be F32, F16 or BF16",
           code="unsupported")

    with open(os.path.join(HERE, "expected.tsv"), "w") as f:
        f.write("# file\tloader\terror code\tmessage substring (generated by make_corpus.py)\n")
        for case in cases:
            f.write("\t".join(case) + "\n")
    print(f"wrote {len(cases)} cases to {HERE}")


if __name__ == "__main__":
    main()
