// The fused cross-entropy, layer-norm and batch-norm CUDA kernels against the CPU kernels on the same random
// inputs (a fresh seed each run, printed with every failure; device memory poisoned first): forward and
// backward, every float dtype, narrow rows (a warp each), wide rows (a block each), many rows (the parameter
// gradients' two launches), weights, ignore_index and smoothing, logits near 1e4, batch norm in training and
// eval mode; a bad target found on the device and raised by the next call; and all three through autograd and
// nn, against the CPU. The CTC loss's kernels, forward and backward, against the CPU's.
#include <random>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kiln/kiln.h"
#include "kiln/tensor/ops/ctc.h"

namespace kiln {
namespace {

class CudaFused : public test::CudaTest {};

using test::fresh_seed;

std::string seed_note(uint32_t seed) { return " (seed " + std::to_string(seed) + ")"; }

TEST_F(CudaFused, CrossEntropyMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  struct Case {
    int64_t n, c;
    bool weighted;
    CrossEntropyParams p;
  };
  const std::vector<Case> cases = {{1, 1, false, {}},
                                   {64, 10, false, {}},
                                   {64, 10, true, {.ignore_index = 3}},
                                   {37, 1000, true, {.label_smoothing = 0.1}},
                                   {5, 1025, false, {.label_smoothing = 0.2}},
                                   {3, 5000, true, {.ignore_index = -1, .label_smoothing = 1.0}},
                                   {4097, 7, false, {.label_smoothing = 0.05}}};
  for (DType dtype : test::kFloatDTypes) {
    for (const Case& cs : cases) {
      const std::string what = "cross_entropy (" + std::to_string(cs.n) + ", " + std::to_string(cs.c) + ") " +
                               dtype_name(dtype) + seed_note(seed);
      Tensor z = test::random_tensor({cs.n, cs.c}, dtype, rng, test::Layout::Contiguous, -5, 5);
      std::uniform_int_distribution<int64_t> cls(0, cs.c - 1);
      std::vector<int64_t> tv(static_cast<size_t>(cs.n));
      for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 7 == 2 ? cs.p.ignore_index : cls(rng);
      Tensor t = tensor(tv, {cs.n});
      Tensor w = cs.weighted ? test::random_tensor({cs.c}, dtype, rng, test::Layout::Contiguous, 0.1, 2) : Tensor();
      Tensor g = test::random_tensor({cs.n}, dtype, rng);
      ops::CrossEntropyForward cpu = ops::cross_entropy_forward(z, t, w, cs.p);
      ops::CrossEntropyForward gpu = ops::cross_entropy_forward(z.to(Device::cuda()), t.to(Device::cuda()), w.defined() ? w.to(Device::cuda()) : w, cs.p);
      const double rtol = test::cuda_rtol(dtype);
      test::expect_matches_cpu(gpu.loss, cpu.loss, what + ": loss", rtol, 8 * rtol);
      test::expect_matches_cpu(gpu.row_weight, cpu.row_weight, what + ": row weight");
      test::expect_matches_cpu(gpu.stats, cpu.stats, what + ": stats", dtype == kFloat64 ? 1e-12 : 1e-5);
      Tensor gcpu = ops::cross_entropy_backward(g, z, cpu.stats, t, w, cs.p);
      Tensor ggpu = ops::cross_entropy_backward(g.to(Device::cuda()), z.to(Device::cuda()), gpu.stats,
                                                t.to(Device::cuda()), w.defined() ? w.to(Device::cuda()) : w, cs.p);
      test::expect_matches_cpu(ggpu, gcpu, what + ": gradient", rtol, 4 * rtol);
      if (HasFailure()) return;
    }
  }
}

// A bad target gives its row NaN and is raised by the next call (by the call itself in KILN_CUDA_SYNC_DEBUG
// builds, which synchronize after every launch); the indexing ops report through the same slot
// (tests/cuda/indexing_test.cpp).
TEST_F(CudaFused, CrossEntropyBadTargetIsRaisedByTheNextCall) {
  Tensor z = randn({4, 5}).to(Device::cuda());
  Tensor bad = tensor(std::vector<int64_t>{0, 7, 1, 2}, {4}).to(Device::cuda());
  Tensor good = tensor(std::vector<int64_t>{0, 1, 2, 3}, {4}).to(Device::cuda());
  std::string message;
  try {
    ops::CrossEntropyForward f = ops::cross_entropy_forward(z, bad, {}, {});
    cuda::synchronize();
    std::vector<float> loss = f.loss.cpu().to_vector<float>();
    EXPECT_TRUE(std::isnan(loss[1])) << "the bad row's loss";
    EXPECT_FALSE(std::isnan(loss[0]));
    ops::cross_entropy_forward(z, good, {}, {});
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "no error for a target out of range";
  for (const char* part : {"cross_entropy", "target 7", "5 classes"})
    EXPECT_NE(message.find(part), std::string::npos) << "\"" << message << "\" lacks " << part;
  // Raised once: the call after it runs.
  ops::CrossEntropyForward ok = ops::cross_entropy_forward(z, good, {}, {});
  cuda::synchronize();
  for (float v : ok.loss.cpu().to_vector<float>()) EXPECT_FALSE(std::isnan(v));
}

// Logits near 1e4: the GPU keeps float32's digits as the CPU does (the max is subtracted before the log).
TEST_F(CudaFused, CrossEntropyOfLargeLogitsMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  Tensor z = test::random_tensor({64, 300}, kFloat32, rng, test::Layout::Contiguous, 1e4 - 4, 1e4 + 4);
  Tensor t = randint(0, 300, {64});
  const CrossEntropyParams p{.label_smoothing = 0.1};
  ops::CrossEntropyForward cpu = ops::cross_entropy_forward(z, t, {}, p);
  ops::CrossEntropyForward gpu = ops::cross_entropy_forward(z.to(Device::cuda()), t.to(Device::cuda()), {}, p);
  test::expect_matches_cpu(gpu.loss, cpu.loss, "loss near 1e4" + seed_note(seed), 1e-5, 1e-5);
  test::expect_matches_cpu(ops::cross_entropy_backward(ones({64}).to(Device::cuda()), z.to(Device::cuda()), gpu.stats,
                                                       t.to(Device::cuda()), {}, p),
                           ops::cross_entropy_backward(ones({64}), z, cpu.stats, t, {}, p),
                           "gradient near 1e4" + seed_note(seed), 1e-5, 1e-6);
}

TEST_F(CudaFused, LayerNormMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  struct Case {
    int64_t m, d;
    bool weight, bias;
  };
  const std::vector<Case> cases = {{1, 1, true, true},   {64, 10, false, false}, {33, 768, true, true},
                                   {5, 1025, true, false}, {3, 5000, false, true}, {4099, 37, true, true},
                                   {20000, 64, true, true}};
  for (DType dtype : test::kFloatDTypes) {
    for (const Case& cs : cases) {
      const std::string what = "layer_norm (" + std::to_string(cs.m) + ", " + std::to_string(cs.d) + ") " +
                               dtype_name(dtype) + seed_note(seed);
      Tensor x = test::random_tensor({cs.m, cs.d}, dtype, rng, test::Layout::Contiguous, -3, 5);
      Tensor w = cs.weight ? test::random_tensor({cs.d}, dtype, rng) : Tensor();
      Tensor b = cs.bias ? test::random_tensor({cs.d}, dtype, rng) : Tensor();
      Tensor g = test::random_tensor({cs.m, cs.d}, dtype, rng);
      auto dev = [](const Tensor& t) { return t.defined() ? t.to(Device::cuda()) : t; };
      ops::LayerNormForward cpu = ops::layer_norm_forward(x, w, b, 1e-5);
      ops::LayerNormForward gpu = ops::layer_norm_forward(x.to(Device::cuda()), dev(w), dev(b), 1e-5);
      const double rtol = test::cuda_rtol(dtype);
      test::expect_matches_cpu(gpu.y, cpu.y, what + ": y", rtol, 4 * rtol);
      test::expect_matches_cpu(gpu.mean, cpu.mean, what + ": mean", dtype == kFloat64 ? 1e-12 : 1e-5, 1e-6);
      test::expect_matches_cpu(gpu.rstd, cpu.rstd, what + ": rstd", dtype == kFloat64 ? 1e-12 : 1e-5);
      ops::LayerNormBackward rc = ops::layer_norm_backward(g, x, cpu.mean, cpu.rstd, w, true, cs.weight, cs.bias);
      ops::LayerNormBackward rg =
          ops::layer_norm_backward(g.to(Device::cuda()), x.to(Device::cuda()), gpu.mean, gpu.rstd, dev(w), true, cs.weight, cs.bias);
      test::expect_matches_cpu(rg.grad_x, rc.grad_x, what + ": dx", rtol, 8 * rtol);
      // The parameter gradients sum over m rows in another order than the CPU's (and in float, not double).
      const double sum_tol = rtol * (4 + std::sqrt(static_cast<double>(cs.m)));
      if (cs.weight) test::expect_matches_cpu(rg.grad_weight, rc.grad_weight, what + ": dw", rtol, sum_tol);
      if (cs.bias) test::expect_matches_cpu(rg.grad_bias, rc.grad_bias, what + ": db", rtol, sum_tol);
      if (HasFailure()) return;
    }
  }
}

// x = 1000 + noise: the GPU shifts its float sums by each row's first element, so its mean and output agree
// with the CPU's double sums to within the rounding of the mean itself (an ulp of 1000 is 6e-5).
TEST_F(CudaFused, LayerNormWithALargeOffsetMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  Tensor x = test::random_tensor({64, 512}, kFloat32, rng, test::Layout::Contiguous, 998, 1002);
  ops::LayerNormForward cpu = ops::layer_norm_forward(x, {}, {}, 1e-5);
  ops::LayerNormForward gpu = ops::layer_norm_forward(x.to(Device::cuda()), {}, {}, 1e-5);
  test::expect_matches_cpu(gpu.mean, cpu.mean, "mean near 1000" + seed_note(seed), 1e-7, 1.3e-4);
  test::expect_matches_cpu(gpu.y, cpu.y, "y near 1000" + seed_note(seed), 1e-5, 4e-4);
}

// A row (a channel) that starts with +inf: the GPU's shift by the first value must not turn the rest into NaN
// (inf - inf): the mean is +inf, as the CPU's double sum gives; the other rows are untouched.
TEST_F(CudaFused, NormsOfValuesStartingWithInfinityMatchTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  Tensor x = test::random_tensor({8, 64}, kFloat32, rng, test::Layout::Contiguous);
  x.index({0, 0}).fill_(test::kInf);
  x.index({3, 0}).fill_(-test::kInf);
  ops::LayerNormForward cpu = ops::layer_norm_forward(x, {}, {}, 1e-5);
  ops::LayerNormForward gpu = ops::layer_norm_forward(x.to(Device::cuda()), {}, {}, 1e-5);
  test::expect_matches_cpu(gpu.mean, cpu.mean, "layer norm mean" + seed_note(seed), 1e-5, 1e-6);
  test::expect_matches_cpu(gpu.y, cpu.y, "layer norm y" + seed_note(seed), 1e-5, 1e-5);

  Tensor v = test::random_tensor({4, 3, 16}, kFloat32, rng, test::Layout::Contiguous);  // (N, C, S)
  v.index({0, 1, 0}).fill_(test::kInf);
  const Tensor none;
  ops::BatchNormForward bc = ops::batch_norm_forward(v, none, none, none, none, 1e-5, true);
  ops::BatchNormForward bg = ops::batch_norm_forward(v.to(Device::cuda()), none, none, none, none, 1e-5, true);
  test::expect_matches_cpu(bg.mean, bc.mean, "batch norm mean" + seed_note(seed), 1e-5, 1e-6);
  EXPECT_TRUE(std::isinf(bg.mean.cpu()[1].item<double>())) << "channel 1 holds +inf";
}

TEST_F(CudaFused, BatchNormMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  struct Case {
    int64_t n, c, s;
  };
  // (N, C) input, a 28x28 batch, one channel of many values (several chunks), many channels of few values.
  // And a channel near 1000: the mean and the squared deviations are two passes on the GPU too.
  const std::vector<Case> cases = {{64, 10, 1}, {64, 32, 784}, {4, 1, 70000}, {3, 2000, 3}, {16, 3, 500}};
  for (DType dtype : test::kFloatDTypes) {
    for (const Case& cs : cases) {
      for (bool training : {true, false}) {
        const std::string what = "batch_norm (" + std::to_string(cs.n) + ", " + std::to_string(cs.c) + ", " +
                                 std::to_string(cs.s) + ") " + dtype_name(dtype) + (training ? " training" : " eval") +
                                 seed_note(seed);
        const double offset = cs.c == 3 && dtype == kFloat32 ? 1000 : 0;
        Tensor x = test::random_tensor({cs.n, cs.c, cs.s}, dtype, rng, test::Layout::Contiguous, offset - 3, offset + 5);
        Tensor w = test::random_tensor({cs.c}, dtype, rng), b = test::random_tensor({cs.c}, dtype, rng);
        Tensor rm = test::random_tensor({cs.c}, kFloat32, rng);
        Tensor rv = test::random_tensor({cs.c}, kFloat32, rng, test::Layout::Contiguous, 0.5, 2);
        Tensor g = test::random_tensor({cs.n, cs.c, cs.s}, dtype, rng);
        auto dev = [](const Tensor& t) { return t.to(Device::cuda()); };
        ops::BatchNormForward cpu = ops::batch_norm_forward(x, w, b, rm, rv, 1e-5, training);
        ops::BatchNormForward gpu = ops::batch_norm_forward(dev(x), dev(w), dev(b), dev(rm), dev(rv), 1e-5, training);
        // Near 1000 the mean itself is known to an ulp of 1000 (6e-5): y and dx carry that.
        const double rtol = std::max(test::cuda_rtol(dtype), offset * 1.2e-7);
        const double sum_tol = rtol * (4 + std::sqrt(static_cast<double>(cs.n * cs.s)));
        test::expect_matches_cpu(gpu.mean, cpu.mean, what + ": mean", dtype == kFloat64 ? 1e-12 : 1e-5, 1e-6);
        test::expect_matches_cpu(gpu.var, cpu.var, what + ": var", dtype == kFloat64 ? 1e-12 : 1e-5, 1e-6);
        test::expect_matches_cpu(gpu.y, cpu.y, what + ": y", rtol, 4 * rtol);
        ops::BatchNormBackward rc = ops::batch_norm_backward(g, x, cpu.mean, cpu.var, w, 1e-5, training, true, true, true);
        ops::BatchNormBackward rg =
            ops::batch_norm_backward(dev(g), dev(x), gpu.mean, gpu.var, dev(w), 1e-5, training, true, true, true);
        test::expect_matches_cpu(rg.grad_x, rc.grad_x, what + ": dx", rtol, 8 * rtol);
        test::expect_matches_cpu(rg.grad_weight, rc.grad_weight, what + ": dw", rtol, sum_tol);
        test::expect_matches_cpu(rg.grad_bias, rc.grad_bias, what + ": db", rtol, sum_tol);
        if (training) {  // sync_batch_norm's pieces: the statistics alone, dx from sums over three times the rows
          ops::BatchNormStats sc = ops::batch_norm_stats(x), sg = ops::batch_norm_stats(dev(x));
          test::expect_matches_cpu(sg.mean, sc.mean, what + ": stats mean", dtype == kFloat64 ? 1e-12 : 1e-5, 1e-6);
          test::expect_matches_cpu(sg.var, sc.var, what + ": stats var", dtype == kFloat64 ? 1e-12 : 1e-5, 1e-6);
          Tensor sums = cat({rc.grad_bias, rc.grad_weight}, 0).to(kFloat64).view({2, cs.c}) * 2.5;
          const int64_t count = 3 * cs.n * cs.s;
          Tensor dc = ops::batch_norm_backward_input(g, x, cpu.mean, cpu.var, w, sums, count, 1e-5);
          Tensor dg = ops::batch_norm_backward_input(dev(g), dev(x), dev(cpu.mean), dev(cpu.var), dev(w), dev(sums),
                                                     count, 1e-5);
          test::expect_matches_cpu(dg, dc, what + ": dx from given sums", rtol, 8 * rtol);
        }
        if (HasFailure()) return;
      }
    }
  }
}

// Through autograd and nn: the losses and gradients of a batch norm, a layer norm and a cross-entropy on
// (N, C, L) logits with smoothing, the running statistics the batch norm updates and an eval-mode gradient,
// on the GPU against the CPU, in float64.
TEST_F(CudaFused, ThroughNnMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  Tensor x = test::random_tensor({6, 5, 8}, kFloat64, rng);
  Tensor w = test::random_tensor({8}, kFloat64, rng), b = test::random_tensor({8}, kFloat64, rng);
  Tensor t = randint(0, 5, {6, 8}, kInt64);
  auto run = [&](Device dev) {
    // detach: to(kCPU) returns x itself, which must not become a leaf that requires grad here.
    Tensor xd = x.to(dev).detach().requires_grad_(), wd = w.to(dev).detach().requires_grad_(),
           bd = b.to(dev).detach().requires_grad_();
    Tensor rm = zeros({5}, TensorOptions(kFloat64).device(dev)), rv = ones({5}, TensorOptions(kFloat64).device(dev));
    Tensor h = nn::F::layer_norm(nn::F::batch_norm(xd, rm, rv, {}, {}, true, 0.1, 1e-5), {8}, wd, bd, 1e-5);
    Tensor loss = nn::F::cross_entropy(h, t.to(dev), {.label_smoothing = 0.1});
    loss.backward();
    // Eval mode: the running statistics the training forward updated, with a gradient that treats them as
    // constants.
    Tensor xe = x.to(dev).detach().requires_grad_();
    nn::F::batch_norm(xe, rm, rv, {}, {}, false, 0.1, 1e-5).pow(2).sum().backward();
    return std::vector<Tensor>{loss.detach(), xd.grad(), wd.grad(), bd.grad(), rm, rv, xe.grad()};
  };
  std::vector<Tensor> cpu = run(kCPU), gpu = run(Device::cuda());
  const char* names[] = {"loss", "dx", "dw", "db", "running mean", "running var", "eval dx"};
  for (size_t i = 0; i < cpu.size(); ++i)
    test::expect_matches_cpu(gpu[i], cpu[i], std::string(names[i]) + seed_note(seed), 1e-11, 1e-12);
}


namespace ctc_case {

// log_probs (T, N, C) of random logits, lengths and labels (never blank 0) drawn for each element: empty targets,
// repeated labels, inputs too short for their targets, and frames past the input length all come up.
struct Batch {
  Tensor log_probs, targets;
  std::vector<int64_t> input_lengths, target_lengths;
};

Batch draw(int64_t T, int64_t N, int64_t C, int64_t S, DType dtype, std::mt19937& rng) {
  Batch b;
  b.log_probs = log_softmax(test::random_tensor({T, N, C}, dtype, rng, test::Layout::Contiguous, -4, 4), 2);
  std::uniform_int_distribution<int64_t> frames(0, T), labels(0, S), cls(1, C - 1), small(1, std::min<int64_t>(C - 1, 2));
  std::vector<int64_t> tv(static_cast<size_t>(N * S), 0);
  for (int64_t n = 0; n < N; ++n) {
    b.input_lengths.push_back(n == 0 ? T : frames(rng));
    b.target_lengths.push_back(n == 0 ? std::min(S, T / 2) : labels(rng));
    for (int64_t j = 0; j < S; ++j) tv[n * S + j] = n % 2 ? small(rng) : cls(rng);  // odd rows: many repeats
  }
  b.targets = tensor(tv, {N, S});
  return b;
}

}  // namespace ctc_case

TEST_F(CudaFused, CtcLossMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  struct Case {
    int64_t T, N, C, S;
  };
  // the third has 401 positions, more than a block's 256 threads
  const std::vector<Case> cases = {{1, 1, 2, 0}, {12, 5, 6, 4}, {300, 3, 30, 200}, {50, 64, 20, 10}};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Case& cs : cases) {
      const std::string what = "ctc_loss (T " + std::to_string(cs.T) + ", N " + std::to_string(cs.N) + ", C " +
                               std::to_string(cs.C) + ", S " + std::to_string(cs.S) + ") " + dtype_name(dtype) +
                               seed_note(seed);
      const ctc_case::Batch b = ctc_case::draw(cs.T, cs.N, cs.C, cs.S, dtype, rng);
      const Tensor lp_gpu = b.log_probs.to(Device::cuda());
      ops::CtcForward cpu = ops::ctc_loss_forward(b.log_probs, b.targets, b.input_lengths, b.target_lengths, 0);
      ops::CtcForward gpu = ops::ctc_loss_forward(lp_gpu, b.targets, b.input_lengths, b.target_lengths, 0);
      const double rtol = dtype == kFloat64 ? 1e-12 : 1e-5;
      test::expect_matches_cpu(gpu.nll, cpu.nll, what + ": nll", rtol, rtol);
      test::expect_matches_cpu(gpu.log_alpha, cpu.log_alpha, what + ": log_alpha", rtol, rtol);
      const Tensor g = test::random_tensor({cs.N}, dtype, rng);
      for (bool zero_infinity : {false, true}) {
        Tensor gcpu = ops::ctc_loss_backward(g, b.log_probs, cpu, 0, zero_infinity);
        Tensor ggpu = ops::ctc_loss_backward(g.to(Device::cuda()), lp_gpu, gpu, 0, zero_infinity);
        test::expect_matches_cpu(ggpu, gcpu, what + (zero_infinity ? ": gradient, zero_infinity" : ": gradient"),
                                 rtol, rtol);
      }
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace kiln
