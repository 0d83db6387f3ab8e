#include "cuda_backend/step_inputs.hpp"

#include <cstring>

namespace sitsrt::cuda {

const std::byte* StepInputs::upload(std::span<const std::byte> bytes) {
  const Slot slot = reserve(bytes.size());
  if (!bytes.empty()) std::memcpy(slot.host, bytes.data(), bytes.size());
  commit(slot);
  return slot.device;
}

}  // namespace sitsrt::cuda
