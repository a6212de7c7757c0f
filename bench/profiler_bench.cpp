// What the profiler costs (kiln/tensor/profiler.h), interleaved in one process:
//
//   kernel call   a 1-element add through call_kernel, the way every frontend calls its kernel, against the
//                 same kernel called straight from the dispatch table (the anchor): the cost of the profiler's
//                 check when nothing records.
//   W7 chain      BENCHMARKS.md's 100-add chain, forward + backward, 1-element tensors (all bookkeeping): with
//                 no profiler, with one recording ranges only (the Trainer's "simple"), and with one recording
//                 every kernel and backward node ("ops": 300 events a chain); then no profiler again, which
//                 shows how much the order of the variants alone moves the figures.
//   W2 step       the MLP's SGD step at batch 128 under the same three, a range around the step in each.
//
//   profiler_bench [reps]
// Reported: medians in microseconds and each variant's ratio to no profiler (the anchor).
#include <kiln/kiln.h>
#include <kiln/optim/optim.h>

#include <cstdio>
#include <cstdlib>

#include "bench_util.h"

using namespace kiln;

namespace {

enum class Mode { Off, Ranges, Ops };

std::unique_ptr<profiler::Profiler> start(Mode mode) {
  if (mode == Mode::Off) return nullptr;
  profiler::Options o;
  o.kernels = o.backward = mode == Mode::Ops;
  return std::make_unique<profiler::Profiler>(o);
}

void row(const char* what, const char* variant, double seconds, double per, double anchor) {
  std::printf("%-12s %-34s %10.3f us %8.3fx\n", what, variant, seconds / per * 1e6, seconds / anchor);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  std::printf("threads %d, medians of %d interleaved repetitions\n", get_num_threads(), reps);

  {  // the check on the hot path, against the table's own call
    constexpr int kCalls = 1000;
    Tensor a = ones({1}), b = ones({1}), out = empty({1});
    const Scalar alpha(1.0);
    auto direct = [&] {
      for (int i = 0; i < kCalls; ++i) get_kernel<kiln::Op::add>(kCPU)(out, a, b, alpha);
    };
    auto through = [&] {
      for (int i = 0; i < kCalls; ++i) call_kernel<kiln::Op::add>(kCPU, out, a, b, alpha);
    };
    const auto t = bench::time_interleaved({direct, through}, reps);
    row("kernel call", "get_kernel(...)(...) (anchor)", t[0], kCalls, t[0]);
    row("kernel call", "call_kernel, no profiler", t[1], kCalls, t[0]);
  }

  {  // W7's chain
    constexpr int kChain = 100;
    Tensor x = ones({1}).requires_grad_(), c = ones({1});
    auto chain = [&](Mode mode) {
      return [&, mode] {
        auto prof = start(mode);
        x.set_grad(Tensor());
        Tensor y = x;
        for (int i = 0; i < kChain; ++i) y = y + c;
        y.sum().backward();
      };
    };
    const auto t = bench::time_interleaved({chain(Mode::Off), chain(Mode::Ranges), chain(Mode::Ops), chain(Mode::Off)}, reps);
    row("W7 chain", "no profiler (anchor), per op", t[0], kChain, t[0]);
    row("W7 chain", "no profiler again", t[3], kChain, t[0]);
    row("W7 chain", "ranges only (\"simple\"), per op", t[1], kChain, t[0]);
    row("W7 chain", "kernels + backward (\"ops\"), per op", t[2], kChain, t[0]);
  }

  {  // W2's training step
    nn::Sequential mlp(nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(),
                       nn::Linear(256, 10));
    optim::SGD opt(mlp->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    Tensor images = randn({128, 784});
    Tensor labels = randint(0, 10, {128});
    auto step = [&](Mode mode) {
      return [&, mode] {
        auto prof = start(mode);
        profiler::Range r("step");
        Tensor loss = nn::F::cross_entropy(mlp(images), labels);
        opt.zero_grad();
        loss.backward();
        opt.step();
      };
    };
    const auto t = bench::time_interleaved({step(Mode::Off), step(Mode::Ranges), step(Mode::Ops)}, std::max(reps / 4, 5));
    row("W2 step", "no profiler (anchor)", t[0], 1, t[0]);
    row("W2 step", "ranges only (\"simple\")", t[1], 1, t[0]);
    row("W2 step", "kernels + backward (\"ops\")", t[2], 1, t[0]);
  }
  return 0;
}
