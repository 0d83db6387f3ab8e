// Notices a client that goes away while its non-streamed answer is being computed, so that its
// request is cancelled and its KV blocks freed at once, as a streamed one is. cpp-httplib 0.11
// (Debian 12) gives a handler neither its socket nor is_connection_closed(), only the
// connection's addresses; the socket is found by them among this process's descriptors.
#pragma once

#include <string>

namespace sitsrt::server {

class ConnectionWatch {
 public:
  // Looks for the connected TCP socket local_addr:local_port <-> remote_addr:remote_port.
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  [[nodiscard]] bool found() const noexcept { return fd_ >= 0; }
  // True once the peer has closed or reset the connection (a read would see end of stream);
  // false while it is open, or when the socket was not found.
  [[nodiscard]] bool peer_gone() const;

 private:
  int fd_ = -1;  // not owned: the HTTP server closes it after the handler returns
};

}  // namespace sitsrt::server
