// The tcp backend's mesh setup and message engine: see transport.h.
#include "kiln/distributed/tcp/transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

// How long Mesh::run keeps yielding the CPU and retrying after its last progress before it sleeps in poll().
constexpr auto kYieldBeforePoll = std::chrono::microseconds(30);

int64_t ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

uint64_t draw_job_id() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return (static_cast<uint64_t>(rd()) << 32 ^ rd()) ^ t ^ (static_cast<uint64_t>(getpid()) << 17);
}

// Throws when another rank has reported that it failed to join this incarnation of the group.
void check_setup_failure(Store& store, const std::string& group, const std::string& keys_at, int rank) {
  const std::string key = keys_at + "/error";
  if (!store.check({key})) return;
  const Bytes report = store.get(key);
  KILN_CHECK(false, "tcp setup of group '", group, "': rank ", rank, " gave up: ",
             std::string(report.begin(), report.end()));
}

// Waits until `listener` has a connection to accept, checking about every tick that no rank has reported a
// setup failure; the deadline is accept_one's to enforce.
void wait_acceptable(const Socket& listener, Store& store, const std::string& group, const std::string& keys_at,
                     int rank, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    pollfd p{listener.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(kPollTick.count())) > 0) return;
    check_setup_failure(store, group, keys_at, rank);
  }
}

