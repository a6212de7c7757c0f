// Every differentiable op of kiln/autograd/functions.h and every Tensor view and copy method, checked by
// gradcheck against central differences; then every case again one derivative higher (its gradgrad twin,
// see grad_test_util.h). Hessians of plain sums and second derivatives by hand: second_order_test.cpp.
//
// Each row is a name, a maker of float64 inputs (drawn from a generator seeded by the name) and the function
// checked; the name is the test's name. Inputs cover broadcasting, non-contiguous operands (a leaf viewed
// with .t() or a strided slice inside the function), size-1 dims and 0-dim tensors, and stay away from the
// points where an op is not differentiable (relu and abs at 0, clamp bounds, ties of max, log and sqrt near 0).
#include <limits>

#include "grad_test_util.h"

namespace kiln {
namespace {

using namespace test;
using In = const TensorVec&;

// ---- element-wise unary ----

struct UnaryOp {
  std::string name;
  std::function<Tensor(const Tensor&)> f;
  std::function<void(Tensor&)> f_;  // the in-place variant, if any
  Domain domain;
};

#define UNARY(op, domain) \
  UnaryOp { #op, [](const Tensor& x) { return op(x); }, [](Tensor& x) { op##_(x); }, Domain::domain }

std::vector<GradCase> unary_cases() {
  std::vector<UnaryOp> ops_ = {
      UNARY(neg, Any),   UNARY(abs, AwayFromZero), UNARY(sign, AwayFromZero), UNARY(exp, Any),
      UNARY(log, Positive), UNARY(log1p, AboveMinusOne), UNARY(expm1, Any), UNARY(sqrt, Positive),
      UNARY(rsqrt, Positive), UNARY(sin, Any), UNARY(cos, Any), UNARY(tanh, Any),
      UNARY(sigmoid, Any), UNARY(relu, AwayFromZero), UNARY(silu, Any), UNARY(erf, Any),
      UNARY(log2, Positive), UNARY(log10, Positive), UNARY(reciprocal, AwayFromZero), UNARY(tan, InsideUnit),
      UNARY(asin, InsideUnit), UNARY(acos, InsideUnit), UNARY(atan, Any),
      UNARY(sinh, Any), UNARY(cosh, Any), UNARY(asinh, Any), UNARY(atanh, InsideUnit),
      {"acosh", [](const Tensor& x) { return acosh(x + 1); }, [](Tensor& x) {
         x.add_(1);
         acosh_(x);
       },
       Domain::Positive},
      // Piecewise constant: the gradient is 0 and so are the central differences away from the steps (the
      // inputs are random; a step within eps of one has probability ~1e-6).
      UNARY(floor, Any), UNARY(ceil, Any), UNARY(round, Any), UNARY(trunc, Any),
      {"gelu", [](const Tensor& x) { return gelu(x); }, nullptr, Domain::Any},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, nullptr, Domain::Any},
      {"softplus", [](const Tensor& x) { return softplus(x); }, nullptr, Domain::Any},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, [](Tensor& x) { leaky_relu_(x, 0.1); },
       Domain::AwayFromZero},
      {"pow_3", [](const Tensor& x) { return pow(x, 3); }, [](Tensor& x) { pow_(x, 3); }, Domain::Any},
      {"pow_2", [](const Tensor& x) { return pow(x, 2.0); }, nullptr, Domain::Any},
      {"pow_0", [](const Tensor& x) { return pow(x, 0.0); }, nullptr, Domain::Any},
      {"pow_2_5", [](const Tensor& x) { return pow(x, 2.5); }, [](Tensor& x) { pow_(x, 2.5); }, Domain::Positive},
      {"pow_minus_1_5", [](const Tensor& x) { return pow(x, -1.5); }, nullptr, Domain::Positive},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, [](Tensor& x) { clamp_(x, -0.5, 0.7); },
       Domain::Any},
      {"clamp_min", [](const Tensor& x) { return clamp(x, 0.2, std::nullopt); }, nullptr, Domain::Any},
      {"clamp_max", [](const Tensor& x) { return clamp(x, std::nullopt, -0.2); }, nullptr, Domain::Any},
      // The fused activations (their one-pass backward; the twins check the form create_graph switches to).
      {"elu", [](const Tensor& x) { return activation(x, Activation::elu, {1.3, 1.0, 1.0}); }, nullptr,
       Domain::AwayFromZero},
      {"celu_negative_alpha", [](const Tensor& x) { return activation(x, Activation::elu, {-0.8, 1.0, -1.25}); },
       nullptr, Domain::AwayFromZero},
      {"hardtanh", [](const Tensor& x) { return activation(x, Activation::hardtanh, {-0.6, 1.4}); }, nullptr,
       Domain::Any},
      {"hardsigmoid", [](const Tensor& x) { return activation(x, Activation::hardsigmoid); }, nullptr, Domain::Any},
      {"hardswish", [](const Tensor& x) { return activation(x, Activation::hardswish); }, nullptr, Domain::Any},
      {"mish", [](const Tensor& x) { return activation(x, Activation::mish); }, nullptr, Domain::Any},
  };
  std::vector<GradCase> cases;
  for (const UnaryOp& op : ops_) {
    Domain d = op.domain;
    cases.push_back(single(op.name, leaves({{2, 3}}, d), [f = op.f](In in) { return f(in[0]); }));
    cases.push_back(single(op.name + "_transposed", leaves({{3, 2}}, d), [f = op.f](In in) { return f(in[0].t()); }));
    cases.push_back(single(op.name + "_0dim", leaves({Shape{}}, d), [f = op.f](In in) { return f(in[0]); }));
    if (op.f_)
      cases.push_back(single(op.name + "_inplace", leaves({{2, 1, 3}}, d), [f_ = op.f_](In in) {
        Tensor y = in[0] * 1.0;
        f_(y);
        return y;
      }));
  }
  // softplus switches to the identity above threshold / beta: values on both sides, none near it.
  cases.push_back(single("softplus_beta_threshold",
                         [] { return TensorVec{leaf_of({-1.3, 0.4, 1.0, 2.1, 3.0, -0.2}, {2, 3})}; },
                         [](In in) { return softplus(in[0], 2.0, 3.0); }));
  // hardsigmoid and hardswish beyond +-3, where their other branches are.
  cases.push_back(single("hard_activations_every_branch",
                         [] { return TensorVec{leaf_of({-4.1, -2.2, 0.3, 2.9, 3.4, 5.0}, {2, 3})}; }, [](In in) {
                           return activation(in[0], Activation::hardswish) * 2 + activation(in[0], Activation::hardsigmoid);
                         }));
  // The Tensor methods of the same ops (a wrong one shows as a wrong sum).
  cases.push_back(single("methods_unary", leaves({{2, 3}}, Domain::Positive), [](In in) {
    const Tensor& x = in[0];
    return x.neg() + x.abs() + x.sign() + x.exp() + x.log() + x.sqrt() + x.rsqrt() + x.sin() + x.cos() +
           x.tanh() + x.sigmoid() + x.relu() + x.pow(1.5) + x.clamp(0.2, 1.9);
  }));
  return cases;
}

