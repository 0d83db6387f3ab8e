// [cuda] test cases skip visibly (support/skip.hpp) where the CUDA runtime sees no device.
#pragma once

#include "cuda_backend/cuda_backend_factory.hpp"
#include "support/skip.hpp"

#include <string>

#define SITSRT_SKIP_WITHOUT_CUDA()                                  \
  do {                                                              \
    std::string sitsrt_cuda_why;                                    \
    if (::sitsrt::cuda::cuda_device_count(&sitsrt_cuda_why) == 0) { \
      SITSRT_SKIP("[cuda] no CUDA device: " << sitsrt_cuda_why);    \
    }                                                               \
  } while (false)
