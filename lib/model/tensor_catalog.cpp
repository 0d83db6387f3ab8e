#include "model/tensor_catalog.hpp"

#include "core/check.hpp"
#include "core/mapped_file.hpp"
#include "formats/gguf.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sitsrt {

std::int64_t CatalogTensor::elements() const noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : dims) n *= d;
  return n;
}

TensorCatalog TensorCatalog::from_gguf(const gguf::File& file) {
  TensorCatalog catalog(file.path());
  // A copy of the File shares its mapping, so the views stay valid as long as the catalog.
  auto keep = std::make_shared<const gguf::File>(file);
  for (const gguf::TensorInfo& t : keep->tensors())
    catalog.add({t.name, t.name, t.type, t.dims, t.bytes, keep->tensor_data(t), keep->mapped()});
  catalog.keep_alive(std::move(keep));
  return catalog;
}

const CatalogTensor* TensorCatalog::find(std::string_view name) const noexcept {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> TensorCatalog::data(const graph::Weight& weight) const {
  const CatalogTensor* t = find(weight.name);
  if (t == nullptr) raise(ErrorCode::kInvalidModel, "{}: missing tensor '{}'", path_, weight.name);
  return t->data;
}

void TensorCatalog::release(const graph::Weight& weight) const noexcept {
  const CatalogTensor* t = find(weight.name);
  if (t == nullptr || !t->mapped) return;
  release_mapped_pages(t->data);
}

std::string TensorCatalog::describe(const std::string& name) const {
  if (const CatalogTensor* t = find(name); t != nullptr && t->source_name != name)
    return fmt::format("'{}' ('{}')", t->source_name, name);
  if (namer_) {
    const std::string source = namer_(name);
    if (!source.empty() && source != name) return fmt::format("'{}' ('{}')", source, name);
  }
  return fmt::format("'{}'", name);
}

void TensorCatalog::add(CatalogTensor tensor) {
  if (tensor.bytes != tensor.data.size()) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has {} bytes of data, its type {} and shape [{}] need {}", path_,
          tensor.source_name, tensor.data.size(), name(tensor.type), fmt::join(tensor.dims, ", "), tensor.bytes);
  }
  if (by_name_.contains(tensor.name)) {
    raise(ErrorCode::kInvalidModel, "{}: tensor '{}' (from '{}') appears twice", path_, tensor.name,
          tensor.source_name);
  }
  by_name_.emplace(tensor.name, tensors_.size());
  tensors_.push_back(std::move(tensor));
}

void TensorCatalog::add_owned(CatalogTensor tensor, std::vector<std::byte> bytes) {
  auto owned = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  tensor.data = std::span<const std::byte>(*owned);
  add(std::move(tensor));
  owned_.push_back(std::move(owned));
}

}  // namespace sitsrt
