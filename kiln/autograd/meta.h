// AutogradMeta: what autograd keeps on a tensor, and the small functions that read and write it.
//
// A leaf is a tensor the user made (or detached); it may require grad, and then backward accumulates into its
// grad through its AccumulateGrad node. A non-leaf was computed by a recorded op: grad_fn is that op's node
// and output_nr says which of its outputs this tensor is. Tensors that never met autograd have no meta.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/tensor/tensor.h"

namespace kiln::autograd {

struct AutogradMeta final : AutogradMetaBase {
  bool requires_grad = false;           // leaves only; a non-leaf requires grad because it has a grad_fn
  std::shared_ptr<Node> grad_fn;        // non-leaves
  uint32_t output_nr = 0;
  Tensor grad;
  std::weak_ptr<Node> grad_accumulator;  // leaves: made on first use, owned by the graphs that use it
  bool retains_grad = false;
  // Leaves' hooks (non-leaves keep theirs on grad_fn, see Node::pre_hooks).
  std::vector<std::pair<unsigned, TensorHook>> hooks;
  std::vector<std::pair<unsigned, std::function<void(const Tensor&)>>> post_accumulate_hooks;
};

inline AutogradMeta* meta_of(const Tensor& t) {
  return static_cast<AutogradMeta*>(t.impl()->autograd_meta.get());
}
AutogradMeta& ensure_meta(const Tensor& t);

// True when t is part of the graph: a leaf that requires grad, or the output of a recorded op.
inline bool requires_grad(const Tensor& t) {
  if (!t.defined()) return false;
  const AutogradMeta* m = meta_of(t);
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

// Where the gradient of t goes: (grad_fn, output_nr), or the leaf's AccumulateGrad, or nowhere.
Edge gradient_edge(const Tensor& t);
// Makes t the output `output_nr` of node (t must be a fresh result; see rebase_history for in-place ops).
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);

// Accumulates the gradient of a leaf into its grad, then runs its post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  TensorList apply(TensorList&& grad_outputs) override;
  void run_pre_hooks(TensorList& grad_outputs) override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

unsigned next_hook_id();

}  // namespace kiln::autograd
