// Reading back an audit log written by make_jsonl_audit_sink (docs/audit-log.md): verification
// of its canonical form, hash chain (or HMAC) and sequence across rotated files, and bit-exact
// replay of its requests on the model they ran on.
#pragma once

#include <sitsrt/export.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt {

enum class AuditLogProblem {
  kNone,
  kTruncated,  // the last line of the last file ends without a newline (a crash mid-write); records before it are good
  kModified,   // not JSON, not canonical, or its hash does not match its content (bytes changed, forged)
  kDeleted,    // a sequence number is missing
  kInserted,   // a sequence number repeats, or the chain link to the previous record is wrong
  kReordered,  // a record appears out of sequence order
  kFileOrder,  // a file is empty, lacks its header (not a log, a stray LOG.N), is missing or out of order
  kKey,        // the log is not authenticated but a key was given, or the reverse
};
// "clean", "truncated tail", "modified", "deleted", "inserted", "reordered", "file order", "key"
SITSRT_API const char* to_string(AuditLogProblem problem) noexcept;

struct AuditLogReport {
  AuditLogProblem problem = AuditLogProblem::kNone;
  std::string file;       // where the problem is
  std::int64_t line = 0;  // 1-based line within `file`
  std::string message;
  std::int64_t records = 0;  // records verified good before the problem
  std::int64_t files = 0;
  std::int64_t open_requests = 0;     // request records without an end record
  std::string last_hash;              // of the last good record (anchor it elsewhere to detect tail deletion)
  std::int64_t next_seq = 0;          // seq the next record would take (after the last good one)
  std::int64_t last_file_index = -1;  // file_index of the last file header verified
  [[nodiscard]] bool clean() const noexcept { return problem == AuditLogProblem::kNone; }
};

// The files a log path names: path, path.1, path.2, ... while they exist.
SITSRT_API std::vector<std::string> audit_log_series(const std::string& path);

// Verifies `files` in order (a log and its rotations) and stops at the first bad line, saying
// why. `key` empty: a SHA-256 chain; otherwise HMAC-SHA-256 under `key` is required. Throws
// sitsrt::Error when a file cannot be read (not a regular file, larger than 16 GiB).
SITSRT_API AuditLogReport verify_audit_log(const std::vector<std::string>& files, const std::string& key = {});

struct ReplayOutcome {
  std::string request_id;
  bool match = false;
  bool deterministic = false;  // recorded in deterministic mode (then a mismatch is a defect)
  std::int64_t tokens = 0;     // tokens compared
  std::string message;         // the first difference, or "bit-exact"
};

struct ReplayOptions {
  std::string model_path;
  int threads = 0;  // the result must not depend on it
  std::function<void(std::string_view, double)> on_progress;
};

// Re-runs every request recorded in `files` on `options.model_path` with its recorded engine
// settings, sampling parameters and seed, and compares token ids and logprobs bit for bit.
// Throws sitsrt::Error(kRejected) when the model file's SHA-256 differs from the recorded one,
// kInvalidArgument when the log cannot be read, kUnsupported when this machine cannot use the
// recorded ISA level.
SITSRT_API std::vector<ReplayOutcome> replay_log(const std::vector<std::string>& files, const ReplayOptions& options);

}  // namespace sitsrt
