// Differentiable convolution and max pooling over the kernels of kiln/tensor/ops/conv.h. Their backward rules
// call the backward kernels directly, which are not themselves recorded: first-order gradients only. A
// backward run with create_graph reaching one of these rules stops with an error rather than return
// gradients that silently lack their own history.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/record.h"

namespace kiln {

using autograd::OpNode;
using autograd::record;
using autograd::requires_grad;
using autograd::SavedTensor;
using autograd::should_record;
using autograd::TensorList;

namespace {
void check_first_order(const char* op) {
  KILN_CHECK(!autograd::GradMode::is_enabled(), op, ": double backward (create_graph) is not supported by its kernel; "
             "use the composite nn::F path or first-order gradients");
}
}  // namespace

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
             check_first_order("conv2d");
             TensorList grads{n.needs_input_grad(0) ? ops::conv2d_backward_input(g, sw.get(n), x_shape, p) : Tensor(),
                              n.needs_input_grad(1) ? ops::conv2d_backward_weight(g, sx.get(n), w_shape, p) : Tensor()};
             if (has_bias) grads.push_back(n.needs_input_grad(2) ? ops::sum(g, {0, 2, 3}) : Tensor());
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
             check_first_order("conv_transpose2d");
             TensorList grads{n.needs_input_grad(0) ? ops::conv2d(g, sw.get(n), Tensor(), p) : Tensor(),
                              n.needs_input_grad(1) ? ops::conv2d_backward_weight(sx.get(n), g, w_shape, p) : Tensor()};
             if (has_bias) grads.push_back(n.needs_input_grad(2) ? ops::sum(g, {0, 2, 3}) : Tensor());
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
      check_first_order("max_pool2d");
      return TensorList{ops::max_pool2d_backward(g, indices, x_shape, p)};
    });
  }
  return {out, indices};
}

}  // namespace kiln
