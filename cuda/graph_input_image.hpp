// The per-step host inputs of a step replayed as a CUDA graph. A captured graph's kernels read
// their inputs at the device addresses they had at capture, so a replay must put the new step's
// inputs at those addresses: one pinned host image and one device image, both at fixed
// addresses, laid out by the order and size classes of the slots the step's nodes reserve. A
// capture records that layout; a replay follows it (the same number of slots, each no larger
// than its class; otherwise the graph is stale) and the filled image goes up in one copy queued
// before the graph. Size classes are powers of two, so a growing block table changes its class,
// and forces a new capture, once per doubling.
#pragma once

#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/input_layout.hpp"
#include "cuda_backend/mirrored_buffer.hpp"
#include "cuda_backend/step_inputs.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace sitsrt::cuda {

class GraphInputImage final : public StepInputs {
 public:
  GraphInputImage(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes);
  ~GraphInputImage() override;
  GraphInputImage(const GraphInputImage&) = delete;
  GraphInputImage& operator=(const GraphInputImage&) = delete;

  // Starts filling the image: recording a new layout (null) or following `layout`. Waits until
  // the previous image's copy has read the host bytes.
  void begin(const std::vector<std::size_t>* layout);
  [[nodiscard]] Slot reserve(std::size_t bytes) override;
  void commit(const Slot&) override {}  // the whole image goes up at once (upload_image)
  // Every slot since begin() fell inside the image and, when following a layout, inside it.
  [[nodiscard]] bool fits() const noexcept { return layout_.fits(); }
  [[nodiscard]] const std::vector<std::size_t>& recorded() const noexcept { return layout_.recorded(); }
  // Queues the copy of the filled bytes to the device image on the stream.
  void upload_image();
  // Makes the image at least twice the bytes the last recording asked for (new addresses:
  // generation() changes, and every graph captured before is stale).
  void grow();
  // Whether there is an image, making one of the first size when a failed growth left none.
  [[nodiscard]] bool ensure() noexcept;
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

 private:
  void allocate(std::size_t bytes);

  const CudaContext& context_;
  DeviceAllocator& allocator_;
  std::size_t initial_bytes_;
  std::unique_ptr<MirroredBuffer> image_;
  cudaEvent_t copied_ = nullptr;  // recorded after the last upload_image
  bool copy_pending_ = false;
  InputLayout layout_;
  std::vector<std::vector<std::byte>> overflow_;  // slots that fell outside, until begin()
  std::uint64_t generation_ = 0;
};

}  // namespace sitsrt::cuda
