// K centering offsets: which channels may be centered (the rope rule of kv_centering.hpp) and
// their mean keys, measured by one run over a fixed text.
#include "api/kv_centering.hpp"

#include "backend/kv_cache.hpp"
#include "core/check.hpp"
#include "core/half.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sitsrt {

std::string_view kv_centering_text() noexcept {
  // Plain prose on everyday subjects, so the keys are those a model meets in ordinary use.
  return "The morning train was late again, so Maria walked the last mile to the office. Along the river the "
         "market was opening: a baker stacked warm loaves, two boys carried crates of apples, and an old man "
         "tuned a guitar under the bridge. She bought a coffee and thought about the report she had to finish. "
         "The numbers from the spring survey did not agree with last year's, and nobody yet knew why.\n\n"
         "At nine the team met in the small room with the broken heater. Jonas had found a mistake in the way "
         "the samples were counted; some villages had been entered twice. \"If we fix that,\" he said, \"the "
         "trend goes the other way.\" They spent an hour checking each table, then wrote a short note to the "
         "director explaining what had changed and what it meant for the budget.";
}

std::vector<bool> kv_centering_mask(const ModelSpec& spec, bool neox, std::int64_t context_length) {
  const std::int64_t d = spec.head_dim;
  const std::int64_t width = spec.n_head_kv * d;
  const std::int64_t rot = spec.rope_dims > 0 ? std::min(spec.rope_dims, d) : d;
  const double span = static_cast<double>(std::max<std::int64_t>(context_length - 1, 0));
  std::vector<bool> mask(static_cast<std::size_t>(spec.n_layer * width), false);
  for (std::int64_t l = 0; l < spec.n_layer; ++l) {
    const bool local = spec.layer_is_windowed(l) && spec.rope_local_freq_base > 0.0f;
    const double base = local ? spec.rope_local_freq_base : spec.rope_freq_base;
    for (std::int64_t j = 0; j < d; ++j) {
      bool centered = true;  // channels past the rotated ones keep their place
      if (j < rot) {
        const std::int64_t pair = neox ? j % (rot / 2) : j / 2;
        const double theta = std::pow(base, -2.0 * static_cast<double>(pair) / static_cast<double>(rot));
        centered = theta * span <= std::numbers::pi / 3.0;
      }
      for (std::int64_t h = 0; h < spec.n_head_kv; ++h)
        mask[static_cast<std::size_t>(l * width + h * d + j)] = centered;
    }
  }
  return mask;
}

std::vector<std::int32_t> kv_rope_mates(const ModelSpec& spec, bool neox) {
  const std::int64_t d = spec.head_dim;
  const std::int64_t rot = spec.rope_dims > 0 ? std::min(spec.rope_dims, d) : d;
  std::vector<std::int32_t> mates(static_cast<std::size_t>(spec.n_head_kv * d));
  for (std::int64_t h = 0; h < spec.n_head_kv; ++h) {
    for (std::int64_t j = 0; j < d; ++j) {
      std::int64_t mate = j;
      if (j < rot) mate = neox ? (j < rot / 2 ? j + rot / 2 : j - rot / 2) : (j ^ 1);
      mates[static_cast<std::size_t>(h * d + j)] = static_cast<std::int32_t>(h * d + mate);
    }
  }
  return mates;
}

KCentering measure_k_centering(const ExecutionPlan& plan, std::span<const std::int32_t> tokens,
                               const std::vector<bool>& mask, std::span<const std::int32_t> mates) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t width = plan.kv_width;
  if (n < 2 || n > plan.context_length) {
    raise(ErrorCode::kInvalidArgument, "K centering: {} calibration tokens (2 .. {} needed)", n, plan.context_length);
  }
  if (mask.size() != static_cast<std::size_t>(plan.n_layers * width) ||
      mates.size() != static_cast<std::size_t>(width)) {
    raise(ErrorCode::kInternal, "K centering: mask of {} and mates of {} channels for {} layers x {}", mask.size(),
          mates.size(), plan.n_layers, width);
  }
  KvCacheLayout layout = plan.kv_layout;  // the same heads, stored exactly
  layout.k_type = ops::KvType::kF32;
  layout.v_type = ops::KvType::kF32;
  layout.k_rotated = false;
  layout.v_rotated = false;
  layout.k_offsets = {};
  layout.k_scales = {};
  ContiguousKvCache cache(*plan.backend, plan.n_layers, n, layout);
  StepRunner runner(plan);
  for (std::int64_t begin = 0; begin < n; begin += plan.memory.max_tokens) {
    const std::int64_t count = std::min(plan.memory.max_tokens, n - begin);
    const SequenceWork work{&cache, tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)),
                            0};
    (void)runner.step({&work, 1});
  }
  const auto to_f16_value = [](double x) { return fp16_to_fp32(fp32_to_fp16(static_cast<float>(x))); };
  KCentering out{std::vector<float>(mask.size(), 0.0f), std::vector<float>(mask.size(), 1.0f)};
  std::vector<float> keys(static_cast<std::size_t>(n * width));
  std::vector<double> square(static_cast<std::size_t>(width));
  const std::byte* first = cache.layer(0).k;
  for (std::int64_t l = 0; l < plan.n_layers; ++l) {
    const auto offset = static_cast<std::size_t>(cache.layer(l).k - first);
    plan.backend->read(cache.buffer(), offset, std::as_writable_bytes(std::span(keys)));
    float* offsets = out.offsets.data() + l * width;
    for (std::int64_t c = 0; c < width; ++c) {
      double sum = 0.0;
      for (std::int64_t p = 1; p < n; ++p) sum += keys[static_cast<std::size_t>(p * width + c)];
      if (mask[static_cast<std::size_t>(l * width + c)]) offsets[c] = to_f16_value(sum / static_cast<double>(n - 1));
      double sq = 0.0;
      for (std::int64_t p = 1; p < n; ++p) {
        const double x = static_cast<double>(keys[static_cast<std::size_t>(p * width + c)]) - offsets[c];
        sq += x * x;
      }
      square[static_cast<std::size_t>(c)] = sq / static_cast<double>(n - 1);
    }
    std::vector<double> pair(static_cast<std::size_t>(width));
    double mean = 0.0;
    for (std::int64_t c = 0; c < width; ++c) {
      const double r = std::sqrt(0.5 * (square[static_cast<std::size_t>(c)] +
                                        square[static_cast<std::size_t>(mates[static_cast<std::size_t>(c)])]));
      pair[static_cast<std::size_t>(c)] = r;
      mean += r / static_cast<double>(width);
    }
    if (!(mean > 0.0)) continue;  // keys all equal: nothing to even out
    for (std::int64_t c = 0; c < width; ++c) {
      out.scales[static_cast<std::size_t>(l * width + c)] =
          to_f16_value(std::cbrt(std::max(pair[static_cast<std::size_t>(c)], 1e-3 * mean) / mean));
    }
  }
  return out;
}

}  // namespace sitsrt
