#include "kiln/nn/rnn.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

namespace {

// Gates stacked in the weights: G.
int64_t gate_count(RNNMode mode) {
  switch (mode) {
    case RNNMode::Lstm: return 4;
    case RNNMode::Gru: return 3;
    default: return 1;
  }
}

// One step from the input's projection. gi = x W_ih^T + b_ih: (N, G * H) (or (G * H)); h, c: (N, H) (or (H)),
// c only for an LSTM. Returns (h', c'), c' undefined but for an LSTM.
std::pair<Tensor, Tensor> step(RNNMode mode, const Tensor& gi, const Tensor& h, const Tensor& c, const Tensor& w_hh,
                               const Tensor& b_hh) {
  const Tensor gh = functional::linear(h, w_hh, b_hh);
  switch (mode) {
    case RNNMode::RnnTanh: return {tanh(gi + gh), Tensor()};
    case RNNMode::RnnRelu: return {relu(gi + gh), Tensor()};
    case RNNMode::Lstm: {
      const std::vector<Tensor> g = chunk(gi + gh, 4, -1);  // input, forget, cell and output gates
      const Tensor c_next = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
      return {sigmoid(g[3]) * tanh(c_next), c_next};
    }
    case RNNMode::Gru: {
      // The candidate's recurrent part is gated by r before it joins the input's: the two projections stay apart.
      const std::vector<Tensor> a = chunk(gi, 3, -1), b = chunk(gh, 3, -1);  // reset, update, candidate
      const Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]);
      const Tensor n = tanh(a[2] + r * b[2]);
      return {n + z * (h - n), Tensor()};  // (1 - z) * n + z * h
    }
  }
  return {};
}

// The checks every cell makes: x (N, input_size) or (input_size); h (and c) (N, H) or (H); weights stacked for
// `gates` gates.
void check_cell(const char* name, int64_t gates, const Tensor& x, const Tensor& h, const Tensor& w_ih,
                const Tensor& w_hh) {
  KILN_CHECK(w_hh.dim() == 2 && w_hh.size(0) == gates * w_hh.size(1), name, ": weight_hh must be (", gates,
             " * hidden_size, hidden_size), got ", shape_str(w_hh.sizes()));
  const int64_t H = w_hh.size(1);
  KILN_CHECK(w_ih.dim() == 2 && w_ih.size(0) == gates * H, name, ": weight_ih must be (", gates * H,
             ", input_size) for hidden_size ", H, ", got ", shape_str(w_ih.sizes()));
  KILN_CHECK((x.dim() == 1 || x.dim() == 2) && x.size(-1) == w_ih.size(1), name, ": input of shape ",
             shape_str(x.sizes()), "; expected (batch, ", w_ih.size(1), ") or (", w_ih.size(1), ")");
  const Shape want = x.dim() == 2 ? Shape{x.size(0), H} : Shape{H};
  KILN_CHECK(h.sizes() == want, name, ": hidden state of shape ", shape_str(h.sizes()), "; expected ",
             shape_str(want), " for an input of shape ", shape_str(x.sizes()));
}

}  // namespace

namespace functional {

Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  check_cell("rnn_tanh_cell", 1, x, h, w_ih, w_hh);
  return step(RNNMode::RnnTanh, linear(x, w_ih, b_ih), h, Tensor(), w_hh, b_hh).first;
}

Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  check_cell("rnn_relu_cell", 1, x, h, w_ih, w_hh);
  return step(RNNMode::RnnRelu, linear(x, w_ih, b_ih), h, Tensor(), w_hh, b_hh).first;
}

std::pair<Tensor, Tensor> lstm_cell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& w_ih,
                                    const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  check_cell("lstm_cell", 4, x, h, w_ih, w_hh);
  KILN_CHECK(c.sizes() == h.sizes(), "lstm_cell: cell state of shape ", shape_str(c.sizes()),
             "; expected the hidden state's, ", shape_str(h.sizes()));
  return step(RNNMode::Lstm, linear(x, w_ih, b_ih), h, c, w_hh, b_hh);
}

Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh) {
  check_cell("gru_cell", 3, x, h, w_ih, w_hh);
  return step(RNNMode::Gru, linear(x, w_ih, b_ih), h, Tensor(), w_hh, b_hh).first;
}

}  // namespace functional

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value,
                    const std::string& padding_side) {
  KILN_CHECK(padding_side == "right" || padding_side == "left", "pad_sequence: padding_side is '", padding_side,
             "': expected 'right' or 'left'");
  KILN_CHECK(!sequences.empty(), "pad_sequence: no sequences given (expected at least one)");
  const Tensor& first = sequences[0];
  int64_t longest = 0;
  for (size_t k = 0; k < sequences.size(); ++k) {
    const Tensor& s = sequences[k];
    KILN_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: sequence ", k, " must have a length dim (L, *), got ",
               s.defined() ? "a 0-dim tensor" : "an undefined tensor");
    KILN_CHECK(s.dtype() == first.dtype() && s.device() == first.device(), "pad_sequence: sequence ", k, " is ",
               s.dtype(), " on ", s.device(), ", sequence 0 ", first.dtype(), " on ", first.device());
    KILN_CHECK(std::equal(s.sizes().begin() + 1, s.sizes().end(), first.sizes().begin() + 1, first.sizes().end()),
               "pad_sequence: sequence ", k, " has shape ",
               shape_str(s.sizes()), ", sequence 0 ", shape_str(first.sizes()),
               "; expected the same shape after the length dim");
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> padded;
  padded.reserve(sequences.size());
  for (const Tensor& s : sequences) {
    // F::pad's pairs start at the last dim: the length dim's pair comes last.
    std::vector<int64_t> pads(static_cast<size_t>(2 * s.dim()), 0);
    pads[pads.size() - (padding_side == "left" ? 2 : 1)] = longest - s.size(0);
    padded.push_back(s.size(0) == longest ? s : functional::pad(s, pads, Scalar(padding_value)));
  }
  return stack(padded, batch_first ? 0 : 1);
}

