// Appending to an existing audit log (JsonlAuditLogOptions::append, CLI --audit-append): the
// chain goes on across writers, rotations continue, and a log whose tail does not verify is
// refused with nothing written.
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

using namespace sitsrt;
using audit::VerifyProblem;

namespace {

JsonlAuditLogOptions append_options(const std::string& path, const std::string& key = "") {
  JsonlAuditLogOptions o;
  o.path = path;
  o.hmac_key = key;
  o.durability = Durability::kNever;
  o.append = true;
  return o;
}

audit::VerifyReport verify_series(const std::string& path, const std::string& key = "") {
  return audit::verify_log(audit::rotated_series(path), key);
}

std::string error_of(const JsonlAuditLogOptions& o) {
  try {
    make_jsonl_audit_sink(o);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIo);
    return e.what();
  }
  FAIL("the sink accepted the log");
  return {};
}

}  // namespace

TEST_CASE("append creates a missing log, then continues it run after run", "[audit]") {
  const std::string path = test::fresh_log_path("append");
  test::write_synthetic_log(append_options(path), 1, 3);  // created: nothing there yet
  const std::string first = test::read_file(path);
  test::write_synthetic_log(append_options(path), 2, 2);
  test::write_synthetic_log(append_options(path), 1, 1);
  const std::string all = test::read_file(path);
  CHECK(all.compare(0, first.size(), first) == 0);  // the earlier records are untouched
  const auto r = verify_series(path);
  INFO(r.message);
  CHECK(r.clean());
  CHECK(r.records == 1 + (1 + 3 + 1) + 2 * (1 + 2 + 1) + (1 + 1 + 1));  // one file header only
  CHECK(r.files == 1);
}

TEST_CASE("append continues an HMAC log under its key only", "[audit]") {
  const std::string path = test::fresh_log_path("append-hmac");
  test::write_synthetic_log(append_options(path, "k3y"), 1, 2);
  SECTION("the same key") {
    test::write_synthetic_log(append_options(path, "k3y"), 1, 2);
    const auto r = verify_series(path, "k3y");
    INFO(r.message);
    CHECK(r.clean());
    CHECK(r.records == 1 + 2 * 4);
  }
  SECTION("another key, or none") {
    const std::string before = test::read_file(path);
    CHECK_THAT(error_of(append_options(path, "other")), Catch::Contains("HMAC does not match"));
    CHECK_THAT(error_of(append_options(path)), Catch::Contains("pass its key"));
    CHECK(test::read_file(path) == before);  // nothing written
  }
  SECTION("a key for a plain log") {
    const std::string plain = test::write_synthetic_log(append_options(test::fresh_log_path("append-plain")), 1, 1);
    CHECK_THAT(error_of(append_options(plain, "k3y")), Catch::Contains("not HMAC-authenticated"));
  }
}

TEST_CASE("append continues the last file of a rotated series and rotates on", "[audit]") {
  const std::string path = test::fresh_log_path("append-rotate");
  auto o = append_options(path);
  o.rotate_bytes = 1500;
  test::write_synthetic_log(o, 3, 4);
  const std::size_t files_before = audit::rotated_series(path).size();
  REQUIRE(files_before >= 2);
  const std::string first_file = test::read_file(path);
  test::write_synthetic_log(o, 3, 4);
  const std::vector<std::string> files = audit::rotated_series(path);
  CHECK(files.size() > files_before);
  CHECK(test::read_file(path) == first_file);  // only the last file and new ones are written
  const auto r = audit::verify_log(files, "");
  INFO(r.message);
  CHECK(r.clean());
  CHECK(r.records == 6 * 6 + static_cast<std::int64_t>(files.size()));
  for (const auto& f : files) CHECK(std::filesystem::file_size(f) <= 1500);
}

TEST_CASE("append refuses a log whose last file does not verify, writing nothing", "[audit]") {
  const std::string path = test::write_synthetic_log(append_options(test::fresh_log_path("append-bad")), 2, 3);
  std::string data = test::read_file(path);
  SECTION("a flipped byte in the last record") {
    const std::size_t at = data.rfind("\"finish\":\"length\"");
    REQUIRE(at != std::string::npos);
    data[at + 11] = 'X';
    test::write_file(path, data);
    const std::string message = error_of(append_options(path));
    CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("line 11") && Catch::Contains("modified"));
  }
  SECTION("a torn last line (a crashed writer)") {
    data.resize(data.size() - 10);
    test::write_file(path, data);
    CHECK_THAT(error_of(append_options(path)), Catch::Contains("truncated tail"));
  }
  SECTION("not a log") {
    data = "hello\n";
    test::write_file(path, data);
    CHECK_THAT(error_of(append_options(path)), Catch::Contains("file header"));
  }
  CHECK(test::read_file(path) == data);
}

TEST_CASE("append refuses a log another sink is writing", "[audit]") {
  const std::string path = test::fresh_log_path("append-busy");
  auto writing = make_jsonl_audit_sink(append_options(path));
  CHECK_THAT(error_of(append_options(path)), Catch::Contains("in use by this process"));
}

TEST_CASE("the last file verifies on its own from its header", "[audit]") {
  auto o = append_options(test::fresh_log_path("last-file"));
  o.rotate_bytes = 1200;
  const std::string path = test::write_synthetic_log(o, 3, 3);
  const auto files = audit::rotated_series(path);
  REQUIRE(files.size() >= 2);
  const auto whole = audit::verify_log(files, "");
  const auto last = audit::verify_last_file(files.back(), test::read_file(files.back()), "");
  INFO(last.message);
  CHECK(last.clean());
  CHECK(last.next_seq == whole.next_seq);
  CHECK(last.last_hash == whole.last_hash);
  CHECK(last.last_file_index == static_cast<std::int64_t>(files.size()) - 1);
  // From seq 0 it is not the start of a log: the plain verifier says so.
  CHECK_FALSE(audit::verify_log({files.back()}, "").clean());
}
