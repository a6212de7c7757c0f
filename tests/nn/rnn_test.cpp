// RNN, LSTM, GRU and their cells against a float64 loop written here from the published equations (PyTorch's
// documentation of nn.RNN, nn.LSTM and nn.GRU: gate order, where the biases go, the GRU's reset gate on the
// recurrent projection only), central-difference gradients, and properties: a padded batch with lengths
// equals each sequence run alone, the layouts agree, a trained LSTM and GRU remember.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "nn/nn_test_util.h"
#include "nn/rnn_test_util.h"
#include "tensor/test_util.h"

// A namespace of its own: the nn tests compile as one unity build, and attention_test.cpp has helpers of the
// same names.
namespace kiln::rnn_tests {
namespace {

using autograd::gradcheck;
using nn::RNNMode;
using test::expect_error;
using test::randn64;

std::vector<double> values(const Tensor& t) { return t.contiguous().to(kFloat64).to_vector<double>(); }

// ---- the float64 loop reference ----

using Vec = std::vector<double>;

double sigmoid_ref(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// W x + b, W (rows, cols) row-major; b empty for none.
Vec affine(const Vec& w, const Vec& b, const Vec& x, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(x.size());
  Vec y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = b.empty() ? 0.0 : b[r];
    for (int64_t k = 0; k < cols; ++k) s += w[r * cols + k] * x[k];
    y[r] = s;
  }
  return y;
}

struct RefWeights {
  Vec w_ih, w_hh, b_ih, b_hh;
};

// One step of `mode` for one sequence, updating h (and c).
void step_ref(RNNMode mode, const RefWeights& w, const Vec& x, Vec& h, Vec& c) {
  const int64_t H = static_cast<int64_t>(h.size());
  const int64_t G = mode == RNNMode::Lstm ? 4 : mode == RNNMode::Gru ? 3 : 1;
  const Vec gi = affine(w.w_ih, w.b_ih, x, G * H), gh = affine(w.w_hh, w.b_hh, h, G * H);
  for (int64_t j = 0; j < H; ++j) {
    switch (mode) {
      case RNNMode::RnnTanh: h[j] = std::tanh(gi[j] + gh[j]); break;
      case RNNMode::RnnRelu: h[j] = std::max(0.0, gi[j] + gh[j]); break;
      case RNNMode::Lstm: {
        const double i = sigmoid_ref(gi[j] + gh[j]), f = sigmoid_ref(gi[H + j] + gh[H + j]);
        const double g = std::tanh(gi[2 * H + j] + gh[2 * H + j]), o = sigmoid_ref(gi[3 * H + j] + gh[3 * H + j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * std::tanh(c[j]);
        break;
      }
      case RNNMode::Gru: {
        const double r = sigmoid_ref(gi[j] + gh[j]), z = sigmoid_ref(gi[H + j] + gh[H + j]);
        const double n = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
        h[j] = (1 - z) * n + z * h[j];
        break;
      }
    }
  }
}

struct RefResult {
  Vec output;  // (L, N, D * H)
  Vec h, c;    // (layers * D, N, H)
};

// The whole stack, seq-first: x (L, N, F), h0 and c0 (layers * D, N, H) (empty: zeros), lengths empty or N.
RefResult reference(nn::RNNBaseImpl& m, const Tensor& x_t, const Tensor& h0_t, const Tensor& c0_t,
                    std::vector<int64_t> lengths) {
  const int64_t L = x_t.size(0), N = x_t.size(1), H = m.hidden_size(), D = m.num_directions();
  const int64_t layers = m.options().num_layers;
  if (lengths.empty()) lengths.assign(static_cast<size_t>(N), L);
  const Vec h0 = h0_t.defined() ? values(h0_t) : Vec(static_cast<size_t>(layers * D * N * H), 0.0);
  const Vec c0 = c0_t.defined() ? values(c0_t) : Vec(static_cast<size_t>(layers * D * N * H), 0.0);
  Vec input = values(x_t);
  int64_t F = x_t.size(2);
  RefResult r;
  r.h.assign(static_cast<size_t>(layers * D * N * H), 0.0);
  r.c = r.h;
  for (int64_t layer = 0; layer < layers; ++layer) {
    Vec output(static_cast<size_t>(L * N * D * H), 0.0);
    for (int64_t d = 0; d < D; ++d) {
      const auto& tw = m.weights(layer, d);
      RefWeights w{values(tw.w_ih), values(tw.w_hh), tw.b_ih.defined() ? values(tw.b_ih) : Vec(),
                   tw.b_hh.defined() ? values(tw.b_hh) : Vec()};
      const int64_t row = layer * D + d;
      for (int64_t n = 0; n < N; ++n) {
        Vec h(h0.begin() + (row * N + n) * H, h0.begin() + (row * N + n + 1) * H);
        Vec c(c0.begin() + (row * N + n) * H, c0.begin() + (row * N + n + 1) * H);
        const int64_t len = lengths[n];
        for (int64_t s = 0; s < len; ++s) {
          const int64_t t = d == 1 ? len - 1 - s : s;  // the backward direction starts at the sequence's end
          const Vec x(input.begin() + (t * N + n) * F, input.begin() + (t * N + n + 1) * F);
          step_ref(m.mode(), w, x, h, c);
          for (int64_t j = 0; j < H; ++j) output[((t * N + n) * D + d) * H + j] = h[j];
        }
        for (int64_t j = 0; j < H; ++j) {
          r.h[(row * N + n) * H + j] = h[j];
          r.c[(row * N + n) * H + j] = c[j];
        }
      }
    }
    input = output;
    F = D * H;
  }
  r.output = input;
  return r;
}

void expect_near_all(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

// ---- forward against the reference ----

TEST(RNN, EveryModeLayerCountAndDirectionMatchesTheFloat64Loop) {
  const int64_t L = 5, N = 3, F = 4, H = 6;
  uint64_t seed = 100;
  for (RNNMode mode : {RNNMode::RnnTanh, RNNMode::RnnRelu, RNNMode::Lstm, RNNMode::Gru}) {
    for (int64_t layers : {1, 2}) {
      for (bool bidirectional : {false, true}) {
        for (bool bias : {true, false}) {
          const std::string what = std::string(test::rnn_mode_name(mode)) + " layers " + std::to_string(layers) +
                                   (bidirectional ? " bidirectional" : "") + (bias ? "" : " no bias");
          manual_seed(seed++);
          auto m = test::make_rnn(mode, F, H, {.num_layers = layers, .bias = bias, .bidirectional = bidirectional});
          m->to(kFloat64);
          const int64_t D = bidirectional ? 2 : 1;
          const Tensor x = randn64({L, N, F}, seed++);
          const Tensor h0 = randn64({layers * D, N, H}, seed++);
          const Tensor c0 = mode == RNNMode::Lstm ? randn64({layers * D, N, H}, seed++) : Tensor();
          const nn::RNNOutput out = m->forward(x, {h0, c0});
          const RefResult ref = reference(*m, x, h0, c0, {});
          EXPECT_EQ(out.output.sizes(), Shape({L, N, D * H})) << what;
          EXPECT_EQ(out.state.h.sizes(), Shape({layers * D, N, H})) << what;
          expect_near_all(values(out.output), ref.output, 1e-12, what + ": output");
          expect_near_all(values(out.state.h), ref.h, 1e-12, what + ": h_n");
          if (mode == RNNMode::Lstm) expect_near_all(values(out.state.c), ref.c, 1e-12, what + ": c_n");
          else EXPECT_FALSE(out.state.c.defined()) << what;

          // float32, and from a zero state.
          m->to(kFloat32);
          const nn::RNNOutput out32 = m->forward(x.to(kFloat32), {});
          const RefResult ref0 = reference(*m, x, Tensor(), Tensor(), {});
          EXPECT_EQ(out32.output.dtype(), kFloat32);
          expect_near_all(values(out32.output), ref0.output, 2e-5, what + ": float32 output");
        }
      }
    }
  }
}

TEST(RNN, CellsMatchTheFloat64LoopBatchedAndUnbatched) {
  const int64_t N = 3, F = 5, H = 4;
  manual_seed(7);
  nn::RNNCell rnn(F, H);
  nn::RNNCell rnn_relu(F, H, true, "relu");
  nn::LSTMCell lstm(F, H);
  nn::GRUCell gru(F, H, /*bias=*/false);
  for (nn::Module* m : std::vector<nn::Module*>{rnn.ptr().get(), rnn_relu.ptr().get(), lstm.ptr().get(), gru.ptr().get()})
    m->to(kFloat64);
  const Tensor x = randn64({N, F}, 1), h = randn64({N, H}, 2), c = randn64({N, H}, 3);
  const auto check = [&](RNNMode mode, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                         const Tensor& got_h, const Tensor& got_c, const std::string& what) {
    const RefWeights w{values(w_ih), values(w_hh), b_ih.defined() ? values(b_ih) : Vec(),
                       b_hh.defined() ? values(b_hh) : Vec()};
    const Vec xs = values(x), hs = values(h), cs = values(c);
    Vec want_h, want_c;
    for (int64_t n = 0; n < N; ++n) {
      Vec hn(hs.begin() + n * H, hs.begin() + (n + 1) * H), cn(cs.begin() + n * H, cs.begin() + (n + 1) * H);
      step_ref(mode, w, Vec(xs.begin() + n * F, xs.begin() + (n + 1) * F), hn, cn);
      want_h.insert(want_h.end(), hn.begin(), hn.end());
      want_c.insert(want_c.end(), cn.begin(), cn.end());
    }
    expect_near_all(values(got_h), want_h, 1e-12, what + ": h'");
    if (got_c.defined()) expect_near_all(values(got_c), want_c, 1e-12, what + ": c'");
  };
  check(RNNMode::RnnTanh, rnn->weight_ih, rnn->weight_hh, rnn->bias_ih, rnn->bias_hh, rnn->forward(x, h), {}, "RNNCell");
  check(RNNMode::RnnRelu, rnn_relu->weight_ih, rnn_relu->weight_hh, rnn_relu->bias_ih, rnn_relu->bias_hh,
        rnn_relu->forward(x, h), {}, "RNNCell relu");
  const nn::RNNState s = lstm->forward(x, {h, c});
  check(RNNMode::Lstm, lstm->weight_ih, lstm->weight_hh, lstm->bias_ih, lstm->bias_hh, s.h, s.c, "LSTMCell");
  EXPECT_FALSE(gru->bias_ih.defined());
  check(RNNMode::Gru, gru->weight_ih, gru->weight_hh, {}, {}, gru->forward(x, h), {}, "GRUCell");

  // Unbatched: one example, the batch's first row.
  const Tensor h1 = gru->forward(x.select(0, 0), h.select(0, 0));
  EXPECT_EQ(h1.sizes(), Shape({H}));
  expect_near_all(values(h1), values(gru->forward(x, h).select(0, 0)), 1e-15, "GRUCell unbatched");
  // No state: zeros.
  expect_near_all(values(lstm->forward(x, {}).h), values(lstm->forward(x, {zeros_like(h), zeros_like(c)}).h), 0,
                  "LSTMCell zero state");
}

// ---- layouts and lengths ----

TEST(RNN, BatchFirstAndUnbatchedInputsGiveTheSameResults) {
  const int64_t L = 4, N = 2, F = 3, H = 5;
  for (RNNMode mode : {RNNMode::Lstm, RNNMode::Gru}) {
    manual_seed(11);
    auto seq_first = test::make_rnn(mode, F, H, {.num_layers = 2, .bidirectional = true});
    manual_seed(11);
    auto batch_first = test::make_rnn(mode, F, H, {.num_layers = 2, .batch_first = true, .bidirectional = true});
    const Tensor x = randn({L, N, F});
    const nn::RNNOutput a = seq_first->forward(x, {});
    const nn::RNNOutput b = batch_first->forward(x.transpose(0, 1).contiguous(), {});
    EXPECT_EQ(b.output.sizes(), Shape({N, L, 2 * H}));
    expect_near_all(values(b.output.transpose(0, 1)), values(a.output), 0, "batch_first output");
    expect_near_all(values(b.state.h), values(a.state.h), 0, "batch_first h_n");  // never batch-first
    // Unbatched: (L, F) in, (L, D * H) out, (layers * D, H) state.
    const nn::RNNOutput u = seq_first->forward(x.select(1, 1), {});
    EXPECT_EQ(u.output.sizes(), Shape({L, 2 * H}));
    EXPECT_EQ(u.state.h.sizes(), Shape({4, H}));
    expect_near_all(values(u.output), values(a.output.select(1, 1)), 1e-6, "unbatched output");
    expect_near_all(values(u.state.h), values(a.state.h.select(1, 1)), 1e-6, "unbatched h_n");
  }
}

TEST(RNN, APaddedBatchWithLengthsEqualsEachSequenceAlone) {
  const int64_t L = 6, N = 4, F = 3, H = 4;
  const std::vector<int64_t> lengths = {6, 2, 4, 1};
  for (RNNMode mode : {RNNMode::RnnTanh, RNNMode::Lstm, RNNMode::Gru}) {
    manual_seed(21);
    auto m = test::make_rnn(mode, F, H, {.num_layers = 2, .bidirectional = true});
    m->to(kFloat64);
    const Tensor x = randn64({L, N, F}, 22);
    const Tensor h0 = randn64({4, N, H}, 23);
    const Tensor c0 = mode == RNNMode::Lstm ? randn64({4, N, H}, 24) : Tensor();
    const nn::RNNOutput out = m->forward(x, {h0, c0}, lengths);
    // The reference with the lengths...
    const RefResult ref = reference(*m, x, h0, c0, lengths);
    expect_near_all(values(out.output), ref.output, 1e-12, std::string(test::rnn_mode_name(mode)) + ": output with lengths");
    expect_near_all(values(out.state.h), ref.h, 1e-12, std::string(test::rnn_mode_name(mode)) + ": h_n with lengths");
    // ... and each sequence through the module alone, cut to its length: the padding changes nothing.
    for (int64_t n = 0; n < N; ++n) {
      const int64_t len = lengths[n];
      const Tensor xn = x.narrow(0, 0, len).narrow(1, n, 1);
      const nn::RNNOutput alone = m->forward(xn, {h0.narrow(1, n, 1), c0.defined() ? c0.narrow(1, n, 1) : Tensor()});
      const std::string what = std::string(test::rnn_mode_name(mode)) + " sequence " + std::to_string(n);
      expect_near_all(values(out.output.narrow(0, 0, len).narrow(1, n, 1)), values(alone.output), 1e-12, what);
      expect_near_all(values(out.state.h.narrow(1, n, 1)), values(alone.state.h), 1e-12, what + " h_n");
      if (c0.defined()) expect_near_all(values(out.state.c.narrow(1, n, 1)), values(alone.state.c), 1e-12, what + " c_n");
      // Past its end the output is 0.
      if (len < L) EXPECT_EQ(values(out.output.narrow(0, len, L - len).narrow(1, n, 1).abs().sum())[0], 0.0) << what;
    }
  }
}

// pad_sequence against the padded batch written out element by element: both layouts, both sides, a padding
// value, trailing dims; the gradient of sum(w * padded) reaches each sequence as w's entries over its steps.
TEST(PadSequence, PadsToTheLongestAndStacks) {
  const std::vector<int64_t> lengths = {3, 1, 4};
  std::vector<Tensor> seqs;
  for (size_t k = 0; k < lengths.size(); ++k) {
    seqs.push_back(randn64({lengths[k], 2}, 30 + static_cast<uint64_t>(k)));
    seqs.back().requires_grad_();
  }
  for (bool batch_first : {false, true}) {
    for (const char* side : {"right", "left"}) {
      const Tensor out = nn::pad_sequence(seqs, batch_first, -7.0, side);
      ASSERT_EQ(out.sizes(), batch_first ? (Shape{3, 4, 2}) : (Shape{4, 3, 2})) << side;
      const Tensor w = randn64(out.sizes(), 40);
      (out * w).sum().backward();
      const std::vector<double> got = values(out), wv = values(w);
      for (int64_t b = 0; b < 3; ++b) {
        const std::vector<double> sv = values(seqs[static_cast<size_t>(b)]);
        const std::vector<double> gv = values(seqs[static_cast<size_t>(b)].grad());
        const int64_t len = lengths[static_cast<size_t>(b)], shift = std::string(side) == "left" ? 4 - len : 0;
        for (int64_t t = 0; t < 4; ++t)
          for (int64_t f = 0; f < 2; ++f) {
            const size_t at = static_cast<size_t>((batch_first ? (b * 4 + t) : (t * 3 + b)) * 2 + f);
            const int64_t step = t - shift;
            const bool inside = step >= 0 && step < len;
            EXPECT_EQ(got[at], inside ? sv[static_cast<size_t>(step * 2 + f)] : -7.0)
                << side << (batch_first ? " batch_first" : "") << " b " << b << " t " << t;
            if (inside) EXPECT_EQ(gv[static_cast<size_t>(step * 2 + f)], wv[at]) << side << " gradient";
          }
        seqs[static_cast<size_t>(b)].grad().zero_();
      }
    }
  }
  expect_error([&] { nn::pad_sequence({}); }, {"pad_sequence", "at least one"});
  expect_error([&] { nn::pad_sequence({ones({2, 3}), ones({2, 4})}); },
               {"pad_sequence: sequence 1 has shape (2, 4), sequence 0 (2, 3)"});
  expect_error([&] { nn::pad_sequence({ones({2}), ones({2}, kFloat64)}); }, {"sequence 1 is float64"});
  expect_error([&] { nn::pad_sequence({scalar_tensor(1.0)}); }, {"sequence 0 must have a length dim"});
  expect_error([&] { nn::pad_sequence({ones({2})}, false, 0.0, "middle"); }, {"padding_side is 'middle'"});
}

// ---- gradients ----

TEST(RNN, CellGradientsMatchCentralDifferences) {
  const int64_t N = 2, F = 3, H = 2;
  const auto param = [](IntArrayRef shape, uint64_t seed) { return (randn64(shape, seed) * 0.5).requires_grad_(); };
  const Tensor x = randn64({N, F}, 1).requires_grad_(), h = randn64({N, H}, 2).requires_grad_();
  const Tensor c = randn64({N, H}, 3).requires_grad_();
  for (int64_t G : {1, 3, 4}) {
    const Tensor w_ih = param({G * H, F}, 10 + G), w_hh = param({G * H, H}, 20 + G);
    const Tensor b_ih = param({G * H}, 30 + G), b_hh = param({G * H}, 40 + G);
    if (G == 1) {
      gradcheck([](const std::vector<Tensor>& in) { return nn::functional::rnn_tanh_cell(in[0], in[1], in[2], in[3], in[4], in[5]); },
                {x, h, w_ih, w_hh, b_ih, b_hh});
    } else if (G == 3) {
      gradcheck([](const std::vector<Tensor>& in) { return nn::functional::gru_cell(in[0], in[1], in[2], in[3], in[4], in[5]); },
                {x, h, w_ih, w_hh, b_ih, b_hh});
    } else {
      gradcheck(
          [](const std::vector<Tensor>& in) {
            auto [h2, c2] = nn::functional::lstm_cell(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
            return std::vector<Tensor>{h2, c2};
          },
          {x, h, c, w_ih, w_hh, b_ih, b_hh});
    }
  }
}

TEST(RNN, LayerGradientsThroughStepsDirectionsAndLengthsMatchCentralDifferences) {
  const int64_t L = 3, N = 2, F = 2, H = 2;
  for (RNNMode mode : {RNNMode::Lstm, RNNMode::Gru, RNNMode::RnnTanh}) {
    manual_seed(31);
    auto m = test::make_rnn(mode, F, H, {.num_layers = 2, .bidirectional = true});
    m->to(kFloat64);
    const Tensor x = randn64({L, N, F}, 32).requires_grad_();
    const Tensor h0 = randn64({4, N, H}, 33).requires_grad_();
    const Tensor c0 = randn64({4, N, H}, 34).requires_grad_();
    const bool lstm = mode == RNNMode::Lstm;
    gradcheck(
        [&](const std::vector<Tensor>& in) {
          const nn::RNNOutput out = m->forward(in[0], {in[1], lstm ? in[2] : Tensor()}, {3, 2});
          std::vector<Tensor> outputs{out.output, out.state.h};
          if (lstm) outputs.push_back(out.state.c);
          return outputs;
        },
        lstm ? std::vector<Tensor>{x, h0, c0} : std::vector<Tensor>{x, h0});
    // The weights' gradients, each against central differences of the summed outputs.
    const Tensor probe = randn64({L, N, 2 * H}, 35);
    const auto loss = [&] { return (m->forward(x.detach(), {h0.detach(), lstm ? c0.detach() : Tensor()}, {3, 2}).output * probe).sum(); };
    m->zero_grad();
    loss().backward();
    NoGradGuard no_grad;
    for (const auto& [name, p] : m->named_parameters()) {
      const Tensor g = p.grad();
      ASSERT_TRUE(g.defined()) << name;
      for (int64_t i : {int64_t{0}, p.numel() - 1}) {
        Tensor entry = p.view({-1}).select(0, i);
        const double keep = entry.item<double>(), eps = 1e-6;
        entry.fill_(keep + eps);
        const double up = loss().item<double>();
        entry.fill_(keep - eps);
        const double down = loss().item<double>();
        entry.fill_(keep);
        EXPECT_NEAR(g.view({-1}).select(0, i).item<double>(), (up - down) / (2 * eps), 1e-6)
            << test::rnn_mode_name(mode) << " " << name;
      }
    }
  }
}

// ---- parameters, dropout, training ----

TEST(RNN, ParametersCarryPyTorchsNamesShapesAndOrder) {
  nn::LSTM lstm(10, 20, nn::RNNOptions{.num_layers = 2, .bidirectional = true});
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const auto& [name, p] : lstm->named_parameters()) names.push_back(name), shapes.push_back(p.sizes());
  const std::vector<std::string> want = {
      "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(shapes[0], Shape({80, 10}));
  EXPECT_EQ(shapes[1], Shape({80, 20}));
  EXPECT_EQ(shapes[2], Shape({80}));
  EXPECT_EQ(shapes[8], Shape({80, 40}));  // layer 1 reads both directions
  nn::GRU gru(3, 5, nn::RNNOptions{.bias = false});
  EXPECT_EQ(gru->named_parameters().size(), 2u);
  EXPECT_EQ(gru->weights(0, 0).w_ih.sizes(), Shape({15, 3}));
  nn::GRUCell cell(3, 5);
  names.clear();
  for (const auto& [name, p] : cell->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, std::vector<std::string>({"weight_ih", "weight_hh", "bias_ih", "bias_hh"}));
  // Uniform in +-1/sqrt(hidden_size).
  for (const Tensor& p : lstm->parameters()) {
    EXPECT_LE(values(p.abs().max())[0], 1 / std::sqrt(20.0));
    EXPECT_GT(values(p.abs().max())[0], 0.8 / std::sqrt(20.0));
  }
  EXPECT_EQ(lstm->str(), "LSTM(10, 20, num_layers=2, bidirectional=true)");
}

TEST(RNN, DropoutActsBetweenLayersInTrainingOnly) {
  manual_seed(41);
  nn::LSTM with(4, 8, nn::RNNOptions{.num_layers = 2, .dropout = 0.5});
  manual_seed(41);
  nn::LSTM without(4, 8, nn::RNNOptions{.num_layers = 2});
  const Tensor x = randn({5, 3, 4});
  with->eval();
  expect_near_all(values(with->forward(x, {}).output), values(without->forward(x, {}).output), 0, "eval");
  with->train();
  EXPECT_GT(values((with->forward(x, {}).output - without->forward(x, {}).output).abs().max())[0], 1e-3);
  // One layer: nothing between layers, so no dropout at all.
  manual_seed(42);
  nn::GRU one(4, 8, nn::RNNOptions{.dropout = 0.5});
  expect_near_all(values(one->forward(x, {}).output), values(one->forward(x, {}).output), 0, "one layer");
}

// Integrating over the steps: the class is the sign of the sum of a sequence's 10 values. A model that reads
// only the last step is right about 60% of the time (0.5 + asin(1 / sqrt(10)) / pi); one that does not train
// stays at chance.
TEST(RNN, LstmAndGruLearnTheSignOfASequencesSum) {
  const int64_t L = 10, N = 64;
  for (RNNMode mode : {RNNMode::Lstm, RNNMode::Gru}) {
    manual_seed(51);
    auto rnn = test::make_rnn(mode, 1, 16, {.batch_first = true});
    nn::Linear head(16, 2);
    std::vector<Tensor> params = rnn->parameters();
    for (const Tensor& p : head->parameters()) params.push_back(p);
    optim::Adam opt(params, {.lr = 0.02});
    Generator gen(52);
    const auto batch = [&](int64_t n) {
      Tensor x = randn({n, L, 1}, {}, &gen);
      Tensor y = gt(x.sum({1, 2}), 0.0).to(kInt64);
      return std::pair{x, y};
    };
    for (int step = 0; step < 200; ++step) {
      auto [x, y] = batch(N);
      const Tensor last = rnn->forward(x, {}).state.h.select(0, 0);  // (N, H)
      const Tensor loss = nn::functional::cross_entropy(head(last), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    NoGradGuard no_grad;
    auto [x, y] = batch(1024);  // enough that the accuracy's own noise is about 1%
    const Tensor predicted = head(rnn->forward(x, {}).state.h.select(0, 0)).argmax(1);
    const double accuracy = values(eq(predicted, y).to(kFloat64).mean())[0];
    EXPECT_GT(accuracy, 0.9) << test::rnn_mode_name(mode);
  }
}

// ---- errors ----

TEST(RNN, BadInputsAreClearErrors) {
  nn::LSTM lstm(4, 3, nn::RNNOptions{.num_layers = 2});
  nn::GRU gru(4, 3);
  expect_error([&] { lstm->forward(randn({5, 2, 7}), {}); }, {"LSTM", "(5, 2, 7)", "7 features", "input_size = 4"});
  expect_error([&] { lstm->forward(randn({5, 2, 1, 4}), {}); }, {"LSTM", "(seq_len, batch, 4)"});
  expect_error([&] { lstm->forward(randn({0, 2, 4}), {}); }, {"LSTM", "no steps"});
  expect_error([&] { lstm->forward(randn({5, 2, 4}), {zeros({1, 2, 3}), zeros({1, 2, 3})}); },
               {"LSTM", "initial h", "(1, 2, 3)", "expected (2, 2, 3)"});
  expect_error([&] { lstm->forward(randn({5, 2, 4}), {zeros({2, 2, 3}), Tensor()}); }, {"LSTM", "both h and c"});
  expect_error([&] { gru->forward(randn({5, 2, 4}), {Tensor(), zeros({1, 2, 3})}); }, {"GRU", "only an LSTM"});
  expect_error([&] { gru->forward(randn({5, 2, 4}), {}, {5}); }, {"GRU", "1 lengths for a batch of 2"});
  expect_error([&] { gru->forward(randn({5, 2, 4}), {}, {5, 6}); }, {"GRU", "lengths[1] = 6", "0 .. 5"});
  expect_error([] { nn::GRU(4, 3, nn::RNNOptions{.nonlinearity = "relu"}); }, {"GRU", "only nn::RNN"});
  expect_error([] { nn::RNN(4, 3, nn::RNNOptions{.nonlinearity = "sigmoid"}); }, {"RNN", "'sigmoid'", "tanh or relu"});
  expect_error([] { nn::LSTM(4, 0); }, {"LSTM", "positive"});
  nn::GRUCell cell(4, 3);
  expect_error([&] { cell->forward(randn({2, 5}), Tensor()); }, {"gru_cell", "(2, 5)", "(batch, 4)"});
  expect_error([&] { cell->forward(randn({2, 4}), randn({3, 3})); }, {"gru_cell", "(3, 3)", "expected (2, 3)"});
}

}  // namespace
}  // namespace kiln::rnn_tests
