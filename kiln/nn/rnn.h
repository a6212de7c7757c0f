// Recurrent layers, as PyTorch's nn.RNN, nn.LSTM and nn.GRU, and their one-step cells (RNNCell, LSTMCell,
// GRUCell), under PyTorch's parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse
// for the backward direction; a cell's without the _l0), gate order and initialization, so a PyTorch state dict
// loads and gives the same outputs.
//
// The math is composed of autograd ops (linear, sigmoid, tanh, mul, add, where): no backward of its own, every
// device those run on. A layer first projects its whole input sequence at once (one GEMM, x W_ih^T + b_ih for
// every step), then runs the steps in order, each one GEMM for h W_hh^T + b_hh and a few element-wise ops.
//
// Sequences of different lengths in one batch: instead of PyTorch's packed sequences, forward takes the
// lengths. Step t of sequence n counts only if t < lengths[n]: past its end the state stays as it was (so
// h_n is each sequence's state after its own last step, and the backward direction starts at each sequence's
// own end) and the output is 0, which is what PyTorch gives for a packed batch padded back.
#pragma once

#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

namespace functional {

// One step of each cell. x: (N, input_size) or unbatched (input_size); h, c: (N, hidden) or (hidden);
// w_ih: (G * hidden, input_size), w_hh: (G * hidden, hidden), b_ih, b_hh: (G * hidden) or undefined, with
// G = 1 (rnn), 4 (lstm: the gates i, f, g, o stacked in that order) or 3 (gru: r, z, n).
//   rnn:  h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)          (relu for rnn_relu_cell)
//   lstm: i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (x W_ih^T + b_ih + h W_hh^T + b_hh)
//         c' = f * c + i * g,  h' = o * tanh(c')
//   gru:  r, z = sigmoid of the first two parts of (x W_ih^T + b_ih + h W_hh^T + b_hh)
//         n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)),  h' = (1 - z) * n + z * h
Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
// Returns (h', c').
std::pair<Tensor, Tensor> lstm_cell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& w_ih,
                                    const Tensor& w_hh, const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = {},
                const Tensor& b_hh = {});

}  // namespace functional

// Sequences (L_i, *) of one dtype, device and trailing shape, each padded with `padding_value` to the longest
// and stacked: (L, B, *), or (B, L, *) with batch_first, as torch.nn.utils.rnn.pad_sequence. padding_side
// "left" puts the padding before each sequence instead of after it. Differentiable in every sequence. With the
// lengths, it is what a recurrent layer's forward takes (a collate function for variable-length examples).
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0,
                    const std::string& padding_side = "right");

enum class RNNMode { RnnTanh, RnnRelu, Lstm, Gru };

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;          // b_ih and b_hh
  bool batch_first = false;  // false: input and output (L, N, features), PyTorch's default; true: (N, L, features)
  double dropout = 0.0;      // on each layer's output but the last one's, in training mode
  bool bidirectional = false;
  std::string nonlinearity = "tanh";  // nn::RNN's: "tanh" or "relu" (LSTM and GRU take only the default)
};

// The recurrent state. h: (D * num_layers, N, hidden) (unbatched: (D * num_layers, hidden)), row layer * D +
// direction, D = 2 when bidirectional; c: the same shape, LSTM only. Never batch-first, as in PyTorch.
struct RNNState {
  Tensor h, c;
};

struct RNNOutput {
  Tensor output;  // (L, N, D * hidden) ((N, L, D * hidden) with batch_first; unbatched (L, D * hidden))
  RNNState state; // after the last step of each sequence
};

// What RNN, LSTM and GRU share: the stack of layers and directions and the loop over the steps.
class RNNBaseImpl : public Module {
 public:
  using Options = RNNOptions;  // ModuleHolder takes it as a braced list
  // input: (L, N, input_size), (N, L, input_size) with batch_first, or unbatched (L, input_size).
  // state: the initial state (undefined h, and c: zeros). lengths: empty (every sequence has L steps) or N
  // lengths in 0..L (one for an unbatched input): see the file comment.
  RNNOutput forward(const Tensor& input, const RNNState& state, const std::vector<int64_t>& lengths = {});
  // The output alone, from a zero state: lets the module sit in a Sequential and take hooks.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  // Every parameter uniform in +-1/sqrt(hidden_size), as PyTorch's.
  void reset_parameters();

  RNNMode mode() const { return mode_; }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_directions() const { return options_.bidirectional ? 2 : 1; }
  const RNNOptions& options() const { return options_; }

  // The parameters of one layer and direction (0 forward, 1 backward): w_ih (G * hidden, input_size for layer 0,
  // else D * hidden), w_hh (G * hidden, hidden), b_ih and b_hh (G * hidden; undefined without bias).
  struct LayerWeights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  const LayerWeights& weights(int64_t layer, int64_t direction) const;

 protected:
  RNNBaseImpl(std::string type, RNNMode mode, int64_t input_size, int64_t hidden_size, RNNOptions options);

 private:
  RNNMode mode_;
  int64_t input_size_, hidden_size_;
  RNNOptions options_;
  std::vector<LayerWeights> weights_;  // layer * D + direction
};

// Elman RNN: h' = tanh (or relu, options.nonlinearity) of x W_ih^T + b_ih + h W_hh^T + b_hh, per layer.
class RNNImpl : public RNNBaseImpl {
 public:
  RNNImpl(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
};
using RNN = ModuleHolder<RNNImpl>;

class LSTMImpl : public RNNBaseImpl {
 public:
  LSTMImpl(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
};
using LSTM = ModuleHolder<LSTMImpl>;

class GRUImpl : public RNNBaseImpl {
 public:
  GRUImpl(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
};
using GRU = ModuleHolder<GRUImpl>;

// What the cells share: one step as a module, with weight_ih (G * hidden, input_size), weight_hh (G * hidden,
// hidden), bias_ih and bias_hh (G * hidden; undefined without bias), uniform in +-1/sqrt(hidden) as PyTorch's.
// x: (N, input_size) or (input_size); a state h (and c): (N, hidden) or (hidden), undefined for zeros.
class RNNCellBaseImpl : public Module {
 public:
  std::string extra_repr() const override;
  int64_t hidden_size() const { return hidden_size_; }
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBaseImpl(std::string type, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);
  // h, or zeros of the state's shape for x.
  Tensor state_or_zeros(const Tensor& h, const Tensor& x) const;

 private:
  int64_t hidden_size_;
};

class RNNCellImpl : public RNNCellBaseImpl {
 public:
  // nonlinearity: "tanh" or "relu".
  RNNCellImpl(int64_t input_size, int64_t hidden_size, bool bias = true, std::string nonlinearity = "tanh");
  Tensor forward(const Tensor& x, const Tensor& h);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  std::string extra_repr() const override;

 private:
  std::string nonlinearity_;
};
using RNNCell = ModuleHolder<RNNCellImpl>;

class LSTMCellImpl : public RNNCellBaseImpl {
 public:
  LSTMCellImpl(int64_t input_size, int64_t hidden_size, bool bias = true);
  // Returns (h', c') as an RNNState.
  RNNState forward(const Tensor& x, const RNNState& state);
  Tensor forward(const Tensor& x) override { return forward(x, RNNState{}).h; }
};
using LSTMCell = ModuleHolder<LSTMCellImpl>;

class GRUCellImpl : public RNNCellBaseImpl {
 public:
  GRUCellImpl(int64_t input_size, int64_t hidden_size, bool bias = true);
  Tensor forward(const Tensor& x, const Tensor& h);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
};
using GRUCell = ModuleHolder<GRUCellImpl>;

}  // namespace kiln::nn
