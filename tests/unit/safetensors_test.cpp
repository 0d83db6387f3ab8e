// Safetensors reader: valid files and sharded checkpoints are read exactly (tensor bytes are views
// of the file); each validation rule rejects its defect (the corpus test covers committed files,
// these cover rules on in-memory images and random mutations).
#include "formats/safetensors.hpp"
#include "support/model_files.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

using namespace sitsrt;
using namespace sitsrt::safetensors;

namespace {

struct Tensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> payload;
};

std::vector<std::byte> random_payload(std::size_t n, std::uint64_t seed) {
  test::Rng rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng.next() & 0xff);
  return out;
}

// Writes tensors in the given order; `pad` spaces after the JSON (allowed by the format).
std::vector<std::byte> image(const std::vector<Tensor>& tensors, const nlohmann::json& metadata = nullptr,
                             int pad = 0) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::vector<std::byte> data;
  for (const Tensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.payload.size()}}};
    data.insert(data.end(), t.payload.begin(), t.payload.end());
  }
  std::string text = header.dump() + std::string(static_cast<std::size_t>(pad), ' ');
  std::vector<std::byte> out(8);
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("a valid file exposes every tensor as a view of its bytes", "[safetensors]") {
  const std::vector<Tensor> tensors = {
      {"model.embed_tokens.weight", "BF16", {6, 4}, random_payload(48, 1)},
      {"model.layers.0.mlp.down_proj.weight", "F8_E4M3", {4, 6}, random_payload(24, 2)},
      {"model.layers.0.mlp.down_proj.weight_scale", "F32", {4, 1}, random_payload(16, 3)},
      {"model.layers.0.self_attn.q_proj.qweight", "I32", {4, 2}, random_payload(32, 4)},
      {"empty", "F16", {0, 5}, {}},
  };
  const auto bytes = image(tensors, {{"format", "pt"}}, 5);
  const File file = File::parse(bytes, "mem.safetensors");
  REQUIRE(file.tensors().size() == tensors.size());
  CHECK(file.metadata().at("format") == "pt");
  for (const Tensor& t : tensors) {
    const TensorInfo* info = file.find_tensor(t.name);
    REQUIRE(info != nullptr);
    CHECK(name(info->type) == t.dtype);
    CHECK(info->shape == t.shape);
    const auto data = file.tensor_data(*info);
    REQUIRE(data.size() == t.payload.size());
    if (!data.empty()) CHECK(std::memcmp(data.data(), t.payload.data(), data.size()) == 0);
  }
  CHECK(file.find_tensor("model.norm.weight") == nullptr);
}

TEST_CASE("element type names and sizes", "[safetensors]") {
  for (const char* n : {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U64", "U32",
                        "U16", "U8", "BOOL"}) {
    const auto type = element_type_from_name(n);
    REQUIRE(type.has_value());
    CHECK(name(*type) == n);
    CHECK(element_bytes(*type) > 0);
  }
  CHECK_FALSE(element_type_from_name("f32").has_value());  // the format spells them upper-case
}

TEST_CASE("validation rules on in-memory images", "[safetensors][malformed]") {
  const Tensor a{"a", "F32", {2, 3}, random_payload(24, 7)};
  const Tensor b{"b", "F16", {3}, random_payload(6, 8)};
  auto good = image({a, b});
  REQUIRE_NOTHROW(File::parse(good, "good"));

  auto expect_error = [](const std::vector<std::byte>& bytes, const std::string& fragment) {
    try {
      (void)File::parse(bytes, "bad.safetensors");
      FAIL("parsed without an error (expected '" << fragment << "')");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == ErrorCode::kInvalidModel);
      CHECK(std::string(e.what()).rfind("bad.safetensors: ", 0) == 0);
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
    }
  };
  // Every truncation fails cleanly (header length, header text, or data coverage).
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    CHECK_THROWS_AS(File::parse(std::span(good).first(n), "bad.safetensors"), Error);
  }
  auto extra = good;
  extra.push_back(std::byte{0});
  expect_error(extra, "unaccounted");
  expect_error(image({{"t", "F32", {3}, random_payload(8, 9)}}), "needs 12 bytes");
  expect_error(image({{"t", "Q4_0", {32}, random_payload(18, 9)}}), "dtype 'Q4_0'");
  expect_error(image({{"", "F32", {1}, random_payload(4, 9)}}), "empty name");
}

