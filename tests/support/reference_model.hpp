// An independent, naive double-precision forward pass of every supported architecture, used as
// the reference in tests. Written from the architectures' definitions (Llama: RMSNorm, rotary
// embedding, grouped-query causal attention, SwiGLU; Mistral: sliding window; Qwen2: q/k/v
// biases; Qwen3: per-head Q/K RMSNorm; Gemma 3: scaled embedding, sandwich norms, GeGLU(tanh),
// 5 local : 1 global layers with their own rope bases; rope scaling: linear, YaRN as in HF
// transformers, llama3 factors from rope_freqs.weight) and the GGUF key and tensor names. It
// reads weights through the reference dequantizer and shares no code with the runtime's spec
// reader, graph, ops or kernels.
#pragma once

#include "core/quant_blocks.hpp"
#include "formats/gguf.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>
#include <string>
#include <vector>

namespace sitsrt::test {

class ReferenceModel {
 public:
  using Vec = std::vector<double>;

  explicit ReferenceModel(const std::string& path) : file_(gguf::File::open(path)) {
    arch_ = file_.require_string("general.architecture");
    dim_ = static_cast<int>(u("embedding_length"));
    layers_ = static_cast<int>(u("block_count"));
    heads_ = static_cast<int>(u("attention.head_count"));
    kv_heads_ = static_cast<int>(file_.get_uint(k("attention.head_count_kv")).value_or(heads_));
    head_dim_ = static_cast<int>(file_.get_uint(k("attention.key_length")).value_or(dim_ / heads_));
    eps_ = file_.get_float(k("attention.layer_norm_rms_epsilon")).value_or(1e-5);
    base_ = file_.get_float(k("rope.freq_base")).value_or(10000.0);
    vocab_ = static_cast<int>(file_.find_tensor("token_embd.weight")->dims[1]);
    gemma_ = arch_ == "gemma3";
    neox_ = arch_ != "llama";
    window_ = static_cast<int>(file_.get_uint(k("attention.sliding_window")).value_or(0));
    softcap_ = file_.get_float(k("final_logit_softcapping")).value_or(0.0);
    local_base_ = file_.get_float(k("rope.freq_base_swa")).value_or(gemma_ ? 10000.0 : base_);
    const std::string scaling = file_.get_string(k("rope.scaling.type")).value_or("none");
    factor_ = file_.get_float(k("rope.scaling.factor")).value_or(1.0);
    linear_ = scaling == "linear";
    yarn_ = scaling == "yarn";
    original_ctx_ = static_cast<double>(file_.get_uint(k("rope.scaling.original_context_length")).value_or(0));
    if (file_.find_tensor("rope_freqs.weight") != nullptr) rope_divisors_ = row("rope_freqs.weight", 0);
  }

  [[nodiscard]] int vocab() const { return vocab_; }

  // Gemma 3 alternates five sliding-window layers with one global layer; Mistral windows all.
  [[nodiscard]] bool windowed(int layer) const {
    if (window_ == 0) return false;
    return gemma_ ? (layer + 1) % 6 != 0 : true;
  }

