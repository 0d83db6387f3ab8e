// Reads the requests recorded in an audit log (for replay and display). The log should be
// verified first; this reader only needs it to parse.
#pragma once

#include <sitsrt/audit.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt::audit {

struct RecordedRequest {
  RequestRecord record;
  std::vector<std::int32_t> tokens;  // from the end record, else from token records
  std::vector<float> logprobs;       // from token records (empty at level off)
  std::string finish_reason;         // empty when the request has no end record
};

// Throws sitsrt::Error(kInvalidArgument) naming the file and line of a record it cannot read.
std::vector<RecordedRequest> read_recorded_requests(const std::vector<std::string>& files);

}  // namespace sitsrt::audit
