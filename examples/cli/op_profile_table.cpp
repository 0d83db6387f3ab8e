#include "op_profile_table.hpp"

#include <fmt/format.h>

namespace sitsrt::cli {

nlohmann::json op_profile_json(const StepTimes& t) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpTime& op : t.ops) ops.push_back({{"op", op.op}, {"calls", op.calls}, {"seconds", op.seconds}});
  return nlohmann::json{{"steps", t.steps}, {"tokens", t.tokens}, {"seconds", t.seconds}, {"ops", ops}};
}

void print_op_profile(std::string_view title, const StepTimes& t, bool per_token, std::string_view unit) {
  if (t.steps == 0) return;
  const double per = static_cast<double>(per_token ? t.tokens : t.steps);
  fmt::print("\n{} ({} steps, {} tokens, {:.1f} us per {}; the node timing itself adds a synchronise per node)\n",
             title, t.steps, t.tokens, 1e6 * t.seconds / per, unit);
  fmt::print("  {:<22} {:>12} {:>12} {:>8}\n", "op", fmt::format("calls/{}", unit), fmt::format("us/{}", unit), "share");
  double listed = 0.0;
  for (const OpTime& op : t.ops) {
    listed += op.seconds;
    fmt::print("  {:<22} {:>12.1f} {:>12.1f} {:>7.1f}%\n", op.op, static_cast<double>(op.calls) / per,
               1e6 * op.seconds / per, 100.0 * op.seconds / t.seconds);
  }
  fmt::print("  {:<22} {:>12} {:>12.1f} {:>7.1f}%\n", "(between ops)", "", 1e6 * (t.seconds - listed) / per,
             100.0 * (t.seconds - listed) / t.seconds);
}

}  // namespace sitsrt::cli
