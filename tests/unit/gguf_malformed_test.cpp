// Malformed GGUF images: every one must fail with a sitsrt::Error whose message starts with the
// file name and names the field at fault; none may crash or allocate absurdly. Images are built
// field by field (support/gguf_bytes.hpp) or by patching a valid image from the Writer.
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "support/gguf_bytes.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace sitsrt;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using test::RawImage;

namespace {

constexpr std::uint32_t kF32 = 0, kQ8_0 = 8, kIQ4_XS = 23;
constexpr std::uint32_t kTypeU32 = 4, kTypeF32 = 6, kTypeBool = 7, kTypeString = 8, kTypeArray = 9, kTypeU64 = 10;

struct Failure {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

// Parses `image` as "model.gguf" and returns the error it must raise.
Failure failure_of(std::span<const std::byte> image) {
  try {
    (void)gguf::File::parse(image, "model.gguf");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), StartsWith("model.gguf: "));
    return {e.code(), e.what()};
  }
  FAIL("parse succeeded on a malformed image");
  return {};
}

// A valid image with one 4-element f32 tensor; tests break one field of it.
RawImage one_tensor() {
  RawImage image;
  image.kv_string("general.architecture", "llama");
  image.tensor("w", {4}, kF32, 0);
  image.data_bytes = 16;
  return image;
}

// A small valid image from the Writer: metadata of several kinds and three tensors.
std::vector<std::byte> small_valid_image() {
  gguf::Writer writer;
  writer.set("general.architecture", gguf::Value::string("llama"));
  writer.set("llama.block_count", gguf::Value::u32(5));
  writer.set("tokenizer.ggml.tokens", gguf::Value::string_array(std::vector<std::string>{"<s>", "a", ""}));
  writer.set("tokenizer.ggml.scores", gguf::Value::f32_array(std::vector<float>{0.0f, -1.0f, -2.0f}));
  writer.set("nested",
             gguf::Value::array(gguf::ValueType::kArray, {gguf::Value::i32_array(std::vector<std::int32_t>{1, 2})}));
  writer.set("flag", gguf::Value::boolean(true));
  const auto fill = [](std::span<std::byte> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 7 + 1);
  };
  writer.add_tensor("token_embd.weight", {4, 2}, DType::kF32, fill);
  writer.add_tensor("blk.0.attn_q.weight", {32, 1}, DType::kQ8_0, fill);
  writer.add_tensor("output_norm.weight", {3}, DType::kF16, fill);
  return writer.to_bytes();
}

// Bytes a parse needs: the end of the last tensor's data.
std::size_t required_size(const gguf::File& file) {
  std::uint64_t end = file.data_offset();
  for (const auto& t : file.tensors()) end = std::max(end, file.data_offset() + t.offset + t.bytes);
  return end;
}

}  // namespace

TEST_CASE("the hand-built base images are valid", "[gguf][malformed]") {
  const auto bytes = one_tensor().build();
  const auto file = gguf::File::parse(bytes, "model.gguf");
  CHECK(file.tensors().size() == 1);
  CHECK(file.require_string("general.architecture") == "llama");
  const auto small = small_valid_image();
  CHECK(gguf::File::parse(small, "model.gguf").tensors().size() == 3);
}

TEST_CASE("bad magic", "[gguf][malformed]") {
  auto bytes = small_valid_image();
  std::memcpy(bytes.data(), "GGML", 4);
  const auto f = failure_of(bytes);
  CHECK(f.code == ErrorCode::kInvalidModel);
  CHECK_THAT(f.message, Contains("bad magic") && Contains("not a GGUF file"));
}

TEST_CASE("unsupported versions", "[gguf][malformed]") {
  for (const std::uint32_t version : {0u, 1u, 4u}) {
    auto image = one_tensor();
    image.version = version;
    const auto f = failure_of(image.build());
    CHECK(f.code == ErrorCode::kUnsupported);
    CHECK_THAT(f.message, Contains("unsupported GGUF version " + std::to_string(version)));
  }
  auto big_endian = one_tensor();
  big_endian.version = 0x03000000u;
  CHECK_THAT(failure_of(big_endian.build()).message, Contains("big-endian"));
  auto v2 = one_tensor();  // v2 has the same layout and stays readable
  v2.version = 2;
  const auto bytes = v2.build();
  CHECK(gguf::File::parse(bytes, "v2.gguf").version() == 2);
}