// ---- the layers ----

namespace {

struct DirectionResult {
  Tensor output, h, c;
};

// One layer in one direction over the whole sequence. gi: (L, N, G * H), the input's projection at every step;
// h, c: (N, H); valid: (L, N, 1) bool, whether step t of sequence n counts (undefined: every step does).
// Returns the outputs (L, N, H) and the state after the last step that counted.
DirectionResult run_direction(RNNMode mode, const Tensor& gi, Tensor h, Tensor c, const Tensor& w_hh,
                              const Tensor& b_hh, bool reverse, const Tensor& valid) {
  const int64_t L = gi.size(0);
  // One node for all the steps, whose backward is one stack (see unbind in autograd/functions/indexing.cpp).
  const std::vector<Tensor> steps = unbind(gi, 0);
  std::vector<Tensor> outputs(static_cast<size_t>(L));
  for (int64_t s = 0; s < L; ++s) {
    const int64_t t = reverse ? L - 1 - s : s;
    auto [h_next, c_next] = step(mode, steps[static_cast<size_t>(t)], h, c, w_hh, b_hh);
    if (valid.defined()) {
      // Past a sequence's end its state stays and its output is 0. In reverse the steps past the end come
      // first, so each sequence starts from the initial state at its own last step.
      const Tensor counts = valid.select(0, t);  // (N, 1)
      outputs[static_cast<size_t>(t)] = where(counts, h_next, 0.0);
      h = where(counts, h_next, h);
      if (c.defined()) c = where(counts, c_next, c);
    } else {
      outputs[static_cast<size_t>(t)] = h_next;
      h = std::move(h_next);
      c = std::move(c_next);
    }
  }
  return {stack(outputs, 0), h, c};
}

}  // namespace

RNNBaseImpl::RNNBaseImpl(std::string type, RNNMode mode, int64_t input_size, int64_t hidden_size, RNNOptions options)
    : Module(std::move(type)), mode_(mode), input_size_(input_size), hidden_size_(hidden_size),
      options_(std::move(options)) {
  const std::string& name = type_name();
  KILN_CHECK(input_size > 0 && hidden_size > 0, name, ": input_size and hidden_size must be positive, got ", input_size,
             " and ", hidden_size);
  KILN_CHECK(options_.num_layers > 0, name, ": num_layers must be positive, got ", options_.num_layers);
  KILN_CHECK(options_.dropout >= 0 && options_.dropout <= 1, name, ": dropout must be in [0, 1], got ",
             options_.dropout);
  if (mode == RNNMode::RnnTanh || mode == RNNMode::RnnRelu) {
    KILN_CHECK(options_.nonlinearity == "tanh" || options_.nonlinearity == "relu", name, ": nonlinearity '",
               options_.nonlinearity, "'; expected tanh or relu");
    mode_ = options_.nonlinearity == "relu" ? RNNMode::RnnRelu : RNNMode::RnnTanh;
  } else {
    KILN_CHECK(options_.nonlinearity == "tanh", name, ": nonlinearity '", options_.nonlinearity,
               "': only nn::RNN takes one");
  }
  const int64_t G = gate_count(mode_), D = num_directions();
  // The members are bound to the parameters by address, so weights_ is sized once and never grows.
  weights_.reserve(static_cast<size_t>(options_.num_layers * D));
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    for (int64_t d = 0; d < D; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      const int64_t in = layer == 0 ? input_size : D * hidden_size;
      LayerWeights& w = weights_.emplace_back();
      register_parameter("weight_ih" + suffix, w.w_ih, empty({G * hidden_size, in}));
      register_parameter("weight_hh" + suffix, w.w_hh, empty({G * hidden_size, hidden_size}));
      if (options_.bias) {
        register_parameter("bias_ih" + suffix, w.b_ih, empty({G * hidden_size}));
        register_parameter("bias_hh" + suffix, w.b_hh, empty({G * hidden_size}));
      }
    }
  }
  reset_parameters();
}

