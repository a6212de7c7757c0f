// kiln's RNN, LSTM and GRU (and their cells) against LibTorch's on the same weights and inputs, in float64:
// the parameters are copied by name (so the names and shapes must agree), then outputs, final states and the
// gradients of the input, the initial state and every parameter are compared. Variable lengths go through
// kiln's `lengths` and through PyTorch's pack_padded_sequence / pad_packed_sequence.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/rnn_test_util.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

using nn::RNNMode;

// LibTorch's module of the same kind and options, as one forward: (output, h_n, c_n) from (input, h0, c0).
struct TorchRnn {
  std::shared_ptr<torch::nn::Module> module;
  std::function<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(const torch::Tensor&, const torch::Tensor&,
                                                                      const torch::Tensor&)> forward;
  // The same over a packed batch of the given lengths (batch-first or not as the options say), padded back.
  std::function<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(const torch::Tensor&, const torch::Tensor&,
                                                                      const torch::Tensor&, const torch::Tensor&)> packed;
};

TorchRnn torch_rnn(RNNMode mode, int64_t F, int64_t H, const nn::RNNOptions& o) {
  namespace tnn = torch::nn;
  namespace rnn = torch::nn::utils::rnn;
  TorchRnn r;
  const bool bf = o.batch_first;
  if (mode == RNNMode::Lstm) {
    auto m = tnn::LSTM(tnn::LSTMOptions(F, H).num_layers(o.num_layers).bias(o.bias).batch_first(bf).bidirectional(
        o.bidirectional));
    r.module = m.ptr();
    r.forward = [m](const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& c0) mutable {
      auto [out, state] = m->forward(x, std::make_tuple(h0, c0));
      return std::make_tuple(out, std::get<0>(state), std::get<1>(state));
    };
    r.packed = [m, bf](const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& c0,
                       const torch::Tensor& lengths) mutable {
      auto [out, state] = m->forward_with_packed_input(rnn::pack_padded_sequence(x, lengths, bf, false),
                                                       std::make_tuple(h0, c0));
      auto padded = std::get<0>(rnn::pad_packed_sequence(out, bf, 0.0, x.size(bf ? 1 : 0)));
      return std::make_tuple(padded, std::get<0>(state), std::get<1>(state));
    };
    return r;
  }
  const auto finish = [&](auto m) {
    r.module = m.ptr();
    r.forward = [m](const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor&) mutable {
      auto [out, h] = m->forward(x, h0);
      return std::make_tuple(out, h, torch::Tensor());
    };
    r.packed = [m, bf](const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor&,
                       const torch::Tensor& lengths) mutable {
      auto [out, h] = m->forward_with_packed_input(rnn::pack_padded_sequence(x, lengths, bf, false), h0);
      auto padded = std::get<0>(rnn::pad_packed_sequence(out, bf, 0.0, x.size(bf ? 1 : 0)));
      return std::make_tuple(padded, h, torch::Tensor());
    };
  };
  if (mode == RNNMode::Gru) {
    finish(tnn::GRU(tnn::GRUOptions(F, H).num_layers(o.num_layers).bias(o.bias).batch_first(bf).bidirectional(
        o.bidirectional)));
  } else {
    auto options = tnn::RNNOptions(F, H).num_layers(o.num_layers).bias(o.bias).batch_first(bf).bidirectional(
        o.bidirectional);
    if (mode == RNNMode::RnnRelu) options.nonlinearity(torch::kReLU);
    else options.nonlinearity(torch::kTanh);
    finish(tnn::RNN(options));
  }
  return r;
}

