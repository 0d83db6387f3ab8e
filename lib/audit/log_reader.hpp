// Reads the requests recorded in an audit log (for replay and display). The log should be
// verified first; this reader only needs it to parse.
#pragma once

#include "audit/verify.hpp"
#include "core/file_io.hpp"

#include <sitsrt/audit.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt::audit {

// An audit log file, line by line, holding one line at a time. Opens regular files only (a FIFO or
// a device is refused at once: kIo) and refuses a line longer than kMaxRecordBytes
// (kInvalidArgument naming the file and line) instead of reading it into memory.
class LogLineReader {
 public:
  explicit LogLineReader(std::string path);
  // The next line without its '\n'; false at the end. `complete` is false for a last line that
  // lacks its newline (a torn write).
  bool next(std::string& line, bool& complete);
  [[nodiscard]] std::int64_t line_number() const noexcept { return number_; }  // of the last line returned
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
  std::string buffer_;
  std::size_t start_ = 0;  // of the unread part of buffer_
  bool end_ = false;
  std::int64_t number_ = 0;
};

struct RecordedRequest {
  RequestRecord record;
  std::vector<std::int32_t> tokens;  // from the end record, else from token records
  std::vector<float> logprobs;       // from token records (empty at level off)
  std::string finish_reason;         // empty when the request has no end record
};

// Throws sitsrt::Error(kInvalidArgument) naming the file and line of a record it cannot read.
std::vector<RecordedRequest> read_recorded_requests(const std::vector<std::string>& files);

}  // namespace sitsrt::audit
