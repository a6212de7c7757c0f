// TCPStore (store.h): rank 0 serves a key-value map on a port; every process, the server's included, talks to
// it over TCP in the wire format of store_wire.h.
//
// Server: one thread, poll() over the listening socket, an eventfd that stops it, and every connection, all
// non-blocking. It owns the map alone, so it needs no lock. A get or wait on a missing key parks the request
// as a waiter; whatever creates the key answers it. Waiting has no deadline on the server: the client keeps
// the deadline, and gives up by closing the connection, which drops its waiter.
//
// Client: a pool of connections. A call takes an idle connection (or opens one), sends one request, reads its
// reply, and gives the connection back. So a thread blocked in get holds only its own connection, and another
// thread of the same process can set the key it waits for (a process group's worker and the user's thread
// share one store). A connection that timed out, or failed, is closed instead of going back to the pool.
// The server process's own calls go through such connections too: one code path for every rank.
//
// Connecting: the first connection retries with exponential backoff (10 ms doubling to 1 s) until the timeout,
// since rank 0 may start after the others. Later connections try once: the server was there, and a refusal
// now means it went away, which must fail at once, not after the timeout. A server that exits closes its
// sockets, so a client's pending or next call fails promptly with an error that names the server's address.
//
// Every socket is CLOEXEC and TCP_NODELAY (requests are small and synchronous), every send is MSG_NOSIGNAL (a
// dead peer is an error, not SIGPIPE). A TCPStore must not be used across fork(): a child would share its
// sockets and not have its server thread.
#include "kiln/distributed/store.h"

#include <sys/eventfd.h>

#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "kiln/distributed/store_wire.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed {

using namespace store_internal;
using kiln::detail::concat;

namespace {

const std::string kJoinedKey("\0joined", 7);
const std::string kReadyKey("\0ready", 6);

// ---- the server ----

class Server {
 public:
  Server(const std::string& host, uint16_t port);
  ~Server();
  uint16_t port() const { return port_; }

 private:
  struct Pending {
    Command command;
    std::vector<std::string> keys;  // what it waits for (kGet: its one key)
    size_t missing;                 // keys still to appear
    uint64_t seq;                   // which request of the connection, so a stale registration is recognised
  };
  struct Conn {
    int fd = -1;
    Bytes in, out;
    bool greeted = false, dead = false;
    std::optional<Pending> pending;
    uint64_t seq = 0;
  };

  void run();
  void accept_all();
  void read_from(uint64_t id, Conn& c);
  void handle(uint64_t id, Conn& c, WireReader& r);
  void reply(Conn& c, Bytes frame);
  void flush(Conn& c);
  void park(uint64_t id, Conn& c, Pending pending);
  void notify(const std::string& key);
  void close_conn(uint64_t id, Conn& c);

  int listen_fd_ = -1, wake_fd_ = -1;
  uint16_t port_ = 0;
  std::map<uint64_t, Conn> conns_;
  uint64_t next_id_ = 1;
  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> waiters_;  // key -> (conn, seq)
  std::thread thread_;
};

Server::Server(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string where = address(host, port);
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                                   &found);
      rc != 0) {
    throw Error(concat("TCPStore: cannot resolve the server's host ", where, ": ", ::gai_strerror(rc)));
  }
  std::string last = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = errno_text(errno);
      continue;
    }
    // SO_REUSEADDR lets a restarted job take a port whose old connections linger in TIME_WAIT; a port that
    // another socket listens on still fails with EADDRINUSE.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      break;
    }
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE) {
      ::freeaddrinfo(found);
      throw Error(concat("TCPStore: port ", port, " on ", host, " is in use (EADDRINUSE): another job's store? ",
                         "Choose another port, or 0 for a free one"));
    }
    last = errno_text(err);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) throw Error(concat("TCPStore: cannot listen on ", where, ": ", last));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(listen_fd_);
    throw Error("TCPStore: eventfd failed: " + errno_text(errno));
  }
  thread_ = std::thread([this] { run(); });
}

