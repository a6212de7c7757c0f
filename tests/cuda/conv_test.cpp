// conv2d (cuDNN) and max pooling on the GPU, called through the dispatch table with outputs allocated (and so
// poisoned) here, against two independent answers on the same inputs: a plain float64 loop written below, and
// the CPU kernels. Inputs are fresh each run (the seed is printed on a failure).
//
// Error bounds of a convolution output, as for matrix products (linalg_test.cpp): with s = the largest
// sqrt(sum of squared terms) over the outputs and K the number of terms of one output, float32 accumulation
// errs by about u * sqrt(K) * s (u = 2^-24; 2^-53 for float64); TF32 rounds every input to 10 mantissa bits,
// about 2^-10 * s more; float16/bfloat16 may keep intermediates in their own precision (some cuDNN algorithms
// do), then round the output once. So a float32 result with TF32 off that is as far off as TF32 fails.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kiln/tensor/dispatch.h"

namespace kiln {
namespace {

constexpr DType kDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

class CudaConv : public test::CudaTest {
 protected:
  void SetUp() override {
    test::CudaTest::SetUp();
    if (IsSkipped()) return;
    seed_ = test::fresh_seed();
    rng_.seed(seed_);
  }
  unsigned seed_ = 0;
  std::mt19937 rng_;
};

struct AllowTf32 {
  explicit AllowTf32(bool on) : previous(cuda::allow_tf32()) { cuda::set_allow_tf32(on); }
  ~AllowTf32() { cuda::set_allow_tf32(previous); }
  bool previous;
};

Tensor gpu_empty(IntArrayRef shape, DType d) { return empty(shape, TensorOptions(d).device(Device::cuda())); }

// A contiguous CPU tensor of `dtype` holding `vals`, empty shapes included.
Tensor cpu_tensor(const std::vector<double>& vals, IntArrayRef shape, DType dtype) {
  if (vals.empty()) return empty(shape, dtype);
  return test::make_tensor(vals, shape, dtype);
}

// ---- the float64 references ----

struct ConvCase {
  int64_t N, C, H, W, O, KH, KW;
  Conv2dParams p;
  bool bias;
  int64_t OH() const { return (H + 2 * p.padding[0] - p.dilation[0] * (KH - 1) - 1) / p.stride[0] + 1; }
  int64_t OW() const { return (W + 2 * p.padding[1] - p.dilation[1] * (KW - 1) - 1) / p.stride[1] + 1; }
  Shape x_shape() const { return {N, C, H, W}; }
  Shape w_shape() const { return {O, C / p.groups, KH, KW}; }
  Shape y_shape() const { return {N, O, OH(), OW()}; }
  std::string str() const {
    return "x " + shape_str(x_shape()) + " w " + shape_str(w_shape()) + " stride " + std::to_string(p.stride[0]) +
           "x" + std::to_string(p.stride[1]) + " pad " + std::to_string(p.padding[0]) + "x" +
           std::to_string(p.padding[1]) + " dil " + std::to_string(p.dilation[0]) + "x" +
           std::to_string(p.dilation[1]) + " groups " + std::to_string(p.groups) + (bias ? " bias" : "");
  }
};

ConvCase conv_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t sh,
                   int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, bool bias) {
  ConvCase c{N, C, H, W, O, KH, KW, {}, bias};
  c.p.stride[0] = sh;
  c.p.stride[1] = sw;
  c.p.padding[0] = ph;
  c.p.padding[1] = pw;
  c.p.dilation[0] = dh;
  c.p.dilation[1] = dw;
  c.p.groups = groups;
  return c;
}

// What the reference gives: each output's value and the sum of its squared terms (for the error bound).
struct Reference {
  std::vector<double> value, sumsq;
  int64_t terms = 0;  // the most terms any output sums
  double scale() const {
    double s = 0;
    for (double v : sumsq) s = std::max(s, std::sqrt(v));
    return s;
  }
};

// Calls f(n, o, i, j, c, u, v, y, z) for every (output position, kernel tap) pair that reads an in-range input:
// y (N, O, OH, OW)[n, o, i, j] takes x (N, C, H, W)[n, c, y, z] * w (O, C/G, KH, KW)[o, c % (C/G), u, v].
template <typename F>
void for_each_tap(const ConvCase& k, F f) {
  const int64_t cg = k.C / k.p.groups, og = k.O / k.p.groups, OH = k.OH(), OW = k.OW();
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t o = 0; o < k.O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j)
          for (int64_t cc = 0; cc < cg; ++cc)
            for (int64_t u = 0; u < k.KH; ++u)
              for (int64_t v = 0; v < k.KW; ++v) {
                const int64_t y = i * k.p.stride[0] - k.p.padding[0] + u * k.p.dilation[0];
                const int64_t z = j * k.p.stride[1] - k.p.padding[1] + v * k.p.dilation[1];
                if (y < 0 || y >= k.H || z < 0 || z >= k.W) continue;
                f(n, o, i, j, (o / og) * cg + cc, cc, u, v, y, z);
              }
}

