// How a differentiable op records itself: the helpers kiln/autograd/functions/*.cpp are written with.
//
//   Tensor exp(const Tensor& x) {
//     Tensor y = ops::exp(x);                      // the raw op, no autograd
//     if (should_record(x))                        // grad mode on and x requires grad
//       record("exp", y, {x}, [y = SavedTensor(y, /*is_output=*/true)](const Tensor& g, const OpNode& n) {
//         return TensorList{g * y.get(n)};         // one gradient per input, in order
//       });
//     return y;
//   }
//
// Backward closures use the differentiable ops (g * y, not ops::mul), so that backward recorded with
// create_graph is itself a graph. A gradient may be returned with the broadcast shape of the output: the
// engine sums it back to the input's shape. An undefined gradient means zero.
#pragma once

#include <functional>
#include <initializer_list>

#include "kiln/autograd/functions.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/autograd/node.h"

namespace kiln::autograd {

// True when an op on these inputs must be recorded: grad mode is on and one of them requires grad.
template <typename... Ts>
bool should_record(const Ts&... inputs) {
  return GradMode::is_enabled() && (requires_grad(inputs) || ...);
}
bool should_record_any(const std::vector<Tensor>& inputs);

// Records the op that made `out` (a fresh tensor) from `inputs`: a node with one edge per input, whose
// backward is `backward`. Returns the node.
std::shared_ptr<OpNode> record(const char* name, const Tensor& out, std::initializer_list<Tensor> inputs,
                               OpNode::Backward backward);
std::shared_ptr<OpNode> record(const char* name, const Tensor& out, const std::vector<Tensor>& inputs,
                               OpNode::Backward backward);

// Records an op with several outputs (views of an input or fresh tensors) as one node, output i of the node
// being outs[i]; backward gets one gradient per output. Returns the node.
std::shared_ptr<OpNode> record_outputs(const char* name, const std::vector<Tensor>& outs,
                                       std::initializer_list<Tensor> inputs, OpNode::MultiBackward backward);

// Checks that `self` may be written in place while recording: not a leaf that requires grad (nor a view of
// one).
void check_inplace(const char* name, const Tensor& self);

// An in-place op while recording: `out_of_place(old)` computes the op's result from `old`, a copy of self's
// value that carries self's history (or self itself when `reads_self` is false: the op's backward never reads
// self's old value, e.g. add_). The result is written into self, and self becomes that result in the graph.
//
// When self is a view of a live tensor (its base), the write changes the base too, and the base's history is
// rewritten as well: the base becomes "its old value with the view's elements replaced by the result" (a
// CopySlices node: the gradient of the base's old value is the incoming one with the view's elements zeroed,
// the result's is the view's elements of it), and self becomes a strided view of that. Other views of the
// base notice they are stale when next used (TensorImpl::history_generation). This is PyTorch's rule too.
Tensor& record_inplace_impl(const char* name, Tensor& self, const std::function<Tensor(const Tensor&)>& out_of_place,
                            bool reads_self);
template <typename F>
Tensor& record_inplace(const char* name, Tensor& self, F&& out_of_place, bool reads_self = true) {
  return record_inplace_impl(name, self, std::function<Tensor(const Tensor&)>(std::forward<F>(out_of_place)),
                             reads_self);
}

// Gradient helpers shared by the backward rules.
// Sums a gradient over the dims that broadcasting added or stretched, back to `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);
// The gradient of a reduction over `dims`, expanded back to the input's shape.
Tensor expand_reduced(const Tensor& grad, const Shape& input_shape, IntArrayRef dims, bool keepdim);

}  // namespace kiln::autograd
