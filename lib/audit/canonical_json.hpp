// Canonical JSON text of an audit record (docs/audit-log.md, "Canonical form"): object keys in
// byte order, no whitespace, integers in plain decimal, every non-integer number a float32 in its
// shortest round-trip decimal form (fmt/Dragonbox; zero is "0"), strings as nlohmann-json escapes
// them (UTF-8 kept, invalid bytes replaced by U+FFFD). dump(parse(text)) == text for every
// canonical text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace sitsrt::audit {

std::string canonical_dump(const nlohmann::json& value);
// Appends to `out` (no allocation beyond its growth).
void canonical_dump_to(const nlohmann::json& value, std::string& out);

}  // namespace sitsrt::audit