void RNNBaseImpl::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size_));
  for (const Tensor& p : parameters()) init::uniform_(p, -bound, bound);
}

const RNNBaseImpl::LayerWeights& RNNBaseImpl::weights(int64_t layer, int64_t direction) const {
  KILN_CHECK(layer >= 0 && layer < options_.num_layers && direction >= 0 && direction < num_directions(),
             type_name(), ": no layer ", layer, " direction ", direction, " (", options_.num_layers, " layers, ",
             num_directions(), " directions)");
  return weights_[static_cast<size_t>(layer * num_directions() + direction)];
}

RNNOutput RNNBaseImpl::forward(const Tensor& input, const RNNState& state, const std::vector<int64_t>& lengths) {
  const std::string& name = type_name();
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, name, ": input of shape ", shape_str(input.sizes()), "; expected ",
             options_.batch_first ? "(batch, seq_len, " : "(seq_len, batch, ", input_size_,
             ") or unbatched (seq_len, ", input_size_, ")");
  const bool batched = input.dim() == 3;
  // (L, N, input_size) from here on.
  const Tensor x = !batched ? input.unsqueeze(1) : options_.batch_first ? input.transpose(0, 1) : input;
  const int64_t L = x.size(0), N = x.size(1), H = hidden_size_, D = num_directions(), layers = options_.num_layers;
  KILN_CHECK(x.size(2) == input_size_, name, ": input of shape ", shape_str(input.sizes()), " has ", x.size(2),
             " features; expected input_size = ", input_size_);
  KILN_CHECK(L > 0, name, ": input of shape ", shape_str(input.sizes()), " has no steps");

  const bool lstm = mode_ == RNNMode::Lstm;
  KILN_CHECK(lstm || !state.c.defined(), name, ": an initial cell state c was given; only an LSTM has one");
  KILN_CHECK(!lstm || state.h.defined() == state.c.defined(), name,
             ": give both h and c of the initial state, or neither (zeros)");
  const Shape state_shape = batched ? Shape{D * layers, N, H} : Shape{D * layers, H};
  const auto initial = [&](const Tensor& s, const char* which) -> Tensor {  // as (D * layers, N, H)
    if (!s.defined()) return zeros({D * layers, N, H}, TensorOptions(x.dtype()).device(x.device()));
    KILN_CHECK(s.sizes() == state_shape, name, ": initial ", which, " of shape ", shape_str(s.sizes()),
               "; expected ", shape_str(state_shape), " (num_layers * num_directions, ", batched ? "batch, " : "",
               "hidden_size)");
    KILN_CHECK(s.device() == x.device(), name, ": initial ", which, " is on ", s.device().str(), ", the input on ",
               x.device().str());
    return batched ? s : s.unsqueeze(1);
  };
  const Tensor h0 = initial(state.h, "h"), c0 = lstm ? initial(state.c, "c") : Tensor();

  Tensor valid;  // (L, N, 1): step t of sequence n counts
  if (!lengths.empty()) {
    KILN_CHECK(static_cast<int64_t>(lengths.size()) == N, name, ": ", lengths.size(), " lengths for a batch of ", N);
    for (size_t n = 0; n < lengths.size(); ++n) {
      KILN_CHECK(lengths[n] >= 0 && lengths[n] <= L, name, ": lengths[", n, "] = ", lengths[n], " for sequences of ",
                 L, " steps; expected 0 .. ", L);
    }
    valid = lt(arange(L, kInt64).unsqueeze(1), tensor(lengths, {N}, kInt64)).unsqueeze(2).to(x.device());
  }

  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<Tensor> outputs;
    const int64_t features = layer_input.size(2);
    for (int64_t d = 0; d < D; ++d) {
      const LayerWeights& w = weights(layer, d);
      // The input's projection at every step at once: one GEMM with the bias folded in.
      const Tensor gi = functional::linear(layer_input.reshape({L * N, features}), w.w_ih, w.b_ih).view({L, N, -1});
      const int64_t row = layer * D + d;
      DirectionResult r = run_direction(mode_, gi, h0.select(0, row), lstm ? c0.select(0, row) : Tensor(), w.w_hh,
                                        w.b_hh, d == 1, valid);
      outputs.push_back(std::move(r.output));
      h_n.push_back(std::move(r.h));
      if (lstm) c_n.push_back(std::move(r.c));
    }
    layer_input = D == 1 ? outputs[0] : cat(outputs, 2);
    if (layer + 1 < layers) layer_input = functional::dropout(layer_input, options_.dropout, is_training());
  }

  RNNOutput out;
  out.output = !batched ? layer_input.squeeze(1) : options_.batch_first ? layer_input.transpose(0, 1) : layer_input;
  out.state.h = batched ? stack(h_n, 0) : stack(h_n, 0).squeeze(1);
  if (lstm) out.state.c = batched ? stack(c_n, 0) : stack(c_n, 0).squeeze(1);
  return out;
}

