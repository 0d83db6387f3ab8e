#include "formats/safetensors.hpp"

#include "core/check.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <set>

namespace sitsrt::safetensors {
namespace {

using Json = nlohmann::json;

struct ElementTypeEntry {
  ElementType type;
  std::string_view name;
  int bytes;
};

constexpr std::array<ElementTypeEntry, 15> kElementTypes = {{
    {ElementType::kF64, "F64", 8},         {ElementType::kF32, "F32", 4},
    {ElementType::kF16, "F16", 2},         {ElementType::kBF16, "BF16", 2},
    {ElementType::kF8_E4M3, "F8_E4M3", 1}, {ElementType::kF8_E5M2, "F8_E5M2", 1},
    {ElementType::kI64, "I64", 8},         {ElementType::kI32, "I32", 4},
    {ElementType::kI16, "I16", 2},         {ElementType::kI8, "I8", 1},
    {ElementType::kU64, "U64", 8},         {ElementType::kU32, "U32", 4},
    {ElementType::kU16, "U16", 2},         {ElementType::kU8, "U8", 1},
    {ElementType::kBool, "BOOL", 1},
}};

std::string supported_type_list() {
  std::string out;
  for (const auto& e : kElementTypes) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

// Parses JSON text, reporting duplicate keys of the top-level object (nlohmann keeps the last
// silently; a checkpoint whose header names a tensor twice is ambiguous, so it is refused).
Json parse_json_object(std::string_view text, const std::string& where, std::string_view what) {
  std::string duplicate;
  std::set<std::string, std::less<>> seen;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    raise(ErrorCode::kInvalidModel, "{}: {} is not valid JSON: {}", where, what, e.what());
  }
  if (!json.is_object()) raise(ErrorCode::kInvalidModel, "{}: {} must be a JSON object", where, what);
  if (!duplicate.empty()) raise(ErrorCode::kInvalidModel, "{}: {} has the key '{}' twice", where, what, duplicate);
  return json;
}

std::uint64_t read_u64_le(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

std::uint64_t unsigned_field(const Json& value, const std::string& where, std::string_view field) {
  if (!value.is_number_unsigned()) {
    raise(ErrorCode::kInvalidModel, "{}: {} must be a non-negative integer, got {}", where, field,
          value.dump().substr(0, 64));
  }
  return value.get<std::uint64_t>();
}

std::map<std::string, std::string, std::less<>> string_map(const Json& object, const std::string& where,
                                                           std::string_view field) {
  if (!object.is_object()) raise(ErrorCode::kInvalidModel, "{}: {} must be an object", where, field);
  std::map<std::string, std::string, std::less<>> out;
  for (const auto& [key, value] : object.items()) {
    if (!value.is_string()) {
      raise(ErrorCode::kInvalidModel, "{}: {}['{}'] must be a string", where, field, key);
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

TensorInfo parse_tensor_entry(const std::string& name, const Json& entry, const std::string& where) {
  if (name.empty()) raise(ErrorCode::kInvalidModel, "{}: a tensor has an empty name", where);
  if (!entry.is_object()) raise(ErrorCode::kInvalidModel, "{}: tensor '{}' must be an object", where, name);
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has an unknown field '{}'", where, name, key);
    }
  }
  TensorInfo info;
  info.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has no string field 'dtype'", where, name);
  }
  const auto type = element_type_from_name(dtype->get_ref<const std::string&>());
  if (!type) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has dtype '{}', expected one of {}", where, name,
          dtype->get_ref<const std::string&>(), supported_type_list());
  }
  info.type = *type;

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has no array field 'shape'", where, name);
  }
  if (shape->size() > kMaxDims) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has {} dimensions, at most {} are supported", where, name,
          shape->size(), kMaxDims);
  }
  std::uint64_t elements = 1;
  for (std::size_t i = 0; i < shape->size(); ++i) {
    const std::uint64_t dim = unsigned_field((*shape)[i], where, fmt::format("tensor '{}' shape[{}]", name, i));
    if (dim > (std::uint64_t{1} << 62) || __builtin_mul_overflow(elements, dim, &elements)) {
      raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has a shape whose element count overflows", where, name);
    }
    info.shape.push_back(static_cast<std::int64_t>(dim));
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(element_bytes(info.type)), &bytes)) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' byte size overflows", where, name);
  }

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' needs 'data_offsets' as [begin, end]", where, name);
  }
  const std::uint64_t begin = unsigned_field((*offsets)[0], where, fmt::format("tensor '{}' data_offsets[0]", name));
  const std::uint64_t end = unsigned_field((*offsets)[1], where, fmt::format("tensor '{}' data_offsets[1]", name));
  if (end < begin) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' data_offsets [{}, {}] end before begin", where, name, begin,
          end);
  }
  if (end - begin != bytes) {
    raise(ErrorCode::kInvalidModel,
          "{}: tensor '{}' data_offsets [{}, {}] span {} bytes, but {} x shape needs {} bytes", where, name, begin,
          end, end - begin, safetensors::name(info.type), bytes);
  }
  info.offset = begin;
  info.bytes = bytes;
  return info;
}

