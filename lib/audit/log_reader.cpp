#include "audit/log_reader.hpp"

#include "audit/records.hpp"
#include "core/check.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

namespace sitsrt::audit {

std::vector<RecordedRequest> read_recorded_requests(const std::vector<std::string>& files) {
  std::vector<RecordedRequest> out;
  std::map<std::string, std::size_t> index;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) raise(ErrorCode::kIo, "{}: cannot open", file);
    std::string line;
    for (std::int64_t number = 1; std::getline(in, line); ++number) {
      if (in.eof()) break;  // an incomplete last line (no newline) is not a record
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) raise(ErrorCode::kInvalidArgument, "{}:{}: not a JSON record", file, number);
      const std::string type = j.value("type", "");
      try {
        if (type == "request") {
          RecordedRequest r;
          r.record = request_from_json(j);
          index[r.record.request_id] = out.size();
          out.push_back(std::move(r));
          continue;
        }
        if (type != "token" && type != "end") continue;
        const auto it = index.find(j.value("req", ""));
        if (it == index.end()) continue;
        RecordedRequest& r = out[it->second];
        if (type == "token") {
          r.logprobs.push_back(static_cast<float>(j.at("lp").get<double>()));
          if (r.finish_reason.empty()) r.tokens.push_back(j.at("id").get<std::int32_t>());
        } else {
          r.tokens = j.at("tokens").get<std::vector<std::int32_t>>();
          r.finish_reason = j.at("finish").get<std::string>();
        }
      } catch (const nlohmann::json::exception& e) {
        raise(ErrorCode::kInvalidArgument, "{}:{}: {}", file, number, e.what());
      } catch (const Error& e) {
        raise(ErrorCode::kInvalidArgument, "{}:{}: {}", file, number, e.what());
      }
    }
  }
  return out;
}

}  // namespace sitsrt::audit
