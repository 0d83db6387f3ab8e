// Backend-neutral views the ops validate: an activation matrix and a bound weight, each naming
// the device whose memory holds it. Neither is dereferenced outside the owning backend.
#pragma once

#include "core/device.hpp"
#include "core/dtype.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::ops {

// `rows` rows of `cols` elements of `type`, `ld` elements between row starts, at `data` in
// `device`'s address space.
struct TensorRef {
  std::byte* data = nullptr;
  DType type = DType::kF32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;
  Device device;
};

// A graph weight as the backend bound it: `id` is the graph's WeightId, which the backend maps
// to its own copy (possibly in a layout private to it); `format` is the graph's type and
// [rows x cols] its shape (a vector is 1 x n).
struct WeightRef {
  std::int32_t id = -1;
  DType format = DType::kF32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Device device;
};

}  // namespace sitsrt::ops
