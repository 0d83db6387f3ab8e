#include "connection_watch.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <system_error>

namespace sitsrt::server {
namespace {

// The numeric address and port of a socket address, as httplib reports them.
bool address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    if (!::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text)) return false;
    port = ntohs(in.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    if (!::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text)) return false;
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  ip = text;
  return true;
}

bool has_addresses(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
                   int remote_port) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  std::string ip;
  int port = -1;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !address_of(addr, ip, port) ||
      port != local_port || ip != local_addr) {
    return false;
  }
  len = sizeof addr;
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && address_of(addr, ip, port) &&
         port == remote_port && ip == remote_addr;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                 int remote_port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    int fd = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    if (has_addresses(fd, local_addr, local_port, remote_addr, remote_port)) {
      fd_ = fd;
      return;
    }
  }
}

bool ConnectionWatch::peer_gone() const {
  if (fd_ < 0) return false;
  char byte = 0;
  // A peek consumes nothing: a pipelined next request stays for the server to read.
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;                                           // orderly close
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset, or the like
}

}  // namespace sitsrt::server
