// The built-in models of `kiln train` (model.name in a run.yaml): plain nn modules, built from the config and
// the shape of the data, usable from C++ without the command line too.
//   mlp           flatten -> [linear -> relu (-> dropout)] per model.hidden -> linear to the classes
//   cnn           [conv 3x3 pad 1 -> relu -> max-pool 2] per model.channels -> flatten -> linear(model.fc)
//                 -> relu (-> dropout) -> linear to the classes (the main job's network with [32, 64], 128)
//   resnet-small  a stem conv, three stages of one residual block each (16, 32, 64 channels, the last two
//                 halving the resolution), global average pooling, linear: a CIFAR-style ResNet-8
//   gpt-mini      a decoder-only transformer over token sequences (GPT-2's layout at toy size): token and
//                 position embeddings, model.layers pre-norm blocks of causal self-attention (model.heads
//                 heads) and a GELU feed-forward of 4 * model.embed_dim, a final LayerNorm, and a linear head
//                 to the vocabulary; (N, S) token ids -> (N, S, vocabulary) next-token scores
//   lstm-lm       a recurrent language model over token sequences: token embeddings of model.embed_dim,
//                 model.layers LSTM layers as wide (model.dropout between them and before the head), and a
//                 linear head to the vocabulary; (N, S) token ids -> (N, S, vocabulary) next-token scores
#pragma once

#include <memory>

#include "kiln/nn/nn.h"
#include "kiln/tools/run_config.h"

namespace kiln::tools {

// What a model needs to know about its input: one example's shape ((C, H, W) for images, (F) for features,
// (S) for token sequences) and the number of classes (for tokens: the vocabulary, every position a class).
struct DataInfo {
  Shape input_shape;
  int64_t num_classes = 0;
  bool tokens = false;  // examples are int64 token ids, labelled per position (data.name text)
};

// A language model over token sequences, as kiln generate drives one: forward maps (N, S) int64 token ids, S at
// most context_size(), to (N, S, vocab_size()) scores for each position's next token, position t seeing tokens
// 0 .. t only.
class LanguageModel : public nn::Module {
 public:
  using nn::Module::Module;
  // The longest sequence the model takes (the windows it was trained on).
  virtual int64_t context_size() const = 0;
  virtual int64_t vocab_size() const = 0;
};

// A decoder-only transformer language model (gpt-mini above). Submodule names: tok_emb, pos_emb, drop,
// blocks.<i> (nn::TransformerEncoderLayer, PyTorch's names inside), norm, head.
class GptMini : public LanguageModel {
 public:
  GptMini(int64_t vocab_size, int64_t block_size, int64_t layers, int64_t heads, int64_t embed_dim, double dropout);
  // tokens: (N, S) int64 with S <= block_size -> (N, S, vocab_size); position t sees tokens 0 .. t only.
  Tensor forward(const Tensor& tokens) override;
  int64_t block_size() const { return block_size_; }
  int64_t context_size() const override { return block_size_; }
  int64_t vocab_size() const override { return vocab_size_; }

  nn::Embedding tok_emb, pos_emb;
  nn::Dropout drop;
  nn::ModuleList blocks;
  nn::LayerNorm norm;
  nn::Linear head;
  // In training, keep only each block's input for backward and run the block again there
  // (autograd::checkpoint): the same gradients, bit for bit, for less memory and about one more forward.
  bool checkpoint_activations = false;

 private:
  int64_t vocab_size_, block_size_;
};

// A recurrent language model (lstm-lm above). Submodule names: tok_emb, lstm (nn::LSTM, PyTorch's names inside),
// drop, head.
class LstmLm : public LanguageModel {
 public:
  // context_size: the windows it trains on (data.block_size); an LSTM has no limit of its own, but generation
  // feeds it windows of that length, as training did.
  LstmLm(int64_t vocab_size, int64_t context_size, int64_t layers, int64_t embed_dim, double dropout);
  // tokens: (N, S) int64 with S <= context_size -> (N, S, vocab_size), each sequence from a zero state.
  Tensor forward(const Tensor& tokens) override;
  int64_t context_size() const override { return context_size_; }
  int64_t vocab_size() const override { return vocab_size_; }

  nn::Embedding tok_emb;
  nn::LSTM lstm;
  nn::Dropout drop;
  nn::Linear head;

 private:
  int64_t vocab_size_, context_size_;
};

std::shared_ptr<nn::Module> make_model(const RunConfig::Model& config, const DataInfo& info);

}  // namespace kiln::tools
