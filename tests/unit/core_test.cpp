// Core layer: dtype registry, fp16/bf16 conversion, block quantization round trips, thread pool.
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "core/thread_pool.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstring>
#include <vector>

using namespace sitsrt;

TEST_CASE("dtype registry names and sizes", "[core]") {
  CHECK(row_bytes(DType::kF32, 7) == 28);
  CHECK(row_bytes(DType::kQ8_0, 64) == 68);
  CHECK(row_bytes(DType::kQ4_0, 96) == 54);
  CHECK(dtype_from_name("Q5_1") == DType::kQ5_1);
  CHECK(dtype_from_name("Q4_K") == DType::kQ4_K);
  CHECK(dtype_from_name("iq4_nl") == DType::kIQ4_NL);
  CHECK(row_bytes(DType::kQ4_K, 512) == 288);
  CHECK_THROWS_AS(row_bytes(DType::kQ6_K, 32), Error);
  CHECK_FALSE(dtype_from_name("q4_k_m").has_value());
  CHECK_THROWS_AS(row_bytes(DType::kQ4_1, 33), Error);
}

TEST_CASE("fp16 conversion is exact for every half value", "[core]") {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = fp16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    REQUIRE(fp32_to_fp16(f) == h);
  }
}

TEST_CASE("fp16 rounding matches nearest-even against a double reference", "[core]") {
  test::Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = rng.uniform(-70000.0f, 70000.0f) * std::pow(2.0f, rng.uniform(-30.0f, 0.0f));
    const std::uint16_t h = fp32_to_fp16(f);
    const double got = fp16_to_fp32(h);
    if (std::isinf(got)) {
      REQUIRE(std::fabs(f) >= 65504.0f);
      continue;
    }
    // No representable half is closer than the one chosen.
    const double lo = fp16_to_fp32(static_cast<std::uint16_t>(h - 1));
    const double hi = fp16_to_fp32(static_cast<std::uint16_t>(h + 1));
    const double err = std::fabs(got - f);
    if ((h & 0x7FFFu) != 0) REQUIRE(err <= std::fabs(lo - f) + 1e-30);
    if ((h & 0x7FFFu) < 0x7BFFu) REQUIRE(err <= std::fabs(hi - f) + 1e-30);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even", "[core]") {
  CHECK(fp32_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_fp32(fp32_to_bf16(-2.5f)) == -2.5f);
  const float halfway = std::bit_cast<float>(0x3F808000u);  // exactly between 0x3F80 and 0x3F81
  CHECK(fp32_to_bf16(halfway) == 0x3F80);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

TEST_CASE("block quantization round trip stays within half a step", "[core]") {
  const auto type = GENERATE(DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kF16,
                             DType::kBF16, DType::kF32);
  CAPTURE(name(type));
  test::Rng rng(11);
  const std::int64_t n = 32 * 37;
  std::vector<float> x(n);
  for (auto& v : x) v = rng.normal() * 3.0f;
  std::vector<std::byte> q(row_bytes(type, n));
  quantize_row(type, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(type, q.data(), y.data(), n);
  const int levels = type == DType::kQ4_0 || type == DType::kQ4_1 ? 15 : 31;
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float lo = x[b * 32], hi = x[b * 32];
    for (int j = 0; j < 32; ++j) {
      lo = std::min(lo, x[b * 32 + j]);
      hi = std::max(hi, x[b * 32 + j]);
    }
    const float amax = std::max(std::fabs(lo), std::fabs(hi));
    double tol;
    if (!traits(type).quantized) {
      tol = amax * (type == DType::kBF16 ? 4e-3 : type == DType::kF16 ? 5e-4 : 0.0);
    } else {
      // Min/max formats: half a step. Symmetric formats map the signed extreme to the lowest
      // code, so the opposite extreme is clamped one code short: up to a whole step there.
      // Plus the fp16 rounding of the scale applied to the largest code.
      const bool with_min = type == DType::kQ4_1 || type == DType::kQ5_1;
      const double step = with_min               ? (hi - lo) / levels
                          : type == DType::kQ8_0 ? amax / 127.0
                                                 : amax / ((levels + 1) / 2);
      tol = (with_min || type == DType::kQ8_0 ? 0.5 : 1.0) * step * 1.01 + amax * 1e-3;
    }
    for (int j = 0; j < 32; ++j) {
      INFO("block " << b << " element " << j);
      REQUIRE(std::fabs(y[b * 32 + j] - x[b * 32 + j]) <= tol);
    }
  }
}

TEST_CASE("q4_0 encoding matches the reference rule bit for bit", "[core]") {
  // The element of largest magnitude maps to code 0 (= -8), the reference rule of GGUF files.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 20.0f;  // largest magnitude: -20
  BlockQ4_0 b{};
  quantize_row(DType::kQ4_0, x.data(), &b, 32);
  CHECK(fp16_to_fp32(b.d) == 2.5f);
  CHECK((b.qs[0] & 0x0F) == 0);
}

TEST_CASE("thread pool runs every part exactly once and propagates errors", "[core]") {
  // Catch assertions are not thread-safe: the jobs only record, the test thread checks.
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> mask{0}, runs{0}, bad_count{0};
    pool.run([&](int part, int n) {
      if (n != 4) bad_count.fetch_add(1);
      mask.fetch_or(1 << part);
      runs.fetch_add(1);
    });
    REQUIRE(mask.load() == 0xF);
    REQUIRE(runs.load() == 4);
    REQUIRE(bad_count.load() == 0);
  }
  CHECK_THROWS_AS(pool.run([](int part, int) {
    if (part == 2) throw Error(ErrorCode::kInternal, "boom");
  }), Error);
  std::atomic<int> after{0};
  pool.run([&](int, int) { after.fetch_add(1); });
  CHECK(after.load() == 4);
}