Reference ref_forward(const ConvCase& k, const std::vector<double>& x, const std::vector<double>& w,
                      const std::vector<double>& b) {
  const int64_t OH = k.OH(), OW = k.OW(), cg = k.C / k.p.groups;
  Reference r;
  r.value.assign(static_cast<size_t>(k.N * k.O * OH * OW), 0.0);
  r.sumsq.assign(r.value.size(), 0.0);
  r.terms = cg * k.KH * k.KW + (k.bias ? 1 : 0);
  for_each_tap(k, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t c, int64_t cc, int64_t u, int64_t v,
                      int64_t y, int64_t z) {
    const size_t at = static_cast<size_t>(((n * k.O + o) * OH + i) * OW + j);
    const double t = x[((n * k.C + c) * k.H + y) * k.W + z] * w[((o * cg + cc) * k.KH + u) * k.KW + v];
    r.value[at] += t;
    r.sumsq[at] += t * t;
  });
  if (k.bias)
    for (size_t at = 0; at < r.value.size(); ++at) {
      const double t = b[(at / static_cast<size_t>(OH * OW)) % static_cast<size_t>(k.O)];
      r.value[at] += t;
      r.sumsq[at] += t * t;
    }
  return r;
}

Reference ref_backward_input(const ConvCase& k, const std::vector<double>& gy, const std::vector<double>& w) {
  const int64_t OH = k.OH(), OW = k.OW(), cg = k.C / k.p.groups;
  Reference r;
  r.value.assign(static_cast<size_t>(k.N * k.C * k.H * k.W), 0.0);
  r.sumsq.assign(r.value.size(), 0.0);
  r.terms = (k.O / k.p.groups) * k.KH * k.KW;
  for_each_tap(k, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t c, int64_t cc, int64_t u, int64_t v,
                      int64_t y, int64_t z) {
    const size_t at = static_cast<size_t>(((n * k.C + c) * k.H + y) * k.W + z);
    const double t = gy[((n * k.O + o) * OH + i) * OW + j] * w[((o * cg + cc) * k.KH + u) * k.KW + v];
    r.value[at] += t;
    r.sumsq[at] += t * t;
  });
  return r;
}

Reference ref_backward_weight(const ConvCase& k, const std::vector<double>& gy, const std::vector<double>& x) {
  const int64_t OH = k.OH(), OW = k.OW(), cg = k.C / k.p.groups;
  Reference r;
  r.value.assign(static_cast<size_t>(k.O * cg * k.KH * k.KW), 0.0);
  r.sumsq.assign(r.value.size(), 0.0);
  r.terms = k.N * OH * OW;
  for_each_tap(k, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t c, int64_t cc, int64_t u, int64_t v,
                      int64_t y, int64_t z) {
    const size_t at = static_cast<size_t>(((o * cg + cc) * k.KH + u) * k.KW + v);
    const double t = gy[((n * k.O + o) * OH + i) * OW + j] * x[((n * k.C + c) * k.H + y) * k.W + z];
    r.value[at] += t;
    r.sumsq[at] += t * t;
  });
  return r;
}

// ---- tolerances (see the top of the file) ----

