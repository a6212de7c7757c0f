// POSIX sockets for the tcp backend: see socket.h.
#include "kiln/distributed/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

std::string errno_text(int err) {
  const char* name = err == ECONNRESET ? "ECONNRESET"
                     : err == EPIPE    ? "EPIPE"
                     : err == ECONNREFUSED ? "ECONNREFUSED"
                     : err == ETIMEDOUT ? "ETIMEDOUT"
                                        : nullptr;
  std::string text = std::strerror(err);
  return name != nullptr ? text + " (" + name + ")" : text + " (errno " + std::to_string(err) + ")";
}

sockaddr_in resolve_ipv4(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  KILN_CHECK(rc == 0 && found != nullptr, "tcp: cannot resolve host '", host, "' to an IPv4 address: ",
             gai_strerror(rc));
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, kPollTick.count())));
}

// Waits (one tick at most) for `events` on fd; true when ready. A poll error is a kiln::Error.
bool poll_one(int fd, short events, Clock::time_point deadline, const std::string& what) {
  pollfd p{fd, events, 0};
  const int rc = ::poll(&p, 1, ms_until(deadline));
  if (rc < 0 && errno == EINTR) return false;
  KILN_CHECK(rc >= 0, what, ": poll failed: ", errno_text(errno));
  return rc > 0;
}

// One connection attempt that gives up at `deadline` (a blocking connect() to a host that drops packets waits
// for the kernel's own timeout, minutes): 0 with the connected socket, blocking again, in *out; or the errno
// that ended it, ETIMEDOUT at the deadline.
int connect_once(const sockaddr_in& addr, Clock::time_point deadline, Socket* out, const std::string& what) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  KILN_CHECK(s.valid(), what, ": socket() failed: ", errno_text(errno));
  if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return errno;
    while (!poll_one(s.fd(), POLLOUT, deadline, what))
      if (Clock::now() >= deadline) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof err;
    KILN_CHECK(::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) == 0, what, ": getsockopt failed: ",
               errno_text(errno));
    if (err != 0) return err;
  }
  const int flags = ::fcntl(s.fd(), F_GETFL, 0);
  KILN_CHECK(flags >= 0 && ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK) == 0, what, ": fcntl failed: ",
             errno_text(errno));
  s.set_nodelay();
  *out = std::move(s);
  return 0;
}

}  // namespace

std::string IoResult::describe() const {
  if (eof) return "the connection was closed (EOF)";
  return errno_text(error);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::set_nonblocking() {
  const int flags = fcntl(fd_, F_GETFL, 0);
  KILN_CHECK(flags >= 0 && fcntl(fd_, F_SETFL, flags | O_NONBLOCK) == 0, "tcp: cannot make socket ", fd_,
             " non-blocking: ", errno_text(errno));
}

void Socket::set_nodelay() {
  // Small frames (headers, barrier messages) must leave at once, not wait for Nagle's coalescing.
  int one = 1;
  (void)setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on AF_UNIX
}

std::pair<Socket, Socket> socket_pair() {
  int fds[2];
  KILN_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "tcp: socketpair failed: ", errno_text(errno));
  return {Socket(fds[0]), Socket(fds[1])};
}

Socket listen_on(const std::string& host, uint16_t* port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  KILN_CHECK(s.valid(), "tcp: socket() failed: ", errno_text(errno));
  sockaddr_in addr = resolve_ipv4(host, 0);
  KILN_CHECK(::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "tcp: cannot bind to ", host,
             ": ", errno_text(errno));
  // The backlog holds every peer that connects before this rank gets to accept() (up to the world size).
  KILN_CHECK(::listen(s.fd(), 128) == 0, "tcp: listen on ", host, " failed: ", errno_text(errno));
  socklen_t len = sizeof addr;
  KILN_CHECK(getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0, "tcp: getsockname failed: ",
             errno_text(errno));
  *port = ntohs(addr.sin_port);
  return s;
}

Socket connect_to(const std::string& host, uint16_t port, Clock::time_point deadline, const std::string& what,
                  bool retry_refused, bool* refused) {
  const sockaddr_in addr = resolve_ipv4(host, port);
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    Socket s;
    const int err = connect_once(addr, deadline, &s, what);
    if (err == 0) return s;
    if (err == ECONNREFUSED && !retry_refused) {
      if (refused != nullptr) *refused = true;
      KILN_CHECK(false, what, ": cannot connect to ", host, ":", port, ": ", errno_text(err));
    }
    const bool retry = err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == EINTR ||
                       err == ETIMEDOUT || err == EAGAIN;
    KILN_CHECK(retry && Clock::now() < deadline, what, ": cannot connect to ", host, ":", port, ": ",
               errno_text(err), retry ? " (retried until the deadline)" : "");
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

Socket accept_one(const Socket& listener, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    KILN_CHECK(Clock::now() < deadline, what, ": no connection arrived before the deadline");
    if (!poll_one(listener.fd(), POLLIN, deadline, what)) continue;
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)) continue;
    KILN_CHECK(fd >= 0, what, ": accept failed: ", errno_text(errno));
    Socket s(fd);
    s.set_nodelay();
    return s;
  }
}

IoResult send_some(int fd, const void* data, size_t bytes) {
  IoResult r;
  const ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) r.bytes = static_cast<size_t>(n);
  else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) r.error = errno;
  return r;
}

IoResult recv_some(int fd, void* data, size_t bytes) {
  IoResult r;
  if (bytes == 0) return r;
  const ssize_t n = ::recv(fd, data, bytes, MSG_DONTWAIT);
  if (n > 0) r.bytes = static_cast<size_t>(n);
  else if (n == 0) r.eof = true;
  else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) r.error = errno;
  return r;
}

IoResult send_some(int fd, const iovec* pieces, int n) {
  IoResult r;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(pieces);
  msg.msg_iovlen = static_cast<size_t>(n);
  const ssize_t k = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k >= 0) r.bytes = static_cast<size_t>(k);
  else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) r.error = errno;
  return r;
}

IoResult recv_some(int fd, const iovec* pieces, int n) {
  IoResult r;
  if (n == 0) return r;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(pieces);
  msg.msg_iovlen = static_cast<size_t>(n);
  const ssize_t k = ::recvmsg(fd, &msg, MSG_DONTWAIT);
  if (k > 0) r.bytes = static_cast<size_t>(k);
  else if (k == 0) r.eof = true;
  else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) r.error = errno;
  return r;
}

void send_all(const Socket& s, const void* data, size_t bytes, Clock::time_point deadline, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    KILN_CHECK(Clock::now() < deadline, what, ": timed out sending (", bytes, " bytes left)");
    if (!poll_one(s.fd(), POLLOUT, deadline, what)) continue;
    const IoResult r = send_some(s.fd(), p, bytes);
    KILN_CHECK(!r.failed(), what, ": ", r.describe());
    p += r.bytes, bytes -= r.bytes;
  }
}

void recv_all(const Socket& s, void* data, size_t bytes, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    KILN_CHECK(Clock::now() < deadline, what, ": timed out receiving (", bytes, " bytes left)");
    if (!poll_one(s.fd(), POLLIN, deadline, what)) continue;
    const IoResult r = recv_some(s.fd(), p, bytes);
    KILN_CHECK(!r.failed(), what, ": ", r.describe());
    p += r.bytes, bytes -= r.bytes;
  }
}

}  // namespace kiln::distributed::tcp