TEST_CASE("thread pool finishes a job while a part blocks", "[core]") {
  // A part that sleeps (as a descheduled worker would) must not keep the others from running.
  ThreadPool pool(3);
  std::atomic<int> runs{0};
  pool.run([&](int part, int) {
    if (part == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    runs.fetch_add(1);
  });
  CHECK(runs.load() == 3);
}

TEST_CASE("OwnedChunkQueue hands out every item exactly once across threads", "[core]") {
  ThreadPool pool(3);
  for (std::int64_t n : {0, 1, 7, 64, 1000}) {
    for (std::int64_t chunk : {1, 3, 64, 2000}) {
      for (int parts : {1, 2, 3, 5, 70}) {  // 70 > kMaxParts: parts share ranges
        CAPTURE(n, chunk, parts);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<int> bad_ranges{0};
        OwnedChunkQueue chunks(n, chunk, parts);
        pool.run([&](int part, int threads) {
          // the pool's 3 parts stand in for `parts` parts: each claims for several of them
          for (int p = part; p < parts; p += threads) {
            for (Range c = chunks.next(p); c.begin < c.end; c = chunks.next(p)) {
              if (c.end - c.begin > chunk || c.begin < 0 || c.end > n) bad_ranges.fetch_add(1);
              for (std::int64_t i = c.begin; i < c.end; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
            }
          }
        });
        REQUIRE(bad_ranges.load() == 0);
        for (const auto& h : hits) REQUIRE(h.load() == 1);
        const Range after = chunks.next(0);
        CHECK(after.begin == after.end);
      }
    }
  }
}

TEST_CASE("OwnedChunkQueue: parts take their own range in order, then halves of the others' rest", "[core]") {
  // 64 items, 2 parts (ranges [0, 32) and [32, 64)), chunks of at most 4. Part 0 alone: its own
  // range front to back (full chunks while 8 or more are left, then halves), then part 1's
  // range from the back, halves of what is left.
  OwnedChunkQueue chunks(64, 4, 2);
  std::vector<Range> got;
  for (Range c = chunks.next(0); c.begin < c.end; c = chunks.next(0)) got.push_back(c);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{
      {0, 4}, {4, 8}, {8, 12}, {12, 16}, {16, 20}, {20, 24}, {24, 28}, {28, 30}, {30, 31}, {31, 32},
      {60, 64}, {56, 60}, {52, 56}, {48, 52}, {44, 48}, {40, 44}, {36, 40}, {34, 36}, {33, 34}, {32, 33}};
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].begin == want[i].first);
    CHECK(got[i].end == want[i].second);
  }
  // One part: the whole range in order at full size.
  OwnedChunkQueue one(10, 4, 1);
  CHECK(one.next(0).end == 4);
  CHECK(one.next(0).end == 8);
  const Range last = one.next(0);
  CHECK((last.begin == 8 && last.end == 10));
}

TEST_CASE("split_range covers the range without overlap", "[core]") {
  for (int n : {0, 1, 7, 64, 1000}) {
    for (int threads : {1, 2, 3, 8}) {
      std::int64_t next = 0;
      for (int t = 0; t < threads; ++t) {
        const Range r = split_range(n, t, threads, 4);
        REQUIRE(r.begin == next);
        REQUIRE(r.end >= r.begin);
        next = r.end;
      }
      REQUIRE(next == n);
    }
  }
}
