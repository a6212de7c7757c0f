// ProcessGroupGloo: kiln's store as Gloo's rendezvous, the mesh, and each op as Gloo calls. See the header.
#include "kiln/distributed/gloo/process_group_gloo.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::gloo_backend {

namespace {

// Gloo's rendezvous store over kiln's: every key under `prefix`, every wait bounded by the group's timeout
// (kiln's get alone would wait for the store's own, usually longer).
class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<distributed::Store> store, std::string prefix, Duration timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    store_->wait({prefix_ + key}, timeout_);
    const Bytes b = store_->get(prefix_ + key);
    return {b.begin(), b.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    store_->wait(prefixed, timeout);
  }

 private:
  std::shared_ptr<distributed::Store> store_;
  std::string prefix_;
  Duration timeout_;
};

// Point-to-point slots: the collectives use prefixes 0x01-0x08 (gloo/types.h); a tag gets a slot of its own.
constexpr uint8_t kSendRecvSlotPrefix = 0x40;

// Gloo's options take typed pointers; only the element width matters to it (the reduction is ours), so a
// tensor goes in as unsigned integers of its dtype's size. set(ptr, count) is called with the typed pointer.
template <typename Set>
void with_element_width(DType dtype, void* data, size_t count, Set&& set) {
  switch (dtype_size(dtype)) {
    case 1: set(static_cast<uint8_t*>(data), count); return;
    case 2: set(static_cast<uint16_t*>(data), count); return;
    case 4: set(static_cast<uint32_t*>(data), count); return;
    case 8: set(static_cast<uint64_t*>(data), count); return;
  }
  KILN_CHECK(false, "gloo: ", dtype_name(dtype), " has an element size Gloo cannot carry");
}

// out = a (op) b over n elements: the tcp backend's combine, so both backends reduce alike.
std::function<void(void*, const void*, const void*, size_t)> reduce_function(DType dtype, ReduceOp op) {
  return [dtype, op](void* out, const void* a, const void* b, size_t n) {
    tcp::combine(out, a, b, static_cast<int64_t>(n), dtype, op);
  };
}

// In-place allreduce of `count` elements at `data` (count > 0); avg divides afterwards.
void allreduce_in_place(const std::shared_ptr<::gloo::Context>& context, void* data, int64_t count, DType dtype,
                        ReduceOp op, Duration timeout, int size) {
  ::gloo::AllreduceOptions o(context);
  with_element_width(dtype, data, static_cast<size_t>(count), [&](auto* p, size_t n) { o.setOutput(p, n); });
  o.setReduceFunction(reduce_function(dtype, op));
  o.setTimeout(timeout);
  ::gloo::allreduce(o);
  if (op == ReduceOp::Avg) tcp::divide_by(data, count, dtype, size);
}

// "[address]:port", as Gloo writes an address (Pair::address(), a peer in its errors); twice, with the port's
// bytes in either order: Debian's Gloo prints the network-order value as it is (port 41729 shows as 419).
std::vector<std::string> format_end(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = in.sin_port;
  } else {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
    port = in6.sin6_port;
  }
  std::string prefix("[");  // (appended, not "[" + host: GCC 12 warns falsely of an overlapping memcpy)
  prefix.append(host).append("]:");
  std::vector<std::string> forms{prefix + std::to_string(ntohs(port))};
  if (ntohs(port) != port) forms.push_back(prefix + std::to_string(port));
  return forms;
}

// A connected TCP socket of this process: its descriptor and both ends, each in format_end's forms.
struct Connection {
  int fd;
  std::vector<std::string> near, far;
};

// Every connected TCP socket of this process (Gloo's among them; Gloo does not say which are its own).
// Linux: /proc/self/fd.
std::vector<Connection> connections() {
  std::vector<Connection> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage near{}, far{};
    socklen_t near_len = sizeof near, far_len = sizeof far;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&near), &near_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&far), &far_len) != 0)
      continue;  // not connected (a listener), or gone meanwhile
    if (near.ss_family != AF_INET && near.ss_family != AF_INET6) continue;
    found.push_back({fd, format_end(near), format_end(far)});
  }
  return found;
}

