// functional::ctc_loss and nn::CTCLoss against references written from the definition in float64: the sum over
// every path of frames, enumerated, whose collapse (repeats merged, then blanks dropped) is the target, for the
// loss and its gradient; a recursion in probability space, rescaled each frame, for sequences too long to
// enumerate. Then gradcheck, the target forms and lengths, reductions, impossible alignments, 16-bit inputs,
// errors, and a small recognizer trained with it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::randn64;
using test::values;
namespace F = nn::functional;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The labels a path of classes emits: runs merged, then blanks dropped.
std::vector<int64_t> collapse(const std::vector<int64_t>& path, int64_t blank) {
  std::vector<int64_t> out;
  for (size_t t = 0; t < path.size(); ++t)
    if (path[t] != blank && (t == 0 || path[t] != path[t - 1])) out.push_back(path[t]);
  return out;
}

struct PathSum {
  double nll;                 // -log of the probability of the target
  std::vector<double> grad;   // d nll / d lp, (T, C), zero past len
};

// lp: (T, C) log-probabilities of one element, of which the first len frames count.
PathSum sum_over_paths(const std::vector<double>& lp, int64_t T, int64_t C, int64_t len,
                       const std::vector<int64_t>& labels, int64_t blank) {
  double total = 0;
  std::vector<double> through(static_cast<size_t>(T * C), 0.0);  // probability of the paths through (t, c)
  std::vector<int64_t> path(static_cast<size_t>(len), 0);
  for (;;) {
    if (collapse(path, blank) == labels) {
      double log_p = 0;
      for (int64_t t = 0; t < len; ++t) log_p += lp[t * C + path[t]];
      total += std::exp(log_p);
      for (int64_t t = 0; t < len; ++t) through[t * C + path[t]] += std::exp(log_p);
    }
    int64_t t = 0;  // the next path, as an odometer
    while (t < len && ++path[t] == C) path[t++] = 0;
    if (t == len) break;
  }
  PathSum r{-std::log(total), std::vector<double>(static_cast<size_t>(T * C), 0.0)};
  // d(-log total)/d lp[t][c] = -(the probability of the paths through (t, c)) / total
  for (size_t i = 0; i < through.size(); ++i) r.grad[i] = -through[i] / total;
  return r;
}

// nll by the forward recursion in probability space, each frame's row rescaled to sum to 1 (the log of the
// scales adds up to the log-likelihood): a formulation apart from the kernels' log-space one.
double scaled_recursion_nll(const std::vector<double>& lp, int64_t C, int64_t len, const std::vector<int64_t>& labels,
                            int64_t blank) {
  const int64_t L = static_cast<int64_t>(labels.size()), P = 2 * L + 1;
  auto label = [&](int64_t s) { return s % 2 == 0 ? blank : labels[s / 2]; };
  std::vector<double> a(static_cast<size_t>(P), 0.0), next(a.size());
  a[0] = std::exp(lp[label(0)]);
  if (L > 0) a[1] = std::exp(lp[label(1)]);
  double log_scale = 0;
  for (int64_t t = 0;; ++t) {
    double sum = 0;
    for (double v : a) sum += v;
    if (sum == 0) return kInfinity;
    for (double& v : a) v /= sum;
    log_scale += std::log(sum);
    if (t == len - 1) break;
    for (int64_t s = 0; s < P; ++s) {
      double v = a[s] + (s >= 1 ? a[s - 1] : 0.0);
      if (s >= 2 && label(s) != blank && label(s) != label(s - 2)) v += a[s - 2];
      next[s] = v * std::exp(lp[(t + 1) * C + label(s)]);
    }
    a.swap(next);
  }
  const double end = a[P - 1] + (L > 0 ? a[P - 2] : 0.0);
  return -(std::log(end) + log_scale);
}

