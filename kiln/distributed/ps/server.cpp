// A parameter server: one thread per worker connection, sharing the shard under one mutex. See
// parameter_server.h for the modes; wire.h for the messages.
#include <poll.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "kiln/autograd/grad_mode.h"
#include "kiln/distributed/ps/parameter_server.h"
#include "kiln/distributed/ps/wire.h"
#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed::ps {

using detail::Clock;
using detail::FrameHeader;
using detail::OpKind;

struct Server::Impl {
  std::shared_ptr<Store> store;
  Role role;
  PSOptions o;
  std::string me;  // "parameter server 'ps': server 0"
  detail::Layout layout;
  const std::vector<Slice>* slices = nullptr;
  int64_t numel = 0;
  size_t esize = 0;
  int num_workers = 0;

  // The shard's parameters, one 1-D leaf per slice, and the optimizer over them (server placement).
  std::vector<Tensor> values;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<int> opt_group_source;  // the workers' group each of opt's groups came from
  std::vector<std::string> option_keys;  // the optimizer's option names, in order (every group has them all)
  size_t worker_groups = 0;
  uint32_t digest = 0;  // agreement_digest: what every worker must have too

  tcp::Socket listener;
  uint64_t job_id = 0;
  std::vector<detail::Link> links;    // by worker
  std::vector<Tensor> grads;          // by worker: its last push, flat
  std::vector<Tensor> replies;        // by worker: what goes back to it, flat
  Tensor mean;                        // sync: the workers' mean gradient

  // Guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  bool initialized = false;
  int64_t version = 0;  // updates applied
  int arrived = 0;      // sync: pushes of the step in progress
  std::vector<int64_t> clocks;
  std::vector<bool> done;
  std::vector<double> group_options;  // the workers' last options, group by group (keys in option_keys order)
  std::string failure;
  ServerStats stats;
  int updating = 0;

  std::string worker_name(int w) const { return "worker " + std::to_string(w); }