// ---- element-wise binary and ternary ----

struct BinaryOp {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> f;
  std::function<void(Tensor&, const Tensor&)> f_;
  Domain da, db;
};

#define BINARY(op, da, db)                                                                                   \
  BinaryOp {                                                                                                  \
    #op, [](const Tensor& a, const Tensor& b) { return op(a, b); }, [](Tensor& a, const Tensor& b) { op##_(a, b); }, \
        Domain::da, Domain::db                                                                                \
  }

std::vector<GradCase> binary_cases() {
  std::vector<BinaryOp> ops_ = {
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.0); },
       [](Tensor& a, const Tensor& b) { add_(a, b, 2.0); }, Domain::Any, Domain::Any},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -0.5); },
       [](Tensor& a, const Tensor& b) { sub_(a, b, -0.5); }, Domain::Any, Domain::Any},
      BINARY(mul, Any, Any),
      BINARY(div, Any, AwayFromZero),
      BINARY(maximum, Any, Any),
      BINARY(minimum, Any, Any),
      BINARY(pow, Positive, Any),
      BINARY(atan2, Any, AwayFromZero),
      BINARY(fmod, Any, AwayFromZero),
      BINARY(remainder, Any, AwayFromZero),
      {"operator_add", [](const Tensor& a, const Tensor& b) { return a + b; },
       [](Tensor& a, const Tensor& b) { a += b; }, Domain::Any, Domain::Any},
      {"operator_sub", [](const Tensor& a, const Tensor& b) { return a - b; },
       [](Tensor& a, const Tensor& b) { a -= b; }, Domain::Any, Domain::Any},
      {"operator_mul", [](const Tensor& a, const Tensor& b) { return a * b; },
       [](Tensor& a, const Tensor& b) { a *= b; }, Domain::Any, Domain::Any},
      {"operator_div", [](const Tensor& a, const Tensor& b) { return a / b; },
       [](Tensor& a, const Tensor& b) { a /= b; }, Domain::Any, Domain::AwayFromZero},
      {"method_mul", [](const Tensor& a, const Tensor& b) { return a.mul(b); },
       [](Tensor& a, const Tensor& b) { a.mul_(b); }, Domain::Any, Domain::Any},
  };
  struct Shapes {
    const char* suffix;
    Shape a, b;
    bool transpose_a;  // a is made as its transpose and viewed back with .t() inside the function
  };
  const std::vector<Shapes> shapes = {
      {"", {2, 3}, {2, 3}, false},        {"_broadcast", {3, 1, 4}, {2, 4}, false},
      {"_broadcast_col", {4}, {3, 1}, false}, {"_0dim_rhs", {2, 3}, {}, false},
      {"_0dim_lhs", {}, {2, 3}, false},   {"_transposed", {3, 2}, {2, 3}, true},
  };
  std::vector<GradCase> cases;
  for (const BinaryOp& op : ops_) {
    for (const Shapes& s : shapes) {
      Maker inputs = [s, da = op.da, db = op.db] { return TensorVec{sample(da, s.a), sample(db, s.b)}; };
      cases.push_back(single(op.name + s.suffix, inputs, [f = op.f, t = s.transpose_a](In in) {
        return f(t ? in[0].t() : in[0], in[1]);
      }));
    }
    // In place on a non-leaf: self (2, 3, 4) keeps its shape, other (3, 1) broadcasts.
    Maker inputs = [da = op.da, db = op.db] { return TensorVec{sample(da, {2, 3, 4}), sample(db, {3, 1})}; };
    cases.push_back(single(op.name + "_inplace", inputs, [f_ = op.f_](In in) {
      Tensor y = in[0] * 1.0;
      f_(y, in[1]);
      return y;
    }));
  }
  // Scalar operands.
  auto one = leaves({{2, 3}});
  auto away = leaves({{2, 3}}, Domain::AwayFromZero);
  auto positive = leaves({{2, 3}}, Domain::Positive);
  cases.push_back(single("add_scalar", one, [](In in) { return add(in[0], 2.5); }));
  cases.push_back(single("sub_scalar_alpha", one, [](In in) { return sub(in[0], 1.5, 2.0); }));
  cases.push_back(single("mul_scalar", one, [](In in) { return mul(in[0], -3.0); }));
  cases.push_back(single("div_scalar", one, [](In in) { return div(in[0], 0.7); }));
  cases.push_back(single("maximum_scalar", one, [](In in) { return maximum(in[0], 0.3); }));
  cases.push_back(single("minimum_scalar", one, [](In in) { return minimum(in[0], -0.3); }));
  cases.push_back(single("pow_scalar_base", one, [](In in) { return pow(1.7, in[0]); }));
  cases.push_back(single("operator_neg", one, [](In in) { return -in[0]; }));
  cases.push_back(single("operator_scalar_minus_tensor", one, [](In in) { return 2.0 - in[0]; }));
  cases.push_back(single("operator_scalar_div_tensor", away, [](In in) { return 3.0 / in[0]; }));
  cases.push_back(single("operator_tensor_ops_scalar", one, [](In in) { return (in[0] * 2.0 + 1.5) / 4.0 - 1.0; }));
  cases.push_back(single("inplace_scalars", positive, [](In in) {
    Tensor y = in[0] * 1.0;
    mul_(y, 3.0);
    add_(y, 1.0);
    y.mul_(0.5);
    y.add_(2.0);
    div_(y, 1.5);
    sub_(y, 0.25);
    pow_(y, 1.5);
    maximum_(y, 1.2);
    minimum_(y, 2.5);
    return y;
  }));
  cases.push_back(single("methods_binary", [] { return TensorVec{leaf({2, 3}), leaf({3}), leaf_away({2, 1})}; },
                         [](In in) {
                           const Tensor &a = in[0], &b = in[1], &c = in[2];
                           Tensor y = a.add(b, 2.0).sub(b, 0.5).mul(c).div(c) + c.abs().pow(b) * 0.1;
                           y.add_(b, -1.0);
                           y.sub_(c, 0.5);
                           y.div_(c);
                           return y;
                         }));
  // where / masked_fill / lerp, broadcasting all operands.
  auto mask = [] { return bools({1, 0, 0, 1, 1, 0, 1, 0}, {2, 4}); };
  cases.push_back(single("where", [mask] { return TensorVec{mask(), leaf({3, 2, 4}), leaf({4})}; },
                         [](In in) { return where(in[0], in[1], in[2]); }));
  cases.push_back(single("where_scalar_a", [mask] { return TensorVec{mask(), leaf({3, 1, 4})}; },
                         [](In in) { return where(in[0], 2.0, in[1]); }));
  cases.push_back(single("where_scalar_b", [mask] { return TensorVec{mask(), leaf({4, 2}) }; },
                         [](In in) { return where(in[0], in[1].t(), -1.0); }));
  cases.push_back(single("masked_fill", [mask] { return TensorVec{leaf({3, 2, 4}), mask()}; },
                         [](In in) { return masked_fill(in[0], in[1], 0.5); }));
  cases.push_back(single("masked_fill_inplace", [mask] { return TensorVec{leaf({3, 2, 4}), mask()}; },
                         [](In in) {
                           Tensor y = in[0] * 1.0;
                           y.masked_fill_(in[1], 0.5);
                           return y;
                         }));
  cases.push_back(single("lerp", leaves({{2, 3}, {3}, {2, 1}}), [](In in) { return lerp(in[0], in[1], in[2]); }));
  cases.push_back(single("lerp_scalar_weight", leaves({{2, 3}, {2, 3}}), [](In in) { return lerp(in[0], in[1], 0.3); }));
  return cases;
}

