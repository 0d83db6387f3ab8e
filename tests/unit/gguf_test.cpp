// GGUF format layer: writer -> reader round trips (tensors of every supported type, metadata of
// every value type, alignment), typed getters, writer validation, vocabulary-sized parse speed,
// and the real stories260K files in the shared folder.
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "support/random.hpp"
#include "support/skip.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace sitsrt;
using Catch::Matchers::Contains;

namespace {

std::vector<std::byte> random_bytes(test::Rng& rng, std::size_t n) {
  std::vector<std::byte> bytes(n);
  for (auto& b : bytes) b = static_cast<std::byte>(rng.next() & 0xFF);
  return bytes;
}

// A fresh, empty directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    test::Rng rng(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    path_ = std::filesystem::temp_directory_path() / ("sitsrt_gguf_" + std::to_string(rng.next()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Metadata exercising every value type, extremes, empty strings/arrays and nested arrays.
std::vector<gguf::KeyValue> every_value_type() {
  using gguf::Value;
  using gguf::ValueType;
  return {
      {"t.u8", Value::u8(255)},
      {"t.i8", Value::i8(-128)},
      {"t.u16", Value::u16(65535)},
      {"t.i16", Value::i16(-32768)},
      {"t.u32", Value::u32(0xFFFFFFFFu)},
      {"t.i32", Value::i32(std::numeric_limits<std::int32_t>::min())},
      {"t.u64", Value::u64(std::numeric_limits<std::uint64_t>::max())},
      {"t.i64", Value::i64(std::numeric_limits<std::int64_t>::min())},
      {"t.f32", Value::f32(1e-5f)},
      {"t.f64", Value::f64(-3.141592653589793)},
      {"t.true", Value::boolean(true)},
      {"t.false", Value::boolean(false)},
      {"t.string", Value::string("h\xC3\xA9llo\n\xE2\x96\x81world")},
      {"t.empty_string", Value::string("")},
      {"t.nul_string", Value::string(std::string("a\0b", 3))},
      {"t.array_u8", Value::array(ValueType::kU8, {Value::u8(0), Value::u8(7)})},
      {"t.array_i8", Value::array(ValueType::kI8, {Value::i8(-1)})},
      {"t.array_u16", Value::array(ValueType::kU16, {Value::u16(1), Value::u16(2)})},
      {"t.array_i16", Value::array(ValueType::kI16, {Value::i16(-3)})},
      {"t.array_u32", Value::array(ValueType::kU32, {Value::u32(4)})},
      {"t.array_i32", Value::i32_array(std::vector<std::int32_t>{1, -2, 3})},
      {"t.array_u64", Value::array(ValueType::kU64, {Value::u64(1ull << 40)})},
      {"t.array_i64", Value::array(ValueType::kI64, {Value::i64(-(1ll << 40))})},
      {"t.array_f32", Value::f32_array(std::vector<float>{0.5f, -1.25f})},
      {"t.array_f64", Value::array(ValueType::kF64, {Value::f64(1e300)})},
      {"t.array_bool", Value::array(ValueType::kBool, {Value::boolean(true), Value::boolean(false)})},
      {"t.array_string", Value::string_array(std::vector<std::string>{"a", "", "ccc"})},
      {"t.array_empty", Value::array(ValueType::kF32, {})},
      {"t.array_empty_strings", Value::array(ValueType::kString, {})},
      {"t.nested", Value::array(ValueType::kArray,
                                {Value::array(ValueType::kI32, {Value::i32(1), Value::i32(2)}),
                                 Value::array(ValueType::kI32, {}), Value::array(ValueType::kI32, {Value::i32(3)})})},
      {"t.nested_strings",
       Value::array(ValueType::kArray,
                    {Value::array(ValueType::kArray, {Value::string_array(std::vector<std::string>{"x", "y"})})})},
      {"t.nested_empty", Value::array(ValueType::kArray, {})},
  };
}

struct TensorCase {
  std::string name;
  std::vector<std::int64_t> dims;
  DType type;
  std::vector<std::byte> data;
};

std::vector<std::byte> image_of(const std::vector<TensorCase>& tensors, std::uint64_t alignment,
                                const std::vector<gguf::KeyValue>& metadata = {}) {
  gguf::Writer writer(alignment);
  for (const auto& [key, value] : metadata) writer.set(key, value);
  for (const auto& t : tensors) {
    writer.add_tensor(t.name, t.dims, t.type, [&t](std::span<std::byte> out) {
      REQUIRE(out.size() == t.data.size());
      std::memcpy(out.data(), t.data.data(), out.size());
    });
  }
  return writer.to_bytes();
}

void check_tensors(const gguf::File& file, const std::vector<TensorCase>& tensors) {
  REQUIRE(file.tensors().size() == tensors.size());
  CHECK(file.data_offset() % file.alignment() == 0);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& want = tensors[i];
    CAPTURE(want.name);
    const gguf::TensorInfo* info = file.find_tensor(want.name);
    REQUIRE(info != nullptr);
    CHECK(info == &file.tensors()[i]);  // file order is add_tensor order
    CHECK(info->dims == want.dims);
    CHECK(info->type == want.type);
    CHECK(info->offset % file.alignment() == 0);
    CHECK(info->bytes == want.data.size());
    const auto data = file.tensor_data(*info);
    REQUIRE(data.size() == want.data.size());
    CHECK(std::memcmp(data.data(), want.data.data(), data.size()) == 0);
  }
}

