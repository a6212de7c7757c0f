// Whole training steps on the GPU against the same steps on the CPU: modules moved with to(), autograd through
// every op of the forward and backward passes, losses and optimizers updating on the device. Each model starts
// from the same weights on both devices and takes a few steps on the same batches; the losses and the final
// weights must agree within float32 tolerances (summation orders differ between the devices).
#include <map>
#include <random>

#include "cuda/cuda_test_util.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "kiln/tools/generate.h"
#include "kiln/tools/models.h"
#include "kiln/trainer/batch_size_finder.h"
#include "trainer/trainer_test_util.h"

namespace kiln {
namespace {

using test::CudaTest;

// A copy of `model` (built by make) with the same weights, on `device`.
template <typename Make>
auto twin(const Make& make, const nn::StateDict& weights, Device device) {
  auto m = make();
  m->load_state_dict(weights);
  m->to(device);
  return m;
}

void expect_same_weights(nn::Module& gpu, nn::Module& cpu, double rtol, const std::string& context) {
  auto g = gpu.named_parameters(), c = cpu.named_parameters();
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i)
    test::expect_matches_cpu(g[i].second.detach(), c[i].second.detach(), context + " " + c[i].first, rtol, rtol);
}

// Trains twins of make() on both devices for `steps` steps of loss(model, x, y), comparing the losses each step
// and the weights at the end.
template <typename Make, typename MakeOpt, typename Loss>
void train_both(const Make& make, const MakeOpt& make_opt, const Loss& loss, const Tensor& x, const Tensor& y,
                int steps, double rtol, const std::string& context) {
  auto reference = make();
  nn::StateDict weights = reference->state_dict();
  auto cpu = twin(make, weights, kCPU);
  auto gpu = twin(make, weights, Device::cuda());
  auto cpu_opt = make_opt(cpu->parameters());
  auto gpu_opt = make_opt(gpu->parameters());
  Tensor xg = x.to(Device::cuda()), yg = y.to(Device::cuda());
  for (int step = 0; step < steps; ++step) {
    Tensor lc = loss(*cpu, x, y);
    Tensor lg = loss(*gpu, xg, yg);
    EXPECT_TRUE(lg.is_cuda());
    EXPECT_NEAR(lg.item<double>(), lc.item<double>(), rtol * std::max(1.0, std::abs(lc.item<double>())))
        << context << " loss at step " << step;
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    lc.backward();
    lg.backward();
    cpu_opt.step();
    gpu_opt.step();
  }
  expect_same_weights(*gpu, *cpu, rtol, context);
}

// The classifiers' loss: cross-entropy of (N, K) scores.
template <typename Make, typename MakeOpt>
void train_both(const Make& make, const MakeOpt& make_opt, const Tensor& x, const Tensor& y, int steps, double rtol,
                const std::string& context) {
  train_both(make, make_opt, [](nn::Module& m, const Tensor& in, const Tensor& t) { return nn::F::cross_entropy(m(in), t); },
             x, y, steps, rtol, context);
}

TEST_F(CudaTest, MlpTrainingStepsMatchTheCpu) {
  uint32_t seed = test::fresh_seed();
  manual_seed(seed);
  auto make = [] {
    return nn::Sequential(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(), nn::Linear(256, 10));
  };
  Tensor x = randn({64, 784});
  Tensor y = randint(0, 10, {64});
  train_both(make, [](std::vector<Tensor> p) { return optim::SGD(std::move(p), {.lr = 0.05, .momentum = 0.9}); }, x, y,
             4, 2e-4, "MLP + SGD seed " + std::to_string(seed));
}

TEST_F(CudaTest, CnnTrainingStepsMatchTheCpu) {
  uint32_t seed = test::fresh_seed();
  manual_seed(seed);
  auto make = [] {
    return nn::Sequential(nn::Conv2d(1, 8, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(8, 16, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(16 * 7 * 7, 32), nn::ReLU(), nn::Linear(32, 10));
  };
  Tensor x = randn({16, 1, 28, 28});
  Tensor y = randint(0, 10, {16});
  train_both(make, [](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.lr = 1e-3}); }, x, y, 3, 2e-4,
             "CNN + Adam seed " + std::to_string(seed));
}

// NOTE: no layer with a bias right before the BatchNorm: BatchNorm removes a per-feature shift, so that bias's
// gradient is zero up to rounding noise, and Adam's normalized step turns the noise into full-size updates that
// differ between any two devices.
TEST_F(CudaTest, NormalizationLayersTrainOnTheGpu) {
  uint32_t seed = test::fresh_seed();
  manual_seed(seed);
  auto make = [] {
    return nn::Sequential(nn::BatchNorm1d(20), nn::Linear(20, 32), nn::LayerNorm(Shape{32}), nn::GELU(),
                          nn::Linear(32, 32), nn::SiLU(), nn::Linear(32, 10));
  };
  Tensor x = randn({24, 20});
  Tensor y = randint(0, 10, {24});
  train_both(make, [](std::vector<Tensor> p) { return optim::AdamW(std::move(p), {.lr = 1e-2}); }, x, y, 3, 2e-4,
             "BatchNorm/LayerNorm + AdamW seed " + std::to_string(seed));
}

// A small convolutional autoencoder-like stack that goes down with a strided Conv2d and back up with
// ConvTranspose2d and Upsample (bilinear), trained with NAdam: the new spatial layers and optimizer on the device.
TEST_F(CudaTest, TransposedConvUpsampleAndNAdamTrainOnTheGpu) {
  uint32_t seed = test::fresh_seed();
  manual_seed(seed);
  auto make = [] {
    return nn::Sequential(nn::Conv2d(1, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1}), nn::ReLU(),
                          nn::ConvTranspose2d(4, 3, 4, nn::ConvTranspose2dOptions{.stride = 2, .padding = 1}),
                          nn::Upsample(nn::UpsampleOptions{.scale_factor = {0.5, 0.5}, .mode = "bilinear"}),
                          nn::Flatten(), nn::Linear(3 * 4 * 4, 10));
  };
  Tensor x = randn({6, 1, 8, 8});
  Tensor y = randint(0, 10, {6});
  train_both(make, [](std::vector<Tensor> p) { return optim::NAdam(std::move(p), {.lr = 1e-2}); }, x, y, 3, 2e-4,
             "ConvTranspose2d + Upsample + NAdam seed " + std::to_string(seed));
}

