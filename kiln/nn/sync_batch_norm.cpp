// Batch norm whose statistics span several processes (functional::sync_batch_norm; BatchNormImpl calls it
// once distributed::convert_sync_batchnorm gave it a CrossProcessSum).
//
// Forward, each process r holds x_r (N_r, C, S). Per channel the fused kernels give its mean_r and biased var_r
// (ops::batch_norm_stats: sums in double on the CPU, about the rank's own mean), turned into float64 sums
// (n_r, n_r mean_r, n_r (var_r + mean_r^2)); one cross-process sum of those 2C + 1 values gives the totals:
// mean = sum / n, var = sumsq / n - mean^2, in float64. Every process then normalizes its own rows with that
// mean and var through the eval-mode batch norm kernel, one pass.
//
// Backward, with xhat the normalized input and dy the gradient of y = w xhat + b:
//   grad x = w invstd (dy - mean(dy) - xhat mean(dy xhat)),
// the two means taken over all processes' rows: the eval-mode backward kernel gives this process's sum dy and
// sum dy xhat (which are also its grad b and grad w), one more cross-process sum of those 2C values gives the
// totals, and ops::batch_norm_backward_input applies them in one pass. The loss on each process is its own (DDP
// averages the parameters' gradients afterwards), so grad w and grad b are this process's sums alone.
//
// That is the passes of a single process's fused batch norm (three over x forward, two backward) and two
// all-reduces a layer.
#include <utility>
#include <vector>

#include "kiln/autograd/function.h"
#include "kiln/nn/functional.h"
#include "kiln/tensor/ops/normalization.h"

namespace kiln::nn::functional {

namespace {

struct SyncBatchNormFunction : autograd::Function<SyncBatchNormFunction> {
  static constexpr const char* name = "SyncBatchNormBackward";

  // x: (N, C, S) contiguous. Returns y and hands the global mean and biased variance (float64) and the total
  // count back through `stats` for the running statistics.
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        double eps, const CrossProcessSum* sum, std::pair<Tensor, Tensor>* stats, double* count) {
    const int64_t C = x.size(1);
    const double n_local = static_cast<double>(x.size(0) * x.size(2));
    ops::BatchNormStats local = ops::batch_norm_stats(x);  // zeros for an empty shard, which adds nothing
    const DType stats_dtype = local.mean.dtype();
    Tensor mean64 = local.mean.to(kFloat64);
    Tensor packed = kiln::cat({full({1}, n_local, TensorOptions(kFloat64).device(x.device())), mean64 * n_local,
                               (local.var.to(kFloat64) + mean64 * mean64) * n_local},
                              0);
    (*sum)(packed);
    const double n = packed.narrow(0, 0, 1).cpu().item<double>();
    KILN_CHECK(n > 1, "sync_batch_norm: expected more than 1 value per channel over all processes in training, got ",
               n, " (this process's input ", shape_str(x.sizes()), ")");
    Tensor mean = packed.narrow(0, 1, C) / n;
    Tensor var = (packed.narrow(0, 1 + C, C) / n - mean * mean).clamp(0.0, std::nullopt);
    Tensor mean_s = mean.to(stats_dtype), var_s = var.to(stats_dtype);
    Tensor y = ops::batch_norm_forward(x, weight, bias, mean_s, var_s, eps, /*training=*/false).y;
    *stats = {mean, var};
    *count = n;
    ctx->save_for_backward({x, weight, mean_s, var_s});
    ctx->saved_data["sum"] = *sum;  // a copy: backward may run after the caller's function is gone
    ctx->saved_data["count"] = n;
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    KILN_CHECK(!autograd::GradMode::is_enabled(), "sync_batch_norm: backward with create_graph (a second derivative) is not "
               "supported; its backward is first-order only");
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &var = saved[3];
    const double eps = std::any_cast<double>(ctx->saved_data["eps"]);
    const int64_t C = x.size(1);
    Tensor dy = grads[0].defined() ? grads[0].contiguous() : zeros_like(x);
    // This process's sum dy xhat and sum dy: the eval-mode backward's weight and bias gradients.
    ops::BatchNormBackward local = ops::batch_norm_backward(dy, x, mean, var, weight, eps, /*training=*/false,
                                                            /*want_x=*/false, /*want_weight=*/true, /*want_bias=*/true);
    Tensor grad_weight, grad_bias, grad_x;
    if (weight.defined() && ctx->needs_input_grad(1)) grad_weight = local.grad_weight;
    if (ctx->needs_input_grad(2)) grad_bias = local.grad_bias;
    if (ctx->needs_input_grad(0)) {
      const auto& sum = std::any_cast<const CrossProcessSum&>(ctx->saved_data["sum"]);
      const double n = std::any_cast<double>(ctx->saved_data["count"]);
      Tensor total = kiln::cat({local.grad_bias.to(kFloat64), local.grad_weight.to(kFloat64)}, 0);
      sum(total);
      grad_x = ops::batch_norm_backward_input(dy, x, mean, var, weight, total.view({2, C}), static_cast<int64_t>(n), eps);
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
