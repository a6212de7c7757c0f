// Synchronized batch norm (PyTorch's SyncBatchNorm): the batch norms of a data-parallel model take their
// training statistics over every rank's batch, so that N ranks with B / N samples each normalize as one process
// with B would (small per-rank batches, detection and segmentation models).
//
//   distributed::convert_sync_batchnorm(*model, pg);   // before wrapping it in DistributedDataParallel
//   DistributedDataParallel ddp(model, pg);
//
// The layers stay the same objects (a C++ model holds its layers in its own fields, so they are switched over
// rather than replaced, as PyTorch's convert_sync_batchnorm replaces them): the parameter and buffer names do
// not change, and checkpoints load either way. Each training forward of a layer makes one all-reduce of 2C + 1
// float64 values over the group and each backward (when the input needs a gradient, as it does under DDP)
// one of 2C, so every rank must run the same layers in the
// same order (as DDP already requires); eval mode uses the running statistics and no communication. The group
// is held weakly: once it is gone, a synchronized layer's training forward is an error, not a silent local
// batch norm (revert_sync_batchnorm makes the layers local again).
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/distributed/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::distributed {

// Switches every BatchNorm1d/2d/3d in `module`'s tree (itself included) to statistics over `group`'s ranks.
// Returns how many layers it switched.
int64_t convert_sync_batchnorm(nn::Module& module, const std::shared_ptr<ProcessGroup>& group);
// Makes them local again. Returns how many were synchronized.
int64_t revert_sync_batchnorm(nn::Module& module);

}  // namespace kiln::distributed
