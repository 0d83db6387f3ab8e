// Helpers for audit-log tests: synthetic requests written through the JSONL sink, and line-level
// edits of log files.
#pragma once

#include "support/model_files.hpp"

#include <sitsrt/audit.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sitsrt::test {

// A fresh path in the test folder (the sink refuses existing files).
inline std::string fresh_log_path(const std::string& tag) {
  static int counter = 0;
  const auto path = temp_dir() / fmt::format("{}-{}.jsonl", tag, ++counter);
  std::filesystem::remove(path);
  for (int i = 1; i < 100; ++i) std::filesystem::remove(fmt::format("{}.{}", path.string(), i));
  return path.string();
}

// Writes `requests` synthetic requests of `tokens` tokens each (level topk) and returns the path.
inline std::string write_synthetic_log(JsonlAuditLogOptions options, int requests, int tokens) {
  {
    auto sink = make_jsonl_audit_sink(options);
    for (int r = 0; r < requests; ++r) {
      RequestRecord rec;
      rec.request_id = fmt::format("req-{}", r);
      rec.unix_time_ns = 1700000000000000000 + r;
      rec.model_sha256 = std::string(64, 'a');
      rec.level = TraceLevel::kTopK;
      rec.sampling.temperature = 0.7f;
      rec.sampling.seed = 42u + static_cast<unsigned>(r);
      rec.input_tokens = {1, 2, 3};
      rec.metadata.tenant = "acme";
      rec.metadata.tags = {"t\"1", "ünï"};
      sink->on_request_begin(rec);
      for (int i = 0; i < tokens; ++i) {
        TokenEvent e;
        e.index = i;
        e.token_id = 10 + i;
        e.text = i % 2 ? " wörd" : "\n\t\"q\"";
        e.logprob = -0.1f * static_cast<float>(i + 1) / 3.0f;
        e.entropy = 1.0f / 3.0f;
        e.top = {{10 + i, e.logprob}, {7, -2.5e-7f}};
        e.seconds_since_start = 0.001 * i;
        sink->on_token(rec.request_id, e);
      }
      RequestSummary s;
      s.request_id = rec.request_id;
      s.finish_reason = "length";
      s.generated_tokens = tokens;
      sink->on_request_end(s);
    }
  }
  return options.path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

inline std::vector<std::string> split_lines(const std::string& data) {
  std::vector<std::string> lines;
  std::istringstream in(data);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace sitsrt::test
