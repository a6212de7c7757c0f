// A kernel of your own for one of kiln's ops: written, checked against the kernel it replaces, timed beside it
// with roofline figures, then used by the rest of kiln (here a layer's forward and backward) with no framework
// file edited. See kiln/tensor/kernel_lab.h.
//
// The kernel: SiLU, x * sigmoid(x) = x / (1 + e^-x), over contiguous float32 tensors, as one loop the compiler
// vectorizes (built with -fno-trapping-math, as kiln's kernels are): e^-x from a polynomial (std::exp is a
// library call that stops the loop from vectorizing). Other
// dtypes and layouts go to the kernel it replaced. The check says whether the polynomial is accurate enough;
// the timing, whether the variant is worth having: kiln's own silu already evaluates e^x with a vectorized
// polynomial (kiln/tensor/ops/fast_math.h), and this plain loop runs at about half its speed here (2 cores, a
// 4M-element tensor), a third of the way to the roofline where kiln's gets three quarters.
//
//   ./build/examples/custom_kernel [elements]
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

using namespace kiln;

namespace {

KernelFn<Op::silu> builtin_silu = nullptr;  // the kernel in the table before ours

// e^v for v in [-87, 88] (clamped there) as 2^n p(r): n = round(v / ln 2), r = v - n ln 2 with |r| <= ln 2 / 2,
// p the degree-6 Taylor polynomial of e^r (relative error below 2e-7 there), 2^n made from its exponent bits.
inline float exp_poly(float v) {
  v = std::min(std::max(v, -87.0f), 88.0f);
  const float n = std::floor(v * 1.44269504f + 0.5f);
  const float r = (v - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 in two parts: r keeps its low bits
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// The signature of a unary op's kernel (ops/op_list.h): the output, already allocated, then the input.
void my_silu(const Tensor& out, const Tensor& x) {
  if (x.dtype() != kFloat32 || !x.is_contiguous() || !out.is_contiguous()) return builtin_silu(out, x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  parallel_for(0, x.numel(), int64_t{1} << 14, [in, o](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) o[i] = in[i] / (1.0f + exp_poly(-in[i]));
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{1} << 22;
  builtin_silu = reinterpret_cast<KernelFn<Op::silu>>(detail::kernel_slot(Op::silu, DeviceType::CPU));

  // 1. Check: the work reaches the op in forward; its gradient comes along to show that backward agrees too.
  manual_seed(0);
  const Tensor x = randn({n});
  auto work = [&] {
    Tensor leaf = x.detach().requires_grad_();
    Tensor y = silu(leaf);
    return std::vector<Tensor>{y, autograd::grad({y.sum()}, {leaf})[0]};
  };
  const lab::Check check = lab::check_variant<Op::silu>(DeviceType::CPU, my_silu, work);
  std::cout << check.report;
  if (!check.ok) return 1;

  // 2. Time it: forward only, against the built-in kernel, with the roofline bound of one read and one write
  //    per element (4 flops an element: negate, exp, add, divide, counting exp as one).
  const lab::Peaks peaks = lab::measure_cpu_peaks(0, size_t{64} << 20);
  std::printf("machine: %.1f GFLOP/s fp32 FMA peak, %.1f GB/s streaming bandwidth\n", peaks.gflops, peaks.gbps);
  const lab::Timing timing = lab::time_variant<Op::silu>(
      DeviceType::CPU, my_silu, [&] { return std::vector<Tensor>{silu(x)}; },
      {.reps = 15, .flops = 4.0 * n, .bytes = 8.0 * n, .peaks = peaks});
  std::cout << timing.report;

  // 3. Use it: installed, every silu in kiln runs it, here inside a small network's training step.
  lab::ScopedKernel<Op::silu> installed(DeviceType::CPU, my_silu);
  nn::Sequential net(nn::Linear(16, 64), nn::SiLU(), nn::Linear(64, 1));
  const Tensor loss = net->forward(randn({32, 16})).pow(2).mean();
  loss.backward();
  std::printf("a training step with the new kernel: loss %.4f\n", loss.item<double>());
  return 0;
}
