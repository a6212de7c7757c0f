// The normalizations that are not layer norm or RMS norm (functional.cpp): batch norm (a fused op with
// running statistics), group and instance norm (composites over the channels' groups) and AlexNet's local
// response norm (a window across channels).
#include <vector>

#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  // Under autocast: the statistics (and the running ones they update) in float32, as PyTorch computes them.
  // NOTE: the output is float32 here, where PyTorch's is the input's dtype; the next product casts it back.
  if (autocast::wants_float32({&x, &weight, &bias}))
    return batch_norm(autocast::float32(x), running_mean, running_var, autocast::float32(weight),
                      autocast::float32(bias), training, momentum, eps);
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected input (N, C, ...), got ", shape_str(x.sizes()));
  const int64_t C = x.size(1);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var come together (one of them is undefined)");
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    KILN_CHECK(!t->defined() || t->sizes() == Shape{C}, "batch_norm: running statistics, weight and bias must be (",
               C, ") for input of shape ", shape_str(x.sizes()), ", got ", shape_str(t->sizes()));
  // The fused op over (N, C, S), S the spatial dims flattened (1 for (N, C) input).
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  ops::BatchNormForward f =
      batch_norm_channels(x.reshape({x.size(0), C, S}), weight, bias, running_mean, running_var, eps, training);
  if (training && running_mean.defined()) {
    NoGradGuard no_grad;
    const int64_t count = x.size(0) * S;
    Tensor rm = running_mean, rv = running_var;
    ops::mul_(rm, 1 - momentum);
    ops::add_(rm, ops::to(f.mean, rm.dtype()), momentum);
    ops::mul_(rv, 1 - momentum);
    // the running variance is the unbiased one, as PyTorch keeps it
    ops::add_(rv, ops::to(f.var, rv.dtype()), momentum * static_cast<double>(count) / static_cast<double>(count - 1));
  }
  return f.y.view(x.sizes());
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::wants_float32({&x, &weight, &bias}))  // float32 under autocast
    return group_norm(autocast::float32(x), num_groups, autocast::float32(weight), autocast::float32(bias), eps);
  KILN_CHECK(x.dim() >= 2 && num_groups > 0 && x.size(1) % num_groups == 0, "group_norm: ", x.dim() >= 2 ? x.size(1) : 0,
             " channels cannot be split into ", num_groups, " groups (input ", shape_str(x.sizes()), ")");
  const int64_t N = x.size(0), C = x.size(1);
  Tensor g = x.reshape({N, num_groups, -1});
  Tensor centered = g - g.mean({2}, true);
  Tensor var = (centered * centered).mean({2}, true);
  Tensor y = (centered * rsqrt(var + eps)).view(x.sizes());
  Shape stat_shape(static_cast<size_t>(x.dim()), 1);
  stat_shape[1] = C;
  if (weight.defined()) y = y * weight.view(stat_shape);
  if (bias.defined()) y = y + bias.view(stat_shape);
  return y;
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  KILN_CHECK(x.dim() >= 3, "instance_norm: expected input (N, C, ...) with at least one position dim, got ",
             shape_str(x.sizes()));
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "instance_norm: give both running_mean and running_var, or neither");
  if (!use_input_stats) {
    KILN_CHECK(running_mean.defined(), "instance_norm: use_input_stats = false needs running_mean and running_var");
    return batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  const int64_t N = x.size(0), C = x.size(1);
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    const Tensor flat = x.detach().reshape({N, C, -1});
    KILN_CHECK(flat.size(2) > 1, "instance_norm: tracking running statistics needs more than one position per "
               "channel, got input ", shape_str(x.sizes()));
    const Tensor mean = flat.mean({2});                                         // (N, C)
    const Tensor var = ((flat - mean.unsqueeze(2)).pow(2.0)).sum({2}) / static_cast<double>(flat.size(2) - 1);
    Tensor rm = running_mean, rv = running_var;
    rm.copy_(rm * (1.0 - momentum) + mean.mean({0}).to(rm.dtype()) * momentum);
    rv.copy_(rv * (1.0 - momentum) + var.mean({0}).to(rv.dtype()) * momentum);
  }
  return group_norm(x, C, weight, bias, eps);
}

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  KILN_CHECK(x.dim() >= 3, "local_response_norm: expected input (N, C, ...) with at least one dim after the "
             "channels, got ", shape_str(x.sizes()));
  KILN_CHECK(size > 0, "local_response_norm: size must be positive, got ", size);
  // Each channel's window: size / 2 channels before it and (size - 1) / 2 after, zeros past the ends.
  std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - 1)), 0);  // the last dim's pair first
  pads[pads.size() - 2] = size / 2, pads[pads.size() - 1] = (size - 1) / 2;
  const Tensor squares = kiln::pad(x * x, pads, 0.0).unfold(1, size, 1).sum({x.dim()});
  return x / (squares * (alpha / static_cast<double>(size)) + k).pow(beta);
}

}  // namespace kiln::nn::functional
