// sitsrt audit verify|replay|show: check, re-run and read audit logs.
#include "commands.hpp"

#include "audit/log_reader.hpp"
#include "core/printable.hpp"

#include <sitsrt/audit_log.hpp>
#include <sitsrt/error.hpp>

#include <fmt/color.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <unistd.h>

namespace sitsrt::cli {
namespace {

// audit verify / show: every record good but the last one torn (a crash mid-write).
constexpr int kExitTruncatedTail = 3;

// One argument: that log and its rotations; several: exactly those files, in order.
std::vector<std::string> log_files(const Args& args) {
  const auto& p = args.positional();
  if (p.empty()) throw UsageError("no audit log given");
  return p.size() == 1 ? audit_log_series(p[0]) : p;
}

int verify_command(int argc, char** argv) {
  Args args("sitsrt audit verify", "Verify an audit log's canonical form, hash chain and HMAC.\n"
            "Pass LOG to verify it and its rotations LOG.1, LOG.2, ...; or list the files in order.\n"
            "Exit status: 0 clean; 1 tampered, not an audit log, or unreadable; 2 usage error; 3 only the last\n"
            "record is torn (a crash mid-write; every record before it verifies).",
            {{"key-file", 0, "FILE", "HMAC key the log was written with", ""}});
  args.parse(argc, argv, 3);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  const std::string key = args.has("key-file") ? read_key_file(*args.get("key-file")) : std::string();
  const std::vector<std::string> files = log_files(args);
  const AuditLogReport r = verify_audit_log(files, key);
  if (r.clean()) {
    fmt::print("clean: {} records in {} file(s); {} request(s) without an end record; last hash {}\n", r.records,
               r.files, r.open_requests, r.last_hash);
    return 0;
  }
  fmt::print("FAILED: {}:{}: {}: {}\n", printable(r.file), r.line, to_string(r.problem), r.message);
  fmt::print("{} records verified before it; last good hash {}\n", r.records, r.last_hash);
  return r.problem == AuditLogProblem::kTruncated ? kExitTruncatedTail : 1;
}

int replay_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = {{"model", 'm', "FILE", "the model the log was recorded with", ""},
                                   {"threads", 't', "N", "compute threads (results do not depend on it)", "all cores"}};
  Args args("sitsrt audit replay", "Re-run every request of an audit log and compare token ids and logprobs bit for bit.",
            specs);
  args.parse(argc, argv, 3);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  ReplayOptions options;
  const auto model = args.get("model");
  if (!model) throw UsageError("no model given: pass -m FILE.gguf");
  options.model_path = *model;
  options.threads = static_cast<int>(args.get_int("threads", 0, 0, 1024));
  options.on_progress = print_progress;
  const std::vector<ReplayOutcome> outcomes = replay_log(log_files(args), options);
  int mismatches = 0;
  for (const auto& o : outcomes) {
    fmt::print("{} {}: {} tokens: {}{}\n", o.match ? "ok      " : "MISMATCH", o.request_id, o.tokens, o.message,
               o.deterministic ? "" : " (not recorded in deterministic mode)");
    mismatches += o.match ? 0 : 1;
  }
  fmt::print("{} request(s) replayed, {} bit-exact, {} mismatched\n", outcomes.size(), outcomes.size() - mismatches,
             mismatches);
  return mismatches == 0 ? 0 : 1;
}

// Green for likely tokens, yellow for plausible, red for unlikely.
fmt::text_style probability_style(float logprob) {
  const double p = std::exp(static_cast<double>(logprob));
  if (p >= 0.5) return fmt::fg(fmt::terminal_color::green);
  if (p >= 0.1) return fmt::fg(fmt::terminal_color::yellow);
  return fmt::fg(fmt::terminal_color::red);
}

// Prints one record of `file` (line `number`); returns whether the output is inside token text.
// Strings from the log are escaped (token text keeps its line breaks). Throws json exceptions for
// fields of the wrong type, and Error for a file that does not start with its header.
bool show_record(const nlohmann::json& j, const std::string& file, std::int64_t number, bool color, bool in_text) {
  const std::string type = j.value("type", "");
  if (number == 1 && type != "file") {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}:1: not an audit log file (it does not start with a file header record)", file));
  }
  const auto text = [&](const nlohmann::json& object, const char* key) {
    return printable(object.is_object() ? object.value(key, std::string()) : std::string());
  };
  if (type == "token") {
    const std::string token = printable(j.value("text", std::string()), true);
    if (color) {
      fmt::print(probability_style(j.value("lp", 0.0f)), "{}", token);
    } else {
      fmt::print("{}", token);
    }
    return true;
  }
  if (in_text) fmt::print("\n");
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& model = j.contains("model") ? j["model"] : none;
  const nlohmann::json& sampling = j.contains("sampling") ? j["sampling"] : none;
  const nlohmann::json& meta = j.contains("meta") ? j["meta"] : none;
  if (type == "file") {
    fmt::print("== {} (file {}, {})\n", printable(file), j.value("file_index", 0), text(j, "alg"));
  } else if (type == "request") {
    fmt::print("-- request {} | model {} ({}) | level {} | seed {} | temp {} | tenant '{}' user '{}'\n", text(j, "req"),
               text(model, "path"), text(model, "sha256").substr(0, 16), text(j, "level"),
               sampling.is_object() ? sampling.value("seed", std::uint64_t{0}) : 0,
               sampling.is_object() ? sampling.value("temperature", 0.0f) : 0.0f, text(meta, "tenant"),
               text(meta, "user"));
  } else if (type == "anomaly") {
    fmt::print("!! anomaly '{}' at token {}: {} -> {}\n", text(j, "rule"), j.value("i", 0), text(j, "detail"),
               text(j, "action"));
  } else if (type == "end") {
    fmt::print("-- end {}: {} | {} prompt + {} generated tokens | prefill {:.1f} ms, decode {:.1f} ms\n", text(j, "req"),
               text(j, "finish"), j.value("prompt_tokens", 0), j.value("generated_tokens", 0),
               j.value("prefill_ns", 0) / 1e6, j.value("decode_ns", 0) / 1e6);
  }
  return false;
}

