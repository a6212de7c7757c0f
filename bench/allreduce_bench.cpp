// W5 all-reduce (BENCHMARKS.md): kiln's "tcp" process group over loopback, and the machine's physical limits
// (one thread's memcpy, one loopback TCP stream) measured in the same process.
//
// The benchmark starts its own ranks: for each world size it forks N children that meet through a FileStore in a
// fresh temporary directory (no ports to agree on, nothing to launch). The parent holds no threads when it forks
// and measures the limits only after its children are done, so the ranks run alone.
//
// Timing rule (shared with mpi_allreduce_bench and gloo_allreduce_bench): per size, warm-up calls, then R calls
// each preceded by a barrier; a call's time is the max over ranks (every rank's list of times is reduced with
// Max once the loop is done, so the loop itself carries no extra collective); the figure is the median over
// the R calls. algbw = bytes / time, busbw = algbw * 2(n-1)/n (the bytes each rank's link must carry).
//
// Output: one machine-readable line per cell, which scripts/allreduce_bench.sh collects:
//   result backend=kiln n=2 bytes=1048576 ms=0.512 algbw_GBps=2.05 busbw_GBps=2.05
//   limit memcpy_GBps=10.9
//   limit tcp_stream_GBps=2.3
//
//   allreduce_bench [--world 2,4] [--sizes 4096,1048576,16777216,67108864] [--reps-scale 1]
//                   [--segment-bytes B] [--small-bytes B] [--no-limits] [--label kiln]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "fork_ranks.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/factories.h"

namespace {

using kiln::bench::median;
using kiln::bench::now_seconds;
namespace dist = kiln::distributed;

struct Config {
  std::vector<int> worlds{2, 4};
  std::vector<size_t> sizes{size_t{4} << 10, size_t{1} << 20, size_t{16} << 20, size_t{64} << 20};
  double reps_scale = 1.0;
  size_t segment_bytes = 0;  // 0: ProcessGroupOptions' default
  size_t small_bytes = 0;    // 0: ProcessGroupOptions' default
  bool limits = true;
  std::string label = "kiln";
};

std::vector<size_t> parse_list(const char* s) {
  std::vector<size_t> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    out.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return out;
}

// Repetitions per size: about 512 MiB of payload per cell, between 7 and 200 calls (the same in every bench).
int reps_for(size_t bytes, double scale) {
  const double r = static_cast<double>(size_t{512} << 20) / static_cast<double>(bytes);
  return std::max(3, static_cast<int>(std::clamp(r, 7.0, 200.0) * scale));
}

void print_cell(const std::string& label, int n, size_t bytes, double seconds) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  std::printf("result backend=%s n=%d bytes=%zu ms=%.5f algbw_GBps=%.4f busbw_GBps=%.4f\n", label.c_str(), n, bytes,
              seconds * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
  std::fflush(stdout);
}

// One rank's whole run; rank 0 prints. Returns the process's exit status.
int run_rank(const Config& cfg, int rank, int n, const std::string& store_path) {
  auto store = std::make_shared<dist::FileStore>(store_path, n, std::chrono::seconds(60));
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  o.name = "allreduce_bench";
  if (cfg.segment_bytes) o.segment_bytes = cfg.segment_bytes;
  if (cfg.small_bytes) o.small_message_bytes = cfg.small_bytes;
  auto pg = dist::new_group("tcp", store, rank, n, o);
  const float expect = static_cast<float>(n * (n + 1) / 2);
  for (size_t bytes : cfg.sizes) {
    const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
    kiln::Tensor x = kiln::empty({count}, kiln::kFloat32);
    float* p = x.data_ptr<float>();
    const int reps = reps_for(bytes, cfg.reps_scale), warmup = std::max(2, reps / 10);
    std::vector<double> times;
    for (int i = 0; i < warmup + reps; ++i) {
      std::fill(p, p + count, static_cast<float>(rank + 1));  // untimed: the sum stays exact and finite
      pg->barrier()->wait();
      const double t0 = now_seconds();
      pg->allreduce(x)->wait();
      const double t = now_seconds() - t0;
      if (p[0] != expect || p[count - 1] != expect) {
        std::fprintf(stderr, "allreduce_bench: rank %d, n=%d, %zu bytes: got %g and %g, expected %g\n", rank, n,
                     bytes, p[0], p[count - 1], expect);
        return 1;
      }
      if (i >= warmup) times.push_back(t);
    }
    kiln::Tensor tt = kiln::empty({static_cast<int64_t>(times.size())}, kiln::kFloat64);
    std::copy(times.begin(), times.end(), tt.data_ptr<double>());
    pg->allreduce(tt, dist::ReduceOp::Max)->wait();
    const double* m = tt.data_ptr<double>();
    if (rank == 0) print_cell(cfg.label, n, bytes, median(std::vector<double>(m, m + times.size())));
  }
  pg->barrier()->wait();
  return 0;
}

// Forks n ranks meeting in a fresh temporary directory; true when every one exited cleanly.
bool run_world(const Config& cfg, int n) {
  std::string dir = (std::filesystem::temp_directory_path() / "kiln_allreduce_XXXXXX").string();
  if (!mkdtemp(dir.data())) {
    std::perror("allreduce_bench: mkdtemp");
    return false;
  }
  const bool ok = kiln::bench::run_forked_ranks(n, "allreduce_bench",
                                                [&](int r) { return run_rank(cfg, r, n, dir + "/store"); });
  std::filesystem::remove_all(dir);
  return ok;
}

double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    const double t0 = now_seconds();
    std::memcpy(b.data(), a.data(), bytes);
    t.push_back(now_seconds() - t0);
    kiln::bench::do_not_optimize(b[i]);
  }
  return static_cast<double>(bytes) / median(t) / 1e9;
}

