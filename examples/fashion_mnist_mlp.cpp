// Trains a two-layer perceptron on Fashion-MNIST with kiln's autograd: forward is written once, backward()
// computes every gradient, and SGD with momentum updates the weights under NoGradGuard. This is the
// "lightweight loop" a user writes by hand; nn modules, optimizers and the Trainer will shorten it.
//
//   fashion_mnist_mlp [data_dir] [epochs]
// data_dir defaults to /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
#include <kiln/kiln.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"

using namespace kiln;

namespace {

// A weight of shape (in, out) drawn as PyTorch's nn.Linear does: uniform in +-1/sqrt(in).
Tensor linear_weight(int64_t in, int64_t out, Generator& gen) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  Tensor w = empty({in, out});
  uniform_(w, -bound, bound, &gen);
  return w.requires_grad_();
}

Tensor linear_bias(int64_t in, int64_t out, Generator& gen) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  Tensor b = empty({out});
  uniform_(b, -bound, bound, &gen);
  return b.requires_grad_();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  try {
    auto [x_train, y_train, x_test, y_test] = fashion_mnist::load(dir);
    std::printf("Fashion-MNIST: %lld training and %lld test images of %lld pixels\n",
                static_cast<long long>(x_train.size(0)), static_cast<long long>(x_test.size(0)),
                static_cast<long long>(x_train.size(1)));

    const int64_t batch = 64, hidden = 256, classes = 10, n = x_train.size(0);
    const double lr = 0.05, momentum = 0.9;
    Generator gen(0);
    std::vector<Tensor> params = {linear_weight(784, hidden, gen), linear_bias(784, hidden, gen),
                                  linear_weight(hidden, classes, gen), linear_bias(hidden, classes, gen)};
    std::vector<Tensor> velocity;
    for (const Tensor& p : params) velocity.push_back(zeros_like(p));
    auto forward = [&](const Tensor& x) {  // x: (B, 784) -> logits (B, 10)
      Tensor h = relu(addmm(params[1], x, params[0]));  // (B, 256)
      return addmm(params[3], h, params[2]);
    };

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor order = randperm(n, kInt64, &gen);
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t start = 0; start < n; start += batch) {
        Tensor idx = order.narrow(0, start, std::min(batch, n - start));
        Tensor xb = index_select(x_train, 0, idx);  // (B, 784)
        Tensor yb = index_select(y_train, 0, idx);  // (B)
        // Mean cross-entropy: -log p(true class).
        Tensor loss = -gather(log_softmax(forward(xb), 1), 1, yb.unsqueeze(1)).mean();
        for (const Tensor& p : params) p.set_grad(Tensor());
        loss.backward();
        {
          NoGradGuard no_grad;  // the update itself is not part of any graph
          for (size_t i = 0; i < params.size(); ++i) {
            velocity[i].mul_(momentum).add_(params[i].grad());
            params[i].sub_(velocity[i], lr);
          }
        }
        loss_sum += loss.item<double>();
        ++batches;
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double accuracy;
      {
        NoGradGuard no_grad;
        Tensor predicted = argmax(forward(x_test), 1);
        accuracy = (predicted == y_test).to(kFloat32).mean().item<double>();
      }
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.2f s\n", epoch, loss_sum / batches,
                  100 * accuracy, seconds);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