TEST_CASE("random mutations of a valid image never crash", "[safetensors][malformed][fuzz]") {
  const auto good = image({{"x", "F32", {4, 4}, random_payload(64, 11)}, {"y", "BF16", {8}, random_payload(16, 12)}},
                          {{"k", "v"}});
  test::Rng rng(99);
  int rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    auto bytes = good;
    const int flips = 1 + static_cast<int>(rng.next() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[rng.next() % bytes.size()] = static_cast<std::byte>(rng.next() & 0xff);
    }
    try {
      const File file = File::parse(bytes, "mutated");
      for (const TensorInfo& t : file.tensors()) {
        const auto data = file.tensor_data(t);
        CHECK(data.data() >= bytes.data());
        CHECK(data.data() + data.size() <= bytes.data() + bytes.size());
      }
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(rejected > 0);
}

TEST_CASE("a sharded checkpoint is opened through its index", "[safetensors]") {
  const auto dir = test::temp_dir() / "sharded_ok";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Tensor a{"model.layers.0.w", "F32", {2, 2}, random_payload(16, 21)};
  const Tensor b{"model.layers.1.w", "F32", {2, 2}, random_payload(16, 22)};
  const Tensor c{"lm_head.weight", "BF16", {4}, random_payload(8, 23)};
  write(dir / "model-00001-of-00002.safetensors", image({a, c}));
  write(dir / "model-00002-of-00002.safetensors", image({b}));
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 40}}},
                        {"weight_map",
                         {{a.name, "model-00001-of-00002.safetensors"},
                          {c.name, "model-00001-of-00002.safetensors"},
                          {b.name, "model-00002-of-00002.safetensors"}}}}
             .dump();
  const Checkpoint ckpt = Checkpoint::open(dir.string());
  CHECK(ckpt.files().size() == 2);
  CHECK(ckpt.tensor_count() == 3);
  CHECK(ckpt.total_bytes() == 40);
  for (const Tensor* t : {&a, &b, &c}) {
    const auto entry = ckpt.find(t->name);
    REQUIRE(entry.has_value());
    const auto data = ckpt.data(*entry);
    REQUIRE(data.size() == t->payload.size());
    CHECK(std::memcmp(data.data(), t->payload.data(), data.size()) == 0);
  }
  CHECK_FALSE(ckpt.find("missing").has_value());

  // A single-file directory and a direct file path work too.
  const auto single = test::temp_dir() / "single_ok";
  std::filesystem::remove_all(single);
  std::filesystem::create_directories(single);
  write(single / "model.safetensors", image({a}));
  CHECK(Checkpoint::open(single.string()).tensor_count() == 1);
  CHECK(Checkpoint::open((single / "model.safetensors").string()).tensor_count() == 1);
  CHECK_THROWS_WITH(Checkpoint::open(test::temp_dir().string() + "/no_such_dir_xyz"),
                    Catch::Contains("no_such_dir_xyz"));
}

TEST_CASE("index JSON validation", "[safetensors][malformed]") {
  CHECK_THROWS_WITH(parse_shard_index(R"({"metadata": {}})", "i.json"), Catch::Contains("missing key 'weight_map'"));
  CHECK_THROWS_WITH(parse_shard_index(R"({"weight_map": {"a": 3}})", "i.json"), Catch::Contains("weight_map['a']"));
  CHECK_THROWS_WITH(parse_shard_index(R"({"weight_map": {"a": "/etc/passwd"}})", "i.json"),
                    Catch::Contains("plain file name"));
  CHECK_THROWS_WITH(parse_shard_index(R"({"weight_map": {}, "x": 1})", "i.json"), Catch::Contains("'x'"));
  CHECK_THROWS_WITH(parse_shard_index(R"({"weight_map": {"a": "s"}, "metadata": {"total_size": -4}})", "i.json"),
                    Catch::Contains("total_size"));
  const auto index = parse_shard_index(R"({"weight_map": {"a": "s2", "b": "s1", "c": "s2"}})", "i.json");
  CHECK(index.shards == std::vector<std::string>{"s1", "s2"});
}
