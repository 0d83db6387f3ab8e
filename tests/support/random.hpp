// Deterministic random inputs for tests (fresh per test via its seed; never zeros).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace sitsrt::test {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}

  std::uint64_t next() noexcept {  // splitmix64
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) noexcept {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
  float normal() noexcept {  // Box-Muller
    const float u1 = uniform(1e-7f, 1.0f);
    const float u2 = uniform(0.0f, 1.0f);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  }
  // Both of Box-Muller's outputs in turn (cos, then sin of the same draw): half the log/cos per
  // value, for the generators of the big kernel sweeps, where normal() was a quarter of the time.
  float paired_normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const float u1 = uniform(1e-7f, 1.0f);
    const float u2 = uniform(0.0f, 1.0f);
    const float radius = std::sqrt(-2.0f * std::log(u1)), angle = 6.2831853f * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }
  std::vector<float> normals(std::size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal() * scale;
    return v;
  }
  int uniform_int(int lo, int hi) noexcept {  // inclusive
    return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::uint64_t state_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

}  // namespace sitsrt::test
