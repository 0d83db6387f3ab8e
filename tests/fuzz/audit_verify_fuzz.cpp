// libFuzzer target: the audit-log verifier reads logs an attacker may have edited. It must
// report a problem (or accept a valid log), never crash or hang. The input is split at "\n#--\n"
// into up to three files (a log and its rotations); the first byte selects whether an HMAC key
// is expected.
#include "audit/verify.hpp"

#include <sitsrt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string key = (data[0] & 1) ? "fuzz-key" : "";
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string> names, contents;
  for (int part = 0; part < 3; ++part) {
    const std::size_t cut = part < 2 ? rest.find("\n#--\n") : std::string_view::npos;
    names.push_back(part == 0 ? "fuzz.jsonl" : "fuzz.jsonl." + std::to_string(part));
    contents.emplace_back(rest.substr(0, cut));
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 5);
  }
  try {
    const auto report = sitsrt::audit::verify_log_contents(names, contents, key);
    if (report.records < 0 || report.files != static_cast<std::int64_t>(names.size())) __builtin_trap();
  } catch (const sitsrt::Error&) {
  }
  return 0;
}
