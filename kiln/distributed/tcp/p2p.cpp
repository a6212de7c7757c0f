// The tcp backend's point-to-point engine: see p2p.h.
#include "kiln/distributed/tcp/p2p.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <tuple>
#include <vector>

#include "kiln/distributed/tcp/transport.h"
#include "kiln/distributed/threaded_work.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

// How long the engine, with ops pending, keeps yielding the CPU and looking again after its last progress before
// it sleeps in poll(): the peer's bytes are usually microseconds away, and a sleep and its wakeup cost more (the
// same trade as Mesh::run's).
constexpr auto kYieldBeforePoll = std::chrono::microseconds(50);
// A peer whose end of this rank's connection to it closed (or refused it: its listener exists from before its
// address was in the store, so a refusal means it is gone) may still have messages on their way on its own
// connection to this rank, whose opening can be delayed on a real network: a recv waiting for such a peer fails
// only when that connection has not come within this grace.
constexpr auto kGoneGrace = std::chrono::seconds(1);

struct P2POp {
  bool is_send = false;
  int peer = -1;
  FrameHeader header;  // what goes out (a send), or what the message must say (a recv)
  Tensor tensor;       // held until the op is done
  Clock::time_point deadline;
  std::shared_ptr<ThreadedWork> work;
};

// A message that arrived before its recv: kept whole until the recv comes.
struct Arrived {
  FrameHeader header;
  std::unique_ptr<uint8_t[]> payload;
};

// This rank's connection to a peer: carries this rank's sends to it, in issue order. Opened by the first send
// to the peer, or the first recv from it: the peer never writes to it, so its becoming readable means EOF,
// which is how a rank waiting for a peer that never sent anything learns at once that the peer died.
struct Outgoing {
  Socket socket;
  bool ended = false;       // the peer closed its end, or refused the connection: it destroyed the group or died
  Clock::time_point ended_at;
  bool readable = false;    // poll() said so: look for the EOF
  std::deque<P2POp> sends;  // the front one is on its way
  size_t sent = 0;          // bytes of the front one's frame (header and payload) written
};

// A peer's connection to this rank: carries that peer's sends, read as they come.
struct Incoming {
  Socket socket;
  bool ended = false;  // the peer closed it (EOF): nothing more will come
  FrameHeader got;     // the header being read, then the header of the payload being read
  size_t header_read = 0;
  bool in_payload = false;
  uint8_t* dest = nullptr;  // where the payload goes: `target`'s tensor, or `stash`
  size_t payload_read = 0;
  std::optional<P2POp> target;  // the recv the payload is for (none: it arrived first)
  std::unique_ptr<uint8_t[]> stash;
  std::map<int, std::deque<P2POp>> posted;     // recvs waiting for a message, per tag, oldest first
  std::map<int, std::deque<Arrived>> arrived;  // messages waiting for a recv, per tag, oldest first
};

// A connection accepted whose handshake has not fully arrived.
struct Accepting {
  Socket socket;
  Handshake handshake;
  size_t read = 0;
  Clock::time_point deadline;
};

}  // namespace

struct P2PEngine::Impl {
  P2PConfig cfg;
  uint32_t group_id = 0;
  Socket listener;
  int wake_fd = -1;

  // Shared with the issuing threads.
  std::mutex mutex;
  std::deque<P2POp> inbox;
  bool stop = false;
  std::string fail_request;  // fail(): the group failed elsewhere
  std::map<std::tuple<bool, int, int>, uint64_t> next_seq;  // (is_send, peer, tag) -> the next message's number

  // The engine thread's own.
  std::deque<P2POp> admitting;  // taken from the inbox, not yet placed (fail_all fails these too)
  std::vector<Outgoing> out;
  std::vector<Incoming> in;
  std::vector<Accepting> accepting;
  std::string failed;  // this group's failure, once there is one
  Clock::time_point last_remote_check{};
  uint64_t moved = 0;  // bytes moved and ops admitted so far: what counts as progress
  std::thread thread;