const std::string kShared = SITSRT_SHARED_DIR;

std::vector<std::byte> original_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

// The real stories260K files, in the shared folder when it is present.
const char* const kStoriesFiles[] = {"stories260K.gguf", "stories260K-F16.gguf", "stories260K-Q8_0.gguf",
                                     "stories260K-Q4_0.gguf"};

// Why the cases on the real files cannot run: the first one absent; empty when all exist.
std::string missing_stories_file() {
  for (const char* name : kStoriesFiles) {
    const std::string path = kShared + "/models/" + name;
    if (!std::filesystem::exists(path)) {
      return path + " is absent (set SITSRT_SHARED_DIR to the folder holding models/)";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("ggml type table", "[gguf]") {
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto type = static_cast<DType>(i);  // every DType is a file format
    CHECK(gguf::dtype_from_ggml_type(gguf::ggml_type_from_dtype(type)) == type);
    CHECK(dtype_from_name(gguf::ggml_type_name(gguf::ggml_type_from_dtype(type))) == type);  // "q4_K" vs "q4_k"
  }
  CHECK(gguf::ggml_type_from_dtype(DType::kBF16) == 30);
  CHECK(gguf::ggml_type_from_dtype(DType::kQ8_0) == 8);
  CHECK(gguf::ggml_type_name(12) == "q4_K");
  CHECK(gguf::ggml_type_name(23) == "iq4_xs");
  CHECK(gguf::ggml_type_name(4) == "unknown");
  CHECK(gguf::ggml_type_name(77) == "unknown");
  CHECK(gguf::dtype_from_ggml_type(12) == DType::kQ4_K);
  CHECK(gguf::dtype_from_ggml_type(14) == DType::kQ6_K);
  CHECK(gguf::dtype_from_ggml_type(20) == DType::kIQ4_NL);
  CHECK_FALSE(gguf::dtype_from_ggml_type(23).has_value());  // iq4_xs
  CHECK(gguf::name(gguf::ValueType::kString) == "string");
}

TEST_CASE("tensors of every supported type round-trip through the writer", "[gguf]") {
  const auto type = GENERATE(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                             DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                             DType::kQ6_K, DType::kQ8_K, DType::kIQ4_NL);
  const std::uint64_t alignment = GENERATE(32u, 64u, 1u);
  CAPTURE(name(type), alignment);
  test::Rng rng(static_cast<std::uint64_t>(type) * 100 + alignment);
  std::vector<std::vector<std::int64_t>> shapes = {{32, 1}, {96, 7}, {64, 3, 5}, {32, 2, 3, 2}, {160}};
  if (traits(type).block_size == 256) shapes = {{256, 1}, {768, 7}, {512, 3, 5}, {256, 2, 3, 2}, {1280}};
  if (traits(type).block_size == 1) shapes.insert(shapes.end(), {{1}, {7, 5}, {3, 1, 1, 9}});
  std::vector<TensorCase> tensors;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::int64_t elements = 1;
    for (const auto d : shapes[i]) elements *= d;
    const std::size_t bytes = elements / traits(type).block_size * traits(type).block_bytes;
    tensors.push_back({"blk." + std::to_string(i) + ".weight", shapes[i], type, random_bytes(rng, bytes)});
  }
  const auto image = image_of(tensors, alignment);
  const auto file = gguf::File::parse(image, "roundtrip.gguf");
  CHECK(file.version() == 3);
  CHECK(file.alignment() == alignment);
  CHECK(file.path() == "roundtrip.gguf");
  CHECK(file.file_size() == image.size());
  check_tensors(file, tensors);
  CHECK(file.find_tensor("missing") == nullptr);
}

TEST_CASE("metadata of every value type round-trips exactly", "[gguf]") {
  const auto metadata = every_value_type();
  test::Rng rng(3);
  const std::vector<TensorCase> tensors = {{"a", {32, 2}, DType::kQ8_0, random_bytes(rng, 68)}};
  const auto image = image_of(tensors, 32, metadata);
  const auto file = gguf::File::parse(image, "meta.gguf");
  REQUIRE(file.metadata().size() == metadata.size());
  for (std::size_t i = 0; i < metadata.size(); ++i) {
    CAPTURE(metadata[i].key);
    CHECK(file.metadata()[i].key == metadata[i].key);
    CHECK(file.metadata()[i].value == metadata[i].value);
    REQUIRE(file.find(metadata[i].key) != nullptr);
    CHECK(*file.find(metadata[i].key) == metadata[i].value);
  }
  CHECK(file.find("t.absent") == nullptr);
  CHECK(std::get<std::string>(file.find("t.nul_string")->data).size() == 3);
  const gguf::Array* nested = file.get_array("t.nested");
  REQUIRE(nested != nullptr);
  CHECK(nested->element_type == gguf::ValueType::kArray);
  CHECK(std::get<gguf::Array>(nested->items[0].data).items.size() == 2);

  // Rewriting what was read reproduces the image byte for byte (stored widths are kept).
  gguf::Writer rewriter;
  for (const auto& [key, value] : file.metadata()) rewriter.set(key, value);
  for (const auto& t : file.tensors()) {
    rewriter.add_tensor(t.name, t.dims, t.type, [&](std::span<std::byte> out) {
      const auto data = file.tensor_data(t);
      std::memcpy(out.data(), data.data(), data.size());
    });
  }
  CHECK(rewriter.to_bytes() == image);
}

TEST_CASE("non-default alignment is recorded and honoured", "[gguf]") {
  test::Rng rng(5);
  const std::vector<TensorCase> tensors = {{"x", {3}, DType::kF32, random_bytes(rng, 12)},
                                           {"y", {32}, DType::kQ4_0, random_bytes(rng, 18)}};
  const auto image = image_of(tensors, 64);
  const auto file = gguf::File::parse(image, "align.gguf");
  CHECK(file.alignment() == 64);
  CHECK(file.get_uint("general.alignment") == 64u);
  CHECK(file.find("general.alignment")->type == gguf::ValueType::kU32);
  CHECK(file.data_offset() % 64 == 0);
  CHECK(file.tensors()[1].offset == 64);
  CHECK(image.size() % 64 == 0);
  check_tensors(file, tensors);

  // The default alignment writes no key; setting the key changes the alignment used.
  CHECK(gguf::File::parse(image_of(tensors, 32), "a").find("general.alignment") == nullptr);
  gguf::Writer writer;
  writer.set("general.alignment", gguf::Value::u32(128));
  CHECK(writer.alignment() == 128);
  writer.add_tensor("x", {3}, DType::kF32, [](std::span<std::byte>) {});
  const auto image128 = writer.to_bytes();
  CHECK(gguf::File::parse(image128, "a128").data_offset() % 128 == 0);
}

TEST_CASE("write() then open() through the file system", "[gguf]") {
  TempDir dir;
  test::Rng rng(9);
  const std::vector<TensorCase> tensors = {{"w", {64, 3}, DType::kQ5_1, random_bytes(rng, 2 * 3 * 24)},
                                           {"b", {5}, DType::kBF16, random_bytes(rng, 10)}};
  gguf::Writer writer(64);
  writer.set("general.architecture", gguf::Value::string("llama"));
  for (const auto& t : tensors) {
    writer.add_tensor(t.name, t.dims, t.type,
                      [&t](std::span<std::byte> out) { std::memcpy(out.data(), t.data.data(), out.size()); });
  }
  const std::string path = dir.file("model.gguf");
  std::vector<std::size_t> progress;
  writer.write(path, [&](std::size_t done, std::size_t total) {
    CHECK(total == 2);
    progress.push_back(done);
  });
  CHECK(progress == std::vector<std::size_t>{1, 2});
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  const auto file = gguf::File::open(path);
  CHECK(file.path() == path);
  CHECK(file.require_string("general.architecture") == "llama");
  check_tensors(file, tensors);
  // Same bytes as the in-memory image.
  CHECK(std::filesystem::file_size(path) == writer.to_bytes().size());

  // A copy shares the mapping and stays valid on its own.
  std::optional<gguf::File> copy;
  {
    const auto opened = gguf::File::open(path);
    copy = opened;
  }
  check_tensors(*copy, tensors);
}

TEST_CASE("writer I/O failures are kIo errors naming the path, leaving nothing behind", "[gguf]") {
  TempDir dir;
  gguf::Writer writer;
  writer.add_tensor("x", {4}, DType::kF32, [](std::span<std::byte>) {});
  const std::string unwritable = dir.file("no/such/dir/model.gguf");
  try {
    writer.write(unwritable);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIo);
    CHECK_THAT(e.what(), Contains(unwritable));
  }
  // Disk full / file too large and refused targets: output_file_test.cpp.
  // An exception from a Fill propagates and removes the temporary file.
  gguf::Writer failing;
  failing.add_tensor("x", {4}, DType::kF32, [](std::span<std::byte>) { throw std::runtime_error("fill failed"); });
  const auto path = dir.file("failing.gguf");
  CHECK_THROWS_WITH(failing.write(path), "fill failed");
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::filesystem::is_empty(dir.path()));  // no temporary file left
  CHECK_THROWS_AS(gguf::File::open(dir.file("absent.gguf")), Error);
  CHECK(error_message([&] { (void)gguf::File::open(dir.file("absent.gguf")); }).starts_with(dir.file("absent.gguf")));
}

