#include "backend/backend.hpp"

#include "core/check.hpp"

namespace sitsrt {

void check_logit_summary_request(std::int64_t n_rows, std::int64_t vocab, std::span<const std::int64_t> rows,
                                 std::int64_t k, std::int64_t limit, std::span<const LogitSummary> out) {
  if (k < 1 || k > limit)
    raise(ErrorCode::kInternal, "summarize_logits: {} best ids asked, this backend gives 1 to {}", k, limit);
  if (vocab < 1) raise(ErrorCode::kInternal, "summarize_logits: a vocabulary of {}", vocab);
  if (static_cast<std::int64_t>(out.size()) < n_rows) {
    raise(ErrorCode::kInternal, "summarize_logits: {} summaries for {} rows", out.size(), n_rows);
  }
  for (const std::int64_t r : rows) {
    if (r < 0 || r >= n_rows) raise(ErrorCode::kInternal, "summarize_logits: row {} of {}", r, n_rows);
  }
}

void Backend::summarize_logits(const BackendBuffer&, std::size_t, std::int64_t n_rows, std::int64_t vocab,
                               std::span<const std::int64_t> rows, std::int64_t k, std::span<LogitSummary> out) {
  check_logit_summary_request(n_rows, vocab, rows, k, info().logit_summary_k, out);
  raise(ErrorCode::kInternal, "summarize_logits: the {} backend computes no logit summaries", info().name);
}

}  // namespace sitsrt
