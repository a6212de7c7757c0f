#include "kiln/autograd/meta.h"

#include <atomic>

#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/ops.h"

namespace kiln::autograd {

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl()->autograd_meta;
  if (!slot) slot = std::make_unique<AutogradMeta>();
  return static_cast<AutogradMeta&>(*slot);
}

unsigned next_hook_id() {
  static std::atomic<unsigned> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = t.defined() ? meta_of(t) : nullptr;
  if (m == nullptr) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    acc->output_meta.push_back(TensorMeta::of(t));
    m->grad_accumulator = acc;
  }
  return {std::move(acc), 0};
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = ensure_meta(t);
  m.grad_fn = node;
  m.output_nr = output_nr;
}

// The leaf is held by a Tensor that shares its TensorImpl: the leaf's grad is the one the user reads.
AccumulateGrad::AccumulateGrad(Tensor leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}

void AccumulateGrad::run_pre_hooks(TensorList& grads) {
  AutogradMeta& m = ensure_meta(leaf_);
  for (auto& [id, fn] : m.hooks) {
    if (!grads[0].defined()) break;
    Tensor replaced = fn(grads[0]);
    if (replaced.defined()) grads[0] = std::move(replaced);
  }
}

namespace {
// A gradient backward made and nobody else holds can become .grad as it is; anything else is copied, so that
// accumulating into .grad later never writes into a tensor someone else sees.
bool can_steal(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
         !g.has_internal_overlap() && g.impl()->autograd_meta == nullptr;
}
}  // namespace

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  AutogradMeta& m = ensure_meta(leaf_);
  if (GradMode::is_enabled()) {  // create_graph: the gradient keeps its own history
    m.grad = m.grad.defined() ? m.grad + g : g;
  } else if (!m.grad.defined()) {
    m.grad = can_steal(g) ? std::move(g) : ops::clone(g);
  } else {
    ops::add_(m.grad, g);
  }
  for (auto& [id, fn] : m.post_accumulate_hooks) fn(leaf_);
  return {};
}

}  // namespace kiln::autograd
