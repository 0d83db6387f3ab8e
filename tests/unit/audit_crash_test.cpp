// Crash safety of the audit log: the CLI is killed with SIGKILL while generating, 20 times;
// every log it leaves verifies up to its last whole record, and a torn last line is reported as
// a truncation, never as tampering.
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace sitsrt;

namespace {

// Starts the CLI writing `log`, kills it after `delay`, and waits for it.
void run_and_kill(const std::string& model, const std::string& log, int seed, std::chrono::milliseconds delay) {
  const std::string seed_text = std::to_string(seed);
  std::vector<std::string> args = {SITSRT_CLI_PATH, "run", "-m", model, "-p", "crash test", "-n", "3000",
                                   "--ignore-eos", "--temp", "0.8", "--seed", seed_text, "-t", "1", "-q",
                                   "--audit-log", log, "--audit-level", "topk", "--audit-fsync", "record"};
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

TEST_CASE("SIGKILL mid-generation leaves a log that verifies up to its last whole record", "[audit][crash]") {
#ifndef SITSRT_CLI_PATH
  WARN("skipped: the sitsrt CLI is not built");
#else
  auto options = test::tiny_options(DType::kQ8_0);
  options.dim = 128;
  options.ffn = 256;
  options.context = 4096;
  const std::string model = test::random_model(options, "crash");
  int mid_generation = 0, truncated = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string log = test::fresh_log_path("crash");
    run_and_kill(model, log, i, std::chrono::milliseconds(80 + 10 * i));
    if (!std::filesystem::exists(log)) continue;  // killed before the sink opened its file
    const auto report = audit::verify_log(audit::rotated_series(log), "");
    INFO("run " << i << ": " << report.message);
    CHECK((report.problem == audit::VerifyProblem::kNone || report.problem == audit::VerifyProblem::kTruncated));
    if (report.problem == audit::VerifyProblem::kTruncated) {
      ++truncated;
      CHECK(report.line == static_cast<std::int64_t>(test::split_lines(test::read_file(log)).size()));
    }
    if (report.open_requests == 1) ++mid_generation;
  }
  INFO("runs killed mid-generation: " << mid_generation << ", with a torn last record: " << truncated);
  CHECK(mid_generation >= 10);
#endif
}
