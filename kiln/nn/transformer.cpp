// The Transformer modules: the submodules in PyTorch's registration order, and each layer's forward as PyTorch's
// _sa_block, _mha_block and _ff_block, wrapped pre-norm or post-norm.
#include "kiln/nn/transformer.h"

#include <limits>

#include "kiln/nn/init.h"

namespace kiln::nn {

namespace {

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  MultiheadAttentionOptions a;
  a.dropout = o.dropout;
  a.bias = o.bias;
  a.batch_first = o.batch_first;
  return a;
}

// Checked before any submodule is built, so that errors name the layer.
int64_t checked_d_model(const char* layer, int64_t d_model, int64_t nhead, const TransformerLayerOptions& o) {
  KILN_CHECK(d_model > 0 && nhead > 0 && o.dim_feedforward > 0, layer, ": d_model, nhead and dim_feedforward must "
             "be positive, got ", d_model, ", ", nhead, " and ", o.dim_feedforward);
  KILN_CHECK(d_model % nhead == 0, layer, ": d_model (", d_model, ") must be divisible by nhead (", nhead, ")");
  KILN_CHECK(o.activation == "relu" || o.activation == "gelu",
             layer, ": activation must be \"relu\" or \"gelu\", got \"", o.activation, "\"");
  return d_model;
}

Tensor activation(const TransformerLayerOptions& o, const Tensor& x) {
  return o.activation == "gelu" ? gelu(x) : relu(x);
}

// linear2(dropout(activation(linear1(x)))): the feed-forward block both layers share.
template <class Layer>
Tensor feed_forward(Layer& l, const TransformerLayerOptions& o, const Tensor& x) {
  return l.linear2(l.dropout(activation(o, l.linear1(x))));
}

LayerNorm layer_norm(int64_t d_model, const TransformerLayerOptions& o) {
  return LayerNorm(Shape{d_model}, o.layer_norm_eps, /*elementwise_affine=*/true, o.bias);
}

std::string layer_repr(const TransformerLayerOptions& o) {
  return detail::concat("dim_feedforward=", o.dim_feedforward, ", activation=", o.activation,
                        ", norm_first=", o.norm_first ? "true" : "false");
}

// A copy of a layer with its own parameters, equal to the original's, on its device and dtype, in its mode,
// with its requires_grad flags: what PyTorch's copy.deepcopy gives the stacks.
template <class Impl>
std::shared_ptr<Impl> copy_of(const Impl& layer) {
  auto copy = std::make_shared<Impl>(layer.d_model(), layer.nhead(), layer.options());
  const Tensor& first = layer.self_attn->out_proj->weight;
  copy->to(first.device(), first.dtype());
  copy->load_state_dict(layer.state_dict());
  auto source = layer.named_parameters();
  auto target = copy->named_parameters();
  for (size_t i = 0; i < source.size(); ++i) target[i].second.requires_grad_(source[i].second.requires_grad());
  copy->train(layer.is_training());
  return copy;
}

template <class Impl>
ModuleList copies(const char* stack, const ModuleHolder<Impl>& layer, int64_t num_layers) {
  KILN_CHECK(!layer.is_empty(), stack, ": no layer given to copy");
  KILN_CHECK(num_layers > 0, stack, ": num_layers must be positive, got ", num_layers);
  ModuleList list;
  for (int64_t i = 0; i < num_layers; ++i) list->push_back(std::shared_ptr<Module>(copy_of(*layer)));
  return list;
}

}  // namespace

// ---- TransformerEncoderLayer ----

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead,
                                                         TransformerLayerOptions options)
    : Module("TransformerEncoderLayer"),
      self_attn(checked_d_model("TransformerEncoderLayer", d_model, nhead, options), nhead,
                attention_options(options)),
      linear1(d_model, options.dim_feedforward, options.bias),
      dropout(options.dropout),
      linear2(options.dim_feedforward, d_model, options.bias),
      norm1(layer_norm(d_model, options)),
      norm2(layer_norm(d_model, options)),
      dropout1(options.dropout),
      dropout2(options.dropout),
      d_model_(d_model),
      nhead_(nhead),
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

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, bool is_causal) {
  auto self_attention = [&](const Tensor& x) {
    return dropout1(self_attn(x, x, x, src_key_padding_mask, src_mask, /*need_weights=*/false,
                               /*average_attn_weights=*/true, is_causal)
                        .output);
  };
  auto ff = [&](const Tensor& x) { return dropout2(feed_forward(*this, options_, x)); };
  Tensor x = src;
  if (options_.norm_first) {
    x = x + self_attention(norm1(x));
    x = x + ff(norm2(x));
  } else {
    x = norm1(x + self_attention(x));
    x = norm2(x + ff(x));
  }
  return x;
}

std::string TransformerEncoderLayerImpl::extra_repr() const { return layer_repr(options_); }