Server::~Server() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  for (auto& [id, c] : conns_) ::close(c.fd);
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void Server::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    fds.assign({{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    ids.clear();
    for (auto& [id, c] : conns_) {
      fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      // EINTR; anything else (ENOMEM) is retried after a pause rather than spinning or giving up the store.
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = conns_.find(ids[i]);
      if (it == conns_.end() || it->second.dead) continue;
      if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) read_from(ids[i], it->second);
      if (!it->second.dead && (fds[i + 2].revents & POLLOUT)) flush(it->second);
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!it->second.dead) {
        ++it;
        continue;
      }
      close_conn(it->first, it->second);
      it = conns_.erase(it);
    }
  }
}

void Server::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: no more; anything else (EMFILE, a reset before accept): try next time
    set_nodelay(fd);
    Conn c;
    c.fd = fd;
    conns_.emplace(next_id_++, std::move(c));
  }
}

void Server::read_from(uint64_t id, Conn& c) {
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.dead = true;  // closed: drops its waiter too
    break;
  }
  size_t used = 0;
  if (!c.greeted && c.in.size() >= 4) {
    if (std::memcmp(c.in.data(), kHello, 4) != 0) {
      c.dead = true;  // not a kiln client
      return;
    }
    c.greeted = true, used = 4;
    reply(c, Bytes(kHello, kHello + 4));
  }
  while (c.greeted && !c.dead && c.in.size() - used >= 4) {
    const uint32_t n = read_frame_length(c.in.data() + used);
    if (n > kMaxFrameBytes || c.pending) {  // garbage, or a second request while one waits: not our client
      c.dead = true;
      return;
    }
    if (c.in.size() - used - 4 < n) break;
    WireReader r(c.in.data() + used + 4, n);
    used += 4 + n;
    handle(id, c, r);
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(used));
}

Bytes ok_reply() { return WireWriter().u8(static_cast<uint8_t>(Status::kOk)).frame(); }

void Server::handle(uint64_t id, Conn& c, WireReader& r) {
  auto ok = [] { return WireWriter().u8(static_cast<uint8_t>(Status::kOk)); };
  try {
    const auto command = static_cast<Command>(r.u8());
    switch (command) {
      case Command::kSet: {
        std::string key = r.str();
        data_[key] = r.bytes();
        notify(key);
        return reply(c, ok().frame());
      }
      case Command::kGet: {
        std::string key = r.str();
        if (auto it = data_.find(key); it != data_.end()) return reply(c, ok().str(it->second).frame());
        return park(id, c, Pending{command, {key}, 1, 0});
      }
      case Command::kAdd: {
        const std::string key = r.str();
        const int64_t delta = r.i64();
        auto it = data_.find(key);
        const int64_t value = add_to_counter(it == data_.end() ? nullptr : &it->second, key, delta);
        data_[key] = format_counter(value);
        notify(key);
        return reply(c, ok().i64(value).frame());
      }
      case Command::kCompareSet: {
        const std::string key = r.str();
        const Bytes expected = r.bytes(), desired = r.bytes();
        auto it = data_.find(key);
        const bool matches = it == data_.end() ? expected.empty() : it->second == expected;
        if (!matches) return reply(c, ok().str(it == data_.end() ? Bytes{} : it->second).frame());
        data_[key] = desired;
        notify(key);
        return reply(c, ok().str(desired).frame());
      }
      case Command::kCheck:
      case Command::kWait: {
        std::vector<std::string> keys(r.count(4));
        for (auto& k : keys) k = r.str();
        std::vector<std::string> missing;
        for (const auto& k : keys) {
          if (!data_.count(k)) missing.push_back(k);
        }
        if (command == Command::kCheck) return reply(c, ok().u8(missing.empty() ? 1 : 0).frame());
        if (missing.empty()) return reply(c, ok().frame());
        return park(id, c, Pending{command, missing, missing.size(), 0});
      }
      case Command::kDelete: {
        const bool existed = data_.erase(r.str()) > 0;
        return reply(c, ok().u8(existed ? 1 : 0).frame());
      }
      case Command::kNumKeys: {
        int64_t n = 0;
        for (const auto& [k, v] : data_) n += is_internal_key(k) ? 0 : 1;
        return reply(c, ok().i64(n).frame());
      }
    }
    c.dead = true;  // an unknown command: not our client
  } catch (const WireError&) {
    c.dead = true;
  } catch (const std::exception& e) {
    reply(c, WireWriter().u8(static_cast<uint8_t>(Status::kError)).str(std::string(e.what())).frame());
  }
}