double unit_roundoff(DType d) {
  switch (d) {
    case kFloat64: return std::ldexp(1.0, -53);
    case kFloat16: return std::ldexp(1.0, -11);
    case kBFloat16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

struct Tolerance {
  double rtol, atol;
};

Tolerance conv_tolerance(DType d, bool tf32, const Reference& r) {
  const bool half = d == kFloat16 || d == kBFloat16;
  const double u_acc = d == kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double u_in = tf32 ? std::ldexp(1.0, -10) : half ? unit_roundoff(d) : 0.0;  // TF32 may truncate: 2^-10
  const double k = std::sqrt(static_cast<double>(std::max<int64_t>(r.terms, 1)));
  // The output's own rounding (16-bit), relative; the computation's, absolute, from the scale of its terms.
  // NOTE: 32 u sqrt(K) leaves room for FFT and Winograd algorithms and is still, for the big cases, ten times
  // below what TF32's input rounding costs.
  return {half ? 2 * unit_roundoff(d) : 0.0, (8.0 * u_in + 32.0 * u_acc * k) * r.scale() + 1e-300};
}

void expect_near_reference(const Tensor& gpu, const Reference& r, const Tolerance& tol, const std::string& what) {
  Tensor got = gpu.cpu();
  ASSERT_EQ(static_cast<size_t>(got.numel()), r.value.size()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = test::element(got, i), want = r.value[static_cast<size_t>(i)];
    if (std::abs(g - want) <= tol.rtol * std::abs(want) + tol.atol) continue;  // false for NaN: poison shows
    if (bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << g << " on the GPU, " << want << " in float64 (atol "
                    << tol.atol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.numel() << " elements differ";
}

std::vector<ConvCase> conv_cases() {
  return {
      //         N  C   H   W   O  KH KW sh sw ph pw dh dw  G  bias
      conv_case(1, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true),         // "same" padding, batch 1
      conv_case(8, 4, 11, 9, 6, 3, 5, 2, 1, 1, 2, 1, 1, 1, false),       // stride, odd sizes, 3x5 kernel
      conv_case(2, 6, 13, 10, 9, 3, 3, 1, 2, 2, 0, 2, 1, 3, true),       // 3 groups, dilation
      conv_case(8, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, true),         // depthwise
      conv_case(2, 4, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4, false),        // depthwise, channel multiplier 2
      conv_case(2, 16, 5, 6, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, true),       // 1x1
      conv_case(1, 2, 5, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, false),        // 1x1, stride 2
      conv_case(3, 4, 6, 7, 2, 7, 7, 1, 1, 3, 3, 1, 1, 1, true),         // kernel as big as the image
      conv_case(2, 4, 9, 9, 4, 3, 3, 3, 3, 0, 0, 2, 2, 2, false),        // stride 3, dilation 2, 2 groups
      conv_case(8, 32, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true),     // big enough for tensor-core algorithms
      conv_case(8, 64, 14, 14, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, false),    // strided, K = 576
      conv_case(2, 0, 5, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, true),         // no input channels: out = bias
  };
}

// One case, dtype and TF32 setting: the three passes against float64 and against the CPU kernels.
void check_conv(const ConvCase& k, DType d, bool tf32, std::mt19937& rng) {
  AllowTf32 guard(tf32);
  const std::string what = k.str() + " " + dtype_name(d) + (tf32 ? " TF32" : "");
  SCOPED_TRACE(what);
  auto rand = [&](const Shape& s) { return cpu_tensor(test::random_values(shape_numel(s), d, rng), s, d); };
  Tensor x = rand(k.x_shape()), w = rand(k.w_shape()), gy = rand(k.y_shape());
  Tensor b = k.bias ? rand({k.O}) : Tensor();
  // The references read the values as stored in d, so rounding the inputs costs nothing here.
  const std::vector<double> xv = test::values(x), wv = test::values(w), gyv = test::values(gy),
                            bv = k.bias ? test::values(b) : std::vector<double>{};
  Tensor xg = x.to(Device::cuda()), wg = w.to(Device::cuda()), gyg = gy.to(Device::cuda());
  Tensor bg = k.bias ? b.to(Device::cuda()) : Tensor();
  const bool cpu = has_kernel<Op::conv2d>(DeviceType::CPU) && has_kernel<Op::conv2d_backward_input>(DeviceType::CPU) &&
                   has_kernel<Op::conv2d_backward_weight>(DeviceType::CPU);

  // forward
  Tensor y = gpu_empty(k.y_shape(), d);
  get_kernel<Op::conv2d>(Device::cuda())(y, xg, wg, bg, k.p);
  Reference ry = ref_forward(k, xv, wv, bv);
  Tolerance ty = conv_tolerance(d, tf32 && d == kFloat32, ry);
  expect_near_reference(y, ry, ty, "conv2d " + what);
  if (cpu) {
    Tensor yc = empty(k.y_shape(), d);
    get_kernel<Op::conv2d>(Device::cpu())(yc, x, w, b, k.p);
    test::expect_matches_cpu(y, yc, "conv2d vs CPU " + what, 2 * ty.rtol, 2 * ty.atol);
  }

  // backward, input
  Tensor gx = gpu_empty(k.x_shape(), d);
  get_kernel<Op::conv2d_backward_input>(Device::cuda())(gx, gyg, wg, k.p);
  Reference rx = ref_backward_input(k, gyv, wv);
  Tolerance tx = conv_tolerance(d, tf32 && d == kFloat32, rx);
  expect_near_reference(gx, rx, tx, "conv2d_backward_input " + what);
  if (cpu) {
    Tensor gxc = empty(k.x_shape(), d);
    get_kernel<Op::conv2d_backward_input>(Device::cpu())(gxc, gy, w, k.p);
    test::expect_matches_cpu(gx, gxc, "conv2d_backward_input vs CPU " + what, 2 * tx.rtol, 2 * tx.atol);
  }

  // backward, weight
  Tensor gw = gpu_empty(k.w_shape(), d);
  get_kernel<Op::conv2d_backward_weight>(Device::cuda())(gw, gyg, xg, k.p);
  Reference rw = ref_backward_weight(k, gyv, xv);
  Tolerance tw = conv_tolerance(d, tf32 && d == kFloat32, rw);
  expect_near_reference(gw, rw, tw, "conv2d_backward_weight " + what);
  if (cpu) {
    Tensor gwc = empty(k.w_shape(), d);
    get_kernel<Op::conv2d_backward_weight>(Device::cpu())(gwc, gy, x, k.p);
    test::expect_matches_cpu(gw, gwc, "conv2d_backward_weight vs CPU " + what, 2 * tw.rtol, 2 * tw.atol);
  }
}

bool have_cudnn_kernels() { return has_kernel<Op::conv2d>(DeviceType::CUDA); }

TEST_F(CudaConv, Conv2dEveryGeometryAndDtypeMatchesFloat64AndCpu) {
  if (!have_cudnn_kernels()) GTEST_SKIP() << "kiln was built without cuDNN: conv2d has no CUDA kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (const ConvCase& k : conv_cases())
    for (DType d : kDTypes) check_conv(k, d, false, rng_);
}

// TF32 changes only float32; with it off the tolerance above is too tight for TF32 (the big cases' K), so the
// first test also shows that FMA math keeps cuDNN off TF32.
TEST_F(CudaConv, Conv2dFloat32WithTf32) {
  if (!have_cudnn_kernels()) GTEST_SKIP() << "kiln was built without cuDNN: conv2d has no CUDA kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (const ConvCase& k : conv_cases()) check_conv(k, kFloat32, true, rng_);
}

// The algorithm cache: the same problem again (a cache hit), and after other shapes, gives the same answer.
TEST_F(CudaConv, Conv2dRepeatedCallsAgree) {
  if (!have_cudnn_kernels()) GTEST_SKIP() << "kiln was built without cuDNN: conv2d has no CUDA kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const ConvCase k = conv_cases()[1];
  for (DType d : {kFloat32, kFloat16}) {
    check_conv(k, d, false, rng_);
    check_conv(conv_cases()[2], d, false, rng_);
    check_conv(k, d, false, rng_);
  }
}

TEST_F(CudaConv, CudnnVersionIsReportedWithTheKernels) {
  if (!have_cudnn_kernels()) {
    EXPECT_EQ(cuda::cudnn_version(), 0);
    GTEST_SKIP() << "kiln was built without cuDNN";
  }
  EXPECT_GE(cuda::cudnn_version(), 90000);
}

TEST_F(CudaConv, Conv2dRejectsWhatTheContractExcludes) {
  if (!have_cudnn_kernels()) GTEST_SKIP() << "kiln was built without cuDNN: conv2d has no CUDA kernel";
  const ConvCase k = conv_cases()[0];
  Tensor x = gpu_empty({1, 3, 8, 16}, kFloat32).slice(3, 0, std::nullopt, 2);  // (1, 3, 8, 8), not contiguous
  Tensor w = zeros(k.w_shape(), TensorOptions(kFloat32).device(Device::cuda()));
  Tensor y = gpu_empty(k.y_shape(), kFloat32);
  test::expect_error([&] { get_kernel<Op::conv2d>(Device::cuda())(y, x, w, Tensor(), k.p); },
                     {"conv2d", "contiguous"});
  Tensor wrong = gpu_empty({1, 4, 7, 7}, kFloat32);  // 7x7 cannot come from 8x8, 3x3, padding 1
  test::expect_error([&] { get_kernel<Op::conv2d>(Device::cuda())(wrong, x.contiguous(), w, Tensor(), k.p); },
                     {"conv2d", "output size 7"});
}

// ---- max pooling ----

struct PoolCase {
  int64_t N, C, H, W;
  Pool2dParams p;
  int64_t OH() const { return (H + 2 * p.padding[0] - p.dilation[0] * (p.kernel[0] - 1) - 1) / p.stride[0] + 1; }
  int64_t OW() const { return (W + 2 * p.padding[1] - p.dilation[1] * (p.kernel[1] - 1) - 1) / p.stride[1] + 1; }
  std::string str() const {
    return "x " + shape_str({N, C, H, W}) + " kernel " + std::to_string(p.kernel[0]) + "x" +
           std::to_string(p.kernel[1]) + " stride " + std::to_string(p.stride[0]) + "x" +
           std::to_string(p.stride[1]) + " pad " + std::to_string(p.padding[0]) + "x" +
           std::to_string(p.padding[1]) + " dil " + std::to_string(p.dilation[0]) + "x" +
           std::to_string(p.dilation[1]);
  }
};

PoolCase pool_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                   int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  PoolCase c{N, C, H, W, {}};
  c.p.kernel[0] = kh;
  c.p.kernel[1] = kw;
  c.p.stride[0] = sh;
  c.p.stride[1] = sw;
  c.p.padding[0] = ph;
  c.p.padding[1] = pw;
  c.p.dilation[0] = dh;
  c.p.dilation[1] = dw;
  return c;
}

// The max of every window and its first index, a NaN winning; -inf and -1 for a window wholly in the padding.
void ref_max_pool(const PoolCase& k, const std::vector<double>& x, std::vector<double>& out,
                  std::vector<int64_t>& idx) {
  const int64_t OH = k.OH(), OW = k.OW();
  out.assign(static_cast<size_t>(k.N * k.C * OH * OW), -std::numeric_limits<double>::infinity());
  idx.assign(out.size(), -1);
  for (int64_t q = 0; q < k.N * k.C; ++q)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const size_t at = static_cast<size_t>((q * OH + i) * OW + j);
        for (int64_t u = 0; u < k.p.kernel[0]; ++u)
          for (int64_t v = 0; v < k.p.kernel[1]; ++v) {
            const int64_t y = i * k.p.stride[0] - k.p.padding[0] + u * k.p.dilation[0];
            const int64_t z = j * k.p.stride[1] - k.p.padding[1] + v * k.p.dilation[1];
            if (y < 0 || y >= k.H || z < 0 || z >= k.W) continue;
            const double val = x[static_cast<size_t>((q * k.H + y) * k.W + z)];
            if (std::isnan(out[at]) && idx[at] >= 0) continue;  // a NaN already won
            if (idx[at] < 0 || val > out[at] || std::isnan(val)) {
              out[at] = val;
              idx[at] = y * k.W + z;
            }
          }
      }
}

std::vector<PoolCase> pool_cases() {
  return {
      //         N  C  H   W  kh kw sh sw ph pw dh dw
      pool_case(2, 3, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1),  // overlapping windows, padding
      pool_case(1, 2, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1),   // disjoint windows
      pool_case(8, 4, 11, 7, 3, 2, 1, 2, 1, 0, 2, 1),  // dilation, odd sizes, batch 8
      pool_case(2, 3, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1),   // stride 1: every element in up to 9 windows
      pool_case(1, 1, 3, 3, 2, 2, 1, 1, 2, 2, 1, 1),   // windows wholly in the padding
  };
}

// Small integers, so windows hold ties; some NaN and -inf.
std::vector<double> pool_input(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> val(-3, 3), special(0, 40);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) {
    const int s = special(rng);
    e = s == 0 ? std::nan("") : s == 1 ? -std::numeric_limits<double>::infinity() : val(rng);
  }
  return v;
}

std::vector<double> small_integers(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> val(-3, 3);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = val(rng);
  return v;
}

TEST_F(CudaConv, MaxPool2dMatchesFloat64AndCpu) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (const PoolCase& k : pool_cases()) {
    for (DType d : kDTypes) {
      const std::string what = k.str() + " " + dtype_name(d);
      SCOPED_TRACE(what);
      const Shape xs{k.N, k.C, k.H, k.W}, ys{k.N, k.C, k.OH(), k.OW()};
      Tensor x = cpu_tensor(pool_input(shape_numel(xs), rng_), xs, d);
      // Gradients are small integers: every sum is exact, in every dtype.
      Tensor gy = cpu_tensor(small_integers(shape_numel(ys), rng_), ys, d);
      std::vector<double> want;
      std::vector<int64_t> want_idx;
      ref_max_pool(k, test::values(x), want, want_idx);

      Tensor y = gpu_empty(ys, d), idx = gpu_empty(ys, kInt64);
      get_kernel<Op::max_pool2d>(Device::cuda())(y, idx, x.to(Device::cuda()), k.p);
      test::expect_tensor_near(y, want, ys, 0, 0, "max_pool2d " + what);  // the max is one of the inputs: exact
      EXPECT_EQ(idx.cpu().to_vector<int64_t>(), want_idx) << "max_pool2d indices " << what;

      // backward, from the GPU's indices; the reference adds grad_out at the reference's indices
      std::vector<double> want_gx(static_cast<size_t>(shape_numel(xs)), 0.0);
      const std::vector<double> gyv = test::values(gy);
      const int64_t HW = k.H * k.W, OHW = k.OH() * k.OW();
      for (size_t i = 0; i < gyv.size(); ++i)
        if (want_idx[i] >= 0) want_gx[(i / OHW) * HW + want_idx[i]] += gyv[i];
      Tensor gx = gpu_empty(xs, d);
      get_kernel<Op::max_pool2d_backward>(Device::cuda())(gx, gy.to(Device::cuda()), idx, k.p);
      test::expect_tensor_near(gx, want_gx, xs, 2 * unit_roundoff(d), 0, "max_pool2d_backward " + what);

      if (has_kernel<Op::max_pool2d>(DeviceType::CPU) && has_kernel<Op::max_pool2d_backward>(DeviceType::CPU)) {
        Tensor yc = empty(ys, d), idxc = empty(ys, kInt64), gxc = empty(xs, d);
        get_kernel<Op::max_pool2d>(Device::cpu())(yc, idxc, x, k.p);
        test::expect_matches_cpu(y, yc, "max_pool2d vs CPU " + what, 0, 0);
        EXPECT_EQ(idx.cpu().to_vector<int64_t>(), idxc.to_vector<int64_t>()) << "max_pool2d indices vs CPU " << what;
        get_kernel<Op::max_pool2d_backward>(Device::cpu())(gxc, gy, idxc, k.p);
        test::expect_matches_cpu(gx, gxc, "max_pool2d_backward vs CPU " + what, 2 * unit_roundoff(d), 0);
      }
    }
  }
}

