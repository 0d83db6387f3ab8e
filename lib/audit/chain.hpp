// The hash chain of an audit log: every record carries `seq` (0, 1, ... across rotated files),
// `prev` (the previous record's hash; 64 zeros for the first) and
// `hash` = H(prev || canonical(record without "hash")), H = SHA-256, or HMAC-SHA-256 under the
// host's key when the log is authenticated.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace sitsrt::audit {

inline const std::string kGenesisHash(64, '0');

std::string chain_hash(const std::string& prev, const std::string& canonical_body, const std::string& key);

struct ChainState {
  std::int64_t seq = 0;
  std::string prev = kGenesisHash;
};

// Sets seq and prev on `record`, computes its hash, advances `state` and returns the canonical
// line (with "hash", without the newline).
std::string seal_record(nlohmann::json& record, ChainState& state, const std::string& key);

}  // namespace sitsrt::audit
