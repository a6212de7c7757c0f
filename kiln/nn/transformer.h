// TransformerEncoderLayer, as PyTorch's: self-attention then a feed-forward block, each wrapped in a residual
// connection and a LayerNorm, with PyTorch's submodule names (self_attn, linear1, dropout, linear2, norm1,
// norm2, dropout1, dropout2) so a PyTorch state dict loads.
#pragma once

#include <string>
#include <utility>

#include "kiln/nn/attention.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/normalization.h"

namespace kiln::nn {

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;             // in the attention, after it, and in and after the feed-forward block
  std::string activation = "relu";  // of the feed-forward block: "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;         // false: (S, N, E), PyTorch's default; true: (N, S, E)
  // true: pre-norm, x + sa(norm1(x)) then x + ff(norm2(x)), which trains deep stacks without warmup tricks;
  // false (PyTorch's default): post-norm, norm1(x + sa(x)) then norm2(x + ff(x)), the original Transformer.
  bool norm_first = false;
  // Biases of the attention and the linear layers. false is refused: PyTorch then also drops the LayerNorms'
  // biases, and kiln's LayerNorm has no such option yet, so the state dict would not match.
  bool bias = true;
};

class TransformerEncoderLayerImpl : public Module {
 public:
  using Options = TransformerEncoderLayerOptions;  // ModuleHolder takes it as a braced list
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});

  // src: (S, N, E), (N, S, E) with batch_first, or unbatched (S, E); src_mask: (S, S) or (N * nhead, S, S);
  // src_key_padding_mask: (N, S) (unbatched (S)); bool masks: true = masked; floating masks are added to the
  // scores. is_causal with no src_mask builds the causal mask. Returns src's shape.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, {}); }
  std::string extra_repr() const override;

  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  Tensor activation(const Tensor& x) const;
  TransformerEncoderLayerOptions options_;
};
using TransformerEncoderLayer = ModuleHolder<TransformerEncoderLayerImpl>;

}  // namespace kiln::nn