// ---- reductions and softmax ----

std::vector<GradCase> reduce_cases() {
  auto x = leaves({{2, 3, 4}});
  auto xt = leaves({{4, 3}});  // viewed as (3, 4) with .t()
  auto away = leaves({{2, 3, 4}}, Domain::AwayFromZero);
  auto near_one = [] { return TensorVec{leaf_away({2, 3, 4}, 0.6, 1.4)}; };
  // prod with zeros: one zero in the whole tensor, and rows with one zero and with two zeros.
  auto one_zero = [] { return TensorVec{leaf_of({0.9, -1.2, 0.0, 1.1, -0.8, 1.3}, {2, 3})}; };
  auto zero_rows = [] { return TensorVec{leaf_of({0.9, 0.0, 1.2, 0.0, -0.8, 0.0, 1.3, -1.1, 0.7}, {3, 3})}; };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<GradCase> c = {
      single("sum_all", x, [](In in) { return sum(in[0]); }),
      single("sum_dim1", x, [](In in) { return sum(in[0], {1}); }),
      single("sum_dims02_keepdim", x, [](In in) { return sum(in[0], {0, 2}, true); }),
      single("sum_neg_dim", x, [](In in) { return sum(in[0], {-1}); }),
      single("sum_dtype", x, [](In in) { return sum(in[0], {1}, false, kFloat64); }),
      single("sum_0dim", leaves({Shape{}}), [](In in) { return sum(in[0]); }),
      single("reductions_0dim_over_dim0", leaves({Shape{}}, Domain::AwayFromZero), [](In in) {
        const Tensor& s = in[0];
        return sum(s, {0}) + mean(s, {0}, true) + prod(s, {0}) + amax(s, {-1}) + var(s * s, {0}, 0.0) +
               logsumexp(s, {0}) + norm(s, 3.0, {0});
      }),
      single("sum_transposed", xt, [](In in) { return sum(in[0].t(), {1}); }),
      single("method_sum", x, [](In in) { return in[0].sum({2}, true) + in[0].sum(); }),
      single("mean_all", x, [](In in) { return mean(in[0]); }),
      single("mean_dim1", x, [](In in) { return mean(in[0], {1}); }),
      single("mean_dims02_keepdim", x, [](In in) { return mean(in[0], {0, 2}, true); }),
      single("method_mean", xt, [](In in) { return in[0].t().mean({0}) * in[0].mean(); }),
      single("prod_all", near_one, [](In in) { return prod(in[0]); }),
      single("prod_dim1", near_one, [](In in) { return prod(in[0], {1}); }),
      single("prod_dim2_keepdim", near_one, [](In in) { return prod(in[0], {2}, true); }),
      single("prod_one_zero", one_zero, [](In in) { return prod(in[0]); }),
      single("prod_one_zero_dim", one_zero, [](In in) { return prod(in[0], {1}); }),
      single("prod_zero_rows_dim", zero_rows, [](In in) { return prod(in[0], {1}); }),
      single("prod_zero_rows_all", zero_rows, [](In in) { return prod(in[0]); }),
      single("amax_all", x, [](In in) { return amax(in[0]); }),
      single("amax_dim1", x, [](In in) { return amax(in[0], {1}); }),
      single("amax_dims02_keepdim", x, [](In in) { return amax(in[0], {0, 2}, true); }),
      single("amin_dim2", x, [](In in) { return amin(in[0], {2}); }),
      single("amin_transposed", xt, [](In in) { return amin(in[0].t(), {0}); }),
      single("max_all", x, [](In in) { return max(in[0]); }),
      single("min_all", x, [](In in) { return min(in[0]); }),
      single("method_max_min", x, [](In in) { return in[0].max() - in[0].min(); }),
      multi("max_dim", x, [](In in) { auto [v, i] = max(in[0], 1); return TensorVec{v, i}; }),
      multi("max_dim_keepdim", x, [](In in) { auto [v, i] = max(in[0], -1, true); return TensorVec{v, i}; }),
      multi("min_dim", xt, [](In in) { auto [v, i] = min(in[0].t(), 0); return TensorVec{v, i}; }),
      single("min_dim_keepdim", x, [](In in) { return min(in[0], 2, true).first; }),
      single("max_dim_0dim", leaves({Shape{}}), [](In in) { return max(in[0], 0).first; }),
      // Sorting permutes: each value's gradient goes back to where it came from (weighted by ramp, so that a
      // wrong destination shows).
      single("sort_dim1", x, [](In in) { return sort(in[0], 1).first * ramp({2, 3, 4}); }),
      single("sort_descending_transposed", xt,
             [](In in) { return sort(in[0].t(), 0, true).first * ramp({3, 4}); }),
      single("topk_dim2", x, [](In in) { return topk(in[0], 2, 2).first * ramp({2, 3, 2}); }),
      single("topk_smallest_dim0", x, [](In in) { return topk(in[0], 1, 0, false).first * ramp({1, 3, 4}); }),
      single("cumsum_dim1", x, [](In in) { return cumsum(in[0], 1) * ramp({2, 3, 4}); }),
      single("cumsum_dim0_transposed", xt, [](In in) { return cumsum(in[0].t(), 0) * ramp({3, 4}); }),
      single("cumsum_0dim", leaves({Shape{}}), [](In in) { return cumsum(in[0], 0); }),
      single("var_all", x, [](In in) { return var(in[0]); }),
      single("var_dim1", x, [](In in) { return var(in[0], {1}); }),
      single("var_dims02_keepdim_correction0", x, [](In in) { return var(in[0], {0, 2}, 0.0, true); }),
      single("std_all", x, [](In in) { return std(in[0]); }),
      single("std_dim2", x, [](In in) { return std(in[0], {2}); }),
      single("std_dim0_keepdim_correction0", xt, [](In in) { return std(in[0].t(), {0}, 0.0, true); }),
      single("norm_2", x, [](In in) { return norm(in[0]); }),
      single("norm_1", away, [](In in) { return norm(in[0], 1.0); }),
      single("norm_3", away, [](In in) { return norm(in[0], 3.0); }),
      single("norm_inf", x, [inf](In in) { return norm(in[0], inf); }),
      single("norm_2_dim1", x, [](In in) { return norm(in[0], 2.0, {1}); }),
      single("norm_1_dim2_keepdim", away, [](In in) { return norm(in[0], 1.0, {2}, true); }),
      single("norm_3_dims01", away, [](In in) { return norm(in[0], 3.0, {0, 1}); }),
      single("norm_inf_dim2", x, [inf](In in) { return norm(in[0], inf, {2}); }),
      // 1 < p < 2 is differentiable at 0 (the derivative is 0 there; the second one is not finite).
      once(single("norm_1_5_with_zero", one_zero, [](In in) { return norm(in[0], 1.5, {1}); })),
      single("logsumexp_dim1", x, [](In in) { return logsumexp(in[0], {1}); }),
      single("logsumexp_dims02_keepdim", x, [](In in) { return logsumexp(in[0], {0, 2}, true); }),
      single("logsumexp_all", x, [](In in) { return logsumexp(in[0], {}); }),
      single("logsumexp_large", [] { return TensorVec{leaf({2, 3}, 500.0, 503.0)}; },
             [](In in) { return logsumexp(in[0], {1}); }),
  };
  for (int64_t dim : {0, 1, 2, -1}) {
    std::string d = dim < 0 ? "neg1" : std::to_string(dim);
    // Weighted: softmax sums to 1 along dim, so the plain sum would have a zero gradient.
    c.push_back(single("softmax_dim" + d, x, [dim](In in) { return softmax(in[0], dim) * ramp({2, 3, 4}); }));
    c.push_back(single("log_softmax_dim" + d, x, [dim](In in) { return log_softmax(in[0], dim); }));
  }
  c.push_back(single("softmax_transposed", xt, [](In in) { return softmax(in[0].t(), 1); }));
  c.push_back(single("log_softmax_transposed", xt, [](In in) { return log_softmax(in[0].t(), 0); }));
  c.push_back(single("softmax_0dim", leaves({Shape{}}), [](In in) { return softmax(in[0], 0); }));
  return c;
}