TEST_CASE("every truncation of a valid image fails cleanly", "[gguf][malformed]") {
  const auto image = small_valid_image();
  const auto file = gguf::File::parse(image, "model.gguf");
  const std::size_t needed = required_size(file);
  REQUIRE(needed <= image.size());
  for (std::size_t size = 0; size < image.size(); ++size) {
    const std::span<const std::byte> prefix(image.data(), size);
    CAPTURE(size);
    if (size < needed) {
      const auto f = failure_of(prefix);
      CHECK(f.code == ErrorCode::kInvalidModel);
    } else {  // only the trailing padding is missing
      CHECK_NOTHROW(gguf::File::parse(prefix, "model.gguf"));
    }
  }
  CHECK_THAT(failure_of({}).message, Contains("truncated at offset 0") && Contains("magic"));
  CHECK_THAT(failure_of(std::span(image.data(), 10)).message, Contains("truncated") && Contains("tensor count"));
  CHECK_THAT(failure_of(std::span(image.data(), 20)).message, Contains("truncated") && Contains("metadata kv count"));

  // Cuts inside the last kv (earlier kvs are long enough that the count bound still holds).
  RawImage kvs;
  kvs.kv_string("general.name", std::string(200, 'x')).kv_u32("llama.block_count", 5);
  const auto two_kvs = kvs.build();
  const auto key_at = test::find_bytes(two_kvs, "llama.block_count");
  CHECK_THAT(failure_of(std::span(two_kvs.data(), key_at - 5)).message,
             Contains("truncated") && Contains("metadata entry #1") && Contains("key string length"));
  CHECK_THAT(failure_of(std::span(two_kvs.data(), key_at + 3)).message,
             Contains("metadata entry #1") && Contains("key string length 17 exceeds the 3 bytes left"));
  CHECK_THAT(failure_of(std::span(two_kvs.data(), key_at + 17 + 4 + 2)).message,
             Contains("truncated") && Contains("metadata key 'llama.block_count' needs 4 bytes for its value"));
}

TEST_CASE("truncated tensor data names the tensor", "[gguf][malformed]") {
  const auto image = small_valid_image();
  const auto file = gguf::File::parse(image, "model.gguf");
  const auto* last = &file.tensors().back();
  const std::size_t cut = file.data_offset() + last->offset + last->bytes - 1;
  const auto f = failure_of(std::span(image.data(), cut));
  CHECK_THAT(f.message, Contains("tensor 'output_norm.weight'") && Contains("past the end of the file"));
}

TEST_CASE("huge counts are rejected before allocating", "[gguf][malformed]") {
  auto tensors = one_tensor();
  tensors.tensor_count = std::uint64_t{1} << 60;
  CHECK_THAT(failure_of(tensors.build()).message, Contains("tensor count 1152921504606846976 is impossible"));

  auto kvs = one_tensor();
  kvs.kv_count = std::uint64_t{1} << 60;
  CHECK_THAT(failure_of(kvs.build()).message, Contains("metadata kv count 1152921504606846976 is impossible"));

  // A bare 24-byte header claiming a few tensors.
  RawImage header_only;
  header_only.tensor_count = 3;
  header_only.alignment = 1;
  CHECK_THAT(failure_of(header_only.build()).message, Contains("tensor count 3"));
}

TEST_CASE("huge string and array lengths", "[gguf][malformed]") {
  RawImage key_length;
  key_length.kvs.u64(std::uint64_t{1} << 62).u32(kTypeU32).u32(0);
  key_length.n_kvs = 1;
  CHECK_THAT(failure_of(key_length.build()).message, Contains("metadata entry #0") && Contains("key string length"));

  RawImage value_length;
  value_length.kvs.str("general.name").u32(kTypeString).u64(std::numeric_limits<std::uint64_t>::max());
  value_length.n_kvs = 1;
  CHECK_THAT(failure_of(value_length.build()).message,
             Contains("metadata key 'general.name'") && Contains("string length 18446744073709551615"));

  RawImage array_length;
  array_length.kvs.str("tokenizer.ggml.scores").u32(kTypeArray).u32(kTypeF32).u64(std::uint64_t{1} << 61);
  array_length.n_kvs = 1;
  CHECK_THAT(failure_of(array_length.build()).message,
             Contains("'tokenizer.ggml.scores'") && Contains("array length 2305843009213693952"));

  // Strings inside an array: the count is bounded by 8 bytes per element, each length by the bytes left.
  RawImage string_items;
  string_items.kvs.str("tokenizer.ggml.tokens").u32(kTypeArray).u32(kTypeString).u64(2).str("ok").u64(1000);
  string_items.n_kvs = 1;
  CHECK_THAT(failure_of(string_items.build()).message,
             Contains("metadata key 'tokenizer.ggml.tokens'[1]") && Contains("string length 1000"));

  RawImage name_length = one_tensor();
  name_length.tensors[0].name = std::string(70000, 'n');
  name_length.data_bytes = 16;
  CHECK_THAT(failure_of(name_length.build()).message, Contains("name string length 70000 exceeds the limit"));
}

