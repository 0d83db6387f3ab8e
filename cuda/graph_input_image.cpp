#include "cuda_backend/graph_input_image.hpp"

#include "cuda_backend/cuda_check.hpp"

#include <algorithm>
#include <bit>

namespace sitsrt::cuda {

GraphInputImage::GraphInputImage(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes)
    : context_(context), allocator_(allocator) {
  context_.make_current();
  SITSRT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  try {
    allocate(bytes);
  } catch (...) {
    static_cast<void>(cudaEventDestroy(copied_));
    throw;
  }
}

GraphInputImage::~GraphInputImage() {
  image_.reset();  // waits for the stream
  static_cast<void>(cudaEventDestroy(copied_));
}

void GraphInputImage::allocate(std::size_t bytes) {
  image_.reset();
  copy_pending_ = false;
  image_ = std::make_unique<MirroredBuffer>(context_, allocator_, bytes, "graph input image");
  ++generation_;
}

std::size_t GraphInputImage::size_class(std::size_t bytes) noexcept {
  const std::size_t aligned = (std::max<std::size_t>(bytes, 1) + 15) / 16 * 16;
  return aligned <= 256 ? aligned : std::bit_ceil(aligned);
}

void GraphInputImage::begin(const std::vector<std::size_t>* layout) {
  if (copy_pending_) {
    SITSRT_CUDA_CHECK(cudaEventSynchronize(copied_));  // the last copy has read the host bytes
    copy_pending_ = false;
  }
  layout_ = layout;
  recorded_.clear();
  offset_ = 0;
  asked_ = 0;
  fits_ = true;
  overflow_.clear();
}

StepInputs::Slot GraphInputImage::reserve(std::size_t bytes) {
  const std::size_t index = recorded_.size();
  std::size_t size = size_class(bytes);
  if (layout_ != nullptr) {
    if (index >= layout_->size() || size > (*layout_)[index]) fits_ = false;
    if (index < layout_->size()) size = std::max(size, (*layout_)[index]);
  }
  recorded_.push_back(size);
  asked_ += size;
  if (!fits_ || offset_ + size > image_->size()) {
    // Outside the image (or the layout): the step will not run from it (the caller learns from
    // fits()), and nothing launched reads the slot. Its caller's bytes go to host scratch.
    fits_ = false;
    overflow_.emplace_back(bytes);
    return {overflow_.back().data(), image_->device(), bytes};
  }
  const Slot slot{image_->host() + offset_, image_->device() + offset_, bytes};
  offset_ += size;
  return slot;
}

bool GraphInputImage::fits() const noexcept {
  return fits_ && (layout_ == nullptr || recorded_.size() == layout_->size());
}

void GraphInputImage::upload_image() {
  if (offset_ == 0) return;
  SITSRT_CUDA_CHECK(
      cudaMemcpyAsync(image_->device(), image_->host(), offset_, cudaMemcpyHostToDevice, context_.stream()));
  SITSRT_CUDA_CHECK(cudaEventRecord(copied_, context_.stream()));
  copy_pending_ = true;
}

void GraphInputImage::grow() {
  allocate(std::max(2 * asked_, 2 * image_->size()));
}

}  // namespace sitsrt::cuda