// Random log-probabilities (T, N, C), float64, log_softmax of normal logits.
Tensor random_log_probs(int64_t T, int64_t N, int64_t C, uint64_t seed) {
  return log_softmax(randn64({T, N, C}, seed), 2);
}

// Element n's (T, C) log-probabilities, flat.
std::vector<double> frames_of(const Tensor& log_probs, int64_t n) { return values(log_probs.select(1, n)); }

Tensor padded_targets(const std::vector<std::vector<int64_t>>& rows, int64_t S, int64_t fill) {
  std::vector<int64_t> v;
  for (const auto& r : rows) {
    v.insert(v.end(), r.begin(), r.end());
    v.insert(v.end(), static_cast<size_t>(S) - r.size(), fill);
  }
  return tensor(v, {static_cast<int64_t>(rows.size()), S});
}

std::vector<int64_t> lengths_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> l;
  for (const auto& r : rows) l.push_back(static_cast<int64_t>(r.size()));
  return l;
}

TEST(CtcLoss, MatchesEveryPathSummedByBruteForce) {
  constexpr int64_t T = 6, C = 4;
  // repeats need a blank between them; an empty target; one label; frames past the input length
  const std::vector<std::vector<int64_t>> rows = {{1, 1}, {1, 2, 1}, {}, {3}, {2, 3, 3}};
  const std::vector<int64_t> input_lengths = {6, 5, 4, 6, 6};
  for (int64_t blank : {0, 2}) {
    SCOPED_TRACE("blank " + std::to_string(blank));
    std::vector<std::vector<int64_t>> r = rows;
    for (auto& row : r)
      for (int64_t& l : row) l = blank == 0 ? l : (l == 2 ? 0 : l);  // relabel so that no label is the blank
    const int64_t N = static_cast<int64_t>(r.size());
    Tensor lp = random_log_probs(T, N, C, 10 + blank).requires_grad_();
    Tensor nll = F::ctc_loss(lp, padded_targets(r, 3, blank), input_lengths, lengths_of(r),
                             {.blank = blank, .reduction = F::Reduction::None});
    Tensor weights = randn64({N}, 20);
    (nll * weights).sum().backward();
    std::vector<double> got = values(nll), grad = values(lp.grad());
    for (int64_t n = 0; n < N; ++n) {
      PathSum want = sum_over_paths(frames_of(lp.detach(), n), T, C, input_lengths[n], r[n], blank);
      EXPECT_NEAR(got[n], want.nll, 1e-12) << "row " << n;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c)
          EXPECT_NEAR(grad[(t * N + n) * C + c], want.grad[t * C + c] * values(weights)[n], 1e-12)
              << "row " << n << ", frame " << t << ", class " << c;
    }
  }
}

TEST(CtcLoss, LongSequencesMatchTheScaledRecursion) {
  constexpr int64_t T = 80, N = 4, C = 12;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> cls(1, C - 1), few(1, 2);
  std::vector<std::vector<int64_t>> rows(N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < 10 + 8 * n; ++j) rows[n].push_back(n == 2 ? few(rng) : cls(rng));  // row 2: many repeats
  const std::vector<int64_t> input_lengths = {80, 61, 75, 80};
  Tensor lp = random_log_probs(T, N, C, 11);
  Tensor targets = padded_targets(rows, 34, 0);
  const F::CTCLossOptions none{.reduction = F::Reduction::None};
  std::vector<double> got = values(F::ctc_loss(lp, targets, input_lengths, lengths_of(rows), none));
  for (int64_t n = 0; n < N; ++n) {
    double want = scaled_recursion_nll(frames_of(lp, n), C, input_lengths[n], rows[n], 0);
    EXPECT_NEAR(got[n], want, 1e-11 * want) << "row " << n;
  }
  // float32 within its rounding of the float64 result
  std::vector<double> f32 = values(F::ctc_loss(lp.to(kFloat32), targets, input_lengths, lengths_of(rows), none));
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(f32[n], got[n], 2e-5 * got[n]) << "float32 row " << n;
}

