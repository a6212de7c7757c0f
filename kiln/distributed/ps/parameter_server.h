// The parameter server: servers that each own a shard of the parameters, and workers that compute gradients,
// push them to the servers and pull fresh parameters back. The other way to train on several processes
// besides DDP (ddp.h): the workers never talk to each other, so they need not run in lockstep.
//
//   // on a server process (one per shard):
//   ps::Server server(store, role, optimizer, options);   // optimizer: over a model built like the workers'
//   server.run();                                         // serves until every worker has finished
//
//   // on a worker process:
//   ps::Worker worker(store, role, optimizer, options);
//   worker.start();                                       // pull the parameters before the first forward
//   for (auto& batch : loader) {
//     loss_fn(model, batch).backward();
//     worker.step();                                      // push the gradients, pull the new parameters
//     optimizer.zero_grad();
//   }
//   worker.finish();
//
// What is served is the optimizer's parameter list (its groups in order). A server and a worker are built
// from the same program, so both sides make the same optimizer over the same model: the server takes from it
// the shapes, the groups and, when the optimizer runs on the servers, the update rule and its options.
//
// Sharding (plan_shards): tensors of at least split_bytes are cut into one contiguous piece per server; the
// others are placed whole, the largest first, each on the server with the fewest bytes so far. Every worker and
// server computes the same plan from the same shapes.
//
// Consistency modes:
//   sync   a server applies step t once every worker has pushed its gradient of step t: their mean, summed
//          in worker order (so the bits do not depend on arrival order). The same update DDP makes with the
//          same optimizer, up to the order of the float additions (and as long as nothing changes a worker's
//          gradient between backward and step: clipping it clips one worker's part, not the mean).
//   async  each push is applied on arrival, alone (never two updates of one server's shard at once), and the
//          worker gets back the parameters as they are right after it.
//   ssp    as async, but a worker that has pushed c gradients gets its parameters only once the slowest worker
//          has pushed at least c - staleness (stale synchronous parallel; staleness 0 keeps the workers in
//          lockstep without averaging).
// Where the optimizer runs:
//   server (default)  servers keep the parameters and the optimizer's state, sharded; a push carries the
//                     worker's current optimizer options (so the workers' schedulers steer the servers).
//   worker            (sync only) servers only average the gradients; every worker steps its own optimizer on
//                     the mean, like DDP (and like DDP every worker holds the full optimizer state).
//
// Roles and wiring: a job of S servers and W workers has S + W ranks; ranks 0..S-1 are the servers, S..S+W-1
// the workers (`kiln launch --servers S --workers W` sets this up; under another launcher, KILN_PS_SERVERS
// says how many of the ranks are servers). Every server listens on an ephemeral port published in the store;
// every worker connects to every server, and each connection opens with the tcp backend's handshake (magic,
// protocol version, job id, ranks) and carries the tcp backend's frame headers, so a message that is not the
// one expected is an error naming both sides.
//
// Faults: every wait has the options' deadline. The first process to fail writes "<name>/error" in the store
// (the first report wins) and closes its connections, so that its peers fail at once with an error that
// names it, instead of each waiting out its deadline.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::distributed::ps {

enum class Mode { Sync, Async, SSP };
enum class Placement { Server, Worker };
const char* mode_name(Mode mode);            // "sync", "async", "ssp"
Mode parse_mode(const std::string& text);    // the inverse; a kiln::Error listing the modes
const char* placement_name(Placement p);     // "server", "worker"
Placement parse_placement(const std::string& text);

struct PSOptions {
  Mode mode = Mode::Sync;
  int staleness = 0;  // ssp: how many pushes a worker may be ahead of the slowest
  Placement optimizer = Placement::Server;
  Duration timeout = kDefaultTimeout;
  // async and ssp: once a worker has finished, how long a server waits for another worker's next request
  // before it calls that worker stopped or hung and fails the job. Generous by default: a worker may validate
  // or checkpoint for long between two requests. (In sync mode the other workers' waits, with `timeout`,
  // catch a silent worker.)
  Duration idle_timeout = std::chrono::hours(1);
  // The name of this parameter server in the store (two in one job need different names).
  std::string name = "ps";
  // The address each server listens on and publishes.
  std::string host = "127.0.0.1";
  // Tensors of at least this many bytes are split across the servers.
  size_t split_bytes = size_t{1} << 18;
};