  // Records the first failure, tells the job (the store), and wakes every thread: each connection is shut
  // down, so the workers see EOF at once.
  void fail(const std::string& message) {
    // A peer that failed first (its connection closing is often how this server learns) recorded why: read it
    // now, while the store's host is still up.
    const std::string first = detail::recorded_failure(*store, o.name);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty()) return;
      failure = first.empty() || first == message ? message : message + "; the job's first failure: " + first;
    }
    detail::report_failure(*store, o.name, message);
    for (const auto& l : links) l.shut_down();
    cv.notify_all();
  }

  // Waits on cv until pred() holds; a failure elsewhere, or the deadline, is a kiln::Error.
  template <typename Pred, typename What>
  void wait_for(std::unique_lock<std::mutex>& lock, Pred pred, What what) {
    const auto start = Clock::now();
    const auto deadline = start + o.timeout;
    for (;;) {
      KILN_CHECK(failure.empty(), me, ": ", failure);
      if (pred()) return;
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && !pred() && failure.empty()) {
        KILN_CHECK(false, me, " waited ", std::chrono::duration_cast<Duration>(Clock::now() - start).count(),
                   " ms for ", what(), " (deadline ", o.timeout.count(), " ms)");
      }
    }
  }

  void gather_values(void* dst) const {
    auto* out = static_cast<uint8_t*>(dst);
    for (const Tensor& v : values) {
      std::memcpy(out, v.raw_data_ptr(), v.nbytes());
      out += v.nbytes();
    }
  }
  void scatter_values(const void* src) {
    const auto* in = static_cast<const uint8_t*>(src);
    for (const Tensor& v : values) {
      std::memcpy(v.raw_data_ptr(), in, v.nbytes());
      in += v.nbytes();
    }
  }

  // One optimizer step of the shard with `grad` (flat, as pushed). Under mu.
  void apply(const Tensor& grad) {
    ++updating;
    stats.max_concurrent_updates = std::max(stats.max_concurrent_updates, updating);
    int64_t off = 0;
    for (const Tensor& v : values) {
      v.set_grad(grad.narrow(0, off, v.numel()));
      off += v.numel();
    }
    // The workers' options (their schedulers move lr, and some momentum or betas) for each of this shard's
    // groups, from the workers' group it came from.
    auto& groups = opt->param_groups();
    for (size_t g = 0; g < groups.size() && !group_options.empty(); ++g) {
      const size_t at = static_cast<size_t>(opt_group_source[g]) * option_keys.size();
      for (size_t k = 0; k < option_keys.size(); ++k) groups[g].options[option_keys[k]] = group_options[at + k];
    }
    opt->step();
    opt->zero_grad();
    ++stats.updates;
    --updating;
  }

  // The workers that have pushed at most `clock` gradients and are not done, as "worker 1, worker 3".
  std::string behind(int64_t clock) const {
    std::string list;
    for (int v = 0; v < num_workers; ++v) {
      if (!done[v] && clocks[v] <= clock) list += (list.empty() ? "" : ", ") + worker_name(v);
    }
    return list.empty() ? "no worker" : list;
  }
  int64_t slowest_clock() const {
    int64_t m = INT64_MAX;
    for (int v = 0; v < num_workers; ++v) {
      if (!done[v]) m = std::min(m, clocks[v]);
    }
    return m;
  }

  void check_payload(const FrameHeader& h, int w, int64_t count, DType dtype) const {
    KILN_CHECK(h.count == count && h.dtype == dtype, me, ": ", worker_name(w), " sent ", tcp::describe_frame(h),
               ", expected ", count, " ", dtype_name(dtype),
               " (do the worker and the server build the same model, optimizer and number of servers?)");
  }

  void reply(int w, uint64_t seq, const Tensor& payload) {
    const detail::Link& l = links[w];
    const int64_t n = payload.defined() ? payload.numel() : 0;
    l.send(l.header(OpKind::PsReply, seq, layout.dtype, n), n ? payload.raw_data_ptr() : nullptr,
           static_cast<size_t>(n) * esize);
  }

  void handle_init(int w, const FrameHeader& h) {
    const detail::Link& l = links[w];
    KILN_CHECK(w == 0, me, ": ", worker_name(w), " sent the initial parameters; only worker 0 does");
    check_payload(h, w, numel, layout.dtype);
    l.recv_payload(h, replies[w].raw_data_ptr());
    optim::OptimizerState state;
    const bool with_state = h.tag == 1;
    if (with_state) {
      const FrameHeader s = l.recv_header("the optimizer state after the initial parameters");
      KILN_CHECK(s.kind == OpKind::PsState, me, ": expected the optimizer state from worker 0, received ",
                 tcp::describe_frame(s));
      Bytes b(s.payload_bytes);
      l.recv_payload(s, b.data());
      state = detail::decode_state(b, me + ": the optimizer state from worker 0");
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      KILN_CHECK(!initialized, me, ": worker 0 sent the initial parameters twice");
      scatter_values(replies[w].raw_data_ptr());
      if (with_state && opt != nullptr) opt->load_state_dict(state);
      initialized = true;
    }
    cv.notify_all();
    reply(w, h.seq, Tensor());
  }

  void handle_pull(int w, const FrameHeader& h) {
    {
      std::unique_lock<std::mutex> lock(mu);
      wait_for(lock, [&] { return initialized; }, [] { return std::string("worker 0's initial parameters"); });
      gather_values(replies[w].raw_data_ptr());
    }
    reply(w, h.seq, replies[w]);
  }

  void handle_fetch(int w, const FrameHeader& h) {
    Bytes state;
    {
      std::unique_lock<std::mutex> lock(mu);
      wait_for(lock, [&] { return initialized; }, [] { return std::string("worker 0's initial parameters"); });
      gather_values(replies[w].raw_data_ptr());
      state = detail::encode_state(opt != nullptr ? opt->state_dict() : optim::OptimizerState{});
    }
    reply(w, h.seq, replies[w]);
    const detail::Link& l = links[w];
    FrameHeader s = l.header(OpKind::PsState, h.seq, kUInt8, static_cast<int64_t>(state.size()));
    l.send(s, state.data(), state.size());
  }

  // A step: the optimizer's options (when the servers step), then the gradients; answered per the mode.
  void handle_step(int w, FrameHeader h) {
    const detail::Link& l = links[w];
    std::vector<double> options_w;
    if (h.kind == OpKind::PsOptions) {
      const auto expected = static_cast<int64_t>(worker_groups * option_keys.size());
      KILN_CHECK(h.dtype == kFloat64 && h.count == expected, me, ": ", worker_name(w), " sent ",
                 tcp::describe_frame(h), ", expected ", expected, " float64 (", worker_groups, " groups x ",
                 option_keys.size(), " options)");
      options_w.resize(static_cast<size_t>(h.count));
      l.recv_payload(h, options_w.data());
      h = l.recv_header("the gradients after the optimizer's options");
      KILN_CHECK(h.kind == OpKind::PsPush, me, ": ", worker_name(w), " sent ", tcp::describe_frame(h),
                 " after its optimizer's options, expected its gradients");
    }
    check_payload(h, w, numel, layout.dtype);
    l.recv_payload(h, grads[w].raw_data_ptr());
    const int64_t c = static_cast<int64_t>(h.seq);
    {
      std::unique_lock<std::mutex> lock(mu);
      KILN_CHECK(failure.empty(), me, ": ", failure);
      KILN_CHECK(initialized, me, ": ", worker_name(w), " pushed gradients before worker 0 sent the parameters");
      KILN_CHECK(c == clocks[w], me, ": ", worker_name(w), " pushed its step ", c, " but its last was ",
                 clocks[w] - 1);
      if (!options_w.empty()) group_options = std::move(options_w);
      clocks[w] = c + 1;
      if (o.mode == Mode::Sync) {
        for (int v = 0; v < num_workers; ++v) {
          KILN_CHECK(!done[v], me, ": ", worker_name(v), " finished after ", clocks[v], " steps, but ",
                     worker_name(w), " pushed step ", c,
                     ": in sync mode every worker must make the same number of steps");
        }
        if (++arrived == num_workers) {
          // The mean over workers, summed in worker order: the same bits whatever order they arrived in.
          std::memcpy(mean.raw_data_ptr(), grads[0].raw_data_ptr(), mean.nbytes());
          for (int v = 1; v < num_workers; ++v) {
            tcp::combine(mean.raw_data_ptr(), mean.raw_data_ptr(), grads[v].raw_data_ptr(), numel, layout.dtype,
                         ReduceOp::Sum);
          }
          tcp::divide_by(mean.raw_data_ptr(), numel, layout.dtype, num_workers);
          if (opt != nullptr) {
            apply(mean);
          } else {
            ++stats.updates;
          }
          arrived = 0;
          ++version;
          cv.notify_all();
        } else {
          wait_for(lock, [&] { return version > c; },
                   [&] { return "the gradients of step " + std::to_string(c) + " from " + behind(c); });
        }
        if (opt != nullptr) {
          gather_values(replies[w].raw_data_ptr());
        } else {
          std::memcpy(replies[w].raw_data_ptr(), mean.raw_data_ptr(), mean.nbytes());
        }
      } else {
        if (opt != nullptr) apply(grads[w]);  // (a server without slices has nothing to update)
        ++version;
        cv.notify_all();
        if (o.mode == Mode::SSP) {
          const int64_t bound = clocks[w] - o.staleness;
          wait_for(lock, [&] { return slowest_clock() >= bound; }, [&] {
            return "the slowest worker to reach step " + std::to_string(bound) + " (staleness " +
                   std::to_string(o.staleness) + "; behind: " + behind(bound - 1) + ")";
          });
        }
        const int64_t slowest = slowest_clock();
        stats.max_staleness = std::max(stats.max_staleness, clocks[w] - std::min(slowest, clocks[w]));
        gather_values(replies[w].raw_data_ptr());
      }
    }
    reply(w, h.seq, replies[w]);
  }

  void handle_done(int w, const FrameHeader& h) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done[w] = true;
      KILN_CHECK(o.mode != Mode::Sync || arrived == 0, me, ": ", worker_name(w), " finished after ", clocks[w],
                 " steps while other workers wait in step ", clocks[w],
                 ": in sync mode every worker must make the same number of steps");
    }
    cv.notify_all();  // ssp: the slowest clock may have moved
    reply(w, h.seq, Tensor());
  }

  // Waits until worker w's next request can be read. A worker may rightly be silent for long between requests
  // (it validates, it checkpoints), so this has no deadline as such. But in async and ssp mode, once another
  // worker has finished, nothing else would ever end this server's wait for a worker that is stopped or hung:
  // one silent for o.idle_timeout after that fails the job. (In sync mode the other workers' steps wait on it,
  // and fail at their deadline.)
  void await_request(int w) {
    std::optional<Clock::time_point> since;  // when this thread first saw another worker done
    for (;;) {
      pollfd p{links[w].socket.fd(), POLLIN, 0};
      if (::poll(&p, 1, 200) != 0) return;  // readable, closed or broken: recv_header tells which
      std::lock_guard<std::mutex> lock(mu);
      KILN_CHECK(failure.empty(), me, ": ", failure);
      if (o.mode == Mode::Sync) continue;
      const auto finished = std::find(done.begin(), done.end(), true);
      if (!since && finished != done.end()) since = Clock::now();
      KILN_CHECK(!since || Clock::now() - *since < o.idle_timeout, me, ": ", worker_name(w), " sent nothing for ",
                 o.idle_timeout.count(), " ms (idle_timeout) after ",
                 worker_name(static_cast<int>(finished - done.begin())), " had finished: it is stopped or hung");
    }
  }

  void serve(int w) {
    const detail::Link& l = links[w];
    for (;;) {
      await_request(w);
      const FrameHeader h = l.recv_header("its next request", /*idle=*/true);
      switch (h.kind) {
        case OpKind::PsInit: handle_init(w, h); break;
        case OpKind::PsPull: handle_pull(w, h); break;
        case OpKind::PsOptions:
        case OpKind::PsPush: handle_step(w, h); break;
        case OpKind::PsFetch: handle_fetch(w, h); break;
        case OpKind::PsDone: handle_done(w, h); return;
        default:
          KILN_CHECK(false, me, ": ", worker_name(w), " sent ", tcp::describe_frame(h), ", which is not a request");
      }
    }
  }

  void setup(std::shared_ptr<Store> store_in, const Role& role, optim::Optimizer& optimizer,
             const PSOptions& options);

  void accept_workers() {
    const auto deadline = Clock::now() + o.timeout;
    const int world = role.world_size();
    for (int accepted = 0; accepted < num_workers; ++accepted) {
      const std::string what = me + " accepting the workers (" + std::to_string(accepted) + " of " +
                               std::to_string(num_workers) + " connected)";
      // Waits in slices, so that a process that failed before connecting (its report in the store) ends the
      // wait at once.
      for (;;) {
        pollfd p{listener.fd(), POLLIN, 0};
        if (::poll(&p, 1, 200) > 0) break;
        const std::string failure = detail::recorded_failure(*store, o.name);
        KILN_CHECK(failure.empty(), what, ": the job failed: ", failure);
        KILN_CHECK(Clock::now() < deadline, what, ": no more workers came within ", o.timeout.count(), " ms");
      }
      tcp::Socket s = tcp::accept_one(listener, deadline, what);
      tcp::Handshake got;
      tcp::recv_all(s, &got, sizeof got, deadline, what);
      tcp::Handshake mine = tcp::make_handshake(job_id, role.global_rank(), got.from_rank, world, o.name);
      mine.purpose = digest;
      tcp::check_handshake(got, mine, role.global_rank(), -1);
      KILN_CHECK(got.purpose == digest, what, ": rank ", got.from_rank, " was built with other parameter-server ",
                 "options or another model (mode, staleness, optimizer placement, split_bytes, or the parameters' ",
                 "shapes and dtype differ)");
      KILN_CHECK(got.from_rank >= role.num_servers, what, ": rank ", got.from_rank,
                 " connected, which is a server, not a worker");
      const int w = got.from_rank - role.num_servers;
      KILN_CHECK(!links[w].socket.valid(), what, ": ", worker_name(w), " connected twice");
      tcp::send_all(s, &mine, sizeof mine, deadline, what);
      s.set_nodelay();
      links[w].socket = std::move(s);
      links[w].peer = worker_name(w) + " (rank " + std::to_string(got.from_rank) + ")";
    }
  }
};

