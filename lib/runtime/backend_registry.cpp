#include "runtime/backend_registry.hpp"

#include "core/check.hpp"
#include "cpu_backend/cpu_backend.hpp"
#if defined(SITSRT_HAVE_CUDA_BACKEND)
#include "cuda_backend/cuda_backend_factory.hpp"
#endif

#include <charconv>

namespace sitsrt {
namespace {

constexpr RegisteredBackend kBackends[] = {
    {"cpu", "host CPU: AVX2 / AVX-512 / AMX kernels, resident or mmapped weights"},
#if defined(SITSRT_HAVE_CUDA_BACKEND)
    {"cuda", "NVIDIA GPU (cuda:N): weights uploaded in their stored formats, paged quantized KV on the device"},
#endif
};

std::string registered_names() {
  std::string names;
  for (const RegisteredBackend& b : kBackends) names += (names.empty() ? "" : ", ") + std::string(b.name);
  return names;
}

}  // namespace

std::span<const RegisteredBackend> registered_backends() noexcept { return kBackends; }

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  const std::string_view device = options.device;
  const std::size_t colon = device.find(':');
  const std::string_view kind = device.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = device.substr(colon + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || index < 0) {
      raise(ErrorCode::kInvalidArgument, "device '{}' is not NAME or NAME:INDEX (registered backends: {})", device,
            registered_names());
    }
  }
  if (kind == "cpu") {
    if (index != 0) raise(ErrorCode::kUnsupported, "device '{}': the cpu backend has one device, cpu:0", device);
    CpuBackendOptions cpu;
    cpu.threads = options.threads;
    cpu.isa = options.cpu_isa;
    cpu.budget_bytes = options.budget_bytes;
    cpu.int8_activations = options.int8_activations;
    cpu.resident_weights = options.resident_weights;
    cpu.decode_fusion = options.decode_fusion;  // (batch invariance keeps only the int8 ones)
    cpu.batch_invariant = options.batch_invariant;
    return std::make_unique<CpuBackend>(cpu);
  }
#if defined(SITSRT_HAVE_CUDA_BACKEND)
  if (kind == "cuda") {
    return cuda::make_cuda_backend(
        {index, options.budget_bytes, options.device_graphs, options.batch_invariant, options.decode_fusion});
  }
#endif
  raise(ErrorCode::kUnsupported, "device '{}': this build has no '{}' backend (registered backends: {})", device, kind,
        registered_names());
}

}  // namespace sitsrt
