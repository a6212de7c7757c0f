// TransformerEncoderLayer: the submodules in PyTorch's order, and forward as PyTorch's _sa_block and _ff_block
// wrapped pre-norm or post-norm.
#include "kiln/nn/transformer.h"

namespace kiln::nn {

namespace {
MultiheadAttentionOptions attention_options(const TransformerEncoderLayerOptions& o) {
  MultiheadAttentionOptions a;
  a.dropout = o.dropout;
  a.bias = o.bias;
  a.batch_first = o.batch_first;
  return a;
}
// Checked before any submodule is built, so errors name this layer.
int64_t checked_d_model(int64_t d_model, int64_t nhead, const TransformerEncoderLayerOptions& o) {
  KILN_CHECK(d_model > 0 && nhead > 0 && o.dim_feedforward > 0, "TransformerEncoderLayer: d_model, nhead and "
             "dim_feedforward must be positive, got ", d_model, ", ", nhead, " and ", o.dim_feedforward);
  KILN_CHECK(d_model % nhead == 0, "TransformerEncoderLayer: d_model (", d_model, ") must be divisible by nhead (",
             nhead, ")");
  KILN_CHECK(o.activation == "relu" || o.activation == "gelu",
             "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"", o.activation, "\"");
  KILN_CHECK(o.bias, "TransformerEncoderLayer: bias = false is not supported (it needs LayerNorm without a bias)");
  return d_model;
}
}  // namespace

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead,
                                                         TransformerEncoderLayerOptions options)
    : Module("TransformerEncoderLayer"),
      self_attn(checked_d_model(d_model, nhead, options), nhead, attention_options(options)),
      linear1(d_model, options.dim_feedforward, options.bias),
      dropout(options.dropout),
      linear2(options.dim_feedforward, d_model, options.bias),
      norm1(Shape{d_model}, options.layer_norm_eps),
      norm2(Shape{d_model}, options.layer_norm_eps),
      dropout1(options.dropout),
      dropout2(options.dropout),
      options_(std::move(options)) {
  // PyTorch's registration order: its state dict lists the keys in this order.
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayerImpl::activation(const Tensor& x) const {
  return options_.activation == "gelu" ? gelu(x) : relu(x);
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, bool is_causal) {
  auto self_attention = [&](const Tensor& x) {
    return dropout1(self_attn->forward(x, x, x, src_key_padding_mask, src_mask, /*need_weights=*/false,
                                       /*average_attn_weights=*/true, is_causal)
                        .output);
  };
  auto feed_forward = [&](const Tensor& x) { return dropout2(linear2(dropout(activation(linear1(x))))); };
  Tensor x = src;
  if (options_.norm_first) {
    x = x + self_attention(norm1(x));
    x = x + feed_forward(norm2(x));
  } else {
    x = norm1(x + self_attention(x));
    x = norm2(x + feed_forward(x));
  }
  return x;
}

std::string TransformerEncoderLayerImpl::extra_repr() const {
  return detail::concat("dim_feedforward=", options_.dim_feedforward, ", activation=", options_.activation,
                        ", norm_first=", options_.norm_first ? "true" : "false");
}

}  // namespace kiln::nn