TEST_CASE("bad tensor shapes", "[gguf][malformed]") {
  auto too_many = one_tensor();
  too_many.tensors[0].dims = {1, 1, 1, 1, 4};
  CHECK_THAT(failure_of(too_many.build()).message, Contains("tensor 'w'") && Contains("n_dims 5 is outside 1..4"));

  auto no_dims = one_tensor();
  no_dims.tensors[0].dims = {};
  CHECK_THAT(failure_of(no_dims.build()).message, Contains("n_dims 0"));

  auto zero = one_tensor();
  zero.tensors[0].dims = {4, 0};
  CHECK_THAT(failure_of(zero.build()).message, Contains("tensor 'w'") && Contains("dims[1] is 0"));

  auto overflow = one_tensor();
  overflow.tensors[0].dims = {std::uint64_t{1} << 40, std::uint64_t{1} << 40};
  CHECK_THAT(failure_of(overflow.build()).message,
             Contains("dims [1099511627776, 1099511627776] hold 2^62 or more elements"));

  auto wraps = one_tensor();  // the product wraps to 0 in 64 bits
  wraps.tensors[0].dims = {std::uint64_t{1} << 32, std::uint64_t{1} << 32};
  CHECK_THAT(failure_of(wraps.build()).message, Contains("2^62"));

  auto blocks = one_tensor();
  blocks.tensors[0] = {"blk.0.attn_q.weight", {33, 2}, kQ8_0, 0};
  blocks.data_bytes = 128;
  CHECK_THAT(failure_of(blocks.build()).message, Contains("tensor 'blk.0.attn_q.weight'") &&
                                                     Contains("dims[0] = 33 is not a multiple of the 32-element q8_0"));
}

TEST_CASE("tensor offsets outside the file or misaligned", "[gguf][malformed]") {
  auto past_end = one_tensor();
  past_end.tensors[0].offset = 1 << 20;
  CHECK_THAT(failure_of(past_end.build()).message,
             Contains("tensor 'w'") && Contains("offset 1048576") && Contains("past the end of the file"));

  auto wraps = one_tensor();  // offset + bytes overflows 64 bits
  wraps.tensors[0].offset = std::numeric_limits<std::uint64_t>::max() - 31;
  CHECK_THAT(failure_of(wraps.build()).message, Contains("past the end of the file"));

  auto misaligned = one_tensor();
  misaligned.tensors[0].offset = 4;
  misaligned.data_bytes = 32;
  CHECK_THAT(failure_of(misaligned.build()).message,
             Contains("tensor 'w'") && Contains("offset 4 is not a multiple of the alignment 32"));

  auto overlap = one_tensor();
  overlap.tensor("v", {8}, kF32, 0);
  overlap.data_bytes = 64;
  CHECK_THAT(failure_of(overlap.build()).message, Contains("overlap"));
}

TEST_CASE("bad general.alignment values", "[gguf][malformed]") {
  for (const std::uint32_t alignment : {0u, 3u, 48u}) {
    auto image = one_tensor();
    image.kv_u32("general.alignment", alignment);
    CHECK_THAT(failure_of(image.build()).message,
               Contains("'general.alignment' = " + std::to_string(alignment) + " is not a power of two"));
  }
  auto wrong_type = one_tensor();
  wrong_type.kvs.str("general.alignment").u32(kTypeU64).u64(64);
  ++wrong_type.n_kvs;
  CHECK_THAT(failure_of(wrong_type.build()).message, Contains("'general.alignment' has type u64, expected u32"));

  auto honoured = one_tensor();  // a valid non-default alignment moves the data section
  honoured.kv_u32("general.alignment", 256);
  honoured.alignment = 256;
  const auto bytes = honoured.build();
  const auto file = gguf::File::parse(bytes, "model.gguf");
  CHECK(file.alignment() == 256);
  CHECK(file.data_offset() == 256);
}

TEST_CASE("duplicate names", "[gguf][malformed]") {
  auto tensors = one_tensor();
  tensors.tensor("w", {4}, kF32, 32);
  tensors.data_bytes = 64;
  CHECK_THAT(failure_of(tensors.build()).message, Contains("duplicate tensor name 'w'"));

  auto keys = one_tensor();
  keys.kv_u32("llama.block_count", 5).kv_u32("llama.block_count", 6);
  CHECK_THAT(failure_of(keys.build()).message, Contains("duplicate metadata key 'llama.block_count'"));
}

