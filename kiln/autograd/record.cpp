#include "kiln/autograd/record.h"

#include <algorithm>

namespace kiln::autograd {

bool should_record_any(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  return std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return requires_grad(t); });
}

namespace {
template <typename List>
std::shared_ptr<OpNode> record_impl(const char* name, const Tensor& out, const List& inputs, OpNode::Backward backward) {
  auto node = std::make_shared<OpNode>(name, std::move(backward));
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->output_meta.push_back(TensorMeta::of(out));
  set_history(out, node, 0);
  return node;
}
}  // namespace

std::shared_ptr<OpNode> record(const char* name, const Tensor& out, std::initializer_list<Tensor> inputs,
                               OpNode::Backward backward) {
  return record_impl(name, out, inputs, std::move(backward));
}

std::shared_ptr<OpNode> record(const char* name, const Tensor& out, const std::vector<Tensor>& inputs,
                               OpNode::Backward backward) {
  return record_impl(name, out, inputs, std::move(backward));
}

std::shared_ptr<OpNode> record_outputs(const char* name, const std::vector<Tensor>& outs,
                                       std::initializer_list<Tensor> inputs, OpNode::MultiBackward backward) {
  auto node = std::make_shared<OpNode>(name, std::move(backward));
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  for (size_t i = 0; i < outs.size(); ++i) {
    node->output_meta.push_back(TensorMeta::of(outs[i]));
    set_history(outs[i], node, static_cast<uint32_t>(i));
  }
  return node;
}

namespace {
bool is_leaf_requiring_grad(const Tensor& t) {
  const AutogradMeta* m = meta_of(t);
  return m != nullptr && m->requires_grad && !m->grad_fn;
}

// A live view of `root` that was made a leaf requiring grad (requires_grad_ on a view), or an undefined tensor.
Tensor leaf_view_of(const Tensor& root) {
  const AutogradMeta* m = meta_of(root);
  if (m == nullptr) return {};
  for (const std::weak_ptr<TensorImpl>& v : m->leaf_views) {
    // Still a view of this root (Module::to's set_data makes a tensor its own).
    if (std::shared_ptr<TensorImpl> impl = v.lock(); impl && impl->view_base.lock() == root.impl_ptr()) {
      Tensor view(std::move(impl));
      if (is_leaf_requiring_grad(view)) return view;
    }
  }
  return {};
}
}  // namespace

void check_inplace(const char* name, const Tensor& self) {
  KILN_CHECK(!is_leaf_requiring_grad(self), name, ": a leaf tensor that requires grad (shape ", shape_str(self.sizes()),
             ") is used in an in-place op; use the out-of-place op, or do it under NoGradGuard as optimizers do");
  const Tensor base = view_base_of(self);
  KILN_CHECK(!base.defined() || !is_leaf_requiring_grad(base), name, ": a view (shape ", shape_str(self.sizes()),
             ") of a leaf tensor that requires grad (shape ", shape_str(base.defined() ? base.sizes() : Shape{}),
             ") is used in an in-place op; use out-of-place ops, or do it under NoGradGuard as optimizers do");
  const Tensor root = base.defined() ? base : self;
  if (const Tensor leaf = leaf_view_of(root); leaf.defined()) {
    KILN_CHECK(false, name, ": recording an in-place write into a tensor (shape ", shape_str(root.sizes()),
               ") one of whose views (shape ", shape_str(leaf.sizes()), ", offset ", leaf.storage_offset(),
               ") is a leaf that requires grad (made with requires_grad_ on a view). The write would give that "
               "leaf a history and its gradient would no longer reach its grad; make the leaf a copy "
               "(view.clone().requires_grad_()) or do the write under NoGradGuard");
  }
}

Tensor& record_inplace_impl(const char* name, Tensor& self, const std::function<Tensor(const Tensor&)>& out_of_place,
                            bool reads_self) {
  check_inplace(name, self);
  const Tensor base = self.impl()->is_view ? view_base_of(self) : Tensor();
  if (base.defined()) {
    KILN_CHECK(base.is_contiguous() && base.storage_offset() == 0, name, ": an in-place op on a view (shape ",
               shape_str(self.sizes()), ") of a tensor that is not contiguous (strides ", shape_str(base.strides()),
               ", offset ", base.storage_offset(), ") while recording; clone() that tensor first");
    KILN_CHECK(!self.has_internal_overlap(), name, ": an in-place op on a view whose elements overlap (shape ",
               shape_str(self.sizes()), ", strides ", shape_str(self.strides()), ", an expanded tensor?) while "
               "recording; clone() it first");
  }
  // Self's value as the op sees it, with self's current history (gradient_edge refreshes a stale view's).
  Tensor old = reads_self ? ops::clone(self) : ops::alias(self);
  if (Edge e = gradient_edge(self); e.valid()) set_history(old, e.node, e.input_nr);
  // The base's history before the write.
  Tensor base_old;
  if (base.defined()) {
    base_old = ops::alias(base);
    if (Edge e = gradient_edge(base); e.valid()) set_history(base_old, e.node, e.input_nr);
  }
  Tensor result = out_of_place(old);
  ops::copy_(self, result);
  self.bump_version(name);
  if (!requires_grad(result)) return self;
  self.storage()->count_recorded_write();
  if (!base.defined()) {  // self is its own root: it becomes the result
    const AutogradMeta* r = meta_of(result);
    set_history(self, r->grad_fn, r->output_nr);
    ++self.impl()->history_generation;  // views of self read the new value now
    return self;
  }
  // The base: its old value with self's elements replaced by the result. Only the view's geometry is kept;
  // backward builds what it needs.
  const Shape sizes = self.sizes(), strides = self.strides();
  const int64_t offset = self.storage_offset();
  record("CopySlices", base, {base_old, result}, [sizes, strides, offset](const Tensor& g, const OpNode& n) {
    const Tensor gc = g.is_contiguous() && g.storage_offset() == 0 ? g : g.clone();
    Tensor grad_old;
    if (n.needs_input_grad(0)) {  // g with the view's elements zeroed: those came from the result
      Tensor keep = ones(gc.sizes(), TensorOptions(gc.dtype()).device(gc.device()));
      ops::fill_(ops::as_strided(keep, sizes, strides, offset), 0);
      grad_old = gc * keep;
    }
    return TensorList{grad_old, n.needs_input_grad(1) ? gc.as_strided(sizes, strides, offset) : Tensor()};
  });
  ++base.impl()->history_generation;
  gradient_edge(self);  // self, now stale, gets its history as a view of the base's new one
  return self;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  size_t lead = grad.dim() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < static_cast<size_t>(grad.dim()); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.size(static_cast<int64_t>(i)) != 1))
      dims.push_back(static_cast<int64_t>(i));
  Tensor g = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return g.sizes() == shape ? g : g.view(shape);
}

Tensor expand_reduced(const Tensor& grad, const Shape& input_shape, IntArrayRef dims, bool keepdim) {
  Tensor g = grad;
  if (!keepdim && !input_shape.empty()) {
    int64_t n = static_cast<int64_t>(input_shape.size());
    if (dims.empty()) {
      g = g.view(Shape(input_shape.size(), 1));
    } else {
      std::vector<int64_t> sorted;
      for (int64_t d : dims) sorted.push_back(d < 0 ? d + n : d);
      std::sort(sorted.begin(), sorted.end());
      for (int64_t d : sorted) g = g.unsqueeze(d);
    }
  }
  return g.expand(input_shape);
}

}  // namespace kiln::autograd
