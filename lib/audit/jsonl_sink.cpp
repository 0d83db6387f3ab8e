// The JSONL audit log sink: callers enqueue copies of the hook arguments; one writer thread
// turns them into canonical, hash-chained lines, writes them in batches and syncs per policy.
#include "audit/chain.hpp"
#include "audit/records.hpp"
#include "audit/verify.hpp"
#include "core/check.hpp"
#include "core/file_io.hpp"

#include <sitsrt/audit.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <variant>

namespace sitsrt {
namespace {

struct TokenItem {
  std::string request_id;
  TokenEvent event;
};
using Item = std::variant<RequestRecord, TokenItem, AnomalyEvent, RequestSummary, ShadowDivergence>;

// Log files this process holds the write lock of. POSIX record locks belong to the process, so
// a lock test by this process never sees its own lock, and closing any descriptor of the file
// would drop it: a would-be second writer in this process looks here instead of opening the file.
class HeldLogs {
 public:
  static HeldLogs& instance() {
    static HeldLogs held;
    return held;
  }
  void add(const FileIdentity& id) {
    std::lock_guard lock(mutex_);
    held_.insert({id.device, id.inode});
  }
  void remove(const FileIdentity& id) {
    std::lock_guard lock(mutex_);
    held_.erase({id.device, id.inode});
  }
  bool holds(const FileIdentity& id) {
    std::lock_guard lock(mutex_);
    return held_.count({id.device, id.inode}) > 0;
  }

 private:
  std::mutex mutex_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> held_;
};

// An exclusive write lock over the whole file; false when another process holds one.
bool lock_file(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  return ::fcntl(fd, F_SETLK, &lock) == 0;
}

// The pid of the process holding a write lock on the log file `path`, if any.
std::optional<pid_t> lock_holder(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return std::nullopt;
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_GETLK, &probe) != 0 || probe.l_type == F_UNLCK) return std::nullopt;
  return probe.l_pid;
}

std::string random_hex() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

class JsonlSink final : public AuditSink {
 public:
  explicit JsonlSink(JsonlAuditLogOptions options) : options_(std::move(options)) {
    if (options_.path.empty()) raise(ErrorCode::kInvalidArgument, "audit log path is empty");
    if (options_.queue_records == 0) raise(ErrorCode::kInvalidArgument, "audit queue_records must be > 0");
    struct stat st {};
    if (options_.append && ::lstat(options_.path.c_str(), &st) == 0) {
      open_for_append();
    } else {
      open_file(options_.path);
    }
    writer_ = std::thread([this] { run(); });
  }

  ~JsonlSink() override {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    not_empty_.notify_all();
    writer_.join();
    if (fd_ >= 0) {
      ::fsync(fd_);
      close_file(fd_);
    }
    if (first_fd_ >= 0) close_file(first_fd_);
  }

  void on_request_begin(const RequestRecord& record) override { push(record); }
  void on_token(const std::string& request_id, const TokenEvent& event) override {
    push(TokenItem{request_id, event});
  }
  void on_anomaly(const AnomalyEvent& event) override { push(event); }
  void on_request_end(const RequestSummary& summary) override { push(summary); }
  void on_shadow(const ShadowDivergence& divergence) override { push(divergence); }

  void flush() override {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = pushed_;
    drained_.wait(lock, [&] { return written_ >= target; });
    if (failed_.load()) raise(ErrorCode::kIo, "{}: writing the audit log failed ({})", options_.path, error_text_);
  }

 private:
  void push(Item item) {
    // A request that cannot be recorded fails rather than running unaudited.
    if (failed_.load()) raise(ErrorCode::kIo, "{}: writing the audit log failed ({})", options_.path, error_text_);
    std::unique_lock lock(mutex_);
    // Bounded: generation waits only when the writer is this far behind; nothing is dropped.
    not_full_.wait(lock, [&] { return queue_.size() < options_.queue_records; });
    queue_.push_back(std::move(item));
    ++pushed_;
    lock.unlock();
    not_empty_.notify_one();
  }

