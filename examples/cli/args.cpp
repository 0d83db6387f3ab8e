#include "args.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

namespace sitsrt::cli {

Args::Args(std::string command, std::string summary, std::vector<OptionSpec> specs)
    : command_(std::move(command)), summary_(std::move(summary)), specs_(std::move(specs)) {
  specs_.push_back({"help", 'h', "", "show this help and exit", ""});
}

const OptionSpec* Args::find_long(const std::string& name) const {
  for (const auto& s : specs_) {
    if (s.long_name == name) return &s;
  }
  return nullptr;
}

const OptionSpec* Args::find_short(char c) const {
  for (const auto& s : specs_) {
    if (s.short_name == c) return &s;
  }
  return nullptr;
}

void Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    const OptionSpec* spec = nullptr;
    std::optional<std::string> inline_value;
    if (arg == "--") {
      for (++i; i < argc; ++i) positional_.emplace_back(argv[i]);
      break;
    }
    if (arg.rfind("--", 0) == 0) {
      std::string name = arg.substr(2);
      if (const auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      spec = find_long(name);
      if (spec == nullptr) throw UsageError(fmt::format("unknown option '--{}' (see '{} --help')", name, command_));
    } else if (arg.size() >= 2 && arg[0] == '-' && !(arg[1] >= '0' && arg[1] <= '9')) {
      spec = find_short(arg[1]);
      if (spec == nullptr) throw UsageError(fmt::format("unknown option '{}' (see '{} --help')", arg, command_));
      if (arg.size() > 2) inline_value = arg.substr(2);
    } else {
      positional_.push_back(arg);
      continue;
    }
    if (spec->value_name.empty()) {
      if (inline_value) throw UsageError(fmt::format("option '--{}' takes no value", spec->long_name));
      values_[spec->long_name].emplace_back();
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(fmt::format("option '--{}' needs a value ({})", spec->long_name, spec->value_name));
      inline_value = argv[++i];
    }
    values_[spec->long_name].push_back(*inline_value);
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Args::get(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

long long Args::get_int(const std::string& name, long long fallback, long long lo, long long hi) const {
  const auto v = get(name);
  if (!v) return fallback;
  long long out = 0;
  const auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == v->data() + v->size() && (out < lo || out > hi))) {
    throw UsageError(fmt::format("option '--{}' = {} is out of range [{}, {}]", name, *v, lo, hi));
  }
  if (ec != std::errc() || ptr != v->data() + v->size()) {
    throw UsageError(fmt::format("option '--{}' expects an integer, got '{}'", name, *v));
  }
  return out;
}

std::uint64_t Args::get_uint64(const std::string& name, std::uint64_t fallback) const {
  const auto v = get(name);
  if (!v) return fallback;
  std::uint64_t out = 0;
  const auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError(fmt::format("option '--{}' = {} is out of range [0, {}]", name, *v, UINT64_MAX));
  }
  if (ec != std::errc() || ptr != v->data() + v->size()) {
    throw UsageError(fmt::format("option '--{}' expects an unsigned integer, got '{}'", name, *v));
  }
  return out;
}

double Args::get_double(const std::string& name, double fallback, double lo, double hi) const {
  const auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double out = std::strtod(v->c_str(), &end);
  if (v->empty() || end != v->c_str() + v->size() || std::isnan(out)) {
    throw UsageError(fmt::format("option '--{}' expects a number, got '{}'", name, *v));
  }
  if (!(out >= lo && out <= hi)) {
    throw UsageError(fmt::format("option '--{}' = {} is out of range [{}, {}]", name, *v, lo, hi));
  }
  return out;
}

std::string Args::help() const {
  std::string out = fmt::format("usage: {} [options]\n\n{}\n\noptions:\n", command_, summary_);
  for (const auto& s : specs_) {
    std::string left = s.short_name ? fmt::format("  -{}, --{}", s.short_name, s.long_name)
                                    : fmt::format("      --{}", s.long_name);
    if (!s.value_name.empty()) left += " " + s.value_name;
    std::string right = s.help;
    if (!s.default_text.empty()) right += fmt::format(" (default: {})", s.default_text);
    out += fmt::format("{:<34} {}\n", left, right);
  }
  return out;
}

}  // namespace sitsrt::cli