// Continuous values and a big overlapping case, where float atomics add in any order: within rounding of float64.
TEST_F(CudaConv, MaxPool2dBackwardSumsOverlappingWindows) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const PoolCase k = pool_case(4, 8, 33, 31, 5, 5, 1, 1, 2, 2, 1, 1);  // up to 25 windows per element
  for (DType d : kDTypes) {
    const Shape xs{k.N, k.C, k.H, k.W}, ys{k.N, k.C, k.OH(), k.OW()};
    // Few distinct values: many windows share a max, so some elements receive many gradients.
    std::vector<double> xv = pool_input(shape_numel(xs), rng_);
    for (double& v : xv)
      if (std::isnan(v)) v = 0;
    Tensor x = cpu_tensor(xv, xs, d);
    Tensor gy = cpu_tensor(test::random_values(shape_numel(ys), d, rng_), ys, d);
    std::vector<double> want;
    std::vector<int64_t> want_idx;
    ref_max_pool(k, test::values(x), want, want_idx);
    Tensor y = gpu_empty(ys, d), idx = gpu_empty(ys, kInt64), gx = gpu_empty(xs, d);
    get_kernel<Op::max_pool2d>(Device::cuda())(y, idx, x.to(Device::cuda()), k.p);
    get_kernel<Op::max_pool2d_backward>(Device::cuda())(gx, gy.to(Device::cuda()), idx, k.p);
    std::vector<double> want_gx(static_cast<size_t>(shape_numel(xs)), 0.0), abs_sum(want_gx.size(), 0.0);
    const std::vector<double> gyv = test::values(gy);
    const int64_t HW = k.H * k.W, OHW = k.OH() * k.OW();
    for (size_t i = 0; i < gyv.size(); ++i) {
      const size_t at = static_cast<size_t>((i / OHW) * HW + want_idx[i]);
      want_gx[at] += gyv[i];
      abs_sum[at] += std::abs(gyv[i]);
    }
    double worst = 0;
    for (double s : abs_sum) worst = std::max(worst, s);
    // float32 sums (float64 for float64) of up to 25 terms, then one rounding to d.
    const double acc = d == kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
    test::expect_tensor_near(gx, want_gx, xs, 2 * unit_roundoff(d), 25 * acc * worst + 1e-300,
                             std::string("max_pool2d_backward overlapping ") + dtype_name(d));
  }
}

