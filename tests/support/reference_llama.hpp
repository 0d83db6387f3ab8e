// An independent, naive double-precision llama forward pass used as the reference in tests.
// Written from the architecture's definition (RMSNorm, rotary embedding on adjacent pairs,
// grouped-query causal attention, SwiGLU), reading weights through the reference dequantizer;
// it shares no code with the runtime's graph, ops or kernels.
#pragma once

#include "core/quant_blocks.hpp"
#include "formats/gguf.hpp"

#include <cmath>
#include <cstdint>
#include <fmt/format.h>
#include <string>
#include <vector>

namespace sitsrt::test {

class ReferenceLlama {
 public:
  explicit ReferenceLlama(const std::string& path) : file_(gguf::File::open(path)) {
    dim_ = static_cast<int>(file_.require_uint("llama.embedding_length"));
    layers_ = static_cast<int>(file_.require_uint("llama.block_count"));
    heads_ = static_cast<int>(file_.require_uint("llama.attention.head_count"));
    kv_heads_ = static_cast<int>(file_.get_uint("llama.attention.head_count_kv").value_or(heads_));
    ffn_ = static_cast<int>(file_.require_uint("llama.feed_forward_length"));
    eps_ = file_.get_float("llama.attention.layer_norm_rms_epsilon").value_or(1e-5);
    base_ = file_.get_float("llama.rope.freq_base").value_or(10000.0);
    head_dim_ = dim_ / heads_;
    vocab_ = static_cast<int>(file_.find_tensor("token_embd.weight")->dims[1]);
  }

  [[nodiscard]] int vocab() const { return vocab_; }

  // Logits after each token of `tokens` (fresh context), [tokens.size()][vocab].
  std::vector<std::vector<double>> forward(const std::vector<std::int32_t>& tokens) {
    const int kv_width = kv_heads_ * head_dim_;
    std::vector<std::vector<double>> keys(static_cast<std::size_t>(layers_)), values(static_cast<std::size_t>(layers_));
    std::vector<std::vector<double>> out;
    for (std::size_t pos = 0; pos < tokens.size(); ++pos) {
      std::vector<double> x = row("token_embd.weight", tokens[pos]);
      for (int l = 0; l < layers_; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        std::vector<double> h = rms_norm(x, p + "attn_norm.weight");
        std::vector<double> q = matvec(p + "attn_q.weight", h);
        std::vector<double> k = matvec(p + "attn_k.weight", h);
        const std::vector<double> v = matvec(p + "attn_v.weight", h);
        rotate(q, static_cast<int>(pos));
        rotate(k, static_cast<int>(pos));
        auto& K = keys[static_cast<std::size_t>(l)];
        auto& V = values[static_cast<std::size_t>(l)];
        K.insert(K.end(), k.begin(), k.end());
        V.insert(V.end(), v.begin(), v.end());
        std::vector<double> attn(static_cast<std::size_t>(dim_), 0.0);
        const int group = heads_ / kv_heads_;
        for (int hd = 0; hd < heads_; ++hd) {
          const int kvh = hd / group;
          std::vector<double> scores(pos + 1);
          double max_score = -1e300;
          for (std::size_t t = 0; t <= pos; ++t) {
            double s = 0;
            for (int i = 0; i < head_dim_; ++i) {
              s += q[static_cast<std::size_t>(hd * head_dim_ + i)] *
                   K[t * static_cast<std::size_t>(kv_width) + static_cast<std::size_t>(kvh * head_dim_ + i)];
            }
            scores[t] = s / std::sqrt(static_cast<double>(head_dim_));
            max_score = std::max(max_score, scores[t]);
          }
          double sum = 0;
          for (auto& s : scores) sum += (s = std::exp(s - max_score));
          for (std::size_t t = 0; t <= pos; ++t) {
            for (int i = 0; i < head_dim_; ++i) {
              attn[static_cast<std::size_t>(hd * head_dim_ + i)] +=
                  scores[t] / sum *
                  V[t * static_cast<std::size_t>(kv_width) + static_cast<std::size_t>(kvh * head_dim_ + i)];
            }
          }
        }
        const std::vector<double> o = matvec(p + "attn_output.weight", attn);
        for (int i = 0; i < dim_; ++i) x[static_cast<std::size_t>(i)] += o[static_cast<std::size_t>(i)];
        h = rms_norm(x, p + "ffn_norm.weight");
        const std::vector<double> gate = matvec(p + "ffn_gate.weight", h);
        const std::vector<double> up = matvec(p + "ffn_up.weight", h);
        std::vector<double> act(gate.size());
        for (std::size_t i = 0; i < gate.size(); ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
        const std::vector<double> down = matvec(p + "ffn_down.weight", act);
        for (int i = 0; i < dim_; ++i) x[static_cast<std::size_t>(i)] += down[static_cast<std::size_t>(i)];
      }
      const std::vector<double> n = rms_norm(x, "output_norm.weight");
      const bool tied = file_.find_tensor("output.weight") == nullptr;
      out.push_back(matvec(tied ? "token_embd.weight" : "output.weight", n));
    }
    return out;
  }

 private:
  std::vector<double> row(const std::string& name, std::int64_t r) const {
    const gguf::TensorInfo& info = *file_.find_tensor(name);
    const std::int64_t cols = info.dims[0];
    const std::size_t stride = row_bytes(info.type, cols);
    std::vector<float> f(static_cast<std::size_t>(cols));
    dequantize_row(info.type, file_.tensor_data(info).data() + static_cast<std::size_t>(r) * stride, f.data(), cols);
    return {f.begin(), f.end()};
  }
  std::vector<double> matvec(const std::string& name, const std::vector<double>& x) const {
    const gguf::TensorInfo& info = *file_.find_tensor(name);
    std::vector<double> y(static_cast<std::size_t>(info.dims[1]));
    for (std::int64_t r = 0; r < info.dims[1]; ++r) {
      const std::vector<double> w = row(name, r);
      double s = 0;
      for (std::size_t c = 0; c < w.size(); ++c) s += w[c] * x[c];
      y[static_cast<std::size_t>(r)] = s;
    }
    return y;
  }
  std::vector<double> rms_norm(const std::vector<double>& x, const std::string& weight) const {
    const std::vector<double> w = row(weight, 0);
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps_);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
    return y;
  }
  // Rotary embedding on adjacent pairs (2i, 2i+1) of each head: angle pos * base^(-2i/head_dim).
  void rotate(std::vector<double>& v, int pos) const {
    for (std::size_t h = 0; h < v.size() / static_cast<std::size_t>(head_dim_); ++h) {
      for (int i = 0; i < head_dim_ / 2; ++i) {
        const double angle = pos * std::pow(base_, -2.0 * i / head_dim_);
        double& a = v[h * static_cast<std::size_t>(head_dim_) + static_cast<std::size_t>(2 * i)];
        double& b = v[h * static_cast<std::size_t>(head_dim_) + static_cast<std::size_t>(2 * i + 1)];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(angle) - b0 * std::sin(angle);
        b = a0 * std::sin(angle) + b0 * std::cos(angle);
      }
    }
  }

  gguf::File file_;
  int dim_, layers_, heads_, kv_heads_, ffn_, head_dim_, vocab_;
  double eps_, base_;
};

}  // namespace sitsrt::test
