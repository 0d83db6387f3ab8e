// libFuzzer target: KL-divergence base files (sitsrt perplexity --kl-divergence-base) come from
// disk and may be truncated or damaged. The reader must accept a valid file or throw
// sitsrt::Error, never crash, hang or allocate beyond the input size; every row it accepts must
// compare against a logits row without trapping. The first input byte selects whether the
// header and row checksums are repaired first (bit 0), so that mutations reach the field checks
// behind them.
#include "eval/kld_base_file.hpp"
#include "eval/log_probs.hpp"

#include <sitsrt/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace {

using sitsrt::eval::fnv1a64;

std::uint32_t u32(const std::vector<std::byte>& b, std::size_t at) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

void put_sum(std::vector<std::byte>& b, std::size_t sum_at, std::size_t from) {
  const std::uint64_t sum = fnv1a64(std::span<const std::byte>(b).subspan(from, sum_at - from));
  std::memcpy(b.data() + sum_at, &sum, 8);
}

// Rewrites the checksums where the (mutated) fields say they are.
void repair_checksums(std::vector<std::byte>& b) {
  if (b.size() < sitsrt::eval::kKldFixedHeaderBytes) return;
  const std::uint64_t header =
      sitsrt::eval::kKldFixedHeaderBytes + std::uint64_t{u32(b, 100)} + 4 * std::uint64_t{u32(b, 16)} * u32(b, 20) + 8;
  if (header > b.size()) return;
  put_sum(b, static_cast<std::size_t>(header - 8), 0);
  const std::uint64_t row = (sitsrt::eval::kKldRowPrefixBytes + 2 * std::uint64_t{u32(b, 12)} + 7) / 8 * 8;
  for (std::uint64_t at = header; at + row <= b.size(); at += row) {
    const auto start = static_cast<std::size_t>(at);
    const std::uint64_t sum =
        fnv1a64(std::span<const std::byte>(b).subspan(start + 8, static_cast<std::size_t>(row - 8)));
    std::memcpy(b.data() + start, &sum, 8);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
  if ((data[0] & 1) != 0) repair_checksums(bytes);
  try {
    const sitsrt::eval::KldBaseHeader h = sitsrt::eval::parse_header(bytes, bytes.size(), "fuzz.kld");
    if (h.file_bytes() != bytes.size() || h.rows() == 0) __builtin_trap();
    std::vector<std::uint16_t> codes(h.n_vocab);
    std::vector<float> logits(h.n_vocab);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 13) * 0.5f;
    const sitsrt::eval::RowSoftmax softmax = sitsrt::eval::log_softmax(logits);
    for (std::uint64_t r = 0; r < h.rows(); ++r) {
      const auto at = static_cast<std::size_t>(h.header_bytes() + r * h.row_bytes());
      const auto row = std::span<const std::byte>(bytes).subspan(at, static_cast<std::size_t>(h.row_bytes()));
      const sitsrt::eval::QuantizedRow q = sitsrt::eval::parse_row(row, h, r, "fuzz.kld", codes);
      const std::int32_t target = h.target(r);
      if (target < 0 || target >= static_cast<std::int32_t>(h.n_vocab)) __builtin_trap();
      const sitsrt::eval::RowComparison c = sitsrt::eval::compare_row(q, codes, logits, softmax, target);
      // An accepted row is a distribution: its KL divergence is a finite number.
      if (!std::isfinite(c.kld) || !std::isfinite(c.nll)) __builtin_trap();
    }
  } catch (const sitsrt::Error&) {
  }
  return 0;
}