// Adaptive average pooling: the CUDA kernels against the CPU's on the same inputs, in the (B, D, H, W) form
// both take; down, up and mixed along each dim. Outputs start as NaN, so an element left unwritten shows.
TEST_F(CudaConv, AdaptiveAvgPoolMatchesTheCpu) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::pair<Shape, Shape> cases[] = {{{6, 1, 64, 64}, {6, 1, 7, 7}},
                                           {{4, 5, 6, 7}, {4, 2, 4, 3}},
                                           {{4, 3, 4, 2}, {4, 5, 2, 3}},
                                           {{3, 1, 1, 5}, {3, 1, 1, 8}},
                                           {{2, 4, 6, 8}, {2, 4, 6, 8}}};
  for (const auto& [xs, ys] : cases) {
    for (DType d : kDTypes) {
      const std::string what = shape_str(xs) + " to " + shape_str(ys) + " " + dtype_name(d);
      const Tensor x = cpu_tensor(test::random_values(shape_numel(xs), d, rng_), xs, d);
      const Tensor g = cpu_tensor(test::random_values(shape_numel(ys), d, rng_), ys, d);
      Tensor y = full(ys, std::nan(""), TensorOptions(d).device(Device::cuda())), yc = empty(ys, d);
      get_kernel<Op::adaptive_avg_pool>(Device::cuda())(y, x.to(Device::cuda()));
      get_kernel<Op::adaptive_avg_pool>(Device::cpu())(yc, x);
      test::expect_matches_cpu(y, yc, "adaptive_avg_pool " + what);
      Tensor gx = full(xs, std::nan(""), TensorOptions(d).device(Device::cuda())), gxc = empty(xs, d);
      get_kernel<Op::adaptive_avg_pool_backward>(Device::cuda())(gx, g.to(Device::cuda()));
      get_kernel<Op::adaptive_avg_pool_backward>(Device::cpu())(gxc, g);
      test::expect_matches_cpu(gx, gxc, "adaptive_avg_pool_backward " + what);
    }
  }
}

