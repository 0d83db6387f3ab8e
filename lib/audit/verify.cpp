#include "audit/verify.hpp"

#include "audit/canonical_json.hpp"
#include "audit/chain.hpp"
#include "core/check.hpp"
#include "core/file_io.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

namespace sitsrt::audit {
namespace {

struct Line {
  std::size_t file = 0;
  std::int64_t number = 0;  // 1-based
  std::string text;
  bool complete = true;     // ended with '\n'
};

std::vector<Line> split_lines(const std::vector<std::string>& contents) {
  std::vector<Line> lines;
  for (std::size_t f = 0; f < contents.size(); ++f) {
    const std::string& data = contents[f];
    std::size_t start = 0;
    std::int64_t number = 0;
    while (start < data.size()) {
      const std::size_t nl = data.find('\n', start);
      Line line{f, ++number, data.substr(start, nl == std::string::npos ? std::string::npos : nl - start),
                nl != std::string::npos};
      lines.push_back(std::move(line));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  return lines;
}

// A field of a record, or `fallback` when absent or of another type: a record whose hash matches
// may still hold anything (anyone can hash an unauthenticated record), and must not throw here.
std::string string_field(const nlohmann::json& record, const char* name) {
  const auto it = record.find(name);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::int64_t int_field(const nlohmann::json& record, const char* name) {
  const auto it = record.find(name);
  return it != record.end() && it->is_number_integer() ? it->get<std::int64_t>() : -1;
}

}  // namespace

}  // namespace sitsrt::audit

namespace sitsrt {

const char* to_string(AuditLogProblem problem) noexcept {
  using VerifyProblem = AuditLogProblem;
  switch (problem) {
    case VerifyProblem::kNone: return "clean";
    case VerifyProblem::kTruncated: return "truncated tail";
    case VerifyProblem::kModified: return "modified";
    case VerifyProblem::kDeleted: return "deleted";
    case VerifyProblem::kInserted: return "inserted";
    case VerifyProblem::kReordered: return "reordered";
    case VerifyProblem::kFileOrder: return "file order";
    case VerifyProblem::kKey: return "key";
  }
  return "unknown";
}

std::vector<std::string> audit_log_series(const std::string& path) { return audit::rotated_series(path); }

AuditLogReport verify_audit_log(const std::vector<std::string>& files, const std::string& key) {
  return audit::verify_log(files, key);
}

}  // namespace sitsrt

namespace sitsrt::audit {

std::vector<std::string> rotated_series(const std::string& path) {
  std::vector<std::string> files{path};
  for (int i = 1; std::filesystem::exists(path + "." + std::to_string(i)); ++i) {
    files.push_back(path + "." + std::to_string(i));
  }
  return files;
}

VerifyReport verify_log(const std::vector<std::string>& files, const std::string& key) {
  std::vector<std::string> contents;
  for (const std::string& file : files) {
    // Regular files only: a FIFO would block, /dev/zero would be read until memory runs out.
    contents.push_back(read_regular_file(file, kMaxLogFileBytes, "audit log file"));
  }
  return verify_log_contents(files, contents, key);
}

namespace {

// `from_header`: the first file may be a later file of its series, whose header gives where the
// chain stands (verify_last_file).
VerifyReport verify_series(const std::vector<std::string>& files, const std::vector<std::string>& contents,
                           const std::string& key, bool from_header) {
  VerifyReport report;
  report.files = static_cast<std::int64_t>(files.size());
  if (files.empty()) raise(ErrorCode::kInvalidArgument, "no audit log files given");
  if (contents.size() != files.size()) raise(ErrorCode::kInvalidArgument, "one content per audit log file needed");
  const std::vector<Line> lines = split_lines(contents);
  // A file with no line at all (e.g. emptied) has no header to fail on: report it here.
  for (std::size_t f = 0; f < files.size(); ++f) {
    if (std::none_of(lines.begin(), lines.end(), [&](const Line& l) { return l.file == f; })) {
      report.problem = VerifyProblem::kFileOrder;
      report.file = files[f];
      report.line = 1;
      report.message = "the file is empty (every log file starts with a header record)";
      return report;
    }
  }

  // Parse everything first: reordering is told from deletion by looking ahead.
  std::vector<nlohmann::json> records(lines.size());
  std::vector<bool> parsed(lines.size(), false);
  std::set<std::int64_t> later_seqs;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].text.size() > kMaxRecordBytes) continue;  // not parsed: reported as not a record
    records[i] = nlohmann::json::parse(lines[i].text, nullptr, false);
    parsed[i] = !records[i].is_discarded() && records[i].is_object() && records[i].contains("seq") &&
                records[i]["seq"].is_number_integer();
  }
  std::multiset<std::int64_t> remaining;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (parsed[i]) remaining.insert(records[i]["seq"].get<std::int64_t>());
  }

