// Data-parallel training steps (issue 8's figures): BENCHMARKS.md's W2 MLP (784-512-256-10, SGD momentum 0.9,
// global batch 128) and W3 CNN (Adam 1e-3, global batch 64), on one process and on two ranks of half the batch
// each: DistributedDataParallel over the tcp backend with overlap on and off, and a sync parameter server (one
// server process holding the parameters and the optimizer, two workers). Ranks are forked children meeting
// through a FileStore; the parent runs nothing while they do. Each configuration runs in its own processes, in
// interleaved rounds, and reports the median step time (max over ranks / workers) and, for ddp, how much of the
// all-reduce time backward hid:
//   hidden = (t_no_overlap - t_overlap) / (t_no_overlap - t_compute), t_compute = a rank's step without DDP
// while the other rank computes too (two processes, no communication: on a small machine they slow each other
// down, and that is not communication).
// NOTE: two ranks on a 2-core machine share the cores with everything else; the figures show the machinery's
// cost, not a speed-up a bigger machine would see.
//   ddp_bench [steps] [rounds] [mlp|cnn|all]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "fork_ranks.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/ps/parameter_server.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln;
namespace dist = kiln::distributed;

namespace {

nn::Sequential make_model(const std::string& name) {
  if (name == "cnn") {
    return nn::Sequential(nn::Conv2d(1, 32, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(32, 64, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10));
  }
  return nn::Sequential(nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(),
                        nn::Linear(256, 10));
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name, nn::Module& m) {
  if (name == "cnn") return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-3});
  return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
}

// One rank's run: `steps` timed steps after 3 warm-up ones; writes its median step time (ms) to `out`.
// mode: "single" (no group), "local" (a rank's batch without DDP: the compute alone), "overlap", "no-overlap",
// "ps-sync" (rank 0 the server, the others workers).
void run_rank(const std::string& model_name, const std::string& mode, int rank, int world, int64_t batch, int steps,
              const std::string& store_path, const std::string& out) {
  set_num_threads(mode == "single" ? 2 : 1);  // one thread per rank; the single process has both cores
  manual_seed(1);
  auto model = make_model(model_name);
  auto opt = make_optimizer(model_name, *model);
  std::shared_ptr<dist::ProcessGroup> pg;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::ps::Worker> worker;
  if (mode == "overlap" || mode == "no-overlap") {
    auto store = std::make_shared<dist::FileStore>(store_path, world, std::chrono::seconds(60));
    pg = dist::new_group("tcp", store, rank, world);
    ddp = std::make_unique<dist::DistributedDataParallel>(model.ptr(), pg,
                                                          dist::DDPOptions{.overlap = mode == "overlap"});
  }
  if (mode == "ps-sync") {
    auto store = std::make_shared<dist::FileStore>(store_path, world, std::chrono::seconds(60));
    const dist::ps::Role role = dist::ps::role_of(rank, world, 1);
    if (role.is_server()) {
      dist::ps::Server(store, role, *opt).run();
      return;
    }
    worker = std::make_unique<dist::ps::Worker>(store, role, *opt);
    worker->start();
    // The workers' own group: a barrier before each step, the max over workers after.
    pg = dist::new_group("tcp", std::make_shared<dist::PrefixStore>("workers", store), role.index, world - 1);
    rank = role.index;
  }
  Generator gen(static_cast<uint64_t>(rank) + 7);
  Tensor x = model_name == "cnn" ? randn({batch, 1, 28, 28}, {}, &gen) : randn({batch, 784}, {}, &gen);
  Tensor y = randint(0, 10, {batch}, kInt64, &gen);
  std::vector<double> times;
  for (int s = 0; s < steps + 3; ++s) {
    if (pg) pg->barrier()->wait();
    const double t0 = bench::now_seconds();
    Tensor loss = nn::F::cross_entropy(ddp ? (*ddp)(x) : model(x), y);
    opt->zero_grad();
    loss.backward();
    if (ddp) ddp->finalize();
    if (worker) {
      worker->step();
    } else {
      opt->step();
    }
    if (s >= 3) times.push_back(bench::now_seconds() - t0);
  }
  worker.reset();  // tells the server this worker is done
  if (pg) {  // the max over ranks of each step's time
    Tensor t = tensor(times, {static_cast<int64_t>(times.size())}, kFloat64);
    pg->allreduce(t, dist::ReduceOp::Max)->wait();
    for (size_t i = 0; i < times.size(); ++i) times[i] = t.data_ptr<double>()[i];
    pg->barrier()->wait();
  }
  if (rank == 0) std::ofstream(out) << bench::median(times) * 1e3 << "\n";
}

// Runs `mode` on `world` forked ranks; returns rank 0's figure.
double run(const std::string& model, const std::string& mode, int world, int64_t batch, int steps,
           const std::string& dir) {
  static int counter = 0;
  const std::string store = dir + "/store" + std::to_string(counter++);
  const std::string out = dir + "/result";
  const std::string who = "ddp_bench " + mode;
  const bool ok = bench::run_forked_ranks(world, who.c_str(), [&](int r) {
    run_rank(model, mode, r, world, batch, steps, store, out);
    return 0;
  });
  double ms = -1;
  if (ok) std::ifstream(out) >> ms;
  return ms;
}

// Every configuration of one model, interleaved over `rounds`; prints the table.
void bench_model(const std::string& model, int64_t global_batch, int steps, int rounds, const std::string& dir) {
  struct Config {
    std::string label;
    const char* mode;
    int world;
    int64_t batch;
  };
  const int64_t half = global_batch / 2;
  const std::string b = std::to_string(global_batch), h = std::to_string(half);
  const std::vector<Config> configs{{"1 process, batch " + b + " (2 threads)", "single", 1, global_batch},
                                    {"1 rank's compute, batch " + h + " (1 thread)", "local", 1, half},
                                    {"2 ranks' compute at once, no communication", "local", 2, half},
                                    {"ddp 2 x " + h + ", overlap", "overlap", 2, half},
                                    {"ddp 2 x " + h + ", no overlap", "no-overlap", 2, half},
                                    {"sync ps: 1 server, 2 workers x " + h, "ps-sync", 3, half}};
  std::vector<std::vector<double>> ms(configs.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < configs.size(); ++c) {
      ms[c].push_back(run(model, configs[c].mode, configs[c].world, configs[c].batch, steps, dir));
    }
  }
  std::printf("%s step, median over %d rounds of %d steps (ms, max over ranks):\n",
              model == "cnn" ? "W3 CNN" : "W2 MLP", rounds, steps);
  std::vector<double> med;
  for (size_t c = 0; c < configs.size(); ++c) {
    med.push_back(bench::median(ms[c]));
    std::printf("  %-44s %8.2f\n", configs[c].label.c_str(), med.back());
  }
  const double comm = med[4] - med[2];
  std::printf("  communication: %.2f ms a step (no-overlap - 2 ranks' compute)\n", comm);
  if (comm > 0) {
    std::printf("  communication hidden behind backward: %.0f%% ((no-overlap - overlap) / communication)\n",
                100.0 * (med[4] - med[3]) / comm);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string which = argc > 3 ? argv[3] : "all";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_ddp_bench_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  if (which == "mlp" || which == "all") bench_model("mlp", 128, steps, rounds, dir);
  if (which == "cnn" || which == "all") bench_model("cnn", 64, steps, rounds, dir);
  std::filesystem::remove_all(dir);
  return 0;
}
