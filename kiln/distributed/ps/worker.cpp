// A parameter-server worker: one connection to every server, requests in order. See parameter_server.h.
#include <cstring>

#include "kiln/autograd/grad_mode.h"
#include "kiln/distributed/ps/parameter_server.h"
#include "kiln/distributed/ps/wire.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed::ps {

using detail::Clock;
using detail::FrameHeader;
using detail::OpKind;

struct Worker::Impl {
  std::shared_ptr<Store> store;
  Role role;
  PSOptions o;
  std::string me;
  optim::Optimizer* optimizer = nullptr;
  detail::Layout layout;
  std::vector<std::string> names;  // by parameter, for errors
  size_t esize = 0;
  std::vector<detail::Link> links;  // by server
  std::vector<Tensor> buffers;      // by server: its shard, flat
  int64_t clock = 0;
  bool started = false, finished = false, failed = false;
  std::vector<ShardState> resume_from;

  // Copies between the parameters (or their grads) and server k's flat shard.
  template <typename Get>
  void gather(int k, Get tensor_of) {
    auto* out = static_cast<uint8_t*>(buffers[k].raw_data_ptr());
    for (const Slice& s : layout.plan.servers[k]) {
      const Tensor t = tensor_of(s.param);
      std::memcpy(out, static_cast<const uint8_t*>(t.raw_data_ptr()) + s.begin * esize, s.numel() * esize);
      out += s.numel() * esize;
    }
  }
  template <typename Get>
  void scatter(int k, const void* src, Get tensor_of) {
    const auto* in = static_cast<const uint8_t*>(src);
    for (const Slice& s : layout.plan.servers[k]) {
      const Tensor t = tensor_of(s.param);
      std::memcpy(static_cast<uint8_t*>(t.raw_data_ptr()) + s.begin * esize, in, s.numel() * esize);
      in += s.numel() * esize;
    }
  }
  Tensor param(int i) const { return layout.params[i]; }
  // Parameter i's grad, contiguous (made so if it was not).
  Tensor grad(int i) const {
    const Tensor& p = layout.params[i];
    Tensor g = p.grad();
    KILN_CHECK(g.defined(), me, ": parameter '", names[i], "' (shape ", shape_str(p.sizes()),
               ") has no gradient at step ", clock,
               "; every parameter the optimizer holds must get one (is it unused in the forward, or frozen?)");
    KILN_CHECK(g.dtype() == layout.dtype && g.numel() == p.numel(), me, ": the gradient of '", names[i],
               "' does not match its parameter");
    if (!g.is_contiguous() || !g.device().is_cpu()) {
      g = g.contiguous();
      p.set_grad(g);
    }
    return g;
  }

  Tensor reply_into(int k) const { return buffers[k]; }

  void receive_reply(int k, uint64_t seq, int64_t count, void* dest, const std::string& what) {
    const detail::Link& l = links[k];
    l.recv_expected(l.header(OpKind::PsReply, seq, layout.dtype, count), dest, what);
  }

  // Runs `body`; a failure is reported to the job once, the connections shut, and the error rethrown with the
  // job's first failure when that was another process's.
  template <typename Body>
  void guarded(Body body) {
    KILN_CHECK(!failed, me, ": the parameter server failed earlier; this worker cannot go on");
    KILN_CHECK(!finished, me, ": finish() was called; no more steps");
    try {
      body();
    } catch (const std::exception& e) {
      failed = true;
      const std::string first = detail::recorded_failure(*store, o.name);
      detail::report_failure(*store, o.name, e.what());
      for (const auto& l : links) l.shut_down();
      KILN_CHECK(false, e.what(), first.empty() || first == e.what() ? std::string()
                                                                      : "; the job's first failure: " + first);
    }
  }

  void connect() {
    const auto deadline = Clock::now() + o.timeout;
    const uint32_t digest = detail::agreement_digest(o, layout);
    const Bytes id = detail::wait_for_key(*store, o.name, detail::job_id_key(o.name), o.timeout, me,
                                          "server 0's job id");
    KILN_CHECK(id.size() == sizeof(uint64_t), me, ": malformed job id in the store");
    uint64_t job_id = 0;
    std::memcpy(&job_id, id.data(), sizeof job_id);
    for (int k = 0; k < role.num_servers; ++k) {
      const std::string what = me + " connecting to server " + std::to_string(k);
      const Bytes addr = detail::wait_for_key(*store, o.name, detail::address_key(o.name, k), o.timeout, me,
                                              "the address of server " + std::to_string(k));
      const std::string text(addr.begin(), addr.end());
      const size_t colon = text.rfind(':');
      KILN_CHECK(colon != std::string::npos, what, ": malformed address '", text, "' in the store");
      tcp::Socket s = tcp::connect_to(text.substr(0, colon), static_cast<uint16_t>(std::stoi(text.substr(colon + 1))),
                                      deadline, what);
      tcp::Handshake mine = tcp::make_handshake(job_id, role.global_rank(), k, role.world_size(), o.name);
      mine.purpose = digest;
      tcp::send_all(s, &mine, sizeof mine, deadline, what);
      tcp::Handshake reply;
      tcp::recv_all(s, &reply, sizeof reply, deadline, what + " (waiting for its handshake)");
      tcp::check_handshake(reply, mine, role.global_rank(), k);
      s.set_nodelay();
      links[k].socket = std::move(s);
    }
  }