TEST(CtcLoss, Gradchecks) {
  const std::vector<std::vector<int64_t>> rows = {{1, 2, 2}, {3}};
  Tensor targets = padded_targets(rows, 3, 0);
  // with respect to the log-probabilities themselves, and to logits through a log_softmax
  Tensor lp = random_log_probs(7, 2, 4, 12).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) { return F::ctc_loss(in[0], targets, {7, 5}, {3, 1}); }, {lp});
  Tensor logits = randn64({7, 2, 4}, 13).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) {
    return F::ctc_loss(log_softmax(in[0], 2), targets, {6, 7}, {3, 1}, {.reduction = F::Reduction::Sum});
  }, {logits});
  // its gradient is not differentiable: said, not silently wrong
  Tensor loss = F::ctc_loss(lp, targets, {7, 5}, {3, 1});
  expect_error([&] { autograd::grad({loss}, {lp}, {}, /*retain_graph=*/true, /*create_graph=*/true); },
               {"ctc_loss", "create_graph"});
}

TEST(CtcLoss, TargetFormsAndLengthTensorsAgree) {
  const std::vector<std::vector<int64_t>> rows = {{1, 1, 3}, {2}, {}, {3, 2}};
  Tensor lp = random_log_probs(5, 4, 4, 14);
  const std::vector<int64_t> in = {5, 3, 4, 5}, tl = lengths_of(rows);
  const F::CTCLossOptions none{.reduction = F::Reduction::None};
  Tensor want = F::ctc_loss(lp, padded_targets(rows, 3, 0), in, tl, none);
  // padding values are never read
  EXPECT_EQ(values(F::ctc_loss(lp, padded_targets(rows, 5, 3), in, tl, none)), values(want));
  // 1-D: the labels one after another
  EXPECT_EQ(values(F::ctc_loss(lp, tensor(std::vector<int64_t>{1, 1, 3, 2, 3, 2}, {6}), in, tl, none)), values(want));
  // int32 targets, lengths as tensors (int32 and int64)
  Tensor int32_targets = padded_targets(rows, 3, 0).to(kInt32);
  EXPECT_EQ(values(F::ctc_loss(lp, int32_targets, tensor(in, {4}).to(kInt32), tensor(tl, {4}), none)), values(want));
  // unbatched: a batch of one, squeezed
  Tensor one = F::ctc_loss(lp.select(1, 0), tensor(rows[0], {3}), tensor(std::vector<int64_t>{5}, {}),
                           tensor(std::vector<int64_t>{3}, {}), none);
  EXPECT_EQ(one.dim(), 0);
  EXPECT_NEAR(one.item<double>(), values(want)[0], 1e-15);
}

TEST(CtcLoss, ReductionsAsPyTorch) {
  const std::vector<std::vector<int64_t>> rows = {{1, 2, 3}, {2}, {}};
  Tensor lp = random_log_probs(6, 3, 4, 15);
  Tensor targets = padded_targets(rows, 3, 0);
  const std::vector<int64_t> in = {6, 4, 5}, tl = lengths_of(rows);
  std::vector<double> each = values(F::ctc_loss(lp, targets, in, tl, {.reduction = F::Reduction::None}));
  EXPECT_NEAR(F::ctc_loss(lp, targets, in, tl, {.reduction = F::Reduction::Sum}).item<double>(),
              each[0] + each[1] + each[2], 1e-13);
  // mean: each loss over its target length (an empty target counts as 1), then over the batch
  EXPECT_NEAR(F::ctc_loss(lp, targets, in, tl).item<double>(), (each[0] / 3 + each[1] / 1 + each[2] / 1) / 3, 1e-13);
  nn::CTCLoss module({.blank = 0, .reduction = F::Reduction::Sum});
  EXPECT_NEAR(module(lp, targets, tensor(in, {3}), tensor(tl, {3})).item<double>(), each[0] + each[1] + each[2],
              1e-13);
  EXPECT_EQ(module->str(), "CTCLoss(blank=0, reduction=sum, zero_infinity=false)");
}

