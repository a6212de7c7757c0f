// Multi-head attention, as PyTorch's nn.MultiheadAttention: the differentiable function
// functional::multi_head_attention_forward and the module that owns its weights under PyTorch's names
// (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias; q/k/v_proj_weight when keys or values have
// their own sizes), so a PyTorch state dict loads.
//
// The math is composed of autograd ops (linear, bmm, softmax, where, dropout): it has no backward of its own and
// runs on every device those run on. Masks, bool or float, are turned into one additive float mask (true ->
// -inf) and added to the scores before the softmax.
//
// NOTE: a query whose keys are all masked (every key padded, or a causal mask over left padding) gets a softmax
// over only -inf. PyTorch returns NaN for that row, and the NaN then spreads through the loss and the gradients
// even when the row is ignored afterwards. kiln gives the row zero attention weights instead: its attention
// output is 0 (so the module's output is out_proj's bias) and no gradient flows through it.
#pragma once

#include <optional>

#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// The attention's result: output like the query; weights (undefined unless need_weights) are the attention
// probabilities after dropout, averaged over heads (N, L, S) or per head (N, H, L, S) (unbatched: no N).
struct AttentionOutput {
  Tensor output;
  Tensor weights;
};

namespace functional {

struct MultiHeadAttentionArgs {
  // (N, S) (unbatched: (S)): bool, true = ignore that key; or floating, added to the scores.
  Tensor key_padding_mask;
  // (L, S) or (N * num_heads, L, S): bool, true = not allowed; or floating, added to the scores.
  Tensor attn_mask;
  bool need_weights = true;
  bool average_attn_weights = true;
  // Query i may only attend to keys j <= i. With no attn_mask the causal mask is built here; with one,
  // attn_mask is taken to be that mask (PyTorch's "hint").
  bool is_causal = false;
  double dropout_p = 0.0;  // on the attention weights, when training
  bool training = true;
  // Used when in_proj_weight is undefined (keys or values of other sizes than the query): (E, E), (E, kdim),
  // (E, vdim).
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;
};

// query: (L, N, E), key: (S, N, kdim), value: (S, N, vdim) (unbatched: no N); in_proj_weight: (3E, E) (q, k, v
// stacked; then kdim == vdim == E) or undefined (then args' q/k/v_proj_weight), in_proj_bias: (3E) or
// undefined, out_proj_weight: (E, E), out_proj_bias: (E) or undefined.
// E must split into num_heads heads of E / num_heads. Returns output (L, N, E) and the weights (see above).
AttentionOutput multi_head_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                             int64_t num_heads, const Tensor& in_proj_weight,
                                             const Tensor& in_proj_bias, const Tensor& out_proj_weight,
                                             const Tensor& out_proj_bias, const MultiHeadAttentionArgs& args = {});

// PyTorch 2's F.scaled_dot_product_attention: softmax(q k^T * scale + mask) v, with dropout on the weights.
// query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); the leading dims broadcast.
// attn_mask broadcasts to (..., L, S): bool with true = may attend (the opposite of MultiheadAttention's bool
// masks, as in PyTorch), or floating, added to the scores. is_causal: query i attends keys 0..i (top-left
// aligned when L != S); not together with attn_mask. scale: 1 / sqrt(E) unless given. dropout_p applies
// whenever it is positive (pass 0 in evaluation, as in PyTorch). A query with every key masked gets zero
// weights and a zero output (PyTorch gives NaN there; see the note at the top).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

}  // namespace functional

struct MultiheadAttentionOptions {
  double dropout = 0.0;      // on the attention weights, in training mode
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // false: (L, N, E), PyTorch's default; true: (N, L, E)
  int64_t kdim = 0;          // features of the keys; 0: embed_dim
  int64_t vdim = 0;          // features of the values; 0: embed_dim
};

// Attention of a query sequence over key/value sequences, in num_heads heads of embed_dim / num_heads features.
// When keys and values have embed_dim features the three projections are one in_proj_weight (3E, E); otherwise
// (kdim or vdim set) they are q_proj_weight (E, E), k_proj_weight (E, kdim) and v_proj_weight (E, vdim), as
// PyTorch names them. add_bias_kv and add_zero_attn are not supported. Initialized as PyTorch's: projection
// weights xavier uniform, biases zero, out_proj.weight as a Linear's.
class MultiheadAttentionImpl : public Module {
 public:
  using Options = MultiheadAttentionOptions;  // ModuleHolder takes it as a braced list
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});

  // query: (L, N, E) or (N, L, E) with batch_first, or unbatched (L, E); key, value: the same with S for L and
  // kdim, vdim for E.
  // Masks as functional::MultiHeadAttentionArgs.
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_padding_mask = {}, const Tensor& attn_mask = {}, bool need_weights = true,
                          bool average_attn_weights = true, bool is_causal = false);
  // Self-attention without masks, returning only the output: lets the module sit in a Sequential and take hooks.
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return options_; }

  Tensor in_proj_weight;                               // (3E, E), or undefined when kdim or vdim != E
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // (E, E), (E, kdim), (E, vdim), or undefined
  Tensor in_proj_bias;                                 // (3E) or undefined
  Linear out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
};
using MultiheadAttention = ModuleHolder<MultiheadAttentionImpl>;

}  // namespace kiln::nn
