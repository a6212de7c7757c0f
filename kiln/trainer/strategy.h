// Strategy: how the Trainer spreads one fit over processes. The Trainer's loops call it at the few points
// where data parallelism differs from one process; everything else is the same code on every rank.
//
//   single  one process: every call below is a no-op, the user's loaders are used as they are.
//   ddp     one process per rank, started by `kiln launch --nproc N` (or torchrun, mpirun, srun: the rank comes
//           from the environment, kiln/distributed/env.h). Rank 0 serves a TCPStore at MASTER_ADDR:MASTER_PORT,
//           the ranks form a process group (TrainerOptions::ddp_backend: "tcp", or "gloo"/"mpi" when built;
//           mpi needs the ranks started by mpirun), and the module's gradients are averaged by
//           DistributedDataParallel's overlapped buckets. Each rank trains on its own shard of the data (the
//           Trainer puts a DistributedSampler under the loaders), epoch metrics are averaged over ranks, a stop
//           on any rank stops them all at the same batch, and only rank 0 writes logs and checkpoints.
//   parameter_server
//           S servers and W workers, started by `kiln launch --servers S --workers W` (or any launcher, with
//           KILN_PS_SERVERS or TrainerOptions::ps.servers saying how many of the ranks are servers: the first
//           S). A server's fit() makes the module's optimizer, serves its shard of the parameters until every
//           worker is done (kiln/distributed/ps/parameter_server.h), and returns. The workers train as ddp's
//           ranks do (data shards, metrics averaged over workers, worker 0 writes logs and checkpoints), but
//           instead of averaging gradients among themselves they push them to the servers and pull the new
//           parameters. rank() and world_size() count the workers. A checkpoint holds every server's shard and
//           optimizer state; a resume (same servers, same workers) sends them back to the servers.
//           NOTE: gradient clipping applies to each worker's own gradient before the push when the optimizer
//           runs on the servers (ddp clips the averaged gradient); with ps.optimizer "worker" it clips the mean.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/trainer/checkpoint.h"
#include "kiln/trainer/train_module.h"

namespace kiln::trainer {

struct TrainerOptions;

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  bool is_global_zero() const { return rank() == 0; }

  // A DataModule's prepare_data (`prepare`): run in one process per node, or in one process of the job when
  // `per_node` is false, while the other processes wait for it, up to TrainerOptions::process_group_timeout.
  // ddp: local rank 0 of each node, or rank 0. parameter_server: the node's first worker (only workers run
  // validate, test and predict), or worker 0; a node of servers alone, its first server (a node is the ranks
  // rank - local rank onward: its ranks must be consecutive, as torchrun, kiln launch and SLURM's default block
  // layout number them, not spread round-robin over the nodes). Returns in every
  // process once it has run; when it failed, every process throws: the one that ran it its own error, the
  // others an error naming it. Collective under ddp and parameter_server (every process that runs the stage
  // calls it at the same point); one process just runs it.
  virtual void prepare_data(const std::function<void()>& prepare, bool per_node) { prepare(); }
  // After a step every rank takes on its own (a DataModule's setup and loaders, their rebuilding): `error` is
  // how it went on this rank. Rethrows it; otherwise throws, naming `what` and the ranks, when it failed on
  // another rank, so that no rank goes on to collectives the others will not make. Collective under ddp; under
  // parameter_server a failure is recorded as the job's (which fails the others) and rethrown; one process
  // only rethrows.
  virtual void agree(std::exception_ptr error, const std::string& what) {
    if (error) std::rethrow_exception(error);
  }
  // fit() starts: the module is on its device, its optimizers not made yet. Collective under ddp.
  virtual void setup(TrainModule& module) {}
  // fit() has made the optimizers (before a resume restores them). Returns true when this process's part of
  // the fit is over: a parameter server's server serves the workers' whole fit here.
  virtual bool optimizers_ready(TrainModule& module, const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) {
    return false;
  }
  // Whether this process serves rather than trains (a parameter server's server): it has no loops to run.
  virtual bool is_server() const { return false; }
  // fit()'s state is in place (restored, when resuming), right before the first loop (sanity validation).
  virtual void fit_starting() {}
  // fit() is over: `error` is "" when it succeeded, else what it failed with.
  virtual void fit_ended(const std::string& error) {}
  // The loader the loops iterate: the user's, or one over this rank's shard of its dataset (which replaces the
  // training shard made before).
  virtual data::DataLoader& train_loader(data::DataLoader& user) { return user; }
  virtual data::DataLoader* eval_loader(data::DataLoader* user) { return user; }
  // Frees the evaluation shards eval_loader made so far (fit's loaders are being replaced).
  virtual void forget_eval_loaders() {}
  // Frees every shard train_loader and eval_loader made (the run that used them is over).
  virtual void forget_loaders() {}

  // Around training_step (the forward).
  virtual void before_training_step() {}
  virtual void after_training_step(const Tensor& loss) {}
  // loss.backward(); `sync`: whether this backward ends an accumulation window (its gradients are stepped).
  virtual void backward(const Tensor& loss, bool sync) { loss.backward(); }
  // Manual optimization's backward (TrainModule::manual_backward): one complete round, its gradients final
  // (averaged over ranks under ddp) when it returns, however many of them training_step runs.
  virtual void manual_backward(const Tensor& loss) { loss.backward(); }
  // Whether the module may turn automatic optimization off under this strategy.
  virtual bool supports_manual_optimization() const { return true; }
  // Right before the optimizers step: every gradient must be final (averaged over ranks under ddp).
  // `synced`: whether the last backward was a synchronizing one (false when a stop cut a window short).
  virtual void before_optimizer_step(TrainModule& module, bool synced) {}
  // Steps `optimizer` in the strategy's own way and returns true (a parameter server's workers push and
  // pull), or returns false for the Trainer to call optimizer.step().
  virtual bool step_optimizer(optim::Optimizer& optimizer) { return false; }
  // Whether every batch must end with the ranks agreeing to go on (a stop anywhere stops all at that batch):
  // ranks in lockstep need it; a parameter server's asynchronous workers do not wait for each other, and
  // stop mid-epoch only at max_steps (time limits and stop requests take effect at the epoch's end).
  virtual bool agree_every_batch() const { return world_size() > 1; }

  // Rank 0, building a checkpoint: adds what the strategy keeps (a parameter server's shards).
  virtual void save_state(Checkpoint& checkpoint) {}
  // Every rank, resuming (after the optimizers were restored).
  virtual void load_state(const Checkpoint& checkpoint) {}

  // Sums `values` over ranks, in place (every rank calls it at the same point with as many values).
  virtual void all_reduce_sum(std::vector<double>& values) {}
  // Whether `flag` is true on any rank.
  bool any(bool flag) {
    if (world_size() == 1) return flag;
    std::vector<double> v{flag ? 1.0 : 0.0};
    all_reduce_sum(v);
    return v[0] > 0;
  }
  // Waits for every rank (before rank 0's store goes away, for one).
  virtual void barrier() {}
  // Rank 0's `text`, on every rank.
  virtual std::string broadcast_from_zero(const std::string& text) { return text; }
};

// The strategy the options name ("auto" and "single": one process; "ddp"; "parameter_server").
std::unique_ptr<Strategy> make_strategy(const TrainerOptions& options);

}  // namespace kiln::trainer
