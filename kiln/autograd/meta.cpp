#include "kiln/autograd/meta.h"

#include <atomic>
#include <mutex>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/record.h"
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

Tensor view_base_of(const Tensor& t) {
  if (!t.defined()) return {};
  std::shared_ptr<TensorImpl> base = t.impl()->view_base.lock();
  return base ? Tensor(std::move(base)) : Tensor();
}

namespace {

// Whether view t, whose live base is `base`, is stale (see is_stale_view).
bool stale_against(const Tensor& t, const Tensor& base) {
  return base.impl()->history_generation.load(std::memory_order_acquire) !=
             t.impl()->base_generation.load(std::memory_order_acquire) &&
         requires_grad(base);
}

}  // namespace

bool is_stale_view(const Tensor& t) {
  const Tensor base = view_base_of(t);
  return base.defined() && stale_against(t, base);
}

namespace {

// A stale view's new history: a strided view of its base's current one (the base is where its value now comes
// from), over the storage positions of a contiguous base at offset 0, which every tensor an op made is. The
// backward scatters into zeros of the base's shape, built then (nothing of the base's size is kept until
// backward).
void refresh_view_history(const Tensor& t, const Tensor& base) {
  KILN_CHECK(base.is_contiguous() && base.storage_offset() == 0, "autograd: a view of shape ", shape_str(t.sizes()),
             " is read after an in-place op rewrote the history of the tensor it views, which is not contiguous "
             "(strides ", shape_str(base.strides()), ", offset ", base.storage_offset(), "); kiln can rebuild a "
             "view's history only over a contiguous base. clone() the base before writing into it");
  EnableGradGuard grad;  // also when the engine asks (backward from a stale view)
  const Tensor alias = ops::alias(t);  // the node's output: t itself takes its history below
  auto node = record("AsStridedView", alias, {base},
                     [in_shape = base.sizes(), sizes = t.sizes(), strides = t.strides(),
                      offset = t.storage_offset()](const Tensor& g, const OpNode&) {
                       const int64_t n = shape_numel(in_shape);
                       const Tensor positions =
                           ops::as_strided(arange(n, TensorOptions(kInt64).device(g.device())), sizes, strides, offset);
                       const Tensor flat = zeros({n}, TensorOptions(g.dtype()).device(g.device()));
                       return TensorList{index_add(flat, 0, ops::reshape(positions, {-1}), g.reshape({-1})).view(in_shape)};
                     });
  set_history(t, node, 0);
}

// Rebuilds view t's history when it is stale against its live base. Two threads may meet one stale view (two
// losses built from it, a hook on a worker thread): the rebuild is checked again under a lock, so it runs once,
// and a thread that finds the view current reads a history whose writes happened before base_generation's.
// Recursive: the rebuild records a node, and recording reads the base's edge.
void refresh_against(const Tensor& t, const Tensor& base) {
  if (!stale_against(t, base)) return;
  static std::recursive_mutex mutex;
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (stale_against(t, base)) refresh_view_history(t, base);
}

}  // namespace

void refresh_if_stale(const Tensor& t) {
  if (!t.defined() || !t.impl()->is_view) return;
  if (const Tensor base = view_base_of(t); base.defined()) refresh_against(t, base);
}

Edge gradient_edge(const Tensor& t) {
  if (t.defined() && t.impl()->is_view) {
    if (const Tensor base = view_base_of(t); base.defined()) {
      refresh_against(t, base);
    } else if (const AutogradMeta* vm = meta_of(t);
               vm != nullptr && vm->grad_fn && t.storage()->recorded_writes() != vm->history_writes) {
      // The base is gone, so a recorded write through another view of it cannot have given this one a new
      // history: refuse to send gradients along the old one.
      const char* writer = t.storage()->last_writer();
      KILN_CHECK(false, "autograd: a view of shape ", shape_str(t.sizes()), " is used after its data was changed in "
                 "place", writer ? " by " : "", writer ? writer : "", " while recording, and the tensor it views no "
                 "longer exists to carry the change's history. Keep the viewed tensor alive while writing through "
                 "its views, or clone() the view before writing into it");
    }
  }
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
  if (t.impl()->is_view) {
    m.history_writes = t.storage()->recorded_writes();
    // Last, with release: a thread that reads the generation current reads the history above (refresh_against).
    if (const Tensor base = view_base_of(t); base.defined())
      t.impl()->base_generation.store(base.impl()->history_generation.load(std::memory_order_acquire),
                                      std::memory_order_release);
  }
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
