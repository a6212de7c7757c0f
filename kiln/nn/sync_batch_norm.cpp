// Batch norm whose statistics span several processes (functional::sync_batch_norm; BatchNormImpl calls it
// once distributed::convert_sync_batchnorm gave it a CrossProcessSum).
//
// Forward, each process r holds x_r (N_r, C, S). Per channel it takes its mean_r and M2_r (the squares about
// its own mean, so the sum in the input's dtype is of centered values), turns them into float64 sums (n_r,
// n_r mean_r, M2_r + n_r mean_r^2), and one cross-process sum of those 2C + 1 values gives the totals:
// mean = sum / n, var = sumsq / n - mean^2, in float64.
// Every process then normalizes its own rows with the same mean and 1 / sqrt(var + eps).
//
// Backward, with xhat the normalized input and dy the gradient of y = w xhat + b:
//   grad x = w invstd (dy - mean(dy) - xhat mean(dy xhat)),
// the two means taken over all processes' rows: one more sum of 2C values. The loss on each process is its own
// (DDP averages the parameters' gradients afterwards), so grad w and grad b are this process's sums alone.
#include <utility>
#include <vector>

#include "kiln/autograd/function.h"
#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

namespace {

// Per-channel (C) view of a statistic against (N, C, S) rows.
Tensor per_channel(const Tensor& t, int64_t C) { return t.view({1, C, 1}); }

// The process's sums over (N, 0 and 2) of a, and of a * b, packed in float64: [sum a (C), sum a b (C)].
Tensor local_sums(const Tensor& a, const Tensor& b) {
  return kiln::cat({a.sum({0, 2}).to(kFloat64), (a * b).sum({0, 2}).to(kFloat64)}, 0);
}

struct SyncBatchNormFunction : autograd::Function<SyncBatchNormFunction> {
  static constexpr const char* name = "SyncBatchNormBackward";

  // x: (N, C, S). Returns y and hands the global mean and biased variance (float64) and the total count back
  // through `stats` for the running statistics.
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        double eps, const CrossProcessSum* sum, std::pair<Tensor, Tensor>* stats, double* count) {
    const int64_t C = x.size(1);
    const double n_local = static_cast<double>(x.size(0) * x.size(2));
    // This process's mean and squares about it; an empty shard (N_r = 0) adds nothing.
    Tensor mean_r = n_local > 0 ? x.mean({0, 2}) : zeros({C}, TensorOptions(x.dtype()).device(x.device()));
    Tensor centered = x - per_channel(mean_r, C);
    Tensor m2_r = (centered * centered).sum({0, 2}).to(kFloat64);
    Tensor mean64 = mean_r.to(kFloat64);
    Tensor packed = kiln::cat({full({1}, n_local, TensorOptions(kFloat64).device(x.device())), mean64 * n_local,
                               m2_r + mean64 * mean64 * n_local},
                              0);
    (*sum)(packed);
    const double n = packed.narrow(0, 0, 1).cpu().item<double>();
    KILN_CHECK(n > 1, "sync_batch_norm: expected more than 1 value per channel over all processes in training, got ",
               n, " (this process's input ", shape_str(x.sizes()), ")");
    Tensor mean = packed.narrow(0, 1, C) / n;
    Tensor var = (packed.narrow(0, 1 + C, C) / n - mean * mean).clamp(0.0, std::nullopt);
    Tensor invstd = (var + eps).rsqrt().to(x.dtype());
    Tensor xhat = (x - per_channel(mean.to(x.dtype()), C)) * per_channel(invstd, C);
    Tensor y = weight.defined() ? xhat * per_channel(weight, C) : xhat;
    if (bias.defined()) y = y + per_channel(bias, C);
    *stats = {mean, var};
    *count = n;
    ctx->save_for_backward({xhat, invstd, weight});
    ctx->saved_data["sum"] = *sum;  // a copy: backward may run after the caller's function is gone
    ctx->saved_data["count"] = n;
    return y;
  }

  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    KILN_CHECK(!autograd::GradMode::is_enabled(), "sync_batch_norm: backward with create_graph (a second derivative) is not "
               "supported; its backward is first-order only");
    auto saved = ctx->get_saved_variables();
    const Tensor &xhat = saved[0], &invstd = saved[1], &weight = saved[2];
    const int64_t C = xhat.size(1);
    Tensor dy = grads[0].defined() ? grads[0] : zeros_like(xhat);
    Tensor sums = local_sums(dy, xhat);  // [sum dy, sum dy xhat] over this process's rows
    Tensor grad_weight, grad_bias, grad_x;
    if (weight.defined() && ctx->needs_input_grad(1)) grad_weight = sums.narrow(0, C, C).to(weight.dtype());
    if (ctx->needs_input_grad(2)) grad_bias = sums.narrow(0, 0, C).to(xhat.dtype());
    if (ctx->needs_input_grad(0)) {
      const auto& sum = std::any_cast<const CrossProcessSum&>(ctx->saved_data["sum"]);
      const double n = std::any_cast<double>(ctx->saved_data["count"]);
      Tensor total = sums.clone();
      sum(total);
      Tensor mean_dy = (total.narrow(0, 0, C) / n).to(xhat.dtype());
      Tensor mean_dy_xhat = (total.narrow(0, C, C) / n).to(xhat.dtype());
      Tensor scale = weight.defined() ? invstd * weight : invstd;
      grad_x = (dy - per_channel(mean_dy, C) - xhat * per_channel(mean_dy_xhat, C)) * per_channel(scale, C);
    }
    return {grad_x, grad_weight, grad_bias};
  }
};

}  // namespace

Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, double momentum, double eps, const CrossProcessSum& sum) {
  if (autocast::wants_float32({&x, &weight, &bias}))  // float32 statistics under autocast, as batch_norm
    return sync_batch_norm(autocast::float32(x), running_mean, running_var, autocast::float32(weight),
                           autocast::float32(bias), momentum, eps, sum);
  KILN_CHECK(sum, "sync_batch_norm: no cross-process sum given");
  KILN_CHECK(x.dim() >= 2, "sync_batch_norm: expected input (N, C, ...), got ", shape_str(x.sizes()));
  KILN_CHECK(is_floating(x.dtype()), "sync_batch_norm: expected a floating-point input, got ", dtype_name(x.dtype()));
  const int64_t C = x.size(1);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "sync_batch_norm: running_mean and running_var come together (one of them is undefined)");
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    KILN_CHECK(!t->defined() || t->sizes() == Shape{C}, "sync_batch_norm: running statistics, weight and bias must "
               "be (", C, ") for input of shape ", shape_str(x.sizes()), ", got ", shape_str(t->sizes()));
  int64_t S = 1;  // the positions of each sample and channel, flattened
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  std::pair<Tensor, Tensor> stats;
  double count = 0;
  Tensor y = SyncBatchNormFunction::apply(x.reshape({x.size(0), C, S}).contiguous(), weight, bias, eps, &sum, &stats,
                                          &count);
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    Tensor rm = running_mean, rv = running_var;
    ops::mul_(rm, 1 - momentum);
    ops::add_(rm, ops::to(stats.first, rm.dtype()), momentum);
    ops::mul_(rv, 1 - momentum);
    // the unbiased variance of all processes' rows, as a single process's batch_norm keeps it
    ops::add_(rv, ops::to(stats.second, rv.dtype()), momentum * count / (count - 1));
  }
  return y.view(x.sizes());
}

}  // namespace kiln::nn::functional