bool plain_file_name(std::string_view name) noexcept {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\\') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

}  // namespace

std::string_view name(ElementType type) noexcept {
  for (const auto& e : kElementTypes) {
    if (e.type == type) return e.name;
  }
  return "unknown";
}

std::optional<ElementType> element_type_from_name(std::string_view text) noexcept {
  for (const auto& e : kElementTypes) {
    if (e.name == text) return e.type;
  }
  return std::nullopt;
}

int element_bytes(ElementType type) noexcept {
  for (const auto& e : kElementTypes) {
    if (e.type == type) return e.bytes;
  }
  return 0;
}

std::int64_t TensorInfo::elements() const noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

File File::open(const std::string& path) {
  File file;
  file.mapping_ = std::make_shared<MappedFile>(path);
  file.bytes_ = file.mapping_->bytes();
  file.name_ = path;
  file.parse_header();
  return file;
}

File File::parse(std::span<const std::byte> bytes, std::string display_name) {
  File file;
  file.bytes_ = bytes;
  file.name_ = std::move(display_name);
  file.parse_header();
  return file;
}

void File::parse_header() {
  const std::uint64_t size = bytes_.size();
  if (size < 8) {
    raise(ErrorCode::kInvalidModel, "{}: {} bytes is too short for a safetensors header length (8 bytes)", name_,
          size);
  }
  const std::uint64_t header_bytes = read_u64_le(bytes_.data());
  if (header_bytes > kMaxHeaderBytes) {
    raise(ErrorCode::kInvalidModel, "{}: header length {} exceeds the {}-byte limit", name_, header_bytes,
          kMaxHeaderBytes);
  }
  if (header_bytes > size - 8) {
    raise(ErrorCode::kInvalidModel, "{}: header length {} runs past the end of the {}-byte file (truncated?)",
          name_, header_bytes, size);
  }
  if (header_bytes < 2 || static_cast<char>(bytes_[8]) != '{') {
    raise(ErrorCode::kInvalidModel, "{}: header does not start with a JSON object '{{'", name_);
  }
  data_offset_ = 8 + header_bytes;
  const std::string_view text(reinterpret_cast<const char*>(bytes_.data() + 8), header_bytes);
  const Json header = parse_json_object(text, name_, "header");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      metadata_ = string_map(value, name_, "__metadata__");
      continue;
    }
    tensors_.push_back(parse_tensor_entry(key, value, name_));
  }

  // The ranges must tile the data section exactly: sorted by offset, each starts where the
  // previous ended, and the last ends at the end of the file. This rules out overlaps (two
  // tensors aliasing the same bytes) and hidden unaccounted bytes.
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
  });
  const std::uint64_t data_bytes = size - data_offset_;
  std::uint64_t expected = 0;
  for (const TensorInfo& t : tensors_) {
    if (t.offset != expected) {
      raise(ErrorCode::kInvalidModel, "{}: tensor '{}' starts at data offset {}, expected {} ({})", name_, t.name,
            t.offset, expected, t.offset < expected ? "it overlaps the previous tensor" : "a gap precedes it");
    }
    if (t.bytes > data_bytes - expected) {
      raise(ErrorCode::kInvalidModel, "{}: tensor '{}' data [{}, {}) runs past the end of the {}-byte data section",
            name_, t.name, t.offset, t.offset + t.bytes, data_bytes);
    }
    expected += t.bytes;
  }
  if (expected != data_bytes) {
    raise(ErrorCode::kInvalidModel, "{}: tensors cover {} bytes but the data section has {} ({} unaccounted)",
          name_, expected, data_bytes, data_bytes - expected);
  }

  by_name_.resize(tensors_.size());
  for (std::uint32_t i = 0; i < by_name_.size(); ++i) by_name_[i] = i;
  std::sort(by_name_.begin(), by_name_.end(),
            [&](std::uint32_t a, std::uint32_t b) { return tensors_[a].name < tensors_[b].name; });
}

