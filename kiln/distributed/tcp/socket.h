// The thin layer over POSIX TCP sockets that the tcp backend stands on: an owning Socket, listening on an
// ephemeral port, connecting with retries, accepting, and whole-buffer send/recv bounded by a deadline.
//
// Everything here waits through poll() in short ticks rather than blocking in the kernel, so a caller's
// deadline (and its `keep_going` check: a stop request, another rank's failure) is honoured within a tick.
// Sends use MSG_NOSIGNAL: a peer that died is an error here, never a SIGPIPE that kills this process.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

struct iovec;

namespace kiln::distributed::tcp {

using Clock = std::chrono::steady_clock;

// How long one poll() waits before the caller's checks run again.
inline constexpr std::chrono::milliseconds kPollTick{100};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  void set_nonblocking();
  void set_nodelay();

 private:
  int fd_ = -1;
};

// Both ends of a connected pair in this process (AF_UNIX stream sockets): the unit tests' stand-in for two
// ranks, no ports needed.
std::pair<Socket, Socket> socket_pair();

// A listening socket on host (an IPv4 address or a name that resolves to one) and an ephemeral port; *port
// receives the port the kernel chose.
Socket listen_on(const std::string& host, uint16_t* port);

// Connects to host:port, retrying refused or unreachable attempts until `deadline` (the peer may not be
// listening yet). Each attempt is bounded by the deadline too (a host that drops packets would otherwise hold a
// blocking connect for the kernel's minutes). `what` names the connection in errors ("rank 3 connecting to
// rank 1"). With retry_refused false a refusal is an error at once, and *refused (when given) says that was
// the cause.
Socket connect_to(const std::string& host, uint16_t port, Clock::time_point deadline, const std::string& what,
                  bool retry_refused = true, bool* refused = nullptr);

// Accepts one connection on `listener`, or a kiln::Error naming `what` at `deadline`.
Socket accept_one(const Socket& listener, Clock::time_point deadline, const std::string& what);

// Sends or receives exactly `bytes`, polling in ticks until `deadline`; an EOF, a reset or the deadline is a
// kiln::Error that starts with `what`. Used for the handshake; the collectives use the transport's engine.
void send_all(const Socket& s, const void* data, size_t bytes, Clock::time_point deadline, const std::string& what);
void recv_all(const Socket& s, void* data, size_t bytes, Clock::time_point deadline, const std::string& what);

// One step of non-blocking I/O. The caller formats errors itself (it knows the op and the peer), so a tight
// loop builds no strings: `bytes` moved (0 when it would block), or `eof`, or `error` (an errno).
struct IoResult {
  size_t bytes = 0;
  bool eof = false;
  int error = 0;
  bool failed() const { return eof || error != 0; }
  // "the connection was closed (EOF)", "connection reset by peer (ECONNRESET)", ...
  std::string describe() const;
};
IoResult send_some(int fd, const void* data, size_t bytes);
IoResult recv_some(int fd, void* data, size_t bytes);
// The same over `n` pieces in one system call (sendmsg / readv): a frame's header and payload leave in one TCP
// segment and arrive with one wakeup, instead of the header travelling, and waking the receiver, alone.
IoResult send_some(int fd, const iovec* pieces, int n);
IoResult recv_some(int fd, const iovec* pieces, int n);

}  // namespace kiln::distributed::tcp