// ---- linear algebra ----

std::vector<GradCase> linalg_cases() {
  auto mm2 = [](In in) { return matmul(in[0], in[1]); };
  std::vector<GradCase> c = {
      single("matmul_1d_1d", leaves({{3}, {3}}), mm2),
      // einsum is a composite of diagonals, sums and bmm (functions/einsum.cpp).
      single("einsum_three_operands", leaves({{2, 3, 2}, {2, 3}, {3, 2}}),
             [](In in) { return einsum("abc,cd,de->abe", {in[0], in[1], in[2]}); }),
      single("einsum_diagonal_and_broadcast", leaves({{2, 3, 3}, {1, 3}}),
             [](In in) { return einsum("...ii,...i->...i", {in[0], in[1]}); }),
      single("einsum_attention_scores", leaves({{2, 3, 4}, {2, 2, 4}}),
             [](In in) { return einsum("bqd,bkd->bqk", {in[0], in[1]}); }),
      single("matmul_2d_1d", leaves({{2, 3}, {3}}), mm2),
      single("matmul_1d_2d", leaves({{3}, {3, 4}}), mm2),
      single("matmul_2d_2d", leaves({{2, 3}, {3, 4}}), mm2),
      single("matmul_3d_2d", leaves({{2, 2, 3}, {3, 4}}), mm2),
      single("matmul_2d_3d", leaves({{2, 3}, {2, 3, 2}}), mm2),
      single("matmul_1d_3d", leaves({{3}, {2, 3, 4}}), mm2),
      single("matmul_3d_1d", leaves({{2, 3, 4}, {4}}), mm2),
      single("matmul_broadcast_batch", leaves({{2, 1, 2, 3}, {3, 3, 2}}), mm2),
      single("matmul_transposed", leaves({{3, 2}, {4, 3}}), [](In in) { return matmul(in[0].t(), in[1].t()); }),
      single("matmul_strided", leaves({{2, 6}, {3, 2}}),
             [](In in) { return in[0].slice(1, 0, std::nullopt, 2).matmul(in[1]); }),
      single("method_mm", leaves({{2, 3}, {3, 4}}), [](In in) { return in[0].mm(in[1]); }),
      single("mm", leaves({{2, 3}, {4, 3}}), [](In in) { return mm(in[0], in[1].t()); }),
      single("bmm", leaves({{2, 2, 3}, {2, 3, 4}}), [](In in) { return bmm(in[0], in[1]); }),
      single("mv", leaves({{2, 3}, {3}}), [](In in) { return mv(in[0], in[1]); }),
      single("dot", leaves({{4}, {4}}), [](In in) { return dot(in[0], in[1]); }),
      single("outer", leaves({{3}, {2}}), [](In in) { return outer(in[0], in[1]); }),
      single("addmm", leaves({{2, 4}, {2, 3}, {3, 4}}), [](In in) { return addmm(in[0], in[1], in[2]); }),
      single("addmm_broadcast_beta_alpha", leaves({{4}, {2, 3}, {3, 4}}),
             [](In in) { return addmm(in[0], in[1], in[2], 0.5, -2.0); }),
      single("baddbmm", leaves({{2, 2, 4}, {2, 2, 3}, {2, 3, 4}}), [](In in) { return baddbmm(in[0], in[1], in[2]); }),
      single("baddbmm_broadcast_beta_alpha", leaves({{1, 4}, {2, 2, 3}, {2, 3, 4}}),
             [](In in) { return baddbmm(in[0], in[1], in[2], 1.5, 0.5); }),
  };
  return c;
}