Server::Server(std::shared_ptr<Store> store, Role role, optim::Optimizer& optimizer, PSOptions options)
    : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(store != nullptr, "ps::Server: no store");
  try {
    impl_->setup(store, role, optimizer, options);
  } catch (const std::exception& e) {
    // The workers wait for this server's address: tell them now rather than at their deadline.
    detail::report_failure(*store, options.name, "parameter server '" + options.name + "': " + role.describe() +
                                                     " failed to start: " + e.what());
    throw;
  }
}

void Server::Impl::setup(std::shared_ptr<Store> store_in, const Role& role, optim::Optimizer& optimizer,
                         const PSOptions& options) {
  Impl& s = *this;
  KILN_CHECK(role.is_server(), "ps::Server: made by ", role.describe());
  KILN_CHECK(options.mode != Mode::SSP || options.staleness >= 0, "ps::Server: staleness ", options.staleness,
             " (expected >= 0)");
  KILN_CHECK(options.optimizer == Placement::Server || options.mode == Mode::Sync,
             "parameter server: the optimizer runs on the workers only in sync mode (mode is ",
             mode_name(options.mode), "): in ", mode_name(options.mode),
             " mode the servers apply each push, so they need the optimizer");
  s.store = std::move(store_in);
  s.role = role;
  s.o = options;
  s.me = "parameter server '" + options.name + "': " + role.describe();
  s.num_workers = role.num_workers;
  s.layout = detail::layout_of(optimizer, role.num_servers, options, s.me);
  s.slices = &s.layout.plan.servers[role.index];
  s.numel = s.layout.shard_numel[role.index];
  s.esize = dtype_size(s.layout.dtype);

  // This shard's parameters (values arrive from worker 0) and, on the servers, its optimizer: one group per
  // worker group that has a slice here, with that group's options.
  const auto& groups = optimizer.param_groups();
  std::vector<optim::ParamGroup> mine;
  for (const Slice& slice : *s.slices) {
    Tensor v = zeros({slice.numel()}, TensorOptions(s.layout.dtype));
    v.requires_grad_(true);
    s.values.push_back(v);
    const int g = s.layout.group_of[slice.param];
    if (s.opt_group_source.empty() || s.opt_group_source.back() != g) {
      s.opt_group_source.push_back(g);
      mine.push_back({{}, groups[g].options});
    }
    mine.back().params.push_back(v);
  }
  if (options.optimizer == Placement::Server && !mine.empty()) s.opt = optimizer.make_like(mine);

  s.links.resize(s.num_workers);
  for (int w = 0; w < s.num_workers; ++w) {
    auto& l = s.links[w];
    l.name = options.name, l.me = s.me, l.timeout = options.timeout;
    s.grads.push_back(zeros({s.numel}, TensorOptions(s.layout.dtype)));
    s.replies.push_back(zeros({s.numel}, TensorOptions(s.layout.dtype)));
  }
  s.mean = zeros({s.numel}, TensorOptions(s.layout.dtype));
  s.worker_groups = groups.size();
  for (const auto& [key, value] : groups[0].options) s.option_keys.push_back(key);
  s.digest = detail::agreement_digest(options, s.layout);
  s.clocks.assign(s.num_workers, 0);
  s.done.assign(s.num_workers, false);

  uint16_t port = 0;
  s.listener = tcp::listen_on(options.host, &port);
  if (role.index == 0) {
    std::random_device rd;
    const uint64_t id = (static_cast<uint64_t>(rd()) << 32 ^ rd()) ^
                        static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    Bytes b(sizeof id);
    std::memcpy(b.data(), &id, sizeof id);
    s.store->set(detail::job_id_key(options.name), b);
  }
  const Bytes id = s.store->get(detail::job_id_key(options.name));
  KILN_CHECK(id.size() == sizeof(uint64_t), s.me, ": malformed job id in the store");
  std::memcpy(&s.job_id, id.data(), sizeof s.job_id);
  s.store->set(detail::address_key(options.name, role.index), options.host + ":" + std::to_string(port));
}

Server::~Server() {
  for (const auto& l : impl_->links) l.shut_down();
}

void Server::run() {
  Impl& s = *impl_;
  try {
    s.accept_workers();
  } catch (const std::exception& e) {
    s.fail(e.what());
  }
  std::vector<std::thread> threads;
  if (s.failure.empty()) {
    for (int w = 0; w < s.num_workers; ++w) {
      threads.emplace_back([&s, w] {
        try {
          s.serve(w);
        } catch (const std::exception& e) {
          s.fail(e.what());
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  KILN_CHECK(s.failure.empty(), s.failure);
}

ServerStats Server::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const ShardPlan& Server::plan() const { return impl_->layout.plan; }

}  // namespace kiln::distributed::ps
