// Your own `kiln` command line: a model and a dataset of this program's, registered by name, and every kiln
// command (train, eval, predict, export, bench, lr-find, scale-batch-size) working on them from a run.yaml, with
// checkpoints, resume, loggers and callbacks as for the built-in ones (kiln/tools/registry.h).
//
//   model.name: lenet    LeCun et al.'s LeNet-5 layout for images: two 5x5 convolutions (model.args.channels,
//                        default [6, 16]; the first padded to keep the size, as for 28 x 28 inputs) each followed
//                        by 2x2 pooling (model.args.pool: max or avg), then fully connected layers
//                        (model.args.fc, default [120, 84]), activation model.args.activation (relu or tanh)
//   data.name: spirals   two interleaved spirals in the plane, class 0 and class 1: data.args.samples points
//                        (default 2000), data.args.turns turns (default 1.5), Gaussian noise of std
//                        data.args.noise (default 0.05); data.val_size of them validate, as many test (so
//                        data.val_size, 5000 by default for Fashion-MNIST, must come down below samples / 2)
//
//   ./build/examples/custom_cli train --set model.name=lenet --set trainer.max_epochs=1
//   ./build/examples/custom_cli train --set data.name=spirals --set data.val_size=300 --set model.name=mlp \
//       --set model.hidden=[64,64] --set data.args.turns=2 --set trainer.max_epochs=30
//   ./build/examples/custom_cli train --help          (lists the two, with their docs)
//
// The first trains LeNet-5 on Fashion-MNIST (the built-in dataset, from Debian's dataset-fashion-mnist); the
// second trains the built-in MLP on the registered spirals.
#include <kiln/kiln.h>
#include <kiln/tools/cli.h>
#include <kiln/tools/registry.h>

#include <cmath>
#include <numbers>

using namespace kiln;
using kiln::tools::Args;
using kiln::tools::DataInfo;

namespace {

// Submodule names: features (convolutions, activations and pools), classifier (the linear layers).
class LeNet : public nn::Module {
 public:
  LeNet(const Args& args, const DataInfo& data) : nn::Module("LeNet") {
    const auto channels = args.get<std::vector<int64_t>>("channels", {6, 16});
    const auto fc = args.get<std::vector<int64_t>>("fc", {120, 84});
    const auto activation = args.get<std::string>("activation", "relu");
    const auto pool = args.get<std::string>("pool", "max");
    KILN_CHECK(channels.size() == 2 && channels[0] >= 1 && channels[1] >= 1,
               "model.args.channels: expected two positive widths, like [6, 16]");
    KILN_CHECK(activation == "relu" || activation == "tanh", "model.args.activation: expected relu or tanh, found ",
               activation);
    KILN_CHECK(pool == "max" || pool == "avg", "model.args.pool: expected max or avg, found ", pool);
    KILN_CHECK(data.input_shape.size() == 3, "model lenet needs images (C, H, W); the data gives examples of shape ",
               shape_str(data.input_shape));
    const auto act = [&]() -> std::shared_ptr<nn::Module> {
      if (activation == "relu") return nn::ReLU().ptr();
      return nn::Tanh().ptr();
    };
    const auto downsample = [&]() -> std::shared_ptr<nn::Module> {
      if (pool == "max") return nn::MaxPool2d(2).ptr();
      return nn::AvgPool2d(2).ptr();
    };
    int64_t h = data.input_shape[1], w = data.input_shape[2];
    features->push_back(nn::Conv2d(data.input_shape[0], channels[0], 5, nn::Conv2dOptions{.padding = 2}));
    features->push_back(act());
    features->push_back(downsample());
    h /= 2, w /= 2;
    KILN_CHECK(h >= 6 && w >= 6, "model lenet: images of ", shape_str(data.input_shape),
               " are too small for the second 5x5 convolution");
    features->push_back(nn::Conv2d(channels[0], channels[1], 5));
    features->push_back(act());
    features->push_back(downsample());
    h = (h - 4) / 2, w = (w - 4) / 2;
    classifier->push_back(nn::Flatten());
    int64_t width = channels[1] * h * w;
    for (int64_t f : fc) {
      classifier->push_back(nn::Linear(width, f));
      classifier->push_back(act());
      width = f;
    }
    classifier->push_back(nn::Linear(width, data.num_classes));
    register_module("features", features);
    register_module("classifier", classifier);
  }

  Tensor forward(const Tensor& x) override { return classifier(features(x)); }

  nn::Sequential features, classifier;
};

// Point i of n on spiral `arm` (0 or 1): radius growing from 0 to 1 over `turns` turns, the second arm the
// first turned by half a circle.
tools::DataSplits spirals(const Args& args, const tools::RunConfig::Data& config) {
  const int64_t n = args.get<int64_t>("samples", 2000);
  const double turns = args.get<double>("turns", 1.5);
  const double noise = args.get<double>("noise", 0.05);
  KILN_CHECK(n >= 10 && turns > 0 && noise >= 0, "data.args: spirals needs samples >= 10, turns > 0 and noise >= 0");
  KILN_CHECK(2 * config.val_size < n, "data.val_size (", config.val_size, ") must be under half of data.args.samples (",
             n, "): as many again are held out for the test");
  Generator gen(static_cast<uint64_t>(config.seed));
  const Tensor label = randint(0, 2, {n}, kInt64, &gen);
  const Tensor t = rand({n}, kFloat64, &gen);  // where along its arm each point lies
  const Tensor angle = t * (2 * std::numbers::pi * turns) + label.to(kFloat64) * std::numbers::pi;
  const Tensor radius = t;
  Tensor x = stack({radius * cos(angle), radius * sin(angle)}, 1) + randn({n, 2}, kFloat64, &gen) * noise;
  x = x.to(kFloat32);
  const int64_t held = config.val_size, train = n - 2 * held;
  const auto part = [&](int64_t start, int64_t size) -> std::shared_ptr<data::Dataset> {
    return std::make_shared<data::TensorDataset>(
        std::vector<Tensor>{x.narrow(0, start, size).contiguous(), label.narrow(0, start, size).contiguous()});
  };
  tools::DataSplits out;
  out.train = part(0, train);
  if (held > 0) {
    out.val = part(train, held);
    out.test = part(train + held, held);
  }
  out.info = DataInfo{.input_shape = {2}, .num_classes = 2};
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tools::register_model("lenet", {.build = [](const Args& args, const DataInfo& data) -> std::shared_ptr<nn::Module> {
                                    return std::make_shared<LeNet>(args, data);
                                  },
                                  .doc = "LeNet-5 for images (args: channels, fc, activation, pool)"});
  tools::register_dataset("spirals", {.build = spirals, .doc = "two interleaved spirals (args: samples, turns, noise)"});
  return tools::run_cli({argv + 1, argv + argc});
}