TEST_CASE("writer rejects what it could not write correctly", "[gguf]") {
  const auto invalid = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    FAIL("expected kInvalidArgument");
    return std::string();
  };
  const gguf::Writer::Fill nothing = [](std::span<std::byte>) {};
  CHECK_THAT(invalid([] { gguf::Writer w(3); }), Contains("alignment"));
  CHECK_THAT(invalid([] { gguf::Writer w(0); }), Contains("alignment"));
  gguf::Writer w;
  w.add_tensor("t", {32}, DType::kQ8_0, nothing);
  CHECK_THAT(invalid([&] { w.add_tensor("t", {32}, DType::kQ8_0, nothing); }), Contains("duplicate"));
  CHECK_THAT(invalid([&] { w.add_tensor("q", {33}, DType::kQ8_0, nothing); }), Contains("dims[0] = 33"));
  CHECK_THAT(invalid([&] { w.add_tensor("z", {4, 0}, DType::kF32, nothing); }), Contains("dims[1]"));
  CHECK_THAT(invalid([&] { w.add_tensor("d", {1, 1, 1, 1, 1}, DType::kF32, nothing); }), Contains("5 dims"));
  CHECK_THAT(invalid([&] { w.add_tensor("o", {1ll << 40, 1ll << 40}, DType::kF32, nothing); }), Contains("2^62"));
  CHECK_THAT(invalid([&] {
               w.set("k", gguf::Value{gguf::ValueType::kU8, std::uint64_t{256}});
             }),
             Contains("does not fit u8"));
  CHECK_THAT(invalid([&] { w.set("k", gguf::Value{gguf::ValueType::kF32, std::string("x")}); }), Contains("'k'"));
  CHECK_THAT(invalid([&] { w.set("k", gguf::Value::array(gguf::ValueType::kI32, {gguf::Value::u32(1)})); }),
             Contains("item [0] has type u32"));
  CHECK_THAT(invalid([&] { w.set("general.alignment", gguf::Value::u64(64)); }), Contains("general.alignment"));
  CHECK_THAT(invalid([&] { w.set("", gguf::Value::u8(1)); }), Contains("empty"));
  // Arrays may nest kMaxArrayDepth deep (the reader's limit), not deeper.
  const auto nested = [](int depth) {
    gguf::Value v = gguf::Value::array(gguf::ValueType::kU8, {gguf::Value::u8(1)});
    for (int d = 1; d < depth; ++d) v = gguf::Value::array(gguf::ValueType::kArray, {v});
    return v;
  };
  w.set("deepest", nested(gguf::kMaxArrayDepth));
  CHECK_THAT(invalid([&] { w.set("too_deep", nested(gguf::kMaxArrayDepth + 1)); }), Contains("nested more than"));
  // set() replaces in place.
  w.set("a", gguf::Value::u8(1));
  w.set("b", gguf::Value::u8(2));
  w.set("a", gguf::Value::string("again"));
  const auto image = w.to_bytes();
  const auto file = gguf::File::parse(image, "w.gguf");
  REQUIRE(file.metadata().size() == 3);
  CHECK(*file.find("deepest") == nested(gguf::kMaxArrayDepth));
  CHECK(file.metadata()[1].key == "a");
  CHECK(file.require_string("a") == "again");
}