// A sequence classifier over a recurrent stack: its final hidden states (both directions of the top layer) into a
// linear head; `lengths` make the batch ragged, so the masking runs on the device too.
class RecurrentClassifier : public nn::Module {
 public:
  RecurrentClassifier(std::shared_ptr<nn::RNNBaseImpl> rnn, std::vector<int64_t> lengths)
      : Module("RecurrentClassifier"), rnn_(register_module("rnn", std::move(rnn))), lengths_(std::move(lengths)) {
    head_ = register_module("head", nn::Linear(2 * rnn_->hidden_size(), 5).ptr());
  }
  // x: (N, L, F), batch-first.
  Tensor forward(const Tensor& x) override {
    const nn::RNNState s = rnn_->forward(x, {}, lengths_).state;
    const int64_t layers = rnn_->options().num_layers;
    return head_->forward(cat({s.h.select(0, 2 * layers - 2), s.h.select(0, 2 * layers - 1)}, 1));
  }

 private:
  std::shared_ptr<nn::RNNBaseImpl> rnn_;
  std::shared_ptr<nn::LinearImpl> head_;
  std::vector<int64_t> lengths_;
};

TEST_F(CudaTest, LstmAndGruTrainingStepsMatchTheCpu) {
  uint32_t seed = test::fresh_seed();
  manual_seed(seed);
  const nn::RNNOptions o{.num_layers = 2, .batch_first = true, .bidirectional = true};
  const std::vector<int64_t> lengths = {12, 7, 12, 1, 9, 3};
  const Tensor x = randn({6, 12, 8});
  const Tensor y = randint(0, 5, {6});
  train_both([&] { return std::make_shared<RecurrentClassifier>(nn::LSTM(8, 16, o).ptr(), lengths); },
             [](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.lr = 1e-2}); }, x, y, 3, 2e-4,
             "LSTM + Adam seed " + std::to_string(seed));
  train_both([&] { return std::make_shared<RecurrentClassifier>(nn::GRU(8, 16, o).ptr(), lengths); },
             [](std::vector<Tensor> p) { return optim::SGD(std::move(p), {.lr = 0.1}); }, x, y, 3, 2e-4,
             "GRU + SGD seed " + std::to_string(seed));
}

