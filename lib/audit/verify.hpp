// Verification of an audit log (one file or a rotated series): canonical form, hash chain,
// HMAC, sequence numbers and file headers. Stops at the first bad line and says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt::audit {

// No record is longer (a full-distribution token record of a 262k vocabulary is about 3 MB):
// a longer line is not read into memory, it is reported as not a record.
inline constexpr std::size_t kMaxRecordBytes = std::size_t{64} << 20;
// The verifier holds a whole file in memory; past this a log should be rotated (rotate_bytes).
inline constexpr std::uint64_t kMaxLogFileBytes = std::uint64_t{16} << 30;

enum class VerifyProblem {
  kNone,
  kTruncated,  // the last line of the last file ends without a newline (a crash mid-write); records before it are good
  kModified,   // not JSON, not canonical, or its hash does not match its content (bytes changed, forged)
  kDeleted,    // a sequence number is missing
  kInserted,   // a sequence number repeats, or the chain link to the previous record is wrong
  kReordered,  // a record appears out of sequence order
  kFileOrder,  // a file is empty, lacks its header (not a log, a stray LOG.N), is missing or out of order
  kKey,        // the log is not authenticated but a key was given, or the reverse
};
const char* to_string(VerifyProblem problem) noexcept;

struct VerifyReport {
  VerifyProblem problem = VerifyProblem::kNone;
  std::string file;          // where the problem is
  std::int64_t line = 0;     // 1-based line within `file`
  std::string message;
  std::int64_t records = 0;  // records verified good before the problem
  std::int64_t files = 0;
  std::int64_t open_requests = 0;  // request records without an end record
  std::string last_hash;     // hash of the last good record (anchor it elsewhere to detect tail deletion)
  std::int64_t next_seq = 0;        // seq the next record would take (after the last good one)
  std::int64_t last_file_index = -1;  // file_index of the last file header verified
  [[nodiscard]] bool clean() const noexcept { return problem == VerifyProblem::kNone; }
};

// Verifies `files` in order (the first file, then its rotations). `key` empty: SHA-256 chain,
// otherwise HMAC-SHA-256 under `key` is required.
VerifyReport verify_log(const std::vector<std::string>& files, const std::string& key);
// The same over contents already in memory (`files` only names them in the report; fuzzing).
VerifyReport verify_log_contents(const std::vector<std::string>& files, const std::vector<std::string>& contents,
                                 const std::string& key);

// Verifies the last file of a series on its own, for appending to it: its header's seq, prev and
// file_index are taken as given (the earlier files are not read), every record after it is
// checked against the header and the records before it.
VerifyReport verify_last_file(const std::string& file, const std::string& contents, const std::string& key);

// The series of files a log path names: path, path.1, path.2, ... while they exist.
std::vector<std::string> rotated_series(const std::string& path);

}  // namespace sitsrt::audit