TEST_CASE("typed metadata getters convert widths and name the key on errors", "[gguf]") {
  gguf::Writer writer;
  writer.set("u8", gguf::Value::u8(7));
  writer.set("i32", gguf::Value::i32(42));
  writer.set("neg", gguf::Value::i32(-1));
  writer.set("big", gguf::Value::u64(std::numeric_limits<std::uint64_t>::max()));
  writer.set("f32", gguf::Value::f32(0.25f));
  writer.set("flag", gguf::Value::boolean(true));
  writer.set("name", gguf::Value::string("llama"));
  writer.set("tokens", gguf::Value::string_array(std::vector<std::string>{"<s>", "a"}));
  writer.set("scores", gguf::Value::f32_array(std::vector<float>{-1.0f, 0.5f}));
  writer.set("types", gguf::Value::i32_array(std::vector<std::int32_t>{3, 1}));
  const auto image = writer.to_bytes();
  const auto file = gguf::File::parse(image, "get.gguf");

  CHECK(file.get_uint("u8") == 7u);
  CHECK(file.get_uint("i32") == 42u);
  CHECK(file.require_uint("i32") == 42u);
  CHECK(file.get_uint("absent") == std::nullopt);
  CHECK(file.get_int("neg") == -1);
  CHECK(file.get_float("f32") == 0.25);
  CHECK(file.get_float("i32") == 42.0);
  CHECK(file.get_bool("flag") == true);
  CHECK(file.get_string("name") == "llama");
  CHECK(file.get_array("tokens")->items.size() == 2);
  CHECK(file.get_array("absent") == nullptr);
  CHECK(file.get_string_array("tokens") == std::vector<std::string_view>{"<s>", "a"});
  CHECK(file.get_float_array("scores") == std::vector<float>{-1.0f, 0.5f});
  CHECK(file.get_int_array("types") == std::vector<std::int64_t>{3, 1});
  CHECK(file.get_string_array("absent").empty());

  const auto message = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidModel);
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(message([&] { (void)file.require_uint("absent"); }) == "get.gguf: missing required metadata key 'absent'");
  CHECK(message([&] { (void)file.require_string("absent"); }) == "get.gguf: missing required metadata key 'absent'");
  CHECK(message([&] { (void)file.require_uint("name"); }) ==
        "get.gguf: metadata key 'name' has type string, expected an unsigned integer");
  CHECK_THAT(message([&] { (void)file.get_uint("neg"); }), Contains("'neg' = -1 is negative"));
  CHECK_THAT(message([&] { (void)file.get_int("big"); }), Contains("'big'"));
  CHECK_THAT(message([&] { (void)file.get_float("name"); }), Contains("expected a number"));
  CHECK_THAT(message([&] { (void)file.get_bool("u8"); }), Contains("'u8' has type u8, expected a bool"));
  CHECK_THAT(message([&] { (void)file.get_string("flag"); }), Contains("'flag' has type bool"));
  CHECK_THAT(message([&] { (void)file.get_array("name"); }), Contains("expected an array"));
  CHECK_THAT(message([&] { (void)file.get_string_array("scores"); }), Contains("array of f32"));
  CHECK_THAT(message([&] { (void)file.get_float_array("tokens"); }), Contains("'tokens'"));
  CHECK_THAT(message([&] { (void)file.get_int_array("scores"); }), Contains("'scores'"));
}

