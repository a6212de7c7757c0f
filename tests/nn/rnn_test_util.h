// Helpers shared by the recurrent layers' tests (tests/nn/rnn_test.cpp) and their LibTorch parity suite
// (tests/parity/rnn_parity_test.cpp).
#pragma once

#include <memory>

#include "kiln/nn/rnn.h"

namespace kiln::test {

// An RNN (tanh or relu), LSTM or GRU of `mode`, with options o.
inline std::shared_ptr<nn::RNNBaseImpl> make_rnn(nn::RNNMode mode, int64_t input_size, int64_t hidden_size,
                                                 nn::RNNOptions o) {
  switch (mode) {
    case nn::RNNMode::Lstm: return nn::LSTM(input_size, hidden_size, o).ptr();
    case nn::RNNMode::Gru: return nn::GRU(input_size, hidden_size, o).ptr();
    case nn::RNNMode::RnnRelu: o.nonlinearity = "relu"; return nn::RNN(input_size, hidden_size, o).ptr();
    default: return nn::RNN(input_size, hidden_size, o).ptr();
  }
}

inline const char* rnn_mode_name(nn::RNNMode mode) {
  switch (mode) {
    case nn::RNNMode::Lstm: return "LSTM";
    case nn::RNNMode::Gru: return "GRU";
    case nn::RNNMode::RnnRelu: return "RNN relu";
    default: return "RNN tanh";
  }
}

}  // namespace kiln::test
