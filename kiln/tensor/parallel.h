// CPU parallelism: one parallel_for over OpenMP, with a grain size.
//
// parallel_for(begin, end, grain, f) calls f(b, e) on disjoint chunks covering [begin, end). Ranges smaller
// than `grain` run inline on the calling thread, as do calls made from inside a parallel region (no nested
// parallelism: two pools fighting over two cores is slower than one).
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// The number of threads kiln's CPU kernels use (OpenMP's, unless set).
int get_num_threads();
void set_num_threads(int n);
bool in_parallel_region();

namespace detail {
void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
}

inline constexpr int64_t kDefaultGrain = 32768;

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  if (end <= begin) return;
  if (end - begin <= grain || get_num_threads() == 1 || in_parallel_region()) {
    f(begin, end);
    return;
  }
  detail::parallel_run(begin, end, grain, std::function<void(int64_t, int64_t)>(std::forward<F>(f)));
}

}  // namespace kiln