// ---- joining, splitting and indexing ----

std::vector<GradCase> indexing_cases() {
  auto i64 = [](std::vector<int64_t> v, Shape s) { return [v, s] { return int64s(v, s); }; };
  auto rows = i64({2, 0, 2}, {3});
  auto gather_idx = i64({0, 3, 1, 1, 2, 0}, {3, 2});             // (3, 2) into dim 1 of (3, 4)
  auto gather_idx0 = i64({2, 0, 1, 2, 0, 0, 1, 2}, {2, 4});      // (2, 4) into dim 0 of (3, 4), repeats
  auto scatter_idx = i64({1, 3, 0, 2, 3, 2}, {3, 2});             // distinct per row: scatter is well defined
  auto scatter_add_idx = i64({1, 1, 0, 3, 2, 2}, {3, 2});         // repeats: scatter_add sums them
  auto index_add_idx = i64({0, 2, 0}, {3});
  auto mask = [] { return tensor(std::vector<bool>{true, false, true, true, true, true, false, true}).view({2, 4}); };
  std::vector<GradCase> c = {
      single("cat_dim0", leaves({{1, 3}, {2, 3}, {3, 3}}), [](In in) { return cat({in[0], in[1], in[2]}, 0); }),
      single("cat_dim1", leaves({{2, 1}, {2, 3}}), [](In in) { return cat({in[0], in[1]}, 1); }),
      single("cat_neg_dim_transposed", leaves({{2, 2}, {3, 2}}), [](In in) { return cat({in[0], in[1].t()}, -1); }),
      single("cat_with_empty", leaves({{2, 3}}), [](In in) { return cat({zeros({0}, kFloat64), in[0]}, 0); }),
      single("cat_with_constant", leaves({{2, 3}}), [](In in) { return cat({ones({1, 3}, kFloat64), in[0]}, 0); }),
      single("stack_dim0", leaves({{2, 3}, {2, 3}, {2, 3}}), [](In in) { return stack({in[0], in[1], in[2]}, 0); }),
      single("stack_dim1", leaves({{2, 3}, {2, 3}}), [](In in) { return stack({in[0], in[1]}, 1); }),
      single("stack_neg_dim", leaves({{2, 3}, {3, 2}}), [](In in) { return stack({in[0], in[1].t()}, -1); }),
      multi("split_size", leaves({{5, 3}}), [](In in) { return split(in[0], 2, 0); }),
      multi("split_sizes", leaves({{2, 4}}), [](In in) { return split(in[0], {1, 3}, 1); }),
      multi("chunk", leaves({{6, 2}}), [](In in) { return chunk(in[0], 3, 0); }),
      single("split_one_piece_used", leaves({{5, 3}}), [](In in) { return split(in[0], 2, 0)[1] * 2.0; }),
      multi("unbind_dim0", leaves({{3, 2}}), [](In in) { return unbind(in[0], 0); }),
      multi("unbind_neg_dim", leaves({{2, 3, 2}}), [](In in) { return unbind(in[0], -2); }),
      single("unbind_one_piece_used", leaves({{4, 3}}), [](In in) { return unbind(in[0], 1)[2] * 3.0; }),
      single("index_select_dim0", [rows] { return TensorVec{leaf({4, 3}), rows()}; },
             [](In in) { return index_select(in[0], 0, in[1]); }),
      single("index_select_dim1", [rows] { return TensorVec{leaf({2, 4}), rows()}; },
             [](In in) { return index_select(in[0], 1, in[1]); }),
      single("gather_dim1", [gather_idx] { return TensorVec{leaf({3, 4}), gather_idx()}; },
             [](In in) { return gather(in[0], 1, in[1]); }),
      single("gather_dim0_repeats", [gather_idx0] { return TensorVec{leaf({3, 4}), gather_idx0()}; },
             [](In in) { return gather(in[0], 0, in[1]); }),
      single("scatter", [scatter_idx] { return TensorVec{leaf({3, 4}), scatter_idx(), leaf({3, 2})}; },
             [](In in) { return scatter(in[0], 1, in[1], in[2]); }),
      // index may be smaller than src: the elements of src it does not reach get no gradient.
      single("scatter_src_larger", [scatter_idx] { return TensorVec{leaf({3, 4}), scatter_idx(), leaf({4, 3})}; },
             [](In in) { return scatter(in[0], 1, in[1], in[2]); }),
      single("scatter_add_src_larger",
             [scatter_add_idx] { return TensorVec{leaf({3, 4}), scatter_add_idx(), leaf({4, 3})}; },
             [](In in) { return scatter_add(in[0], 1, in[1], in[2]); }),
      single("gather_index_smaller", [gather_idx0] { return TensorVec{leaf({3, 5}), gather_idx0()}; },
             [](In in) { return gather(in[0], 0, in[1]); }),
      single("index_select_0dim_index", [] { return TensorVec{leaf({4, 3}), int64s({2}, {})}; },
             [](In in) { return index_select(in[0], 0, in[1]); }),
      single("masked_select", leaves({{2, 4}}), [mask](In in) { return masked_select(in[0], mask()); }),
      // The mask's two rows pick x's elements again: their gradients add up.
      single("masked_select_broadcast_x", leaves({{4}}), [mask](In in) { return masked_select(in[0], mask()); }),
      // Indexing with index tensors (advanced_index.cpp): a gather whose repeats add up, and index_put, whose
      // overwritten places pass no gradient to x.
      single("index_rows_repeats", [] { return TensorVec{leaf({4, 3}), int64s({2, -1, 2, 0}, {2, 2})}; },
             [](In in) { return in[0].index({in[1]}); }),
      single("index_tensors_apart", leaves({{3, 4, 5}}),
             [](In in) { return in[0].index({int64s({0, 2, 2}, {3}), Slice(), int64s({4, 1}, {2, 1})}); }),
      single("index_tensors_side_by_side_transposed", leaves({{5, 3, 4}}),
             [](In in) { return in[0].transpose(0, 2).index({Slice(), int64s({2, 0, 2}, {3}), int64s({1, 4, 1}, {3})}); }),
      single("index_mask", leaves({{2, 4}}), [mask](In in) { return in[0][mask()]; }),
      single("index_put", leaves({{4, 3}, {2, 3}}),
             [](In in) { return in[0].index_put({int64s({3, 1}, {2})}, in[1]); }),
      single("index_put_accumulate_repeats", leaves({{4, 3}, {3}}),
             [](In in) { return in[0].index_put({int64s({1, 3, 1}, {3}), int64s({0, 2, 0}, {3})}, in[1], true); }),
      single("index_put_inplace_mask_broadcast", leaves({{2, 4}, {1}}), [mask](In in) {
               Tensor y = in[0] * 2.0;
               y.index_put_({mask()}, in[1]);
               return y * in[0];
             }),
      single("scatter_value", [scatter_idx] { return TensorVec{leaf({3, 4}), scatter_idx()}; },
             [](In in) { return scatter(in[0], 1, in[1], 1.5); }),
      single("scatter_add", [scatter_add_idx] { return TensorVec{leaf({3, 4}), scatter_add_idx(), leaf({3, 2})}; },
             [](In in) { return scatter_add(in[0], 1, in[1], in[2]); }),
      single("scatter_inplace", [scatter_idx] { return TensorVec{leaf({3, 4}), scatter_idx(), leaf({3, 2})}; },
             [](In in) {
               Tensor y = in[0] * 1.0;
               scatter_(y, 1, in[1], in[2]);
               return y;
             }),
      single("scatter_value_inplace", [scatter_idx] { return TensorVec{leaf({3, 4}), scatter_idx()}; },
             [](In in) {
               Tensor y = in[0] * 1.0;
               scatter_(y, 1, in[1], -2.0);
               return y;
             }),
      single("scatter_add_inplace",
             [scatter_add_idx] { return TensorVec{leaf({3, 4}), scatter_add_idx(), leaf({3, 2})}; },
             [](In in) {
               Tensor y = in[0] * 1.0;
               scatter_add_(y, 1, in[1], in[2]);
               return y;
             }),
      single("index_add", [index_add_idx] { return TensorVec{leaf({4, 3}), index_add_idx(), leaf({3, 3})}; },
             [](In in) { return index_add(in[0], 0, in[1], in[2], 2.0); }),
      single("index_add_dim1_transposed",
             [index_add_idx] { return TensorVec{leaf({2, 4}), index_add_idx(), leaf({3, 2})}; },
             [](In in) { return index_add(in[0], 1, in[1], in[2].t()); }),
      single("index_add_inplace", [index_add_idx] { return TensorVec{leaf({4, 3}), index_add_idx(), leaf({3, 3})}; },
             [](In in) {
               Tensor y = in[0] * 1.0;
               index_add_(y, 0, in[1], in[2], -0.5);
               return y;
             }),
      single("tril", leaves({{3, 4}}), [](In in) { return tril(in[0]); }),
      single("tril_k1_batched", leaves({{2, 3, 3}}), [](In in) { return tril(in[0], 1); }),
      single("triu", leaves({{4, 3}}), [](In in) { return triu(in[0].t()); }),
      single("triu_k_neg1", leaves({{3, 4}}), [](In in) { return triu(in[0], -1); }),
      single("flip_dim0", leaves({{3, 4}}), [](In in) { return flip(in[0], {0}); }),
      single("flip_dims02", leaves({{2, 3, 4}}), [](In in) { return flip(in[0], {0, 2}); }),
      single("flip_neg_dim_transposed", leaves({{4, 3}}), [](In in) { return flip(in[0].t(), {-1}); }),
      single("repeat", leaves({{2, 3}}), [](In in) { return repeat(in[0], {1, 2}); }),
      single("repeat_new_dim", leaves({{2, 1}}), [](In in) { return repeat(in[0], {2, 1, 3}); }),
      single("roll_two_dims", leaves({{3, 4}}), [](In in) { return roll(in[0].t(), {1, -5}, {0, 1}); }),
      single("roll_flat", leaves({{2, 3}}), [](In in) { return roll(in[0], {4}); }),
      single("bincount_weights", leaves({{6}}),
             [](In in) { return bincount(tensor(std::vector<int64_t>{3, 0, 3, 1, 5, 3}), in[0], 7); }),
      single("pad_last_dim", leaves({{2, 3}}), [](In in) { return pad(in[0], {1, 2}); }),
      single("pad_two_dims_value", leaves({{2, 3}}), [](In in) { return pad(in[0], {1, 1, 2, 0}, 1.5); }),
      single("pad_negative", leaves({{2, 5}}), [](In in) { return pad(in[0], {-1, -2}); }),
      single("pad_mixed", leaves({{3, 4}}), [](In in) { return pad(in[0], {2, -1, -1, 1}); }),
  };
  return c;
}

