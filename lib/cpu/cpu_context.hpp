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
  kAvx512,   // AVX-512 F/BW/VL/DQ
  kAvx512Vnni,  // kAvx512 + VNNI (vpdpbusd): integer-dot decode with int8 activations
  kAmx,         // kAvx512Vnni + AMX-BF16 tiles: prefill (m > 1) with bf16 operands, fp32 sums
};
std::string_view name(Isa isa) noexcept;
Isa detect_isa() noexcept;  // the best level this CPU supports
bool isa_supported(Isa isa) noexcept;

class CpuContext {
 public:
  // threads <= 0: all hardware threads. isa: clamped to what the CPU supports.
  // int8_activations: decode (m == 1) matmuls of Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 weights quantize the
  // input row to int8 per 32-block (Q8_0-style, fp32 scale) and use integer dot products; this
  // changes numerics (see docs/quantization.md), so it is a choice, recorded by the engine.
  CpuContext(int threads, Isa isa, bool int8_activations = false);

  [[nodiscard]] ThreadPool& pool() noexcept { return *pool_; }
  [[nodiscard]] int threads() const noexcept { return pool_->size(); }
  [[nodiscard]] Isa isa() const noexcept { return isa_; }
  [[nodiscard]] bool int8_activations() const noexcept { return int8_activations_; }
  // Batch invariance: a matmul of one row takes the many-row (GEMM) path, so each row's result
  // is the same whatever number of rows shares its call (deterministic serving).
  void set_batch_invariant(bool on) noexcept { batch_invariant_ = on; }
  [[nodiscard]] bool batch_invariant() const noexcept { return batch_invariant_; }

  // Ensures every thread has at least `floats` floats of scratch. Called at load/plan time.
  void reserve_scratch(std::size_t floats);
  [[nodiscard]] std::size_t scratch_floats() const noexcept { return scratch_floats_; }
  // Scratch of thread `thread_index`; throws kInternal if more than reserved is requested.
  [[nodiscard]] float* scratch(int thread_index, std::size_t floats);

  // One buffer shared by all threads for a matmul's quantized input row (written by the
  // calling thread before the workers start). Reserved at load/plan time like scratch.
  void reserve_shared_bytes(std::size_t bytes);
  [[nodiscard]] std::size_t shared_bytes() const noexcept { return shared_bytes_; }
  // Throws kInternal if more than reserved is requested.
  [[nodiscard]] std::byte* shared(std::size_t bytes);

 private:
  std::unique_ptr<ThreadPool> pool_;
  Isa isa_;
  bool int8_activations_ = false;
  bool batch_invariant_ = false;
  std::size_t scratch_floats_ = 0;
  std::vector<AlignedBuffer> scratch_;
  std::size_t shared_bytes_ = 0;
  AlignedBuffer shared_;
};

}  // namespace sitsrt::cpu