  std::string me() const { return "rank " + std::to_string(cfg.rank); }

  static std::string op_name(const P2POp& op) { return op.work->name(); }

  void wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof one);
  }

  std::shared_ptr<Work> issue(const Tensor& tensor, bool is_send, int peer, int tag) {
    P2POp op;
    op.is_send = is_send;
    op.peer = peer;
    op.tensor = tensor;
    op.header.group_id = group_id;
    op.header.kind = OpKind::SendRecv;
    op.header.dtype = tensor.dtype();
    op.header.count = tensor.numel();
    op.header.payload_bytes = tensor.nbytes();
    op.header.tag = tag;
    op.deadline = Clock::now() + cfg.timeout;
    std::shared_ptr<Work> work;
    {
      std::lock_guard<std::mutex> lock(mutex);
      KILN_CHECK(!stop, is_send ? "send" : "recv", ": the process group is shutting down");
      op.header.seq = next_seq[{is_send, peer, tag}]++;
      op.work = std::make_shared<ThreadedWork>(std::string(is_send ? "send #" : "recv #") + std::to_string(op.header.seq) +
                                          (is_send ? " to rank " : " from rank ") + std::to_string(peer) +
                                          " (tag " + std::to_string(tag) + ")");
      work = op.work;
      inbox.push_back(std::move(op));
    }
    wake();
    return work;
  }

  // ---- failure ----

  // Fails the group: `message` for `trigger` (the op that failed, if any), "the group failed" for every other
  // pending op; closes every connection. `report`: the failure is this rank's own, reported through the store
  // (where another rank's earlier report becomes the message: GroupFailure::report).
  void fail_all(std::string message, bool report, const ThreadedWork* trigger) {
    if (!failed.empty()) return;
    if (report) message = cfg.failure->report(trigger ? trigger->name() : std::string(), message);
    failed = message;
    cfg.failure->record(message);
    const auto fail_op = [&](P2POp& op) {
      op.work->complete(true, op.work.get() == trigger ? message
                                                       : op_name(op) + ": " + me() + ": the group failed: " + message);
    };
    for (P2POp& op : admitting) fail_op(op);
    admitting.clear();
    for (Outgoing& o : out) {
      for (P2POp& op : o.sends) fail_op(op);
      o.sends.clear();
      o.socket.close();
    }
    for (Incoming& i : in) {
      if (i.target) fail_op(*i.target), i.target.reset();
      for (auto& [tag, ops] : i.posted)
        for (P2POp& op : ops) fail_op(op);
      i.posted.clear(), i.arrived.clear(), i.stash.reset();
      i.socket.close();
    }
    accepting.clear();
    listener.close();
  }

  void fail_op(const P2POp& op, const std::string& message) { fail_all(message, true, op.work.get()); }

  // ---- admitting new ops ----

  // Places `op` (moved from, once placed) or completes it.
  void admit(P2POp& op) {
    if (!failed.empty()) {
      op.work->complete(true, op_name(op) + ": " + me() + ": the group failed earlier: " + failed);
      return;
    }
    const auto fail_now = [&](const std::string& message) {
      fail_op(op, message);
      op.work->complete(true, failed);  // not queued: fail_all did not see it
    };
    Outgoing& o = out[op.peer];
    const std::string peer = "rank " + std::to_string(op.peer);
    if (op.is_send) {
      if (o.ended) return fail_now(op_name(op) + ": " + me() + " cannot send to " + peer + ": " + peer +
                                   " has left (it destroyed the group or died)");
      if (!o.socket.valid() && !connect(op)) return;
      o.sends.push_back(std::move(op));
      return;
    }
    Incoming& i = in[op.peer];
    auto it = i.arrived.find(op.header.tag);
    if (it != i.arrived.end() && !it->second.empty()) {
      Arrived a = std::move(it->second.front());
      it->second.pop_front();
      deliver(a, op);
      return;
    }
    if (i.ended) {
      return fail_now(op_name(op) + ": " + me() + " cannot receive from " + peer + ": " + peer +
                      " closed its connection without sending this message (it destroyed the group or died)");
    }
    // To wait, hold a connection to the peer: its EOF says at once that the peer is gone (see Outgoing).
    if (!o.socket.valid() && !o.ended && !connect(op)) return;
    i.posted[op.header.tag].push_back(std::move(op));
  }

  // Opens out[op.peer]. A refusal means the peer is gone: a send fails (false: the group failed), a recv goes on
  // waiting for what the peer may have sent before it left (check_deadlines' grace). Anything else fails.
  bool connect(P2POp& op) {
    Outgoing& o = out[op.peer];
    try {
      o.socket = open_connection(op);
      return true;
    } catch (const std::exception& e) {
      const bool refused = errno_refused_;
      errno_refused_ = false;
      if (refused && !op.is_send) {
        o.ended = true, o.ended_at = Clock::now();
        return true;
      }
      fail_op(op, e.what());
      op.work->complete(true, failed);  // not queued: fail_all did not see it
      return false;
    }
  }
  bool errno_refused_ = false;  // open_connection's connect was refused

  // Looks up the peer's point-to-point address and connects, by the op's deadline; the handshake goes out at
  // once (it fits in any socket buffer) and is checked by the peer's engine.
  Socket open_connection(const P2POp& op) {
    const std::string what = op_name(op) + ": " + me() + " connecting to rank " + std::to_string(op.peer);
    const std::string key = cfg.keys_at + "/p2p/" + std::to_string(op.peer);
    const auto left = std::chrono::duration_cast<Duration>(op.deadline - Clock::now());
    cfg.store->wait({key}, std::max(left, Duration(1)));
    auto [host, port] = parse_address(cfg.store->get(key), what);
    Socket s = connect_to(host, port, op.deadline, what, /*retry_refused=*/false, &errno_refused_);
    Handshake mine = make_handshake(cfg.job_id, cfg.rank, op.peer, cfg.size, cfg.group);
    mine.purpose = kP2PPurpose;
    send_all(s, &mine, sizeof mine, op.deadline, what);
    s.set_nonblocking();
    return s;
  }

  // ---- moving bytes ----

  // Writes as much of each connection's queue as its socket takes; completes the sends written whole.
  void progress_sends() {
    for (int p = 0; p < cfg.size && failed.empty(); ++p) {
      Outgoing& o = out[p];
      while (!o.sends.empty()) {
        P2POp& op = o.sends.front();
        iovec pieces[2];
        const int n = frame_pieces(&op.header, op.tensor.raw_data_ptr(), op.header.payload_bytes, o.sent, pieces);
        const IoResult r = n > 0 ? send_some(o.socket.fd(), pieces, n) : IoResult{};
        if (r.failed()) {
          fail_op(op, op_name(op) + ": " + me() + " lost its connection to rank " + std::to_string(p) + ": " +
                          r.describe() + " (rank " + std::to_string(p) + " died or closed its sockets)");
          return;
        }
        o.sent += r.bytes;
        moved += r.bytes;
        if (o.sent == sizeof(FrameHeader) + op.header.payload_bytes) {
          op.work->complete(false);
          o.sends.pop_front();
          o.sent = 0;
        } else if (r.bytes == 0) {
          break;  // the socket is full
        }
      }
    }
  }

  // Reads whatever each peer's connection has: headers, then payloads into their recvs or into stashes.
  void progress_recvs() {
    for (int p = 0; p < cfg.size && failed.empty(); ++p) {
      Incoming& i = in[p];
      while (i.socket.valid() && !i.ended && failed.empty()) {
        if (!read_some(p, i)) break;
      }
    }
  }

  // One read from peer p; returns whether to read again.
  bool read_some(int p, Incoming& i) {
    const std::string peer = "rank " + std::to_string(p);
    if (!i.in_payload) {
      const IoResult r = recv_some(i.socket.fd(), reinterpret_cast<uint8_t*>(&i.got) + i.header_read,
                                   sizeof(FrameHeader) - i.header_read);
      if (r.eof && i.header_read == 0) {
        peer_ended(p, i);
        return false;
      }
      if (r.failed()) {
        fail_all(me() + " lost its connection from " + peer + " while receiving a message: " + r.describe(), true,
                 nullptr);
        return false;
      }
      i.header_read += r.bytes;
      moved += r.bytes;
      if (i.header_read < sizeof(FrameHeader)) return r.bytes > 0;
      if (!start_payload(p, i)) return false;
    }
    if (i.payload_read < i.got.payload_bytes) {
      const IoResult r =
          recv_some(i.socket.fd(), i.dest + i.payload_read, static_cast<size_t>(i.got.payload_bytes) - i.payload_read);
      if (r.failed()) {
        const std::string what = i.target ? op_name(*i.target) : "a message with tag " + std::to_string(i.got.tag);
        fail_all(what + ": " + me() + " lost its connection from " + peer + " in the middle of the message: " +
                     r.describe(),
                 true, i.target ? i.target->work.get() : nullptr);
        return false;
      }
      i.payload_read += r.bytes;
      moved += r.bytes;
      if (i.payload_read < i.got.payload_bytes) return r.bytes > 0;
    }
    // The whole message is in.
    i.in_payload = false;
    i.header_read = 0;
    if (i.target) {
      i.target->work->complete(false);
      i.target.reset();
      return true;
    }
    // A recv for it may have been posted while it was coming in.
    auto it = i.posted.find(i.got.tag);
    if (it == i.posted.end() || it->second.empty()) {
      i.arrived[i.got.tag].push_back(Arrived{i.got, std::move(i.stash)});
      return true;
    }
    P2POp op = std::move(it->second.front());
    it->second.pop_front();
    return deliver(Arrived{i.got, std::move(i.stash)}, op);
  }

  // Hands a message that arrived before its recv to the recv. False: the header does not match (the group failed).
  bool deliver(const Arrived& a, const P2POp& op) {
    try {
      check_frame(a.header, op.header, op.peer, cfg.rank);
    } catch (const std::exception& e) {
      fail_op(op, op_name(op) + ": " + e.what());
      op.work->complete(true, failed);  // not queued: fail_all did not see it
      return false;
    }
    if (a.header.payload_bytes > 0) std::memcpy(op.tensor.raw_data_ptr(), a.payload.get(), a.header.payload_bytes);
    op.work->complete(false);
    return true;
  }

  // A whole header from peer p: checks it and picks where its payload goes. False: the group failed.
  bool start_payload(int p, Incoming& i) {
    const FrameHeader& h = i.got;
    if (h.magic != kFrameMagic || h.group_id != group_id || h.kind != OpKind::SendRecv) {
      fail_all(me() + " received a corrupt point-to-point header from rank " + std::to_string(p) + " (magic 0x" +
                   to_hex(h.magic) + ", group 0x" + to_hex(h.group_id) + ", op " + op_kind_name(h.kind) +
                   "): the stream is out of step",
               true, nullptr);
      return false;
    }
    auto it = i.posted.find(h.tag);
    if (it != i.posted.end() && !it->second.empty()) {
      i.target = std::move(it->second.front());
      it->second.pop_front();
      try {
        check_frame(h, i.target->header, p, cfg.rank);
      } catch (const std::exception& e) {
        const std::string m = op_name(*i.target) + ": " + e.what();
        fail_all(m, true, i.target->work.get());
        return false;
      }
      i.dest = static_cast<uint8_t*>(i.target->tensor.raw_data_ptr());
    } else {
      i.stash.reset(new uint8_t[std::max<uint64_t>(h.payload_bytes, 1)]);  // default-initialised: no zero fill
      i.dest = i.stash.get();
    }
    i.in_payload = true;
    i.payload_read = 0;
    return true;
  }

  // Peer p closed its connection between messages: it destroyed its group (or died). Its recvs still posted
  // here can never complete.
  void peer_ended(int p, Incoming& i) {
    i.ended = true;
    i.socket.close();
    fail_posted_recvs(i, "rank " + std::to_string(p) + " closed its connection before sending it");
  }

  // Fails the group with a recv still waiting on `i` (if there is one), for `why`.
  void fail_posted_recvs(Incoming& i, const std::string& why) {
    for (auto& [tag, ops] : i.posted) {
      if (ops.empty()) continue;
      const int p = ops.front().peer;
      fail_op(ops.front(), op_name(ops.front()) + ": " + me() + " waited for a message that will not come: " + why +
                               " (rank " + std::to_string(p) + " destroyed the group or died)");
      return;
    }
  }

  // Looks for EOF on the connections poll() found readable (see Outgoing).
  void check_outgoing_ends() {
    for (int p = 0; p < cfg.size && failed.empty(); ++p) {
      Outgoing& o = out[p];
      if (!o.readable || !o.socket.valid()) continue;
      o.readable = false;
      uint8_t byte;
      const IoResult r = recv_some(o.socket.fd(), &byte, 1);
      if (r.bytes > 0) {
        fail_all(me() + " received data from rank " + std::to_string(p) +
                     " on its own point-to-point connection to it: the streams are out of step",
                 true, nullptr);
        return;
      }
      if (!r.failed()) continue;
      o.ended = true, o.ended_at = Clock::now();
      o.socket.close();
      const std::string gone = " (rank " + std::to_string(p) + " destroyed the group or died)";
      if (!o.sends.empty()) {
        const P2POp& op = o.sends.front();
        fail_op(op, op_name(op) + ": " + me() + " lost its connection to rank " + std::to_string(p) + ": " +
                        r.describe() + gone);
        return;
      }
      // Messages the peer sent before it went may still be on its connection to this rank: that connection's
      // EOF decides, or check_deadlines' grace when it never came.
    }
  }

  static std::string to_hex(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
  }

  // ---- connections being accepted ----

  void accept_new() {
    for (;;) {
      const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // Linux passes a connection's pending network errors on to accept(): retry those, as accept(2) says.
        const int e = errno;
        if (e == EINTR || e == ECONNABORTED || e == ENETDOWN || e == EPROTO || e == ENOPROTOOPT || e == EHOSTDOWN ||
            e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH)
          continue;
        KILN_CHECK(e == EAGAIN || e == EWOULDBLOCK, me(), ": accepting a point-to-point connection failed: ",
                   std::strerror(e));
        return;
      }
      accepting.push_back(Accepting{Socket(fd), Handshake{}, 0, Clock::now() + cfg.timeout});
    }
  }

  // Reads handshakes; a whole one that checks out makes its socket the peer's incoming connection.
  void progress_accepting() {
    for (size_t k = 0; k < accepting.size() && failed.empty();) {
      Accepting& a = accepting[k];
      const IoResult r = recv_some(a.socket.fd(), reinterpret_cast<uint8_t*>(&a.handshake) + a.read,
                                   sizeof(Handshake) - a.read);
      a.read += r.bytes;
      if (r.failed() || (a.read < sizeof(Handshake) && Clock::now() >= a.deadline)) {
        // Not a kiln peer that got its handshake out (a port scan, a peer that died at once): drop it. A real
        // peer's sends then fail on its side, naming this rank.
        accepting.erase(accepting.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      if (a.read < sizeof(Handshake)) {
        ++k;
        continue;
      }
      // A handshake that is not a peer's of this group (a port scan, a process of another job) is dropped: a
      // real peer whose connection is dropped fails on its side, naming this rank.
      const Handshake& got = a.handshake;
      bool ours = got.from_rank >= 0 && got.from_rank < cfg.size && got.from_rank != cfg.rank &&
                  got.purpose == kP2PPurpose;
      if (ours) {
        try {
          check_handshake(got, make_handshake(cfg.job_id, cfg.rank, got.from_rank, cfg.size, cfg.group), cfg.rank,
                          got.from_rank);
        } catch (const std::exception&) {
          ours = false;
        }
      }
      Incoming* i = ours ? &in[got.from_rank] : nullptr;
      if (i && !i->socket.valid() && !i->ended) i->socket = std::move(a.socket);
      accepting.erase(accepting.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  // ---- deadlines and the others' failures ----

  bool pending() const {
    for (const Outgoing& o : out)
      if (!o.sends.empty()) return true;
    for (const Incoming& i : in) {
      if (i.target) return true;
      for (const auto& [tag, ops] : i.posted)
        if (!ops.empty()) return true;
    }
    return false;
  }

  void check_deadlines(Clock::time_point now) {
    const std::string t = std::to_string(cfg.timeout.count()) + " ms";
    for (int p = 0; p < cfg.size; ++p) {
      const std::string peer = "rank " + std::to_string(p);
      Outgoing& o = out[p];
      if (!o.sends.empty() && now >= o.sends.front().deadline) {
        const P2POp& op = o.sends.front();
        return fail_op(op, op_name(op) + ": " + me() + " timed out after " + t + " with " + std::to_string(o.sent) +
                               " of " + std::to_string(sizeof(FrameHeader) + op.header.payload_bytes) +
                               " bytes written (is " + peer + " stopped?)");
      }
      Incoming& i = in[p];
      if (i.target && now >= i.target->deadline)
        return fail_op(*i.target, op_name(*i.target) + ": " + me() + " timed out after " + t + " with " +
                                      std::to_string(i.payload_read) + " of " +
                                      std::to_string(i.got.payload_bytes) + " bytes received (is " + peer +
                                      " stopped?)");
      const bool waiting = std::any_of(i.posted.begin(), i.posted.end(), [](const auto& e) { return !e.second.empty(); });
      if (waiting && o.ended && !i.socket.valid() && now - o.ended_at >= kGoneGrace && accepting.empty())
        return fail_posted_recvs(i, peer + " has left and never opened its connection to this rank");
      for (const auto& [tag, ops] : i.posted)
        if (!ops.empty() && now >= ops.front().deadline)
          return fail_op(ops.front(), op_name(ops.front()) + ": " + me() + " timed out after " + t +
                                          " waiting for the message (is " + peer +
                                          " stopped, or did it not send it?)");
    }
  }

  void check_remote() {
    const std::string report = cfg.failure->read_report(last_remote_check);
    if (!report.empty()) fail_all(me() + " stopped because " + report, false, nullptr);
  }

  // ---- the thread ----

  void loop() {
    uint64_t moved_before = 0;
    auto last_progress = Clock::now();
    for (;;) {
      // Drain the wakeups before looking at the inbox: one written after this point finds poll() awake.
      uint64_t drained;
      while (::read(wake_fd, &drained, sizeof drained) > 0) {
      }
      bool stopping;
      std::string elsewhere;
      {
        std::lock_guard<std::mutex> lock(mutex);
        for (P2POp& op : inbox) admitting.push_back(std::move(op));
        inbox.clear();
        stopping = stop;
        elsewhere = fail_request;
      }
      try {
        if (!elsewhere.empty()) fail_all(elsewhere, false, nullptr);
        while (!admitting.empty()) {
          P2POp op = std::move(admitting.front());
          admitting.pop_front();
          ++moved;
          try {
            admit(op);
          } catch (const std::exception& e) {
            if (!op.work) throw;  // placed already: fail_all below reaches it
            fail_all(op_name(op) + ": " + me() + ": point-to-point engine: " + e.what(), true, op.work.get());
            op.work->complete(true, failed);  // not queued: fail_all did not see it
          }
        }
        if (listener.valid() && failed.empty()) accept_new();
        progress_accepting();
        progress_sends();
        progress_recvs();
        check_outgoing_ends();
        const auto now = Clock::now();
        if (failed.empty()) check_deadlines(now);
        if (failed.empty() && pending()) check_remote();
      } catch (const std::exception& e) {
        fail_all(me() + ": point-to-point engine: " + e.what(), true, nullptr);
      }
      if (stopping) accepting.clear();  // no peer of a group being destroyed is still to come
      const bool busy = pending() || !accepting.empty();
      if (stopping && !busy) break;
      const auto now = Clock::now();
      if (moved != moved_before) last_progress = now, moved_before = moved;
      if (busy && now - last_progress < kYieldBeforePoll) {
        sched_yield();
        continue;
      }

      std::vector<pollfd> fds{{wake_fd, POLLIN, 0}};
      if (listener.valid()) fds.push_back({listener.fd(), POLLIN, 0});
      for (const Accepting& a : accepting) fds.push_back({a.socket.fd(), POLLIN, 0});
      for (const Incoming& i : in)
        if (i.socket.valid() && !i.ended) fds.push_back({i.socket.fd(), POLLIN, 0});
      const size_t first_out = fds.size();
      std::vector<int> out_peer;
      for (int p = 0; p < cfg.size; ++p) {
        const Outgoing& o = out[p];
        if (!o.socket.valid()) continue;
        fds.push_back({o.socket.fd(), static_cast<short>(POLLIN | (o.sends.empty() ? 0 : POLLOUT)), 0});
        out_peer.push_back(p);
      }
      // With ops pending, wake every tick for their deadlines and the store; idle, sleep until something comes.
      const int wait_ms = busy ? static_cast<int>(kPollTick.count()) : -1;
      const int rc = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), wait_ms);
      if (rc < 0 && errno != EINTR) {
        fail_all(me() + ": point-to-point engine: poll failed: " + std::strerror(errno), true, nullptr);
      }
      for (size_t k = 0; rc > 0 && k < out_peer.size(); ++k)
        if (fds[first_out + k].revents & (POLLIN | POLLHUP | POLLERR)) out[out_peer[k]].readable = true;
    }
    // Stopping with nothing pending: what arrived and was never received is dropped.
    for (Outgoing& o : out) o.socket.close();
    for (Incoming& i : in) i.socket.close();
    listener.close();
  }
};

P2PEngine::P2PEngine(P2PConfig config) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = std::move(config);
  KILN_ASSERT(m.cfg.store && m.cfg.failure, "P2PEngine: no store or failure record");
  m.group_id = group_id_of(m.cfg.group);
  m.out.resize(static_cast<size_t>(m.cfg.size));
  m.in.resize(static_cast<size_t>(m.cfg.size));
  m.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  KILN_CHECK(m.wake_fd >= 0, "tcp point to point: eventfd failed: ", std::strerror(errno));
  try {
    if (m.cfg.size > 1) {
      uint16_t port = 0;
      m.listener = listen_on(m.cfg.host, &port);
      m.listener.set_nonblocking();
      m.cfg.store->set(m.cfg.keys_at + "/p2p/" + std::to_string(m.cfg.rank),
                       m.cfg.host + ":" + std::to_string(port));
    }
    m.thread = std::thread([&m] { m.loop(); });
  } catch (...) {
    ::close(m.wake_fd);
    throw;
  }
}

P2PEngine::~P2PEngine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake();
  impl_->thread.join();
  ::close(impl_->wake_fd);
}

std::shared_ptr<Work> P2PEngine::send(const Tensor& tensor, int dst, int tag) {
  return impl_->issue(tensor, true, dst, tag);
}

std::shared_ptr<Work> P2PEngine::recv(const Tensor& tensor, int src, int tag) {
  return impl_->issue(tensor, false, src, tag);
}

void P2PEngine::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->fail_request.empty()) impl_->fail_request = message;
  }
  impl_->wake();
}

}  // namespace kiln::distributed::tcp
