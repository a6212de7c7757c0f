#include "kiln/tensor/parallel.h"

#include <algorithm>
#include <atomic>

#include "kiln/tensor/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln {

namespace {
std::atomic<int> num_threads{0};  // 0: not set, ask OpenMP
}

int get_num_threads() {
  int n = num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: expected a positive number of threads, got ", n);
  num_threads.store(n, std::memory_order_relaxed);
#ifdef _OPENMP
  omp_set_num_threads(n);  // BLAS built on the same OpenMP runtime follows this too
#endif
}

bool in_parallel_region() {
#ifdef _OPENMP
  return omp_in_parallel();
#else
  return false;
#endif
}

namespace detail {

void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
#ifdef _OPENMP
  int64_t range = end - begin;
  int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), (range + grain - 1) / grain));
  // An exception thrown in a worker must not escape the OpenMP region (that terminates); keep the first one.
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    int nt = omp_get_num_threads();
    int64_t chunk = (range + nt - 1) / nt;
    int64_t b = begin + t * chunk;
    int64_t e = std::min(end, b + chunk);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
#else
  (void)grain;
  f(begin, end);
#endif
}

}  // namespace detail
}  // namespace kiln