// Waits until every rank has published its address (and rank 0 the job id), polling the store: the error
// names the ranks that never did, which the store's own wait (naming keys) would leave the reader to decode.
void wait_for_ranks(Store& store, const std::string& group, const std::string& keys_at, int rank, int size,
                    Clock::time_point deadline) {
  const auto start = Clock::now();
  for (;;) {
    check_setup_failure(store, group, keys_at, rank);
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      std::vector<std::string> keys{keys_at + "/addr/" + std::to_string(r)};
      if (r == 0) keys.push_back(keys_at + "/job_id");
      if (!store.check(keys)) missing.push_back(r);
    }
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      KILN_CHECK(false, "tcp setup of group '", group, "': rank ", rank, " waited ", ms_between(start, Clock::now()),
                 " ms but rank", missing.size() > 1 ? "s " : " ", list, " never joined (no address in the store)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

// The rest of a frame from byte `done` on, as at most two pieces (the header's rest, the payload's rest);
// returns how many.
int frame_pieces(FrameHeader* header, void* payload, size_t payload_bytes, size_t done, iovec* pieces) {
  int n = 0;
  if (done < sizeof(FrameHeader))
    pieces[n++] = iovec{reinterpret_cast<uint8_t*>(header) + done, sizeof(FrameHeader) - done};
  const size_t payload_done = done > sizeof(FrameHeader) ? done - sizeof(FrameHeader) : 0;
  if (payload_bytes > payload_done)
    pieces[n++] = iovec{static_cast<uint8_t*>(payload) + payload_done, payload_bytes - payload_done};
  return n;
}

std::pair<std::string, uint16_t> parse_address(const Bytes& value, const std::string& what) {
  const std::string s(value.begin(), value.end());
  const size_t colon = s.rfind(':');
  KILN_CHECK(colon != std::string::npos && colon + 1 < s.size(), what, ": malformed address '", s,
             "' in the store (expected host:port)");
  return {s.substr(0, colon), static_cast<uint16_t>(std::stoi(s.substr(colon + 1)))};
}

Mesh::Mesh(std::vector<Socket> peers, int rank, int size) : peers_(std::move(peers)), rank_(rank), size_(size) {
  KILN_CHECK(static_cast<int>(peers_.size()) == size, "tcp Mesh: ", peers_.size(), " sockets for a world of ",
             size);
  for (int r = 0; r < size; ++r)
    if (r != rank) peers_[r].set_nonblocking();
}

std::unique_ptr<Mesh> Mesh::connect(Store& store, const std::string& group, int rank, int size,
                                    const std::string& host, Clock::time_point deadline) {
  // The keys of this incarnation of the group: a job that makes a group of the same name again (after a
  // failure, say) must not read the addresses and job id of the last one. Every rank counts its own
  // incarnations, so ranks that make their groups in the same order agree without talking.
  const std::string keys_at =
      group + "/" + std::to_string(store.add(group + "/incarnation/" + std::to_string(rank), 1));
  try {
    return connect_at(store, group, keys_at, rank, size, host, deadline);
  } catch (const std::exception& e) {
    // The others would wait for this rank until their deadline: tell them now (the first report wins).
    const std::string report = "rank " + std::to_string(rank) + " failed to join: " + e.what();
    try {
      store.compare_set(keys_at + "/error", Bytes{}, Bytes(report.begin(), report.end()));
    } catch (...) {
      // The store itself may be what failed.
    }
    throw;
  }
}

std::unique_ptr<Mesh> Mesh::connect_at(Store& store, const std::string& group, const std::string& keys_at, int rank,
                                       int size, const std::string& host, Clock::time_point deadline) {
  uint16_t port = 0;
  Socket listener = listen_on(host, &port);
  if (rank == 0) {
    const uint64_t id = draw_job_id();
    Bytes b(sizeof id);
    std::memcpy(b.data(), &id, sizeof id);
    store.set(keys_at + "/job_id", b);
  }
  store.set(keys_at + "/addr/" + std::to_string(rank), host + ":" + std::to_string(port));
  wait_for_ranks(store, group, keys_at, rank, size, deadline);
  const Bytes id_bytes = store.get(keys_at + "/job_id");
  KILN_CHECK(id_bytes.size() == sizeof(uint64_t), "tcp setup of group '", group, "': malformed job id in the store");
  uint64_t job_id = 0;
  std::memcpy(&job_id, id_bytes.data(), sizeof job_id);

  std::vector<Socket> peers(size);
  for (int j = 0; j < rank; ++j) {
    const std::string what = "tcp setup of group '" + group + "': rank " + std::to_string(rank) + " connecting to rank " +
                             std::to_string(j);
    auto [peer_host, peer_port] = parse_address(store.get(keys_at + "/addr/" + std::to_string(j)), what);
    Socket s = connect_to(peer_host, peer_port, deadline, what);
    const Handshake mine = make_handshake(job_id, rank, j, size, group);
    send_all(s, &mine, sizeof mine, deadline, what);
    Handshake reply;
    recv_all(s, &reply, sizeof reply, deadline, what + " (waiting for its handshake)");
    check_handshake(reply, mine, rank, j);
    peers[j] = std::move(s);
  }
  for (int accepted = 0; accepted < size - 1 - rank; ++accepted) {
    const std::string what = "tcp setup of group '" + group + "': rank " + std::to_string(rank) +
                             " accepting the higher ranks";
    wait_acceptable(listener, store, group, keys_at, rank, deadline);
    Socket s = accept_one(listener, deadline, what);
    Handshake got;
    recv_all(s, &got, sizeof got, deadline, what);
    const Handshake mine = make_handshake(job_id, rank, got.from_rank, size, group);
    check_handshake(got, mine, rank, -1);
    KILN_CHECK(!peers[got.from_rank].valid(), what, ": rank ", got.from_rank, " connected twice");
    send_all(s, &mine, sizeof mine, deadline, what);
    peers[got.from_rank] = std::move(s);
  }
  auto mesh = std::make_unique<Mesh>(std::move(peers), rank, size);
  mesh->job_id_ = job_id;
  mesh->keys_at_ = keys_at;
  return mesh;
}

void Mesh::close_all() {
  for (auto& s : peers_) s.close();
}

void Mesh::run(int to, const std::vector<SendItem>& sends, int from, std::vector<RecvItem>& recvs,
               const OpContext& ctx) {
  KILN_ASSERT(sends.empty() || (to >= 0 && to < size_ && to != rank_), "bad send peer ", to);
  KILN_ASSERT(recvs.empty() || (from >= 0 && from < size_ && from != rank_), "bad recv peer ", from);
  const int send_fd = sends.empty() ? -1 : peers_[to].fd();
  const int recv_fd = recvs.empty() ? -1 : peers_[from].fd();
  KILN_CHECK((sends.empty() || send_fd >= 0) && (recvs.empty() || recv_fd >= 0), ctx.name, ": rank ", rank_,
             " has no open connection (the group failed earlier and closed its sockets)");

  size_t si = 0, s_off = 0;  // the send in progress; bytes of header + payload sent
  size_t ri = 0, r_off = 0;  // the receive in progress; bytes of header + payload received
  FrameHeader got;
  const auto fail_io = [&](const IoResult& r, int peer, bool sending) {
    KILN_CHECK(false, ctx.name, ": rank ", rank_, " lost its connection to rank ", peer, " while ",
               sending ? "sending message " : "receiving message ", sending ? si : ri, ": ", r.describe(),
               r.eof ? " (rank " + std::to_string(peer) + " died or closed its sockets)" : std::string());
  };
  auto last_check = Clock::now();
  auto last_progress = last_check;
  while (si < sends.size() || ri < recvs.size()) {
    bool progress = false;
    // Send as much as the socket takes, header and payload in one call (see send_some).
    while (si < sends.size() && (sends[si].after_recv < 0 || static_cast<size_t>(sends[si].after_recv) < ri)) {
      const SendItem& item = sends[si];
      const size_t total = sizeof(FrameHeader) + item.header.payload_bytes;
      iovec pieces[2];
      const int n = frame_pieces(const_cast<FrameHeader*>(&item.header), const_cast<void*>(item.data),
                                 item.header.payload_bytes, s_off, pieces);
      const IoResult r = n > 0 ? send_some(send_fd, pieces, n) : IoResult{};
      if (r.failed()) fail_io(r, to, true);
      s_off += r.bytes;
      progress |= r.bytes > 0;
      if (s_off == total) {
        ++si, s_off = 0;
        progress = true;
      } else if (r.bytes == 0) {
        break;  // the socket is full
      }
    }
    // Receive as much as has arrived, header and payload in one call; the header is checked as soon as it is
    // complete, before the payload counts as received.
    while (ri < recvs.size()) {
      RecvItem& item = recvs[ri];
      const size_t total = sizeof(FrameHeader) + item.expect.payload_bytes;
      const bool in_header = r_off < sizeof(FrameHeader);
      iovec pieces[2];
      const int n = frame_pieces(&got, item.dest, item.expect.payload_bytes, r_off, pieces);
      const IoResult r = n > 0 ? recv_some(recv_fd, pieces, n) : IoResult{};
      if (r.failed()) fail_io(r, from, false);
      r_off += r.bytes;
      progress |= r.bytes > 0;
      if (in_header && r_off >= sizeof(FrameHeader)) check_frame(got, item.expect, from, rank_);
      if (r_off == total) {
        if (item.on_done) item.on_done();
        ++ri, r_off = 0;
        progress = true;
      } else if (r.bytes == 0) {
        break;  // nothing more has arrived
      }
    }
    const auto now = Clock::now();
    if (now - last_check >= kPollTick) {
      last_check = now;
      if (ctx.check) ctx.check();
    }
    if (si == sends.size() && ri == recvs.size()) break;
    if (progress) last_progress = now;
    if (now >= ctx.deadline) {
      std::string waiting;
      if (ri < recvs.size()) waiting += "to receive message " + std::to_string(ri) + " of " +
                                        std::to_string(recvs.size()) + " from rank " + std::to_string(from);
      if (si < sends.size()) waiting += std::string(waiting.empty() ? "" : " and ") + "to send message " +
                                        std::to_string(si) + " of " + std::to_string(sends.size()) + " to rank " +
                                        std::to_string(to);
      KILN_CHECK(false, ctx.name, ": rank ", rank_, " timed out after ", ctx.timeout.count(), " ms waiting ",
                 waiting, " (is that rank stopped or stuck in another op?)");
    }
    if (progress) continue;
    if (now - last_progress < kYieldBeforePoll) {
      // The peer's bytes are usually a few microseconds away: offer the core (to that peer, when the ranks
      // share cores) and look again, rather than sleep in poll() and pay a wakeup (~13 us on a small VM, more
      // than a 4 KiB exchange takes). Bounded, so a rank that waits long for a peer soon stops using the CPU.
      sched_yield();
      continue;
    }
    pollfd fds[2];
    int n = 0;
    const bool want_out = si < sends.size() && (sends[si].after_recv < 0 ||
                                                 static_cast<size_t>(sends[si].after_recv) < ri);
    if (want_out) fds[n++] = pollfd{send_fd, POLLOUT, 0};
    if (ri < recvs.size()) {
      if (n == 1 && recv_fd == send_fd) fds[0].events |= POLLIN;
      else fds[n++] = pollfd{recv_fd, POLLIN, 0};
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - now).count();
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(left, 1, kPollTick.count()));
    const int rc = ::poll(fds, static_cast<nfds_t>(n), wait_ms);
    KILN_CHECK(rc >= 0 || errno == EINTR, ctx.name, ": rank ", rank_, ": poll failed: ", std::strerror(errno));
  }
}

}  // namespace kiln::distributed::tcp
