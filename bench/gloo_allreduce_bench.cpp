// W5 all-reduce anchor: Gloo's allreduce (its default algorithm, the ring, fp32 sum, in place) over Gloo's TCP
// transport on 127.0.0.1, under the same timing rule as allreduce_bench.cpp (see its header). Like that
// benchmark it forks its ranks itself; they meet through Gloo's FileStore in a fresh temporary directory.
//
//   gloo_allreduce_bench [--world 2,4] [--sizes 4096,1048576,...] [--reps-scale 1]
// prints "result backend=gloo n=2 bytes=... ms=... algbw_GBps=... busbw_GBps=..." per size.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

std::vector<size_t> parse_list(char* s) {
  std::vector<size_t> out;
  while (*s) {
    out.push_back(std::strtoull(s, &s, 10));
    if (*s == ',') ++s;
    else if (*s) break;
  }
  return out;
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

int run_rank(int rank, int n, const std::string& dir, const std::vector<size_t>& sizes, double scale) {
  gloo::rendezvous::FileStore store(dir);
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(store, device);
  const float expect = static_cast<float>(n * (n + 1) / 2);
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> x(count);
    const int reps = reps_for(bytes, scale), warmup = std::max(2, reps / 10);
    std::vector<double> times;
    for (int i = 0; i < warmup + reps; ++i) {
      std::fill(x.begin(), x.end(), static_cast<float>(rank + 1));
      gloo::BarrierOptions barrier(context);
      gloo::barrier(barrier);
      const double t0 = now_seconds();
      gloo::AllreduceOptions opts(context);
      opts.setOutput(x.data(), count);
      opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      gloo::allreduce(opts);
      const double t = now_seconds() - t0;
      if (x[0] != expect || x[count - 1] != expect) {
        std::fprintf(stderr, "gloo_allreduce_bench: rank %d, n=%d, %zu bytes: got %g, expected %g\n", rank, n, bytes,
                     x[0], expect);
        return 1;
      }
      if (i >= warmup) times.push_back(t);
    }
    gloo::AllreduceOptions opts(context);
    opts.setOutput(times.data(), times.size());
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::max<double>));
    gloo::allreduce(opts);
    if (rank == 0) {
      const double s = median(times), algbw = static_cast<double>(bytes) / s / 1e9;
      std::printf("result backend=gloo n=%d bytes=%zu ms=%.5f algbw_GBps=%.4f busbw_GBps=%.4f\n", n, bytes, s * 1e3,
                  algbw, algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
  gloo::BarrierOptions barrier(context);
  gloo::barrier(barrier);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> worlds{2, 4};
  std::vector<size_t> sizes{size_t{4} << 10, size_t{1} << 20, size_t{16} << 20, size_t{64} << 20};
  double scale = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--world") worlds = parse_list(argv[i + 1]);
    else if (a == "--sizes") sizes = parse_list(argv[i + 1]);
    else if (a == "--reps-scale") scale = std::atof(argv[i + 1]);
  }
  bool ok = true;
  for (size_t w : worlds) {
    const int n = static_cast<int>(w);
    std::string dir = (std::filesystem::temp_directory_path() / "kiln_gloo_XXXXXX").string();
    if (!mkdtemp(dir.data())) return 1;
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        int rc = 1;
        try {
          rc = run_rank(r, n, dir, sizes, scale);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "gloo_allreduce_bench: rank %d of %d: %s\n", r, n, e.what());
        }
        std::fflush(nullptr);
        _exit(rc);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    std::filesystem::remove_all(dir);
  }
  return ok ? 0 : 1;
}
