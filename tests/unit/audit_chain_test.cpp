// The audit log's canonical JSON and hash chain: the verifier accepts untouched logs and names
// the first bad line of every kind of edit.
#include "audit/canonical_json.hpp"
#include "audit/chain.hpp"
#include "audit/hash.hpp"
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

using namespace sitsrt;
using audit::VerifyProblem;
using nlohmann::json;

namespace {

JsonlAuditLogOptions log_options(const std::string& tag) {
  JsonlAuditLogOptions o;
  o.path = test::fresh_log_path(tag);
  o.durability = Durability::kNever;
  return o;
}

audit::VerifyReport verify_one(const std::string& path, const std::string& key = "") {
  return audit::verify_log({path}, key);
}

}  // namespace

TEST_CASE("SHA-256 and HMAC match published vectors", "[audit]") {
  CHECK(audit::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231 test case 2
  CHECK(audit::hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("canonical JSON: sorted keys, no whitespace, shortest float32 form, stable", "[audit]") {
  const json j = json::parse(R"({"b": [1, 2.5, -0.0], "a": {"z": "\u00fc\n", "y": 0.1}, "c": 1e-5, "d": true})");
  const std::string text = audit::canonical_dump(j);
  CHECK(text == "{\"a\":{\"y\":0.1,\"z\":\"ü\\n\"},\"b\":[1,2.5,0],\"c\":1e-05,\"d\":true}");
  // dump(parse(text)) == text, for awkward float32 values too
  for (const float f : {-0.031749830f, 1.0f / 3.0f, 3.4028235e38f, 1.4e-45f, -2.5e-7f, 100.0f, 16777217.0f}) {
    const std::string t = audit::canonical_dump(json{{"x", f}});
    CHECK(audit::canonical_dump(json::parse(t)) == t);
    CHECK(static_cast<float>(json::parse(t)["x"].get<double>()) == f);
  }
  // key order is byte order, independent of insertion order
  json k1, k2;
  k1["b"] = 1;
  k1["a"] = 2;
  k2["a"] = 2;
  k2["b"] = 1;
  CHECK(audit::canonical_dump(k1) == audit::canonical_dump(k2));
}

TEST_CASE("a log written by the sink verifies clean, and each line is canonical", "[audit]") {
  const std::string path = test::write_synthetic_log(log_options("clean"), 3, 4);
  const auto r = verify_one(path);
  INFO(r.message);
  CHECK(r.clean());
  CHECK(r.records == 1 + 3 * (1 + 4 + 1));
  CHECK(r.open_requests == 0);
  for (const auto& line : test::split_lines(test::read_file(path))) {
    CHECK(audit::canonical_dump(json::parse(line)) == line);
  }
}

TEST_CASE("verify catches one flipped byte anywhere and names its line", "[audit]") {
  const std::string path = test::write_synthetic_log(log_options("flip"), 1, 3);
  const std::string original = test::read_file(path);
  std::vector<std::int64_t> line_of(original.size());
  std::int64_t line = 1;
  for (std::size_t i = 0; i < original.size(); ++i) {
    line_of[i] = line;
    if (original[i] == '\n') ++line;
  }
  // Thousands of small rewrites: in memory-backed /dev/shm where there is one.
  const std::string tampered = std::filesystem::is_directory("/dev/shm")
                                   ? fmt::format("/dev/shm/sitsrt-flip-{}.jsonl", ::getpid())
                                   : path + ".tampered";
  int caught = 0;
  for (const unsigned char mask : {0x01, 0x40}) {
    for (std::size_t i = 0; i < original.size(); ++i) {
      std::string data = original;
      data[i] = static_cast<char>(static_cast<unsigned char>(data[i]) ^ mask);
      test::write_file(tampered, data);
      const auto r = verify_one(tampered);
      if (r.clean()) FAIL("flipping byte " << i << " with mask " << int(mask) << " went unnoticed");
      ++caught;
      // A flipped newline joins two lines; the break is found at the first of them.
      CHECK(r.line == line_of[i]);
    }
  }
  CHECK(caught == 2 * static_cast<int>(original.size()));
  std::filesystem::remove(tampered);
}

TEST_CASE("verify names deleted, inserted, swapped and truncated lines", "[audit]") {
  const std::string path = test::write_synthetic_log(log_options("edits"), 2, 3);
  const std::vector<std::string> lines = test::split_lines(test::read_file(path));
  REQUIRE(lines.size() == 11);
  const std::string edited = path + ".edited";

  SECTION("a deleted line") {
    auto l = lines;
    l.erase(l.begin() + 4);
    test::write_file(edited, test::join_lines(l));
    const auto r = verify_one(edited);
    CHECK(r.problem == VerifyProblem::kDeleted);
    CHECK(r.line == 5);
    CHECK(r.records == 4);
  }
  SECTION("an inserted forged line with a correctly computed SHA-256") {
    // The forger copies line 4 (seq 3), changes its text and recomputes prev/hash to chain after line 4.
    json forged = json::parse(lines[3]);
    forged["text"] = "forged";
    audit::ChainState state{4, json::parse(lines[3])["hash"].get<std::string>()};
    const std::string forged_line = audit::seal_record(forged, state, "");
    auto l = lines;
    l.insert(l.begin() + 4, forged_line);
    test::write_file(edited, test::join_lines(l));
    const auto r = verify_one(edited);
    CHECK(r.problem == VerifyProblem::kInserted);
    CHECK(r.line == 6);  // the next genuine record repeats the sequence number
  }
  SECTION("an inserted forged line without the key, in an HMAC log") {
    const std::string hpath = [&] {
      auto o = log_options("hmac-insert");
      o.hmac_key = "secret";
      return test::write_synthetic_log(o, 1, 3);
    }();
    auto l = test::split_lines(test::read_file(hpath));
    json forged = json::parse(l[2]);
    forged["text"] = "forged";
    audit::ChainState state{3, json::parse(l[2])["hash"].get<std::string>()};
    l.insert(l.begin() + 3, audit::seal_record(forged, state, ""));
    test::write_file(edited, test::join_lines(l));
    const auto r = verify_one(edited, "secret");
    CHECK(r.problem == VerifyProblem::kModified);
    CHECK(r.line == 4);
  }
  SECTION("two lines swapped") {
    auto l = lines;
    std::swap(l[5], l[6]);
    test::write_file(edited, test::join_lines(l));
    const auto r = verify_one(edited);
    CHECK(r.problem == VerifyProblem::kReordered);
    CHECK(r.line == 6);
  }
  SECTION("a truncated last line") {
    std::string data = test::join_lines(lines);
    data.resize(data.size() - 20);
    test::write_file(edited, data);
    const auto r = verify_one(edited);
    CHECK(r.problem == VerifyProblem::kTruncated);
    CHECK(r.line == 11);
    CHECK(r.records == 10);
  }
  SECTION("the last newline removed is a truncation too") {
    std::string data = test::join_lines(lines);
    data.pop_back();
    test::write_file(edited, data);
    CHECK(verify_one(edited).problem == VerifyProblem::kTruncated);
  }
}

TEST_CASE("HMAC logs need the right key", "[audit]") {
  auto o = log_options("hmac");
  o.hmac_key = "the key";
  const std::string path = test::write_synthetic_log(o, 2, 2);
  CHECK(verify_one(path, "the key").clean());
  const auto wrong = verify_one(path, "another key");
  CHECK(wrong.problem == VerifyProblem::kModified);
  CHECK(wrong.line == 1);
  CHECK(verify_one(path, "").problem == VerifyProblem::kKey);
  const std::string plain = test::write_synthetic_log(log_options("plain"), 1, 1);
  CHECK(verify_one(plain, "the key").problem == VerifyProblem::kKey);
}

TEST_CASE("rotation carries the chain across files; moved records and missing files are caught", "[audit]") {
  auto o = log_options("rotate");
  o.rotate_bytes = 1500;
  const std::string path = test::write_synthetic_log(o, 4, 4);
  const std::vector<std::string> files = audit::rotated_series(path);
  REQUIRE(files.size() >= 3);
  const auto clean = audit::verify_log(files, "");
  INFO(clean.message);
  CHECK(clean.clean());
  CHECK(clean.records == 4 * 6 + static_cast<std::int64_t>(files.size()));
  for (const auto& f : files) CHECK(std::filesystem::file_size(f) <= 1500);

  // Moves the last record of file 0 to line `at` (0-based) of file 1.
  const auto move_last_record = [&](std::size_t at) {
    auto a = test::split_lines(test::read_file(files[0]));
    auto b = test::split_lines(test::read_file(files[1]));
    b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), a.back());
    a.pop_back();
    test::write_file(files[0], test::join_lines(a));
    test::write_file(files[1], test::join_lines(b));
  };
  SECTION("the last record of file 0 moved to the start of file 1") {
    move_last_record(0);
    const auto r = audit::verify_log(files, "");
    CHECK(r.problem == VerifyProblem::kFileOrder);
    CHECK(r.file == files[1]);
    CHECK(r.line == 1);
  }
  SECTION("the last record of file 0 moved after the header of file 1") {
    move_last_record(1);
    const auto r = audit::verify_log(files, "");
    CHECK(r.problem == VerifyProblem::kReordered);
    CHECK(r.file == files[1]);
    CHECK(r.line == 1);
  }
  SECTION("a rotated file left out") {
    const auto r = audit::verify_log({files[0], files[2]}, "");
    CHECK_FALSE(r.clean());
    CHECK(r.file == files[2]);
  }
}

TEST_CASE("an emptied log file does not verify", "[audit]") {
  const std::string path = test::write_synthetic_log(log_options("emptied"), 1, 1);
  test::write_file(path, "");
  const auto r = verify_one(path);
  CHECK(r.problem == VerifyProblem::kFileOrder);
  CHECK(r.line == 1);
}

TEST_CASE("the sink refuses to overwrite an existing log", "[audit]") {
  const std::string path = test::write_synthetic_log(log_options("exists"), 1, 1);
  auto o = log_options("exists2");
  o.path = path;
  CHECK_THROWS_AS(make_jsonl_audit_sink(o), Error);
}

TEST_CASE("what is not a log, or not part of it, is not called a truncated tail", "[audit]") {
  const std::string path = test::write_synthetic_log(log_options("stray"), 1, 2);
  const std::string garbage = path + ".garbage";
  for (const std::string& content : {std::string("hello"), std::string("hello\nworld\n")}) {
    test::write_file(garbage, content);  // no header: before, "truncated tail" (or "modified")
    const auto r = verify_one(garbage);
    CHECK(r.problem == VerifyProblem::kFileOrder);
    CHECK(r.line == 1);
    CHECK_THAT(r.message, Catch::Contains("does not start with a file header record"));
  }
  // A stray LOG.1 beside a whole log: the series is LOG, LOG.1 and LOG.1 is no part of it.
  test::write_file(path + ".1", "leftover");
  const auto stray = audit::verify_log(audit::rotated_series(path), "");
  CHECK(stray.problem == VerifyProblem::kFileOrder);
  CHECK(stray.file == path + ".1");
  CHECK(stray.records == 1 + 4);
  // A torn last line in a file that later files follow is no crash (a crash tears the last line only).
  std::string torn = test::read_file(path);
  torn.pop_back();
  test::write_file(garbage, torn);
  const auto r = audit::verify_log({garbage, path}, "");
  CHECK(r.problem == VerifyProblem::kFileOrder);
  CHECK(r.file == garbage);
  CHECK_THAT(r.message, Catch::Contains("yet later files follow"));
  CHECK(verify_one(garbage).problem == VerifyProblem::kTruncated);  // alone, it is the last line
  std::filesystem::remove(path + ".1");
}
