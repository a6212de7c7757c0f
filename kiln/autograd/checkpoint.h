// Activation checkpointing (PyTorch's torch.utils.checkpoint): a segment of forward that keeps none of its
// intermediate results for backward, and runs again when backward reaches it. Memory for time: a stack of N
// checkpointed blocks holds the blocks' inputs and one block's intermediates at a time, instead of every block's
// intermediates, for about one more forward.
//
//   Tensor h = x;
//   for (auto& block : blocks)
//     h = autograd::checkpoint([&](const Tensor& in) { return block->forward(in); }, h);
//   loss(h).backward();   // each block's forward runs again here, just before its backward
//
// How it works: forward runs the segment with grad on, notes where its graph leaves the segment (the
// parameters it read, the inputs' histories: the boundary), and then drops the segment's graph, keeping the
// boundary alone in one node. That node's backward runs the segment again from its saved inputs, with the
// random generator and autocast as they were, takes the gradients that reach the boundary, and hands them on as
// any node does. So parameters and inputs get their gradients from the ordinary engine (backward, grad,
// create_graph, hooks, DDP's bucket hooks), exactly once.
//
// The segment must compute the same thing both times: a recomputation that reaches a parameter or input the
// first run did not (or misses one) is an error naming the checkpoint. Gradients of tensors made inside the
// segment (retain_grad, hooks on its intermediates) are not kept: they belong to the graph that was dropped.
// Side effects happen twice: a batch norm in training mode updates its running statistics on both runs (as
// under PyTorch's checkpoint). An output that shares its data with something else (an input or parameter
// returned as it is, two views of one result) comes back as a copy.
#pragma once

#include <functional>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::autograd {

struct CheckpointOptions {
  // Recompute with the random generator at the state the first run started from (so dropout masks repeat), and
  // put it back afterwards, so that backward leaves it where it was.
  bool preserve_rng_state = true;
};

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// fn(inputs), recomputed in backward instead of kept. fn must not change its inputs in place. With grad off
// (NoGradGuard, inference) it is a plain call.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               CheckpointOptions options = {});
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  CheckpointOptions options = {});

}  // namespace kiln::autograd