// Adaptive max pooling's argmax: the CUDA kernel's indices equal the CPU's (both scan each bin in one order, so
// ties and NaNs resolve alike). Indices start at -1, so one left unwritten shows.
TEST_F(CudaConv, AdaptiveMaxPoolMatchesTheCpu) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::pair<Shape, Shape> cases[] = {{{6, 1, 64, 64}, {6, 1, 7, 7}}, {{4, 5, 6, 7}, {4, 2, 4, 3}},
                                           {{4, 3, 4, 2}, {4, 5, 2, 3}}, {{3, 1, 1, 5}, {3, 1, 1, 8}}};
  for (const auto& [xs, ys] : cases) {
    for (DType d : kDTypes) {
      const std::string what = shape_str(xs) + " to " + shape_str(ys) + " " + dtype_name(d);
      const Tensor x = cpu_tensor(test::random_values(shape_numel(xs), d, rng_), xs, d);
      Tensor idx = full(ys, -1, TensorOptions(kInt64).device(Device::cuda())), idxc = empty(ys, kInt64);
      get_kernel<Op::adaptive_max_pool>(Device::cuda())(idx, x.to(Device::cuda()));
      get_kernel<Op::adaptive_max_pool>(Device::cpu())(idxc, x);
      EXPECT_EQ(idx.cpu().to_vector<int64_t>(), idxc.to_vector<int64_t>()) << "adaptive_max_pool " << what;
    }
  }
}

