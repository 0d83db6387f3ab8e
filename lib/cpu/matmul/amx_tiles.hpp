// Internal, for the *_amx.cpp files only (compiled with the AMX flags): the tile configuration
// block, and the 16 x 16 transpose of 32-bit lanes (qdot/transpose16_avx512.hpp). Internal
// linkage (anonymous namespace), so no inline function is shared at link time with files built
// for other instruction sets (ODR note in matmul_kernels.hpp).
#pragma once

#include "cpu/qdot/transpose16_avx512.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

// LDTILECFG's 64-byte operand: palette 1, then bytes per row and rows of each of the 8 tiles.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// LDTILECFG from `cfg`, with all 64 bytes as the asm's input. GCC 12's _tile_loadconfig names
// only the first 8 bytes as its memory operand, so stores to the row and column fields may be
// dropped as dead: a configuration whose rows depend on a variable came out all zero, and the
// first tile load raised SIGILL.
inline void load_tile_config(const TileConfig& cfg) {
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

}  // namespace
}  // namespace sitsrt::cpu::detail
