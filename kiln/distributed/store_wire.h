// Private to kiln's store implementations (file_store.cpp, tcp_store.cpp): what both stores agree on, the
// TCPStore's wire format, and the socket I/O that carries it (kept here so that tcp_store.cpp holds the
// server and the client's logic only). Not part of kiln's API; nothing outside kiln/distributed/ includes it.
//
// Shared by both stores:
//   - Counters (add) are stored as decimal text, so get_string("n") reads "5" as PyTorch's stores do, and a key
//     set by hand to "5" can be added to.
//   - Keys that begin with a NUL byte are the stores' own bookkeeping (rendezvous counters, the FileStore's user
//     count). User calls with such a key are an error and num_keys does not count them.
//
// The TCPStore's wire format. A connection opens with the client sending the 4 bytes "KLS1" and the server
// echoing them, so a client that reached some other service says so instead of misreading its bytes. After
// that, every message either way is a frame: u32 body_bytes, then the body. Integers are little-endian; a str
// is a u32 length then its bytes.
//   request body:  u8 command, then its arguments
//   reply body:    u8 status (0 ok, 1 error), then the result, or an error message the client raises
//   command       arguments                           ok result
//   kSet          str key, str value                  -
//   kGet          str key                             str value  (sent once the key exists: the server keeps waiters)
//   kAdd          str key, i64 delta                  i64 new value
//   kCompareSet   str key, str expected, str desired  str value afterwards
//   kCheck        u32 n, n x str key                  u8 all exist
//   kWait         u32 n, n x str key                  -          (sent once all exist)
//   kDelete       str key                             u8 existed
//   kNumKeys      -                                   i64
// One request at a time per connection: the client sends the next only after the reply, so the server keeps
// at most one waiter per connection. A client that gives up on a blocking call closes that connection.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::store_internal {

// ---- shared by both stores ----

inline std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// A key as an error message shows it: quoted, with bytes outside printable ASCII as \xNN.
inline std::string quoted(const std::string& key) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out + "\"";
}

inline std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + quoted(k);
  return out;
}

inline bool is_internal_key(const std::string& key) { return !key.empty() && key[0] == '\0'; }

inline void check_user_key(const char* store, const char* op, const std::string& key) {
  KILN_CHECK(!is_internal_key(key), store, ": ", op, "(", quoted(key),
             "): keys that begin with a NUL byte are reserved for the store's own bookkeeping");
}

// The counter at a key, or nullopt when the value is not a whole decimal int64.
inline std::optional<int64_t> parse_counter(const Bytes& value) {
  int64_t v = 0;
  const char* first = reinterpret_cast<const char*>(value.data());
  const char* last = first + value.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (value.empty() || ec != std::errc() || ptr != last) return std::nullopt;
  return v;
}

inline Bytes format_counter(int64_t v) {
  const std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

// add's arithmetic: the counter after adding `delta` to `current` (nullptr: a missing key, which counts as 0).
// A value that is not a counter, or an int64 overflow, is a kiln::Error starting "add(key, delta): ".
inline int64_t add_to_counter(const Bytes* current, const std::string& key, int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const auto parsed = parse_counter(*current);
    KILN_CHECK(parsed.has_value(), "add(", quoted(key), ", ", delta, "): the value there is not an integer: ",
               quoted(std::string(current->begin(), current->end())));
    value = *parsed;
  }
  int64_t sum = 0;
  KILN_CHECK(!__builtin_add_overflow(value, delta, &sum), "add(", quoted(key), ", ", delta, "): the counter (",
             value, ") would overflow int64");
  return sum;
}

// ---- the TCPStore's wire format ----

inline constexpr char kHello[4] = {'K', 'L', 'S', '1'};
// A frame bigger than this is taken for garbage (a foreign client), not allocated.
inline constexpr uint32_t kMaxFrameBytes = 1u << 30;

enum class Command : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kCheck, kWait, kDelete, kNumKeys };
enum class Status : uint8_t { kOk = 0, kError = 1 };

