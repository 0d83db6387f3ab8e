// Concurrent audit-log writers: 8 threads and 8 CLI processes each write their own log (rotating
// every few records) while 8 more threads and 8 more processes race for one shared log path.
// Every private log verifies; of each racing group exactly one writer wins, its log verifies, and
// every loser fails at once with "audit log PATH is in use by ..." naming the holder; no side file
// is left behind and a user's own PATH.partial is never touched.
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"
#include "support/skip.hpp"

#include <sitsrt/audit.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <latch>
#include <thread>

using namespace sitsrt;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr int kWriters = 8;

std::string verify_text(const std::string& log) {
  const audit::VerifyReport r = audit::verify_log(audit::rotated_series(log), "");
  return r.clean() ? "clean" : fmt::format("{}:{}: {}: {}", r.file, r.line, to_string(r.problem), r.message);
}

// Side files of the writers (LOG.partial-PID-RANDOM) left in the test folder.
int side_files(const std::string& stem) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(stem).parent_path())) {
    const std::string name = e.path().filename().string();
    n += name.starts_with(fs::path(stem).filename().string()) && name.find(".partial-") != std::string::npos;
  }
  return n;
}

void write_requests(AuditSink& sink, const std::string& tag, int requests) {
  for (int r = 0; r < requests; ++r) {
    RequestRecord rec;
    rec.request_id = fmt::format("{}-{}", tag, r);
    rec.model_sha256 = std::string(64, 'b');
    rec.input_tokens = {1, 2, 3};
    sink.on_request_begin(rec);
    for (int i = 0; i < 10; ++i) {
      TokenEvent e;
      e.index = i;
      e.token_id = 5 + i;
      e.text = tag;
      sink.on_token(rec.request_id, e);
    }
    RequestSummary s;
    s.request_id = rec.request_id;
    s.finish_reason = "length";
    s.generated_tokens = 10;
    sink.on_request_end(s);
  }
  sink.flush();
}

// A started CLI process; stdout is a pipe the test reads (or not: the process then blocks).
struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
  int err = -1;  // read end of its stderr
};

Child spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  REQUIRE(::pipe(out) == 0);
  REQUIRE(::pipe(err) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[0]);
    ::close(err[0]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  return {pid, out[0], err[0]};
}

std::string drain(int fd) {
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return text;
}

// Waits for the child; returns its exit code (-signal when killed) and its stderr.
std::pair<int, std::string> finish(Child& c) {
  std::thread reader([&] { (void)drain(c.out); });
  const std::string err = drain(c.err);
  reader.join();
  int status = 0;
  REQUIRE(::waitpid(c.pid, &status, 0) == c.pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), err};
}

}  // namespace

TEST_CASE("8 threads write their own logs while 8 race for one: all verify, losers are told", "[audit][concurrency]") {
  std::vector<std::string> own(kWriters);
  for (auto& log : own) log = test::fresh_log_path("threads-own");
  const std::string shared = test::fresh_log_path("threads-shared");
  test::write_file(shared + ".partial", "the user's own file");
  std::latch start(2 * kWriters);
  std::latch raced(kWriters);
  std::atomic<int> winners{0};
  std::vector<std::string> losers(kWriters);
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      JsonlAuditLogOptions o;
      o.path = own[static_cast<std::size_t>(t)];
      o.rotate_bytes = 4096;
      start.arrive_and_wait();
      auto sink = make_jsonl_audit_sink(o);
      write_requests(*sink, fmt::format("own{}", t), 20);
    });
    threads.emplace_back([&, t] {
      JsonlAuditLogOptions o;
      o.path = shared;
      o.rotate_bytes = 4096;
      start.arrive_and_wait();
      std::shared_ptr<AuditSink> sink;
      try {
        sink = make_jsonl_audit_sink(o);
        ++winners;
      } catch (const Error& e) {
        losers[static_cast<std::size_t>(t)] = e.what();
      }
      raced.count_down();
      raced.wait();  // the winner holds its log until every racer has tried
      if (sink) write_requests(*sink, fmt::format("shared{}", t), 20);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(winners == 1);
  int refused = 0;
  for (const std::string& message : losers) {
    if (message.empty()) continue;
    ++refused;
    CHECK_THAT(message, Contains("audit log " + shared + " is in use by this process (pid " +
                                 std::to_string(::getpid()) + ")"));
  }
  CHECK(refused == kWriters - 1);
  CHECK(verify_text(shared) == "clean");
  CHECK(audit::rotated_series(shared).size() > 2);
  for (const std::string& log : own) {
    const audit::VerifyReport r = audit::verify_log(audit::rotated_series(log), "");
    CHECK(verify_text(log) == "clean");
    CHECK(r.files > 1);
    CHECK(r.records == r.files + 20 * 12);  // a header per file, then 20 x (begin + 10 tokens + end)
  }
  CHECK(test::read_file(shared + ".partial") == "the user's own file");
  CHECK(side_files(shared) == 0);
}

TEST_CASE("8 CLI processes write their own logs while 8 race for one held log", "[audit][concurrency][gated]") {
#ifndef SITSRT_CLI_PATH
  SITSRT_SKIP("the sitsrt CLI is not built");
#else
  auto options = test::tiny_options(DType::kQ8_0);
  options.context = 4096;
  const std::string model = test::random_model(options, "concurrency");
  const auto run_args = [&](const std::string& log, const std::string& tokens, bool json) {
    std::vector<std::string> a = {SITSRT_CLI_PATH, "run", "-m", model, "-p", "race", "-n", tokens, "--ignore-eos",
                                  "-t", "1", "--seed", "7", "--audit-log", log, "--audit-rotate-bytes", "2048"};
    a.push_back(json ? "--json" : "-q");
    return a;
  };
  const std::string shared = test::fresh_log_path("procs-shared");
  test::write_file(shared + ".partial", "the user's own file");
  // The holder streams 1200 tokens of JSON (over 100 KB; a pipe holds 64 KiB) into a pipe nobody
  // reads yet: it blocks, its log open, until the racers are done.
  Child holder = spawn(run_args(shared, "1200", true));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(shared) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(fs::exists(shared));
  std::vector<std::string> own(kWriters);
  std::vector<Child> racers, writers;
  for (int i = 1; i < kWriters; ++i) racers.push_back(spawn(run_args(shared, "16", false)));
  for (auto& log : own) {
    log = test::fresh_log_path("procs-own");
    writers.push_back(spawn(run_args(log, "40", false)));
  }
  for (Child& c : racers) {
    const auto [code, err] = finish(c);
    CHECK(code == 1);
    CHECK_THAT(err, Contains("audit log " + shared + " is in use by pid " + std::to_string(holder.pid)));
  }
  for (std::size_t i = 0; i < writers.size(); ++i) {
    const auto [code, err] = finish(writers[i]);
    CHECK(code == 0);
    CHECK(err.empty());
    CHECK(verify_text(own[i]) == "clean");
    CHECK(audit::rotated_series(own[i]).size() > 1);
  }
  const auto [code, err] = finish(holder);
  CHECK(code == 0);
  CHECK(verify_text(shared) == "clean");
  const audit::VerifyReport r = audit::verify_log(audit::rotated_series(shared), "");
  CHECK(r.open_requests == 0);
  CHECK(test::read_file(shared + ".partial") == "the user's own file");
  CHECK(side_files(shared) == 0);
  CHECK(side_files(own[0]) == 0);
#endif
}
