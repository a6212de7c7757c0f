// The CPU's GEMM (gemm_cpu.h) and the choice of its backend (cpu_gemm_backend, linalg.h).
#include "kiln/tensor/ops/gemm_cpu.h"

#include <Eigen/Core>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "kiln/tensor/error.h"
#include "kiln/tensor/ops/linalg.h"
#include "kiln/tensor/parallel.h"

#ifdef KILN_WITH_BLAS
#include <cblas.h>
#endif

namespace kiln {

namespace detail {

CpuGemmBackend choose_cpu_gemm_backend(const char* env, bool have_blas, const std::string& blas_core,
                                       bool cpu_has_avx2_fma) {
  const std::string want = env != nullptr ? env : "";
  KILN_CHECK(want.empty() || want == "openblas" || want == "eigen", "KILN_GEMM='", want,
             "': expected 'openblas' or 'eigen' (or unset)");
  if (!have_blas) {
    KILN_CHECK(want != "openblas", "KILN_GEMM=openblas, but this kiln was built without OpenBLAS");
    return {"Eigen", "this kiln was built without OpenBLAS"};
  }
  if (want == "eigen") return {"Eigen", "KILN_GEMM=eigen"};
  if (want == "openblas") return {"OpenBLAS", "KILN_GEMM=openblas (OpenBLAS core " + blas_core + ")"};
  // OpenBLAS's kernels for cores without FMA: what it falls back to on a CPU it does not recognize.
  static const char* const kPreFma[] = {"Prescott", "Core2",   "Penryn",    "Dunnington", "Nehalem",
                                        "Atom",     "Banias",  "Katmai",    "Coppermine", "Northwood",
                                        "Sandybridge", "Barcelona", "Opteron", "Opteron_SSE3", "Bobcat", "Nano"};
  const bool old_kernels = std::find(std::begin(kPreFma), std::end(kPreFma), blas_core) != std::end(kPreFma);
  if (old_kernels && cpu_has_avx2_fma) {
    return {"Eigen", "OpenBLAS runs its " + blas_core +
                         " kernels, which predate this CPU's AVX2 and FMA (it does not recognize the CPU); "
                         "KILN_GEMM=openblas uses them anyway"};
  }
  return {"OpenBLAS", "OpenBLAS core " + blas_core};
}

}  // namespace detail

namespace {

std::once_flag g_gemm_once;
std::mutex g_gemm_mu;
CpuGemmBackend g_gemm;                 // guarded by g_gemm_mu
std::atomic<bool> g_gemm_blas{false};  // the hot path's copy of g_gemm.name == "OpenBLAS"
// Whether OpenBLAS may run inside a parallel region: its OpenMP and sequential builds then run on the calling
// thread alone; its pthreads build would start its own threads from every worker.
bool g_blas_in_workers = false;  // set once, before g_gemm_blas can be true

void init_gemm_backend() {
  std::call_once(g_gemm_once, [] {
#ifdef KILN_WITH_BLAS
    const std::string core = openblas_get_corename();
    const bool have_blas = true;
    g_blas_in_workers = openblas_get_parallel() != OPENBLAS_THREAD;
#else
    const std::string core;
    const bool have_blas = false;
#endif
    __builtin_cpu_init();  // the first product may run in a static initializer, before GCC's own init
    const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    CpuGemmBackend b = detail::choose_cpu_gemm_backend(std::getenv("KILN_GEMM"), have_blas, core, avx2_fma);
    std::lock_guard<std::mutex> lock(g_gemm_mu);
    g_gemm_blas = b.name == "OpenBLAS";
    g_gemm = std::move(b);
  });
}

#ifdef KILN_WITH_BLAS
bool gemm_through_blas() {
  init_gemm_backend();
  return g_gemm_blas.load(std::memory_order_relaxed);
}
#endif

// Eigen's product on the memory as it lies.
template <typename T>
void gemm_eigen(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc) {
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  using CMap = Eigen::Map<const RowMat, 0, Stride>;
  Eigen::Map<RowMat, 0, Stride> C(c, M, N, Stride(ldc));
  const CMap A(a, ta ? K : M, ta ? M : K, Stride(lda)), B(b, tb ? N : K, tb ? K : N, Stride(ldb));
  auto run = [&](const auto& product) {
    if (beta == T(0)) {
      C.noalias() = alpha * product;
    } else {
      if (beta != T(1)) C *= beta;
      C.noalias() += alpha * product;
    }
  };
  if (!ta && !tb) run(A * B);
  else if (!ta) run(A * B.transpose());
  else if (!tb) run(A.transpose() * B);
  else run(A.transpose() * B.transpose());
}

}  // namespace

CpuGemmBackend cpu_gemm_backend() {
  init_gemm_backend();
  std::lock_guard<std::mutex> lock(g_gemm_mu);
  return g_gemm;
}

void set_cpu_gemm_backend(const std::string& name) {
  init_gemm_backend();
#ifdef KILN_WITH_BLAS
  const bool have_blas = true;
#else
  const bool have_blas = false;
#endif
  KILN_CHECK(name == "openblas" || name == "eigen", "set_cpu_gemm_backend('", name, "'): expected 'openblas' or 'eigen'");
  KILN_CHECK(name == "eigen" || have_blas, "set_cpu_gemm_backend('openblas'): this kiln was built without OpenBLAS");
  std::lock_guard<std::mutex> lock(g_gemm_mu);
  g_gemm = {name == "openblas" ? "OpenBLAS" : "Eigen", "set_cpu_gemm_backend('" + name + "')"};
  g_gemm_blas = name == "openblas";
}

namespace detail {

template <typename T>
void cpu_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c, int64_t ldc) {
#ifdef KILN_WITH_BLAS
  if (gemm_through_blas() && (g_blas_in_workers || !in_parallel_region())) {
    const auto ca = ta ? CblasTrans : CblasNoTrans, cb = tb ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ca, cb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
      cblas_dgemm(CblasRowMajor, ca, cb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    }
    return;
  }
#endif
  gemm_eigen(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool cpu_blas_usable_here() {
#ifdef KILN_WITH_BLAS
  return gemm_through_blas() && (g_blas_in_workers || !in_parallel_region());
#else
  return false;
#endif
}

template void cpu_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);
template void cpu_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                               const double*, int64_t, double, double*, int64_t);

}  // namespace detail
}  // namespace kiln