  void start() {
    if (role.index == 0) {
      KILN_CHECK(resume_from.empty() || static_cast<int>(resume_from.size()) == role.num_servers, me, ": resuming ",
                 resume_from.size(), " server shards with ", role.num_servers, " servers");
      for (int k = 0; k < role.num_servers; ++k) {
        const detail::Link& l = links[k];
        const int64_t n = layout.shard_numel[k];
        Bytes state;
        if (!resume_from.empty()) {
          const Tensor v = resume_from[k].values.contiguous();
          KILN_CHECK(v.numel() == n && v.dtype() == layout.dtype, me, ": the saved shard of server ", k, " has ",
                     v.numel(), " ", dtype_name(v.dtype()), " values, the plan gives it ", n, " ",
                     dtype_name(layout.dtype), " (was the checkpoint made with another model or number of servers?)");
          if (n > 0) std::memcpy(buffers[k].raw_data_ptr(), v.raw_data_ptr(), v.nbytes());
          state = detail::encode_state(resume_from[k].optimizer);
        } else {
          gather(k, [&](int i) { return param(i); });
        }
        const bool with_state = !resume_from.empty();
        l.send(l.header(OpKind::PsInit, 0, layout.dtype, n, with_state ? 1 : 0), buffers[k].raw_data_ptr(),
               static_cast<size_t>(n) * esize);
        if (with_state) {
          l.send(l.header(OpKind::PsState, 0, kUInt8, static_cast<int64_t>(state.size())), state.data(),
                 state.size());
        }
      }
      for (int k = 0; k < role.num_servers; ++k) {
        receive_reply(k, 0, 0, nullptr, "its acknowledgement of the parameters");
      }
      resume_from.clear();
    }
    for (int k = 0; k < role.num_servers; ++k) {
      const detail::Link& l = links[k];
      l.send(l.header(OpKind::PsPull, 0, layout.dtype, 0), nullptr, 0);
    }
    NoGradGuard no_grad;
    for (int k = 0; k < role.num_servers; ++k) {
      const int64_t n = layout.shard_numel[k];
      receive_reply(k, 0, n, buffers[k].raw_data_ptr(), "the initial parameters");
      scatter(k, buffers[k].raw_data_ptr(), [&](int i) { return param(i); });
    }
    started = true;
  }

  // Pushes every gradient (with the learning rates when the servers step) and takes the answer: the new
  // parameters, or the mean gradient.
  void push(bool with_options) {
    // Every group's options in key order (what the server's groups take: schedulers move lr, and some
    // momentum or betas).
    std::vector<double> options;
    for (const auto& g : optimizer->param_groups()) {
      for (const auto& [key, value] : g.options) options.push_back(value);
    }
    for (int k = 0; k < role.num_servers; ++k) {
      const detail::Link& l = links[k];
      const int64_t n = layout.shard_numel[k];
      gather(k, [&](int i) { return grad(i); });
      if (with_options) {
        l.send(l.header(OpKind::PsOptions, static_cast<uint64_t>(clock), kFloat64,
                        static_cast<int64_t>(options.size())),
               options.data(), options.size() * sizeof(double));
      }
      l.send(l.header(OpKind::PsPush, static_cast<uint64_t>(clock), layout.dtype, n), buffers[k].raw_data_ptr(),
             static_cast<size_t>(n) * esize);
    }
    NoGradGuard no_grad;
    for (int k = 0; k < role.num_servers; ++k) {
      const int64_t n = layout.shard_numel[k];
      receive_reply(k, static_cast<uint64_t>(clock), n, buffers[k].raw_data_ptr(),
                    with_options ? "the parameters after step " + std::to_string(clock)
                                 : "the mean gradient of step " + std::to_string(clock));
      if (with_options) {
        scatter(k, buffers[k].raw_data_ptr(), [&](int i) { return param(i); });
      } else {
        scatter(k, buffers[k].raw_data_ptr(), [&](int i) { return grad(i); });
      }
    }
    ++clock;
  }
};