bool has_form(const std::vector<std::string>& forms, const std::string& address) {
  return std::find(forms.begin(), forms.end(), address) != forms.end();
}

// The lines of a store value written as "line\n" each.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(text.substr(at, end - at));
  return lines;
}

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size), options_(std::move(options)) {
  KILN_CHECK(store != nullptr, "ProcessGroupGloo: no store");
  KILN_CHECK(!options_.name.empty(), "ProcessGroupGloo: the group needs a name");
  KILN_CHECK(options_.timeout.count() > 0, "ProcessGroupGloo: timeout must be positive, got ",
             options_.timeout.count(), " ms");
  // The n-th group of this name on this rank meets the n-th on the others, under keys of its own.
  const int64_t incarnation = store->add(options_.name + "/gloo/rank" + std::to_string(rank) + "/made", 1);
  keys_ = options_.name + "/gloo/" + std::to_string(incarnation) + "/";
  StoreAdapter adapter(store, keys_, options_.timeout);
  try {
    const BlockSigpipe no_sigpipe;  // for gloo's own threads too: its device's loop thread starts here
    ::gloo::transport::tcp::attr attr(options_.host.c_str());
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options_.timeout);
    context->connectFullMesh(adapter, device);
    context_ = std::move(context);
  } catch (const std::exception& e) {
    KILN_CHECK(false, "ProcessGroupGloo: rank ", rank, " of ", size, " could not connect group '", options_.name,
               "' on ", options_.host, ": ", e.what());
  }
  find_connections(store);
  try {
    FailureSharing sharing;
    sharing.reports = std::make_shared<GroupFailure>(store, keys_ + "error", rank);
    sharing.close = [this] { end_connections(); };
    sharing.explain = [this](const std::string& what) { return explain_peer(what); };
    worker_ = std::make_unique<OpWorker>("gloo", rank, std::move(sharing));
  } catch (...) {
    for (const auto& [peer, fd] : connection_fds_) ::close(fd);  // no destructor runs for a throwing constructor
    throw;
  }
}

void ProcessGroupGloo::find_connections(const std::shared_ptr<Store>& store) {
  // Each rank publishes, for each peer r, the address of its pair with r: once connected, Gloo's pair takes its
  // socket's own (near) end as its address. So the socket of this rank's pair with r is the one whose near end
  // is this rank's address for r and whose far end is r's address for this rank: both ends must match.
  std::vector<std::string> own(static_cast<size_t>(size_));
  std::string pairs;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) own[r] = context_->getPair(r)->address().str();
    pairs += own[r] + "\n";
  }
  store->set(keys_ + "pairs/" + std::to_string(rank_), pairs);
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(keys_ + "pairs/" + std::to_string(r));
  store->wait(keys, options_.timeout);
  std::vector<std::string> theirs(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const std::vector<std::string> lines = lines_of(store->get_string(keys[r]));
    if (r != rank_ && static_cast<int>(lines.size()) == size_) theirs[r] = lines[rank_];
  }

  // The sockets are listed only now, and each one taken is dup'ed at once and checked again through the
  // duplicate: another thread may close a descriptor meanwhile and the number be reused.
  std::vector<std::pair<int, int>> found;
  try {
    const std::vector<Connection> sockets = connections();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || own[r].empty() || theirs[r].empty()) continue;
      const auto is_pair = [&](const Connection& c) { return has_form(c.near, own[r]) && has_form(c.far, theirs[r]); };
      const auto match = std::find_if(sockets.begin(), sockets.end(), is_pair);
      if (match == sockets.end() || std::find_if(std::next(match), sockets.end(), is_pair) != sockets.end())
        continue;  // none, or not one alone: leave this connection to Gloo (its calls keep their deadline)
      const int fd = fcntl(match->fd, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_storage near{}, far{};
      socklen_t near_len = sizeof near, far_len = sizeof far;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&near), &near_len) == 0 &&
          getpeername(fd, reinterpret_cast<sockaddr*>(&far), &far_len) == 0 &&
          is_pair(Connection{fd, format_end(near), format_end(far)})) {
        found.emplace_back(r, fd);
      } else {
        ::close(fd);
      }
    }
  } catch (...) {
    for (const auto& [peer, fd] : found) ::close(fd);
    throw;
  }
  connection_fds_ = std::move(found);
}

