// Execution context handed to every CPU kernel: the thread pool, the instruction-set level
// to dispatch to, and per-thread scratch reserved up front (kernels never allocate).
#pragma once

#include "core/aligned_buffer.hpp"
#include "core/thread_pool.hpp"

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace sitsrt::cpu {

enum class Isa {
  kGeneric,  // portable C++, any x86-64 or other CPU
  kAvx2,     // AVX2 + FMA + F16C
  kAvx512,   // AVX-512 F/BW/VL/DQ (VNNI/BF16 are not used by this version)
};
std::string_view name(Isa isa) noexcept;
Isa detect_isa() noexcept;  // the best level this CPU supports
bool isa_supported(Isa isa) noexcept;

class CpuContext {
 public:
  // threads <= 0: all hardware threads. isa: clamped to what the CPU supports.
  CpuContext(int threads, Isa isa);

  [[nodiscard]] ThreadPool& pool() noexcept { return *pool_; }
  [[nodiscard]] int threads() const noexcept { return pool_->size(); }
  [[nodiscard]] Isa isa() const noexcept { return isa_; }

  // Ensures every thread has at least `floats` floats of scratch. Called at load/plan time.
  void reserve_scratch(std::size_t floats);
  [[nodiscard]] std::size_t scratch_floats() const noexcept { return scratch_floats_; }
  // Scratch of thread `thread_index`; throws kInternal if more than reserved is requested.
  [[nodiscard]] float* scratch(int thread_index, std::size_t floats);

 private:
  std::unique_ptr<ThreadPool> pool_;
  Isa isa_;
  std::size_t scratch_floats_ = 0;
  std::vector<AlignedBuffer> scratch_;
};

}  // namespace sitsrt::cpu