int show_command(int argc, char** argv) {
  Args args("sitsrt audit show", "Print an audit log: requests, their text coloured by token probability, anomalies.\n"
            "Strings from the log are escaped. Exit status: 0 shown; 1 not an audit log (a line that is not a\n"
            "record, a file without its header) or unreadable; 2 usage error; 3 shown up to a torn last record.\n"
            "show does not check hashes: run audit verify for that.",
            {{"color", 0, "WHEN", "colour tokens: auto, always, never", "auto"}});
  args.parse(argc, argv, 3);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  const std::string when = args.get_or("color", "auto");
  const bool color = when == "always" || (when == "auto" && isatty(STDOUT_FILENO));
  bool torn_tail = false;
  for (const std::string& file : log_files(args)) {
    audit::LogLineReader in(file);  // regular files only, lines bounded
    std::string line;
    bool complete = true;
    bool in_text = false;
    while (in.next(line, complete)) {
      const auto where = [&] { return fmt::format("{}:{}", file, in.line_number()); };
      if (!complete && in.line_number() == 1) {  // a log file is created with its whole header in it
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: not an audit log file (it does not start with a file header record)", where()));
      }
      if (!complete) {  // a crash mid-write: shown as such, like verify's exit status 3
        if (in_text) fmt::print("\n");
        in_text = false;
        fmt::print("[{}: the last record is torn (the writer stopped mid-write); not shown]\n", printable(where()));
        torn_tail = true;
        break;
      }
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: not a JSON audit record (verify the log: sitsrt "
                                                             "audit verify)", where()));
      }
      try {
        in_text = show_record(j, file, in.line_number(), color, in_text);
      } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: not an audit record ({})", where(), e.what()));
      }
    }
    if (in_text) fmt::print("\n");
  }
  return torn_tail ? kExitTruncatedTail : 0;
}

constexpr const char* kAuditUsage = R"(usage: sitsrt audit <verify|replay|show> LOG... [options]

  verify  check canonical form, hash chain and HMAC; report the first bad line (exit 0 only when clean)
  replay  re-run every recorded request on a model and compare token ids and logprobs bit for bit
  show    print the requests of a log, tokens coloured by probability
)";

}  // namespace

int audit_command(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[2], "--help") == 0 || std::strcmp(argv[2], "-h") == 0) {
    fmt::print(argc < 3 ? stderr : stdout, "{}", kAuditUsage);
    return argc < 3 ? 2 : 0;
  }
  const std::string sub = argv[2];
  if (sub == "verify") return verify_command(argc, argv);
  if (sub == "replay") return replay_command(argc, argv);
  if (sub == "show") return show_command(argc, argv);
  throw UsageError(fmt::format("unknown audit command '{}'\n\n{}", sub, kAuditUsage));
}

}  // namespace sitsrt::cli
