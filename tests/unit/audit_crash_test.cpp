// Audit durability drill: the CLI is killed with SIGKILL at random points 100 times (before the
// log opens, mid-record, mid-generation, and, with a small rotation size in half of the runs,
// while it rotates to a new file); every log series it leaves verifies up to its last whole
// record, and a torn last line is reported as a truncation, never as tampering. The counts are
// printed (run with -s to see them); SITSRT_DRILL_RUNS overrides the number of runs.
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"
#include "support/skip.hpp"
#include "support/random.hpp"

#include <sitsrt/audit.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <cstdlib>
#include <thread>

using namespace sitsrt;

namespace {

// Starts the CLI writing `log`, kills it after `delay`, and waits for it.
void run_and_kill(const std::string& model, const std::string& log, int seed, std::chrono::microseconds delay,
                  std::uint64_t rotate_bytes) {
  const std::string seed_text = std::to_string(seed);
  std::vector<std::string> args = {SITSRT_CLI_PATH, "run", "-m", model, "-p", "crash test", "-n", "3000",
                                   "--ignore-eos", "--temp", "0.8", "--seed", seed_text, "-t", "1", "-q",
                                   "--audit-log", log, "--audit-level", "topk", "--audit-fsync", "record",
                                   "--audit-rotate-bytes", std::to_string(rotate_bytes)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
}

}  // namespace

TEST_CASE("SIGKILL at random points leaves logs that verify up to their last whole record", "[audit][crash][gated]") {
#ifndef SITSRT_CLI_PATH
  SITSRT_SKIP("the sitsrt CLI is not built");
#else
  auto options = test::tiny_options(DType::kQ8_0);
  options.dim = 128;
  options.ffn = 256;
  options.context = 4096;
  const std::string model = test::random_model(options, "crash");
  const char* runs_env = std::getenv("SITSRT_DRILL_RUNS");
  const int runs = runs_env != nullptr ? std::max(1, std::atoi(runs_env)) : 100;
  test::Rng rng(20261130);
  int no_file = 0, clean = 0, truncated = 0, mid_generation = 0, rotated_runs = 0, killed_in_rotation = 0;
  std::int64_t records = 0;
  for (int i = 0; i < runs; ++i) {
    const std::string log = test::fresh_log_path("crash");
    // Odd runs rotate every 2 KiB (a few records per file), so some kills land mid-rotation.
    const std::uint64_t rotate = i % 2 == 1 ? 2048 : 0;
    const auto delay = std::chrono::microseconds(2000 + rng.uniform_int(0, 250000));
    run_and_kill(model, log, i, delay, rotate);
    if (!std::filesystem::exists(log)) {  // killed before the sink opened its file
      ++no_file;
      continue;
    }
    const auto series = audit::rotated_series(log);
    const auto report = audit::verify_log(series, "");
    INFO("run " << i << " (delay " << delay.count() << " us, rotate " << rotate << "): " << report.message);
    CHECK((report.problem == audit::VerifyProblem::kNone || report.problem == audit::VerifyProblem::kTruncated));
    records += report.records;
    if (series.size() > 1) ++rotated_runs;
    if (report.problem == audit::VerifyProblem::kTruncated) {
      ++truncated;
      CHECK(report.file == series.back());
      CHECK(report.line == static_cast<std::int64_t>(test::split_lines(test::read_file(series.back())).size()));
    } else {
      ++clean;
    }
    // The newest file holds at most its header: the kill came while rotating.
    if (series.size() > 1 && test::split_lines(test::read_file(series.back())).size() <= 1) ++killed_in_rotation;
    if (report.open_requests == 1) ++mid_generation;
  }
  WARN("audit kill drill: " << runs << " runs; " << no_file << " killed before the log existed, " << clean
                            << " verified clean, " << truncated << " with a torn last record (reported as truncated), "
                            << mid_generation << " killed mid-generation, " << rotated_runs << " had rotated, "
                            << killed_in_rotation << " killed within a rotation; " << records
                            << " records verified; 0 verification failures required");
  CHECK(mid_generation >= runs / 2);
#endif
}

TEST_CASE("a rotation that cannot create its file fails the sink instead of the process", "[audit][crash]") {
  JsonlAuditLogOptions options;
  options.path = test::fresh_log_path("rotate-blocked");
  options.rotate_bytes = 1024;
  std::ofstream(options.path + ".1") << "someone else's file\n";  // the rotation target exists
  auto sink = make_jsonl_audit_sink(options);
  RequestRecord rec;
  rec.request_id = "r";
  rec.model_sha256 = std::string(64, 'a');
  sink->on_request_begin(rec);
  bool refused = false;
  try {
    for (int i = 0; i < 200; ++i) {
      TokenEvent e;
      e.index = i;
      e.token_id = i;
      e.text = "token text";
      sink->on_token(rec.request_id, e);
    }
    sink->flush();
  } catch (const Error& e) {
    refused = true;
    CHECK(e.code() == ErrorCode::kIo);
    CHECK_THAT(e.what(), Catch::Contains(".1") && Catch::Contains("never overwritten"));
  }
  CHECK(refused);
  CHECK(test::read_file(options.path + ".1") == "someone else's file\n");
  // What was written before the failed rotation still verifies.
  const auto report = audit::verify_log({options.path}, "");
  CHECK(report.clean());
  CHECK(report.records > 1);
}
