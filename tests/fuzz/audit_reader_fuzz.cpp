// libFuzzer target: the readers of files an audit user hands the CLI besides the verifier's
// input. First byte even: the bytes are a key file (audit::key_from_file_contents); the key is the
// contents less one trailing newline, or a sitsrt::Error. Odd: the bytes are an audit log file
// (in a memfd) read by audit::LogLineReader, whose lines must put the file back together exactly,
// and by audit::read_recorded_requests (replay and show), which may only throw sitsrt::Error.
#include "audit/key_file.hpp"
#include "audit/log_reader.hpp"

#include <sitsrt/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    try {
      const std::string key = sitsrt::audit::key_from_file_contents(bytes, "fuzz.key");
      const bool newline = !bytes.empty() && bytes.back() == '\n';
      if (key.empty() || key != bytes.substr(0, bytes.size() - (newline ? 1 : 0))) __builtin_trap();
    } catch (const sitsrt::Error&) {
    }
    return 0;
  }
  const int fd = ::memfd_create("audit-log", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    ::close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    sitsrt::audit::LogLineReader reader(path);
    std::string line, rebuilt;
    bool complete = true;
    while (reader.next(line, complete)) rebuilt += complete ? line + "\n" : line;
    if (rebuilt != bytes) __builtin_trap();
  } catch (const sitsrt::Error&) {  // a line over the bound
  }
  try {
    (void)sitsrt::audit::read_recorded_requests({path});
  } catch (const sitsrt::Error&) {
  }
  ::close(fd);
  return 0;
}