TEST_CASE("a 262k-token vocabulary parses: tokens and scores intact", "[gguf]") {
  // The parse time is printed, never checked (timings do not gate tests).
  constexpr std::size_t kVocab = 262144;
  test::Rng rng(21);
  std::vector<std::string> tokens(kVocab);
  std::vector<float> scores(kVocab);
  std::vector<std::int32_t> types(kVocab, 1);
  for (std::size_t i = 0; i < kVocab; ++i) {
    tokens[i] = "tok" + std::to_string(i) + std::string(static_cast<std::size_t>(rng.uniform_int(0, 12)), 'x');
    scores[i] = rng.uniform(-20.0f, 0.0f);
  }
  gguf::Writer writer;
  writer.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  writer.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  writer.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  const auto image = writer.to_bytes();

  const auto start = std::chrono::steady_clock::now();
  const auto file = gguf::File::parse(image, "vocab.gguf");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("parsed " << kVocab << " tokens + scores + types (" << image.size() << " bytes) in " << seconds * 1e3 << " ms");
  const auto parsed = file.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(parsed.size() == kVocab);
  CHECK(parsed[123456] == tokens[123456]);
  CHECK(file.get_float_array("tokenizer.ggml.scores") == scores);
}

TEST_CASE("real stories260K files", "[gguf][model][gated]") {
  if (const std::string missing = missing_stories_file(); !missing.empty()) SITSRT_SKIP(missing);
  struct Expect {
    std::string file;
    DType attn_q;
    DType ffn_down;
    DType output;
  };
  const auto expect = GENERATE(Expect{"stories260K.gguf", DType::kF32, DType::kF32, DType::kF32},
                               Expect{"stories260K-F16.gguf", DType::kF16, DType::kF16, DType::kF16},
                               Expect{"stories260K-Q8_0.gguf", DType::kQ8_0, DType::kF16, DType::kQ8_0},
                               Expect{"stories260K-Q4_0.gguf", DType::kQ4_0, DType::kF16, DType::kQ8_0});
  const std::string path = kShared + "/models/" + expect.file;
  CAPTURE(path);
  const auto file = gguf::File::open(path);
  CHECK(file.version() == 3);
  CHECK(file.require_string("general.architecture") == "llama");
  CHECK(file.require_uint("llama.embedding_length") == 64);
  CHECK(file.require_uint("llama.block_count") == 5);
  CHECK(file.require_uint("llama.attention.head_count") == 8);
  CHECK(file.require_uint("llama.attention.head_count_kv") == 4);
  CHECK(file.require_uint("llama.context_length") == 512);
  CHECK(file.require_uint("llama.feed_forward_length") == 172);
  CHECK(file.get_float("llama.attention.layer_norm_rms_epsilon").value() == Approx(1e-5));
  CHECK(file.get_string("tokenizer.ggml.model") == "llama");
  CHECK(file.get_string_array("tokenizer.ggml.tokens").size() == 512);
  CHECK(file.get_float_array("tokenizer.ggml.scores").size() == 512);
  CHECK(file.get_uint("tokenizer.ggml.bos_token_id") == 1u);
  CHECK(file.get_uint("tokenizer.ggml.eos_token_id") == 2u);
  CHECK(file.tensors().size() == 3 + 5 * 9);

  const auto* embd = file.find_tensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd->dims == std::vector<std::int64_t>{64, 512});
  const auto* down = file.find_tensor("blk.0.ffn_down.weight");
  REQUIRE(down != nullptr);
  CHECK(down->dims == std::vector<std::int64_t>{172, 64});
  CHECK(down->type == expect.ffn_down);
  CHECK(file.find_tensor("blk.0.attn_q.weight")->type == expect.attn_q);
  CHECK(file.find_tensor("blk.4.attn_k.weight")->dims == std::vector<std::int64_t>{64, 32});
  CHECK(file.find_tensor("output.weight")->type == expect.output);
  CHECK(file.find_tensor("output_norm.weight")->type == DType::kF32);
  std::uint64_t tensor_bytes = 0;
  for (const auto& t : file.tensors()) tensor_bytes += t.bytes;
  CHECK(tensor_bytes <= file.file_size() - file.data_offset());
}

