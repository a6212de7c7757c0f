// Data-parallel training steps (issue 8's figures): BENCHMARKS.md's W2 MLP (784-512-256-10, SGD momentum 0.9)
// at a global batch of 128, on one process and on two ranks of 64 each with DistributedDataParallel over the
// tcp backend, overlap on and off. Ranks are forked children meeting through a FileStore; the parent runs
// nothing while they do. Each configuration runs in its own processes, in interleaved rounds, and reports the
// median step time (max over ranks) and, for ddp, how much of the all-reduce time backward hid:
//   hidden = (t_no_overlap - t_overlap) / (t_no_overlap - t_compute), t_compute = a rank's step without DDP.
// NOTE: two ranks on a 2-core machine share the cores with everything else; the figures show the machinery's
// cost, not a speed-up a bigger machine would see.
//   ddp_bench [steps] [rounds]
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/distributed/ddp.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln;
namespace dist = kiln::distributed;

namespace {

nn::Sequential make_mlp() {
  return nn::Sequential(nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(),
                        nn::Linear(256, 10));
}

// One rank's run: `steps` timed steps after 3 warm-up ones; writes its median step time (ms) to `out`.
// mode: "single" (no group), "local" (a rank's batch without DDP: the compute alone), "overlap", "no-overlap".
void run_rank(const std::string& mode, int rank, int world, int64_t batch, int steps, const std::string& store_path,
              const std::string& out) {
  set_num_threads(world == 1 ? 2 : 1);
  manual_seed(1);
  auto model = make_mlp();
  std::shared_ptr<dist::ProcessGroup> pg;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (mode == "overlap" || mode == "no-overlap") {
    auto store = std::make_shared<dist::FileStore>(store_path, world, std::chrono::seconds(60));
    pg = dist::new_group("tcp", store, rank, world);
    ddp = std::make_unique<dist::DistributedDataParallel>(model.ptr(), pg,
                                                          dist::DDPOptions{.overlap = mode == "overlap"});
  }
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Generator gen(static_cast<uint64_t>(rank) + 7);
  Tensor x = randn({batch, 784}, {}, &gen);
  Tensor y = randint(0, 10, {batch}, kInt64, &gen);
  std::vector<double> times;
  for (int s = 0; s < steps + 3; ++s) {
    if (pg) pg->barrier()->wait();
    const double t0 = bench::now_seconds();
    Tensor loss = nn::F::cross_entropy(ddp ? (*ddp)(x) : model(x), y);
    opt.zero_grad();
    loss.backward();
    if (ddp) ddp->finalize();
    opt.step();
    if (s >= 3) times.push_back(bench::now_seconds() - t0);
  }
  if (pg) {  // the max over ranks of each step's time
    Tensor t = tensor(times, {static_cast<int64_t>(times.size())}, kFloat64);
    pg->allreduce(t, dist::ReduceOp::Max)->wait();
    for (size_t i = 0; i < times.size(); ++i) times[i] = t.data_ptr<double>()[i];
    pg->barrier()->wait();
  }
  if (rank == 0) std::ofstream(out) << bench::median(times) * 1e3 << "\n";
}

// Runs `mode` on `world` forked ranks; returns rank 0's figure.
double run(const std::string& mode, int world, int64_t batch, int steps, const std::string& dir) {
  static int counter = 0;
  const std::string store = dir + "/store" + std::to_string(counter++);
  const std::string out = dir + "/result";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        run_rank(mode, r, world, batch, steps, store, out);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddp_bench: %s rank %d: %s\n", mode.c_str(), r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double ms = -1;
  if (ok) std::ifstream(out) >> ms;
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string dir = (std::filesystem::temp_directory_path() / ("kiln_ddp_bench_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  // Each configuration: (label, mode, ranks, per-rank batch).
  struct Config {
    const char* label;
    const char* mode;
    int world;
    int64_t batch;
  };
  const std::vector<Config> configs{{"1 process, batch 128 (2 threads)", "single", 1, 128},
                                    {"1 rank's compute, batch 64 (1 thread)", "local", 1, 64},
                                    {"ddp 2 x 64, overlap", "overlap", 2, 64},
                                    {"ddp 2 x 64, no overlap", "no-overlap", 2, 64}};
  std::vector<std::vector<double>> ms(configs.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < configs.size(); ++c) {
      ms[c].push_back(run(configs[c].mode, configs[c].world, configs[c].batch, steps, dir));
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("W2 MLP step, median over %d rounds of %d steps (ms, max over ranks):\n", rounds, steps);
  std::vector<double> med;
  for (size_t c = 0; c < configs.size(); ++c) {
    med.push_back(bench::median(ms[c]));
    std::printf("  %-40s %8.2f\n", configs[c].label, med.back());
  }
  const double comm = med[3] - med[1];
  if (comm > 0) {
    std::printf("  communication hidden behind backward: %.0f%% ((no-overlap - overlap) / (no-overlap - compute))\n",
                100.0 * (med[3] - med[2]) / comm);
  }
  return 0;
}
