// The Trainer's overhead per step: the same model, data and optimizer trained for one epoch by a plain loop
// (the "lightweight loop" of examples/) and by Trainer::fit, interleaved in one process; the figure is the
// ratio of median step times (target: under 1.02). Two Trainer variants: bare (no progress bar, logger or
// checkpoints) and as `kiln train` runs (progress bar to /dev/null, CSV logger, a checkpoint at the epoch's end).
//   trainer_bench [batches] [reps]
// Workloads: BENCHMARKS.md's W2 (MLP 784-512-256-10, SGD momentum 0.9, batch 128) and W3 (the CNN, Adam 1e-3,
// batch 64), on in-memory random data so that only the loops differ.
#include <kiln/kiln.h>
#include <kiln/optim/optim.h>
#include <kiln/trainer/callbacks.h>
#include <kiln/trainer/csv_logger.h>
#include <kiln/trainer/trainer.h>

#include <cstdio>
#include <filesystem>

#include "bench_util.h"

using namespace kiln;

namespace {

struct Workload {
  const char* name;
  std::function<nn::Sequential()> make_model;
  std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)> make_opt;
  Shape example;
  int64_t batch;
};

struct Module : trainer::TrainModule {
  nn::Sequential net;
  std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)> make_opt;
  Module(nn::Sequential n, decltype(make_opt) f) : TrainModule("Bench"), net(std::move(n)), make_opt(std::move(f)) {
    register_module("net", net);
  }
  Tensor training_step(const data::Batch& b, int64_t) override {
    Tensor loss = nn::F::cross_entropy(net(b[0]), b[1]);
    log("train/loss", loss, {.prog_bar = true});
    return loss;
  }
  trainer::OptimizerSetup configure_optimizers() override { return make_opt(parameters()); }
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t batches = argc > 1 ? std::atoll(argv[1]) : 40;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const std::string root = (std::filesystem::temp_directory_path() / "kiln_trainer_bench").string();
  std::printf("threads %d, %lld batches per epoch, median of %d epochs\n", get_num_threads(),
              static_cast<long long>(batches), reps);
  const std::vector<Workload> workloads{
      {"W2 MLP", [] { return nn::Sequential(nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256),
                                           nn::ReLU(), nn::Linear(256, 10)); },
       [](std::vector<Tensor> p) { return std::make_shared<optim::SGD>(p, optim::SGDOptions{.lr = 0.01, .momentum = 0.9}); },
       {784}, 128},
      {"W3 CNN", [] { return nn::Sequential(
                          nn::Conv2d(1, 32, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(32, 64, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10)); },
       [](std::vector<Tensor> p) { return std::make_shared<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3}); },
       {1, 28, 28}, 64},
  };
  std::printf("%-8s %12s %14s %9s %14s %9s\n", "", "loop ms/step", "trainer ms/step", "ratio", "kiln-train ms", "ratio");
  for (const Workload& w : workloads) {
    Shape shape{batches * w.batch};
    shape.insert(shape.end(), w.example.begin(), w.example.end());
    Generator gen(1);
    Tensor x = randn(shape, {}, &gen);
    Tensor y = randint(0, 10, {batches * w.batch}, kInt64, &gen);
    auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
    data::DataLoader loader(ds, {.batch_size = w.batch, .shuffle = true});

    Module loop_module(w.make_model(), w.make_opt);
    Module bare_module(w.make_model(), w.make_opt);
    Module full_module(w.make_model(), w.make_opt);
    auto loop_opt = w.make_opt(loop_module.parameters());
    double sink = 0;
    auto plain_loop = [&] {
      loop_module.train();
      for (const data::Batch& b : loader) {
        Tensor loss = nn::F::cross_entropy(loop_module.net(b[0]), b[1]);
        loop_opt->zero_grad();
        loss.backward();
        loop_opt->step();
        sink += loss.item<double>();
      }
    };
    trainer::TrainerOptions bare;
    bare.max_epochs = 1;
    bare.enable_progress_bar = bare.enable_checkpointing = bare.enable_model_summary = bare.logger = false;
    bare.default_root_dir = root;
    std::FILE* devnull = std::fopen("/dev/null", "w");
    trainer::TrainerOptions full;
    full.max_epochs = 1;
    full.enable_model_summary = false;
    full.default_root_dir = root;
    full.callbacks = {std::make_shared<trainer::ProgressBar>(trainer::ProgressBarOptions{.out = devnull})};
    auto run_trainer = [&](Module& m, const trainer::TrainerOptions& o) { trainer::Trainer(o).fit(m, loader); };
    const auto t = bench::time_interleaved(
        {plain_loop, [&] { run_trainer(bare_module, bare); }, [&] { run_trainer(full_module, full); }}, reps, 1);
    const double per = static_cast<double>(batches) * 1e-3;
    std::printf("%-8s %12.2f %14.2f %9.3f %14.2f %9.3f\n", w.name, t[0] / per, t[1] / per, t[1] / t[0], t[2] / per,
                t[2] / t[0]);
    std::fclose(devnull);
    bench::do_not_optimize(sink);
  }
  std::filesystem::remove_all(root);
  return 0;
}