Tensor RNNBaseImpl::forward(const Tensor& input) { return forward(input, RNNState{}).output; }

std::string RNNBaseImpl::extra_repr() const {
  std::string s = detail::concat(input_size_, ", ", hidden_size_);
  if (options_.num_layers != 1) s += detail::concat(", num_layers=", options_.num_layers);
  if (mode_ == RNNMode::RnnRelu) s += ", nonlinearity=relu";
  if (!options_.bias) s += ", bias=false";
  if (options_.batch_first) s += ", batch_first=true";
  if (options_.dropout != 0) s += detail::concat(", dropout=", options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=true";
  return s;
}

RNNImpl::RNNImpl(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBaseImpl("RNN", RNNMode::RnnTanh, input_size, hidden_size, std::move(options)) {}

LSTMImpl::LSTMImpl(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBaseImpl("LSTM", RNNMode::Lstm, input_size, hidden_size, std::move(options)) {}

GRUImpl::GRUImpl(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBaseImpl("GRU", RNNMode::Gru, input_size, hidden_size, std::move(options)) {}

// ---- the cells ----

RNNCellBaseImpl::RNNCellBaseImpl(std::string type, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias)
    : Module(std::move(type)), hidden_size_(hidden_size) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, type_name(), ": input_size and hidden_size must be positive, got ",
             input_size, " and ", hidden_size);
  register_parameter("weight_ih", weight_ih, empty({gates * hidden_size, input_size}));
  register_parameter("weight_hh", weight_hh, empty({gates * hidden_size, hidden_size}));
  if (bias) {
    register_parameter("bias_ih", bias_ih, empty({gates * hidden_size}));
    register_parameter("bias_hh", bias_hh, empty({gates * hidden_size}));
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : parameters()) init::uniform_(p, -bound, bound);
}

Tensor RNNCellBaseImpl::state_or_zeros(const Tensor& h, const Tensor& x) const {
  if (h.defined()) return h;
  const Shape shape = x.dim() == 2 ? Shape{x.size(0), hidden_size_} : Shape{hidden_size_};
  return zeros(shape, TensorOptions(x.dtype()).device(x.device()));
}

std::string RNNCellBaseImpl::extra_repr() const {
  return detail::concat(weight_ih.size(1), ", ", hidden_size_, bias_ih.defined() ? "" : ", bias=false");
}

RNNCellImpl::RNNCellImpl(int64_t input_size, int64_t hidden_size, bool bias, std::string nonlinearity)
    : RNNCellBaseImpl("RNNCell", 1, input_size, hidden_size, bias), nonlinearity_(std::move(nonlinearity)) {
  KILN_CHECK(nonlinearity_ == "tanh" || nonlinearity_ == "relu", "RNNCell: nonlinearity '", nonlinearity_,
             "'; expected tanh or relu");
}

Tensor RNNCellImpl::forward(const Tensor& x, const Tensor& h) {
  const Tensor h0 = state_or_zeros(h, x);
  return nonlinearity_ == "relu" ? functional::rnn_relu_cell(x, h0, weight_ih, weight_hh, bias_ih, bias_hh)
                                 : functional::rnn_tanh_cell(x, h0, weight_ih, weight_hh, bias_ih, bias_hh);
}

std::string RNNCellImpl::extra_repr() const {
  return RNNCellBaseImpl::extra_repr() + (nonlinearity_ == "relu" ? ", nonlinearity=relu" : "");
}

LSTMCellImpl::LSTMCellImpl(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBaseImpl("LSTMCell", 4, input_size, hidden_size, bias) {}

RNNState LSTMCellImpl::forward(const Tensor& x, const RNNState& state) {
  KILN_CHECK(state.h.defined() == state.c.defined(), "LSTMCell: give both h and c, or neither (zeros)");
  auto [h, c] = functional::lstm_cell(x, state_or_zeros(state.h, x), state_or_zeros(state.c, x), weight_ih, weight_hh,
                                      bias_ih, bias_hh);
  return {h, c};
}

GRUCellImpl::GRUCellImpl(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBaseImpl("GRUCell", 3, input_size, hidden_size, bias) {}

Tensor GRUCellImpl::forward(const Tensor& x, const Tensor& h) {
  return functional::gru_cell(x, state_or_zeros(h, x), weight_ih, weight_hh, bias_ih, bias_hh);
}

}  // namespace kiln::nn
