// Matrix products on the GPU (cuBLAS, and the tiled kernel for integers and K = 0) against the CPU's answer in
// float64 on the same inputs, cast to the tested dtype. Inputs are fresh each run (the seed is printed on a
// failure). Operands take every layout the kernel treats differently: contiguous, transposed (read in place
// by cuBLAS), strided and offset views (copied first), broadcast batches (batch stride 0).
//
// Error bounds: with s = max over the output of sqrt(sum_k (a_ik b_kj)^2), the natural size of a dot
// product's rounding error, a float32 accumulation errs by about u * sqrt(K) * s (u = 2^-24); TF32 adds the
// rounding of every input to 10 mantissa bits, about 2^-10 * s; float16/bfloat16 add one rounding of the
// output (cuda_rtol), as the reference is rounded to the dtype too.
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "cuda/cuda_test_util.h"
#ifdef KILN_WITH_CUDA
#include "kiln/tensor/cuda/stream.h"
#endif

namespace kiln {
namespace {

using test::Layout;

class CudaLinalg : public test::CudaTest {
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

// One operand on both devices: the same values in the same memory layout (the views are taken on each
// device from one contiguous base, so the GPU kernel sees the strides the layout names).
struct Operand {
  Tensor cpu, gpu;
  Tensor cpu_base;                            // the whole storage, for checking what lies between elements
  std::function<Tensor(const Tensor&)> view;  // base -> operand
};

// padded: rows of the last dim followed by 3 unused elements (a row stride cuBLAS can write in place).
Operand make_operand(IntArrayRef shape, DType dtype, Layout layout, std::mt19937& rng, bool padded = false) {
  Shape s = shape.vec();
  Shape base_shape = s;
  std::function<Tensor(const Tensor&)> view = [](const Tensor& t) { return t; };
  if (padded) {
    base_shape.back() += 3;
    int64_t n = s.back();
    view = [n](const Tensor& t) { return t.narrow(-1, 0, n); };
  } else if (layout == Layout::Transposed) {
    std::swap(base_shape[s.size() - 1], base_shape[s.size() - 2]);
    view = [](const Tensor& t) { return t.transpose(-1, -2); };
  } else if (layout == Layout::Strided) {
    base_shape.back() *= 2;
    view = [](const Tensor& t) { return t.slice(-1, 0, std::nullopt, 2); };
  } else if (layout == Layout::Offset) {
    int64_t n = shape_numel(s);
    base_shape = {n + 5};
    view = [n, s](const Tensor& t) { return t.narrow(0, 5, n).view(s); };
  }
  Tensor base = test::make_tensor(test::random_values(shape_numel(base_shape), dtype, rng), base_shape, dtype);
  return {view(base), view(base.to(Device::cuda())), base, view};
}

// max over the output of sqrt(sum_k (a_ik b_kj)^2), from CPU float64 values of a (..., M, K) and b (..., K, N).
double product_scale(const Tensor& a, const Tensor& b) {
  Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  double worst = 0;
  for (double v : test::values(matmul(a64 * a64, b64 * b64))) worst = std::max(worst, v);
  return std::sqrt(worst);
}

// The absolute error allowed for a product of inner size K with scale s (see the top of the file).
double product_atol(DType dtype, int64_t K, double s, bool tf32 = false) {
  const double u_acc = dtype == kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double u_in = tf32 ? std::ldexp(1.0, -10) : 0.0;  // NOTE: 2^-10, not 2^-11: TF32 may truncate
  return (tf32 ? 6.0 : 4.0) * (u_in + u_acc * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1)))) * s + 1e-300;
}

std::string describe(const char* op, DType d, Shape mkn, Layout la, Layout lb) {
  return std::string(op) + " " + dtype_name(d) + " " + shape_str(mkn) + " " + test::layout_name(la) + "@" +
         test::layout_name(lb);
}

constexpr DType kFloatDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

