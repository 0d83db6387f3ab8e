#include "api/model_pins.hpp"

#include "audit/hash.hpp"
#include "core/check.hpp"

#include <algorithm>
#include <filesystem>

namespace sitsrt {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void changed(const std::string& path, const FileIdentity& then, const FileIdentity& now,
                          std::string_view when) {
  const std::string how = !now.same_inode(then) ? "replaced by another file"
                          : now.size != then.size
                              ? fmt::format("its size changed from {} to {} bytes", then.size, now.size)
                              : "rewritten (its modification time changed)";
  raise(ErrorCode::kIo, "{}: the model file changed {}: {}; the weights in use are not what it holds now, so "
        "no audit record can name them: load the model again", path, when, how);
}

}  // namespace

ModelPins::ModelPins(const std::string& model_path, bool hf_directory) : model_path_(model_path), hf_(hf_directory) {
  if (!hf_) {
    Pin pin{fs::path(model_path).filename().string(), model_path, {}, {}, true};
    pin.fd = open_regular_file(model_path, &pin.identity);
    pins_.push_back(std::move(pin));
    return;
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_path, ec)) {
    const auto ext = entry.path().extension();
    if ((ext != ".json" && ext != ".safetensors") || !entry.is_regular_file(ec)) continue;
    Pin pin{entry.path().filename().string(), entry.path().string(), {}, {}, false};
    pin.fd = open_regular_file(pin.path, &pin.identity);
    pins_.push_back(std::move(pin));
  }
  if (ec) raise(ErrorCode::kIo, "{}: cannot list the directory: {}", model_path, ec.message());
  std::sort(pins_.begin(), pins_.end(), [](const Pin& a, const Pin& b) { return a.name < b.name; });
}

void ModelPins::confirm(const std::vector<MappedWeightFile>& mapped) {
  for (const MappedWeightFile& file : mapped) {
    const std::string name = hf_ ? fs::path(file.path).filename().string() : pins_.front().name;
    const auto it = std::find_if(pins_.begin(), pins_.end(), [&](const Pin& p) { return p.name == name; });
    if (it == pins_.end()) {  // a shard the directory listing did not pin: pin the mapped inode now
      Pin pin{name, file.path, {}, {}, true};
      pin.fd = open_regular_file(file.path, &pin.identity);
      if (pin.identity != file.identity) changed(file.path, file.identity, pin.identity, "while it was loaded");
      pins_.push_back(std::move(pin));
      continue;
    }
    it->weights = true;
    if (file.identity != it->identity) changed(file.path, it->identity, file.identity, "while it was loaded");
  }
  for (const Pin& pin : pins_) {
    check_unchanged(pin, "while it was loaded");
    if (pin.weights) continue;
    // Read by name (config.json, tokenizer.json, the shard index): the name must still give it.
    FileIdentity now;
    try {
      now = identity_of(pin.path);
    } catch (const Error&) {
      raise(ErrorCode::kIo, "{}: the model file disappeared while it was loaded; load the model again", pin.path);
    }
    if (now != pin.identity) changed(pin.path, pin.identity, now, "while it was loaded");
  }
  std::sort(pins_.begin(), pins_.end(), [](const Pin& a, const Pin& b) { return a.name < b.name; });
}

void ModelPins::check_unchanged(const Pin& pin, std::string_view when) const {
  const FileIdentity now = identity_of(pin.fd.get(), pin.path);
  if (now != pin.identity) changed(pin.path, pin.identity, now, when);
}

void ModelPins::check_weights_unchanged() const {
  for (const Pin& pin : pins_) {
    if (pin.weights) check_unchanged(pin);
  }
}

std::uint64_t ModelPins::total_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const Pin& pin : pins_) total += pin.identity.size;
  return total;
}

std::string ModelPins::sha256(const std::function<void(double)>& progress) const {
  const std::uint64_t total = std::max<std::uint64_t>(total_bytes(), 1);
  std::uint64_t before = 0;
  std::string lines;
  for (const Pin& pin : pins_) {
    check_unchanged(pin);
    std::function<void(double)> file_progress;
    if (progress) {
      file_progress = [&](double f) {
        progress((static_cast<double>(before) + f * static_cast<double>(pin.identity.size)) /
                 static_cast<double>(total));
      };
    }
    const std::string hash = audit::sha256_fd_hex(pin.fd.get(), pin.path, pin.identity.size, file_progress);
    check_unchanged(pin);  // not rewritten while it was being read
    before += pin.identity.size;
    if (!hf_) return hash;
    lines += fmt::format("{} {}\n", pin.name, hash);
  }
  return audit::sha256_hex(lines);
}

}  // namespace sitsrt
