// nn::functional's activations, distances and margin losses against LibTorch's on the same float64 inputs: the
// values, and the gradients of sum(w * f(x)) for fixed random weights w, through both libraries' autograd.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

namespace F = nn::functional;

Tensor uniform_tensor(std::mt19937& rng, Shape shape, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& e : v) e = u(rng);
  return tensor(v, shape);
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> ours;
  std::function<torch::Tensor(const torch::Tensor&)> theirs;
  double grad_tol = 1e-13;
};

TEST(FunctionalParity, ActivationsMatchLibTorch) {
  std::mt19937 rng(31);
  const Tensor x0 = uniform_tensor(rng, {4, 6}, -5, 5), w = uniform_tensor(rng, {4, 6}, -1, 1);
  const std::vector<UnaryCase> cases = {
      {"elu", [](const Tensor& x) { return F::elu(x, 1.3); }, [](const torch::Tensor& x) { return torch::elu(x, 1.3); }},
      {"selu", [](const Tensor& x) { return F::selu(x); }, [](const torch::Tensor& x) { return torch::selu(x); }},
      // alpha 0.5: LibTorch's celu gradient uses 1 / alpha rounded to float32, which 0.5 survives exactly.
      {"celu", [](const Tensor& x) { return F::celu(x, 0.5); }, [](const torch::Tensor& x) { return torch::celu(x, 0.5); }},
      {"hardtanh", [](const Tensor& x) { return F::hardtanh(x, -0.6, 1.4); },
       [](const torch::Tensor& x) { return torch::hardtanh(x, -0.6, 1.4); }},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }, [](const torch::Tensor& x) { return torch::hardtanh(x, 0, 6); }},
      // LibTorch's hardsigmoid gradient is 1/6 rounded to float32 (3e-8 off) even in float64.
      {"hardsigmoid", [](const Tensor& x) { return F::hardsigmoid(x); },
       [](const torch::Tensor& x) { return torch::hardsigmoid(x); }, 1e-7},
      {"hardswish", [](const Tensor& x) { return F::hardswish(x); },
       [](const torch::Tensor& x) { return torch::hardswish(x); }},
      {"mish", [](const Tensor& x) { return F::mish(x); }, [](const torch::Tensor& x) { return torch::mish(x); }},
      {"softplus", [](const Tensor& x) { return F::softplus(x, 1.5, 4.0); },
       [](const torch::Tensor& x) { return torch::softplus(x, 1.5, 4.0); }},
      {"logsigmoid", [](const Tensor& x) { return F::logsigmoid(x); },
       [](const torch::Tensor& x) { return torch::log_sigmoid(x); }},
      {"softshrink", [](const Tensor& x) { return F::softshrink(x, 0.7); },
       [](const torch::Tensor& x) { return torch::softshrink(x, 0.7); }},
      {"hardshrink", [](const Tensor& x) { return F::hardshrink(x, 0.7); },
       [](const torch::Tensor& x) { return torch::hardshrink(x, 0.7); }},
      {"threshold", [](const Tensor& x) { return F::threshold(x, 0.4, -3.0); },
       [](const torch::Tensor& x) { return torch::threshold(x, 0.4, -3.0); }},
      {"glu", [](const Tensor& x) { return F::glu(x, 1); }, [](const torch::Tensor& x) { return torch::glu(x, 1); }},
      {"softmin", [](const Tensor& x) { return F::softmin(x, 0); },
       [](const torch::Tensor& x) {
         return torch::nn::functional::softmin(x, torch::nn::functional::SoftminFuncOptions(0));
       }},
      {"prelu", [](const Tensor& x) { return F::prelu(x.view({2, 3, 4}), tensor({0.1, -0.5, 2.0}, kFloat64)); },
       [](const torch::Tensor& x) {
         return torch::prelu(x.view({2, 3, 4}), torch::tensor({0.1, -0.5, 2.0}, torch::kDouble));
       }},
  };
  for (const UnaryCase& c : cases) {
    Tensor x = x0.clone().requires_grad_();
    torch::Tensor tx = to_torch(x0).requires_grad_();
    const Tensor y = c.ours(x);
    const torch::Tensor ty = c.theirs(tx);
    expect_same(y, ty, 1e-14, c.name);
    (y * w.narrow(1, 0, y.numel() / 4).reshape(y.sizes())).sum().backward();
    (ty * to_torch(w).narrow(1, 0, ty.numel() / 4).reshape(ty.sizes())).sum().backward();
    expect_same(x.grad(), tx.grad(), c.grad_tol, c.name + " gradient");
  }
}

