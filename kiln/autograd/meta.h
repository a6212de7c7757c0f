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
  // As a view whose base is gone: the storage's recorded in-place writes when the history was set (see
  // gradient_edge).
  uint64_t history_writes = 0;
  // As the root of views: those of its views that were made leaves requiring grad (requires_grad_ on a view).
  // A recorded write into the root or any view of it while one of them lives is refused (check_inplace): it
  // would give that leaf a history, and its gradient would no longer reach its grad.
  std::vector<std::weak_ptr<TensorImpl>> leaf_views;
};

// In-place writes and views (record_inplace_impl in record.cpp). A tensor whose history an in-place op rewrote
// counts one generation more (TensorImpl::history_generation); a view remembers its base's generation when it
// was made or its own history was last set (TensorImpl::base_generation), so a view whose base was rewritten
// since, through the base or through another view, is known to be stale and gets a fresh history, as a
// strided view of the base's new one, before it is used.

inline AutogradMeta* meta_of(const Tensor& t) {
  return static_cast<AutogradMeta*>(t.impl()->autograd_meta.get());
}
AutogradMeta& ensure_meta(const Tensor& t);

// A view whose base's history was rewritten by an in-place op since the view's own was set (or, for a view
// made outside the graph, a base that has joined it that way): its value is a view of the base's new one.
bool is_stale_view(const Tensor& t);

// True when t is part of the graph: a leaf that requires grad, or the output of a recorded op (or a view of
// one whose history an in-place op rewrote).
inline bool requires_grad(const Tensor& t) {
  if (!t.defined()) return false;
  // A stale view first: another thread may be rebuilding its meta (gradient_edge), and one that is current
  // has its meta settled.
  if (t.impl()->is_view && !t.impl()->view_base.expired() && is_stale_view(t)) return true;
  const AutogradMeta* m = meta_of(t);
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

// Where the gradient of t goes: (grad_fn, output_nr), or the leaf's AccumulateGrad, or nowhere. A stale view
// first gets its fresh history (see the note on in-place writes and views above).
Edge gradient_edge(const Tensor& t);
// Makes t the output `output_nr` of node (t must be a fresh result, or a tensor an in-place op rewrote).
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);
// Gives a stale view its fresh history now (what gradient_edge does first); for the accessors that read the
// history directly (grad_fn, retain_grad, register_hook). Safe to call on one view from several threads: the
// rebuild runs once, under a lock, and the common case (not stale) takes none.
void refresh_if_stale(const Tensor& t);
// The live tensor t is a view of (the root of its chain of views), or an undefined tensor: t is not a view,
// or its base is gone.
Tensor view_base_of(const Tensor& t);

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
