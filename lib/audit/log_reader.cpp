#include "audit/log_reader.hpp"

#include "audit/records.hpp"
#include "core/check.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <map>
#include <unistd.h>

namespace sitsrt::audit {

LogLineReader::LogLineReader(std::string path) : path_(std::move(path)), fd_(open_regular_file(path_)) {}

bool LogLineReader::next(std::string& line, bool& complete) {
  constexpr std::size_t kChunk = std::size_t{64} << 10;
  std::size_t searched = start_;
  for (;;) {
    const std::size_t nl = buffer_.find('\n', searched);
    if (nl != std::string::npos) {
      line.assign(buffer_, start_, nl - start_);
      start_ = nl + 1;
      complete = true;
      ++number_;
      return true;
    }
    if (buffer_.size() - start_ > kMaxRecordBytes) {
      raise(ErrorCode::kInvalidArgument, "{}:{}: a line longer than {} is not an audit record", path_, number_ + 1,
            byte_size_text(kMaxRecordBytes));
    }
    if (end_) {
      if (start_ == buffer_.size()) return false;
      line.assign(buffer_, start_, std::string::npos);
      start_ = buffer_.size();
      complete = false;
      ++number_;
      return true;
    }
    buffer_.erase(0, start_);
    start_ = 0;
    searched = buffer_.size();
    buffer_.resize(searched + kChunk);
    ssize_t n = 0;
    do {
      n = ::read(fd_.get(), buffer_.data() + searched, kChunk);
    } while (n < 0 && errno == EINTR);
    if (n < 0) raise(ErrorCode::kIo, "{}: cannot read: {}", path_, std::strerror(errno));
    buffer_.resize(searched + static_cast<std::size_t>(n));
    end_ = n == 0;
  }
}

std::vector<RecordedRequest> read_recorded_requests(const std::vector<std::string>& files) {
  std::vector<RecordedRequest> out;
  std::map<std::string, std::size_t> index;
  for (const std::string& file : files) {
    LogLineReader in(file);
    std::string line;
    bool complete = true;
    while (in.next(line, complete)) {
      if (!complete) break;  // an incomplete last line (no newline) is not a record
      const std::int64_t number = in.line_number();
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) raise(ErrorCode::kInvalidArgument, "{}:{}: not a JSON record", file, number);
      try {
        const std::string type = j.value("type", "");  // throws for a non-string type (found by fuzzing)
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
          r.logprobs.push_back(record_field<float>(j, "lp"));
          if (r.finish_reason.empty()) r.tokens.push_back(record_field<std::int32_t>(j, "id"));
        } else {
          r.tokens = record_field<std::vector<std::int32_t>>(j, "tokens");
          r.finish_reason = record_field<std::string>(j, "finish");
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
