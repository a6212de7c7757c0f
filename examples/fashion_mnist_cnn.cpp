// Trains a small convolutional network on Fashion-MNIST with kiln's nn and optim in a plain loop:
// conv(1->32, 3x3, pad 1) + ReLU + max-pool 2, conv(32->64, 3x3, pad 1) + ReLU + max-pool 2,
// linear(3136->128) + ReLU, linear(128->10); cross-entropy, Adam (lr 1e-3), batches of 64.
//
//   fashion_mnist_cnn [data_dir] [epochs] [device]
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
    // The images stay uint8 and each batch is prepared as it is taken: that keeps 165 MB of float32 copies
    // out of memory, and costs tens of microseconds a batch.
    auto [x_train, y_train, x_test, y_test] = fashion_mnist::load_raw(dir);
    auto images = [](const Tensor& raw) { return fashion_mnist::prepare(raw).view({-1, 1, 28, 28}); };
    const int64_t batch = 64, n = x_train.size(0);
    const int64_t eval_batch = 500;  // faster than 64 a batch; the first convolution's output is then 50 MB

    auto model = nn::Sequential(
        nn::Conv2d(1, 32, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),   // (B, 32, 14, 14)
        nn::Conv2d(32, 64, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),  // (B, 64, 7, 7)
        nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10));
    std::printf("%s\n%lld parameters\n", model->str().c_str(), static_cast<long long>(model->num_parameters()));
    model->to(device);
    x_train = x_train.to(device), y_train = y_train.to(device);
    x_test = x_test.to(device), y_test = y_test.to(device);
    optim::Adam opt(model->parameters(), {.lr = 1e-3});
    Generator gen(0);

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      model->train();
      Tensor order = randperm(n, kInt64, &gen).to(device);
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t start = 0; start < n; start += batch) {
        Tensor idx = order.narrow(0, start, std::min(batch, n - start));
        Tensor loss =
            nn::F::cross_entropy(model(images(index_select(x_train, 0, idx))), index_select(y_train, 0, idx));
        opt.zero_grad();
        loss.backward();
        opt.step();
        loss_sum += loss.item<double>();
        ++batches;
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      model->eval();
      int64_t correct = 0;
      {
        NoGradGuard no_grad;
        for (int64_t start = 0; start < x_test.size(0); start += eval_batch) {
          Tensor logits = model(images(x_test.narrow(0, start, eval_batch)));
          correct += (argmax(logits, 1) == y_test.narrow(0, start, eval_batch)).sum().item<int64_t>();
        }
      }
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s\n", epoch, loss_sum / batches,
                  100.0 * static_cast<double>(correct) / static_cast<double>(x_test.size(0)), seconds);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
