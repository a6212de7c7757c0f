// Memory-bound ops against the machine's memory bandwidth: a large element-wise add and a full sum of a
// 64 MiB float32 tensor, in GB/s of memory traffic, side by side with std::memcpy of the same 64 MiB (the
// anchor: a single-thread copy, BENCHMARKS.md "Limits"). Traffic counted: memcpy reads + writes 64 MiB;
// add reads two tensors and writes one (3 x 64 MiB); sum reads one (64 MiB).
//
// Two forms of add: "add_" is a.add_(b), into existing memory; "add" is a + b, which allocates its 64 MiB
// result each call (from the CPU allocator's cache of freed blocks, see cpu_allocator.cpp).
//
// The reductions' other loops on the same 64 MiB, counted as one read: "sum_rows" is a (4096, 4096) tensor
// summed over dim 1, "sum_cols" over dim 0 (the column loop), "sum_short" a (4M, 4) one over dim 1 (many
// short rows, folded across a block of outputs), "sum_row32" a (512K, 32) one over dim 1 (short rows, each
// folded on its own), "var_rows" and "max_rows" (max with its index) over dim 1.
//
//   elementwise_bench [reps]
#include <kiln/kiln.h>

#include <cstdlib>
#include <cstring>

#include "bench_util.h"

int main(int argc, char** argv) {
  using namespace kiln;
  int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  const int64_t n = 16 * 1024 * 1024;  // 64 MiB of float32
  const double mib64 = static_cast<double>(n) * 4;
  Generator g(1);
  Tensor a = randn({n}, {}, &g), b = randn({n}, {}, &g);
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);

  std::printf("# 64 MiB float32; GB/s of memory traffic, median of %d interleaved reps; ratio = kiln / memcpy\n", reps);
  std::printf("%-8s %-12s %-9s %-9s %-8s\n", "threads", "op", "kiln", "memcpy", "ratio");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor out;
    Tensor acc = a.clone();
    Tensor total, r;
    const Tensor square = a.view({4096, 4096}), narrow = a.view({n / 4, 4}), rows32 = a.view({n / 32, 32});
    std::vector<std::function<void()>> variants{
        [&] { std::memcpy(dst.data(), src.data(), n * sizeof(float)); },
        [&] { acc.add_(b); },
        [&] { out = a + b; },
        [&] { total = a.sum(); },
        [&] { r = square.sum({1}); },
        [&] { r = square.sum({0}); },
        [&] { r = narrow.sum({1}); },
        [&] { r = rows32.sum({1}); },
        [&] { r = kiln::var(square, {1}); },
        [&] { r = kiln::max(square, 1).first; },
    };
    std::vector<double> t = bench::time_interleaved(variants, reps);
    double memcpy_gbs = 2 * mib64 / t[0] / 1e9;
    double add_inplace = 3 * mib64 / t[1] / 1e9, add_alloc = 3 * mib64 / t[2] / 1e9, sum_gbs = mib64 / t[3] / 1e9;
    std::printf("%-8d %-12s %-9.2f %-9.2f %-8.3f\n", threads, "add_", add_inplace, memcpy_gbs, add_inplace / memcpy_gbs);
    std::printf("%-8d %-12s %-9.2f %-9.2f %-8.3f\n", threads, "add", add_alloc, memcpy_gbs, add_alloc / memcpy_gbs);
    std::printf("%-8d %-12s %-9.2f %-9.2f %-8.3f\n", threads, "sum", sum_gbs, memcpy_gbs, sum_gbs / memcpy_gbs);
    const char* names[] = {"sum_rows", "sum_cols", "sum_short", "sum_row32", "var_rows", "max_rows"};
    for (int k = 0; k < 6; ++k) {
      const double gbs = mib64 / t[4 + k] / 1e9;
      std::printf("%-8d %-12s %-9.2f %-9.2f %-8.3f\n", threads, names[k], gbs, memcpy_gbs, gbs / memcpy_gbs);
    }
    bench::do_not_optimize(total.item<float>());
  }
  return 0;
}
