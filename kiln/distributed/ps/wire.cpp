// The parameter server's links, state encoding and failure reports: see wire.h.
#include "kiln/distributed/ps/wire.h"

#include <sys/socket.h>

#include <charconv>
#include <cstring>
#include <thread>

#include "kiln/serialize/safetensors.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed::ps {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Sync: return "sync";
    case Mode::Async: return "async";
    case Mode::SSP: return "ssp";
  }
  return "?";
}

Mode parse_mode(const std::string& text) {
  if (text == "sync") return Mode::Sync;
  if (text == "async") return Mode::Async;
  if (text == "ssp") return Mode::SSP;
  KILN_CHECK(false, "parameter server: mode '", text, "': expected 'sync', 'async' or 'ssp'");
  return Mode::Sync;
}

const char* placement_name(Placement p) { return p == Placement::Server ? "server" : "worker"; }

Placement parse_placement(const std::string& text) {
  if (text == "server") return Placement::Server;
  if (text == "worker") return Placement::Worker;
  KILN_CHECK(false, "parameter server: optimizer placement '", text, "': expected 'server' or 'worker'");
  return Placement::Server;
}

std::string Role::describe() const {
  return std::string(is_server() ? "server " : "worker ") + std::to_string(index) + " of " +
         std::to_string(is_server() ? num_servers : num_workers);
}

Role role_of(int rank, int world_size, int num_servers) {
  KILN_CHECK(num_servers >= 1 && num_servers < world_size, "parameter server: ", num_servers,
             " servers in a job of ", world_size, " processes leave no worker (expected 1 <= servers < ",
             world_size, ")");
  KILN_CHECK(rank >= 0 && rank < world_size, "parameter server: rank ", rank, " is outside a job of ", world_size);
  Role r;
  r.num_servers = num_servers;
  r.num_workers = world_size - num_servers;
  r.kind = rank < num_servers ? Role::Kind::Server : Role::Kind::Worker;
  r.index = rank < num_servers ? rank : rank - num_servers;
  return r;
}

namespace detail {

FrameHeader Link::header(OpKind kind, uint64_t seq, DType dtype, int64_t count, int32_t tag) const {
  FrameHeader h;
  h.group_id = tcp::group_id_of(name);
  h.kind = kind;
  h.seq = seq;
  h.dtype = dtype;
  h.count = count;
  h.tag = tag;
  h.payload_bytes = static_cast<uint64_t>(count) * dtype_size(dtype);
  return h;
}

void Link::send(FrameHeader h, const void* payload, size_t bytes) const {
  h.payload_bytes = bytes;
  const auto deadline = Clock::now() + timeout;
  const std::string what = me + " sending " + tcp::describe_frame(h) + " to " + peer;
  tcp::send_all(socket, &h, sizeof h, deadline, what);
  if (bytes > 0) tcp::send_all(socket, payload, bytes, deadline, what);
}

FrameHeader Link::recv_header(const std::string& waiting_for, bool idle) const {
  FrameHeader h;
  const auto deadline = idle ? Clock::now() + std::chrono::hours(24 * 365) : Clock::now() + timeout;
  tcp::recv_all(socket, &h, sizeof h, deadline,
                me + " waiting for " + waiting_for + " from " + peer +
                    (idle ? std::string() : " (deadline " + std::to_string(timeout.count()) + " ms)"));
  KILN_CHECK(h.magic == tcp::kFrameMagic && h.group_id == tcp::group_id_of(name), me,
             " received a corrupt header from ", peer, " (magic 0x", std::hex, h.magic, ", group 0x", h.group_id,
             std::dec, ") while waiting for ", waiting_for, ": the stream is out of step");
  KILN_CHECK(h.kind >= OpKind::PsInit && h.kind <= OpKind::PsState, me, " received ", tcp::describe_frame(h),
             " from ", peer, ", which is not a parameter-server message");
  KILN_CHECK(h.payload_bytes == static_cast<uint64_t>(h.count) * dtype_size(h.dtype) || h.kind == OpKind::PsState,
             me, " received ", tcp::describe_frame(h), " from ", peer, " announcing ", h.payload_bytes,
             " payload bytes, which is not count x dtype size");
  return h;
}

void Link::recv_payload(const FrameHeader& h, void* payload) const {
  if (h.payload_bytes == 0) return;
  tcp::recv_all(socket, payload, h.payload_bytes, Clock::now() + timeout,
                me + " receiving the payload of " + tcp::describe_frame(h) + " from " + peer);
}

void Link::recv_expected(const FrameHeader& expect, void* payload, const std::string& waiting_for) const {
  const FrameHeader h = recv_header(waiting_for);
  KILN_CHECK(h.kind == expect.kind && h.seq == expect.seq, me, " expected ", tcp::describe_frame(expect), " from ",
             peer, " but received ", tcp::describe_frame(h));
  KILN_CHECK(h.count == expect.count && h.dtype == expect.dtype && h.tag == expect.tag &&
                 h.payload_bytes == expect.payload_bytes,
             me, " expected ", tcp::describe_frame(expect), " from ", peer, " but received ", tcp::describe_frame(h),
             " (do both sides build the same model and optimizer?)");
  recv_payload(h, payload);
}

void Link::shut_down() const {
  if (socket.valid()) ::shutdown(socket.fd(), SHUT_RDWR);
}

Layout layout_of(const optim::Optimizer& optimizer, int num_servers, const PSOptions& options,
                 const std::string& who) {
  Layout l;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& p : groups[g].params) {
      l.params.push_back(p);
      l.group_of.push_back(static_cast<int>(g));
    }
  }
  KILN_CHECK(!l.params.empty(), who, ": the optimizer has no parameters");
  l.dtype = l.params[0].dtype();
  std::vector<int64_t> numels;
  for (size_t i = 0; i < l.params.size(); ++i) {
    const Tensor& p = l.params[i];
    KILN_CHECK(p.dtype() == l.dtype, who, ": parameter ", i, " is ", dtype_name(p.dtype()), " but parameter 0 is ",
               dtype_name(l.dtype), "; the parameter server needs one dtype for all");
    KILN_CHECK(p.device().is_cpu(), who, ": parameter ", i, " is on ", p.device().str(),
               "; the parameter server moves CPU tensors only");
    KILN_CHECK(p.is_contiguous(), who, ": parameter ", i, " is not contiguous");
    numels.push_back(p.numel());
  }
  l.plan = plan_shards(numels, dtype_size(l.dtype), num_servers, options.split_bytes);
  for (const auto& slices : l.plan.servers) {
    int64_t n = 0;
    for (const Slice& s : slices) n += s.numel();
    l.shard_numel.push_back(n);
  }
  return l;
}

