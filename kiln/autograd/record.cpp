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

void check_inplace(const char* name, const Tensor& self) {
  const AutogradMeta* m = meta_of(self);
  KILN_CHECK(!(m && m->requires_grad && !m->grad_fn), name, ": a leaf tensor that requires grad (shape ",
             shape_str(self.sizes()),
             ") is used in an in-place op; use the out-of-place op, or do it under NoGradGuard as optimizers do");
  KILN_CHECK(!self.impl()->is_view, name, ": in-place ops on a view (shape ", shape_str(self.sizes()),
             ") are not differentiable in kiln yet: the tensor it views would not see the new history. Use "
             "out-of-place ops (where, cat, scatter) to build the value instead");
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
