// weight_norm and spectral_norm against references written here in float64: the normalized weight from its
// definition, one power-iteration step from its definition, the largest singular value by a long float64
// power iteration, and gradients by central differences of the layer's output with respect to the new
// parameters. tests/parity compares weight_norm with LibTorch's _weight_norm and spectral_norm's limit with
// LibTorch's singular values.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::own_tensor;
using test::randn64;
using test::values;

std::vector<std::string> reparam_names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}


void overwrite(const Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}

// g v / ||v|| with the norm over every dim but `dim` (whole tensor without one), from flat float64 values of
// a weight of shape `shape`.
std::vector<double> weight_norm_reference(const std::vector<double>& g, const std::vector<double>& v,
                                          const Shape& shape, std::optional<int64_t> dim) {
  const int64_t n = shape_numel(shape);
  auto slice_of = [&](int64_t flat) -> int64_t {  // the index along dim of a flat position
    if (!dim) return 0;
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(*dim) + 1; d < shape.size(); ++d) inner *= shape[d];
    return (flat / inner) % shape[static_cast<size_t>(*dim)];
  };
  std::vector<double> norm2(dim ? static_cast<size_t>(shape[static_cast<size_t>(*dim)]) : 1, 0.0);
  for (int64_t i = 0; i < n; ++i) norm2[static_cast<size_t>(slice_of(i))] += v[static_cast<size_t>(i)] * v[static_cast<size_t>(i)];
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto s = static_cast<size_t>(slice_of(i));
    w[static_cast<size_t>(i)] = g[s] * v[static_cast<size_t>(i)] / std::sqrt(norm2[s]);
  }
  return w;
}

void expect_all_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

// Checks p.grad() after loss().backward() against central differences of loss() in p's elements.
void expect_gradient_matches_differences(const Tensor& p, const std::function<Tensor()>& loss) {
  p.set_grad(Tensor());
  loss().backward();
  ASSERT_TRUE(p.grad().defined());
  const std::vector<double> analytic = values(p.grad());
  NoGradGuard no_grad;
  double* x = p.data_ptr<double>();
  const double eps = 1e-6;
  for (int64_t e = 0; e < p.numel(); ++e) {
    const double saved = x[e];
    x[e] = saved + eps;
    const double plus = loss().item<double>();
    x[e] = saved - eps;
    const double minus = loss().item<double>();
    x[e] = saved;
    EXPECT_NEAR(analytic[static_cast<size_t>(e)], (plus - minus) / (2 * eps), 1e-6) << "element " << e;
  }
}

TEST(WeightNorm, KeepsTheOutputAndTakesPyTorchsNames) {
  manual_seed(3);
  nn::Linear lin(5, 3);
  lin->to(kFloat64);
  const Tensor x = randn64({4, 5}, 1);
  const Tensor before = lin(x).detach();
  nn::weight_norm(*lin);
  EXPECT_EQ(reparam_names(lin->named_parameters()), (std::vector<std::string>{"bias", "weight_g", "weight_v"}));
  EXPECT_EQ(own_tensor(*lin, "weight_g").sizes(), (Shape{3, 1}));
  EXPECT_EQ(own_tensor(*lin, "weight_v").sizes(), (Shape{3, 5}));
  expect_all_near(values(lin(x)), values(before), 1e-12);
  const nn::StateDict state = lin->state_dict();
  EXPECT_TRUE(state.count("weight_g") && state.count("weight_v") && !state.count("weight"));
}

