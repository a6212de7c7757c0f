// Training steps on the GPU (BENCHMARKS.md W2 and W3, on a CUDA device): the MLP with SGD and the CNN with Adam,
// at the workload's batch and at a 16x larger one, in float32 and (the larger batches) in TF32. A step is zero_grad + forward + loss + backward + step, then
// a device synchronize so the host clock sees the GPU's time; the median over the timed steps is reported.
// bench/torch_gpu_train.py runs the same steps in PyTorch with the same TF32 setting (PyTorch's default would
// give its convolutions TF32 against kiln's float32); scripts/gpu_check.sh prints the two side by side.
//
// Output: one line per case, "RESULT <case> <median ms/step> <peak MiB on the device>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln;

namespace {

template <typename Step>
double median_ms(Step&& step, int warmup, int timed) {
  for (int i = 0; i < warmup; ++i) step();
  cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < timed; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

void report(const char* name, double ms) {
  double peak = static_cast<double>(cuda::memory_stats().peak_allocated_bytes) / (1 << 20);
  std::printf("RESULT %s %.4f %.1f\n", name, ms, peak);
  std::fflush(stdout);
}

void mlp(int64_t batch, const char* name) {
  cuda::empty_cache();
  cuda::reset_peak_memory_stats();
  auto model = nn::Sequential(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(), nn::Linear(256, 10));
  model->to(Device::cuda());
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({batch, 784}, Device::cuda());
  Tensor y = randint(0, 10, {batch}, TensorOptions(kInt64).device(Device::cuda()));
  report(name, median_ms([&] {
    opt.zero_grad();
    Tensor loss = nn::F::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
  }, 20, 200));
}

void cnn(int64_t batch, int timed, const char* name) {
  cuda::empty_cache();
  cuda::reset_peak_memory_stats();
  auto model = nn::Sequential(nn::Conv2d(1, 32, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                              nn::Conv2d(32, 64, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                              nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10));
  model->to(Device::cuda());
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  Tensor x = randn({batch, 1, 28, 28}, Device::cuda());
  Tensor y = randint(0, 10, {batch}, TensorOptions(kInt64).device(Device::cuda()));
  report(name, median_ms([&] {
    opt.zero_grad();
    Tensor loss = nn::F::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
  }, 10, timed));
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  try {
    mlp(128, "W2_mlp_b128");
    mlp(2048, "W2_mlp_b2048");
    cnn(64, 100, "W3_cnn_b64");
    cnn(1024, 30, "W3_cnn_b1024");
    // TF32 on tensor cores for the matrix products and convolutions (kiln's default is true float32).
    cuda::set_allow_tf32(true);
    mlp(2048, "W2_mlp_b2048_tf32");
    cnn(1024, 30, "W3_cnn_b1024_tf32");
    cuda::set_allow_tf32(false);
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return 0;
}
