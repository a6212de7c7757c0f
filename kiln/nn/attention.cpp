// Multi-head attention: the function (projections, heads, masks, softmax, weighted sum, output projection),
// then the module that holds its weights. Layout as PyTorch's: (L, N, E) sequences, and heads folded into the
// batch as (N * num_heads, L, head_dim) with head h of batch n at row n * num_heads + h, the order a 3-D
// attn_mask uses.
#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

namespace functional {

namespace {

constexpr const char* kOp = "multi_head_attention";

// A bool mask (true = masked) as an additive one of `dtype` (-inf where masked), or a floating one converted.
Tensor additive_mask(const Tensor& mask, const char* name, const Tensor& query) {
  KILN_CHECK(mask.device() == query.device(), kOp, ": ", name, " is on ", mask.device(), " but query is on ",
             query.device());
  if (mask.dtype() == kBool) {
    Tensor zero = zeros(mask.sizes(), TensorOptions(query.dtype()).device(query.device()));
    return masked_fill(zero, mask, -std::numeric_limits<double>::infinity());
  }
  KILN_CHECK(mask.is_floating_point(), kOp, ": ", name, " must be bool (true = masked) or floating (added to the "
             "scores), got dtype ", mask.dtype());
  return mask.to(query.dtype());
}

// softmax(scores + mask) over the last dim, mask additive and broadcastable to scores.
// NOTE: a row with every key masked would be a softmax of -inf only: NaN, and NaN gradients through
// softmax's backward even where the row is overwritten later. Those rows get finite scores before the
// softmax and zero weights after it (see attention.h).
Tensor masked_softmax(const Tensor& scores, const Tensor& mask) {
  Tensor masked = scores + mask;
  Tensor dead = all(eq(mask, -std::numeric_limits<double>::infinity()), {-1}, /*keepdim=*/true);
  return where(dead, 0.0, softmax(where(dead, 0.0, masked), -1));
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  constexpr const char* op = "scaled_dot_product_attention";
  KILN_CHECK(query.defined() && key.defined() && value.defined(), op, ": query, key and value must be defined");
  KILN_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2, op, ": query (..., L, E), key (..., S, E) "
             "and value (..., S, Ev) need at least 2 dims, got ", shape_str(query.sizes()), ", ",
             shape_str(key.sizes()), " and ", shape_str(value.sizes()));
  KILN_CHECK(query.is_floating_point(), op, ": query must be floating, got dtype ", query.dtype());
  KILN_CHECK(key.size(-1) == query.size(-1), op, ": key ", shape_str(key.sizes()), " must end in the query's E = ",
             query.size(-1), " (query ", shape_str(query.sizes()), ")");
  KILN_CHECK(value.size(-2) == key.size(-2), op, ": value ", shape_str(value.sizes()), " must have as many rows S as "
             "key ", shape_str(key.sizes()));
  KILN_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  KILN_CHECK(!(attn_mask.defined() && is_causal), op, ": give attn_mask or is_causal, not both (as PyTorch)");
  const int64_t L = query.size(-2), S = key.size(-2);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  Tensor scores = matmul(query * s, key.transpose(-2, -1));  // (..., L, S)
  Tensor mask;
  const double inf = std::numeric_limits<double>::infinity();
  if (attn_mask.defined()) {
    KILN_CHECK(attn_mask.device() == query.device(), op, ": attn_mask is on ", attn_mask.device(), " but query is on ",
               query.device());
    KILN_CHECK(attn_mask.dim() >= 2 && (attn_mask.size(-2) == L || attn_mask.size(-2) == 1) &&
                   (attn_mask.size(-1) == S || attn_mask.size(-1) == 1),
               op, ": attn_mask ", shape_str(attn_mask.sizes()), " must broadcast to (..., L, S) = (..., ", L, ", ", S,
               ")");
    if (attn_mask.dtype() == kBool) {  // true: takes part (the opposite of MultiheadAttention's masks)
      mask = where(attn_mask, zeros(attn_mask.sizes(), TensorOptions(query.dtype()).device(query.device())), -inf);
    } else {
      KILN_CHECK(attn_mask.is_floating_point(), op, ": attn_mask must be bool (true = attend) or floating (added to "
                 "the scores), got dtype ", attn_mask.dtype());
      mask = attn_mask.to(query.dtype());
    }
  } else if (is_causal) {
    // query i sees keys 0..i (the top-left triangle, also when L != S, as PyTorch)
    mask = triu(full({L, S}, -inf, TensorOptions(query.dtype()).device(query.device())), 1);
  }
  Tensor attn = mask.defined() ? masked_softmax(scores, mask) : softmax(scores, -1);
  if (dropout_p > 0) attn = dropout(attn, dropout_p, /*training=*/true);
  return matmul(attn, value);
}

AttentionOutput multi_head_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                             int64_t num_heads, const Tensor& in_proj_weight,
                                             const Tensor& in_proj_bias, const Tensor& out_proj_weight,
                                             const Tensor& out_proj_bias, const MultiHeadAttentionArgs& args) {
  // ---- shapes ----
  KILN_CHECK(query.dim() == 3 || query.dim() == 2, kOp, ": query must be (L, N, E) or unbatched (L, E), got shape ",
             shape_str(query.sizes()));
  KILN_CHECK(query.is_floating_point(), kOp, ": query must be floating, got dtype ", query.dtype());
  const bool batched = query.dim() == 3;
  const int64_t E = query.size(-1);
  KILN_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), kOp, ": query ", shape_str(query.sizes()),
             ", key ", shape_str(key.sizes()), " and value ", shape_str(value.sizes()),
             " must all be batched (3-D) or all unbatched (2-D)");
  KILN_CHECK(key.size(0) == value.size(0) && (!batched || key.size(1) == value.size(1)), kOp, ": key ",
             shape_str(key.sizes()), " and value ", shape_str(value.sizes()), " must have the same length",
             batched ? " and batch size" : "");
  KILN_CHECK(!batched || key.size(1) == query.size(1), kOp, ": key ", shape_str(key.sizes()), " has batch size ",
             key.size(1), " but query ", shape_str(query.sizes()), " has ", query.size(1));
  KILN_CHECK(num_heads > 0 && E % num_heads == 0, kOp, ": embed dim ", E, " must split into num_heads = ",
             num_heads, " equal heads");
  const bool packed = in_proj_weight.defined();
  if (packed) {
    KILN_CHECK(in_proj_weight.dim() == 2 && in_proj_weight.size(0) == 3 * E && in_proj_weight.size(1) == E, kOp,
               ": in_proj_weight must be (3 * embed_dim, embed_dim) = (", 3 * E, ", ", E, ") for query ",
               shape_str(query.sizes()), ", got ", shape_str(in_proj_weight.sizes()));
    KILN_CHECK(key.size(-1) == E && value.size(-1) == E, kOp, ": with in_proj_weight, key and value must end in ",
               "embed_dim = ", E, " like the query, got key ", shape_str(key.sizes()), " and value ",
               shape_str(value.sizes()), " (separate q/k/v_proj_weight take other sizes)");
  } else {
    auto check = [&](const Tensor& w, const char* name, const char* in_name, int64_t in) {
      KILN_CHECK(w.defined() && w.dim() == 2 && w.size(0) == E && w.size(1) == in, kOp, ": ", name, " must be (", E,
                 ", ", in, ") = (embed_dim, ", in_name, "'s last dim), got ",
                 w.defined() ? shape_str(w.sizes()) : std::string("undefined"),
                 " (in_proj_weight is undefined, so q/k/v_proj_weight are used)");
    };
    check(args.q_proj_weight, "q_proj_weight", "query", E);
    check(args.k_proj_weight, "k_proj_weight", "key", key.size(-1));
    check(args.v_proj_weight, "v_proj_weight", "value", value.size(-1));
  }
  KILN_CHECK(!in_proj_bias.defined() || (in_proj_bias.dim() == 1 && in_proj_bias.size(0) == 3 * E), kOp,
             ": in_proj_bias must be (3 * embed_dim) = (", 3 * E, "), got ", shape_str(in_proj_bias.sizes()));
  KILN_CHECK(out_proj_weight.dim() == 2 && out_proj_weight.size(0) == E && out_proj_weight.size(1) == E, kOp,
             ": out_proj_weight must be (", E, ", ", E, "), got ", shape_str(out_proj_weight.sizes()));

  const bool self_attention = packed && query.is_same_view(key) && key.is_same_view(value);
  // Unbatched inputs go through as a batch of one.
  Tensor q_in = batched ? query : query.unsqueeze(1), k_in = batched ? key : key.unsqueeze(1),
         v_in = batched ? value : value.unsqueeze(1);
  const int64_t L = q_in.size(0), N = q_in.size(1), S = k_in.size(0), H = num_heads, d = E / H;

  // ---- projections: (L, N, E) -> q, k, v ----
  Tensor q, k, v;
  if (self_attention) {  // one GEMM for all three
    std::vector<Tensor> qkv = chunk(linear(q_in, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    std::vector<Tensor> w = packed ? chunk(in_proj_weight, 3, 0)
                                   : std::vector<Tensor>{args.q_proj_weight, args.k_proj_weight, args.v_proj_weight};
    std::vector<Tensor> b = in_proj_bias.defined() ? chunk(in_proj_bias, 3, 0) : std::vector<Tensor>(3);
    q = linear(q_in, w[0], b[0]);
    k = linear(k_in, w[1], b[1]);
    v = linear(v_in, w[2], b[2]);
  }
  // (len, N, E) -> (N * H, len, d)
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({len, N * H, d}).transpose(0, 1); };
  Tensor scores = bmm(heads(q, L) * (1.0 / std::sqrt(static_cast<double>(d))), heads(k, S).transpose(1, 2));

  // ---- masks, as one additive mask broadcastable to (N, H, L, S) ----
  Tensor mask;
  if (args.attn_mask.defined()) {
    const Tensor& m = args.attn_mask;
    bool per_query = m.dim() == 2 && m.size(0) == L && m.size(1) == S;
    bool per_head = m.dim() == 3 && m.size(0) == N * H && m.size(1) == L && m.size(2) == S;
    KILN_CHECK(per_query || per_head, kOp, ": attn_mask must be (L, S) = (", L, ", ", S,
               ") or (N * num_heads, L, S) = (", N * H, ", ", L, ", ", S, "), got shape ", shape_str(m.sizes()));
    mask = additive_mask(m, "attn_mask", query).view(per_query ? Shape{1, 1, L, S} : Shape{N, H, L, S});
  } else if (args.is_causal) {
    // -inf above the diagonal: query i sees keys 0..i
    mask = triu(full({L, S}, -std::numeric_limits<double>::infinity(),
                     TensorOptions(query.dtype()).device(query.device())), 1)
               .view({1, 1, L, S});
  }
  if (args.key_padding_mask.defined()) {
    const Tensor& m = args.key_padding_mask;
    Shape expected = batched ? Shape{N, S} : Shape{S};
    KILN_CHECK(m.sizes() == expected, kOp, ": key_padding_mask must be ", batched ? "(N, S) = " : "(S) = ",
               shape_str(expected), ", got shape ", shape_str(m.sizes()));
    Tensor padding = additive_mask(m, "key_padding_mask", query).view({N, 1, 1, S});
    mask = mask.defined() ? mask + padding : padding;
  }

  // ---- softmax over the keys ----
  Tensor attn =
      mask.defined() ? masked_softmax(scores.view({N, H, L, S}), mask).view({N * H, L, S}) : softmax(scores, -1);
  attn = dropout(attn, args.dropout_p, args.training);

  // ---- weighted values, heads joined, output projection ----
  Tensor out = bmm(attn, heads(v, S));  // (N * H, L, d)
  out = linear(out.transpose(0, 1).reshape({L, N, E}), out_proj_weight, out_proj_bias);

  AttentionOutput result;
  result.output = batched ? out : out.squeeze(1);
  if (args.need_weights) {
    Tensor w = attn.view({N, H, L, S});
    if (args.average_attn_weights) w = w.mean({1});
    result.weights = batched ? w : w.squeeze(0);
  }
  return result;
}

}  // namespace functional