TEST(WeightNorm, WeightIsGTimesTheUnitDirectionAlongEachDim) {
  struct Case {
    std::optional<int64_t> dim;
    Shape g_shape;
  };
  for (const Case& c : {Case{0, {6, 1, 1, 1}}, Case{1, {1, 2, 1, 1}}, Case{3, {1, 1, 1, 3}}, Case{std::nullopt, {}}}) {
    manual_seed(4);
    nn::Conv2d conv(2, 6, 3);
    conv->to(kFloat64);
    nn::weight_norm(*conv, "weight", c.dim);
    const Tensor g = own_tensor(*conv, "weight_g"), v = own_tensor(*conv, "weight_v");
    ASSERT_EQ(g.sizes(), c.g_shape);
    overwrite(g, randn64(c.g_shape, 5));
    overwrite(v, randn64({6, 2, 3, 3}, 6));
    const Tensor y = conv(randn64({1, 2, 5, 5}, 7));
    const std::vector<double> want = weight_norm_reference(values(g), values(v), {6, 2, 3, 3}, c.dim);
    expect_all_near(values(conv->weight), want, 1e-12);
    // The layer computed with that weight.
    expect_all_near(values(y), values(nn::functional::conv2d(randn64({1, 2, 5, 5}, 7), conv->weight, conv->bias)),
                    1e-12);
  }
}

TEST(WeightNorm, GradientsReachGAndVAndMatchDifferences) {
  manual_seed(5);
  nn::Linear lin(4, 3);
  lin->to(kFloat64);
  nn::weight_norm(*lin);
  const Tensor x = randn64({5, 4}, 8), r = randn64({5, 3}, 9);
  auto loss = [&] { return (lin(x) * r).sum(); };
  expect_gradient_matches_differences(own_tensor(*lin, "weight_g"), loss);
  expect_gradient_matches_differences(own_tensor(*lin, "weight_v"), loss);
}

TEST(WeightNorm, TrainsThroughSequentialAndAnOptimizer) {
  manual_seed(6);
  nn::Linear lin(4, 2);
  nn::weight_norm(*lin);
  nn::Sequential net(lin, nn::ReLU());
  optim::SGD opt(net->parameters(), {.lr = 0.5});
  const Tensor x = randn({8, 4}), target = randn({8, 2});
  const Tensor g_before = own_tensor(*lin, "weight_g").clone(), w_before = lin->weight.detach().clone();
  const double first = nn::functional::mse_loss(net(x), target).item<double>();
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    nn::functional::mse_loss(net(x), target).backward();
    opt.step();
  }
  EXPECT_LT(nn::functional::mse_loss(net(x), target).item<double>(), first);
  EXPECT_FALSE(own_tensor(*lin, "weight_g").equal(g_before));
  EXPECT_FALSE(lin->weight.detach().equal(w_before));  // the member follows g and v
}

TEST(WeightNorm, RemoveLeavesAPlainBoundParameter) {
  manual_seed(7);
  nn::Linear lin(3, 2);
  lin->to(kFloat64);
  nn::weight_norm(*lin, "weight", 1);
  overwrite(own_tensor(*lin, "weight_g"), randn64({1, 3}, 10));
  const std::vector<double> want =
      weight_norm_reference(values(own_tensor(*lin, "weight_g")), values(own_tensor(*lin, "weight_v")), {2, 3}, 1);
  nn::remove_weight_norm(*lin);
  EXPECT_EQ(reparam_names(lin->named_parameters()), (std::vector<std::string>{"bias", "weight"}));
  const Tensor w = own_tensor(*lin, "weight");
  expect_all_near(values(w), want, 1e-12);
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  EXPECT_EQ(lin->weight.impl(), w.impl());  // the member is the parameter again
  overwrite(w, zeros({2, 3}, kFloat64));
  expect_all_near(values(lin(randn64({1, 3}, 11))), values(lin->bias), 0);
}

TEST(WeightNorm, StateDictLoadsIntoAFreshNormalizedLayer) {
  manual_seed(8);
  nn::Conv1d a(3, 4, 3), b(3, 4, 3);
  nn::weight_norm(*a);
  nn::weight_norm(*b);
  overwrite(own_tensor(*a, "weight_g"), randn({4, 1, 1}));
  b->load_state_dict(a->state_dict());
  const Tensor x = randn({2, 3, 9});
  EXPECT_TRUE(a(x).equal(b(x)));
}

