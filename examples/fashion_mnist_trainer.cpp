// The CNN of fashion_mnist_cnn.cpp trained by the Trainer instead of a hand-written loop: the same nn modules
// and optimizer, put into a TrainModule that says what one step computes, and the data into a DataModule that
// says how it is split and loaded, while the Trainer runs the epochs, validation, logging (CSV and
// TensorBoard), checkpoints and the progress bar. Compare the two files to see what the Trainer takes off your
// hands; `kiln train --config configs/fashion_mnist_cnn.yaml` runs the same network from a config file with no
// C++ at all.
//
//   fashion_mnist_trainer [data_dir] [epochs] [runs_dir]
// data_dir defaults to /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
#include <kiln/kiln.h>
#include <kiln/optim/optim.h>
#include <kiln/trainer/callbacks.h>
#include <kiln/trainer/csv_logger.h>
#include <kiln/trainer/data_module.h>
#include <kiln/trainer/tensorboard_logger.h>
#include <kiln/trainer/trainer.h>

#include <cstdio>
#include <string>

using namespace kiln;

struct FashionCnn : trainer::TrainModule {
  nn::Sequential net{
      nn::Conv2d(1, 32, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),   // (B, 32, 14, 14)
      nn::Conv2d(32, 64, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),  // (B, 64, 7, 7)
      nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10)};

  FashionCnn() : TrainModule("FashionCnn") { register_module("net", net); }

  // x: (B, 1, 28, 28) -> scores (B, 10)
  Tensor forward(const Tensor& x) override { return net(x); }

  Tensor training_step(const data::Batch& batch, int64_t) override {
    Tensor loss = nn::F::cross_entropy(net(batch[0]), batch[1]);
    log("train/loss", loss, {.prog_bar = true});
    return loss;
  }
  Tensor validation_step(const data::Batch& batch, int64_t) override {
    evaluate(batch, "val");
    return {};
  }
  Tensor test_step(const data::Batch& batch, int64_t) override {
    evaluate(batch, "test");
    return {};
  }
  trainer::OptimizerSetup configure_optimizers() override {
    return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-3});
  }

 private:
  void evaluate(const data::Batch& batch, const std::string& split) {
    Tensor scores = net(batch[0]);
    log(split + "/loss", nn::F::cross_entropy(scores, batch[1]));
    log(split + "/acc", (scores.argmax(1) == batch[1]).to(kFloat32).mean(), {.prog_bar = true});
  }
};

// Images (N, 1, 28, 28) in [0, 1] and labels (N); 5,000 training images held out for validation.
struct FashionMnist : trainer::DataModule {
  std::string dir;
  std::shared_ptr<data::Dataset> train, val, test;

  explicit FashionMnist(std::string data_dir) : dir(std::move(data_dir)) { batch_size = 64; }

  void setup(trainer::Stage stage) override {
    if (stage == trainer::Stage::Fit && !train) {
      auto split = data::random_split(data::load_mnist(dir, data::MnistSplit::Train),
                                      std::vector<int64_t>{55000, 5000}, /*seed=*/0);
      train = split[0], val = split[1];
    }
    if (stage == trainer::Stage::Test && !test) test = data::load_mnist(dir, data::MnistSplit::Test);
  }
  std::unique_ptr<data::DataLoader> train_dataloader() override {
    return std::make_unique<data::DataLoader>(train,
                                              data::DataLoaderOptions{.batch_size = batch_size, .shuffle = true});
  }
  std::unique_ptr<data::DataLoader> val_dataloader() override {
    return std::make_unique<data::DataLoader>(val, data::DataLoaderOptions{.batch_size = 1000});
  }
  std::unique_ptr<data::DataLoader> test_dataloader() override {
    return std::make_unique<data::DataLoader>(test, data::DataLoaderOptions{.batch_size = 1000});
  }
};

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 3;
  const std::string runs = argc > 3 ? argv[3] : "runs";
  try {
    FashionMnist data(dir);
    manual_seed(0);
    FashionCnn model;
    trainer::TrainerOptions options;
    options.max_epochs = epochs;
    options.default_root_dir = runs;
    const int64_t version = trainer::next_version(runs, "fashion_mnist_trainer");
    options.loggers = {std::make_shared<trainer::CSVLogger>(runs, "fashion_mnist_trainer", version),
                       std::make_shared<trainer::TensorBoardLogger>(runs, "fashion_mnist_trainer", version)};
    options.callbacks = {std::make_shared<trainer::ModelCheckpoint>(
        trainer::ModelCheckpointOptions{.monitor = "val/acc", .mode = "max", .save_last = true})};
    trainer::Trainer t(options);
    t.fit(model, data);
    const auto results = t.test(model, data);
    std::printf("test accuracy %.2f%% (logs and checkpoints in %s)\n", 100.0 * results.at("test/acc"),
                t.log_dir().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
