// The W2 program of BENCHMARKS.md W6 (deployment footprint): a whole program that builds the W2 MLP, makes its
// batch and takes training steps, and nothing else, so that what it links and how long it takes to start are
// the framework's alone. scripts/footprint.sh measures the files it needs beyond the system's and the time from
// exec to its first step done.
//
// One source, two programs: w2_program links kiln only; torch_w2_program (built where LibTorch is found) is
// the same program over LibTorch (-DW2_WITH_TORCH), and links no kiln.
//
//   w2_program [steps]    (default 1) prints one line: the loss after the last step, the milliseconds from
//                         main's start to the first step done and, when the variable W2_LAUNCHED_NS holds the
//                         wall-clock time (ns since the epoch) at which the program was launched, the
//                         milliseconds from then to the first step done: that one counts the dynamic loader's
//                         work before main too; with more than one step, the median time of the steps after
//                         the first
//
// W2: Linear(784,512)-ReLU-Linear(512,256)-ReLU-Linear(256,10), cross-entropy, SGD lr 0.01 momentum 0.9,
// batch 128 of x ~ N(0,1) [128,784], y ~ U{0..9}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef W2_WITH_TORCH
#include <torch/torch.h>
#else
#include <kiln/kiln.h>
#include <kiln/optim/optim.h>
#endif

int main(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  const char* launched = std::getenv("W2_LAUNCHED_NS");
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1;
  if (steps < 1) {
    std::fprintf(stderr, "usage: %s [steps >= 1]\n", argv[0]);
    return 2;
  }
  double first_ms = 0, first_since_launch_ms = -1, loss_value = 0;
  std::vector<double> step_ms;  // the steps after the first
  auto step_start = std::chrono::steady_clock::now();
#ifdef W2_WITH_TORCH
  namespace tnn = torch::nn;
  torch::manual_seed(1);
  tnn::Sequential model{tnn::Linear(784, 512), tnn::ReLU(), tnn::Linear(512, 256), tnn::ReLU(), tnn::Linear(256, 10)};
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)};
  const torch::Tensor x = torch::randn({128, 784}), y = torch::randint(10, {128}, torch::kInt64);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    torch::Tensor loss = tnn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
#else
  namespace nn = kiln::nn;
  kiln::manual_seed(1);
  nn::Sequential model{nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(), nn::Linear(256, 10)};
  kiln::optim::SGD opt{model->parameters(), {.lr = 0.01, .momentum = 0.9}};
  const kiln::Tensor x = kiln::randn({128, 784}), y = kiln::randint(10, {128}, kiln::kInt64);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    kiln::Tensor loss = nn::F::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
#endif
    const auto step_end = std::chrono::steady_clock::now();
    if (s > 0) step_ms.push_back(std::chrono::duration<double, std::milli>(step_end - step_start).count());
    step_start = step_end;
    if (s == 0) {
      first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (launched != nullptr) {
        const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch()).count();
        first_since_launch_ms = static_cast<double>(now_ns - std::atoll(launched)) / 1e6;
      }
    }
  }
  std::printf("loss %.4f after %d steps; first step done %.2f ms after main started", loss_value, steps, first_ms);
  if (launched != nullptr) std::printf(", %.2f ms after launch", first_since_launch_ms);
  if (!step_ms.empty()) {
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    std::printf("; later steps %.3f ms (median)", step_ms[step_ms.size() / 2]);
  }
  std::printf("\n");
  return 0;
}
