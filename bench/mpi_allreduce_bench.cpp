// W5 all-reduce anchor: Open MPI's MPI_Allreduce (fp32 sum, in place), under the same timing rule as
// allreduce_bench.cpp (see its header): warm-up, then R calls each after an MPI_Barrier, a call's time the max
// over ranks, the median over calls. The world size is mpirun's -n; the transport is whatever mpirun's MCA
// options pick (scripts/allreduce_bench.sh runs it with the default, shared memory, and with TCP only).
//
//   mpirun -n 2 mpi_allreduce_bench [--sizes 4096,1048576,...] [--reps-scale 1] [--label mpi]
// prints "result backend=<label> n=2 bytes=... ms=... algbw_GBps=... busbw_GBps=..." per size.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// As in allreduce_bench.cpp: about 512 MiB of payload per cell, between 7 and 200 calls.
int reps_for(size_t bytes, double scale) {
  const double r = static_cast<double>(size_t{512} << 20) / static_cast<double>(bytes);
  return std::max(3, static_cast<int>(std::clamp(r, 7.0, 200.0) * scale));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<size_t> sizes{size_t{4} << 10, size_t{1} << 20, size_t{16} << 20, size_t{64} << 20};
  double scale = 1.0;
  std::string label = "mpi";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes") {
      sizes.clear();
      for (char* p = argv[i + 1]; *p;) {
        sizes.push_back(std::strtoull(p, &p, 10));
        if (*p == ',') ++p;
      }
    } else if (a == "--reps-scale") {
      scale = std::atof(argv[i + 1]);
    } else if (a == "--label") {
      label = argv[i + 1];
    }
  }
  const float expect = static_cast<float>(n * (n + 1) / 2);
  int failed = 0;
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> x(count);
    const int reps = reps_for(bytes, scale), warmup = std::max(2, reps / 10);
    std::vector<double> times;
    for (int i = 0; i < warmup + reps; ++i) {
      std::fill(x.begin(), x.end(), static_cast<float>(rank + 1));
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double t = MPI_Wtime() - t0;
      if (x[0] != expect || x[count - 1] != expect) failed = 1;
      if (i >= warmup) times.push_back(t);
    }
    std::vector<double> worst(times.size());
    MPI_Reduce(times.data(), worst.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double s = median(worst), algbw = static_cast<double>(bytes) / s / 1e9;
      std::printf("result backend=%s n=%d bytes=%zu ms=%.5f algbw_GBps=%.4f busbw_GBps=%.4f\n", label.c_str(), n,
                  bytes, s * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
  if (failed) std::fprintf(stderr, "mpi_allreduce_bench: rank %d got a wrong sum (expected %g)\n", rank, expect);
  MPI_Finalize();
  return failed;
}
