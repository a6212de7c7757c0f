// Differentiable fused layer and batch norms (kernels and math: kiln/tensor/ops/normalization.h). The backward
// rules call the fused backward kernels for the gradients their nodes need; when backward itself is recorded
// (create_graph) they build them from differentiable ops instead, so a second derivative flows through them.
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
// g, x: (N, C, S); w: (C) or undefined; mean, var: the forward's (C), used as constants in eval mode ->
// {dx, dw, db} from differentiable ops, for create_graph.
ops::BatchNormBackward batch_norm_grad_composite(const Tensor& g, const Tensor& x, const Tensor& w,
                                                 const Tensor& mean, const Tensor& var, double eps, bool training) {
  const int64_t c = x.size(1);
  Tensor mu = training ? x.mean({0, 2}, /*keepdim=*/true) : ops::to(mean, x.dtype()).view({1, c, 1});
  Tensor centered = x - mu;
  Tensor rstd = training ? rsqrt((centered * centered).mean({0, 2}, true) + eps)
                         : ops::rsqrt(ops::add(ops::to(var, x.dtype()), eps)).view({1, c, 1});
  Tensor xhat = centered * rstd;
  Tensor gw = w.defined() ? g * w.view({1, c, 1}) : g;
  Tensor dx = training ? rstd * (gw - gw.mean({0, 2}, true) - xhat * (gw * xhat).mean({0, 2}, true)) : gw * rstd;
  return {dx, (g * xhat).sum({0, 2}), g.sum({0, 2})};
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

// batch_norm_channels: y = (x - mean) rstd w + b per channel; training: dx = w rstd (g - mean(g) - xhat
// mean(g xhat)) over (N, S), eval: dx = w rstd g; dw = sum g xhat, db = sum g
ops::BatchNormForward batch_norm_channels(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Tensor& running_mean, const Tensor& running_var, double eps,
                                          bool training) {
  if (autocast::wants_float32({&x, &weight, &bias}))
    return batch_norm_channels(autocast::float32(x), autocast::float32(weight), autocast::float32(bias),
                               running_mean, running_var, eps, training);
  ops::BatchNormForward f = ops::batch_norm_forward(x, weight, bias, running_mean, running_var, eps, training);
  if (should_record(x, weight, bias)) {
    std::vector<Tensor> inputs{x};
    if (weight.defined()) inputs.push_back(weight);
    if (bias.defined()) inputs.push_back(bias);
    record("batch_norm", f.y, inputs,
           [sx = SavedTensor(x, false), sw = weight.defined() ? SavedTensor(weight, false) : SavedTensor(),
            // In eval mode mean and var may be the running statistics themselves: copies (C values), so that
            // a training step between this forward and its backward cannot change them underneath.
            mean = training ? f.mean : ops::clone(f.mean), var = training ? f.var : ops::clone(f.var),
            has_w = weight.defined(), has_b = bias.defined(), eps, training](const Tensor& g, const OpNode& n) {
             Tensor x = sx.get(n), w = has_w ? sw.get(n) : Tensor();
             const size_t bias_input = has_w ? 2 : 1;
             const bool want_x = n.needs_input_grad(0), want_w = has_w && n.needs_input_grad(1),
                        want_b = has_b && n.needs_input_grad(bias_input);
             ops::BatchNormBackward r =
                 autograd::GradMode::is_enabled()
                     ? batch_norm_grad_composite(g, x, w, mean, var, eps, training)
                     : ops::batch_norm_backward(g, x, mean, var, w, eps, training, want_x, want_w, want_b);
             TensorList grads{want_x ? r.grad_x : Tensor()};
             if (has_w) grads.push_back(want_w ? r.grad_weight : Tensor());
             if (has_b) grads.push_back(want_b ? r.grad_bias : Tensor());
             return grads;
           });
  }
  return f;
}

}  // namespace kiln