TEST_CASE("unsupported and unknown tensor types", "[gguf][malformed]") {
  RawImage i_quant;
  i_quant.tensor("blk.0.attn_q.weight", {256}, kIQ4_XS, 0);
  i_quant.data_bytes = 136;
  const auto f = failure_of(i_quant.build());
  CHECK(f.code == ErrorCode::kUnsupported);
  CHECK(f.message ==
        "model.gguf: tensor 'blk.0.attn_q.weight' has type iq4_xs, which this build does not support "
        "(supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, fp8_e4m3, q4_g128, q2_k, q3_k, q4_k, q5_k, q6_k, "
        "q8_k, iq4_nl)");

  auto unknown = one_tensor();
  unknown.tensors[0].type = 77;
  const auto u = failure_of(unknown.build());
  CHECK(u.code == ErrorCode::kInvalidModel);
  CHECK_THAT(u.message, Contains("tensor 'w' has unknown ggml type 77"));

  // Ids that no DType has: 0xFFFFFFFF, which the CPU backend's repacked in-memory layouts (never
  // file formats) once mapped to, and the private ids past sitsrt's own two.
  for (const std::uint32_t id : {0xFFFFFFFFu, 0x5302u, 0x5305u}) {
    auto other = one_tensor();
    other.tensors[0].type = id;
    const auto o = failure_of(other.build());
    CHECK(o.code == ErrorCode::kInvalidModel);
    CHECK_THAT(o.message, Contains("tensor 'w' has unknown ggml type " + std::to_string(id)));
  }
}

TEST_CASE("bad metadata values", "[gguf][malformed]") {
  RawImage value_type;
  value_type.kvs.str("k").u32(13).u32(0);
  value_type.n_kvs = 1;
  CHECK_THAT(failure_of(value_type.build()).message, Contains("metadata key 'k': value type 13 is unknown"));

  RawImage element_type;
  element_type.kvs.str("k").u32(kTypeArray).u32(99).u64(0);
  element_type.n_kvs = 1;
  CHECK_THAT(failure_of(element_type.build()).message, Contains("array element type 99 is unknown"));

  RawImage boolean;
  boolean.kvs.str("flag").u32(kTypeBool).u8(2);
  boolean.n_kvs = 1;
  CHECK_THAT(failure_of(boolean.build()).message, Contains("'flag': bool value 2 is neither 0 nor 1"));

  RawImage deep;  // arrays of arrays nested past the limit
  deep.kvs.str("deep");
  deep.kvs.u32(kTypeArray);
  for (int level = 0; level < gguf::kMaxArrayDepth + 1; ++level) deep.kvs.u32(kTypeArray).u64(1);
  deep.kvs.u32(kTypeU32).u64(0);
  deep.n_kvs = 1;
  CHECK_THAT(failure_of(deep.build()).message, Contains("'deep'[0][0]") && Contains("nested more than 8 deep"));

  RawImage empty_key;
  empty_key.kvs.str("").u32(kTypeU32).u32(1);
  empty_key.n_kvs = 1;
  CHECK_THAT(failure_of(empty_key.build()).message, Contains("metadata entry #0: key is empty"));

  auto empty_name = one_tensor();
  empty_name.tensors[0].name.clear();
  CHECK_THAT(failure_of(empty_name.build()).message, Contains("tensor info #0: name is empty"));
}

TEST_CASE("random byte flips never crash the parser", "[gguf][malformed][fuzz]") {
  const auto valid = small_valid_image();
  test::Rng rng(2024);
  int parsed = 0, rejected = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    auto bytes = valid;
    const int flips = rng.uniform_int(1, 4);
    for (int i = 0; i < flips; ++i) {
      const auto at = static_cast<std::size_t>(rng.next() % bytes.size());
      // Mostly single-bit flips; sometimes 0xFF, which makes counts and lengths huge.
      bytes[at] = rng.uniform_int(0, 3) == 0 ? std::byte{0xFF}
                                             : bytes[at] ^ static_cast<std::byte>(1u << rng.uniform_int(0, 7));
    }
    try {
      const auto file = gguf::File::parse(bytes, "fuzz.gguf");
      for (const auto& t : file.tensors()) {  // whatever parses must be self-consistent
        REQUIRE(file.data_offset() + t.offset + t.bytes <= file.file_size());
        REQUIRE(t.elements() > 0);
      }
      ++parsed;
    } catch (const Error& e) {
      REQUIRE_THAT(e.what(), StartsWith("fuzz.gguf: "));
      ++rejected;
    }
  }
  CHECK(parsed + rejected == 2000);
  CHECK(rejected > 0);
  CHECK(parsed > 0);  // flips in tensor data and padding are harmless
}
