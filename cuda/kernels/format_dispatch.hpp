// The weight formats the CUDA kernels decode (device_formats.hpp), from a runtime DType to a
// template argument, for the kernel files that instantiate one kernel per format.
#pragma once

#include "core/dtype.hpp"

namespace sitsrt::cuda {

// Raises sitsrt::Error (kInternal) naming the kernel: a launch for a format its kernel file has no
// instance of. The backend checks formats at load, so reaching it is a bug (never a silent skip
// that leaves the output unwritten).
[[noreturn]] void raise_unsupported_format(DType format, const char* kernel);

// Calls fn.template operator()<F>() for a supported format; false otherwise.
template <typename Fn>
bool dispatch_weight_format(DType format, Fn&& fn) {
  switch (format) {
    case DType::kF32:
      fn.template operator()<DType::kF32>();
      return true;
    case DType::kF16:
      fn.template operator()<DType::kF16>();
      return true;
    case DType::kBF16:
      fn.template operator()<DType::kBF16>();
      return true;
    case DType::kQ8_0:
      fn.template operator()<DType::kQ8_0>();
      return true;
    case DType::kQ4_0:
      fn.template operator()<DType::kQ4_0>();
      return true;
    case DType::kQ4_1:
      fn.template operator()<DType::kQ4_1>();
      return true;
    case DType::kQ5_0:
      fn.template operator()<DType::kQ5_0>();
      return true;
    case DType::kQ5_1:
      fn.template operator()<DType::kQ5_1>();
      return true;
    case DType::kFP8_E4M3:
      fn.template operator()<DType::kFP8_E4M3>();
      return true;
    case DType::kQ4_G128:
      fn.template operator()<DType::kQ4_G128>();
      return true;
    case DType::kQ4_K:
      fn.template operator()<DType::kQ4_K>();
      return true;
    case DType::kQ5_K:
      fn.template operator()<DType::kQ5_K>();
      return true;
    case DType::kQ6_K:
      fn.template operator()<DType::kQ6_K>();
      return true;
    case DType::kQ2_K:  // Q2_K and Q3_K: stored rows only (element by element), no planar layout yet
      fn.template operator()<DType::kQ2_K>();
      return true;
    case DType::kQ3_K:
      fn.template operator()<DType::kQ3_K>();
      return true;
    case DType::kIQ4_NL:
      fn.template operator()<DType::kIQ4_NL>();
      return true;
    default:
      return false;
  }
}

// The formats of the planar layout (planar_weights.hpp).
template <DType F>
inline constexpr bool kPlanarFormat =
    F == DType::kFP8_E4M3 || F == DType::kQ4_G128 || F == DType::kQ8_0 || F == DType::kQ4_0 || F == DType::kQ4_1 ||
    F == DType::kQ5_0 || F == DType::kQ5_1 || F == DType::kQ4_K || F == DType::kQ5_K || F == DType::kQ6_K ||
    F == DType::kF16 || F == DType::kBF16 || F == DType::kIQ4_NL;

// dispatch_weight_format for the planar formats only; false for the others.
template <typename Fn>
bool dispatch_planar_format(DType format, Fn&& fn) {
  bool planar = false;
  dispatch_weight_format(format, [&]<DType F>() {
    if constexpr (kPlanarFormat<F>) {
      fn.template operator()<F>();
      planar = true;
    }
  });
  return planar;
}

}  // namespace sitsrt::cuda
