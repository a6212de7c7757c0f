// Differentiable convolution and max pooling over the kernels of kiln/tensor/ops/conv.h. A first-order
// backward calls the backward kernels directly (nothing recorded). Under create_graph the same gradients come
// from differentiable ops instead, so they have history of their own and second (and higher) derivatives
// work, as a gradient penalty needs: the three convolutions are each linear in each argument and each
// one's gradients are the other two (conv2d, its input gradient conv_transpose2d, and its weight gradient
// conv2d_weight_grad below); max pooling's gradient scatters g to the recorded indices, whose own gradient
// gathers from them. Adaptive average pooling and its gradient are linear maps, each the other's adjoint.
#include <algorithm>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/functions.h"
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::record;
using autograd::requires_grad;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {

// Whether a backward rule must record its own history: it runs under create_graph.
bool create_graph() { return autograd::GradMode::is_enabled(); }

// A convolution's bias gradient: g summed over (N, OH, OW), recorded under create_graph.
Tensor bias_grad(const Tensor& g, bool needed, bool create_graph) {
  if (!needed) return Tensor();
  return create_graph ? sum(g, {0, 2, 3}) : ops::sum(g, {0, 2, 3});
}

// conv2d's gradient with respect to its weight, as a differentiable op: x (N, Cin, H, W) and g (N, Cout, OH, OW)
// -> (Cout, Cin / G, KH, KW). Bilinear: with G the incoming gradient (of the weight's shape),
// dx = conv2d_backward_input(g, G) (conv_transpose2d of g by G) and dg = conv2d(x, G).
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, IntArrayRef w_shape, const Conv2dParams& p) {
  Tensor out = ops::conv2d_backward_weight(g, x, w_shape, p);
  if (should_record(x, g)) {
    SavedTensor sx(x, false), sg(g, false);
    record("conv2d_weight_grad", out, {x, g},
           [sx, sg, p, x_shape = x.sizes()](const Tensor& gw, const OpNode& n) {
             const Tensor gx = sx.get(n), gg = sg.get(n);
             if (create_graph()) {
               return TensorList{n.needs_input_grad(0) ? conv_transpose2d(gg, gw, Tensor(), p, x_shape) : Tensor(),
                                 n.needs_input_grad(1) ? conv2d(gx, gw, Tensor(), p) : Tensor()};
             }
             return TensorList{n.needs_input_grad(0) ? ops::conv2d_backward_input(gg, gw, x_shape, p) : Tensor(),
                               n.needs_input_grad(1) ? ops::conv2d(gx, gw, Tensor(), p) : Tensor()};
           });
  }
  return out;
}

// max pooling's gradient as a differentiable op: g (N, C, OH, OW) added at `indices` (flat h * W + w in each
// plane) of a zero (N, C, H, W). Linear in g; its gradient reads G back at the same indices.
Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, IntArrayRef x_shape, const Pool2dParams& p) {
  Tensor out = ops::max_pool2d_backward(g, indices, x_shape, p);
  if (should_record(g)) {
    record("max_pool2d_backward", out, {g}, [indices](const Tensor& gx, const OpNode&) {
      const Shape& s = indices.sizes();
      const Tensor planes = gx.reshape({s[0], s[1], -1});
      return TensorList{gather(planes, 2, indices.reshape({s[0], s[1], -1})).view(s)};
    });
  }
  return out;
}

// adaptive average pooling's gradient as a differentiable op: g (the pooled shape) -> x_shape. Its own gradient
// is the pooling of the incoming one.
Tensor adaptive_avg_pool_backward(const Tensor& g, IntArrayRef x_shape) {
  Tensor out = ops::adaptive_avg_pool_backward(g, x_shape);
  if (should_record(g)) {
    record("adaptive_avg_pool_backward", out, {g}, [g_shape = g.sizes()](const Tensor& gx, const OpNode&) {
      const size_t k = std::min<size_t>(3, g_shape.size() - 1);
      return TensorList{adaptive_avg_pool(gx, IntArrayRef(g_shape.data() + (g_shape.size() - k), k))};
    });
  }
  return out;
}

}  // namespace

// adaptive_avg_pool: dx = each output's g spread evenly over its bin (overlapping bins add)
Tensor adaptive_avg_pool(const Tensor& x, IntArrayRef output_size) {
  Tensor out = ops::adaptive_avg_pool(x, output_size);
  if (should_record(x)) {
    record("adaptive_avg_pool", out, {x}, [x_shape = x.sizes()](const Tensor& g, const OpNode&) {
      if (create_graph()) return TensorList{adaptive_avg_pool_backward(g, x_shape)};
      return TensorList{ops::adaptive_avg_pool_backward(g, x_shape)};
    });
  }
  return out;
}