TEST(CtcLoss, ImpossibleAlignmentsAreInfiniteOrZeroed) {
  // {1, 1} needs 3 frames (1, blank, 1); row 0 has 2. Row 1 is fine. Row 2 has no frames and no labels: nll 0.
  const std::vector<std::vector<int64_t>> rows = {{1, 1}, {2}, {}};
  Tensor targets = padded_targets(rows, 2, 0);
  const std::vector<int64_t> in = {2, 3, 0}, tl = lengths_of(rows);
  for (bool zero_infinity : {false, true}) {
    SCOPED_TRACE(zero_infinity ? "zero_infinity" : "infinite");
    Tensor lp = random_log_probs(3, 3, 3, 16).requires_grad_();
    Tensor nll = F::ctc_loss(lp, targets, in, tl, {.reduction = F::Reduction::None, .zero_infinity = zero_infinity});
    std::vector<double> v = values(nll);
    EXPECT_EQ(v[0], zero_infinity ? 0.0 : kInfinity);
    EXPECT_TRUE(std::isfinite(v[1]) && v[1] > 0);
    EXPECT_EQ(v[2], 0.0);
    nll.sum().backward();
    std::vector<double> g = values(lp.grad());
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t c = 0; c < 3; ++c) {
        const double row0 = g[(t * 3 + 0) * 3 + c], row2 = g[(t * 3 + 2) * 3 + c];
        if (t < 2) EXPECT_TRUE(zero_infinity ? row0 == 0.0 : std::isnan(row0)) << t << ", " << c;
        else EXPECT_EQ(row0, 0.0);  // past its input length
        EXPECT_EQ(row2, 0.0);
      }
  }
}

TEST(CtcLoss, SixteenBitInputsComputeInFloat32) {
  const std::vector<std::vector<int64_t>> rows = {{1, 2}, {3, 3}};
  Tensor lp = random_log_probs(8, 2, 4, 17);
  Tensor targets = padded_targets(rows, 2, 0);
  for (DType d : {kBFloat16, kFloat16}) {
    Tensor x = lp.to(d).requires_grad_();
    Tensor loss = F::ctc_loss(x, targets, {8, 7}, {2, 2});
    EXPECT_EQ(loss.dtype(), d);
    Tensor want = F::ctc_loss(x.detach().to(kFloat64), targets, {8, 7}, {2, 2});
    EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-2 * want.item<double>()) << dtype_name(d);
    loss.backward();
    EXPECT_EQ(x.grad().dtype(), d);
  }
}

TEST(CtcLoss, BadInputsNameWhatWasExpected) {
  Tensor lp = random_log_probs(4, 2, 3, 18);
  Tensor targets = tensor(std::vector<int64_t>{1, 2, 2, 0}, {2, 2});
  expect_error([&] { F::ctc_loss(lp, targets, {4, 4}, {2, 2}); }, {"ctc_loss", "target 0", "row 1", "blank (0)"});
  expect_error([&] { F::ctc_loss(lp, targets, {4, 4}, {2, 1}, {.blank = 2}); }, {"target 2", "row 0", "blank (2)"});
  expect_error([&] { F::ctc_loss(lp, targets + 2, {4, 4}, {1, 1}); }, {"target 3", "[0, 3)"});
  expect_error([&] { F::ctc_loss(lp, targets, {5, 4}, {1, 1}); }, {"input_lengths[0] = 5", "[0, 4]"});
  expect_error([&] { F::ctc_loss(lp, targets, {4, 4}, {1, 3}); }, {"target_lengths[1] = 3", "rows (2)"});
  expect_error([&] { F::ctc_loss(lp, targets, {4}, {1}); }, {"need 2 input and target lengths", "got 1 and 1"});
  expect_error([&] { F::ctc_loss(lp, tensor(std::vector<int64_t>{1, 2}, {2}), {4, 4}, {2, 1}); },
               {"1-D targets", "3 labels", "got 2"});
  expect_error([&] { F::ctc_loss(lp.unsqueeze(0), targets, {4, 4}, {1, 1}); }, {"(T, N, C)", "(1, 4, 2, 3)"});
  expect_error([&] { F::ctc_loss(lp, targets.to(kFloat32), {4, 4}, {1, 1}); }, {"targets", "int64 or int32"});
  expect_error([&] { F::ctc_loss(lp, targets, {4, 4}, {1, 1}, {.blank = 3}); }, {"blank", "[0, 3)", "got 3"});
  expect_error([&] { F::ctc_loss(lp, targets, tensor({4.0, 4.0}), tensor(std::vector<int64_t>{1, 1}, {2})); },
               {"input_lengths", "int64 or int32", "float32"});
}