TEST_F(CudaLinalg, MmEveryFloatDtypeShapeAndLayout) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // (M, K, N); the last two are bigger than any one cuBLAS tile and not multiples of one.
  const Shape shapes[] = {{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {257, 129, 513}, {257, 513, 129}};
  for (DType d : kFloatDTypes) {
    for (const Shape& mkn : shapes) {
      for (Layout la : test::kLayouts) {
        for (Layout lb : test::kLayouts) {
          Operand a = make_operand({mkn[0], mkn[1]}, d, la, rng_), b = make_operand({mkn[1], mkn[2]}, d, lb, rng_);
          Tensor got = mm(a.gpu, b.gpu);
          Tensor want = mm(a.cpu.to(kFloat64), b.cpu.to(kFloat64)).to(d);
          test::expect_matches_cpu(got, want, describe("mm", d, mkn, la, lb), test::cuda_rtol(d),
                                   product_atol(d, mkn[1], product_scale(a.cpu, b.cpu)));
        }
      }
    }
  }
}

TEST_F(CudaLinalg, BmmAndMatmulWithBroadcastBatches) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType d : kFloatDTypes) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
      // bmm with a batch of 5.
      Operand a = make_operand({5, 33, 17}, d, l, rng_), b = make_operand({5, 17, 21}, d, Layout::Transposed, rng_);
      test::expect_matches_cpu(bmm(a.gpu, b.gpu), bmm(a.cpu.to(kFloat64), b.cpu.to(kFloat64)).to(d),
                               describe("bmm", d, {33, 17, 21}, l, Layout::Transposed), test::cuda_rtol(d),
                               product_atol(d, 17, product_scale(a.cpu, b.cpu)));
      // One matrix for the whole batch: batch stride 0 reaches the kernel.
      Operand one = make_operand({1, 33, 17}, d, l, rng_);
      Tensor ga = one.gpu.expand({5, 33, 17}), ca = one.cpu.expand({5, 33, 17});
      test::expect_matches_cpu(bmm(ga, b.gpu), bmm(ca.to(kFloat64), b.cpu.to(kFloat64)).to(d),
                               describe("bmm expanded", d, {33, 17, 21}, l, Layout::Transposed), test::cuda_rtol(d),
                               product_atol(d, 17, product_scale(ca, b.cpu)));
      // matmul broadcasting (2, 1, M, K) @ (3, K, N) -> (2, 3, M, N), and (B, M, K) @ (K, N).
      Operand x = make_operand({2, 1, 9, 40}, d, l, rng_), y = make_operand({3, 40, 11}, d, Layout::Contiguous, rng_);
      Tensor got = matmul(x.gpu, y.gpu);
      EXPECT_EQ(got.sizes(), (Shape{2, 3, 9, 11}));
      test::expect_matches_cpu(got, matmul(x.cpu.to(kFloat64), y.cpu.to(kFloat64)).to(d),
                               describe("matmul broadcast", d, {9, 40, 11}, l, Layout::Contiguous), test::cuda_rtol(d),
                               product_atol(d, 40, product_scale(x.cpu, y.cpu)));
      Operand w = make_operand({40, 11}, d, Layout::Transposed, rng_);
      test::expect_matches_cpu(matmul(x.gpu, w.gpu), matmul(x.cpu.to(kFloat64), w.cpu.to(kFloat64)).to(d),
                               describe("matmul folded", d, {9, 40, 11}, l, Layout::Transposed), test::cuda_rtol(d),
                               product_atol(d, 40, product_scale(x.cpu, w.cpu)));
    }
  }
}

