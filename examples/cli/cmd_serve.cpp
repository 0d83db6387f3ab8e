// sitsrt serve: the OpenAI-compatible server (examples/server) over one engine. Prints
// "listening on http://HOST:PORT" on stdout once it accepts connections (--port 0 picks a free
// port); SIGTERM or SIGINT stop it: no new requests, those in flight get --drain-seconds to
// finish (then they are cancelled), and the engine's audit sinks are flushed on the way out.
#include "commands.hpp"
#include "server.hpp"

#include <sitsrt/error.hpp>

#include <fmt/format.h>

#include <pthread.h>
#include <csignal>
#include <cstdio>
#include <thread>

namespace sitsrt::cli {

int serve_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  for (auto* group : {&chat_option_specs, &audit_option_specs}) {
    const std::vector<OptionSpec> more = (*group)();
    specs.insert(specs.end(), more.begin(), more.end());
  }
  specs.push_back({"host", 0, "ADDR", "address to listen on (only loopback unless you say otherwise)", "127.0.0.1"});
  specs.push_back({"port", 0, "N", "TCP port (0: any free port, printed at start)", "8080"});
  specs.push_back(
      {"model-id", 0, "NAME", "the model name /v1/models lists and requests must give", "the model's name"});
  specs.push_back({"api-key-file", 0, "PATH",
                   "require 'Authorization: Bearer KEY': one KEY [TENANT] per line; the tenant feeds the quotas",
                   "none"});
  specs.push_back({"max-body-bytes", 0, "N", "largest request body accepted (413 above)", "4194304"});
  specs.push_back({"max-concurrent-requests", 0, "N", "requests answered at once (429 above)", "64"});
  specs.push_back({"request-timeout", 0, "SECONDS", "a request still running after this is cancelled", "600"});
  specs.push_back({"drain-seconds", 0, "SECONDS", "on SIGTERM, how long requests in flight may finish", "10"});
  specs.push_back({"enable-trace", 0, "",
                   "token-level audit records (ids, text, logprobs, top-5 alternatives, entropy, timings: "
                   "--audit-level topk); without it, and without --audit-level, requests get begin/end records only",
                   ""});
  specs.push_back({"price-per-hour", 0, "DOLLARS",
                   "device cost per hour, for /metrics' cost per request and per 1k tokens", "none"});
  Args args("sitsrt serve",
            "Serve a model over an OpenAI-compatible HTTP API: POST /v1/completions, POST /v1/chat/completions "
            "(stream: SSE, logprobs), GET /v1/models, GET /health, GET /metrics (Prometheus). Requests share the "
            "engine's batched steps.",
            specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  if (!args.positional().empty()) throw UsageError("sitsrt serve takes no positional arguments");
  server::ServerOptions options;
  options.host = args.get_or("host", "127.0.0.1");
  options.port = static_cast<int>(args.get_int("port", 8080, 0, 65535));
  options.model_id = args.get_or("model-id", "");
  options.max_body_bytes = static_cast<std::size_t>(args.get_int("max-body-bytes", 4 << 20, 1024, 1LL << 32));
  options.max_concurrent_requests = static_cast<int>(args.get_int("max-concurrent-requests", 64, 1, 4096));
  options.request_timeout = std::chrono::seconds(args.get_int("request-timeout", 600, 1, 86400 * 7));
  options.audit_log = args.get_or("audit-log", "");
  options.price_per_hour = args.get_double("price-per-hour", 0.0, 0.0, 1e6);
  const auto drain = std::chrono::seconds(args.get_int("drain-seconds", 10, 0, 3600));
  if (const auto keys = args.get("api-key-file")) {
    try {
      options.api_keys = server::read_api_keys(*keys);
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
  }

  // SIGTERM / SIGINT go to a thread that waits for them: blocked here before any thread is
  // started (the audit sinks' writers, the engine's pool and scheduler, the HTTP workers), so
  // every thread inherits the mask and none takes the default action (death, log unflushed).
  // SIGUSR1 is how this thread wakes the waiter when the server ends on its own.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  GenerationConfig audit_defaults;  // the trace level and full-distribution steps of every request
  EngineOptions engine_options = engine_options_from(args);
  apply_chat_options(args, engine_options);
  apply_audit_options(args, engine_options, audit_defaults);
  if (args.has("enable-trace") && !args.has("audit-log") && !args.has("otlp-trace")) {
    throw UsageError("--enable-trace needs --audit-log FILE or --otlp-trace FILE");
  }
  options.audit_level = args.has("audit-level")    ? audit_defaults.audit.level
                        : args.has("enable-trace") ? TraceLevel::kTopK
                                                   : TraceLevel::kOff;
  options.audit_full_distribution_steps = audit_defaults.audit.full_distribution_steps;
  const Engine engine(std::move(engine_options));
  server::Server server(engine, options);
  int port = 0;
  try {
    port = server.bind();
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::kIo, e.what());
  }
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    if (signal == SIGUSR1) return;
    fmt::print(stderr, "sitsrt serve: {} received: draining for up to {} s\n", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               drain.count());
    server.stop(drain);
  });
  fmt::print("listening on http://{}:{} (model '{}')\n", options.host, port, server.model_id());
  std::fflush(stdout);
  server.listen();
  pthread_kill(waiter.native_handle(), SIGUSR1);  // harmless when the waiter already returned
  waiter.join();
  fmt::print(stderr, "sitsrt serve: stopped\n");
  return 0;
}

}  // namespace sitsrt::cli
