// Timing helpers shared by kiln's benchmarks.
//
// This machine is shared and noisy (BENCHMARKS.md): every figure is a median over repetitions, variants are
// run interleaved within one process so they see the same conditions, and what we report is the ratio
// kiln / anchor. scripts/bench.sh runs each benchmark in several processes and takes medians of those.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kiln::bench {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Runs each variant `reps` times, round-robin (variant 0, 1, ..., 0, 1, ...), after `warmup` rounds; returns
// the median seconds of each.
inline std::vector<double> time_interleaved(const std::vector<std::function<void()>>& variants, int reps, int warmup = 2) {
  std::vector<std::vector<double>> times(variants.size());
  for (int r = 0; r < warmup + reps; ++r) {
    for (size_t v = 0; v < variants.size(); ++v) {
      double t0 = now_seconds();
      variants[v]();
      double t = now_seconds() - t0;
      if (r >= warmup) times[v].push_back(t);
    }
  }
  std::vector<double> med;
  for (auto& t : times) med.push_back(median(t));
  return med;
}

// Keeps the compiler from discarding a result.
template <typename T>
inline void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace kiln::bench