// A state dict under PyTorch 2's parametrize names (written out here as PyTorch 2 saves them) loads into kiln's
// reparametrized layers after renaming: every value lands on the tensor it belongs to.
TEST(WeightNorm, PyTorch2ParametrizeNamesLoadAfterRenaming) {
  manual_seed(10);
  nn::Sequential net{nn::Conv1d(3, 4, 3), nn::ReLU(), nn::Linear(4, 2)};
  nn::weight_norm(*net->children()[0]);
  nn::spectral_norm(*net->children()[2]);
  auto draw = [](IntArrayRef shape) { return randn(shape); };
  const nn::StateDict pytorch2{{"0.bias", draw({4})},
                               {"0.parametrizations.weight.original0", draw({4, 1, 1})},
                               {"0.parametrizations.weight.original1", draw({4, 3, 3})},
                               {"2.bias", draw({2})},
                               {"2.parametrizations.weight.original", draw({2, 4})},
                               {"2.parametrizations.weight.0._u", draw({2})},
                               {"2.parametrizations.weight.0._v", draw({4})}};
  const nn::StateDict renamed = nn::from_pytorch_parametrizations(pytorch2);
  net->load_state_dict(renamed);  // strict: every key of the model found
  const std::pair<const char*, const char*> where[] = {
      {"0.bias", "0.bias"},          {"0.weight_g", "0.parametrizations.weight.original0"},
      {"0.weight_v", "0.parametrizations.weight.original1"},  {"2.bias", "2.bias"},
      {"2.weight_orig", "2.parametrizations.weight.original"}, {"2.weight_u", "2.parametrizations.weight.0._u"},
      {"2.weight_v", "2.parametrizations.weight.0._v"}};
  const nn::StateDict got = net->state_dict();
  EXPECT_EQ(got.size(), std::size(where));
  for (const auto& [kiln_key, torch_key] : where) EXPECT_TRUE(got.at(kiln_key).equal(pytorch2.at(torch_key))) << kiln_key;

  expect_error([] { nn::from_pytorch_parametrizations({{"0.parametrizations.weight.original2", zeros({1})}}); },
               {"\"0.parametrizations.weight.original2\" is not a weight_norm"});
  expect_error([] {
    nn::from_pytorch_parametrizations({{"0.weight_g", zeros({1})}, {"0.parametrizations.weight.original0", zeros({1})}});
  }, {"two keys become \"0.weight_g\""});
}

TEST(WeightNorm, RecurrentWeightsAreBoundToo) {
  manual_seed(9);
  nn::LSTM lstm(3, 4, nn::RNNOptions{.num_layers = 2});
  lstm->to(kFloat64);
  nn::weight_norm(*lstm, "weight_hh_l1");
  overwrite(own_tensor(*lstm, "weight_hh_l1_g"), randn64({16, 1}, 12));
  lstm(randn64({5, 2, 3}, 13), nn::RNNState{});  // a call with several arguments refreshes it as well
  const std::vector<double> want = weight_norm_reference(values(own_tensor(*lstm, "weight_hh_l1_g")),
                                                         values(own_tensor(*lstm, "weight_hh_l1_v")), {16, 4}, 0);
  expect_all_near(values(lstm->weights(1, 0).w_hh), want, 1e-12);
}

TEST(WeightNorm, AttentionInsideATransformerLayerIsRefreshed) {
  manual_seed(10);
  nn::TransformerEncoderLayer layer(8, 2);
  layer->to(kFloat64);
  nn::weight_norm(*layer->self_attn, "in_proj_weight");
  nn::weight_norm(*layer->self_attn->out_proj);  // read by the attention directly, not called
  const Tensor g = own_tensor(*layer->self_attn, "in_proj_weight_g"), out_g = own_tensor(*layer->self_attn->out_proj, "weight_g");
  overwrite(g, randn64({24, 1}, 14));
  overwrite(out_g, randn64({8, 1}, 16));
  layer(randn64({3, 2, 8}, 15));  // the layer calls its attention with several arguments
  const std::vector<double> want =
      weight_norm_reference(values(g), values(own_tensor(*layer->self_attn, "in_proj_weight_v")), {24, 8}, 0);
  expect_all_near(values(layer->self_attn->in_proj_weight), want, 1e-12);
  expect_all_near(values(layer->self_attn->out_proj->weight),
                  weight_norm_reference(values(out_g), values(own_tensor(*layer->self_attn->out_proj, "weight_v")), {8, 8}, 0),
                  1e-12);
}