// ---- state on the wire ----
// A safetensors image: the tensors under their names, the numbers as metadata in shortest round-trip text.

namespace {

std::string exact_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

double parse_exact(const std::string& text, const std::string& key, const std::string& where) {
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  KILN_CHECK(r.ec == std::errc() && r.ptr == text.data() + text.size(), where, ": the number '", key, "' is '", text,
             "', not a number");
  return v;
}

}  // namespace

Bytes encode_state(const optim::OptimizerState& state) {
  serialize::Metadata numbers;
  for (const auto& [k, v] : state.scalars) numbers[k] = exact_text(v);
  return serialize::to_bytes(state.tensors, numbers);
}

optim::OptimizerState decode_state(const Bytes& bytes, const std::string& where) {
  serialize::Loaded loaded;
  try {
    loaded = serialize::from_bytes(bytes);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  optim::OptimizerState st;
  st.tensors = std::move(loaded.tensors);
  for (const auto& [k, text] : loaded.metadata) st.scalars[k] = parse_exact(text, k, where);
  return st;
}

}  // namespace detail

std::string failure_key(const std::string& name) { return name + "/error"; }

void record_failure(Store& store, const std::string& name, const std::string& message) {
  detail::report_failure(store, name, message);
}

Bytes encode_shard(const ShardState& shard) {
  serialize::Metadata numbers;
  serialize::TensorMap tensors;
  for (const auto& [k, t] : shard.optimizer.tensors) tensors["optimizer." + k] = t;
  for (const auto& [k, v] : shard.optimizer.scalars) numbers["optimizer." + k] = detail::exact_text(v);
  if (shard.values.defined()) tensors["values"] = shard.values;
  return serialize::to_bytes(tensors, numbers);
}

ShardState decode_shard(const Bytes& bytes, const std::string& where) {
  serialize::Loaded loaded;
  try {
    loaded = serialize::from_bytes(bytes);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  ShardState shard;
  const std::string prefix = "optimizer.";
  for (auto& [k, t] : loaded.tensors) {
    if (k == "values") {
      shard.values = t;
    } else {
      KILN_CHECK(k.rfind(prefix, 0) == 0, where, ": unexpected tensor '", k, "' in a parameter-server shard");
      shard.optimizer.tensors[k.substr(prefix.size())] = t;
    }
  }
  for (const auto& [k, text] : loaded.metadata) {
    KILN_CHECK(k.rfind(prefix, 0) == 0, where, ": unexpected entry '", k, "' in a parameter-server shard");
    shard.optimizer.scalars[k.substr(prefix.size())] = detail::parse_exact(text, k, where);
  }
  KILN_CHECK(shard.values.defined(), where, ": the shard has no values");
  return shard;
}

namespace detail {

// ---- store keys and failure reports ----

std::string address_key(const std::string& name, int server) {
  return name + "/server/" + std::to_string(server) + "/addr";
}
std::string job_id_key(const std::string& name) { return name + "/job_id"; }

Bytes wait_for_key(Store& store, const std::string& name, const std::string& key, Duration timeout,
                   const std::string& who, const std::string& what) {
  const auto start = Clock::now();
  for (;;) {
    if (store.check({key})) return store.get(key);
    const std::string failure = recorded_failure(store, name);
    KILN_CHECK(failure.empty(), who, " gave up waiting for ", what, ": the job failed: ", failure);
    KILN_CHECK(Clock::now() - start < timeout, who, " waited ", timeout.count(), " ms for ", what, " (no '", key,
               "' in the store; did every process start?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

uint32_t agreement_digest(const PSOptions& o, const Layout& layout) {
  std::string text;
  for (const std::string& part : {std::string(mode_name(o.mode)), std::to_string(o.staleness),
                                  std::string(placement_name(o.optimizer)), std::to_string(o.split_bytes),
                                  std::string(dtype_name(layout.dtype))}) {
    text.append(part).append("/");
  }
  for (const Tensor& p : layout.params) text.append(shape_str(p.sizes())).append("/");
  return tcp::group_id_of(text);
}

void report_failure(Store& store, const std::string& name, const std::string& message) {
  try {
    store.compare_set(failure_key(name), Bytes{}, Bytes(message.begin(), message.end()));
  } catch (...) {
    // The store's host may be the process that died: the connections' EOFs still tell the peers.
  }
}

std::string recorded_failure(Store& store, const std::string& name) {
  try {
    if (!store.check({failure_key(name)})) return "";
    const Bytes b = store.get(failure_key(name));
    return std::string(b.begin(), b.end());
  } catch (...) {
    return "";
  }
}

}  // namespace detail
}  // namespace kiln::distributed::ps
