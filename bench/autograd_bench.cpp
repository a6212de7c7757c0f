// Autograd overhead per op (BENCHMARKS.md W7): what recording an op and running it backward costs when the
// arithmetic itself is free. Every tensor has one float32 element, so the time is all bookkeeping: building
// the node, the engine's walk, accumulating the leaf's gradient, allocating and freeing the results.
//
//   x = ones({1}) requiring grad, c = ones({1}); y = x; 100 times y = y + c; y.sum().backward()
//
// reported as (forward + backward) / 100 in microseconds per op, median over interleaved repetitions, on one
// thread, with LibTorch's figure for the same chain beside it when the benchmark was built against LibTorch
// (KILN_BENCH_WITH_TORCH; see bench/CMakeLists.txt). Rows:
//   add        the W7 chain, forward + backward
//   add_fwd    forward only, graph recorded (and freed when y goes out of scope)
//   add_bwd    add - add_fwd: the backward pass alone, derived from the two medians
//   add_nograd forward only under NoGradGuard: the op's cost without autograd (W7's "no grad" figure)
//   add_fanin  the add chain with c requiring grad too: c's gradient is summed from 100 edges
//   mul        the chain with y = y * c: each node saves both inputs for backward
// Each repetition clears the leaves' gradients first, in both frameworks, so nothing accumulates across them.
//
//   autograd_bench [reps]
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#ifdef KILN_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include "bench_util.h"

namespace {

constexpr int kChain = 100;

enum class Op { kAdd, kMul };

// One chain of the benchmark, written once for both frameworks: T is kiln::Tensor or torch::Tensor.
template <typename T>
T chain(const T& x, const T& c, Op op) {
  T y = x;
  for (int i = 0; i < kChain; ++i) y = op == Op::kAdd ? y + c : y * c;
  return y;
}

bool near(double got, double want) { return std::abs(got - want) <= 1e-4 * std::max(1.0, std::abs(want)); }

// Fails the run if a chain computes the wrong thing: a fast wrong answer is not a benchmark figure.
void check(const char* what, double got, double want) {
  if (!near(got, want)) {
    std::fprintf(stderr, "autograd_bench: %s is %g, expected %g\n", what, got, want);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 250;
  kiln::set_num_threads(1);

  // ---- kiln ----
  kiln::Tensor kx = kiln::ones({1}), kc = kiln::ones({1}), kcg = kiln::ones({1});
  kx.requires_grad_();
  kcg.requires_grad_();
  auto kiln_add = [&] {
    kx.set_grad(kiln::Tensor());
    chain(kx, kc, Op::kAdd).sum().backward();
  };
  auto kiln_add_fwd = [&] {
    kiln::Tensor y = chain(kx, kc, Op::kAdd);
    kiln::bench::do_not_optimize(y);
  };
  auto kiln_add_nograd = [&] {
    kiln::NoGradGuard no_grad;
    kiln::Tensor y = chain(kx, kc, Op::kAdd);
    kiln::bench::do_not_optimize(y);
  };
  auto kiln_add_fanin = [&] {
    kx.set_grad(kiln::Tensor());
    kcg.set_grad(kiln::Tensor());
    chain(kx, kcg, Op::kAdd).sum().backward();
  };
  auto kiln_mul = [&] {
    kx.set_grad(kiln::Tensor());
    chain(kx, kc, Op::kMul).sum().backward();
  };
  kiln_add_fanin();
  check("kiln: add chain", chain(kx, kc, Op::kAdd).item<float>(), 1 + kChain);
  check("kiln: x.grad after the fan-in chain", kx.grad().item<float>(), 1);
  check("kiln: c.grad after the fan-in chain", kcg.grad().item<float>(), kChain);
  kiln_mul();
  check("kiln: x.grad after the mul chain", kx.grad().item<float>(), 1);

  std::vector<std::function<void()>> variants{kiln_add, kiln_add_fwd, kiln_add_nograd, kiln_add_fanin, kiln_mul};
  const size_t n_rows = variants.size();

#ifdef KILN_BENCH_WITH_TORCH
  // ---- LibTorch: the same chains ----
  torch::set_num_threads(1);
  torch::Tensor tx = torch::ones({1}, torch::requires_grad()), tc = torch::ones({1});
  torch::Tensor tcg = torch::ones({1}, torch::requires_grad());
  auto torch_add = [&] {
    tx.mutable_grad().reset();
    chain(tx, tc, Op::kAdd).sum().backward();
  };
  auto torch_add_fwd = [&] {
    torch::Tensor y = chain(tx, tc, Op::kAdd);
    kiln::bench::do_not_optimize(y);
  };
  auto torch_add_nograd = [&] {
    torch::NoGradGuard no_grad;
    torch::Tensor y = chain(tx, tc, Op::kAdd);
    kiln::bench::do_not_optimize(y);
  };
  auto torch_add_fanin = [&] {
    tx.mutable_grad().reset();
    tcg.mutable_grad().reset();
    chain(tx, tcg, Op::kAdd).sum().backward();
  };
  auto torch_mul = [&] {
    tx.mutable_grad().reset();
    chain(tx, tc, Op::kMul).sum().backward();
  };
  torch_add_fanin();
  check("torch: c.grad after the fan-in chain", tcg.grad().item<float>(), kChain);
  variants.insert(variants.end(), {torch_add, torch_add_fwd, torch_add_nograd, torch_add_fanin, torch_mul});
#else
  std::printf("# LibTorch not found at build time: kiln alone (install libtorch-dev, reconfigure to compare)\n");
#endif

  // Interleaved kiln and LibTorch variants see the same machine state; warm-up rounds fill both allocators.
  std::vector<double> t = kiln::bench::time_interleaved(variants, reps, /*warmup=*/20);
  auto us_per_op = [&](size_t i) { return t[i] * 1e6 / kChain; };

  std::printf("# autograd overhead, 1-element float32, chain of %d ops, 1 thread; us per op, median of %d reps;"
              " ratio = kiln / torch (target <= 0.5)\n", kChain, reps);
  std::printf("%-8s %-11s %-9s %-9s %-8s\n", "threads", "op", "kiln", "torch", "ratio");
  const char* names[] = {"add", "add_fwd", "add_nograd", "add_fanin", "mul"};
  auto row = [&](const char* name, double kiln_us, double torch_us) {
    if (torch_us > 0)
      std::printf("%-8d %-11s %-9.3f %-9.3f %-8.3f\n", 1, name, kiln_us, torch_us, kiln_us / torch_us);
    else
      std::printf("%-8d %-11s %-9.3f %-9s %-8s\n", 1, name, kiln_us, "n/a", "n/a");
  };
  auto anchor_us = [&](size_t i) { return t.size() > n_rows ? us_per_op(n_rows + i) : 0.0; };
  for (size_t i = 0; i < n_rows; ++i) {
    row(names[i], us_per_op(i), anchor_us(i));
    if (i == 1) row("add_bwd", us_per_op(0) - us_per_op(1), anchor_us(0) - anchor_us(1));
  }
  return 0;
}
