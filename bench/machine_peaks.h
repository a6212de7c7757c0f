// This machine's ceilings, measured by the benchmark that reports against them, in the same process: the fp32
// FMA peak (independent FMA chains on the widest vectors the build targets, one chain set per thread) and the
// streaming memory bandwidth (the best of a parallel read, copy, triad and update over buffers far larger than
// the caches). A benchmark reads its figures as fractions of these: gemm_bench for GEMM, roofline_bench for every
// op through the roofline model.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "bench_util.h"

namespace kiln::bench {

// GFLOP/s (an FMA is 2 flops) on `threads` threads; 0 in a build without FMA vectors.
inline double fma_peak_gflops(int threads) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int kLanes = 16;
#define KILN_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define KILN_SET1(x) _mm512_set1_ps(x)
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  constexpr int kLanes = 8;
#define KILN_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define KILN_SET1(x) _mm256_set1_ps(x)
#else
  (void)threads;
  return 0;  // no FMA vectors in this build
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  constexpr int kChains = 12;
  const long iters = 20'000'000;
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    double t0 = now_seconds();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      V acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = KILN_SET1(1.0f + c * 1e-7f);
      const V mul = KILN_SET1(0.9999999f), add = KILN_SET1(1e-7f);
      for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = KILN_FMA(acc[c], mul, add);
      float s = 0;
      alignas(64) float lanes[kLanes];
      for (int c = 0; c < kChains; ++c) {
        std::memcpy(lanes, &acc[c], sizeof lanes);
        s += lanes[0];
      }
      sink += s;
    }
    double t = now_seconds() - t0;
    do_not_optimize(sink);
    best = std::max(best, 2.0 * kLanes * kChains * double(iters) * threads / t / 1e9);
  }
  return best;
#undef KILN_FMA
#undef KILN_SET1
#endif
}

// GB/s of memory traffic (bytes read plus bytes written) of the best streaming loop on `threads` threads, over
// 256 MiB per buffer: a sum (read), a copy (read + write), a triad a = b + s * c (two reads, one write) and an
// update a += b. Traffic is counted as the loop names it: a store to a line not read first also reads it
// (write-allocate) uncounted, which is why the copy and the triad count less than they move.
inline double stream_bandwidth_gbs(int threads, int reps = 5) {
  const size_t n = size_t{64} << 20;  // floats: 256 MiB
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
  const long ln = static_cast<long>(n);
  auto best_of = [&](auto&& loop, double bytes) {
    double best = 0;
    for (int r = 0; r < reps; ++r) {
      double t0 = now_seconds();
      loop();
      best = std::max(best, bytes / (now_seconds() - t0) / 1e9);
    }
    return best;
  };
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const double read = best_of(
      [&] {
        float s = 0;
#pragma omp parallel for simd num_threads(threads) reduction(+ : s)
        for (long i = 0; i < ln; ++i) s += pb[i];
        do_not_optimize(s);
      },
      4.0 * n);
  const double copy = best_of(
      [&] {
#pragma omp parallel for simd num_threads(threads)
        for (long i = 0; i < ln; ++i) pa[i] = pb[i];
        do_not_optimize(pa[n / 2]);
      },
      8.0 * n);
  const double triad = best_of(
      [&] {
#pragma omp parallel for simd num_threads(threads)
        for (long i = 0; i < ln; ++i) pa[i] = pb[i] + 0.5f * pc[i];
        do_not_optimize(pa[n / 2]);
      },
      12.0 * n);
  // An update in place, a += b: two reads and a write to lines already read, so no write-allocate traffic.
  const double update = best_of(
      [&] {
#pragma omp parallel for simd num_threads(threads)
        for (long i = 0; i < ln; ++i) pa[i] += pb[i];
        do_not_optimize(pa[n / 2]);
      },
      12.0 * n);
  return std::max({read, copy, triad, update});
}

}  // namespace kiln::bench
