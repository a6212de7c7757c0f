// The Transformer modules, as PyTorch's, with its submodule names so that a PyTorch state dict loads:
//   TransformerEncoderLayer  self-attention, then a feed-forward block
//   TransformerDecoderLayer  self-attention, attention over the encoder's output (memory), then a feed-forward block
//   TransformerEncoder       a stack of encoder layers, and an optional final norm ("layers.0...", "norm")
//   TransformerDecoder       a stack of decoder layers, and an optional final norm
//   Transformer              an encoder and a decoder, each ending in a LayerNorm ("encoder...", "decoder...")
// Each block is wrapped in a residual connection and a LayerNorm, after it (post-norm, PyTorch's default) or
// before it (norm_first).
//
// Shapes: (S, N, E) sequences time-first, (N, S, E) with batch_first, or unbatched (S, E). Masks as
// MultiheadAttention's: an attention mask (L, S) or (N * nhead, L, S) and a key padding mask (N, S); bool masks
// are true where attention is not allowed, floating masks are added to the scores. An is_causal flag with no
// mask builds the causal mask.
#pragma once

#include <string>
#include <utility>

#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/normalization.h"

namespace kiln::nn {

// The options of one layer, encoder or decoder, as PyTorch's constructor arguments after d_model and nhead.
struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;             // in the attention, after it, and in and after the feed-forward block
  std::string activation = "relu";  // of the feed-forward block: "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;         // false: (S, N, E), PyTorch's default; true: (N, S, E)
  // true: pre-norm, x + sa(norm1(x)) then x + ff(norm2(x)), which trains deep stacks without warmup tricks;
  // false (PyTorch's default): post-norm, norm1(x + sa(x)) then norm2(x + ff(x)), the original Transformer.
  bool norm_first = false;
  // Biases of the attention, the linear layers and the LayerNorms (PyTorch 2.1's `bias`).
  bool bias = true;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

class TransformerEncoderLayerImpl : public Module {
 public:
  using Options = TransformerLayerOptions;  // ModuleHolder takes it as a braced list
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});

  // src: (S, N, E), (N, S, E) with batch_first, or unbatched (S, E); src_mask: (S, S) or (N * nhead, S, S);
  // src_key_padding_mask: (N, S) (unbatched (S)). is_causal with no src_mask builds the causal mask.
  // Returns src's shape.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, {}); }
  std::string extra_repr() const override;

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  const TransformerLayerOptions& options() const { return options_; }

  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  int64_t d_model_, nhead_;
  TransformerLayerOptions options_;
};
using TransformerEncoderLayer = ModuleHolder<TransformerEncoderLayerImpl>;

class TransformerDecoderLayerImpl : public Module {
 public:
  using Options = TransformerLayerOptions;  // ModuleHolder takes it as a braced list
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});

  // tgt: (T, N, E) (or batch-first, or unbatched), memory: (S, N, E), the encoder's output. tgt_mask (T, T) and
  // tgt_key_padding_mask (N, T) go to the self-attention, memory_mask (T, S) and memory_key_padding_mask (N, S)
  // to the attention over memory; the is_causal flags build the causal mask of the attention they name when its
  // mask is not given. Returns tgt's shape.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string extra_repr() const override;

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  const TransformerLayerOptions& options() const { return options_; }

  MultiheadAttention self_attn, multihead_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;

 private:
  int64_t d_model_, nhead_;
  TransformerLayerOptions options_;
};
using TransformerDecoderLayer = ModuleHolder<TransformerDecoderLayerImpl>;

// num_layers copies of `layer` (its parameters, dtype, device and mode, as PyTorch's deepcopy: they start
// equal), applied in turn, then `norm` if one is given.
class TransformerEncoderImpl : public Module {
 public:
  TransformerEncoderImpl(const TransformerEncoderLayer& layer, int64_t num_layers, LayerNorm norm = nullptr);

  // As TransformerEncoderLayer's forward, through every layer.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, {}); }

  TransformerEncoderLayerImpl& layer(size_t i) const { return *layers->at<TransformerEncoderLayerImpl>(i); }

  ModuleList layers;
  LayerNorm norm;  // null when none was given
};
using TransformerEncoder = ModuleHolder<TransformerEncoderImpl>;

// num_layers copies of `layer`, as TransformerEncoder's, each attending to the same memory.
class TransformerDecoderImpl : public Module {
 public:
  TransformerDecoderImpl(const TransformerDecoderLayer& layer, int64_t num_layers, LayerNorm norm = nullptr);

  // As TransformerDecoderLayer's forward, through every layer.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);

  TransformerDecoderLayerImpl& layer(size_t i) const { return *layers->at<TransformerDecoderLayerImpl>(i); }

  ModuleList layers;
  LayerNorm norm;  // null when none was given
};
using TransformerDecoder = ModuleHolder<TransformerDecoderImpl>;

struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  TransformerLayerOptions layer;  // of every encoder and decoder layer; layer_norm_eps and bias also of the final norms
};

// The encoder-decoder Transformer of "Attention Is All You Need", as PyTorch's nn.Transformer: an encoder stack
// and a decoder stack, each ending in a LayerNorm, every weight matrix then drawn Xavier-uniform.
class TransformerImpl : public Module {
 public:
  using Options = TransformerOptions;  // ModuleHolder takes it as a braced list
  explicit TransformerImpl(TransformerOptions options = {});

  // src: (S, N, E), tgt: (T, N, E) (batch-first or unbatched alike); the masks as the layers take them:
  // src_mask (S, S), tgt_mask (T, T), memory_mask (T, S), and key padding masks (N, S), (N, T), (N, S).
  // Returns tgt's shape: the decoder's output over the encoder's.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false, bool memory_is_causal = false);

  // (size, size) float mask: 0 on and below the diagonal, -inf above it (position i sees 0..i).
  static Tensor generate_square_subsequent_mask(int64_t size, TensorOptions options = {});

  const TransformerOptions& options() const { return options_; }

  TransformerEncoder encoder;
  TransformerDecoder decoder;

 private:
  TransformerOptions options_;
};
using Transformer = ModuleHolder<TransformerImpl>;

}  // namespace kiln::nn
