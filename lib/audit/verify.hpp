// Verification of an audit log (one file or a rotated series): canonical form, hash chain,
// HMAC, sequence numbers and file headers. Stops at the first bad line and says why.
#pragma once

#include <sitsrt/audit_log.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt::audit {

// No record is longer (a full-distribution token record of a 262k vocabulary is about 3 MB):
// a longer line is not read into memory, it is reported as not a record.
inline constexpr std::size_t kMaxRecordBytes = std::size_t{64} << 20;
// The verifier holds a whole file in memory; past this a log should be rotated (rotate_bytes).
inline constexpr std::uint64_t kMaxLogFileBytes = std::uint64_t{16} << 30;

// The public report (sitsrt/audit_log.hpp) under the names the audit layer uses.
using VerifyProblem = AuditLogProblem;
using VerifyReport = AuditLogReport;

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