struct Unbound : nn::Module {
  Unbound() : Module("Unbound") { w = register_parameter("w", zeros({2})); }
  Tensor forward(const Tensor& x) override { return x * w; }
  Tensor w;
};

TEST(WeightNorm, RefusesWhatItCannotReparametrize) {
  nn::Linear lin(3, 2);
  nn::weight_norm(*lin);
  expect_error([&] { nn::weight_norm(*lin); }, {"weight_norm", "\"weight\" of Linear", "reparametrized already"});
  expect_error([&] { nn::weight_norm(*lin, "gamma"); }, {"weight_norm", "Linear has no parameter \"gamma\""});
  nn::Linear other(3, 2);
  expect_error([&] { nn::weight_norm(*other, "weight", -1); }, {"dim -1", "no dim for the whole tensor", "negative dims are refused"});
  expect_error([&] { nn::weight_norm(*other, "weight", 2); }, {"dim 2", "(2, 3)", "expected 0 to 1"});
  Unbound unbound;
  expect_error([&] { nn::weight_norm(unbound, "w"); }, {"Unbound does not read \"w\" through a bound member"});
  expect_error([&] { nn::remove_weight_norm(*other); }, {"remove_weight_norm", "Linear has no weight_norm"});
  expect_error([&] { nn::remove_spectral_norm(*lin); }, {"remove_spectral_norm", "has no spectral_norm"});
}

// ---- spectral norm ----

// y = M x for M (rows, cols) row-major.
std::vector<double> mat_vec(const std::vector<double>& m, const std::vector<double>& x, size_t rows, bool transposed) {
  const size_t cols = m.size() / rows;
  std::vector<double> y(transposed ? cols : rows, 0.0);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) {
      if (transposed) y[j] += m[i * cols + j] * x[i];
      else y[i] += m[i * cols + j] * x[j];
    }
  return y;
}