// threshold on integer tensors: LibTorch casts threshold and value to the tensor's dtype (truncating) and
// compares exactly, so -1.5 acts as -1 and an int64 past 2^24 is not rounded to a float's precision.
TEST(FunctionalParity, ThresholdOnIntegersMatchesLibTorch) {
  const std::vector<int64_t> longs = {-3, -2, -1, 0, 1, 7, 16777216, 16777217};
  const std::vector<std::pair<double, double>> params = {{-1.5, 5}, {16777216, 0}, {0.9, -7}, {1, 1}};
  for (const auto& [threshold, value] : params) {
    const Tensor ours = F::threshold(tensor(longs), threshold, value);
    const torch::Tensor theirs = torch::threshold(torch::tensor(longs, torch::kLong), threshold, value);
    EXPECT_EQ(ours.dtype(), kInt64);
    EXPECT_EQ(theirs.scalar_type(), torch::kLong);
    const torch::Tensor c = theirs.contiguous();
    const std::vector<int64_t> want(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
    EXPECT_EQ(ours.to_vector<int64_t>(), want) << "threshold " << threshold << ", value " << value;
  }
  const std::vector<int64_t> byte_values = {0, 3, 4, 200, 255};
  for (const auto& [threshold, value] : std::vector<std::pair<double, double>>{{3.9, 255}, {0, 1}, {254.5, 9}}) {
    const Tensor ours = F::threshold(tensor(byte_values).to(kUInt8), threshold, value);
    const torch::Tensor theirs =
        torch::threshold(torch::tensor(byte_values, torch::kLong).to(torch::kByte), threshold, value);
    EXPECT_EQ(ours.dtype(), kUInt8);
    EXPECT_EQ(kiln_values(ours), torch_values(theirs)) << "uint8, threshold " << threshold << ", value " << value;
  }
}

// threshold and the shrinks on bfloat16 (LibTorch 1.13 has no half CPU kernels for them): LibTorch casts the
// parameter to bfloat16 before it compares, so inputs at 0.3002 rounded (0.30078125) count as at the threshold
// and inside hardshrink; softshrink's value reads lambd in float, its gradient cast. The values, and the
// gradients of threshold and softshrink.
TEST(FunctionalParity, ThresholdAndShrinksOnBFloat16MatchLibTorch) {
  const std::vector<double> xs = {0.30078125, -0.30078125, 0.302734375, 0.298828125, -0.302734375, 0.0, 2.5};
  const auto ours_x = [&] { return tensor(xs).to(kBFloat16); };
  const auto theirs_x = [&] { return torch::tensor(xs, torch::kDouble).to(torch::kBFloat16); };
  for (const double lambd : {0.3002, 0.3, 0.2999}) {
    EXPECT_EQ(kiln_values(F::hardshrink(ours_x(), lambd)), torch_values(torch::hardshrink(theirs_x(), lambd)))
        << "hardshrink, lambd " << lambd;
    Tensor x = ours_x();
    x.requires_grad_();
    const Tensor y = F::threshold(x, lambd, 5.0);
    y.sum().backward();
    torch::Tensor t = theirs_x().requires_grad_(true);
    const torch::Tensor ty = torch::threshold(t, lambd, 5.0);
    ty.sum().backward();
    EXPECT_EQ(kiln_values(y.detach()), torch_values(ty.detach())) << "threshold " << lambd;
    EXPECT_EQ(kiln_values(x.grad()), torch_values(t.grad())) << "threshold's gradient, threshold " << lambd;
    Tensor xs = ours_x();
    xs.requires_grad_();
    const Tensor ys = F::softshrink(xs, lambd);
    ys.sum().backward();
    torch::Tensor ts = theirs_x().requires_grad_(true);
    const torch::Tensor tys = torch::softshrink(ts, lambd);
    tys.sum().backward();
    EXPECT_EQ(kiln_values(ys.detach()), torch_values(tys.detach())) << "softshrink, lambd " << lambd;
    EXPECT_EQ(kiln_values(xs.grad()), torch_values(ts.grad())) << "softshrink's gradient, lambd " << lambd;
  }
}

// The losses of several inputs: each case builds both sides from the same float64 tensors; the gradients of
// the float inputs (all of them but the labels) are compared.
TEST(FunctionalParity, DistancesAndMarginLossesMatchLibTorch) {
  namespace TF = torch::nn::functional;
  std::mt19937 rng(32);
  const Tensor a = uniform_tensor(rng, {5, 4}, -2, 2), b = uniform_tensor(rng, {5, 4}, -2, 2);
  const Tensor c = uniform_tensor(rng, {5, 4}, -2, 2), pos = uniform_tensor(rng, {5, 4}, 0.2, 3);
  const Tensor signs = tensor(std::vector<double>{1, -1, -1, 1, -1}, {5});
  const Tensor signs20 = signs.view({5, 1}).expand({5, 4}).contiguous();
  const Tensor labels = (uniform_tensor(rng, {5, 4}, -1, 1) > 0).to(kFloat64);
  const Tensor counts = round(uniform_tensor(rng, {5, 4}, 0, 6));
  const Tensor classes = tensor(std::vector<int64_t>{3, 0, 1, 1, 2});
  const Tensor w = tensor(std::vector<double>{0.5, 2, 1, 0.25});
  auto t = [](const Tensor& x) { return to_torch(x); };
  const torch::Tensor tclasses = torch::tensor({3, 0, 1, 1, 2}, torch::kLong);
  struct Case {
    std::string name;
    std::function<Tensor(const std::vector<Tensor>&)> ours;
    std::function<torch::Tensor(const std::vector<torch::Tensor>&)> theirs;
    std::vector<Tensor> inputs;  // the differentiable ones
  };
  const int64_t mean = at::Reduction::Mean, none = at::Reduction::None, sum = at::Reduction::Sum;
  const std::vector<Case> cases = {
      {"normalize p=3 dim 0", [](auto& in) { return F::normalize(in[0], 3.0, 0); },
       [](auto& in) { return TF::normalize(in[0], TF::NormalizeFuncOptions().p(3).dim(0)); }, {a}},
      {"cosine_similarity", [](auto& in) { return F::cosine_similarity(in[0], in[1]); },
       [](auto& in) { return torch::cosine_similarity(in[0], in[1], 1, 1e-8); }, {a, b}},
      {"cosine_similarity broadcast dim 0", [](auto& in) { return F::cosine_similarity(in[0], in[1].narrow(1, 0, 1), 0); },
       [](auto& in) { return torch::cosine_similarity(in[0], in[1].narrow(1, 0, 1), 0, 1e-8); }, {a, b}},
      {"pairwise_distance p=1.5 keepdim", [](auto& in) { return F::pairwise_distance(in[0], in[1], 1.5, 1e-6, true); },
       [](auto& in) { return torch::pairwise_distance(in[0], in[1], 1.5, 1e-6, true); }, {a, b}},
      {"margin_ranking", [&](auto& in) { return F::margin_ranking_loss(in[0], in[1], signs20, 0.4); },
       [&](auto& in) { return torch::margin_ranking_loss(in[0], in[1], t(signs20), 0.4, mean); }, {a, b}},
      {"hinge_embedding", [&](auto& in) { return F::hinge_embedding_loss(in[0], signs20, 0.6, F::Reduction::Sum); },
       [&](auto& in) { return torch::hinge_embedding_loss(in[0], t(signs20), 0.6, sum); }, {a}},
      {"soft_margin", [&](auto& in) { return F::soft_margin_loss(in[0], signs20); },
       [&](auto& in) { return torch::soft_margin_loss(in[0], t(signs20), mean); }, {a}},
      {"cosine_embedding", [&](auto& in) { return F::cosine_embedding_loss(in[0], in[1], signs, 0.1, F::Reduction::None); },
       [&](auto& in) { return torch::cosine_embedding_loss(in[0], in[1], t(signs), 0.1, none); }, {a, b}},
      {"triplet swap p=3", [](auto& in) {
         return F::triplet_margin_loss(in[0], in[1], in[2], {.margin = 0.7, .p = 3, .swap = true});
       },
       [](auto& in) { return torch::triplet_margin_loss(in[0], in[1], in[2], 0.7, 3, 1e-6, true, mean); }, {a, b, c}},
      {"poisson log_input", [&](auto& in) { return F::poisson_nll_loss(in[0], counts, {.full = true}); },
       [&](auto& in) { return torch::poisson_nll_loss(in[0], t(counts), true, true, 1e-8, mean); }, {a}},
      {"poisson rates", [&](auto& in) { return F::poisson_nll_loss(in[0], counts, {.log_input = false, .reduction = F::Reduction::None}); },
       [&](auto& in) { return torch::poisson_nll_loss(in[0], t(counts), false, false, 1e-8, none); }, {pos}},
      {"multilabel_soft_margin", [&](auto& in) { return F::multilabel_soft_margin_loss(in[0], labels, w); },
       [&](auto& in) {
         return TF::multilabel_soft_margin_loss(in[0], t(labels), TF::MultilabelSoftMarginLossFuncOptions().weight(t(w)));
       }, {a}},
      {"multi_margin p=2", [&](auto& in) { return F::multi_margin_loss(in[0], classes, {.p = 2, .margin = 0.9, .weight = w}); },
       [&](auto& in) { return torch::multi_margin_loss(in[0], tclasses, 2, 0.9, t(w), mean); }, {a}},
      {"multi_margin p=1 none", [&](auto& in) { return F::multi_margin_loss(in[0], classes, {.reduction = F::Reduction::None}); },
       [&](auto& in) { return torch::multi_margin_loss(in[0], tclasses, 1, 1.0, {}, none); }, {a}},
  };
  for (const Case& k : cases) {
    std::vector<Tensor> ours;
    std::vector<torch::Tensor> theirs;
    for (const Tensor& x : k.inputs) {
      ours.push_back(x.clone().requires_grad_());
      theirs.push_back(to_torch(x).requires_grad_());
    }
    const Tensor y = k.ours(ours);
    const torch::Tensor ty = k.theirs(theirs);
    expect_same(y, ty, 1e-14, k.name);
    const Tensor g = uniform_tensor(rng, y.sizes(), -1, 1);
    (y * g).sum().backward();
    (ty * to_torch(g)).sum().backward();
    for (size_t i = 0; i < ours.size(); ++i)
      expect_same(ours[i].grad(), theirs[i].grad(), 1e-13, k.name + ": gradient of input " + std::to_string(i));
  }
}


// The CTC loss on the same log-probabilities, targets and lengths (empty targets, repeats, frames past the input
// length, an input too short for its target with zero_infinity), in each reduction; gradients with respect to
// the logits through each library's log_softmax. With respect to log_probs themselves LibTorch's gradient
// carries an extra exp(log_probs) * grad term that only a log_softmax before it cancels (kiln/tensor/ops/ctc.h):
// checked to be exactly that difference.
TEST(FunctionalParity, CtcLossMatchesLibTorch) {
  constexpr int64_t T = 12, N = 5, C = 6, S = 4;
  std::mt19937 rng(41);
  const Tensor logits0 = uniform_tensor(rng, {T, N, C}, -3, 3);
  const std::vector<int64_t> targets_v = {1, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 5, 5, 3, 3};
  const Tensor targets = tensor(targets_v, {N, S});
  const std::vector<int64_t> input_lengths = {12, 9, 7, 12, 5}, target_lengths = {4, 2, 0, 4, 4};
  const torch::Tensor t_targets = torch::tensor(targets_v, torch::kLong).reshape({N, S});
  const torch::Tensor t_in = torch::tensor(input_lengths, torch::kLong);
  const torch::Tensor t_tl = torch::tensor(target_lengths, torch::kLong);
  for (F::Reduction reduction : {F::Reduction::None, F::Reduction::Sum, F::Reduction::Mean}) {
    SCOPED_TRACE(nn::reduction_name(reduction));
    // row 4 needs 6 frames for (5, 5, 3, 3), blanks between the repeats, and has 5: infinite, zeroed
    const F::CTCLossOptions o{.blank = 0, .reduction = reduction, .zero_infinity = true};
    Tensor logits = logits0.detach().requires_grad_();
    Tensor loss = F::ctc_loss(log_softmax(logits, 2), targets, input_lengths, target_lengths, o);
    torch::Tensor t_logits = to_torch(logits0).requires_grad_();
    auto t_options = torch::nn::functional::CTCLossFuncOptions().blank(0).zero_infinity(true);
    if (reduction == F::Reduction::None) t_options.reduction(torch::kNone);
    if (reduction == F::Reduction::Sum) t_options.reduction(torch::kSum);
    if (reduction == F::Reduction::Mean) t_options.reduction(torch::kMean);
    torch::Tensor t_loss =
        torch::nn::functional::ctc_loss(torch::log_softmax(t_logits, 2), t_targets, t_in, t_tl, t_options);
    expect_same(loss, t_loss, 1e-12, "loss");
    if (reduction == F::Reduction::None) EXPECT_EQ(kiln_values(loss)[4], 0.0);  // the infinite row, zeroed
    const Tensor w = uniform_tensor(rng, loss.sizes(), 0.5, 1.5);
    (loss * w).sum().backward();
    (t_loss * to_torch(w)).sum().backward();
    expect_same(logits.grad(), t_logits.grad(), 1e-12, "d logits");
  }
  // with respect to log_probs: LibTorch's = kiln's + exp(lp) g on each row's frames below its input length
  Tensor lp = log_softmax(logits0, 2).detach().requires_grad_();
  Tensor nll = F::ctc_loss(lp, targets, input_lengths, target_lengths,
                           {.reduction = F::Reduction::None, .zero_infinity = true});
  torch::Tensor t_lp = to_torch(lp).requires_grad_();
  torch::Tensor t_nll = torch::nn::functional::ctc_loss(
      t_lp, t_targets, t_in, t_tl,
      torch::nn::functional::CTCLossFuncOptions().reduction(torch::kNone).zero_infinity(true));
  nll.sum().backward();
  t_nll.sum().backward();
  std::vector<double> frame_weight(static_cast<size_t>(T * N * C), 0.0);  // 1 where a finite row's frame counts
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t c = 0; c < C; ++c) frame_weight[(t * N + n) * C + c] = t < input_lengths[n] ? 1.0 : 0.0;
  Tensor extra = exp(lp.detach()) * tensor(frame_weight, {T, N, C});
  expect_same(lp.grad() + extra, t_lp.grad(), 1e-12, "d log_probs, up to exp(lp)");
}