void Server::park(uint64_t id, Conn& c, Pending pending) {
  pending.seq = ++c.seq;
  for (const auto& k : pending.keys) waiters_[k].emplace_back(id, pending.seq);
  c.pending = std::move(pending);
}

// A client that gave up on a get or wait closes its connection: its registrations go with it, so waiting for
// keys that never come does not pile up on the server.
void Server::close_conn(uint64_t id, Conn& c) {
  ::close(c.fd);
  if (!c.pending) return;
  for (const auto& k : c.pending->keys) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) continue;
    std::erase_if(it->second, [&](const auto& w) { return w.first == id; });
    if (it->second.empty()) waiters_.erase(it);
  }
}

// Answers the waiters of `key`, which now exists.
void Server::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const auto waiting = std::move(it->second);
  waiters_.erase(it);
  for (const auto& [id, seq] : waiting) {
    auto cit = conns_.find(id);
    if (cit == conns_.end()) continue;
    Conn& c = cit->second;
    if (c.dead || !c.pending || c.pending->seq != seq || --c.pending->missing > 0) continue;
    const Command command = c.pending->command;
    c.pending.reset();
    reply(c, command == Command::kGet ? WireWriter().u8(0).str(data_.at(key)).frame() : ok_reply());
  }
}

void Server::reply(Conn& c, Bytes frame) {
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  flush(c);
}

void Server::flush(Conn& c) {
  size_t sent = 0;
  while (sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      break;  // the rest goes when poll says POLLOUT
    }
  }
  c.out.erase(c.out.begin(), c.out.begin() + static_cast<ptrdiff_t>(sent));
}

}  // namespace

// ---- the client ----

struct TCPStore::Impl {
  std::string host;  // where clients connect: the server's own connect to loopback when it binds a wildcard
  uint16_t port = 0;
  std::string where;  // host:port, for messages
  std::unique_ptr<Server> server;
  std::mutex mutex;
  std::vector<int> idle;  // connections no call is using

  ~Impl() {
    for (int fd : idle) ::close(fd);
    server.reset();
  }

  void connect_first(Duration timeout) {
    const auto deadline = Clock::now() + timeout;
    auto delay = std::chrono::milliseconds(10);
    int attempts = 0;
    for (;;) {
      ++attempts;
      Attempt a = try_connect(host, port, deadline);
      if (a.fd >= 0) {
        idle.push_back(a.fd);
        return;
      }
      KILN_CHECK(a.retry, "TCPStore: ", where, ": ", a.error);
      const auto now = Clock::now();
      if (now >= deadline) {
        throw Error(concat("TCPStore: could not connect to the server at ", where, " within ", timeout.count(),
                           " ms (", attempts, " attempts; last: ", a.error, "): is rank 0 up, at that address?"));
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(delay, deadline - now));
      delay = std::min(delay * 2, std::chrono::milliseconds(1000));
    }
  }

