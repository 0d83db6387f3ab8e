// Internal to lib/cpu/attention: the argument checks kv_store and attention share.
#pragma once

#include "cpu/attention/attention.hpp"

namespace sitsrt::cpu::detail {

// Throws kInvalidArgument for a null cache, row bytes below kv_row_bytes, positions
// [pos0, pos0 + rows) outside the capacity or the block table, or a negative table entry;
// kUnsupported for an int4 width not a multiple of 32 or rotation without a power-of-two
// head_dim <= kMaxRotatedHeadDim.
void check_cache(const KvLayerView& kv, std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t pos0,
                 std::int64_t rows, const char* op);

}  // namespace sitsrt::cpu::detail
