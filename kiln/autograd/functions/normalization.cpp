// Differentiable fused layer norm (kernels and math: kiln/tensor/ops/normalization.h). The backward rule calls
// the fused backward kernel for the gradients its node needs; when backward itself is recorded (create_graph)
// it builds them from differentiable ops instead, so a second derivative flows through them.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::record;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {
// g, x: (M, D), w: (D) or undefined -> {dx, dw, db} from differentiable ops, for create_graph.
ops::LayerNormBackward layer_norm_grad_composite(const Tensor& g, const Tensor& x, const Tensor& w, double eps) {
  Tensor centered = x - x.mean({1}, /*keepdim=*/true);
  Tensor rstd = rsqrt((centered * centered).mean({1}, true) + eps);
  Tensor xhat = centered * rstd;
  Tensor gw = w.defined() ? g * w : g;
  return {rstd * (gw - gw.mean({1}, true) - xhat * (gw * xhat).mean({1}, true)), (g * xhat).sum({0}), g.sum({0})};
}
}  // namespace

// layer_norm_rows: y = (x - mean) rstd w + b over each row;
// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) with gw = g w, dw = sum_rows g xhat, db = sum_rows g
Tensor layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::wants_float32({&x, &weight, &bias}))
    return layer_norm_rows(autocast::float32(x), autocast::float32(weight), autocast::float32(bias), eps);
  ops::LayerNormForward f = ops::layer_norm_forward(x, weight, bias, eps);
  if (should_record(x, weight, bias)) {
    std::vector<Tensor> inputs{x};
    if (weight.defined()) inputs.push_back(weight);
    if (bias.defined()) inputs.push_back(bias);
    record("layer_norm", f.y, inputs,
           [sx = SavedTensor(x, false), sw = weight.defined() ? SavedTensor(weight, false) : SavedTensor(),
            mean = f.mean, rstd = f.rstd, has_w = weight.defined(), has_b = bias.defined(),
            eps](const Tensor& g, const OpNode& n) {
             Tensor x = sx.get(n), w = has_w ? sw.get(n) : Tensor();
             const size_t bias_input = has_w ? 2 : 1;
             const bool want_x = n.needs_input_grad(0), want_w = has_w && n.needs_input_grad(1),
                        want_b = has_b && n.needs_input_grad(bias_input);
             ops::LayerNormBackward r = autograd::GradMode::is_enabled()
                                            ? layer_norm_grad_composite(g, x, w, eps)
                                            : ops::layer_norm_backward(g, x, mean, rstd, w, want_x, want_w, want_b);
             TensorList grads{want_x ? r.grad_x : Tensor()};
             if (has_w) grads.push_back(want_w ? r.grad_weight : Tensor());
             if (has_b) grads.push_back(want_b ? r.grad_bias : Tensor());
             return grads;
           });
  }
  return f.y;
}

}  // namespace kiln
