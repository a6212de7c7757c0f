// Matrix products against a float64 triple loop written here. Error bounds scale with sum_k |a_ik b_kj|, the
// natural size of a dot product's rounding error.
#include <cstring>

#include "test_util.h"

namespace kiln {
namespace {

using test::Layout;

// out = beta * c + alpha * a @ b on float64 values; a: (B, M, K), b: (B, K, N) row-major; c broadcast by caller.
struct ProductReference {
  std::vector<double> value, scale;  // scale: sum_k |a b| + |beta c|, for the tolerance
};

ProductReference bmm_reference(const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t M, int64_t K,
                        int64_t N, double alpha = 1, const std::vector<double>* c = nullptr, double beta = 0) {
  ProductReference r;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0, scale = 0;
        for (int64_t k = 0; k < K; ++k) {
          double p = a[(i * M + m) * K + k] * b[(i * K + k) * N + n];
          acc += p;
          scale += std::fabs(p);
        }
        double cv = c ? (*c)[(i * M + m) * N + n] : 0;
        r.value.push_back(alpha * acc + beta * cv);
        r.scale.push_back(std::fabs(alpha) * scale + std::fabs(beta * cv));
      }
  return r;
}

void expect_product(const Tensor& got, const ProductReference& ref, IntArrayRef shape, const std::string& what) {
  ASSERT_EQ(got.sizes(), shape.vec()) << what;
  double tol = got.dtype() == kFloat32 ? 2e-6 : got.dtype() == kFloat64 ? 1e-14 : 2 * test::tolerance(got.dtype());
  std::vector<double> v = test::values(got.cpu());
  int bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    double bound = is_floating(got.dtype()) ? tol * (ref.scale[i] + std::fabs(ref.value[i])) + 1e-30 : 0;
    if (std::fabs(v[i] - ref.value[i]) > bound && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected " << ref.value[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(Linalg, MmEveryLayoutAndDtype) {
  std::mt19937 rng(20);
  const int64_t M = 37, K = 53, N = 29;
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    for (Layout la : test::kLayouts) {
      for (Layout lb : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        Tensor a = test::random_tensor({M, K}, d, rng, la), b = test::random_tensor({K, N}, d, rng, lb);
        ProductReference ref = bmm_reference(test::values(a), test::values(b), 1, M, K, N);
        Tensor c = mm(a, b);
        EXPECT_EQ(c.dtype(), d);
        expect_product(c, ref, {M, N},
                       std::string("mm ") + dtype_name(d) + " " + test::layout_name(la) + "@" + test::layout_name(lb));
      }
    }
  }
}

TEST(Linalg, LargeProductUsesEveryPathCorrectly) {
  // Big enough for the BLAS/Eigen blocked kernels and both threads.
  std::mt19937 rng(21);
  for (Layout la : {Layout::Contiguous, Layout::Transposed}) {
    Tensor a = test::random_tensor({300, 257}, kFloat32, rng, la), b = test::random_tensor({257, 301}, kFloat32, rng);
    expect_product(matmul(a, b), bmm_reference(test::values(a), test::values(b), 1, 300, 257, 301), {300, 301},
                   std::string("matmul 300x257x301 ") + test::layout_name(la));
  }
}

// The CPU GEMM backends this build has, by set_cpu_gemm_backend's names (trying "openblas" switches to it; the
// caller puts its own choice back).
std::vector<std::string> cpu_gemm_backends() {
  std::vector<std::string> backends{"eigen"};
  try {
    set_cpu_gemm_backend("openblas");
    backends.push_back("openblas");
  } catch (const Error&) {  // a build without OpenBLAS
  }
  return backends;
}

// Each CPU GEMM backend this build has gives the float64 reference's products, in every layout, small and
// blocked sizes, with beta and alpha (the backend is switched for the test and put back).
TEST(Linalg, EveryCpuGemmBackendMatchesTheReference) {
  const CpuGemmBackend chosen = cpu_gemm_backend();
  const std::vector<std::string> backends = cpu_gemm_backends();
  std::mt19937 rng(23);
  for (const std::string& backend : backends) {
    set_cpu_gemm_backend(backend);
    EXPECT_EQ(cpu_gemm_backend().name, backend == "eigen" ? "Eigen" : "OpenBLAS");
    for (DType d : {kFloat32, kFloat64}) {
      for (int64_t size : {7, 129}) {
        for (Layout la : {Layout::Contiguous, Layout::Transposed})
          for (Layout lb : {Layout::Contiguous, Layout::Transposed}) {
            Tensor a = test::random_tensor({size, size + 3}, d, rng, la);
            Tensor b = test::random_tensor({size + 3, size - 2}, d, rng, lb);
            Tensor c = test::random_tensor({size, size - 2}, d, rng);
            const std::vector<double> cv = test::values(c);
            const ProductReference ref =
                bmm_reference(test::values(a), test::values(b), 1, size, size + 3, size - 2, 0.5, &cv, -1.5);
            expect_product(addmm(c, a, b, -1.5, 0.5), ref, {size, size - 2},
                           backend + " addmm " + dtype_name(d) + " " + std::to_string(size) + " " +
                               test::layout_name(la) + "@" + test::layout_name(lb));
          }
      }
    }
  }
  set_cpu_gemm_backend(chosen.name == "OpenBLAS" ? "openblas" : "eigen");
  EXPECT_EQ(cpu_gemm_backend().name, chosen.name);
}

// A batch of small products runs one product per worker (bmm's parallel_for); each matrix must still get the
// bits that the same product alone, outside any parallel region, gets from the same backend. With OpenBLAS
// that holds only because the workers call OpenBLAS too (its OpenMP build runs on the calling thread there).
TEST(Linalg, BatchedProductsRoundAsTheSingleProduct) {
  const CpuGemmBackend chosen = cpu_gemm_backend();
  const std::vector<std::string> backends = cpu_gemm_backends();
  const int before = get_num_threads();
  set_num_threads(2);
  std::mt19937 rng(29);
  Tensor a = test::random_tensor({8, 48, 64}, kFloat32, rng), b = test::random_tensor({8, 64, 40}, kFloat32, rng);
  for (const std::string& backend : backends) {
    set_cpu_gemm_backend(backend);
    const Tensor batched = bmm(a, b);
    for (int64_t i = 0; i < 8; ++i) {
      const std::vector<float> one = matmul(a.select(0, i), b.select(0, i)).to_vector<float>();
      const std::vector<float> in_batch = batched.select(0, i).contiguous().to_vector<float>();
      ASSERT_EQ(one.size(), in_batch.size());
      EXPECT_EQ(std::memcmp(one.data(), in_batch.data(), one.size() * sizeof(float)), 0)
          << backend << ": matrix " << i << " of the batch rounds differently from the same product alone";
    }
  }
  set_num_threads(before);
  set_cpu_gemm_backend(chosen.name == "OpenBLAS" ? "openblas" : "eigen");
}

// The choice: KILN_GEMM first, then OpenBLAS unless it runs kernels older than the CPU.
TEST(Linalg, CpuGemmBackendChoice) {
  using detail::choose_cpu_gemm_backend;
  EXPECT_EQ(choose_cpu_gemm_backend(nullptr, true, "SkylakeX", true).name, "OpenBLAS");
  EXPECT_EQ(choose_cpu_gemm_backend(nullptr, true, "Zen", true).name, "OpenBLAS");
  const CpuGemmBackend old = choose_cpu_gemm_backend(nullptr, true, "Prescott", true);
  EXPECT_EQ(old.name, "Eigen");
  EXPECT_NE(old.why.find("Prescott"), std::string::npos) << old.why;
  EXPECT_NE(old.why.find("KILN_GEMM=openblas"), std::string::npos) << old.why;
  // A CPU without FMA: OpenBLAS's old kernels are the right ones.
  EXPECT_EQ(choose_cpu_gemm_backend(nullptr, true, "Prescott", false).name, "OpenBLAS");
  EXPECT_EQ(choose_cpu_gemm_backend("openblas", true, "Prescott", true).name, "OpenBLAS");
  EXPECT_EQ(choose_cpu_gemm_backend("eigen", true, "SkylakeX", true).name, "Eigen");
  EXPECT_EQ(choose_cpu_gemm_backend(nullptr, false, "", true).name, "Eigen");
  EXPECT_THROW(choose_cpu_gemm_backend("openblas", false, "", true), Error);
  try {
    choose_cpu_gemm_backend("mkl", true, "SkylakeX", true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_GEMM='mkl'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(set_cpu_gemm_backend("mkl"), Error);
}

TEST(Linalg, MatmulShapeRules) {
  std::mt19937 rng(22);
  auto R = [&](Shape s) { return test::random_tensor(s, kFloat64, rng); };
  // 1-D @ 1-D: dot product, 0-dim result.
  Tensor v = R({5}), w = R({5});
  expect_product(matmul(v, w), bmm_reference(test::values(v), test::values(w), 1, 1, 5, 1), {}, "dot");
  // 2-D @ 1-D and 1-D @ 2-D.
  Tensor m = R({3, 5});
  expect_product(matmul(m, w), bmm_reference(test::values(m), test::values(w), 1, 3, 5, 1), {3}, "mv");
  Tensor m2 = R({5, 4});
  expect_product(matmul(v, m2), bmm_reference(test::values(v), test::values(m2), 1, 1, 5, 4), {4}, "vm");
  // Batched with broadcast batch dims: (2, 1, 3, 5) @ (4, 5, 6) -> (2, 4, 3, 6).
  Tensor a = R({2, 1, 3, 5}), b = R({4, 5, 6});
  std::vector<double> av = test::values(a), bv = test::values(b), ea, eb;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      ea.insert(ea.end(), av.begin() + i * 15, av.begin() + (i + 1) * 15);
      eb.insert(eb.end(), bv.begin() + j * 30, bv.begin() + (j + 1) * 30);
    }
  expect_product(matmul(a, b), bmm_reference(ea, eb, 8, 3, 5, 6), {2, 4, 3, 6}, "broadcast batch");
  // (B, M, K) @ (K, N) folds the batch into M.
  Tensor x = R({2, 3, 5});
  std::vector<double> xv = test::values(x), m2v = test::values(m2);
  expect_product(matmul(x, m2), bmm_reference(xv, m2v, 1, 6, 5, 4), {2, 3, 4}, "folded batch");
  // (B, M, K) @ (K) -> (B, M); (K) @ (B, K, N) -> (B, N).
  EXPECT_EQ(matmul(x, w).sizes(), (Shape{2, 3}));
  EXPECT_EQ(matmul(w, R({2, 5, 7})).sizes(), (Shape{2, 7}));
}

TEST(Linalg, EmptyDims) {
  EXPECT_EQ(test::values(mm(zeros({2, 0}), zeros({0, 3}))), std::vector<double>(6, 0.0));
  EXPECT_EQ(mm(zeros({0, 4}), zeros({4, 3})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(test::values(addmm(full({2, 3}, 2.0), zeros({2, 0}), zeros({0, 3}), 0.5)), std::vector<double>(6, 1.0));
}

TEST(Linalg, AddmmBaddbmmOuter) {
  std::mt19937 rng(23);
  for (DType d : {kFloat32, kFloat64, kBFloat16}) {
    Tensor a = test::random_tensor({4, 6}, d, rng, Layout::Transposed), b = test::random_tensor({6, 3}, d, rng);
    Tensor c = test::random_tensor({3}, d, rng);  // broadcasts over rows, like a bias
    std::vector<double> cv;
    for (int i = 0; i < 4; ++i)
      for (double x : test::values(c)) cv.push_back(x);
    expect_product(addmm(c, a, b, 0.5, 2.0), bmm_reference(test::values(a), test::values(b), 1, 4, 6, 3, 2.0, &cv, 0.5),
                   {4, 3}, std::string("addmm ") + dtype_name(d));
    // beta = 0 ignores c entirely, NaN included (as BLAS and PyTorch).
    Tensor nan_c = full({4, 3}, NAN, d);
    expect_product(addmm(nan_c, a, b, 0, 1), bmm_reference(test::values(a), test::values(b), 1, 4, 6, 3), {4, 3},
                   "addmm beta=0");
  }
  Tensor a3 = test::random_tensor({2, 3, 4}, kFloat64, rng), b3 = test::random_tensor({2, 4, 5}, kFloat64, rng, Layout::Transposed);
  Tensor c3 = test::random_tensor({2, 3, 5}, kFloat64, rng);
  std::vector<double> c3v = test::values(c3);
  expect_product(baddbmm(c3, a3, b3, -1, 3), bmm_reference(test::values(a3), test::values(b3), 2, 3, 4, 5, 3, &c3v, -1),
                 {2, 3, 5}, "baddbmm");
  Tensor u = tensor({1.0, 2.0}), v = tensor({3.0, 4.0, 5.0});
  EXPECT_EQ(test::values(outer(u, v)), (std::vector<double>{3, 4, 5, 6, 8, 10}));
}

TEST(Linalg, ErrorsNameShapes) {
  test::expect_error([] { (void)matmul(ones({3, 4}), ones({5, 6})); }, {"mm", "(3, 4)", "(5, 6)", "4 != 5"});
  test::expect_error([] { (void)bmm(ones({2, 3, 4}), ones({3, 4, 5})); }, {"bmm", "batch", "2 != 3"});
  test::expect_error([] { (void)mm(ones({3}), ones({3, 4})); }, {"mm", "2-D"});
  test::expect_error([] { (void)matmul(ones({2}, kBool), ones({2}, kBool)); }, {"bool"});
  test::expect_error([] { (void)matmul(full({}, 1.0), ones({2})); }, {"matmul", "at least 1 dim"});
}

TEST(Linalg, ThreadCountDoesNotChangeSmallBatchedResults) {
  std::mt19937 rng(24);
  Tensor a = test::random_tensor({16, 8, 9}, kFloat32, rng), b = test::random_tensor({16, 9, 7}, kFloat32, rng);
  int saved = get_num_threads();
  set_num_threads(1);
  std::vector<float> one = bmm(a, b).to_vector<float>();
  set_num_threads(2);
  std::vector<float> two = bmm(a, b).to_vector<float>();
  set_num_threads(saved);
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace kiln