// gpt-mini (kiln train's language model): embeddings, causal attention, LayerNorm, GELU and the per-position
// cross-entropy on the GPU against the CPU, then generation on the device.
TEST_F(CudaTest, GptMiniTrainingStepsMatchTheCpuAndItGeneratesOnTheGpu) {
  uint32_t seed = test::fresh_seed();
  manual_seed(seed);
  auto make = [] { return std::make_shared<tools::GptMini>(256, 16, 2, 2, 32, 0.0); };
  // Every position's next token a class: (N, S, 256) scores against (N, S) labels.
  auto loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
    return nn::F::cross_entropy(m(x).reshape({-1, 256}), y.reshape({-1}));
  };
  const Tensor x = randint(0, 256, {4, 16}), y = randint(0, 256, {4, 16});
  train_both(make, [](std::vector<Tensor> p) { return optim::SGD(std::move(p), {.lr = 0.1}); }, loss, x, y, 3, 2e-4,
             "gpt-mini + SGD seed " + std::to_string(seed));
  auto gpu = make();
  gpu->to(Device::cuda());
  const std::vector<int64_t> out = tools::generate(*gpu, tools::tokens_of("ab"), {.max_new_tokens = 40, .seed = 1});
  ASSERT_EQ(out.size(), 40u);
  for (int64_t t : out) EXPECT_TRUE(t >= 0 && t < 256) << t;
  EXPECT_EQ(tools::generate(*gpu, tools::tokens_of("ab"), {.max_new_tokens = 40, .seed = 1}), out);
}

// Activation checkpointing on the GPU: gpt-mini with dropout, its blocks checkpointed or not, from the same
// weights and seed: the recomputed blocks draw the same masks from the device's Philox stream, so the loss and
// every gradient are the plain run's bits. Deterministic algorithms, so that the embeddings' gradients (atomic
// adds otherwise) are the same bits on both runs.
TEST_F(CudaTest, CheckpointedGptMiniGivesThePlainGradientsBitForBit) {
  DeterministicAlgorithmsGuard deterministic(true);
  manual_seed(test::fresh_seed());
  auto plain = std::make_shared<tools::GptMini>(256, 16, 2, 2, 32, 0.2);
  auto checkpointed = std::make_shared<tools::GptMini>(256, 16, 2, 2, 32, 0.2);
  checkpointed->load_state_dict(plain->state_dict());
  checkpointed->checkpoint_activations = true;
  const Tensor x = randint(0, 256, {4, 16}).to(Device::cuda()), y = randint(0, 256, {64}).to(Device::cuda());
  std::vector<std::vector<Tensor>> grads;
  for (auto& net : {plain, checkpointed}) {
    net->to(Device::cuda());
    manual_seed(5);
    const Tensor loss = nn::F::cross_entropy(net->forward(x).reshape({-1, 256}), y);
    loss.backward();
    std::vector<Tensor> g{loss.detach().cpu()};
    for (const Tensor& p : net->parameters()) g.push_back(p.grad().cpu());
    grads.push_back(g);
  }
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(grads[0][i].equal(grads[1][i])) << "tensor " << i;
}

// The batch-size search on the GPU under a cap on what the caching allocator may reserve: the cap bounds it
// (the out-of-memory error names it), the module comes back unchanged, and a plain fit at the answer runs under
// the same cap.
TEST_F(CudaTest, BatchSizeSearchIsBoundedByADeviceCap) {
  struct LiftCap {
    ~LiftCap() { cuda::set_memory_limit(0); }
  } lift;
  manual_seed(3);
  auto data = std::make_shared<data::TensorDataset>(std::vector<Tensor>{randn({1 << 16, 64}), randn({1 << 16, 1})});
  auto make = [&](int64_t b) {
    return std::make_unique<data::DataLoader>(data, data::DataLoaderOptions{.batch_size = b});
  };
  test::WideMlp m(64, 4096);
  const nn::StateDict before = m.state_dict();
  std::map<std::string, Tensor> kept;
  for (const auto& [name, t] : before) kept[name] = t.clone();
  trainer::TrainerOptions o;
  o.accelerator = "cuda";
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  cuda::synchronize();
  cuda::empty_cache();
  const size_t cap = cuda::memory_reserved() + (size_t{256} << 20);
  cuda::set_memory_limit(cap);
  const trainer::BatchSizeResult r = trainer::scale_batch_size(m, make, o, {.init_val = 64});
  EXPECT_EQ(r.stopped_by, "out of memory");
  ASSERT_GE(r.batch_size, 64);
  ASSERT_FALSE(r.trials.back().fits);
  EXPECT_NE(r.trials.back().error.find("out of memory"), std::string::npos) << r.trials.back().error;
  EXPECT_NE(r.trials.back().error.find("set_memory_limit"), std::string::npos) << r.trials.back().error;
  for (const auto& [name, t] : m.state_dict()) EXPECT_TRUE(equal(t.to(kCPU), kept.at(name).to(kCPU))) << name;
  cuda::empty_cache();
  trainer::TrainerOptions plain = o;
  plain.max_steps = 3;
  auto train = make(r.batch_size);
  EXPECT_NO_THROW(trainer::Trainer(plain).fit(m, *train));
}

}  // namespace
}  // namespace kiln