// conv2d: x (N, Cin, H, W), w (Cout, Cin / G, KH, KW), b (Cout), g (N, Cout, OH, OW):
// dx = conv2d_backward_input(g, w), dw = conv2d_backward_weight(g, x), db = g summed over (N, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  if (autocast::wants_lower({&x, &weight, &bias}))
    return conv2d(autocast::lower(x), autocast::lower(weight), autocast::lower(bias), p);
  Tensor out = ops::conv2d(x, weight, bias, p);
  if (should_record(x, weight, bias)) {
    // x is needed only for dw and w only for dx
    SavedTensor sx = requires_grad(weight) ? SavedTensor(x, false) : SavedTensor();
    SavedTensor sw = requires_grad(x) ? SavedTensor(weight, false) : SavedTensor();
    std::vector<Tensor> inputs{x, weight};
    if (bias.defined()) inputs.push_back(bias);
    record("conv2d", out, inputs,
           [sx, sw, p, has_bias = bias.defined(), x_shape = x.sizes(), w_shape = weight.sizes()](const Tensor& g, const OpNode& n) {
             const bool cg = create_graph();
             TensorList grads{Tensor(), Tensor()};
             if (n.needs_input_grad(0)) {
               grads[0] = cg ? conv_transpose2d(g, sw.get(n), Tensor(), p, x_shape)
                             : ops::conv2d_backward_input(g, sw.get(n), x_shape, p);
             }
             if (n.needs_input_grad(1)) {
               grads[1] = cg ? conv2d_weight_grad(sx.get(n), g, w_shape, p)
                             : ops::conv2d_backward_weight(g, sx.get(n), w_shape, p);
             }
             if (has_bias) grads.push_back(bias_grad(g, n.needs_input_grad(2), cg));
             return grads;
           });
  }
  return out;
}

// conv_transpose2d: the gradient of conv2d with respect to its input, used as a layer. Seen as the conv2d whose
// weight is `weight` (its out channels are x's) and whose input has out_shape: out = conv2d_backward_input(x, w)
// (+ bias), so dx = conv2d(g, w), dw = conv2d_backward_weight(x, g) (x in the place of conv2d's grad_out), db = g
// summed over (N, OH, OW).
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                        IntArrayRef out_shape) {
  if (autocast::wants_lower({&x, &weight, &bias}))
    return conv_transpose2d(autocast::lower(x), autocast::lower(weight), autocast::lower(bias), p, out_shape);
  Tensor out = ops::conv2d_backward_input(x, weight, out_shape, p);
  if (bias.defined()) out = ops::add(out, ops::view(ops::to(bias, out.dtype()), {1, bias.numel(), 1, 1}));
  if (should_record(x, weight, bias)) {
    SavedTensor sx = requires_grad(weight) ? SavedTensor(x, false) : SavedTensor();
    SavedTensor sw = requires_grad(x) ? SavedTensor(weight, false) : SavedTensor();
    std::vector<Tensor> inputs{x, weight};
    if (bias.defined()) inputs.push_back(bias);
    record("conv_transpose2d", out, inputs,
           [sx, sw, p, has_bias = bias.defined(), w_shape = weight.sizes()](const Tensor& g, const OpNode& n) {
             const bool cg = create_graph();
             TensorList grads{Tensor(), Tensor()};
             if (n.needs_input_grad(0)) {
               grads[0] = cg ? conv2d(g, sw.get(n), Tensor(), p) : ops::conv2d(g, sw.get(n), Tensor(), p);
             }
             if (n.needs_input_grad(1)) {
               grads[1] = cg ? conv2d_weight_grad(g, sx.get(n), w_shape, p)
                             : ops::conv2d_backward_weight(sx.get(n), g, w_shape, p);
             }
             if (has_bias) grads.push_back(bias_grad(g, n.needs_input_grad(2), cg));
             return grads;
           });
  }
  return out;
}

// max_pool2d: x (N, C, H, W), g (N, C, OH, OW): dx = g added at the recorded indices (overlaps summed)
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p) {
  auto [out, indices] = ops::max_pool2d_with_indices(x, p);
  if (should_record(x)) {
    record("max_pool2d", out, {x}, [indices, p, x_shape = x.sizes()](const Tensor& g, const OpNode&) {
      if (create_graph()) return TensorList{max_pool2d_backward(g, indices, x_shape, p)};
      return TensorList{ops::max_pool2d_backward(g, indices, x_shape, p)};
    });
  }
  return {out, indices};
}

}  // namespace kiln
