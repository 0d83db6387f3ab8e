// The CUDA emulator's device side: what a kernel file (cuda/kernels/*.cu) needs to compile as
// host C++ and run on the CPU. The emulated kernel objects include this first (tests/CMakeLists.txt
// generates one .cpp per .cu that includes it, then the .cu), with SITSRT_CUDA_EMULATION defined.
//
// Each CUDA thread of a block runs as a fiber of its own (device_threads.cpp); the blocks of a
// grid run one after another, in a shuffled order. __syncthreads and the warp collectives
// (__shfl_*_sync, __ballot_sync, mma.sync) switch fibers until every live thread of the block
// (lane of the warp) has arrived, so a kernel's barriers and lane exchanges are honoured as on
// the device, and a kernel that waits where its threads cannot all arrive, or exchanges with an
// exited lane, fails its launch with a message instead of hanging. __shared__ variables become
// statics, which is safe because one block runs at a time (launches hold a lock), poisoned
// before each block.
#pragma once

#if !defined(SITSRT_CUDA_EMULATION) || defined(__CUDACC__)
#error "cuda_emulator.hpp is for the emulated (host C++) build of the kernels only"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

// The CUDA headers define these as attributes GCC does not know (host compilation).
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
// Statics in a section of their own, which the emulator poisons (0xff bytes) before every block:
// shared memory starts undefined on the device, and a kernel reading what no thread of its
// block wrote gets NaN / -1 here instead of an earlier block's values.
#define __shared__ __attribute__((section("sitsrt_emulated_shared"))) static
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

namespace sitsrt::cuda_emulator {

// The running CUDA thread (fiber) as a kernel sees it.
struct ThreadIndex {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1};
  dim3 grid_dim{1, 1, 1};
};
const ThreadIndex& current_thread() noexcept;

// The block's dynamic shared memory (poisoned with 0xff bytes before each block).
void* dynamic_shared_memory() noexcept;

// Collectives; each blocks the calling fiber until its block's / warp's live threads arrive.
void sync_threads();
int sync_threads_or(int predicate);
std::uint64_t shuffle(std::uint32_t mask, std::uint64_t bits, int source, bool down, int width);
std::uint32_t ballot(std::uint32_t mask, int predicate);
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c += A B over the warp's fragments.
void mma_bf16_m16n8k16(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], float (&c)[4]);

// Clears the errors (sticky ones included): the emulator's own tests provoke them.
void reset_device();

// Runs `body` as a grid on the calling thread, or records it when `stream` is being captured
// into a graph. A launch the device would refuse (an empty or too large grid or block, more
// dynamic shared memory than the kernel is allowed) runs nothing and leaves the error for
// cudaGetLastError, as does a kernel that fails (a barrier its threads cannot all reach).
void launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
            std::function<void()> body);

template <typename T>
std::uint64_t bits_of(T v) noexcept {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <typename T>
T from_bits(std::uint64_t b) noexcept {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace sitsrt::cuda_emulator

#define threadIdx (::sitsrt::cuda_emulator::current_thread().thread_idx)
#define blockIdx (::sitsrt::cuda_emulator::current_thread().block_idx)
#define blockDim (::sitsrt::cuda_emulator::current_thread().block_dim)
#define gridDim (::sitsrt::cuda_emulator::current_thread().grid_dim)

using std::isfinite;
using std::isinf;
using std::isnan;

// CUDA's min / max overloads (device code calls them unqualified).
#define SITSRT_EMULATOR_MIN_MAX(T) \
  inline T min(T a, T b) {         \
    return b < a ? b : a;          \
  }                                \
  inline T max(T a, T b) {         \
    return a < b ? b : a;          \
  }
SITSRT_EMULATOR_MIN_MAX(int)
SITSRT_EMULATOR_MIN_MAX(unsigned)
SITSRT_EMULATOR_MIN_MAX(long)
SITSRT_EMULATOR_MIN_MAX(unsigned long)
SITSRT_EMULATOR_MIN_MAX(long long)
SITSRT_EMULATOR_MIN_MAX(unsigned long long)
#undef SITSRT_EMULATOR_MIN_MAX

inline void __syncthreads() {
  ::sitsrt::cuda_emulator::sync_threads();
}
inline int __syncthreads_or(int predicate) {
  return ::sitsrt::cuda_emulator::sync_threads_or(predicate);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  namespace e = ::sitsrt::cuda_emulator;
  return e::from_bits<T>(e::shuffle(mask, e::bits_of(v), lane_mask, false, width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  namespace e = ::sitsrt::cuda_emulator;
  return e::from_bits<T>(e::shuffle(mask, e::bits_of(v), static_cast<int>(delta), true, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::sitsrt::cuda_emulator::ballot(mask, predicate);
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
template <typename T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v);
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
// The _rn intrinsics keep the compiler from contracting into an fma: so do these (the emulated
// objects are built with -ffp-contract=off).
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}
inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
// PTX prmt (default mode): byte i of the result is byte (s >> 4i) & 7 of {y, x}.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const std::uint64_t pool = static_cast<std::uint64_t>(y) << 32 | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((pool >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}
