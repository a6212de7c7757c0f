// Point-to-point send/recv between two ranks over loopback: kiln's "tcp" group against the "gloo" group (the
// anchor, when this build has it), interleaved in one run.
//
// The benchmark forks its two ranks, which meet through a FileStore in a fresh temporary directory and make one
// group per backend. Per size and repetition, a ping-pong on each backend in turn (the order alternating):
// rank 0 sends and then receives, rank 1 receives and sends back. Rank 0 times the round trip; the figure is the
// median over the repetitions, one way = half of it, bandwidth = bytes / one way.
//
// Output, one line per cell, then the ratios:
//   result backend=tcp bytes=4096 oneway_us=21.3 GBps=0.19
//   ratio bytes=4096 tcp_over_gloo_time=0.84
//
//   p2p_bench [--sizes 4096,1048576,67108864] [--reps-scale 1]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "fork_ranks.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/factories.h"

namespace {

using kiln::bench::median;
using kiln::bench::now_seconds;
namespace dist = kiln::distributed;

// About 256 MiB each way per cell, between 7 and 400 round trips.
int reps_for(size_t bytes, double scale) {
  const double r = static_cast<double>(size_t{256} << 20) / static_cast<double>(bytes);
  return std::max(3, static_cast<int>(std::clamp(r, 7.0, 400.0) * scale));
}

int run_rank(int rank, const std::string& store_path, const std::vector<size_t>& sizes, double scale) {
  auto store = std::make_shared<dist::FileStore>(store_path, 2, std::chrono::seconds(60));
  std::vector<std::string> names{"tcp"};
  const auto built = dist::backends();
  if (std::find(built.begin(), built.end(), "gloo") != built.end()) names.push_back("gloo");
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups;
  for (const std::string& b : names) {
    dist::ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(60);
    o.name = "p2p_bench_" + b;
    groups.push_back(dist::new_group(b, store, rank, 2, o));
  }
  const int peer = 1 - rank;
  for (size_t bytes : sizes) {
    const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
    kiln::Tensor out = kiln::full({count}, static_cast<double>(rank + 1), kiln::kFloat32);
    kiln::Tensor in = kiln::empty({count}, kiln::kFloat32);
    const int reps = reps_for(bytes, scale), warmup = std::max(2, reps / 10);
    std::vector<std::vector<double>> times(groups.size());
    for (int i = 0; i < warmup + reps; ++i) {
      for (size_t k = 0; k < groups.size(); ++k) {
        const size_t g = (i % 2 == 0) ? k : groups.size() - 1 - k;  // alternate which backend goes first
        dist::ProcessGroup& pg = *groups[g];
        pg.barrier()->wait();
        const double t0 = now_seconds();
        if (rank == 0) {
          pg.send(out, peer, 0)->wait();
          pg.recv(in, peer, 0)->wait();
        } else {
          pg.recv(in, peer, 0)->wait();
          pg.send(out, peer, 0)->wait();
        }
        const double t = now_seconds() - t0;
        if (in.data_ptr<float>()[count - 1] != static_cast<float>(peer + 1)) {
          std::fprintf(stderr, "p2p_bench: rank %d, %s, %zu bytes: wrong data\n", rank, names[g].c_str(), bytes);
          return 1;
        }
        if (i >= warmup) times[g].push_back(t);
      }
    }
    if (rank != 0) continue;
    std::vector<double> oneway(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      oneway[g] = median(times[g]) / 2;
      std::printf("result backend=%s bytes=%zu oneway_us=%.2f GBps=%.3f\n", names[g].c_str(), bytes, oneway[g] * 1e6,
                  static_cast<double>(bytes) / oneway[g] / 1e9);
    }
    if (groups.size() > 1) std::printf("ratio bytes=%zu tcp_over_gloo_time=%.3f\n", bytes, oneway[0] / oneway[1]);
    std::fflush(stdout);
  }
  for (auto& g : groups) g->barrier()->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{size_t{4} << 10, size_t{1} << 20, size_t{64} << 20};
  double scale = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        sizes.push_back(std::strtoull(p, &end, 10));
        if (end == p) break;
        p = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--reps-scale" && i + 1 < argc) {
      scale = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: p2p_bench [--sizes 4096,1048576,67108864] [--reps-scale 1]\n");
      return 2;
    }
  }
  std::string dir = (std::filesystem::temp_directory_path() / "kiln_p2p_XXXXXX").string();
  if (!mkdtemp(dir.data())) {
    std::perror("p2p_bench: mkdtemp");
    return 1;
  }
  const bool ok =
      kiln::bench::run_forked_ranks(2, "p2p_bench", [&](int r) { return run_rank(r, dir + "/store", sizes, scale); });
  std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
