// W1 (BENCHMARKS.md): square fp32 GEMM, C = A * B, N in {256, 512, 1024, 2048}, 1 and 2 threads, GFLOP/s =
// 2N^3 / t. kiln's matmul side by side, in one process and interleaved, with Eigen's own product
// (C.noalias() = A * B, no BLAS behind it) and OpenBLAS's cblas_sgemm (row-major) when kiln was built with it;
// the ratio kiln / max(anchors) is the figure of merit. Also measures this machine's fp32 FMA peak so the
// GFLOP/s can be read as a fraction of it.
//
//   gemm_bench [reps]
#include <Eigen/Core>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "bench_util.h"

#ifdef KILN_WITH_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  std::printf("# W1 GEMM fp32, C = A*B, median of %d interleaved reps; GFLOP/s (ratio kiln / best anchor)\n", reps);
#ifdef KILN_WITH_BLAS
  std::printf("# kiln's GEMM backend: OpenBLAS (cblas_sgemm)\n");
#else
  std::printf("# kiln's GEMM backend: Eigen\n");
#endif
  std::printf("%-8s %-7s %-9s %-9s %-9s %-9s %-8s\n", "threads", "N", "kiln", "openblas", "eigen", "peak%", "ratio");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    double peak = kiln::lab::fma_peak_gflops(threads);
    std::printf("# fp32 FMA peak, %d thread%s: %.1f GFLOP/s\n", threads, threads > 1 ? "s" : "", peak);
    for (int64_t n : {256, 512, 1024, 2048}) {
      Generator g(1);
      Tensor a = randn({n, n}, {}, &g), b = randn({n, n}, {}, &g);
      Tensor c_kiln;
      RowMat c_eigen(n, n), c_blas(n, n);
      Eigen::Map<const RowMat> ea(a.data_ptr<float>(), n, n), eb(b.data_ptr<float>(), n, n);
      std::vector<std::function<void()>> variants{
          [&] { c_kiln = matmul(a, b); },
          [&] { c_eigen.noalias() = ea * eb; },
      };
#ifdef KILN_WITH_BLAS
      variants.push_back([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data_ptr<float>(), n,
                    b.data_ptr<float>(), n, 0.0f, c_blas.data(), n);
      });
#endif
      int r = n >= 2048 ? std::max(3, reps / 2) : reps;
      std::vector<double> t = bench::time_interleaved(variants, r);
      double flops = 2.0 * n * n * n;
      double kiln_g = flops / t[0] / 1e9, eigen_g = flops / t[1] / 1e9;
      double blas_g = t.size() > 2 ? flops / t[2] / 1e9 : 0.0;
      double best = std::max(eigen_g, blas_g);
      std::printf("%-8d %-7lld %-9.1f %-9.1f %-9.1f %-9.0f %-8.3f\n", threads, static_cast<long long>(n), kiln_g, blas_g,
                  eigen_g, peak > 0 ? 100.0 * kiln_g / peak : 0.0, kiln_g / best);
      // Keep the results honest: all three must agree.
      float diff = (Eigen::Map<const RowMat>(c_kiln.data_ptr<float>(), n, n) - c_eigen).cwiseAbs().maxCoeff();
      if (diff > 1e-2f * std::sqrt(float(n))) std::printf("# WARNING: kiln and Eigen differ by %g at N=%lld\n", diff, (long long)n);
    }
  }
  return 0;
}