  // A log file appears under its name only once it holds its whole header record: the header is
  // written to a side file of its own (a unique name, created O_EXCL; never a file of the user's)
  // that is then hard-linked into place. A crash at any point (even mid-rotation) therefore leaves
  // no log file or one that starts with a header, never an empty log file, which the verifier
  // must treat as tampering; at worst the side file is left, holding one header. link() refuses
  // an existing name, so a log is never overwritten even when two writers race, and the file is
  // write-locked (fcntl) from before it has its name until the sink is destroyed, so the loser of
  // a race is told who holds the log.
  void open_file(const std::string& path) {
    const auto refuse = [&](int error) {
      raise(ErrorCode::kIo, "{}: cannot create audit log ({})", path, std::strerror(error));
    };
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) refuse_existing(path);
    std::string staging;
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      staging = fmt::format("{}.partial-{}-{}", path, ::getpid(), random_hex());
      fd_ = ::open(staging.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
      if (fd_ < 0 && errno != EEXIST) refuse(errno);
    }
    if (fd_ < 0) refuse(EEXIST);
    const FileIdentity id = identity_of(fd_, staging);
    if (!lock_file(fd_)) {  // a new file nobody else has opened: cannot fail but on odd file systems
      const int error = errno;
      ::close(fd_);
      fd_ = -1;
      ::unlink(staging.c_str());
      refuse(error);
    }
    HeldLogs::instance().add(id);
    identities_[fd_] = id;
    file_bytes_ = 0;
    nlohmann::json header{{"type", "file"}, {"version", audit::kLogFormatVersion}, {"file_index", file_index_},
                          {"alg", options_.hmac_key.empty() ? "sha256" : "hmac-sha256"}};
    pending_ += audit::seal_record(header, chain_, options_.hmac_key);
    pending_ += '\n';
    write_pending();
    if (options_.durability != Durability::kNever) ::fsync(fd_);
    if (failed_.load() || ::link(staging.c_str(), path.c_str()) != 0) {
      const int error = failed_.load() ? write_errno_ : errno;  // the real reason, e.g. ENOSPC or EFBIG
      close_file(fd_);
      fd_ = -1;
      ::unlink(staging.c_str());
      if (error == EEXIST) refuse_existing(path);
      refuse(error);
    }
    ::unlink(staging.c_str());
  }

  // Opens an existing log to continue it (options_.append): locks its first file as open_file
  // would have (so a second writer is refused the same way), verifies the last file of its
  // series and takes the chain from its last record.
  void open_for_append() {
    const std::string& path = options_.path;
    const auto open_locked = [&](const std::string& file) {
      struct stat st {};
      if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        raise(ErrorCode::kIo, "{}: cannot append to the audit log: not a regular file", file);
      }
      if (HeldLogs::instance().holds(identity_of(file))) refuse_existing(file);
      UniqueFd fd(::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
      if (!fd) raise(ErrorCode::kIo, "{}: cannot open the audit log to append ({})", file, std::strerror(errno));
      if (!lock_file(fd.get())) refuse_existing(file);
      return fd;
    };
    UniqueFd first = open_locked(path);
    // Rotations are made only under the first file's lock, so the series is stable from here.
    const std::vector<std::string> series = audit::rotated_series(path);
    const std::string& last = series.back();
    UniqueFd last_fd = last == path ? UniqueFd() : open_locked(last);
    const std::string contents = read_regular_file(last, audit::kMaxLogFileBytes, "audit log file", ErrorCode::kIo);
    const audit::VerifyReport report = audit::verify_last_file(last, contents, options_.hmac_key);
    if (!report.clean()) {
      raise(ErrorCode::kIo,
            "{}: cannot append to the audit log: line {}: {} ({}); nothing was written (`sitsrt audit verify` "
            "checks the whole series; start a new log under another name)",
            last, report.line, to_string(report.problem), report.message);
    }
    const auto adopt = [&](UniqueFd& fd, const std::string& file) {
      const int raw = fd.release();
      identities_[raw] = identity_of(raw, file);
      HeldLogs::instance().add(identities_[raw]);
      return raw;
    };
    if (last == path) {
      fd_ = adopt(first, path);
    } else {
      first_fd_ = adopt(first, path);
      fd_ = adopt(last_fd, last);
    }
    file_index_ = report.last_file_index;
    file_bytes_ = contents.size();
    chain_.seq = report.next_seq;
    chain_.prev = report.last_hash;
  }

  // Throws the refusal for a log path that exists: in use by a live writer (which), or not.
  [[noreturn]] static void refuse_existing(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (HeldLogs::instance().holds(identity_of(path))) {
        raise(ErrorCode::kIo, "audit log {} is in use by this process (pid {}): another sink is writing it", path,
              ::getpid());
      }
      if (const auto pid = lock_holder(path)) {
        raise(ErrorCode::kIo, "audit log {} is in use by pid {} (another process is writing it)", path, *pid);
      }
    }
    raise(ErrorCode::kIo, "{}: cannot create audit log ({}); an audit log is never overwritten or appended to", path,
          std::strerror(EEXIST));
  }

  // Closes a log file descriptor, releasing its lock.
  void close_file(int fd) {
    if (const auto it = identities_.find(fd); it != identities_.end()) {
      HeldLogs::instance().remove(it->second);
      identities_.erase(it);
    }
    ::close(fd);
  }

  void write_pending() {
    std::size_t off = 0;
    while (off < pending_.size()) {
      const ssize_t n = ::write(fd_, pending_.data() + off, pending_.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        // Nothing to throw to on this thread: stop writing (a hole would break the chain) and
        // make the next hook call or flush() throw.
        write_errno_ = errno;
        error_text_ = std::strerror(errno);
        failed_.store(true);
        break;
      }
      off += static_cast<std::size_t>(n);
    }
    file_bytes_ += pending_.size();
    pending_.clear();
  }

  // The record of `item` (unsealed), or null when the request's level omits it.
  nlohmann::json to_record(const Item& item, bool& end_of_request) {
    nlohmann::json record;
    end_of_request = false;
    if (const auto* r = std::get_if<RequestRecord>(&item)) {
      levels_[r->request_id] = r->level;
      record = audit::request_to_json(*r);
    } else if (const auto* t = std::get_if<TokenItem>(&item)) {
      const auto it = levels_.find(t->request_id);
      const TraceLevel level = it == levels_.end() ? TraceLevel::kTokens : it->second;
      if (level == TraceLevel::kOff) return nullptr;
      record = audit::token_to_json(t->request_id, t->event, level);
    } else if (const auto* a = std::get_if<AnomalyEvent>(&item)) {
      record = audit::anomaly_to_json(*a);
    } else if (const auto* d = std::get_if<ShadowDivergence>(&item)) {
      record = audit::shadow_to_json(*d);
    } else {
      const auto& s = std::get<RequestSummary>(item);
      levels_.erase(s.request_id);
      record = audit::summary_to_json(s);
      end_of_request = true;
    }
    return record;
  }

  // Seals `record` into the current file, or into a new one when it would not fit: the new
  // file's header takes the next sequence number, so the record is sealed again after it.
  std::string seal_into_file(nlohmann::json& record) {
    const audit::ChainState before = chain_;
    std::string line = audit::seal_record(record, chain_, options_.hmac_key);
    if (options_.rotate_bytes == 0 || file_bytes_ + pending_.size() + line.size() + 1 <= options_.rotate_bytes ||
        file_bytes_ + pending_.size() == 0) {
      return line;
    }
    chain_ = before;
    write_pending();
    ::fsync(fd_);
    // The first file stays open (and locked) while the sink lives: a second writer started on the
    // log's name is told it is in use, however far the rotation has gone.
    if (file_index_ == 0) {
      first_fd_ = fd_;
    } else {
      close_file(fd_);
    }
    fd_ = -1;
    ++file_index_;
    open_file(options_.path + "." + std::to_string(file_index_));
    return audit::seal_record(record, chain_, options_.hmac_key);
  }

  void run() {
    std::deque<Item> batch;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        not_empty_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty() && closing_) break;
        batch.swap(queue_);
      }
      not_full_.notify_all();
      bool sync = false;
      for (const Item& item : batch) {
        if (failed_.load()) break;  // nothing after a failure: a hole would break the chain
        try {
          bool end_of_request = false;
          nlohmann::json record = to_record(item, end_of_request);
          if (record.is_null()) continue;
          const std::string line = seal_into_file(record);
          pending_ += line;
          pending_ += '\n';
          if (options_.durability == Durability::kPerRecord) {
            write_pending();
            ::fsync(fd_);
          }
          sync = sync || (end_of_request && options_.durability == Durability::kPerRequest);
        } catch (const Error& e) {  // e.g. a rotation target that cannot be created
          error_text_ = e.what();
          failed_.store(true);
        }
      }
      if (!failed_) write_pending();
      if (sync && fd_ >= 0) ::fsync(fd_);
      {
        std::lock_guard lock(mutex_);
        written_ += batch.size();
      }
      batch.clear();
      drained_.notify_all();
    }
    if (!pending_.empty() && !failed_) write_pending();
  }

  JsonlAuditLogOptions options_;
  int fd_ = -1;        // the file being written
  int first_fd_ = -1;  // the first file, once rotated away from (kept open: it holds the lock)
  std::map<int, FileIdentity> identities_;  // of the locked files open
  std::int64_t file_index_ = 0;
  std::uint64_t file_bytes_ = 0;
  audit::ChainState chain_;
  std::string pending_;
  std::atomic<bool> failed_{false};
  std::string error_text_;  // set before failed_
  int write_errno_ = 0;     // of the failed write, set before failed_
  std::map<std::string, TraceLevel> levels_;  // writer thread only

  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_, drained_;
  std::deque<Item> queue_;
  std::uint64_t pushed_ = 0, written_ = 0;
  bool closing_ = false;
  std::thread writer_;
};

}  // namespace

std::shared_ptr<AuditSink> make_jsonl_audit_sink(const JsonlAuditLogOptions& options) {
  return std::make_shared<JsonlSink>(options);
}

}  // namespace sitsrt
