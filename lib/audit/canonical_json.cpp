#include "audit/canonical_json.hpp"

#include "core/check.hpp"

#include <fmt/format.h>

#include <cmath>

namespace sitsrt::audit {

void canonical_dump_to(const nlohmann::json& value, std::string& out) {
  using Type = nlohmann::json::value_t;
  switch (value.type()) {
    case Type::object: {  // std::map keys: already in byte order
      out += '{';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += ',';
        first = false;
        out += nlohmann::json(it.key()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += ':';
        canonical_dump_to(it.value(), out);
      }
      out += '}';
      return;
    }
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ',';
        first = false;
        canonical_dump_to(item, out);
      }
      out += ']';
      return;
    }
    case Type::number_float: {
      const auto f = static_cast<float>(value.get<double>());
      if (!std::isfinite(f)) raise(ErrorCode::kInternal, "audit record holds a non-finite number");
      if (f == 0.0f) {
        out += '0';
      } else {
        fmt::format_to(std::back_inserter(out), "{}", f);
      }
      return;
    }
    default:
      out += value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return;
  }
}

std::string canonical_dump(const nlohmann::json& value) {
  std::string out;
  canonical_dump_to(value, out);
  return out;
}

}  // namespace sitsrt::audit