namespace {
// Runs before out_proj is built, so that a bad size is reported in MultiheadAttention's terms.
int64_t checked_embed_dim(int64_t embed_dim, int64_t num_heads) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
             embed_dim, " and ", num_heads);
  KILN_CHECK(embed_dim % num_heads == 0, "MultiheadAttention: embed_dim (", embed_dim,
             ") must be divisible by num_heads (", num_heads, ")");
  return embed_dim;
}
}  // namespace

MultiheadAttentionImpl::MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : Module("MultiheadAttention"),
      out_proj(checked_embed_dim(embed_dim, num_heads), embed_dim, options.bias),
      embed_dim_(embed_dim),
      num_heads_(num_heads),
      options_(options) {
  KILN_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0, "MultiheadAttention: dropout must be in [0, 1], got ",
             options.dropout);
  KILN_CHECK(options.kdim >= 0 && options.vdim >= 0, "MultiheadAttention: kdim and vdim must be positive (or 0 for "
             "embed_dim), got ", options.kdim, " and ", options.vdim);
  if (options_.kdim == 0) options_.kdim = embed_dim;
  if (options_.vdim == 0) options_.vdim = embed_dim;
  // PyTorch's registration order, hence its named_parameters order: in_proj_weight (or q, k, v_proj_weight),
  // in_proj_bias, out_proj.*
  if (options_.kdim == embed_dim && options_.vdim == embed_dim) {
    register_parameter("in_proj_weight", in_proj_weight, empty({3 * embed_dim, embed_dim}));
  } else {
    register_parameter("q_proj_weight", q_proj_weight, empty({embed_dim, embed_dim}));
    register_parameter("k_proj_weight", k_proj_weight, empty({embed_dim, options_.kdim}));
    register_parameter("v_proj_weight", v_proj_weight, empty({embed_dim, options_.vdim}));
  }
  if (options.bias) register_parameter("in_proj_bias", in_proj_bias, empty({3 * embed_dim}));
  register_module("out_proj", out_proj);
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  // out_proj.weight keeps Linear's init; only its bias is zeroed, as PyTorch does.
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

