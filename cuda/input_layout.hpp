// The slot layout of a replayed graph's input image (graph_input_image.hpp), kept apart from the
// pinned and device memory so the host tests check it without a GPU. A recording lays slots out in
// the order they are reserved, each rounded up to its size class; following a recorded layout
// gives every slot the offset it had, as long as there are as many slots, each within its class.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <optional>
#include <vector>

namespace sitsrt::cuda {

class InputLayout {
 public:
  // The size class of a slot of `bytes`: 16-byte multiples up to 256, then powers of two, so a
  // growing block table changes class (and forces a new capture) once per doubling.
  [[nodiscard]] static std::size_t size_class(std::size_t bytes) noexcept {
    const std::size_t aligned = (std::max<std::size_t>(bytes, 1) + 15) / 16 * 16;
    return aligned <= 256 ? aligned : std::bit_ceil(aligned);
  }

  // Starts a step: recording (null) or following `layout` (which must outlive the step).
  void begin(const std::vector<std::size_t>* layout) noexcept {
    layout_ = layout;
    recorded_.clear();
    offset_ = 0;
    asked_ = 0;
    fits_ = true;
  }

  // The offset of the next slot of `bytes` in an image of `capacity` bytes; nothing when it falls
  // outside the image or the followed layout (fits() is false from then on).
  [[nodiscard]] std::optional<std::size_t> reserve(std::size_t bytes, std::size_t capacity) {
    const std::size_t index = recorded_.size();
    std::size_t size = size_class(bytes);
    if (layout_ != nullptr) {
      if (index >= layout_->size() || size > (*layout_)[index]) fits_ = false;
      if (index < layout_->size()) size = std::max(size, (*layout_)[index]);
    }
    recorded_.push_back(size);
    asked_ += size;
    if (!fits_ || offset_ + size > capacity) {
      fits_ = false;
      return std::nullopt;
    }
    const std::size_t at = offset_;
    offset_ += size;
    return at;
  }

  // Every slot since begin() had its place, and a followed layout had no slots left over.
  [[nodiscard]] bool fits() const noexcept {
    return fits_ && (layout_ == nullptr || recorded_.size() == layout_->size());
  }
  [[nodiscard]] const std::vector<std::size_t>& recorded() const noexcept { return recorded_; }
  [[nodiscard]] std::size_t used() const noexcept { return offset_; }  // bytes laid out
  [[nodiscard]] std::size_t asked() const noexcept { return asked_; }  // including those that did not fit

 private:
  const std::vector<std::size_t>* layout_ = nullptr;
  std::vector<std::size_t> recorded_;
  std::size_t offset_ = 0;
  std::size_t asked_ = 0;
  bool fits_ = true;
};

}  // namespace sitsrt::cuda