// ---- TransformerDecoderLayer ----

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead,
                                                         TransformerLayerOptions options)
    : Module("TransformerDecoderLayer"),
      self_attn(checked_d_model("TransformerDecoderLayer", d_model, nhead, options), nhead,
                attention_options(options)),
      multihead_attn(d_model, nhead, attention_options(options)),
      linear1(d_model, options.dim_feedforward, options.bias),
      dropout(options.dropout),
      linear2(options.dim_feedforward, d_model, options.bias),
      norm1(layer_norm(d_model, options)),
      norm2(layer_norm(d_model, options)),
      norm3(layer_norm(d_model, options)),
      dropout1(options.dropout),
      dropout2(options.dropout),
      dropout3(options.dropout),
      d_model_(d_model),
      nhead_(nhead),
      options_(std::move(options)) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("dropout3", dropout3);
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                            const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                            const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                            bool memory_is_causal) {
  KILN_CHECK(memory.defined(), "TransformerDecoderLayer: memory (the encoder's output) is required");
  auto self_attention = [&](const Tensor& x) {
    return dropout1(self_attn(x, x, x, tgt_key_padding_mask, tgt_mask, /*need_weights=*/false,
                               /*average_attn_weights=*/true, tgt_is_causal)
                        .output);
  };
  auto cross_attention = [&](const Tensor& x) {
    return dropout2(multihead_attn(x, memory, memory, memory_key_padding_mask, memory_mask,
                                    /*need_weights=*/false, /*average_attn_weights=*/true, memory_is_causal)
                        .output);
  };
  auto ff = [&](const Tensor& x) { return dropout3(feed_forward(*this, options_, x)); };
  Tensor x = tgt;
  if (options_.norm_first) {
    x = x + self_attention(norm1(x));
    x = x + cross_attention(norm2(x));
    x = x + ff(norm3(x));
  } else {
    x = norm1(x + self_attention(x));
    x = norm2(x + cross_attention(x));
    x = norm3(x + ff(x));
  }
  return x;
}

std::string TransformerDecoderLayerImpl::extra_repr() const { return layer_repr(options_); }

// ---- the stacks ----

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderLayer& layer, int64_t num_layers,
                                               LayerNorm final_norm)
    : Module("TransformerEncoder"),
      layers(copies("TransformerEncoder", layer, num_layers)),
      norm(std::move(final_norm)) {
  register_module("layers", layers);
  if (!norm.is_empty()) register_module("norm", norm);
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                       bool is_causal) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) x = layer(i).forward(x, mask, src_key_padding_mask, is_causal);
  return norm.is_empty() ? x : norm(x);
}

TransformerDecoderImpl::TransformerDecoderImpl(const TransformerDecoderLayer& layer, int64_t num_layers,
                                               LayerNorm final_norm)
    : Module("TransformerDecoder"),
      layers(copies("TransformerDecoder", layer, num_layers)),
      norm(std::move(final_norm)) {
  register_module("layers", layers);
  if (!norm.is_empty()) register_module("norm", norm);
}

Tensor TransformerDecoderImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                       const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                       const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                       bool memory_is_causal) {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layer(i).forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         tgt_is_causal, memory_is_causal);
  return norm.is_empty() ? x : norm(x);
}

// ---- Transformer ----

namespace {
const TransformerOptions& checked(const TransformerOptions& o) {
  KILN_CHECK(o.num_encoder_layers > 0 && o.num_decoder_layers > 0, "Transformer: num_encoder_layers and "
             "num_decoder_layers must be positive, got ", o.num_encoder_layers, " and ", o.num_decoder_layers);
  return o;
}
}  // namespace

TransformerImpl::TransformerImpl(TransformerOptions options)
    : Module("Transformer"),
      encoder(TransformerEncoderLayer(checked(options).d_model, options.nhead, options.layer),
              options.num_encoder_layers, layer_norm(options.d_model, options.layer)),
      decoder(TransformerDecoderLayer(options.d_model, options.nhead, options.layer), options.num_decoder_layers,
              layer_norm(options.d_model, options.layer)),
      options_(std::move(options)) {
  register_module("encoder", encoder);
  register_module("decoder", decoder);
  // As PyTorch's _reset_parameters: every matrix Xavier-uniform, so the copied layers stop being equal.
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor TransformerImpl::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                                const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                                const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                                bool src_is_causal, bool tgt_is_causal, bool memory_is_causal) {
  KILN_CHECK(src.defined() && tgt.defined(), "Transformer: src and tgt are both required");
  KILN_CHECK(src.dim() == tgt.dim() && (src.dim() == 2 || src.dim() == 3),
             "Transformer: src and tgt must both be batched (3 dims) or both unbatched (2 dims), got shapes ",
             shape_str(src.sizes()), " and ", shape_str(tgt.sizes()));
  const int64_t batch_dim = options_.layer.batch_first ? 0 : 1;
  KILN_CHECK(src.dim() == 2 || src.size(batch_dim) == tgt.size(batch_dim), "Transformer: src and tgt must have the "
             "same batch size, got shapes ", shape_str(src.sizes()), " and ", shape_str(tgt.sizes()),
             options_.layer.batch_first ? " (batch_first)" : " (time first)");
  KILN_CHECK(src.size(-1) == options_.d_model && tgt.size(-1) == options_.d_model, "Transformer: src and tgt must "
             "have d_model = ", options_.d_model, " features, got shapes ", shape_str(src.sizes()), " and ",
             shape_str(tgt.sizes()));
  Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                          tgt_is_causal, memory_is_causal);
}

Tensor TransformerImpl::generate_square_subsequent_mask(int64_t size, TensorOptions options) {
  KILN_CHECK(size >= 0, "Transformer::generate_square_subsequent_mask: size must be non-negative, got ", size);
  return triu(full({size, size}, -std::numeric_limits<double>::infinity(), options), 1);
}

}  // namespace kiln::nn