TEST_F(CudaLinalg, AddmmBaddbmmAndLinearApplyBetaAndAlpha) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType d : kFloatDTypes) {
    const int64_t M = 31, K = 70, N = 45;
    Operand a = make_operand({M, K}, d, Layout::Contiguous, rng_),
            b = make_operand({K, N}, d, Layout::Transposed, rng_);
    Operand c = make_operand({M, N}, d, Layout::Strided, rng_), bias = make_operand({N}, d, Layout::Contiguous, rng_);
    const double atol = product_atol(d, K, 2.5 * product_scale(a.cpu, b.cpu) + 3);
    for (double beta : {0.0, 1.0, -0.5}) {
      for (double alpha : {1.0, 2.5}) {
        std::string what = describe("addmm", d, {M, K, N}, Layout::Contiguous, Layout::Transposed) + " beta " +
                           std::to_string(beta) + " alpha " + std::to_string(alpha);
        Tensor a64 = a.cpu.to(kFloat64), b64 = b.cpu.to(kFloat64);
        test::expect_matches_cpu(addmm(c.gpu, a.gpu, b.gpu, beta, alpha),
                                 addmm(c.cpu.to(kFloat64), a64, b64, beta, alpha).to(d), what, test::cuda_rtol(d),
                                 atol);
        test::expect_matches_cpu(addmm(bias.gpu, a.gpu, b.gpu, beta, alpha),
                                 addmm(bias.cpu.to(kFloat64), a64, b64, beta, alpha).to(d), what + " (bias)",
                                 test::cuda_rtol(d), atol);
      }
    }
    // beta = 0 ignores c entirely, NaN included.
    Tensor nan_c = full({M, N}, std::nan(""), TensorOptions(d).device(Device::cuda()));
    test::expect_matches_cpu(addmm(nan_c, a.gpu, b.gpu, 0.0, 1.0), mm(a.cpu.to(kFloat64), b.cpu.to(kFloat64)).to(d),
                             std::string("addmm beta 0 over NaN ") + dtype_name(d), test::cuda_rtol(d), atol);
    // baddbmm with c broadcast over the batch.
    Operand ba = make_operand({4, M, K}, d, Layout::Transposed, rng_),
            bb = make_operand({4, K, N}, d, Layout::Offset, rng_);
    test::expect_matches_cpu(baddbmm(c.gpu, ba.gpu, bb.gpu, 0.5, -1.5),
                             baddbmm(c.cpu.to(kFloat64), ba.cpu.to(kFloat64), bb.cpu.to(kFloat64), 0.5, -1.5).to(d),
                             std::string("baddbmm ") + dtype_name(d), test::cuda_rtol(d),
                             product_atol(d, K, 1.5 * product_scale(ba.cpu, bb.cpu) + 3));
    // linear: x (M, K) @ weight (N, K)^T + bias, which folds the bias into the GEMM's beta.
    Operand weight = make_operand({N, K}, d, Layout::Contiguous, rng_);
    test::expect_matches_cpu(
        nn::functional::linear(a.gpu, weight.gpu, bias.gpu),
        nn::functional::linear(a.cpu.to(kFloat64), weight.cpu.to(kFloat64), bias.cpu.to(kFloat64)).to(d),
        std::string("linear ") + dtype_name(d), test::cuda_rtol(d), atol);
  }
}

// The kernel itself, with what the frontends never hand it: an output that is a view (padded rows written in
// place; transposed, strided or offset through a temporary), its old values scaled by beta, and K = 0. Memory
// between the view's elements must stay as it was.
TEST_F(CudaLinalg, KernelWritesOutputViewsInPlace) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto kernel = get_kernel<Op::bmm>(Device::cuda());
  const int64_t B = 3, M = 19, K = 23, N = 14;
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32}) {
    // Floats are checked against float64; integers against the CPU kernel in their own type (which, as the
    // GPU's, casts beta and alpha to it).
    const DType ref_type = is_floating(d) ? kFloat64 : d;
    for (int lo = 0; lo < 4; ++lo) {
      const bool padded = lo == 3;
      const Layout layout = padded ? Layout::Contiguous : test::kLayouts[lo + 1];
      const std::string layout_name = padded ? "padded" : test::layout_name(layout);
      for (double beta : {0.0, 0.75}) {
        for (int64_t k : {K, int64_t{0}}) {
          Operand a = make_operand({B, M, k}, d, Layout::Contiguous, rng_);
          Operand b = make_operand({B, k, N}, d, Layout::Transposed, rng_);
          Operand out = make_operand({B, M, N}, d, layout, rng_, padded);
          Tensor want = empty(out.cpu.sizes(), ref_type);
          want.copy_(out.cpu);
          get_kernel<Op::bmm>(kCPU)(want, a.cpu.to(ref_type), b.cpu.to(ref_type), beta, 2.0);
          kernel(out.gpu, a.gpu, b.gpu, beta, 2.0);
          std::string what = describe("bmm kernel", d, {M, k, N}, Layout::Contiguous, Layout::Transposed) + " out " +
                             layout_name + " beta " + std::to_string(beta);
          test::expect_matches_cpu(out.gpu, want.to(d), what, test::cuda_rtol(d),
                                   is_floating(d) ? product_atol(d, k, 2 * product_scale(a.cpu, b.cpu) + 3) : 0.0);
          // The whole GPU storage against the storage before, with the view's elements replaced by the GPU's.
          Tensor expect_base = out.cpu_base.clone();
          out.view(expect_base).copy_(out.gpu.cpu());
          Tensor gpu_base =
              Tensor(std::make_shared<TensorImpl>(out.gpu.storage(), d, expect_base.sizes(), expect_base.strides(), 0));
          EXPECT_EQ(test::values(gpu_base.cpu()), test::values(expect_base)) << what << ": memory outside the view";
        }
      }
    }
  }
}

