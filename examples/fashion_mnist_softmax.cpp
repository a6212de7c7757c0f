// Trains softmax regression (one linear layer, cross-entropy) on Fashion-MNIST with kiln's tensor library
// alone, with the gradients written out by hand (fashion_mnist_mlp does the same with autograd). For logits z = x W + b and
// p = softmax(z), the mean cross-entropy's gradients are dL/dz = (p - onehot(y)) / B, dL/dW = x^T dL/dz and
// dL/db = sum over the batch of dL/dz.
//
//   fashion_mnist_softmax [data_dir] [epochs]
// data_dir defaults to /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "fashion_mnist_data.h"

using namespace kiln;


int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  try {
    auto [x_train, y_train, x_test, y_test] = fashion_mnist::load(dir);
    std::printf("Fashion-MNIST: %lld training and %lld test images of %lld pixels\n",
                static_cast<long long>(x_train.size(0)), static_cast<long long>(x_test.size(0)),
                static_cast<long long>(x_train.size(1)));

    const int64_t batch = 64, classes = 10, n = x_train.size(0);
    const double lr = 0.05;
    Tensor w = zeros({x_train.size(1), classes});  // (784, 10)
    Tensor b = zeros({classes});                    // (10)
    Generator gen(0);

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor order = randperm(n, kInt64, &gen);
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t start = 0; start < n; start += batch) {
        Tensor idx = order.narrow(0, start, std::min(batch, n - start));
        Tensor xb = index_select(x_train, 0, idx);      // (B, 784)
        Tensor yb = index_select(y_train, 0, idx);      // (B)
        Tensor logits = addmm(b, xb, w);                // (B, 10)
        Tensor logp = log_softmax(logits, 1);
        loss_sum -= gather(logp, 1, yb.unsqueeze(1)).mean().item<double>();
        Tensor dz = (exp(logp) - one_hot(yb, classes).to(kFloat32)) / static_cast<double>(xb.size(0));
        w.sub_(mm(xb.t(), dz), lr);
        b.sub_(dz.sum({0}), lr);
        ++batches;
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Tensor predicted = argmax(addmm(b, x_test, w), 1);
      double accuracy = (predicted == y_test).to(kFloat32).mean().item<double>();
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
