// The engine: runs a graph backward from some outputs, each node once, after every node that feeds it.
#pragma once

#include <optional>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/tensor/tensor.h"

namespace kiln::autograd {

// Accumulates d(sum_i <outputs[i], grad_outputs[i]>)/d(leaf) into the grad of every leaf that requires grad.
// grad_outputs[i] may be undefined when outputs[i] has one element (it is then 1). The graph's saved tensors
// are freed as backward passes them unless retain_graph; create_graph records backward itself, so that the
// gradients can be differentiated again.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// The gradients of the outputs with respect to `inputs`, returned rather than accumulated into .grad (which
// stays untouched). An input the outputs do not depend on is an error unless allow_unused, which gives an
// undefined Tensor for it. retain_graph defaults to create_graph, as in PyTorch.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

namespace internal {

// For activation checkpointing (checkpoint.h): the gradients that reach `edges` (each an input of a node outside
// the graph being run) from outputs. The graph is run only up to those nodes: they are neither run nor passed,
// and their hooks do not run, so that the caller can hand the gradients on to them itself. The graph is kept
// for another pass when create_graph. An edge no gradient reached gives an undefined Tensor.
std::vector<Tensor> grad_at_edges(const std::vector<Tensor>& outputs, const std::vector<Edge>& edges,
                                  const std::vector<Tensor>& grad_outputs, bool create_graph);

}  // namespace internal

}  // namespace kiln::autograd