  ChainState state;
  std::set<std::string> open;
  std::int64_t expected_file = 0;
  if (from_header && !lines.empty() && parsed[0]) {
    const nlohmann::json& header = records[0];
    const auto prev = header.find("prev");
    const auto index = header.find("file_index");
    if (prev != header.end() && prev->is_string() && index != header.end() && index->is_number_integer() &&
        index->get<std::int64_t>() >= 0) {  // otherwise the loop reports the bad header
      state.seq = header["seq"].get<std::int64_t>();
      state.prev = prev->get<std::string>();
      expected_file = index->get<std::int64_t>();
    }
  }
  bool authenticated = false;
  const auto fail = [&](std::size_t i, VerifyProblem p, std::string message) {
    report.problem = p;
    report.file = files[lines[i].file];
    report.line = lines[i].number;
    report.message = std::move(message);
    report.last_hash = state.prev;
    report.open_requests = static_cast<std::int64_t>(open.size());
    return report;
  };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Line& line = lines[i];
    const bool first_in_file = line.number == 1;
    if (!line.complete) {
      // A writer creates every file with its whole header in it and starts a file only after the
      // previous one is complete, so a crash tears nothing but the very last line of the series.
      if (first_in_file) {
        return fail(i, VerifyProblem::kFileOrder,
                    "the file does not start with a file header record (its only line is incomplete): not an audit "
                    "log file, or not part of this log");
      }
      if (line.file + 1 != files.size()) {
        return fail(i, VerifyProblem::kFileOrder,
                    "the last line of this file is incomplete, yet later files follow (a crash tears only the last "
                    "line of the last file)");
      }
      return fail(i, VerifyProblem::kTruncated,
                  "the last line is incomplete (the writer stopped mid-record); the records before it verify");
    }
    if (!parsed[i] && first_in_file) {
      return fail(i, VerifyProblem::kFileOrder,
                  "the file does not start with a file header record (its first line is not an audit record): not "
                  "an audit log file, or not part of this log");
    }
    if (!parsed[i]) {
      return fail(i, VerifyProblem::kModified,
                  lines[i].text.size() > kMaxRecordBytes
                      ? fmt::format("a line of {} bytes is not an audit record (at most {})", lines[i].text.size(),
                                    byte_size_text(kMaxRecordBytes))
                      : std::string("not a JSON audit record"));
    }
    nlohmann::json& record = records[i];
    if (canonical_dump(record) != line.text) {
      return fail(i, VerifyProblem::kModified, "not in canonical form (bytes were changed)");
    }
    if (!record.contains("hash") || !record["hash"].is_string() || !record.contains("prev") ||
        !record["prev"].is_string() || !record.contains("type") || !record["type"].is_string()) {
      return fail(i, VerifyProblem::kModified, "lacks type, prev or hash");
    }
    const std::string type = record["type"];
    if (i == 0) {
      if (type != "file") return fail(i, VerifyProblem::kFileOrder, "the log does not start with a file header");
      authenticated = string_field(record, "alg") == "hmac-sha256";
      if (authenticated && key.empty()) {
        return fail(i, VerifyProblem::kKey, "the log is HMAC-authenticated: pass its key (--key-file)");
      }
      if (!authenticated && !key.empty()) {
        return fail(i, VerifyProblem::kKey, "a key was given but the log is not HMAC-authenticated");
      }
    }
    const std::string hash = record["hash"];
    const std::int64_t seq = record["seq"];
    remaining.erase(remaining.find(seq));
    nlohmann::json body = record;
    body.erase("hash");
    if (chain_hash(record["prev"].get<std::string>(), canonical_dump(body), authenticated ? key : "") != hash) {
      return fail(i, VerifyProblem::kModified,
                  authenticated ? "HMAC does not match the record (modified, forged, or the wrong key)"
                                : "hash does not match the record (modified or forged)");
    }
    if (seq > state.seq) {
      if (remaining.count(state.seq)) {
        return fail(i, VerifyProblem::kReordered,
                    fmt::format("record {} appears where record {} belongs (records were reordered or moved)", seq,
                                state.seq));
      }
      return fail(i, VerifyProblem::kDeleted,
                  fmt::format("records {}..{} are missing (deleted before this line)", state.seq, seq - 1));
    }
    if (seq < state.seq) {
      return fail(i, VerifyProblem::kInserted,
                  fmt::format("record number {} repeats or comes late (expected {}): a record was inserted or moved "
                              "at or before this line",
                              seq, state.seq));
    }
    if (record["prev"] != state.prev) {
      return fail(i, VerifyProblem::kInserted, "prev does not match the previous record's hash (a record was "
                                               "inserted or replaced before this line)");
    }
    if (first_in_file != (type == "file")) {
      return fail(i, VerifyProblem::kFileOrder,
                  first_in_file ? "the first line of this file is not its header (records moved across files)"
                                : "a file header in the middle of a file");
    }
    if (type == "file") {
      if (int_field(record, "file_index") != expected_file) {
        return fail(i, VerifyProblem::kFileOrder,
                    fmt::format("file header says index {}, expected {} (a rotated file is missing or out of order)",
                                int_field(record, "file_index"), expected_file));
      }
      report.last_file_index = expected_file++;
    } else if (type == "request") {
      open.insert(string_field(record, "req"));
    } else if (type == "end") {
      open.erase(string_field(record, "req"));
    }
    state.prev = hash;
    ++state.seq;
    ++report.records;
  }
  report.open_requests = static_cast<std::int64_t>(open.size());
  report.last_hash = state.prev;
  report.next_seq = state.seq;
  return report;
}

}  // namespace

VerifyReport verify_log_contents(const std::vector<std::string>& files, const std::vector<std::string>& contents,
                                 const std::string& key) {
  return verify_series(files, contents, key, /*from_header=*/false);
}

VerifyReport verify_last_file(const std::string& file, const std::string& contents, const std::string& key) {
  return verify_series({file}, {contents}, key, /*from_header=*/true);
}

}  // namespace sitsrt::audit
