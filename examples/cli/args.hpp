// A small command-line option parser: --long/-s options with values or flags, repeated
// options, positional arguments, and generated --help text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sitsrt::cli {

struct OptionSpec {
  std::string long_name;   // "max-tokens"
  char short_name = 0;     // 'n' or 0
  std::string value_name;  // "N"; empty for a flag
  std::string help;
  std::string default_text;  // shown in --help
};

class Args {
 public:
  Args(std::string command, std::string summary, std::vector<OptionSpec> specs);

  // Parses argv[first..]; throws UsageError on unknown options or missing values.
  void parse(int argc, char** argv, int first);

  [[nodiscard]] bool has(const std::string& name) const;
  [[nodiscard]] std::optional<std::string> get(const std::string& name) const;
  [[nodiscard]] std::vector<std::string> all(const std::string& name) const;
  [[nodiscard]] std::string get_or(const std::string& name, const std::string& fallback) const;
  // The option's value as an integer in [lo, hi] (fallback when absent); throws UsageError naming
  // the option for anything else (not a number, trailing text, out of range: no silent cuts).
  [[nodiscard]] long long get_int(const std::string& name, long long fallback, long long lo, long long hi) const;
  [[nodiscard]] std::uint64_t get_uint64(const std::string& name, std::uint64_t fallback) const;
  // A finite number in [lo, hi].
  [[nodiscard]] double get_double(const std::string& name, double fallback, double lo, double hi) const;
  [[nodiscard]] const std::vector<std::string>& positional() const noexcept { return positional_; }
  [[nodiscard]] std::string help() const;

 private:
  const OptionSpec* find_long(const std::string& name) const;
  const OptionSpec* find_short(char c) const;
  std::string command_;
  std::string summary_;
  std::vector<OptionSpec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace sitsrt::cli
