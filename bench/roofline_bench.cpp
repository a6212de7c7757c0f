// Roofline figures for kiln's CPU kernels (DESIGN.md: a kernel's time read against the machine's limits).
// Each op's attainable rate is min(peak, intensity x bandwidth), where intensity is its flops over the bytes it
// must move at least (every input read once, every output written once), and peak and bandwidth are this
// machine's, measured by this program (lab::fma_peak_gflops and lab::stream_bandwidth_gbs, kernel_lab.h)
// before and after the ops; the higher of the two measurements counts. The figure of merit is the op's achieved rate as a fraction of its roofline bound.
//
// Flop counts are the usual ones: 2MNK for a product, 2 per multiply-add of a convolution, one per element and
// step of the element-wise math (an exp counts 1, a softmax 5 per element: max, subtract, exp, sum, divide; a
// layer norm 8: mean, variance, normalize, scale, shift). The byte counts make memory-bound ops' fractions
// comparable with a copy's; their flop counts only place them on the roofline's slope.
//
//   OMP_NUM_THREADS=2 roofline_bench [reps]
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "bench_util.h"

using namespace kiln;

namespace {

struct Case {
  std::string op, shape;
  double flops, bytes;
  std::function<void()> run;
};

constexpr double kF = 4.0;  // bytes per float32

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  const int threads = get_num_threads();
  NoGradGuard no_grad;  // the kernels, not autograd's bookkeeping

  const Tensor a1k = randn({1024, 1024}), b1k = randn({1024, 1024});
  const Tensor a256 = randn({256, 256}), b256 = randn({256, 256});
  const Tensor q = randn({64, 128, 64}), k = randn({64, 64, 128});
  const int64_t n = int64_t{1} << 24;  // 64 MiB of float32
  const Tensor x = randn({n}), y = randn({n});
  Tensor z = randn({n});  // add_'s target
  const Tensor rows = randn({4096, 1024});
  const Tensor ln_x = randn({8192, 768}), ln_w = ones({768}), ln_b = zeros({768});
  const Tensor img = randn({64, 32, 14, 14}), filt = randn({64, 32, 3, 3}), fbias = zeros({64});
  const Tensor img1 = randn({64, 1, 28, 28}), filt1 = randn({32, 1, 3, 3}), fbias1 = zeros({32});
  const Tensor logits = randn({4096, 1000}), target = randint(0, 1000, {4096});

  const double dn = static_cast<double>(n);
  std::vector<Case> cases{
      {"matmul", "1024x1024 @ 1024x1024", 2.0 * 1024 * 1024 * 1024, kF * 3 * 1024 * 1024,
       [&] { bench::do_not_optimize(matmul(a1k, b1k)); }},
      {"matmul", "256x256 @ 256x256", 2.0 * 256 * 256 * 256, kF * 3 * 256 * 256,
       [&] { bench::do_not_optimize(matmul(a256, b256)); }},
      {"bmm", "64 x (128x64 @ 64x128)", 2.0 * 64 * 128 * 128 * 64, kF * 64 * (128 * 64 * 2 + 128 * 128),
       [&] { bench::do_not_optimize(matmul(q, k)); }},
      {"conv2d", "64x32x14x14, 64 3x3 filters", 2.0 * 64 * 64 * 14 * 14 * 32 * 9,
       kF * (64 * 32 * 14 * 14 + 64 * 32 * 9 + 64 * 64 * 14 * 14),
       [&] { bench::do_not_optimize(nn::F::conv2d(img, filt, fbias, 1, 1)); }},
      {"conv2d", "64x1x28x28, 32 3x3 filters", 2.0 * 64 * 32 * 28 * 28 * 9, kF * (64 * 28 * 28 + 32 * 9 + 64 * 32 * 28 * 28),
       [&] { bench::do_not_optimize(nn::F::conv2d(img1, filt1, fbias1, 1, 1)); }},
      {"add", "2^24 + 2^24", dn, kF * 3 * dn, [&] { bench::do_not_optimize(x + y); }},
      {"add_", "2^24 += 2^24", dn, kF * 3 * dn, [&] { bench::do_not_optimize(z.add_(y)); }},
      {"sum", "2^24", dn, kF * dn, [&] { bench::do_not_optimize(x.sum()); }},
      {"exp", "2^24", dn, kF * 2 * dn, [&] { bench::do_not_optimize(x.exp()); }},
      {"relu", "2^24", dn, kF * 2 * dn, [&] { bench::do_not_optimize(relu(x)); }},
      {"softmax", "4096x1024, dim 1", 5.0 * 4096 * 1024, kF * 2 * 4096 * 1024,
       [&] { bench::do_not_optimize(softmax(rows, 1)); }},
      {"layer_norm", "8192x768", 8.0 * 8192 * 768, kF * (2.0 * 8192 * 768 + 2 * 768),
       [&] { bench::do_not_optimize(nn::F::layer_norm(ln_x, {768}, ln_w, ln_b)); }},
      {"cross_entropy", "4096x1000", 4.0 * 4096 * 1000, kF * 4096 * 1000 + 8.0 * 4096,
       [&] { bench::do_not_optimize(nn::F::cross_entropy(logits, target)); }},
  };

  const double peak0 = lab::fma_peak_gflops(threads), bw0 = lab::stream_bandwidth_gbs(threads);
  std::vector<std::function<void()>> runs;
  for (const Case& c : cases) runs.push_back(c.run);
  const std::vector<double> t = bench::time_interleaved(runs, reps);
  const double peak = std::max(peak0, lab::fma_peak_gflops(threads));
  const double bw = std::max(bw0, lab::stream_bandwidth_gbs(threads));

  std::printf("threads %d; fp32 FMA peak %.1f GFLOP/s, streaming bandwidth %.1f GB/s (before the ops: %.1f, %.1f); "
              "ridge point %.2f flop/byte; medians of %d interleaved repetitions\n",
              threads, peak, bw, peak0, bw0, peak / bw, reps);
  std::printf("%-14s %-30s %9s %10s %9s %9s %10s %8s  %s\n", "op", "shape", "flop/B", "GFLOP/s", "GB/s", "ms",
              "bound", "of bound", "bound by");
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const double intensity = c.flops / c.bytes;
    const double gflops = c.flops / t[i] / 1e9, gbs = c.bytes / t[i] / 1e9;
    const bool compute_bound = intensity * bw >= peak;
    const double bound = compute_bound ? peak : intensity * bw;  // GFLOP/s
    std::printf("%-14s %-30s %9.3f %10.2f %9.2f %9.3f %10.2f %7.1f%%  %s\n", c.op.c_str(), c.shape.c_str(), intensity,
                gflops, gbs, t[i] * 1e3, bound, 100.0 * gflops / bound, compute_bound ? "compute" : "memory");
  }
  return 0;
}
