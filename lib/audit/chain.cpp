#include "audit/chain.hpp"

#include "audit/canonical_json.hpp"
#include "audit/hash.hpp"

namespace sitsrt::audit {

std::string chain_hash(const std::string& prev, const std::string& canonical_body, const std::string& key) {
  std::string data;
  data.reserve(prev.size() + canonical_body.size());
  data += prev;
  data += canonical_body;
  return key.empty() ? sha256_hex(data) : hmac_sha256_hex(key, data);
}

std::string seal_record(nlohmann::json& record, ChainState& state, const std::string& key) {
  record.erase("hash");
  record["seq"] = state.seq;
  record["prev"] = state.prev;
  const std::string hash = chain_hash(state.prev, canonical_dump(record), key);
  record["hash"] = hash;
  state.prev = hash;
  ++state.seq;
  return canonical_dump(record);
}

}  // namespace sitsrt::audit
