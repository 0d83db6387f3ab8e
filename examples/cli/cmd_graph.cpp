// sitsrt graph: the computation graph a model runs as, with per-node costs and the memory plan;
// --plan: the device plan instead (devices, memory per request against the budget, stages).
#include "commands.hpp"

#include <fmt/format.h>

namespace sitsrt::cli {

int graph_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({"json", 0, "", "print the graph as JSON", ""});
  specs.push_back({"plan", 0, "", "print the device plan (devices, memory, stages) instead of the graph", ""});
  Args args("sitsrt graph", "Print the computation graph and activation memory plan of a model.", specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  EngineOptions options = engine_options_from(args);
  if (args.has("plan")) {
    const Engine engine(options);
    fmt::print("{}", args.has("json") ? engine.plan().to_json() + "\n" : engine.plan().to_table());
    return 0;
  }
  options.threads = 1;  // nothing is computed
  const Engine engine(options);
  fmt::print("{}", args.has("json") ? engine.graph_json() + "\n" : engine.graph_table());
  return 0;
}

}  // namespace sitsrt::cli
