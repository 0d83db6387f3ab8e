// A kernel's dynamic shared memory (the launch's `shared` bytes) as an array `name` of `type`,
// 16-byte aligned. Under the tests' CPU emulator (tests/cuda_emulator) it is the emulated
// block's buffer.
#pragma once

#if defined(SITSRT_CUDA_EMULATION)
#define SITSRT_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::sitsrt::cuda_emulator::dynamic_shared_memory())
#else
#define SITSRT_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif
