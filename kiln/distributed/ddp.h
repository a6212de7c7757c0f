// DistributedDataParallel: data-parallel training over a ProcessGroup, with PyTorch's DDP semantics.
//
//   auto pg = new_group("tcp", store, rank, world);
//   DistributedDataParallel ddp(model, pg);          // checks the ranks' parameters match, copies rank 0's
//   optim::SGD opt(model->parameters(), {.lr = 0.1});
//   for (...) {
//     opt.zero_grad();
//     Tensor loss = nn::functional::mse_loss(ddp(x_shard), y_shard);
//     loss.backward();                                // buckets are all-reduced while backward runs
//     ddp.finalize();                                 // no-op when backward already finished the reduction
//     opt.step();                                     // every rank steps with the same, averaged, gradients
//   }
//
// Each rank runs forward and backward on its own shard; afterwards every parameter's .grad holds the average
// over ranks, so with a mean-reduced loss and equal shards a step equals one process's step on the whole batch.
//
// How gradients travel. The parameters that require grad are packed into buckets (kiln/distributed/buckets.h),
// each one flat buffer of one dtype, identical on every rank. A post-accumulate-grad hook on every parameter
// copies its .grad into its slot of the bucket (a copy, not a view: .grad stays the user's own tensor, and a
// bucket's buffer is only ever touched by the communication thread while it is in flight). When a bucket's
// last gradient has arrived, its all-reduce (ReduceOp::Avg) is issued, asynchronously, on the group's thread,
// while backward goes on; buckets are issued strictly in bucket order (one that is ready early waits for those
// before it), which is what keeps every rank's sequence of collectives the same. finalize() waits for them all
// and copies the averages back into each .grad. When every bucket's gradients arrive during one backward, the
// hook of the last one finalizes at once, so a plain loss.backward() leaves averaged gradients; finalize() is
// then a no-op, and is needed only where some gradient never came (find_unused_parameters, or to get the
// error). With overlap = false nothing is issued before the last gradient (for comparison; the bits are the
// same).
//
// Threads: the hooks run on the thread that calls backward (kiln's engine is single-threaded), as forward and
// finalize do; DDP's own state is only touched there, so it needs no lock. The group's worker thread touches
// nothing but the bucket buffers it was handed; no hook writes into a bucket after issuing it (a gradient
// arriving late is an error, not a race), and the next round starts only after every issued bucket was waited
// for. Because the last hook finalizes, a failed collective can surface from loss.backward() itself.
//
// find_unused_parameters: when false, every parameter that requires grad must get a gradient in each synced
// backward, and one that did not is an error naming it (at finalize, or at the next forward). When true, the
// forward's graph is walked to find the parameters it does not use; they count as zero gradients at once (so
// their buckets are not held up), and any still missing at finalize count as zeros too. A parameter no rank
// used keeps its .grad as it was (undefined stays undefined, so optimizers skip it), as in PyTorch.
//
// Frozen parameters: one that required grad when DDP was made but does not now (requires_grad_(false), as
// BackboneFinetuning freezes a backbone) takes part in no round: it counts as arrived with zeros, so its
// bucket is not held up, and its .grad is left alone. Every rank must freeze the same ones: a rank that
// froze one finds a nonzero average for it when another rank did not, and raises an error naming it (finalize;
// the other ranks fail at their next collective once it stops); unfrozen again, it is averaged as before. A parameter that did not require grad when DDP was made is in no bucket: one made
// trainable later is an error at the next backward (it needs a new DDP).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/distributed/buckets.h"
#include "kiln/distributed/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::distributed {