TEST_CASE("a real file rewritten by the writer keeps its metadata and tensor bytes", "[gguf][model][gated]") {
  if (const std::string missing = missing_stories_file(); !missing.empty()) SITSRT_SKIP(missing);
  const std::string path =
      kShared + "/models/" + GENERATE(from_range(std::begin(kStoriesFiles), std::end(kStoriesFiles)));
  CAPTURE(path);
  const auto original = gguf::File::open(path);
  gguf::Writer writer(original.alignment());
  for (const auto& [key, value] : original.metadata()) writer.set(key, value);
  for (const auto& t : original.tensors()) {
    writer.add_tensor(t.name, t.dims, t.type, [&](std::span<std::byte> out) {
      const auto data = original.tensor_data(t);
      std::memcpy(out.data(), data.data(), data.size());
    });
  }
  TempDir dir;
  const auto copy_path = dir.file("copy.gguf");
  writer.write(copy_path);
  const auto copy = gguf::File::open(copy_path);
  REQUIRE(copy.metadata().size() == original.metadata().size());
  for (std::size_t i = 0; i < copy.metadata().size(); ++i) {
    CHECK(copy.metadata()[i].key == original.metadata()[i].key);
    CHECK(copy.metadata()[i].value == original.metadata()[i].value);
  }
  REQUIRE(copy.tensors().size() == original.tensors().size());
  for (std::size_t i = 0; i < copy.tensors().size(); ++i) {
    const auto& a = original.tensors()[i];
    const auto& b = copy.tensors()[i];
    CAPTURE(a.name);
    CHECK(b.name == a.name);
    CHECK(b.dims == a.dims);
    CHECK(b.type == a.type);
    const auto da = original.tensor_data(a);
    const auto db = copy.tensor_data(b);
    REQUIRE(da.size() == db.size());
    CHECK(std::memcmp(da.data(), db.data(), da.size()) == 0);
  }
  // llama.cpp lays files out exactly as the writer does, so the copy is byte-identical.
  CHECK(copy.file_size() == original.file_size());
  CHECK(writer.to_bytes() == std::vector<std::byte>(original_bytes(path)));
}