  int take(const std::string& op, Duration timeout) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!idle.empty()) {
        const int fd = idle.back();
        idle.pop_back();
        return fd;
      }
    }
    Attempt a = try_connect(host, port, Clock::now() + timeout);
    KILN_CHECK(a.fd >= 0, "TCPStore: cannot reach the server at ", where, " for ", op, ": ", a.error,
               " (did the server process exit?)");
    return a.fd;
  }

  // Sends one request and returns the reply's result (the body after its status byte); nullopt when the
  // deadline came first. A server-side error becomes a kiln::Error.
  std::optional<Bytes> exchange(const Bytes& frame, Clock::time_point deadline, Duration timeout,
                                const std::string& op) {
    KILN_CHECK(frame.size() - 4 <= kMaxFrameBytes, "TCPStore: ", op, " sends ", frame.size() - 4,
               " bytes, over the 1 GiB a request may have");
    const int fd = take(op, timeout);
    int err = 0;
    Bytes body;
    Io io = send_all(fd, frame.data(), frame.size(), deadline, err);
    uint8_t length[4];
    if (io == Io::kOk) io = recv_all(fd, length, 4, deadline, err);
    if (io == Io::kOk) {
      body.resize(read_frame_length(length));
      if (body.empty() || body.size() > kMaxFrameBytes) {
        ::close(fd);
        throw Error(concat("TCPStore: a malformed reply from ", where, " to ", op));
      }
      io = recv_all(fd, body.data(), body.size(), deadline, err);
    }
    if (io != Io::kOk) {
      ::close(fd);  // a late reply would confuse the next call on this connection
      if (io == Io::kTimeout) return std::nullopt;
      throw Error(concat("TCPStore: lost the connection to the server at ", where, " during ", op, ": ",
                         err == 0 ? "closed by the server" : errno_text(err), " (did the server process exit?)"));
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      idle.push_back(fd);
    }
    if (body[0] != static_cast<uint8_t>(Status::kOk)) {
      std::string message = "(an unreadable error message)";
      try {
        message = WireReader(body.data() + 1, body.size() - 1).str();
      } catch (const WireError&) {
      }
      throw Error(concat("TCPStore: ", message, " (server at ", where, ")"));
    }
    body.erase(body.begin());
    return body;
  }

  // A call that is not meant to wait: running past the timeout means the server does not answer.
  Bytes call(const Bytes& frame, Duration timeout, const std::string& op) {
    auto result = exchange(frame, Clock::now() + timeout, timeout, op);
    KILN_CHECK(result.has_value(), "TCPStore: no reply from the server at ", where, " to ", op, " within ",
               timeout.count(), " ms");
    return std::move(*result);
  }

  static WireWriter request(Command c) { return WireWriter().u8(static_cast<uint8_t>(c)); }

  int64_t add(const std::string& key, int64_t delta, Duration timeout) {
    const Bytes r = call(request(Command::kAdd).str(key).i64(delta).frame(), timeout,
                         concat("add(", quoted(key), ", ", delta, ")"));
    return WireReader(r.data(), r.size()).i64();
  }

  void set(const std::string& key, const Bytes& value, Duration timeout) {
    call(request(Command::kSet).str(key).str(value).frame(), timeout, concat("set(", quoted(key), ")"));
  }

  bool check(const std::vector<std::string>& keys, Duration timeout) {
    WireWriter w = request(Command::kCheck);
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    const Bytes r = call(w.frame(), timeout, "check(" + quoted_list(keys) + ")");
    return WireReader(r.data(), r.size()).u8() != 0;
  }

  // false when the keys did not all exist by `limit`.
  bool wait(const std::vector<std::string>& keys, Duration limit, Duration timeout) {
    WireWriter w = request(Command::kWait);
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    return exchange(w.frame(), Clock::now() + limit, timeout, "wait(" + quoted_list(keys) + ")")
        .has_value();
  }
};