TEST(RnnParity, OutputsStatesAndEveryGradientMatchLibTorch) {
  const int64_t L = 5, N = 3, F = 4, H = 6;
  uint64_t seed = 1;
  for (RNNMode mode : {RNNMode::RnnTanh, RNNMode::RnnRelu, RNNMode::Lstm, RNNMode::Gru}) {
    for (bool bidirectional : {false, true}) {
      for (bool batch_first : {false, true}) {
        for (bool with_lengths : {false, true}) {
          const nn::RNNOptions o{.num_layers = 2, .batch_first = batch_first, .bidirectional = bidirectional};
          const std::string what = std::string(test::rnn_mode_name(mode)) + (bidirectional ? " bidirectional" : "") +
                                   (batch_first ? " batch_first" : "") + (with_lengths ? " with lengths" : "");
          manual_seed(seed++);
          auto ours = test::make_rnn(mode, F, H, o);
          ours->to(kFloat64);
          TorchRnn theirs = torch_rnn(mode, F, H, o);
          theirs.module->to(torch::kDouble);
          copy_parameters(*ours, *theirs.module);

          const int64_t D = bidirectional ? 2 : 1;
          Generator gen(seed++);
          const Tensor x = randn(batch_first ? Shape{N, L, F} : Shape{L, N, F}, kFloat64, &gen).requires_grad_();
          const Tensor h0 = randn({2 * D, N, H}, kFloat64, &gen).requires_grad_();
          const bool lstm = mode == RNNMode::Lstm;
          const Tensor c0 = lstm ? randn({2 * D, N, H}, kFloat64, &gen).requires_grad_() : Tensor();
          const std::vector<int64_t> lengths = with_lengths ? std::vector<int64_t>{3, 5, 1} : std::vector<int64_t>{};
          const Tensor probe = randn(batch_first ? Shape{N, L, D * H} : Shape{L, N, D * H}, kFloat64, &gen);
          const Tensor probe_h = randn({2 * D, N, H}, kFloat64, &gen);

          const nn::RNNOutput out = ours->forward(x, {h0, c0}, lengths);
          Tensor loss = (out.output * probe).sum() + (out.state.h * probe_h).sum();
          if (lstm) loss = loss + (out.state.c * probe_h).sum();
          loss.backward();

          const torch::Tensor tx = to_torch(x).requires_grad_(), th0 = to_torch(h0).requires_grad_();
          const torch::Tensor tc0 = lstm ? to_torch(c0).requires_grad_() : torch::Tensor();
          auto [t_out, t_h, t_c] =
              with_lengths ? theirs.packed(tx, th0, tc0, torch::tensor(std::vector<int64_t>(lengths)))
                           : theirs.forward(tx, th0, tc0);
          torch::Tensor t_loss = (t_out * to_torch(probe)).sum() + (t_h * to_torch(probe_h)).sum();
          if (lstm) t_loss = t_loss + (t_c * to_torch(probe_h)).sum();
          t_loss.backward();

          expect_same(out.output, t_out, 1e-12, what + ": output");
          expect_same(out.state.h, t_h, 1e-12, what + ": h_n");
          if (lstm) expect_same(out.state.c, t_c, 1e-12, what + ": c_n");
          expect_same(x.grad(), tx.grad(), 1e-11, what + ": input gradient");
          expect_same(h0.grad(), th0.grad(), 1e-11, what + ": h0 gradient");
          if (lstm) expect_same(c0.grad(), tc0.grad(), 1e-11, what + ": c0 gradient");
          auto named = theirs.module->named_parameters();
          for (const auto& [name, p] : ours->named_parameters())
            expect_same(p.grad(), named[name].grad(), 1e-11, what + ": gradient of " + name);
        }
      }
    }
  }
}

TEST(RnnParity, CellsMatchLibTorch) {
  const int64_t N = 3, F = 4, H = 5;
  manual_seed(9);
  nn::RNNCell rnn(F, H, true, "relu");
  nn::LSTMCell lstm(F, H);
  nn::GRUCell gru(F, H);
  torch::nn::RNNCell t_rnn(torch::nn::RNNCellOptions(F, H).nonlinearity(torch::kReLU));
  torch::nn::LSTMCell t_lstm(F, H);
  torch::nn::GRUCell t_gru(F, H);
  for (auto [ours, theirs] : std::vector<std::pair<nn::Module*, torch::nn::Module*>>{
           {rnn.ptr().get(), t_rnn.ptr().get()}, {lstm.ptr().get(), t_lstm.ptr().get()},
           {gru.ptr().get(), t_gru.ptr().get()}}) {
    ours->to(kFloat64);
    theirs->to(torch::kDouble);
    copy_parameters(*ours, *theirs);
  }
  Generator gen(10);
  const Tensor x = randn({N, F}, kFloat64, &gen), h = randn({N, H}, kFloat64, &gen), c = randn({N, H}, kFloat64, &gen);
  const torch::Tensor tx = to_torch(x), th = to_torch(h), tc = to_torch(c);
  expect_same(rnn->forward(x, h), t_rnn->forward(tx, th), 1e-12, "RNNCell");
  const nn::RNNState s = lstm->forward(x, {h, c});
  auto [t_h, t_c] = t_lstm->forward(tx, std::make_tuple(th, tc));
  expect_same(s.h, t_h, 1e-12, "LSTMCell h");
  expect_same(s.c, t_c, 1e-12, "LSTMCell c");
  expect_same(gru->forward(x, h), t_gru->forward(tx, th), 1e-12, "GRUCell");
}

}  // namespace
}  // namespace kiln::parity