void ProcessGroupGloo::end_connections() {
  // Shut down, not closed: Gloo's loop then reads the end of each connection on this side too, and fails every
  // call waiting on it (Context::closeConnections only closes the sockets, and a call of this rank waiting on
  // one would wait out its deadline); the peers read the end as well.
  for (const auto& [peer, fd] : connection_fds_) ::shutdown(fd, SHUT_RDWR);
}

std::string ProcessGroupGloo::explain_peer(const std::string& what) const {
  // Gloo names a peer by an address (which end of which connection depends on who connected whom): kiln's own
  // descriptors say instead which connections the far side has ended (a dead process, or a rank that ended its
  // connections on failing).
  std::string ended;
  for (const auto& [peer, fd] : connection_fds_) {
    pollfd p{fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
      ended += std::string(ended.empty() ? "" : "; ") + "the connection to rank " + std::to_string(peer) + " had ended";
  }
  return ended.empty() ? what : what + " (" + ended + ")";
}

ProcessGroupGloo::~ProcessGroupGloo() {
  worker_->stop();
  for (const auto& [peer, fd] : connection_fds_) ::close(fd);
}

std::shared_ptr<Work> ProcessGroupGloo::allreduce(Tensor tensor, ReduceOp op) {
  check_cpu_tensor(tensor, "gloo", "allreduce");
  tcp::check_reduce_op(op, tensor.dtype(), "allreduce");
  return worker_->enqueue("allreduce", "", "", [this, tensor, op](const std::string&) -> Completion {
    if (tensor.numel() > 0)
      allreduce_in_place(context_, tensor.raw_data_ptr(), tensor.numel(), tensor.dtype(), op, options_.timeout, size_);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(Tensor tensor, int root) {
  check_cpu_tensor(tensor, "gloo", "broadcast");
  check_rank_in_group(root, "broadcast");
  return worker_->enqueue("broadcast", "", " from rank " + std::to_string(root),
                          [this, tensor, root](const std::string&) -> Completion {
                            if (tensor.nbytes() == 0) return {};
                            ::gloo::BroadcastOptions o(context_);
                            o.setOutput(static_cast<uint8_t*>(tensor.raw_data_ptr()), tensor.nbytes());
                            o.setRoot(root);
                            o.setTimeout(options_.timeout);
                            ::gloo::broadcast(o);
                            return {};
                          });
}

std::shared_ptr<Work> ProcessGroupGloo::reduce(Tensor tensor, int root, ReduceOp op) {
  check_cpu_tensor(tensor, "gloo", "reduce");
  check_rank_in_group(root, "reduce");
  tcp::check_reduce_op(op, tensor.dtype(), "reduce");
  return worker_->enqueue("reduce", "", " to rank " + std::to_string(root),
                          [this, tensor, root, op](const std::string&) -> Completion {
    if (tensor.numel() == 0) return {};
    // Gloo's reduce works in its output buffer on every rank: a scratch one, so the others' tensors stay.
    std::vector<uint8_t> result(tensor.nbytes());
    ::gloo::ReduceOptions o(context_);
    const size_t n = static_cast<size_t>(tensor.numel());
    with_element_width(tensor.dtype(), tensor.raw_data_ptr(), n, [&](auto* p, size_t k) { o.setInput(p, k); });
    with_element_width(tensor.dtype(), result.data(), n, [&](auto* p, size_t k) { o.setOutput(p, k); });
    o.setRoot(root);
    o.setReduceFunction(reduce_function(tensor.dtype(), op));
    o.setTimeout(options_.timeout);
    ::gloo::reduce(o);
    if (rank_ == root) {
      std::memcpy(tensor.raw_data_ptr(), result.data(), result.size());
      if (op == ReduceOp::Avg) tcp::divide_by(tensor.raw_data_ptr(), tensor.numel(), tensor.dtype(), size_);
    }
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupGloo::allgather(std::vector<Tensor> outputs, Tensor input) {
  check_cpu_tensor(input, "gloo", "allgather");
  check_tensor_list(outputs, input, size_, "gloo", "allgather", "output");
  return worker_->enqueue("allgather", "", "", [this, outputs, input](const std::string&) -> Completion {
    const size_t bytes = input.nbytes();
    if (bytes == 0) return {};
    std::vector<uint8_t> all(bytes * static_cast<size_t>(size_));
    ::gloo::AllgatherOptions o(context_);
    o.setInput(static_cast<uint8_t*>(input.raw_data_ptr()), bytes);
    o.setOutput(all.data(), all.size());
    o.setTimeout(options_.timeout);
    ::gloo::allgather(o);
    for (int r = 0; r < size_; ++r) std::memcpy(outputs[r].raw_data_ptr(), all.data() + r * bytes, bytes);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_cpu_tensor(output, "gloo", "reduce_scatter");
  tcp::check_reduce_op(op, output.dtype(), "reduce_scatter");
  check_tensor_list(inputs, output, size_, "gloo", "reduce_scatter", "input");
  return worker_->enqueue("reduce_scatter", "", "", [this, output, inputs, op](const std::string&) -> Completion {
    const size_t bytes = output.nbytes();
    if (bytes == 0) return {};
    // No public reduce-scatter in Gloo: allreduce all the blocks, keep this rank's.
    std::vector<uint8_t> all(bytes * static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) std::memcpy(all.data() + r * bytes, inputs[r].raw_data_ptr(), bytes);
    allreduce_in_place(context_, all.data(), output.numel() * size_, output.dtype(), op, options_.timeout, size_);
    std::memcpy(output.raw_data_ptr(), all.data() + rank_ * bytes, bytes);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupGloo::barrier() {
  return worker_->enqueue("barrier", "", "", [this](const std::string&) -> Completion {
    ::gloo::BarrierOptions o(context_);
    o.setTimeout(options_.timeout);
    ::gloo::barrier(o);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupGloo::send(Tensor tensor, int dst, int tag) {
  check_cpu_tensor(tensor, "gloo", "send");
  check_peer(dst, true, "send");
  const std::string suffix = " to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
  return worker_->enqueue("send", "send " + std::to_string(dst), suffix,
                          [this, tensor, dst, tag](const std::string&) -> Completion {
    if (tensor.nbytes() == 0) return {};
    // Posted here, in issue order; waited for on the completion thread (see op_worker.h).
    std::shared_ptr<::gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(tensor.raw_data_ptr(), tensor.nbytes());
    buffer->send(dst, ::gloo::Slot::build(kSendRecvSlotPrefix, static_cast<uint32_t>(tag)));
    const Duration timeout = options_.timeout;
    return [buffer, tensor, timeout] { KILN_CHECK(buffer->waitSend(timeout), "Gloo aborted the send"); };
  }, "send " + std::to_string(dst) + " tag " + std::to_string(tag));
}

std::shared_ptr<Work> ProcessGroupGloo::recv(Tensor tensor, int src, int tag) {
  check_cpu_tensor(tensor, "gloo", "recv");
  check_peer(src, false, "recv");
  const std::string suffix = " from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
  return worker_->enqueue("recv", "recv " + std::to_string(src), suffix,
                          [this, tensor, src, tag](const std::string&) -> Completion {
    if (tensor.nbytes() == 0) return {};
    // Posted here and waited for on the completion thread, as a send is: a recv issued before a send (irecv,
    // then isend) must not hold up that send, which the peer's own recv may be waiting for.
    std::shared_ptr<::gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(tensor.raw_data_ptr(), tensor.nbytes());
    buffer->recv(src, ::gloo::Slot::build(kSendRecvSlotPrefix, static_cast<uint32_t>(tag)));
    const Duration timeout = options_.timeout;
    return [buffer, tensor, timeout] { KILN_CHECK(buffer->waitRecv(timeout), "Gloo aborted the recv"); };
  }, "recv " + std::to_string(src) + " tag " + std::to_string(tag));
}

}  // namespace kiln::distributed::gloo_backend