  // Logits after each token of `tokens` (fresh context), [tokens.size()][vocab].
  std::vector<Vec> forward(const std::vector<std::int32_t>& tokens) {
    const int kv_width = kv_heads_ * head_dim_;
    std::vector<Vec> keys(static_cast<std::size_t>(layers_)), values(static_cast<std::size_t>(layers_));
    std::vector<Vec> out;
    for (std::size_t pos = 0; pos < tokens.size(); ++pos) {
      Vec x = row("token_embd.weight", tokens[pos]);
      if (gemma_) {
        for (double& v : x) v *= std::sqrt(static_cast<double>(dim_));
      }
      for (int l = 0; l < layers_; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        Vec h = rms_norm(x, p + "attn_norm.weight");
        Vec q = linear(p + "attn_q", h);
        Vec kk = linear(p + "attn_k", h);
        const Vec v = linear(p + "attn_v", h);
        if (file_.find_tensor(p + "attn_q_norm.weight") != nullptr) {
          per_head_norm(q, p + "attn_q_norm.weight");
          per_head_norm(kk, p + "attn_k_norm.weight");
        }
        rotate(q, static_cast<double>(pos), l);
        rotate(kk, static_cast<double>(pos), l);
        auto& K = keys[static_cast<std::size_t>(l)];
        auto& V = values[static_cast<std::size_t>(l)];
        K.insert(K.end(), kk.begin(), kk.end());
        V.insert(V.end(), v.begin(), v.end());
        const std::size_t first = windowed(l) && pos + 1 > static_cast<std::size_t>(window_)
                                      ? pos + 1 - static_cast<std::size_t>(window_)
                                      : 0;
        Vec attn(static_cast<std::size_t>(heads_ * head_dim_), 0.0);
        const int group = heads_ / kv_heads_;
        for (int hd = 0; hd < heads_; ++hd) {
          const int kvh = hd / group;
          Vec scores(pos + 1 - first);
          double max_score = -1e300;
          for (std::size_t t = first; t <= pos; ++t) {
            double s = 0;
            for (int i = 0; i < head_dim_; ++i) {
              s += q[static_cast<std::size_t>(hd * head_dim_ + i)] *
                   K[t * static_cast<std::size_t>(kv_width) + static_cast<std::size_t>(kvh * head_dim_ + i)];
            }
            scores[t - first] = s / std::sqrt(static_cast<double>(head_dim_));
            max_score = std::max(max_score, scores[t - first]);
          }
          double sum = 0;
          for (auto& s : scores) sum += (s = std::exp(s - max_score));
          for (std::size_t t = first; t <= pos; ++t) {
            for (int i = 0; i < head_dim_; ++i) {
              attn[static_cast<std::size_t>(hd * head_dim_ + i)] +=
                  scores[t - first] / sum *
                  V[t * static_cast<std::size_t>(kv_width) + static_cast<std::size_t>(kvh * head_dim_ + i)];
            }
          }
        }
        Vec o = matvec(p + "attn_output.weight", attn);
        if (gemma_) o = rms_norm(o, p + "post_attention_norm.weight");
        for (int i = 0; i < dim_; ++i) x[static_cast<std::size_t>(i)] += o[static_cast<std::size_t>(i)];
        h = rms_norm(x, p + "ffn_norm.weight");
        const Vec gate = matvec(p + "ffn_gate.weight", h);
        const Vec up = matvec(p + "ffn_up.weight", h);
        Vec act(gate.size());
        for (std::size_t i = 0; i < gate.size(); ++i) {
          const double g = gate[i];
          const double a =
              gemma_ ? 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g)))
                     : g / (1.0 + std::exp(-g));
          act[i] = a * up[i];
        }
        Vec down = matvec(p + "ffn_down.weight", act);
        if (gemma_) down = rms_norm(down, p + "post_ffw_norm.weight");
        for (int i = 0; i < dim_; ++i) x[static_cast<std::size_t>(i)] += down[static_cast<std::size_t>(i)];
      }
      const Vec n = rms_norm(x, "output_norm.weight");
      const bool tied = file_.find_tensor("output.weight") == nullptr;
      Vec logits = matvec(tied ? "token_embd.weight" : "output.weight", n);
      if (softcap_ > 0) {
        for (double& z : logits) z = softcap_ * std::tanh(z / softcap_);
      }
      out.push_back(std::move(logits));
    }
    return out;
  }

 private:
  std::string k(const std::string& key) const { return arch_ + "." + key; }
  std::uint64_t u(const std::string& key) const { return file_.require_uint(k(key)); }

  // A tensor's rows dequantized (dequantize_row of each), made on first use: every position
  // reads every matrix again, and dequantizing a row per dot product (a lookup and two
  // allocations each) was most of the reference's time, ~10x more under ASan.
  struct Dequantized {
    std::int64_t cols;
    std::vector<float> values;
  };
  const Dequantized& dequantized(const std::string& name) const {
    if (const auto it = dequantized_.find(name); it != dequantized_.end()) return it->second;
    const gguf::TensorInfo& info = *file_.find_tensor(name);
    const std::int64_t cols = info.dims[0], rows = info.elements() / cols;
    const std::size_t stride = row_bytes(info.type, cols);
    Dequantized d{cols, std::vector<float>(static_cast<std::size_t>(rows * cols))};
    for (std::int64_t r = 0; r < rows; ++r) {
      dequantize_row(info.type, file_.tensor_data(info).data() + static_cast<std::size_t>(r) * stride,
                     d.values.data() + r * cols, cols);
    }
    return dequantized_.emplace(name, std::move(d)).first->second;
  }
  Vec row(const std::string& name, std::int64_t r) const {
    const Dequantized& d = dequantized(name);
    const float* f = d.values.data() + r * d.cols;
    return {f, f + d.cols};
  }
  Vec matvec(const std::string& name, const Vec& x) const {
    const Dequantized& d = dequantized(name);
    const std::int64_t rows = static_cast<std::int64_t>(d.values.size()) / d.cols;
    Vec y(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* w = d.values.data() + r * d.cols;
      double s = 0;
      for (std::int64_t c = 0; c < d.cols; ++c) s += double{w[c]} * x[static_cast<std::size_t>(c)];
      y[static_cast<std::size_t>(r)] = s;
    }
    return y;
  }
  // x @ W^T (+ b when the file has the bias tensor).
  Vec linear(const std::string& prefix, const Vec& x) const {
    Vec y = matvec(prefix + ".weight", x);
    if (file_.find_tensor(prefix + ".bias") != nullptr) {
      const Vec b = row(prefix + ".bias", 0);
      for (std::size_t i = 0; i < y.size(); ++i) y[i] += b[i];
    }
    return y;
  }
  Vec rms_norm(const Vec& x, const std::string& weight) const {
    const Vec w = row(weight, 0);
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps_);
    Vec y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
    return y;
  }
  void per_head_norm(Vec& v, const std::string& weight) const {
    for (std::size_t h = 0; h < v.size() / static_cast<std::size_t>(head_dim_); ++h) {
      const auto begin = v.begin() + static_cast<std::ptrdiff_t>(h * static_cast<std::size_t>(head_dim_));
      const Vec normed = rms_norm(Vec(begin, begin + head_dim_), weight);
      std::copy(normed.begin(), normed.end(), begin);
    }
  }
  // Rotary embedding of each head: pair i is (2i, 2i+1) for llama (GGUF permutes q/k for it),
  // (i, i + d/2) for the others; angle pos * w_i with w_i = base^(-2i/d) changed by scaling.
  void rotate(Vec& v, double pos, int layer) const {
    const bool local = gemma_ && windowed(layer);
    const double base = local ? local_base_ : base_;
    const int half = head_dim_ / 2;
    double magnitude = 1.0;
    Vec freq(static_cast<std::size_t>(half));
    for (int i = 0; i < half; ++i) {
      double w = std::pow(base, -2.0 * i / head_dim_);
      if (!local) {
        if (!rope_divisors_.empty()) w /= rope_divisors_[static_cast<std::size_t>(i)];
        if (linear_) w /= factor_;
        if (yarn_) w = yarn_frequency(w, i);
      }
      freq[static_cast<std::size_t>(i)] = w;
    }
    if (yarn_ && !local) magnitude = 1.0 + 0.1 * std::log(factor_);
    for (std::size_t h = 0; h < v.size() / static_cast<std::size_t>(head_dim_); ++h) {
      double* head = v.data() + h * static_cast<std::size_t>(head_dim_);
      for (int i = 0; i < half; ++i) {
        const double angle = pos * freq[static_cast<std::size_t>(i)];
        double& a = head[neox_ ? i : 2 * i];
        double& b = head[neox_ ? i + half : 2 * i + 1];
        const double a0 = a, b0 = b;
        a = magnitude * (a0 * std::cos(angle) - b0 * std::sin(angle));
        b = magnitude * (a0 * std::sin(angle) + b0 * std::cos(angle));
      }
    }
  }
  // YaRN as in HF transformers' _compute_yarn_parameters: dimension index d(r) at which a pair
  // completes r turns over the original context; pairs below floor(d(32)) extrapolate (keep w),
  // pairs above ceil(d(1)) interpolate (w / factor), linear in the index between.
  double yarn_frequency(double w, int i) const {
    const auto dim_for_turns = [&](double turns) {
      return head_dim_ * std::log(original_ctx_ / (turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(base_));
    };
    const double low = std::max(0.0, std::floor(dim_for_turns(32.0)));
    const double high = std::min(static_cast<double>(head_dim_ - 1), std::ceil(dim_for_turns(1.0)));
    const double ramp = std::clamp((i - low) / std::max(high - low, 0.001), 0.0, 1.0);
    const double extrapolate = 1.0 - ramp;
    return w / factor_ * (1.0 - extrapolate) + w * extrapolate;
  }

  gguf::File file_;
  std::string arch_;
  mutable std::map<std::string, Dequantized> dequantized_;
  int dim_, layers_, heads_, kv_heads_, head_dim_, vocab_, window_;
  double eps_, base_, local_base_, softcap_, factor_, original_ctx_;
  bool gemma_, neox_, linear_, yarn_;
  Vec rope_divisors_;
};

}  // namespace sitsrt::test