std::vector<double> unit(std::vector<double> x) {
  double n = 0;
  for (double e : x) n += e * e;
  for (double& e : x) e /= std::sqrt(n);
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The largest singular value of m (rows, cols), by 4000 float64 power-iteration steps from all ones.
double largest_singular_value(const std::vector<double>& m, size_t rows) {
  std::vector<double> v(m.size() / rows, 1.0);
  for (int i = 0; i < 4000; ++i) v = unit(mat_vec(m, mat_vec(m, v, rows, false), rows, true));
  return std::sqrt(dot(mat_vec(m, v, rows, false), mat_vec(m, v, rows, false)));
}

TEST(SpectralNorm, RegistersTheOriginalAndTwoUnitVectors) {
  manual_seed(10);
  nn::Linear lin(8, 6);
  const Tensor weight = lin->weight;
  nn::spectral_norm(*lin);
  EXPECT_EQ(reparam_names(lin->named_parameters()), (std::vector<std::string>{"bias", "weight_orig"}));
  EXPECT_EQ(reparam_names(lin->named_buffers()), (std::vector<std::string>{"weight_u", "weight_v"}));
  EXPECT_EQ(own_tensor(*lin, "weight_orig").impl(), weight.impl());  // the weight itself, as in PyTorch
  EXPECT_NEAR(dot(values(own_tensor(*lin, "weight_u")), values(own_tensor(*lin, "weight_u"))), 1.0, 1e-6);
  EXPECT_EQ(own_tensor(*lin, "weight_v").sizes(), (Shape{8}));
  nn::ConvTranspose2d up(4, 6, 3);
  nn::spectral_norm(*up);  // (in, out, k, k): normalized along its output channels
  EXPECT_EQ(own_tensor(*up, "weight_u").sizes(), (Shape{6}));
  EXPECT_EQ(own_tensor(*up, "weight_v").sizes(), (Shape{36}));
}

TEST(SpectralNorm, ATrainingCallIsOnePowerStepThenADivision) {
  manual_seed(11);
  nn::Conv2d conv(3, 5, 2);
  conv->to(kFloat64);
  nn::spectral_norm(*conv, "weight", 2);
  const std::vector<double> w = values(own_tensor(*conv, "weight_orig"));
  std::vector<double> u = values(own_tensor(*conv, "weight_u")), v;
  for (int i = 0; i < 2; ++i) {
    v = unit(mat_vec(w, u, 5, true));
    u = unit(mat_vec(w, v, 5, false));
  }
  const double sigma = dot(u, mat_vec(w, v, 5, false));
  conv(randn64({1, 3, 4, 4}, 14));
  std::vector<double> want(w.size());
  for (size_t i = 0; i < w.size(); ++i) want[i] = w[i] / sigma;
  expect_all_near(values(conv->weight), want, 1e-12);
  expect_all_near(values(own_tensor(*conv, "weight_u")), u, 1e-12);
  expect_all_near(values(own_tensor(*conv, "weight_v")), v, 1e-12);
}

TEST(SpectralNorm, ConvergesToTheLargestSingularValueAndEvalFreezesIt) {
  manual_seed(12);
  nn::ConvTranspose1d up(6, 4, 3);
  up->to(kFloat64);
  nn::spectral_norm(*up);
  const Tensor x = randn64({1, 6, 5}, 15);
  for (int i = 0; i < 300; ++i) up(x);
  // The weight (6, 4, 3) as a matrix over dim 1: (4, 18).
  const std::vector<double> m = values(own_tensor(*up, "weight_orig").permute({1, 0, 2}).contiguous());
  const double sigma = largest_singular_value(m, 4);
  const std::vector<double> w = values(own_tensor(*up, "weight_orig"));
  std::vector<double> want(w.size());
  for (size_t i = 0; i < w.size(); ++i) want[i] = w[i] / sigma;
  expect_all_near(values(up->weight), want, 1e-9);
  up->eval();
  const Tensor u = own_tensor(*up, "weight_u").clone();
  up(x);
  EXPECT_TRUE(own_tensor(*up, "weight_u").equal(u));
}

TEST(SpectralNorm, EvalGradientMatchesDifferences) {
  manual_seed(13);
  nn::Linear lin(4, 3);
  lin->to(kFloat64);
  nn::spectral_norm(*lin);
  lin->eval();  // u and v fixed: the output is a function of weight_orig alone
  const Tensor x = randn64({5, 4}, 16), r = randn64({5, 3}, 17);
  expect_gradient_matches_differences(own_tensor(*lin, "weight_orig"), [&] { return (lin(x) * r).sum(); });
}

TEST(SpectralNorm, TrainingCallsKeepTheirGraphsApart) {
  // Two calls before one backward: the second call's power step must not change what the first saved.
  manual_seed(14);
  nn::Linear lin(4, 3);
  nn::spectral_norm(*lin);
  const Tensor x = randn({2, 4});
  const Tensor y1 = lin(x), y2 = lin(x);
  (y1.sum() + y2.sum()).backward();
  EXPECT_TRUE(own_tensor(*lin, "weight_orig").grad().defined());
}

TEST(SpectralNorm, RemoveKeepsTheNormalizedWeightAndRefusesBadInput) {
  manual_seed(15);
  nn::Linear lin(5, 4);
  lin->to(kFloat64);
  nn::spectral_norm(*lin);
  lin(randn64({1, 5}, 18));
  const std::vector<double> w = values(lin->weight);
  nn::remove_spectral_norm(*lin);
  EXPECT_EQ(reparam_names(lin->named_parameters()), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_TRUE(lin->named_buffers().empty());
  expect_all_near(values(own_tensor(*lin, "weight")), w, 1e-12);
  expect_error([&] { nn::spectral_norm(*lin, "weight", 0); }, {"n_power_iterations must be positive, got 0"});
  expect_error([&] { nn::spectral_norm(*lin, "weight", 1, 1e-12, 2); },
               {"spectral_norm: dim 2", "or no dim for the default (1 for transposed convolutions, else 0)"});
  nn::spectral_norm(*lin);
  expect_error([&] { nn::weight_norm(*lin); }, {"reparametrized already"});
  expect_error([&] { nn::remove_weight_norm(*lin); }, {"has no weight_norm"});
}

}  // namespace
}  // namespace kiln