struct DDPOptions {
  // Later buckets' size limit, in MiB (PyTorch's bucket_cap_mb); 0 puts every parameter in its own bucket.
  double bucket_cap_mb = 25;
  // The first bucket's (per dtype), small so that communication starts early; capped by bucket_cap_mb.
  double first_bucket_cap_mb = 1;
  // Broadcast rank 0's buffers (BatchNorm's running stats) before every forward.
  bool broadcast_buffers = true;
  // See the file comment: parameters that get no gradient count as zeros instead of being an error.
  bool find_unused_parameters = false;
  // Issue each bucket's all-reduce as soon as it is ready (true), or all of them after backward (false).
  bool overlap = true;
};

class DistributedDataParallel {
 public:
  // Checks that every rank's module has the same parameters and buffers (names, shapes, dtypes; an error names
  // the first that differs and the ranks), then copies rank 0's parameters and persistent buffers to all.
  // Collective: every rank of `group` must construct one at the same point.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  // The hooks point at this object: it stays where it was made.
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Runs the module (its operator(), so its hooks run), after broadcasting rank 0's buffers when
  // broadcast_buffers. x: whatever the module takes.
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // forward() in two halves, for code that runs the module itself (the Trainer calls training_step, which
  // calls the module's layers): before_forward checks the last round was finalized and broadcasts the buffers;
  // after_forward(output) notes, for find_unused_parameters, which parameters `output` does not reach.
  void before_forward();
  void after_forward(const Tensor& output);

  // Waits for every bucket, completes those still missing gradients (find_unused_parameters) or names the
  // parameters that got none (an error), and writes the averaged gradients into the parameters' .grad. A no-op
  // when no gradient arrived since the last one (or backward already finished the reduction). Call it before
  // optimizer.step().
  void finalize();

  // Averages over ranks what backward accumulated inside no_sync(), through the same buckets, for a window
  // that ends without a synced backward (a stop cut it short): afterwards every .grad is the mean over ranks,
  // a parameter without a gradient counting as zeros (with find_unused_parameters, one that no rank has a
  // gradient for keeps none, as finalize() leaves it). Every rank calls it at the same point, outside a synced
  // round (finalize() closes one).
  void allreduce_accumulated_gradients();

  // Inside it, backward accumulates into .grad without communicating; the first synced backward after it
  // all-reduces what was accumulated. Guards nest.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.require_sync_) { ddp.require_sync_ = false; }
    ~NoSyncGuard() { ddp_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The buckets in launch order, each the names of its parameters in the order they sit in its buffer.
  std::vector<std::vector<std::string>> bucket_layout() const;
  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  const DDPOptions& options() const { return options_; }

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    Tensor slot;              // its place in the bucket's buffer, shaped like the parameter
    unsigned hook = 0;
    bool arrived = false;     // this round: its gradient is in the slot (or zeros, when unused)
    bool used = false;        // this round: the gradient came from backward, not from find_unused's zeros
    bool forward_unused = false;  // the last forward's graph does not reach it (find_unused_parameters)
    bool frozen = false;      // this round: it does not require grad now (frozen after DDP was made)
  };
  struct Bucket {
    BucketSpec spec;
    Tensor buffer;  // (numel,) of spec.dtype
    size_t pending = 0;
    std::shared_ptr<Work> work;
  };

  void verify_same_model();
  void broadcast_from_rank0(const std::vector<Tensor>& tensors);
  void on_gradient(size_t index);
  void begin_round();
  void mark_arrived(size_t index, bool used);
  void launch_ready_buckets();
  void find_forward_unused(const Tensor& output);
  std::string missing_gradients_error() const;
  void reset_round();

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::vector<Param> params_;  // the parameters that require grad, in registration order
  std::vector<std::pair<std::string, Tensor>> left_out_;  // those that did not when DDP was made
  std::vector<Bucket> buckets_;
  bool require_sync_ = true;
  bool round_active_ = false;  // a gradient arrived since the last finalize
  bool have_forward_unused_ = false;
  size_t next_launch_ = 0;     // buckets before it have been issued
  size_t buckets_ready_ = 0;
};

using DDP = DistributedDataParallel;

}  // namespace kiln::distributed
