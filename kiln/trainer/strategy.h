// Strategy: how the Trainer spreads one fit over processes. The Trainer's loops call it at the few points
// where data parallelism differs from one process; everything else is the same code on every rank.
//
//   single  one process: every call below is a no-op, the user's loaders are used as they are.
//   ddp     one process per rank, started by `kiln launch --nproc N` (or torchrun, mpirun, srun: the rank comes
//           from the environment, kiln/distributed/env.h). Rank 0 serves a TCPStore at MASTER_ADDR:MASTER_PORT,
//           the ranks form a "tcp" process group, and the module's gradients are averaged by
//           DistributedDataParallel's overlapped buckets. Each rank trains on its own shard of the data (the
//           Trainer puts a DistributedSampler under the loaders), epoch metrics are averaged over ranks, a stop
//           on any rank stops them all at the same batch, and only rank 0 writes logs and checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
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

  // fit() starts: the module is on its device, its optimizers not made yet. Collective under ddp.
  virtual void setup(TrainModule& module) {}
  // The loader the loops iterate: the user's, or one over this rank's shard of its dataset.
  virtual data::DataLoader& train_loader(data::DataLoader& user) { return user; }
  virtual data::DataLoader* eval_loader(data::DataLoader* user) { return user; }

  // Around training_step (the forward).
  virtual void before_training_step() {}
  virtual void after_training_step(const Tensor& loss) {}
  // loss.backward(); `sync`: whether this backward ends an accumulation window (its gradients are stepped).
  virtual void backward(const Tensor& loss, bool sync) { loss.backward(); }
  // Right before the optimizers step: every gradient must be final (averaged over ranks under ddp).
  // `synced`: whether the last backward was a synchronizing one (false when a stop cut a window short).
  virtual void before_optimizer_step(TrainModule& module, bool synced) {}

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

// The strategy the options name ("auto" and "single": one process; "ddp").
std::unique_ptr<Strategy> make_strategy(const TrainerOptions& options);

}  // namespace kiln::trainer