// embedding's padding_idx, max_norm and scale_grad_by_freq, embedding_bag in every mode (offsets, an empty bag,
// include_last_offset, padding, per-sample weights, scale_grad_by_freq) and bilinear: outputs and gradients.
TEST(FunctionalParity, EmbeddingBagAndBilinearMatchLibTorch) {
  namespace tf = torch::nn::functional;
  const std::vector<int64_t> idx = {2, 5, 5, 0, 6, 1, 3, 3, 4, 6};
  const Tensor indices = tensor(idx, {10});
  const torch::Tensor t_indices = torch::tensor(idx, torch::kInt64);
  const Tensor table = test::randn64({7, 4}, 900);
  expect_parity({table},
                [&](const std::vector<Tensor>& t) { return F::embedding(indices.view({2, 5}), t[0], 3); },
                [&](const std::vector<torch::Tensor>& t) {
                  return tf::embedding(t_indices.view({2, 5}), t[0], tf::EmbeddingFuncOptions().padding_idx(3));
                },
                0, "embedding padding_idx 3", 901);
  // max_norm: both libraries scale the named rows of their own copy of the table in place, then look up.
  // LibTorch's side is its renorm op itself, as Python's F.embedding calls it: the C++ functional options keep
  // max_norm as a float, which rounds 1.2.
  for (double p : {2.0, 1.0}) {
    const std::string what = "embedding max_norm 1.2, norm_type " + std::to_string(p);
    const Tensor ours = table.clone() * 1.5;
    torch::Tensor theirs = to_torch(ours);
    const Tensor y = F::embedding(indices, ours, std::nullopt, 1.2, p);
    {
      torch::NoGradGuard no_grad;
      torch::embedding_renorm_(theirs, t_indices, 1.2, p);
    }
    expect_same(ours, theirs, 1e-15, what + ": the table");
    expect_same(y, torch::embedding(theirs, t_indices), 1e-15, what + ": the lookup");
    const Tensor bag_table = table.clone() * 1.5;
    F::embedding_bag(indices.view({2, 5}), bag_table, {}, {.mode = F::BagMode::Max, .max_norm = 1.2, .norm_type = p});
    expect_same(bag_table, theirs, 1e-15, what + ": embedding_bag's table");
  }
  const std::vector<int64_t> starts = {0, 3, 3, 7}, ends = {0, 3, 3, 7, 10};
  const torch::Tensor t_starts = torch::tensor(starts, torch::kInt64), t_ends = torch::tensor(ends, torch::kInt64);
  struct Mode {
    F::BagMode ours;
    torch::nn::EmbeddingBagMode theirs;
    const char* name;
  };
  for (const Mode& m : {Mode{F::BagMode::Sum, torch::kSum, "sum"}, Mode{F::BagMode::Mean, torch::kMean, "mean"},
                        Mode{F::BagMode::Max, torch::kMax, "max"}})
    for (bool last : {false, true})
      for (std::optional<int64_t> padding : {std::optional<int64_t>(), std::optional<int64_t>(3)}) {
        const std::string what = std::string("embedding_bag ") + m.name + (last ? ", include_last_offset" : "") +
                                 (padding ? ", padding_idx 3" : "");
        const F::EmbeddingBagOptions o{.mode = m.ours, .padding_idx = padding, .include_last_offset = last};
        auto t_options = tf::EmbeddingBagFuncOptions().offsets(last ? t_ends : t_starts).mode(m.theirs)
                             .include_last_offset(last);
        if (padding) t_options.padding_idx(*padding);
        expect_parity({table},
                      [&](const std::vector<Tensor>& t) {
                        return F::embedding_bag(indices, t[0], tensor(last ? ends : starts), o);
                      },
                      [&](const std::vector<torch::Tensor>& t) { return tf::embedding_bag(t_indices, t[0], t_options); },
                      1e-14, what, 902);
      }
  expect_parity({table, test::randn64({10}, 903)},
                [&](const std::vector<Tensor>& t) {
                  return F::embedding_bag(indices, t[0], tensor(starts), {.mode = F::BagMode::Sum}, t[1]);
                },
                [&](const std::vector<torch::Tensor>& t) {
                  return tf::embedding_bag(t_indices, t[0], tf::EmbeddingBagFuncOptions().offsets(t_starts)
                                                                .mode(torch::kSum).per_sample_weights(t[1]));
                },
                1e-14, "embedding_bag per_sample_weights", 904);
  // scale_grad_by_freq: indices 5, 3 and 6 come twice, so their rows' gradients are halved.
  expect_parity({table},
                [&](const std::vector<Tensor>& t) {
                  return F::embedding(indices.view({2, 5}), t[0], 3, std::nullopt, 2.0, /*scale_grad_by_freq=*/true);
                },
                [&](const std::vector<torch::Tensor>& t) {
                  return tf::embedding(t_indices.view({2, 5}), t[0],
                                       tf::EmbeddingFuncOptions().padding_idx(3).scale_grad_by_freq(true));
                },
                1e-14, "embedding scale_grad_by_freq", 910);
  // embedding_bag's: against LibTorch's embedding, summed or averaged over each row's bag. LibTorch 1.13's own
  // CPU embedding_bag divides some rows by another row's count (PyTorch issue 190063, fixed upstream in 2026):
  // here rows 4 and 5 would come out wrong.
  for (const Mode& m : {Mode{F::BagMode::Sum, torch::kSum, "sum"}, Mode{F::BagMode::Mean, torch::kMean, "mean"}}) {
    const bool weighted = m.ours == F::BagMode::Sum;
    expect_parity({table, test::randn64({2, 5}, 911)},
                  [&](const std::vector<Tensor>& t) {
                    return F::embedding_bag(indices.view({2, 5}), t[0], {},
                                            {.mode = m.ours, .scale_grad_by_freq = true}, weighted ? t[1] : Tensor());
                  },
                  [&](const std::vector<torch::Tensor>& t) {
                    torch::Tensor rows = tf::embedding(t_indices.view({2, 5}), t[0],
                                                       tf::EmbeddingFuncOptions().scale_grad_by_freq(true));
                    if (weighted) return (rows * t[1].unsqueeze(-1)).sum(1);
                    return rows.mean(1);
                  },
                  1e-14, std::string("embedding_bag scale_grad_by_freq ") + m.name, 912);
  }
  expect_parity({test::randn64({3, 2, 4}, 905), test::randn64({3, 2, 5}, 906), test::randn64({6, 4, 5}, 907),
                 test::randn64({6}, 908)},
                [](const std::vector<Tensor>& t) { return F::bilinear(t[0], t[1], t[2], t[3]); },
                [](const std::vector<torch::Tensor>& t) { return torch::bilinear(t[0], t[1], t[2], t[3]); },
                1e-13, "bilinear", 909);
}

}  // namespace
}  // namespace kiln::parity