Worker::Worker(std::shared_ptr<Store> store, Role role, optim::Optimizer& optimizer, PSOptions options,
               const nn::Module* model)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  KILN_CHECK(store != nullptr, "ps::Worker: no store");
  KILN_CHECK(!role.is_server(), "ps::Worker: made by ", role.describe());
  KILN_CHECK(options.optimizer == Placement::Server || options.mode == Mode::Sync,
             "parameter server: the optimizer runs on the workers only in sync mode (mode is ",
             mode_name(options.mode), ")");
  s.store = std::move(store);
  s.role = role;
  s.o = options;
  s.me = "parameter server '" + options.name + "': " + role.describe();
  s.optimizer = &optimizer;
  try {
    s.layout = detail::layout_of(optimizer, role.num_servers, options, s.me);
  } catch (const std::exception& e) {
    detail::report_failure(*s.store, options.name, s.me + " failed to start: " + e.what());
    throw;
  }
  s.esize = dtype_size(s.layout.dtype);
  s.names.resize(s.layout.params.size());
  for (size_t i = 0; i < s.names.size(); ++i) s.names[i].append("#").append(std::to_string(i));
  if (model != nullptr) {
    for (const auto& [name, p] : model->named_parameters()) {
      for (size_t i = 0; i < s.layout.params.size(); ++i) {
        if (s.layout.params[i].impl() == p.impl()) s.names[i] = name;
      }
    }
  }
  s.links.resize(role.num_servers);
  for (int k = 0; k < role.num_servers; ++k) {
    auto& l = s.links[k];
    l.name = options.name, l.me = s.me, l.timeout = options.timeout;
    l.peer = "server " + std::to_string(k) + " (rank " + std::to_string(k) + ")";
    s.buffers.push_back(zeros({s.layout.shard_numel[k]}, TensorOptions(s.layout.dtype)));
  }
  s.guarded([&] { s.connect(); });
}

void Worker::abort(const std::string& why) {
  Impl& s = *impl_;
  if (s.failed || s.finished) return;
  s.failed = true;
  detail::report_failure(*s.store, s.o.name, s.me + " failed: " + why);
  for (const auto& l : s.links) l.shut_down();
}

Worker::~Worker() {
  if (!impl_->failed && !impl_->finished) {
    try {
      finish();
    } catch (...) {
      // A destructor must not throw; the servers see this worker's connections close.
    }
  }
  for (const auto& l : impl_->links) l.shut_down();
}

void Worker::start() {
  if (impl_->started) return;
  impl_->guarded([&] { impl_->start(); });
}

void Worker::resume(std::vector<ShardState> shards) {
  KILN_CHECK(!impl_->started, impl_->me, ": resume() after start()");
  if (impl_->role.index == 0) impl_->resume_from = std::move(shards);
}

void Worker::step() {
  Impl& s = *impl_;
  KILN_CHECK(s.started, s.me, ": step() before start(); call start() before the first forward, so that the ",
             "gradients are computed on the parameters the servers hold");
  s.guarded([&] { s.push(s.o.optimizer == Placement::Server); });
  if (s.o.optimizer == Placement::Worker) s.optimizer->step();
}

void Worker::exchange_gradients() {
  Impl& s = *impl_;
  KILN_CHECK(s.started, s.me, ": exchange_gradients() before start(); call start() before the first forward");
  KILN_CHECK(s.o.optimizer == Placement::Worker, s.me,
             ": exchange_gradients() is for an optimizer on the workers; with the optimizer on the servers, step()");
  s.guarded([&] { s.push(false); });
}

std::vector<ShardState> Worker::fetch_shards() {
  start();
  Impl& s = *impl_;
  std::vector<ShardState> out(s.role.num_servers);
  s.guarded([&] {
    for (int k = 0; k < s.role.num_servers; ++k) {
      const detail::Link& l = s.links[k];
      l.send(l.header(OpKind::PsFetch, static_cast<uint64_t>(s.clock), s.layout.dtype, 0), nullptr, 0);
    }
    for (int k = 0; k < s.role.num_servers; ++k) {
      const detail::Link& l = s.links[k];
      out[k].values = zeros({s.layout.shard_numel[k]}, TensorOptions(s.layout.dtype));
      s.receive_reply(k, static_cast<uint64_t>(s.clock), s.layout.shard_numel[k], out[k].values.raw_data_ptr(),
                      "its parameters for a checkpoint");
      const FrameHeader h = l.recv_header("its optimizer state for a checkpoint");
      KILN_CHECK(h.kind == OpKind::PsState, s.me, ": expected the optimizer state from server ", k, ", received ",
                 tcp::describe_frame(h));
      Bytes b(h.payload_bytes);
      l.recv_payload(h, b.data());
      out[k].optimizer = detail::decode_state(b, s.me + ": the optimizer state of server " + std::to_string(k));
    }
  });
  return out;
}

void Worker::finish() {
  Impl& s = *impl_;
  if (s.finished || s.failed) return;
  s.guarded([&] {
    for (int k = 0; k < s.role.num_servers; ++k) {
      const detail::Link& l = s.links[k];
      l.send(l.header(OpKind::PsDone, static_cast<uint64_t>(s.clock), s.layout.dtype, 0), nullptr, 0);
    }
    for (int k = 0; k < s.role.num_servers; ++k) {
      s.receive_reply(k, static_cast<uint64_t>(s.clock), 0, nullptr, "its goodbye");
    }
  });
  s.finished = true;
}

int64_t Worker::clock() const { return impl_->clock; }
const ShardPlan& Worker::plan() const { return impl_->layout.plan; }
const Role& Worker::role() const { return impl_->role; }

}  // namespace kiln::distributed::ps