AttentionOutput MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                const Tensor& key_padding_mask, const Tensor& attn_mask,
                                                bool need_weights, bool average_attn_weights, bool is_causal) {
  KILN_CHECK(query.defined() && key.defined() && value.defined(),
             "MultiheadAttention: query, key and value must all be defined");
  KILN_CHECK(query.dim() >= 1 && query.size(-1) == embed_dim_, "MultiheadAttention: query of shape ",
             shape_str(query.sizes()), " does not end in embed_dim = ", embed_dim_);
  KILN_CHECK(key.dim() >= 1 && key.size(-1) == options_.kdim, "MultiheadAttention: key of shape ",
             shape_str(key.sizes()), " does not end in kdim = ", options_.kdim);
  KILN_CHECK(value.dim() >= 1 && value.size(-1) == options_.vdim, "MultiheadAttention: value of shape ",
             shape_str(value.sizes()), " does not end in vdim = ", options_.vdim);
  functional::MultiHeadAttentionArgs args;
  args.q_proj_weight = q_proj_weight;
  args.k_proj_weight = k_proj_weight;
  args.v_proj_weight = v_proj_weight;
  args.key_padding_mask = key_padding_mask;
  args.attn_mask = attn_mask;
  args.need_weights = need_weights;
  args.average_attn_weights = average_attn_weights;
  args.is_causal = is_causal;
  args.dropout_p = options_.dropout;
  args.training = is_training();
  // batch_first only changes the layout: the function works on (L, N, E).
  bool flip = options_.batch_first && query.dim() == 3;
  auto time_first = [&](const Tensor& t) { return flip && t.dim() == 3 ? t.transpose(0, 1) : t; };
  // out_proj's weights are read here, not through a call of out_proj: a reparametrization of them (weight_norm)
  // is brought up to date first, as a call would.
  out_proj->refresh_parametrizations();
  AttentionOutput r = functional::multi_head_attention_forward(
      time_first(query), time_first(key), time_first(value), num_heads_, in_proj_weight, in_proj_bias,
      out_proj->weight, out_proj->bias, args);
  if (flip) r.output = r.output.transpose(0, 1);
  return r;
}

Tensor MultiheadAttentionImpl::forward(const Tensor& x) {
  return forward(x, x, x, {}, {}, /*need_weights=*/false).output;
}

std::string MultiheadAttentionImpl::extra_repr() const {
  std::string dims = in_proj_weight.defined() ? "" : detail::concat(", kdim=", options_.kdim, ", vdim=", options_.vdim);
  return detail::concat("embed_dim=", embed_dim_, ", num_heads=", num_heads_, dims, ", dropout=", options_.dropout,
                        ", bias=", options_.bias ? "true" : "false",
                        ", batch_first=", options_.batch_first ? "true" : "false");
}

}  // namespace kiln::nn
