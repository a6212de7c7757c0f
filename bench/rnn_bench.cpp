// Recurrent layers: a training step's forward + backward of nn::LSTM and nn::GRU beside LibTorch's on the same
// shapes (when LibTorch is found; kiln alone otherwise), interleaved in one process, medians.
//
// Cases: a 1-layer LSTM(64, 128) and GRU(64, 128) over 50 steps of a batch of 32 (a small sequence model,
// where the per-step ops and their autograd records weigh most), and a 2-layer bidirectional LSTM(256, 256)
// over 100 steps of 64 (where the GEMMs do).
//
//   rnn_bench [reps]      (default 20; set OMP_NUM_THREADS for the threads)
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#ifdef KILN_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include "bench_util.h"

namespace {

struct Case {
  std::string name;
  bool lstm;
  int64_t input, hidden, layers;
  bool bidirectional;
  int64_t steps, batch;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::vector<Case> cases = {{"LSTM(64, 128), L 50, N 32", true, 64, 128, 1, false, 50, 32},
                                   {"GRU(64, 128), L 50, N 32", false, 64, 128, 1, false, 50, 32},
                                   {"LSTM(256, 256) x2 bidir., L 100, N 64", true, 256, 256, 2, true, 100, 64}};
  std::printf("# forward + backward of a recurrent layer, ms, median of %d interleaved reps, %d threads\n", reps,
              get_num_threads());
  std::printf("%-40s %-10s %-10s %-8s\n", "case", "kiln", "LibTorch", "ratio");
  for (const Case& c : cases) {
    const nn::RNNOptions o{.num_layers = c.layers, .bidirectional = c.bidirectional};
    std::shared_ptr<nn::RNNBaseImpl> rnn;
    if (c.lstm) rnn = nn::LSTM(c.input, c.hidden, o).ptr();
    else rnn = nn::GRU(c.input, c.hidden, o).ptr();
    const Tensor x = randn({c.steps, c.batch, c.input});
    std::vector<std::function<void()>> variants{[&] {
      rnn->zero_grad();
      rnn->forward(x, {}).output.sum().backward();
    }};
#ifdef KILN_BENCH_WITH_TORCH
    const torch::Tensor tx = torch::randn({c.steps, c.batch, c.input});
    namespace tnn = torch::nn;
    tnn::LSTM t_lstm(tnn::LSTMOptions(c.input, c.hidden).num_layers(c.layers).bidirectional(c.bidirectional));
    tnn::GRU t_gru(tnn::GRUOptions(c.input, c.hidden).num_layers(c.layers).bidirectional(c.bidirectional));
    variants.push_back([&] {
      if (c.lstm) {
        t_lstm->zero_grad();
        std::get<0>(t_lstm->forward(tx)).sum().backward();
      } else {
        t_gru->zero_grad();
        std::get<0>(t_gru->forward(tx)).sum().backward();
      }
    });
#endif
    const std::vector<double> t = bench::time_interleaved(variants, reps);
    if (t.size() > 1) {
      std::printf("%-40s %-10.2f %-10.2f %-8.2f\n", c.name.c_str(), t[0] * 1e3, t[1] * 1e3, t[0] / t[1]);
    } else {
      std::printf("%-40s %-10.2f %-10s %-8s\n", c.name.c_str(), t[0] * 1e3, "-", "-");
    }
  }
  return 0;
}
