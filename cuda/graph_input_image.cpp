#include "cuda_backend/graph_input_image.hpp"

#include "cuda_backend/cuda_check.hpp"

#include <algorithm>

namespace sitsrt::cuda {

GraphInputImage::GraphInputImage(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes)
    : context_(context), allocator_(allocator), initial_bytes_(bytes) {
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
  const std::size_t old = image_ != nullptr ? image_->size() : 0;
  image_.reset();  // first, so the budget has room for the new one
  copy_pending_ = false;
  ++generation_;  // graphs holding the old addresses are stale either way
  try {
    image_ = std::make_unique<MirroredBuffer>(context_, allocator_, bytes, "graph input image");
  } catch (...) {  // out of memory: an image of the old size again (just freed), and report
    try {
      if (old > 0) image_ = std::make_unique<MirroredBuffer>(context_, allocator_, old, "graph input image");
    } catch (...) {  // not even that: ensure() tries again before the next graph step
    }
    throw;
  }
}

bool GraphInputImage::ensure() noexcept {
  if (image_ != nullptr) return true;
  try {
    allocate(initial_bytes_);
    return true;
  } catch (...) {
    return false;
  }
}

void GraphInputImage::begin(const std::vector<std::size_t>* layout) {
  if (copy_pending_) {
    SITSRT_CUDA_CHECK(cudaEventSynchronize(copied_));  // the last copy has read the host bytes
    copy_pending_ = false;
  }
  layout_.begin(layout);
  overflow_.clear();
}

StepInputs::Slot GraphInputImage::reserve(std::size_t bytes) {
  if (const std::optional<std::size_t> at = layout_.reserve(bytes, image_->size())) {
    return {image_->host() + *at, image_->device() + *at, bytes};
  }
  // Outside the image (or the layout): the step will not run from it (the caller learns from
  // fits()), and nothing launched reads the slot. Its caller's bytes go to host scratch.
  overflow_.emplace_back(bytes);
  return {overflow_.back().data(), image_->device(), bytes};
}

void GraphInputImage::upload_image() {
  if (layout_.used() == 0) return;
  SITSRT_CUDA_CHECK(
      cudaMemcpyAsync(image_->device(), image_->host(), layout_.used(), cudaMemcpyHostToDevice, context_.stream()));
  SITSRT_CUDA_CHECK(cudaEventRecord(copied_, context_.stream()));
  copy_pending_ = true;
}

void GraphInputImage::grow() {
  allocate(std::max(2 * layout_.asked(), 2 * image_->size()));
}

}  // namespace sitsrt::cuda