// One TCP stream over 127.0.0.1: a thread sends `bytes` each time the receiver asks (one byte), the receiver
// times from its request to the last byte in.
double tcp_stream_gbps(size_t bytes) {
  const int reps = 7;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("allreduce_bench: loopback listener");
    return 0;
  }
  std::thread sender([&] {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    std::vector<char> buf(bytes, 3);
    char go = 0;
    for (int i = 0; i < reps; ++i) {
      if (recv(s, &go, 1, MSG_WAITALL) != 1) break;
      for (size_t off = 0; off < bytes;) {
        const ssize_t k = send(s, buf.data() + off, bytes - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += static_cast<size_t>(k);
      }
    }
    close(s);
  });
  int c = accept(listener, nullptr, nullptr);
  std::vector<char> buf(bytes);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const char go = 1;
    const double t0 = now_seconds();
    if (send(c, &go, 1, MSG_NOSIGNAL) != 1) break;
    size_t got = 0;
    while (got < bytes) {
      const ssize_t k = recv(c, buf.data() + got, bytes - got, 0);
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    t.push_back(now_seconds() - t0);
  }
  sender.join();
  close(c);
  close(listener);
  return t.empty() ? 0 : static_cast<double>(bytes) / median(t) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--world") {
      cfg.worlds.clear();
      for (size_t w : parse_list(v)) cfg.worlds.push_back(static_cast<int>(w));
      ++i;
    } else if (a == "--sizes") {
      cfg.sizes = parse_list(v), ++i;
    } else if (a == "--reps-scale") {
      cfg.reps_scale = std::atof(v), ++i;
    } else if (a == "--segment-bytes") {
      cfg.segment_bytes = std::strtoull(v, nullptr, 10), ++i;
    } else if (a == "--small-bytes") {
      cfg.small_bytes = std::strtoull(v, nullptr, 10), ++i;
    } else if (a == "--label") {
      cfg.label = v, ++i;
    } else if (a == "--no-limits") {
      cfg.limits = false;
    } else {
      std::fprintf(stderr, "allreduce_bench: unknown argument '%s' (see the file's header for the options)\n", a.c_str());
      return 2;
    }
  }
  bool ok = true;
  for (int n : cfg.worlds) {
    if (!run_world(cfg, n)) {
      std::fprintf(stderr, "allreduce_bench: a rank of the n=%d run failed\n", n);
      ok = false;
    }
  }
  if (cfg.limits) {
    std::printf("limit memcpy_GBps=%.3f\n", memcpy_gbps(size_t{64} << 20));
    std::printf("limit tcp_stream_GBps=%.3f\n", tcp_stream_gbps(size_t{64} << 20));
  }
  return ok ? 0 : 1;
}