// ---- Tensor view and copy methods ----

std::vector<GradCase> view_cases() {
  auto x = leaves({{2, 3, 4}});
  auto m = leaves({{3, 4}});
  auto inplace_on = [](std::function<void(Tensor&, In)> write) {
    return [write](In in) {
      Tensor y = in[0] * 2.0;  // a non-leaf
      write(y, in);
      return y * in[0];  // the overwritten history of y must not leak gradient
    };
  };
  std::vector<GradCase> c = {
      single("view", x, [](In in) { return in[0].view({6, 4}); }),
      single("view_infer", x, [](In in) { return in[0].view({4, -1}); }),
      single("view_of_transposed", leaves({{4, 6}}), [](In in) { return in[0].t().view({2, 3, 4}); }),
      single("reshape_view", x, [](In in) { return in[0].reshape({3, 8}); }),
      single("reshape_copy", x, [](In in) { return in[0].transpose(0, 2).reshape({-1}); }),
      single("transpose", x, [](In in) { return in[0].transpose(0, 2); }),
      single("permute", x, [](In in) { return in[0].permute({2, 0, 1}); }),
      single("t", m, [](In in) { return in[0].t(); }),
      single("t_1d", leaves({{3}}), [](In in) { return in[0].t(); }),
      single("mT", x, [](In in) { return in[0].mT(); }),
      single("narrow", x, [](In in) { return in[0].narrow(1, 1, 2); }),
      single("slice_step", x, [](In in) { return in[0].slice(2, 1, std::nullopt, 2); }),
      single("slice_negative", x, [](In in) { return in[0].slice(-1, -3, -1); }),
      single("select", x, [](In in) { return in[0].select(1, -1); }),
      single("operator_brackets", x, [](In in) { return in[0][1]; }),
      single("index_mixed", x, [](In in) { return in[0].index({Slice(), 1, None, Slice(None, None, 2)}); }),
      single("index_ellipsis", x, [](In in) { return in[0].index({Ellipsis, 2}); }),
      single("index_to_0dim", x, [](In in) { return in[0].index({1, 2, 3}); }),
      // Views that hold every element of their input: the gradient is g reshaped, not written into zeros.
      single("slice_whole", x, [](In in) { return in[0].slice(1); }),
      single("narrow_whole", x, [](In in) { return in[0].narrow(2, 0, 4); }),
      single("select_size1", leaves({{2, 1, 3}}), [](In in) { return in[0].select(1, 0) * in[0].squeeze(1); }),
      single("index_whole_none", x, [](In in) { return in[0].index({Slice(), None, Ellipsis}); }),
      single("index_int_size1", leaves({{1, 3}}), [](In in) { return in[0].index({0}); }),
      single("slice_step_size1", leaves({{1, 3}}), [](In in) { return in[0].slice(0, 0, 1, 2); }),
      single("narrow_whole_then_inplace", leaves({{2, 3}, {2, 3}}), [](In in) {
        Tensor y = in[0] * 2.0;
        Tensor v = y.narrow(0, 0, 2);
        v.mul_(in[1]);
        return y * in[0];
      }),
      single("expand", leaves({{3, 1}}), [](In in) { return in[0].expand({2, 3, 4}); }),
      single("expand_keep", leaves({{3, 1}}), [](In in) { return in[0].expand({-1, 5}); }),
      single("expand_0dim", leaves({Shape{}}), [](In in) { return in[0].expand({2, 2}); }),
      single("expand_as", leaves({{4}, {3, 4}}), [](In in) { return in[0].expand_as(in[1]) * in[1]; }),
      single("squeeze", leaves({{2, 1, 3, 1}}), [](In in) { return in[0].squeeze(); }),
      single("squeeze_dim", leaves({{2, 1, 3, 1}}), [](In in) { return in[0].squeeze(1); }),
      single("squeeze_to_0dim", leaves({{1, 1}}), [](In in) { return in[0].squeeze(); }),
      single("unsqueeze", m, [](In in) { return in[0].unsqueeze(0); }),
      single("unsqueeze_neg", m, [](In in) { return in[0].t().unsqueeze(-1); }),
      single("flatten", x, [](In in) { return in[0].flatten(); }),
      single("flatten_from1", x, [](In in) { return in[0].flatten(1); }),
      single("flatten_transposed", x, [](In in) { return in[0].transpose(1, 2).flatten(0, 1); }),
      single("unflatten", m, [](In in) { return in[0].unflatten(1, {2, 2}); }),
      single("unfold_overlapping", leaves({{2, 6}}), [](In in) { return in[0].unfold(1, 3, 1); }),
      single("unfold_disjoint", leaves({{2, 6}}), [](In in) { return in[0].unfold(1, 2, 2); }),
      single("unfold_gaps", leaves({{7, 2}}), [](In in) { return in[0].unfold(0, 2, 3); }),
      single("diagonal", m, [](In in) { return in[0].diagonal(); }),
      single("diagonal_offset", m, [](In in) { return in[0].diagonal(1); }),
      single("diagonal_3d", x, [](In in) { return in[0].diagonal(-1, 1, 2); }),
      single("as_strided_windows", m, [](In in) { return in[0].as_strided({3, 3}, {1, 1}); }),
      single("as_strided_offset", m, [](In in) { return in[0].as_strided({2, 2}, {4, 1}, 1); }),
      single("alias", m, [](In in) { return in[0].alias(); }),
      single("contiguous", m, [](In in) { return in[0].t().contiguous(); }),
      single("clone", m, [](In in) { return in[0].clone(); }),
      single("clone_transposed", m, [](In in) { return in[0].t().clone(); }),
      single("to_cpu", m, [](In in) { return in[0].cpu() * in[0].to(kCPU, kFloat64); }),
      single("to_same_dtype", m, [](In in) { return in[0].to(kFloat64) * 2.0; }),
      // float32 rounds x +- eps: a larger step (exact for this linear function) and gradcheck's default tolerances.
      single("to_float32_round_trip", m, [](In in) { return in[0].to(kFloat32).to(kFloat64); }, {.eps = 1e-3}),
      single("view_chain", x, [](In in) { return in[0].permute({1, 0, 2}).reshape({3, 8}).t().narrow(0, 2, 4); }),
      single("copy_into_nonleaf", leaves({{2, 3}, {2, 3}}), inplace_on([](Tensor& y, In in) { y.copy_(in[1]); })),
      single("copy_broadcast", leaves({{2, 3}, {3}}), inplace_on([](Tensor& y, In in) { y.copy_(in[1]); })),
      single("copy_from_transposed", leaves({{2, 3}, {3, 2}}), inplace_on([](Tensor& y, In in) { y.copy_(in[1].t()); })),
      single("fill", leaves({{2, 3}}), inplace_on([](Tensor& y, In) { y.fill_(1.5); })),
      single("zero", leaves({{2, 3}}), inplace_on([](Tensor& y, In) { y.zero_(); })),
      // Inputs in [-1, 1]: exp of larger values makes the second-order twin lose digits to cancellation.
      single("mul_then_add_inplace", [] { return TensorVec{leaf({2, 3}, -1, 1), leaf({3}, -1, 1)}; }, inplace_on([](Tensor& y, In in) {
               y.mul_(in[1]);
               y.add_(in[1], 0.5);
               exp_(y);
             })),
  };
  return c;
}

