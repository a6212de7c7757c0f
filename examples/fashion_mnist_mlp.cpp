// Trains a multilayer perceptron on Fashion-MNIST with kiln's nn and optim in a plain loop, the "lightweight
// loop" a user writes by hand: 784-512-256-10 with ReLU, cross-entropy, SGD with momentum 0.9 and a cosine
// learning rate, batches of 128.
//
//   fashion_mnist_mlp [data_dir] [epochs] [device]
// data_dir defaults to /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package); device is
// "cpu" (the default) or "cuda" / "cuda:N": the data and the model move there once, and every step runs there.
#include <kiln/kiln.h>
#include <kiln/optim/optim.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "fashion_mnist_data.h"

using namespace kiln;

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  try {
    const Device device = argc > 3 ? Device(argv[3]) : kCPU;
    auto [x_train, y_train, x_test, y_test] = fashion_mnist::load(dir);
    std::printf("Fashion-MNIST: %lld training and %lld test images of %lld pixels\n",
                static_cast<long long>(x_train.size(0)), static_cast<long long>(x_test.size(0)),
                static_cast<long long>(x_train.size(1)));
    const int64_t batch = 128, n = x_train.size(0);
    auto model = nn::Sequential(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(),
                                nn::Linear(256, 10));
    model->to(device);
    x_train = x_train.to(device), y_train = y_train.to(device);
    x_test = x_test.to(device), y_test = y_test.to(device);
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    // The learning rate follows a cosine from 0.05 down to 0 over the run's steps: at a constant rate the test
    // accuracy still swings by a point from one epoch to the next at the end.
    const int64_t steps_per_epoch = (n + batch - 1) / batch;
    optim::CosineAnnealingLR schedule(opt, epochs * steps_per_epoch);
    Generator gen(0);

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor order = randperm(n, kInt64, &gen).to(device);
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t start = 0; start < n; start += batch) {
        Tensor idx = order.narrow(0, start, std::min(batch, n - start));
        Tensor loss = nn::F::cross_entropy(model(index_select(x_train, 0, idx)), index_select(y_train, 0, idx));
        opt.zero_grad();
        loss.backward();  // every parameter's gradient, by autograd
        opt.step();
        schedule.step();
        loss_sum += loss.item<double>();
        ++batches;
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double accuracy;
      {
        NoGradGuard no_grad;
        accuracy = (argmax(model(x_test), 1) == y_test).to(kFloat32).mean().item<double>();
      }
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.2f s\n", epoch, loss_sum / batches,
                  100 * accuracy, seconds);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
