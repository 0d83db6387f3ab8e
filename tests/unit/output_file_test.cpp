// Output files (core/output_file.hpp and gguf::Writer::write): a target that is not a regular
// file, an input, or an existing file not to be replaced is refused before anything is written
// and left exactly as it was; the temporary file has a unique name (a user's OUT.tmp is never
// touched); a write failure (RLIMIT_FSIZE: "File too large") leaves nothing behind.
#include "core/output_file.hpp"
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace sitsrt;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("sitsrt_output_" + std::to_string(::getpid()) + "_" +
                                                 std::to_string(counter()++))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  fs::path path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

gguf::Writer small_writer(std::size_t floats = 4) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("llama"));
  w.add_tensor("x", {static_cast<std::int64_t>(floats)}, DType::kF32, [](std::span<std::byte> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 7);
  });
  return w;
}

template <typename Fn>
Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected a sitsrt::Error");
  return Error(ErrorCode::kInternal, "unreachable");
}

}  // namespace

TEST_CASE("an output replaces no FIFO, symlink, directory or device node", "[output]") {
  TempDir dir;
  const gguf::Writer w = small_writer();
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::string target = dir.file("target.gguf");
  spit(target, "precious");
  const std::string link = dir.file("link.gguf");
  fs::create_symlink(target, link);
  const std::string folder = dir.file("folder");
  fs::create_directories(folder);
  for (const auto& [path, kind] : {std::pair{fifo, "a FIFO"}, {link, "a symbolic link"}, {folder, "a directory"},
                                   {std::string("/dev/null"), "a character device"}}) {
    const Error e = error_of([&] { w.write(path); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(e.what(), Contains(path) && Contains(std::string("is ") + kind) && Contains("refusing to replace"));
  }
  CHECK(fs::is_fifo(fifo));
  CHECK(fs::is_symlink(link));
  CHECK(fs::is_directory(folder));
  CHECK(fs::is_character_file("/dev/null"));
  CHECK(slurp(target) == "precious");
  CHECK(dir.names() == std::vector<std::string>{"fifo", "folder", "link.gguf", "target.gguf"});  // no temporary file
  if (::geteuid() == 0) {  // a real device node, as root: it stays a device node
    const std::string node = dir.file("node");
    REQUIRE(::mknod(node.c_str(), S_IFCHR | 0644, ::makedev(1, 3)) == 0);
    CHECK_THROWS_WITH(w.write(node), Contains("is a character device"));
    CHECK(fs::is_character_file(node));
  }
}

TEST_CASE("an existing file is replaced only when asked, and never an input", "[output]") {
  TempDir dir;
  const gguf::Writer w = small_writer();
  const std::string target = dir.file("model.gguf");
  spit(target, "precious");
  OutputFileOptions keep;
  keep.replace_existing = false;
  keep.exists_hint = "pass --force to replace it";
  const Error e = error_of([&] { w.write(target, {}, keep); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(e.what(), Contains("already exists") && Contains("(pass --force to replace it)"));
  CHECK(slurp(target) == "precious");

  // An input, under its own name or a hard link, stays whatever replace_existing says.
  OutputFileOptions force;
  force.protected_inputs = {target};
  const std::string hard_link = dir.file("other-name.gguf");
  fs::create_hard_link(target, hard_link);
  for (const std::string& path : {target, hard_link}) {
    CHECK_THROWS_WITH(w.write(path, {}, force), Contains("is an input of this conversion"));
  }
  CHECK(slurp(target) == "precious");

  // A user's own OUT.tmp is not the temporary file: it survives, and so does a new write.
  const std::string fresh = dir.file("fresh.gguf");
  spit(fresh + ".tmp", "mine");
  w.write(fresh, {}, keep);
  CHECK(slurp(fresh + ".tmp") == "mine");
  CHECK(gguf::File::open(fresh).tensors().size() == 1);
  CHECK_THROWS_WITH(w.write(fresh, {}, keep), Contains("already exists"));
  w.write(target);  // the default replaces a regular file
  CHECK(gguf::File::open(target).tensors().size() == 1);
  CHECK(slurp(hard_link) == "precious");  // the old inode, untouched under its other name
}

TEST_CASE("a target that appears while the file is written is not replaced", "[output]") {
  TempDir dir;
  const std::string target = dir.file("late.bin");
  OutputFileOptions keep;
  keep.replace_existing = false;
  AtomicOutputFile out(target, keep);
  out.write("new", 3);
  spit(target, "arrived first");
  CHECK_THROWS_WITH(out.commit(), Contains("already exists"));
  CHECK(slurp(target) == "arrived first");
}

TEST_CASE("past RLIMIT_FSIZE the writer reports 'File too large' and leaves nothing behind", "[output]") {
  TempDir dir;
  const std::string target = dir.file("big.gguf");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the limit and the ignored SIGXFSZ stay in this process
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 1;
    try {
      small_writer(256 * 1024).write(target);  // 1 MiB of tensor data
    } catch (const Error& e) {
      const std::string what = e.what();
      code = e.code() == ErrorCode::kIo && what.find(target) != std::string::npos &&
                     what.find("File too large") != std::string::npos
                 ? 0
                 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(dir.names().empty());
}