// Padding by copies: the CUDA kernels against the CPU's in the (B, D, H, W) form both take, every mode, pads
// positive, cropping and mixed. Outputs start as NaN, so an element left unwritten shows.
TEST_F(CudaConv, PadMatchesTheCpu) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const Shape xs = {3, 4, 5, 6};
  const int64_t pads[][6] = {{1, 2, 0, 3, 2, 1}, {3, 0, 2, 2, 0, 0}, {-1, 2, 1, -2, 0, 1}};
  for (PadMode mode : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    for (const auto& q : pads) {
      if (mode == PadMode::Circular && *std::min_element(q, q + 6) < 0) continue;
      PadParams p;
      p.mode = mode;
      p.before[0] = q[0], p.before[1] = q[2], p.before[2] = q[4];
      const Shape ys = {3, 4 + q[0] + q[1], 5 + q[2] + q[3], 6 + q[4] + q[5]};
      for (DType d : kDTypes) {
        const std::string what = "mode " + std::to_string(static_cast<int>(mode)) + " to " + shape_str(ys) + " " +
                                 dtype_name(d);
        const Tensor x = cpu_tensor(test::random_values(shape_numel(xs), d, rng_), xs, d);
        const Tensor g = cpu_tensor(test::random_values(shape_numel(ys), d, rng_), ys, d);
        Tensor y = full(ys, std::nan(""), TensorOptions(d).device(Device::cuda())), yc = empty(ys, d);
        get_kernel<Op::pad>(Device::cuda())(y, x.to(Device::cuda()), p);
        get_kernel<Op::pad>(Device::cpu())(yc, x, p);
        test::expect_matches_cpu(y, yc, "pad " + what);
        Tensor gx = full(xs, std::nan(""), TensorOptions(d).device(Device::cuda())), gxc = empty(xs, d);
        get_kernel<Op::pad_backward>(Device::cuda())(gx, g.to(Device::cuda()), p);
        get_kernel<Op::pad_backward>(Device::cpu())(gxc, g, p);
        test::expect_matches_cpu(gx, gxc, "pad_backward " + what);
      }
    }
  }
}

}  // namespace
}  // namespace kiln
