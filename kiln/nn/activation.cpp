// torch.nn's activations beyond the ones autograd has always had (relu, gelu, silu, sigmoid, tanh, softplus,
// leaky_relu). elu (with selu and celu), hardtanh (with relu6), hardsigmoid, hardswish, mish, logsigmoid, the
// two shrinks and threshold have fused kernels for their value and gradient (kiln::activation,
// kiln/tensor/ops/activation_kind.h), as softplus does. The rest are composites of differentiable element-wise
// ops, so they run on every device and have every order of gradient.
#include "kiln/nn/activation.h"

#include <cmath>
#include <limits>

#include "kiln/nn/functional.h"

namespace kiln::nn::functional {

namespace {
// scale x for x > 0, else scale alpha (e^(x input_scale) - 1).
Tensor exponential_linear(const Tensor& x, double alpha, double scale, double input_scale) {
  return activation(x, Activation::elu, {.a = alpha, .b = scale, .c = input_scale});
}
}  // namespace

Tensor elu(const Tensor& x, double alpha) { return exponential_linear(x, alpha, 1.0, 1.0); }

Tensor selu(const Tensor& x) {
  // The constants of Klambauer et al. (2017), as PyTorch writes them.
  constexpr double kAlpha = 1.6732632423543772848170429916717;
  constexpr double kScale = 1.0507009873554804934193349852946;
  return exponential_linear(x, kAlpha, kScale, 1.0);
}

Tensor celu(const Tensor& x, double alpha) {
  KILN_CHECK(alpha != 0, "celu: alpha must not be 0");
  return exponential_linear(x, alpha, 1.0, 1.0 / alpha);
}

Tensor softsign(const Tensor& x) { return x / (abs(x) + 1.0); }

// Not clamp: clamp passes the gradient at its bounds, PyTorch's hardtanh does not.
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  return activation(x, Activation::hardtanh, {.a = min_val, .b = max_val});
}

Tensor relu6(const Tensor& x) { return hardtanh(x, 0.0, 6.0); }

Tensor hardsigmoid(const Tensor& x) { return activation(x, Activation::hardsigmoid); }

Tensor hardswish(const Tensor& x) { return activation(x, Activation::hardswish); }

Tensor mish(const Tensor& x) { return activation(x, Activation::mish); }

Tensor logsigmoid(const Tensor& x) { return activation(x, Activation::logsigmoid); }

Tensor tanhshrink(const Tensor& x) { return x - tanh(x); }

Tensor softshrink(const Tensor& x, double lambd) { return activation(x, Activation::softshrink, {.a = lambd}); }

Tensor hardshrink(const Tensor& x, double lambd) { return activation(x, Activation::hardshrink, {.a = lambd}); }

// Floating point: the fused kernel (value where x <= threshold, NaN kept). Integers keep their dtype, as in
// PyTorch, which casts threshold and value to it (truncating) before it compares: so threshold(-1, -1.5, 5)
// is 5, and an int64 past 2^24 is compared exactly, not as a float. A threshold or value the dtype cannot
// hold is an error there too.
Tensor threshold(const Tensor& x, double threshold, double value) {
  KILN_CHECK(x.defined(), "threshold: the input is an undefined tensor");
  if (is_floating(x.dtype())) return activation(x, Activation::threshold, {.a = threshold, .b = value});
  KILN_CHECK(x.dtype() != kBool, "threshold: not defined for bool tensors (expected a number dtype)");
  int64_t t = 0, v = 0;
  visit_dtype<kIntegralSet>(x.dtype(), "threshold", [&]<typename T>() {
    auto cast = [&](double d, const char* name) {
      // The range test in double: 2^63 rounds up, so the upper bound is exclusive of it.
      const double lo = static_cast<double>(std::numeric_limits<T>::lowest()),
                   hi = static_cast<double>(std::numeric_limits<T>::max());
      KILN_CHECK(std::isfinite(d) && std::trunc(d) >= lo && (sizeof(T) < 8 ? std::trunc(d) <= hi : d < hi),
                 "threshold: ", name, " ", d, " cannot be converted to the input's dtype ", x.dtype(),
                 " (expected a finite number in its range)");
      return static_cast<int64_t>(static_cast<T>(d));
    };
    t = cast(threshold, "threshold"), v = cast(value, "value");
  });
  return where(x <= Scalar(t), Scalar(v), x);
}

Tensor glu(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "glu: expected at least one dim, got a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "glu");
  const int64_t n = x.size(d);
  KILN_CHECK(n % 2 == 0, "glu: dim ", d, " of the input of shape ", shape_str(x.sizes()),
             " must have an even size to be halved, got ", n);
  return x.narrow(d, 0, n / 2) * sigmoid(x.narrow(d, n / 2, n / 2));
}

Tensor softmin(const Tensor& x, int64_t dim) { return softmax(-x, dim); }

Tensor prelu(const Tensor& x, const Tensor& weight) {
  KILN_CHECK(weight.defined(), "prelu: the weight is undefined");
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  KILN_CHECK(weight.numel() == 1 || weight.numel() == channels, "prelu: the weight has ", weight.numel(),
             " elements; expected 1 or the input's channels (dim 1 of ", shape_str(x.sizes()), "): ", channels);
  Tensor w = weight.reshape({-1});
  if (weight.numel() > 1) {
    Shape shape(static_cast<size_t>(x.dim()), 1);
    shape[1] = channels;
    w = w.view(shape);
  }
  return where(x > 0.0, x, x * w);
}

Tensor rrelu(const Tensor& x, double lower, double upper, bool training, Generator* gen) {
  KILN_CHECK(lower <= upper, "rrelu: lower = ", lower, " is above upper = ", upper);
  if (!training) return where(x > 0.0, x, x * ((lower + upper) / 2));
  const Tensor slope = rand_like(x, {}, gen) * (upper - lower) + lower;  // no gradient: drawn, not learned
  return where(x > 0.0, x, x * slope);
}

}  // namespace kiln::nn::functional

namespace kiln::nn {

PReLUImpl::PReLUImpl(int64_t num_parameters, double init) : Module("PReLU") {
  KILN_CHECK(num_parameters >= 1, "PReLU: num_parameters = ", num_parameters, ": expected >= 1");
  register_parameter("weight", weight, full({num_parameters}, init));
}

}  // namespace kiln::nn