TEST_F(CudaLinalg, EmptyProducts) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64}) {
    // K = 0: an empty sum, zero (over poisoned memory), or beta * c.
    Operand a = make_operand({6, 0}, d, Layout::Contiguous, rng_),
            b = make_operand({0, 9}, d, Layout::Contiguous, rng_);
    Operand c = make_operand({6, 9}, d, Layout::Transposed, rng_);
    test::expect_matches_cpu(mm(a.gpu, b.gpu), mm(a.cpu, b.cpu), std::string("mm K=0 ") + dtype_name(d));
    test::expect_matches_cpu(addmm(c.gpu, a.gpu, b.gpu, 3, 2), addmm(c.cpu, a.cpu, b.cpu, 3, 2),
                             std::string("addmm K=0 ") + dtype_name(d));
    // Batch 0 and M = 0, N = 0: empty results of the right shape.
    Operand e0 = make_operand({0, 4, 5}, d, Layout::Contiguous, rng_),
            e1 = make_operand({0, 5, 3}, d, Layout::Contiguous, rng_);
    EXPECT_EQ(bmm(e0.gpu, e1.gpu).sizes(), (Shape{0, 4, 3}));
    Operand m0 = make_operand({0, 5}, d, Layout::Contiguous, rng_),
            n0 = make_operand({5, 0}, d, Layout::Contiguous, rng_);
    Operand k5 = make_operand({5, 7}, d, Layout::Contiguous, rng_),
            r5 = make_operand({4, 5}, d, Layout::Contiguous, rng_);
    EXPECT_EQ(mm(m0.gpu, k5.gpu).sizes(), (Shape{0, 7}));
    EXPECT_EQ(mm(r5.gpu, n0.gpu).sizes(), (Shape{4, 0}));
  }
}

TEST_F(CudaLinalg, IntegerProductsMatchTheCpuExactly) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType d : {kUInt8, kInt32, kInt64}) {
    for (Layout la : test::kLayouts) {
      Operand a = make_operand({2, 37, 41}, d, la, rng_), b = make_operand({2, 41, 18}, d, Layout::Transposed, rng_);
      Operand c = make_operand({37, 18}, d, Layout::Contiguous, rng_);
      std::string what = describe("bmm", d, {37, 41, 18}, la, Layout::Transposed);
      test::expect_matches_cpu(bmm(a.gpu, b.gpu), bmm(a.cpu, b.cpu), what);
      test::expect_matches_cpu(baddbmm(c.gpu, a.gpu, b.gpu, 2, 3), baddbmm(c.cpu, a.cpu, b.cpu, 2, 3),
                               "baddbmm " + what);
    }
  }
}

TEST_F(CudaLinalg, BatchesBeyondOneGridDimension) {
  // More matrices than one cuBLAS call or one grid's z dimension takes (65535).
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType d : {kFloat32, kInt32}) {
    Operand a = make_operand({70001, 2, 3}, d, Layout::Contiguous, rng_),
            b = make_operand({70001, 3, 2}, d, Layout::Transposed, rng_);
    test::expect_matches_cpu(bmm(a.gpu, b.gpu), bmm(a.cpu.to(kFloat64), b.cpu.to(kFloat64)).to(d),
                             std::string("bmm batch 70001 ") + dtype_name(d), test::cuda_rtol(d),
                             is_floating(d) ? product_atol(d, 3, product_scale(a.cpu, b.cpu)) : 0.0);
  }
}

// These name what only a CUDA build defines (streams, the TF32 switch, cuBLAS); without CUDA they would
// skip anyway.
#ifdef KILN_WITH_CUDA

// Turns TF32 on for a scope and restores the previous setting, also when an assertion returns early.
struct AllowTf32 {
  explicit AllowTf32(bool on) : previous(cuda::allow_tf32()) { cuda::set_allow_tf32(on); }
  ~AllowTf32() { cuda::set_allow_tf32(previous); }
  bool previous;
};

