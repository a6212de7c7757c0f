// Differentiable fused cross-entropy over class indices (kernels: kiln/tensor/ops/cross_entropy.h, which also
// gives the math). The backward rule calls the fused backward kernel; when backward itself is recorded
// (create_graph) it builds the same gradient from differentiable ops, softmax among them, so a second
// derivative flows through it.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::record;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {
// g: (N), z: (N, C) -> dloss/dz (N, C) from differentiable ops, for create_graph:
// (1 - e) w_t (p - onehot_t) + (e / C) (W p - w), zero on ignored rows.
Tensor cross_entropy_grad_composite(const Tensor& g, const Tensor& z, const Tensor& target, const Tensor& weight,
                                    const CrossEntropyParams& p) {
  const int64_t classes = z.size(1);
  const TensorOptions o = TensorOptions(z.dtype()).device(z.device());
  Tensor valid = ops::to(ops::ne(target, p.ignore_index), z.dtype());                    // (N)
  Tensor safe = ops::masked_fill(target, ops::eq(target, p.ignore_index), 0);            // (N)
  Tensor w = weight.defined() ? ops::to(weight, z.dtype()) : ones({classes}, o);    // (C)
  Tensor wt = ops::mul(ops::index_select(w, 0, safe), valid);                           // (N)
  Tensor onehot = ops::to(ops::one_hot(safe, classes), z.dtype());                       // (N, C)
  const double e = p.label_smoothing;
  Tensor a = (g * ((1.0 - e) * wt)).unsqueeze(1);                                         // (N, 1)
  Tensor b = (g * (e / static_cast<double>(classes) * valid)).unsqueeze(1);               // (N, 1)
  Tensor prob = softmax(z, 1);
  Tensor grad = prob * (a + b * ops::sum(w)) - b * w.unsqueeze(0) - a * onehot;  // ops::sum(w): W, 0-dim
  // Ignored rows: 0 even where their logits are NaN (a and b are 0 there, but NaN * 0 is NaN), as the kernel.
  return where(ops::eq(target, p.ignore_index).unsqueeze(1), 0.0, grad);
}
}  // namespace

// cross_entropy_rows: loss[n] = -(1 - e) w_t logp_t - (e / C) sum_c w_c logp_c (ops/cross_entropy.h);
// dz = cross_entropy_backward(g, z, stats): the softmax minus the (smoothed, weighted) target, times g
std::pair<Tensor, Tensor> cross_entropy_rows(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                             const CrossEntropyParams& p) {
  if (autocast::wants_float32({&logits, &weight}))
    return cross_entropy_rows(autocast::float32(logits), target, autocast::float32(weight), p);
  ops::CrossEntropyForward f = ops::cross_entropy_forward(logits, target, weight, p);
  if (should_record(logits)) {
    record("cross_entropy", f.loss, {logits},
           [sz = SavedTensor(logits, false), st = SavedTensor(target, false),
            sw = weight.defined() ? SavedTensor(weight, false) : SavedTensor(), stats = f.stats,
            has_weight = weight.defined(), p](const Tensor& g, const OpNode& n) {
             Tensor z = sz.get(n), t = st.get(n), w = has_weight ? sw.get(n) : Tensor();
             if (autograd::GradMode::is_enabled()) return TensorList{cross_entropy_grad_composite(g, z, t, w, p)};
             return TensorList{ops::cross_entropy_backward(g, z, stats, t, w, p)};
           });
  }
  return {f.loss, f.row_weight};
}

}  // namespace kiln