// Which part a process plays.
struct Role {
  enum class Kind { Server, Worker };
  Kind kind = Kind::Worker;
  int index = 0;  // among the servers, or among the workers
  int num_servers = 1;
  int num_workers = 1;
  bool is_server() const { return kind == Kind::Server; }
  int global_rank() const { return is_server() ? index : num_servers + index; }
  int world_size() const { return num_servers + num_workers; }
  std::string describe() const;  // "server 1 of 2", "worker 0 of 4"
};
// The role of global rank `rank` in a job of `world_size` ranks whose first `num_servers` are servers.
Role role_of(int rank, int world_size, int num_servers);

// ---- sharding ----

// A contiguous piece [begin, end) of parameter `param` (counted in elements of the flattened tensor).
struct Slice {
  int param = 0;
  int64_t begin = 0, end = 0;
  int64_t numel() const { return end - begin; }
};
struct ShardPlan {
  std::vector<std::vector<Slice>> servers;  // servers[k]: server k's slices, in order of (param, begin)
  std::vector<int64_t> bytes;               // bytes[k]: what server k holds
};
// The plan for tensors of `numels` elements of `element_size` bytes each over `num_servers` servers.
ShardPlan plan_shards(const std::vector<int64_t>& numels, size_t element_size, int num_servers, size_t split_bytes);

// ---- servers ----

// What a server reports about its run (the tests' instruments).
struct ServerStats {
  int64_t updates = 0;           // optimizer steps (or gradient means) applied
  int64_t max_staleness = 0;     // ssp/async: the largest (pushes of the replying worker - pushes of the slowest)
  int max_concurrent_updates = 0;  // the most updates of this shard ever running at once (must be 1)
};

// One server's parameters and optimizer state: what a checkpoint keeps of it.
struct ShardState {
  Tensor values;                   // the shard's parameters, flattened and concatenated in slice order
  optim::OptimizerState optimizer; // its optimizer's state (empty when the optimizer runs on the workers)
};

// The store key under which the parameter server `name` records the job's first failure ("<name>/error").
std::string failure_key(const std::string& name);
// Records `message` there, unless another failure was recorded first; never throws (the store may be gone).
void record_failure(Store& store, const std::string& name, const std::string& message);

// A shard's state as one safetensors image (tensor "values", the optimizer's tensors and numbers under
// "optimizer."): how a program can keep what fetch_shards() returns. decode_shard's errors start with `where`.
Bytes encode_shard(const ShardState& shard);
ShardState decode_shard(const Bytes& bytes, const std::string& where);

class Server {
 public:
  // role: a server's. optimizer: over parameters shaped as the workers' (its values are not used: worker 0
  // sends the initial parameters). Listens and publishes its address at once.
  Server(std::shared_ptr<Store> store, Role role, optim::Optimizer& optimizer, PSOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Accepts every worker and serves them until each has finished; a failure anywhere (a worker that died,
  // another process's report in the store, the deadline) is rethrown here.
  void run();
  ServerStats stats() const;
  const ShardPlan& plan() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- workers ----

class Worker {
 public:
  // role: a worker's. optimizer: over this worker's model. `model`, when given, names the parameters in
  // errors. Connects to every server (waiting for them up to the deadline).
  Worker(std::shared_ptr<Store> store, Role role, optim::Optimizer& optimizer, PSOptions options = {},
         const nn::Module* model = nullptr);
  // Tells the servers this worker is done (finish()), unless it failed or aborted.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Worker 0 sends the servers their initial parameters (this worker's, or the shard states given to
  // resume()); then every worker pulls the parameters. Call it once before the first forward: step()
  // refuses to run without it (gradients computed on parameters the servers do not hold would be wrong).
  void start();
  // Before start(), on worker 0: initialize the servers from these states (a checkpoint's) instead.
  void resume(std::vector<ShardState> shards);

  // One training step after backward(): every parameter's grad goes to its servers. Optimizer on the
  // servers: the parameters come back updated. On the workers: the mean gradient comes back into grad and
  // this worker's optimizer steps.
  void step();
  // The gradient exchange alone (optimizer on the workers): grads become the mean over workers; the caller
  // steps the optimizer.
  void exchange_gradients();

  // Worker 0: every server's current state, for a checkpoint.
  std::vector<ShardState> fetch_shards();
  // Tells every server this worker is done.
  void finish();
  // Leaves the job after a failure of this worker's own (an exception in its training loop): records `why` as
  // the job's failure, unless one was recorded first, and closes the connections, so that the servers, and
  // through them the other workers, fail at once naming this worker. No-op after finish() or a failure.
  void abort(const std::string& why);

  int64_t clock() const;  // pushes made so far
  const ShardPlan& plan() const;
  const Role& role() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::distributed::ps