// A recognizer that reads frames and writes the labels they show, trained with the CTC loss alone: each
// sequence shows 3 labels of 5, each for 2 to 4 noisy frames, with a silent frame between equal neighbours.
// It never sees an alignment; greedy decoding (best class per frame, collapsed) must then read new sequences.
TEST(CtcLoss, TrainsARecognizerThatDecodesNewSequences) {
  constexpr int64_t kLabels = 5, kClasses = kLabels + 1, kFeatures = 8, kBatch = 32, kFrames = 14;
  std::mt19937 rng(3);
  Generator g(4);
  Tensor codes = randn({kLabels + 1, kFeatures}, kFloat32, &g);  // a feature pattern per label; row 0: silence
  auto draw = [&] {
    std::uniform_int_distribution<int64_t> label(1, kLabels), run(2, 4);
    std::vector<std::vector<int64_t>> targets(kBatch);
    std::vector<int64_t> frame_codes, lengths;
    for (int64_t n = 0; n < kBatch; ++n) {
      std::vector<int64_t> frames;
      for (int j = 0; j < 3; ++j) {
        int64_t l = label(rng);
        if (j > 0 && l == targets[n].back()) frames.push_back(0);
        targets[n].push_back(l);
        for (int64_t k = run(rng); k > 0; --k) frames.push_back(l);
      }
      lengths.push_back(static_cast<int64_t>(frames.size()));
      frames.resize(kFrames, 0);
      frame_codes.insert(frame_codes.end(), frames.begin(), frames.end());
    }
    // (N, T) codes -> (T, N, F) features with noise
    Tensor x = index_select(codes, 0, tensor(frame_codes, {kBatch * kFrames}));
    x = x.reshape({kBatch, kFrames, kFeatures});
    x = (x + 0.3 * randn({kBatch, kFrames, kFeatures}, kFloat32, &g)).transpose(0, 1).contiguous();
    return std::make_tuple(x, targets, lengths);
  };
  nn::Sequential model(nn::Linear(kFeatures, 32), nn::ReLU(), nn::Linear(32, kClasses));
  optim::Adam opt(model->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 150; ++step) {
    auto [x, targets, lengths] = draw();
    Tensor loss = F::ctc_loss(log_softmax(model(x), 2), padded_targets(targets, 3, 0), lengths, lengths_of(targets));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  auto [x, targets, lengths] = draw();
  NoGradGuard no_grad;
  std::vector<double> best = values(model(x).argmax(2));  // (T, N)
  int64_t right = 0;
  for (int64_t n = 0; n < kBatch; ++n) {
    std::vector<int64_t> path;
    for (int64_t t = 0; t < lengths[n]; ++t) path.push_back(static_cast<int64_t>(best[t * kBatch + n]));
    right += collapse(path, 0) == targets[n];
  }
  EXPECT_GE(right, kBatch * 9 / 10) << right << " of " << kBatch << " sequences read right";
}

}  // namespace
}  // namespace kiln