const TensorInfo* File::find_tensor(std::string_view tensor_name) const noexcept {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), tensor_name,
                                   [&](std::uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  if (it == by_name_.end() || tensors_[*it].name != tensor_name) return nullptr;
  return &tensors_[*it];
}

std::span<const std::byte> File::tensor_data(const TensorInfo& info) const noexcept {
  return bytes_.subspan(data_offset_ + info.offset, info.bytes);
}

ShardIndex parse_shard_index(std::string_view json_text, const std::string& display_name) {
  const Json index = parse_json_object(json_text, display_name, "index");
  ShardIndex out;
  for (const auto& [key, value] : index.items()) {
    if (key == "metadata") {
      if (!value.is_object()) raise(ErrorCode::kInvalidModel, "{}: 'metadata' must be an object", display_name);
      if (const auto total = value.find("total_size"); total != value.end()) {
        out.total_size = unsigned_field(*total, display_name, "metadata.total_size");
      }
    } else if (key != "weight_map") {
      raise(ErrorCode::kInvalidModel, "{}: unknown top-level key '{}' (expected metadata, weight_map)",
            display_name, key);
    }
  }
  const auto map = index.find("weight_map");
  if (map == index.end()) raise(ErrorCode::kInvalidModel, "{}: missing key 'weight_map'", display_name);
  out.weight_map = string_map(*map, display_name, "weight_map");
  if (out.weight_map.empty()) raise(ErrorCode::kInvalidModel, "{}: 'weight_map' lists no tensors", display_name);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : out.weight_map) {
    if (!plain_file_name(shard)) {
      raise(ErrorCode::kInvalidModel, "{}: weight_map['{}'] = '{}' is not a plain file name in the index's folder",
            display_name, tensor, shard);
    }
    shards.insert(shard);
  }
  out.shards.assign(shards.begin(), shards.end());
  return out;
}

Checkpoint Checkpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::error_code ec;
  fs::path index_path;
  fs::path single;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) {
      index_path = fs::path(path) / "model.safetensors.index.json";
    } else if (fs::exists(fs::path(path) / "model.safetensors", ec)) {
      single = fs::path(path) / "model.safetensors";
    } else {
      raise(ErrorCode::kInvalidModel, "{}: no model.safetensors or model.safetensors.index.json in this directory",
            path);
    }
  } else if (fs::path(path).extension() == ".json") {
    index_path = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    ckpt.files_.push_back(File::open(single.string()));
  } else {
    const MappedFile index_file(index_path.string());
    const auto bytes = index_file.bytes();
    const ShardIndex index =
        parse_shard_index({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, index_path.string());
    const fs::path folder = index_path.parent_path();
    for (const std::string& shard : index.shards) ckpt.files_.push_back(File::open((folder / shard).string()));
    // Every tensor a shard holds must be listed for that shard, and every listed tensor present.
    for (std::uint32_t f = 0; f < ckpt.files_.size(); ++f) {
      const File& file = ckpt.files_[f];
      for (const TensorInfo& t : file.tensors()) {
        const auto it = index.weight_map.find(t.name);
        if (it == index.weight_map.end() || it->second != index.shards[f]) {
          raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is in shard '{}' but the index places it {}",
                index_path.string(), t.name, index.shards[f],
                it == index.weight_map.end() ? std::string("nowhere") : fmt::format("in '{}'", it->second));
        }
      }
    }
    for (const auto& [tensor, shard] : index.weight_map) {
      const auto f = static_cast<std::size_t>(std::lower_bound(index.shards.begin(), index.shards.end(), shard) -
                                              index.shards.begin());
      if (ckpt.files_[f].find_tensor(tensor) == nullptr) {
        raise(ErrorCode::kInvalidModel, "{}: weight_map lists '{}' in '{}', which does not hold it",
              index_path.string(), tensor, shard);
      }
    }
  }
  for (std::uint32_t f = 0; f < ckpt.files_.size(); ++f) {
    const auto& tensors = ckpt.files_[f].tensors();
    for (std::uint32_t t = 0; t < tensors.size(); ++t) {
      if (!ckpt.by_name_.emplace(tensors[t].name, std::pair{f, t}).second) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' appears in more than one file", path, tensors[t].name);
      }
    }
  }
  return ckpt;
}

std::optional<Checkpoint::Entry> Checkpoint::find(std::string_view name) const noexcept {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  const File& file = files_[it->second.first];
  return Entry{&file, &file.tensors()[it->second.second]};
}

std::uint64_t Checkpoint::total_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const File& f : files_) {
    for (const TensorInfo& t : f.tensors()) total += t.bytes;
  }
  return total;
}

}  // namespace sitsrt::safetensors