TEST_P(OpGrad, MatchesCentralDifferences) { run_grad_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Unary, OpGrad, ::testing::ValuesIn(unary_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Binary, OpGrad, ::testing::ValuesIn(binary_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Reduce, OpGrad, ::testing::ValuesIn(reduce_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Linalg, OpGrad, ::testing::ValuesIn(linalg_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Indexing, OpGrad, ::testing::ValuesIn(indexing_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Views, OpGrad, ::testing::ValuesIn(view_cases()), case_name);
// Every case again, one derivative higher.
INSTANTIATE_TEST_SUITE_P(UnaryGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(unary_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(BinaryGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(binary_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(ReduceGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(reduce_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(LinalgGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(linalg_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(IndexingGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(indexing_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(ViewsGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(view_cases())), case_name);

// ---- fused loss and normalization (functions/cross_entropy.cpp, functions/normalization.cpp) ----

// Their backward rules call fused kernels; the GradGrad twins check the differentiable form they switch to
// under create_graph.
std::vector<GradCase> fused_cases() {
  auto i64 = [](std::vector<int64_t> v, Shape s) { return [v, s] { return int64s(v, s); }; };
  auto targets = i64({2, 0, 4, 1}, {4});
  auto with_ignored = i64({2, -100, 4, 1}, {4});
  auto wide_targets = i64({39, 0, 17}, {3});
  auto ce = [](CrossEntropyParams p, bool weighted) {
    return [p, weighted](In in) {
      Tensor w = weighted ? f64({0.5, 2.0, 1.0, 0.25, 1.5}, {5}) : Tensor();
      return cross_entropy_rows(in[0], in[1], w, p).first;
    };
  };
  return {
      single("cross_entropy_rows", [targets] { return TensorVec{leaf({4, 5}), targets()}; }, ce({}, false)),
      single("cross_entropy_rows_weight", [targets] { return TensorVec{leaf({4, 5}), targets()}; }, ce({}, true)),
      single("cross_entropy_rows_ignore_smoothing", [with_ignored] { return TensorVec{leaf({4, 5}), with_ignored()}; },
             ce({.ignore_index = -100, .label_smoothing = 0.2}, false)),
      single("cross_entropy_rows_weight_ignore_smoothing",
             [with_ignored] { return TensorVec{leaf({4, 5}), with_ignored()}; },
             ce({.ignore_index = -100, .label_smoothing = 0.3}, true)),
      single("cross_entropy_rows_full_smoothing", [targets] { return TensorVec{leaf({4, 5}), targets()}; },
             ce({.label_smoothing = 1.0}, true)),
      single("cross_entropy_rows_transposed", [targets] { return TensorVec{leaf({5, 4}), targets()}; },
             [](In in) { return cross_entropy_rows(in[0].t(), in[1], Tensor(), {}).first; }),
      single("cross_entropy_rows_wide", [wide_targets] { return TensorVec{leaf({3, 40}), wide_targets()}; },
             ce({.label_smoothing = 0.1}, false)),
      single("layer_norm_rows", leaves({{3, 5}, {5}, {5}}),
             [](In in) { return layer_norm_rows(in[0], in[1], in[2], 1e-5); }),
      single("layer_norm_rows_no_affine", leaves({{4, 6}}), [](In in) { return layer_norm_rows(in[0], {}, {}, 1e-5); }),
      single("layer_norm_rows_weight_only", leaves({{2, 7}, {7}}),
             [](In in) { return layer_norm_rows(in[0], in[1], {}, 0.1); }),
      single("layer_norm_rows_bias_only", leaves({{2, 7}, {7}}),
             [](In in) { return layer_norm_rows(in[0], {}, in[1], 1e-5); }),
      single("layer_norm_rows_transposed", leaves({{5, 3}, {5}, {5}}),
             [](In in) { return layer_norm_rows(in[0].t(), in[1], in[2], 1e-5); }),
      // Many rows and wide ones: the parameter gradients sum over rows in blocks of columns.
      single("layer_norm_rows_wide", leaves({{9, 70}, {70}, {70}}),
             [](In in) { return layer_norm_rows(in[0], in[1], in[2], 1e-5) * ramp({9, 70}); }),
      single("batch_norm_channels", leaves({{3, 2, 4}, {2}, {2}}),
             [](In in) { return batch_norm_channels(in[0], in[1], in[2], {}, {}, 1e-5, true).y * ramp({3, 2, 4}); }),
      single("batch_norm_channels_no_affine", leaves({{5, 3, 1}}),
             [](In in) { return batch_norm_channels(in[0], {}, {}, {}, {}, 1e-5, true).y * ramp({5, 3, 1}); }),
      // Eval mode: the running statistics are constants.
      single("batch_norm_channels_eval", leaves({{2, 3, 4}, {3}, {3}}), [](In in) {
        return batch_norm_channels(in[0], in[1], in[2], f64({0.1, -0.3, 0.5}, {3}), f64({0.8, 1.5, 0.6}, {3}), 1e-5,
                                   false).y * ramp({2, 3, 4});
      }),
  };
}

INSTANTIATE_TEST_SUITE_P(Fused, OpGrad, ::testing::ValuesIn(fused_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(FusedGradGrad, OpGrad, ::testing::ValuesIn(gradgrad(fused_cases())), case_name);

}  // namespace
}  // namespace kiln