// A frame that does not parse: the connection's byte stream can no longer be trusted.
struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class WireWriter {
 public:
  WireWriter() { bytes_.resize(4); }  // room for the frame's length, filled in by frame()
  WireWriter& u8(uint8_t v) {
    bytes_.push_back(v);
    return *this;
  }
  WireWriter& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  WireWriter& i64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(u >> (8 * i)));
    return *this;
  }
  WireWriter& str(const std::string& s) { return raw(s.data(), s.size()); }
  WireWriter& str(const Bytes& b) { return raw(b.data(), b.size()); }
  // The finished frame, length prefix and body; the writer is spent.
  Bytes frame() {
    const auto n = static_cast<uint32_t>(bytes_.size() - 4);
    for (int i = 0; i < 4; ++i) bytes_[i] = static_cast<uint8_t>(n >> (8 * i));
    return std::move(bytes_);
  }

 private:
  WireWriter& raw(const void* p, size_t n) {
    if (n > kMaxFrameBytes) throw Error("TCPStore: a value of " + std::to_string(n) + " bytes is over the 1 GiB limit");
    u32(static_cast<uint32_t>(n));
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  Bytes bytes_;
};

// Reads a frame's body (without its length prefix).
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8() {
    need(1);
    return *p_++;
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(*p_++) << (8 * i);
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(*p_++) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string str() {
    const uint32_t n = u32();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  Bytes bytes() {
    const uint32_t n = u32();
    need(n);
    Bytes b(p_, p_ + n);
    p_ += n;
    return b;
  }
  // A count of items that take at least `min_bytes` each: one the frame cannot hold is garbage, refused before
  // anything is allocated for it.
  uint32_t count(size_t min_bytes) {
    const uint32_t n = u32();
    if (n > static_cast<size_t>(end_ - p_) / min_bytes) throw WireError("a count larger than its frame");
    return n;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) throw WireError("a frame ends in the middle of a field");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

inline uint32_t read_frame_length(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// ---- sockets: the client's blocking I/O with a deadline, on non-blocking sockets, and connecting ----

using Clock = std::chrono::steady_clock;

inline std::string address(const std::string& host, uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Milliseconds until the deadline for poll(), rounded up so a wait never ends just before it.
inline int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

inline void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

enum class Io { kOk, kTimeout, kClosed };

inline bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_ms(deadline));
    if (n > 0) return true;  // ready, or hung up: the next send/recv says which
    if (n == 0) return false;
    if (errno != EINTR) return true;
  }
}

inline Io send_all(int fd, const uint8_t* p, size_t n, Clock::time_point deadline, int& err) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w, n -= static_cast<size_t>(w);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLOUT, deadline)) return Io::kTimeout;
    } else if (errno != EINTR) {
      err = errno;
      return Io::kClosed;
    }
  }
  return Io::kOk;
}

inline Io recv_all(int fd, uint8_t* p, size_t n, Clock::time_point deadline, int& err) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r, n -= static_cast<size_t>(r);
    } else if (r == 0) {
      err = 0;
      return Io::kClosed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) return Io::kTimeout;
    } else if (errno != EINTR) {
      err = errno;
      return Io::kClosed;
    }
  }
  return Io::kOk;
}

// One try at a connection that has also exchanged the greeting; fd -1 with the reason otherwise.
struct Attempt {
  int fd = -1;
  std::string error;
  bool retry = true;  // false: retrying cannot help (something that is not a kiln store answered)
};

inline Attempt try_connect(const std::string& host, uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return {-1, std::string("cannot resolve the host: ") + ::gai_strerror(rc)};
  }
  Attempt out{-1, "no address"};
  for (addrinfo* ai = found; ai != nullptr && out.fd < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      out.error = errno_text(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        socklen_t len = sizeof err;
        err = wait_ready(fd, POLLOUT, deadline) ? 0 : ETIMEDOUT;
        if (err == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      set_nodelay(fd);
      uint8_t hello[4];
      Io io = send_all(fd, reinterpret_cast<const uint8_t*>(kHello), 4, deadline, err);
      if (io == Io::kOk) io = recv_all(fd, hello, 4, deadline, err);
      if (io == Io::kOk && std::memcmp(hello, kHello, 4) == 0) {
        out.fd = fd;
        break;
      }
      if (io == Io::kOk) {
        out = {-1, "something answered that is not a kiln TCPStore (another service on this port?)", false};
      } else {
        out.error = io == Io::kTimeout ? "connected, but no greeting came back"
                                       : "the connection closed during the greeting";
      }
    } else {
      out.error = errno_text(err);
    }
    ::close(fd);
    if (!out.retry) break;
  }
  ::freeaddrinfo(found);
  return out;
}

}  // namespace kiln::distributed::store_internal