TCPStore::TCPStore(TCPStoreOptions options) : impl_(std::make_unique<Impl>()) {
  const std::string where = address(options.host, options.port);
  KILN_CHECK(options.world_size == -1 || options.world_size >= 1, "TCPStore(", where, "): world_size is ",
             options.world_size, ", expected -1 (no rendezvous) or at least 1");
  KILN_CHECK(options.timeout.count() >= 0, "TCPStore(", where, "): negative timeout ", options.timeout.count(),
             " ms");
  KILN_CHECK(options.is_server || options.port != 0, "TCPStore(", where,
             "): a client needs the server's port; port 0 (pick a free one) is for the server");
  set_timeout(options.timeout);
  impl_->host = options.host;
  impl_->port = options.port;
  if (options.is_server) {
    impl_->server = std::make_unique<Server>(options.host, options.port);
    impl_->port = impl_->server->port();
    if (options.host.empty() || options.host == "0.0.0.0") impl_->host = "127.0.0.1";
    if (options.host == "::") impl_->host = "::1";
  }
  impl_->where = address(options.host, impl_->port);
  const auto start = Clock::now();
  impl_->connect_first(options.timeout);
  if (options.world_size < 0) return;
  // Each process counts itself in; the one that completes the count marks the world ready. Only the server
  // waits for that (store.h); a client is done once it is counted.
  const int64_t joined = impl_->add(kJoinedKey, 1, options.timeout);
  if (joined == options.world_size) impl_->set(kReadyKey, Bytes{}, options.timeout);
  if (!options.is_server) return;
  const auto spent = std::chrono::duration_cast<Duration>(Clock::now() - start);
  const auto left = std::max(Duration(0), options.timeout - spent);
  if (!impl_->wait({kReadyKey}, left, options.timeout)) {
    const int64_t now_joined = impl_->add(kJoinedKey, 0, options.timeout);
    throw Error(concat("TCPStore: rendezvous on ", impl_->where, " timed out after ", options.timeout.count(),
                       " ms: ", now_joined, " of ", options.world_size, " processes joined"));
  }
}

TCPStore::~TCPStore() = default;

uint16_t TCPStore::port() const { return impl_->port; }

void TCPStore::set(const std::string& key, const Bytes& value) {
  check_user_key("TCPStore", "set", key);
  impl_->set(key, value, Store::timeout());
}

Bytes TCPStore::get(const std::string& key) {
  check_user_key("TCPStore", "get", key);
  const Duration timeout = Store::timeout();
  const Bytes request = Impl::request(Command::kGet).str(key).frame();
  const std::string op = concat("get(", quoted(key), ")");
  auto value = impl_->exchange(request, Clock::now() + timeout, timeout, op);
  // Past the deadline, a key that exists now was only answered late (a busy machine, a tiny timeout): the
  // deadline is for the key to appear, not for the server's reply.
  if (!value && impl_->check({key}, timeout)) value = impl_->exchange(request, Clock::now() + timeout, timeout, op);
  KILN_CHECK(value.has_value(), "TCPStore: get(", quoted(key), ") on ", impl_->where, " timed out after ",
             timeout.count(), " ms: no process set the key");
  return WireReader(value->data(), value->size()).bytes();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  check_user_key("TCPStore", "add", key);
  return impl_->add(key, delta, Store::timeout());
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_user_key("TCPStore", "compare_set", key);
  const Bytes r = impl_->call(Impl::request(Command::kCompareSet).str(key).str(expected).str(desired).frame(),
                              Store::timeout(), concat("compare_set(", quoted(key), ")"));
  return WireReader(r.data(), r.size()).bytes();
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) check_user_key("TCPStore", "check", k);
  return impl_->check(keys, Store::timeout());
}

void TCPStore::wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) {
  for (const auto& k : keys) check_user_key("TCPStore", "wait", k);
  const Duration limit = timeout.value_or(Store::timeout());
  if (impl_->wait(keys, limit, Store::timeout())) return;
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!impl_->check({k}, Store::timeout())) missing.push_back(k);
  }
  if (missing.empty()) return;  // all there, only answered late (see get)
  throw Error(concat("TCPStore: wait on ", impl_->where, " timed out after ", limit.count(),
                     " ms; missing keys: ", quoted_list(missing)));
}

bool TCPStore::delete_key(const std::string& key) {
  check_user_key("TCPStore", "delete_key", key);
  const Bytes r = impl_->call(Impl::request(Command::kDelete).str(key).frame(), Store::timeout(),
                              concat("delete_key(", quoted(key), ")"));
  return WireReader(r.data(), r.size()).u8() != 0;
}

int64_t TCPStore::num_keys() {
  const Bytes r = impl_->call(Impl::request(Command::kNumKeys).frame(), Store::timeout(), "num_keys()");
  return WireReader(r.data(), r.size()).i64();
}

}  // namespace kiln::distributed