TEST_F(CudaLinalg, Tf32IsOffByDefaultAndWithinItsToleranceWhenOn) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  EXPECT_FALSE(cuda::allow_tf32());
  AllowTf32 tf32(true);
  for (Layout la : {Layout::Contiguous, Layout::Transposed}) {
    Operand a = make_operand({3, 257, 513}, kFloat32, la, rng_), b = make_operand({3, 513, 129}, kFloat32, la, rng_);
    Tensor got = bmm(a.gpu, b.gpu);
    Tensor want = bmm(a.cpu.to(kFloat64), b.cpu.to(kFloat64)).to(kFloat32);
    test::expect_matches_cpu(got, want, describe("bmm tf32", kFloat32, {257, 513, 129}, la, la),
                             test::cuda_rtol(kFloat32),
                             product_atol(kFloat32, 513, product_scale(a.cpu, b.cpu), /*tf32=*/true));
  }
}

TEST_F(CudaLinalg, SideStreamsAndThreadsGetTheirOwnHandles) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  Operand a = make_operand({128, 96}, kFloat32, Layout::Contiguous, rng_),
          b = make_operand({96, 80}, kFloat32, Layout::Transposed, rng_);
  Tensor want = mm(a.cpu.to(kFloat64), b.cpu.to(kFloat64)).to(kFloat32);
  const double atol = product_atol(kFloat32, 96, product_scale(a.cpu, b.cpu));
  Tensor on_side;
  {
    cuda::Stream side = cuda::Stream::create(0);
    cuda::StreamGuard guard(side);
    on_side = mm(a.gpu, b.gpu);
    side.synchronize();
  }
  test::expect_matches_cpu(on_side, want, "mm on a side stream", test::cuda_rtol(kFloat32), atol);
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] {
      results[i] = mm(a.gpu, b.gpu);
      cuda::synchronize();
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < results.size(); ++i)
    test::expect_matches_cpu(results[i], want, "mm on thread " + std::to_string(i), test::cuda_rtol(kFloat32), atol);
}

TEST_F(CudaLinalg, CublasVersionIsReported) {
  int v = cuda::cublas_version();
  EXPECT_GE(v / 10000, 11) << v;  // kiln needs cuBLAS 11 or later (cublasGemmStridedBatchedEx's compute types)
}

// The factorizations have no CUDA kernels yet: a CUDA tensor goes through the CPU's and comes back. The results
// must be on the GPU, equal the CPU's on the same input, and carry gradients back to the GPU input.
TEST_F(CudaLinalg, FactorizationsRunThroughTheHostAndComeBack) {
  std::normal_distribution<double> normal;
  std::vector<double> v(2 * 4 * 4);
  for (double& x : v) x = normal(rng_);
  const Tensor x = tensor(v, {2, 4, 4}, kFloat64);
  const Tensor a = (matmul(x, x.mT()) + 4.0 * eye(4, 4, kFloat64)).contiguous();
  const Tensor b = x.narrow(-1, 0, 2).contiguous();
  const Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
  const std::string seed = " (seed " + std::to_string(seed_) + ")";
  test::expect_matches_cpu(linalg::cholesky(ga), linalg::cholesky(a), "cholesky" + seed);
  test::expect_matches_cpu(linalg::solve(ga, gb), linalg::solve(a, b), "solve" + seed);
  test::expect_matches_cpu(linalg::det(ga), linalg::det(a), "det" + seed);
  test::expect_matches_cpu(linalg::eigvalsh(ga), linalg::eigvalsh(a), "eigvalsh" + seed);
  test::expect_matches_cpu(linalg::svdvals(ga), linalg::svdvals(a), "svdvals" + seed);
  test::expect_matches_cpu(linalg::qr(ga).R, linalg::qr(a).R, "qr" + seed);
  Tensor leaf = ga.clone().requires_grad_();
  linalg::slogdet(leaf).logabsdet.sum().backward();
  ASSERT_TRUE(leaf.grad().defined());
  test::expect_matches_cpu(leaf.grad(), linalg::inv(a).mT().contiguous(), "slogdet gradient" + seed, 1e-10);
}

#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln
