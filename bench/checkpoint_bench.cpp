// Activation checkpointing's trade (autograd::checkpoint): the memory a training step needs against its time.
// A stack of transformer encoder layers (gpt-mini's shape scaled up: d_model 256, 4 heads, feed-forward 1024,
// batch 8 x 128 tokens, pre-norm) runs forward + backward plain and with every layer checkpointed, interleaved.
// Reported per variant: the median step time and the step's peak CPU tensor memory above what was held before it
// (cpu_memory_stats), and the checkpointed figures as ratios to the plain ones. The anchor is kiln's own plain
// step: LibTorch's C++ API has no checkpoint (torch.utils.checkpoint is Python).
//
//   OMP_NUM_THREADS=2 checkpoint_bench [reps] [layers]
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_util.h"

using namespace kiln;

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 6;
  const int64_t batch = 8, tokens = 128, d_model = 256, heads = 4, ff = 1024;

  manual_seed(0);
  std::vector<nn::TransformerEncoderLayer> stack;
  for (int i = 0; i < layers; ++i)
    stack.emplace_back(d_model, heads,
                       nn::TransformerLayerOptions{.dim_feedforward = ff, .dropout = 0.0, .batch_first = true,
                                                   .norm_first = true});
  const Tensor x = randn({batch, tokens, d_model});

  size_t peak[2] = {0, 0};
  auto step = [&](bool checkpointed) {
    const size_t before = cpu_memory_stats().allocated_bytes;
    cpu_reset_peak_memory_stats();
    Tensor h = x;
    for (auto& layer : stack) {
      auto f = [layer](const Tensor& in) { return layer->forward(in); };
      h = checkpointed ? autograd::checkpoint(f, h) : f(h);
    }
    (h * h).mean().backward();
    for (auto& layer : stack) layer->zero_grad();
    size_t& p = peak[checkpointed ? 1 : 0];
    p = std::max(p, cpu_memory_stats().peak_allocated_bytes - before);
  };
  const std::vector<double> t = bench::time_interleaved({[&] { step(false); }, [&] { step(true); }}, reps);

  std::printf("# activation checkpointing: %d pre-norm encoder layers, d_model %lld, ff %lld, batch %lld x %lld "
              "tokens, %d threads; median of %d interleaved steps\n",
              layers, static_cast<long long>(d_model), static_cast<long long>(ff), static_cast<long long>(batch),
              static_cast<long long>(tokens), get_num_threads(), reps);
  std::printf("%-14s %-10s %-10s\n", "variant", "step_ms", "peak_MiB");
  std::printf("%-14s %-10.1f %-10.1f\n", "plain", t[0] * 1e3, peak[0] / 1048576.0);
  std::printf("%-14s %-10.1f %-10.1f\n", "checkpointed", t[1] * 1e3, peak[1] / 1048576.0);
  std::printf("%-14s %-10.3f %-10.3f\n", "ratio", t[1] / t[0], static_cast<double>(peak[1]) / peak[0]);
  return 0;
}
