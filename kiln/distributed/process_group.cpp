#include "kiln/distributed/process_group.h"

#include <map>
#include <mutex>
#include <set>

#include "kiln/distributed/tcp/process_group_tcp.h"
#ifdef KILN_WITH_MPI
#include "kiln/distributed/mpi/process_group_mpi.h"
#endif
#ifdef KILN_WITH_GLOO
#include "kiln/distributed/gloo/process_group_gloo.h"
#endif
#if KILN_WITH_NCCL
#include "kiln/distributed/nccl/process_group_nccl.h"
#endif
#include "kiln/tensor/error.h"

namespace kiln::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Product: return "product";
  }
  return "?";
}

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
  std::set<std::string> storeless;  // backends whose ranks meet without a store (mpi: mpirun's)
};

// The built-in backends register here, on first use: a static initializer in a backend's own file would be
// dropped by the linker from a static library that nothing else references.
void register_builtin_backends(Registry& r);

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    register_builtin_backends(*reg);
    return reg;
  }();
  return *r;
}

void register_builtin_backends(Registry& r) {
  // tcp: kiln's own sockets; each rank listens on options.host.
  r.factories["tcp"] = [](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) {
    return std::make_shared<tcp::ProcessGroupTCP>(std::move(store), rank, size, options, options.host);
  };
#ifdef KILN_WITH_MPI
  // mpi: the ranks of mpirun's MPI_COMM_WORLD; the store is not used.
  r.factories["mpi"] = [](std::shared_ptr<Store>, int rank, int size, const ProcessGroupOptions& options) {
    return std::make_shared<mpi::ProcessGroupMPI>(rank, size, options);
  };
  r.storeless.insert("mpi");
#endif
#ifdef KILN_WITH_GLOO
  // gloo: Gloo's tcp transport on options.host, meeting through the store.
  r.factories["gloo"] = [](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) {
    return std::make_shared<gloo_backend::ProcessGroupGloo>(std::move(store), rank, size, options);
  };
#endif
#if KILN_WITH_NCCL
  // nccl: CUDA tensors through NCCL; communicators are made by the first op on each device.
  r.factories["nccl"] = [](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) {
    return std::make_shared<nccl::ProcessGroupNCCL>(std::move(store), rank, size, options);
  };
#endif
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory, bool needs_store) {
  KILN_CHECK(!name.empty() && factory, "register_backend: a backend needs a name and a factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[name] = std::move(factory);
  if (needs_store) r.storeless.erase(name);
  else r.storeless.insert(name);
}

bool backend_needs_store(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.storeless.count(name) == 0;
}

std::vector<std::string> backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

void ProcessGroup::check_rank_in_group(int r, const std::string& what) const {
  KILN_CHECK(r >= 0 && r < size_, what, ": rank ", r, " is not in a group of size ", size_);
}

void ProcessGroup::check_peer(int peer, bool sending, const std::string& what) const {
  check_rank_in_group(peer, what);
  KILN_CHECK(peer != rank_, what, ": rank ", rank_, sending ? " cannot send to itself" : " cannot receive from itself");
}

std::shared_ptr<ProcessGroup> new_group(const std::string& backend, std::shared_ptr<Store> store, int rank, int size,
                                        ProcessGroupOptions options) {
  KILN_CHECK(store != nullptr || !backend_needs_store(backend), "new_group(\"", backend, "\"): no store");
  KILN_CHECK(size >= 1 && rank >= 0 && rank < size, "new_group(\"", backend, "\"): rank ", rank,
             " is not in a world of size ", size);
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.factories.find(backend);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& [name, f] : r.factories) known += (known.empty() ? "" : ", ") + name;
      KILN_CHECK(false, "new_group: no backend '", backend, "' in this build (there are: ",
                 known.empty() ? "none" : known, ")");
    }
    factory = it->second;
  }
  return factory(std::move(store), rank, size, options);
}

}  // namespace kiln::distributed
