// Lookups: embedding and embedding_bag.
//
// embedding_bag first turns its input into bags on the host: a BagLayout (kiln/tensor/ops/embedding_bag.h),
// each bag's entries that stay in it (padding_idx's leave), in input order, with their table rows. Then one of
// two paths reduces them:
//   - for float32 and float64 tables on a device with the kernels (the CPU and CUDA), the fused kernels
//     (EmbeddingBagFunction over ops::embedding_bag_*): each bag's rows summed, averaged or maxed straight into
//     the output, and backward writing the table's gradient so that no two threads write one element and
//     each element's sum runs in input order whatever the thread count (ops/embedding_bag.h says how). No
//     (entries, D) copy of the rows is made either way; the composite makes two.
//   - anywhere else (a 16-bit table), a composite of differentiable ops: one gather and one index_add for sum
//     and mean; for max the bags padded to the longest and a max over them.
// A backward with create_graph (a second derivative) runs the fused path's gradient as differentiable ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kiln/autograd/function.h"
#include "kiln/nn/functional.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/embedding_bag.h"

namespace kiln::nn::functional {

namespace {

// padding_idx in [0, num_embeddings), a negative one counted from the end, as PyTorch normalizes it.
int64_t padding_row(const char* op, std::optional<int64_t> padding_idx, int64_t num_embeddings) {
  const int64_t p = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  KILN_CHECK(p >= 0 && p < num_embeddings, op, ": padding_idx ", *padding_idx, " is outside the ", num_embeddings,
             " embeddings");
  return p;
}

// PyTorch's embedding_renorm_: each row of weight that flat (1-d int64, checked) names, if its norm_type-norm
// exceeds max_norm, scaled by max_norm / (norm + 1e-7), in place and outside autograd. A row named twice is
// written twice with the same value.
void renorm_rows(const char* op, const Tensor& weight, const Tensor& flat, double max_norm, double norm_type) {
  KILN_CHECK(max_norm >= 0 && norm_type > 0, op, ": max_norm must be non-negative and norm_type positive, got ",
             max_norm, " and ", norm_type);
  if (flat.numel() == 0) return;
  NoGradGuard no_grad;
  const Tensor rows = index_select(weight, 0, flat);
  const Tensor norms = norm(rows, norm_type, {1}, /*keepdim=*/true);
  weight.index_put_({flat}, rows * where(norms > max_norm, max_norm / (norms + 1e-7), 1.0));
}

BagReduce reduce_of(BagMode mode) {
  return mode == BagMode::Sum ? BagReduce::Sum : mode == BagMode::Mean ? BagReduce::Mean : BagReduce::Max;
}

// max(size, 1) per bag, as a (B) tensor of `dtype` on the layout's device: mean's divisor (an empty bag's zero
// sum stays zero).
Tensor divisors(const BagLayout& bags, DType dtype) {
  const Tensor& start = bags.start;
  return clamp(start.narrow(0, 1, bags.count) - start.narrow(0, 0, bags.count), 1, std::nullopt).to(dtype);
}

// ---- the composite path ----

// host: the layout on the host (Max pads the bags there); bags: the same on weight's device.
Tensor embedding_bag_composite(const BagLayout& host, const BagLayout& bags, const Tensor& weight, BagReduce mode,
                               const Tensor& psw) {
  const int64_t B = bags.count, D = weight.size(1);
  const Device device = weight.device();
  const Tensor zero = zeros({B, D}, TensorOptions(weight.dtype()).device(device));
  // Every bag empty: zeros, still in weight's graph (through an empty sum, which an inf in weight leaves 0).
  if (bags.row.numel() == 0) return zero + weight.narrow(0, 0, 0).sum();
  if (mode == BagReduce::Max) {
    // The bags padded to the longest: (B, longest, D), the padding -inf, then the max over each bag.
    const int64_t* start = host.start.data_ptr<int64_t>();
    const int64_t* row = host.row.data_ptr<int64_t>();
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b) longest = std::max(longest, start[b + 1] - start[b]);
    std::vector<int64_t> grid(static_cast<size_t>(B * longest), 0), filled(static_cast<size_t>(B * longest), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = start[b], k = 0; j < start[b + 1]; ++j, ++k) grid[b * longest + k] = row[j], filled[b * longest + k] = 1;
    const TensorOptions index_options = TensorOptions(kInt64).device(device);
    const Tensor mask = (tensor(filled, {B * longest}, index_options) > 0).view({B, longest, 1});
    const Tensor rows = index_select(weight, 0, tensor(grid, {B * longest}, index_options)).view({B, longest, D});
    const Tensor best = max(masked_fill(rows, logical_not(mask), -std::numeric_limits<double>::infinity()), 1).first;
    const Tensor nonempty = (bags.start.narrow(0, 1, B) > bags.start.narrow(0, 0, B)).unsqueeze(1);
    return where(nonempty, best, zero);
  }
  Tensor rows = index_select(weight, 0, bags.row);
  if (psw.defined()) rows = rows * index_select(psw.reshape({-1}), 0, bags.input).unsqueeze(1);
  const Tensor sums = index_add(zero, 0, bags.bag, rows);
  if (mode == BagReduce::Sum) return sums;
  return sums / divisors(bags, sums.dtype()).unsqueeze(1);
}

// ---- scale_grad_by_freq ----

// The gradient's divisor per row, (V, 1) in the table's dtype and on its device: 1 / (how many times the
// indices name the row), 1 for a row they do not name. A struct, so that the Function does not take it for an
// input of the graph.
struct RowScale {
  Tensor inverse_counts;
};

// The table as it is going forward; going back, row r's gradient divided by its count. PyTorch divides each
// lookup's share by its row's count, which sums to the same (rounded in another order).
struct ScaleGradByFreqFunction : autograd::Function<ScaleGradByFreqFunction> {
  static constexpr const char* name = "ScaleGradByFreqBackward";

  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& weight, RowScale scale) {
    ctx->saved_data["scale"] = scale.inverse_counts;
    return weight;
  }

  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    if (!grads[0].defined()) return {Tensor()};
    return {grads[0] * std::any_cast<Tensor>(ctx->saved_data["scale"])};
  }
};

// weight (V, D) with its gradient scaled by the frequencies of `indices` (any shape, any integer dtype, in range).
Tensor scaled_by_frequency(const Tensor& weight, const Tensor& indices) {
  const Tensor flat = indices.reshape({-1}).to(weight.device(), kInt64);
  const TensorOptions counts_options = TensorOptions(kFloat64).device(weight.device());
  const Tensor counts = index_add(zeros({weight.size(0)}, counts_options), 0, flat, ones({flat.numel()}, counts_options));
  const Tensor inverse = (1.0 / maximum(counts, 1.0)).to(weight.dtype()).unsqueeze(1);
  return ScaleGradByFreqFunction::apply(weight, RowScale{inverse});
}

// ---- the fused path ----

struct EmbeddingBagFunction : autograd::Function<EmbeddingBagFunction> {
  static constexpr const char* name = "EmbeddingBagBackward";

  // weight (V, D) float32 or float64; psw undefined or the input's shape, with weight's dtype; bags on
  // weight's device.
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& weight, const Tensor& psw,
                        std::shared_ptr<const BagLayout> bags, BagReduce mode) {
    ops::EmbeddingBagForward f = ops::embedding_bag_forward(weight, psw, *bags, mode);
    // The table is needed only for per_sample_weights' gradient, per_sample_weights only for the table's.
    ctx->save_for_backward({psw.defined() ? weight : Tensor(), psw});
    ctx->saved_data["bags"] = bags;
    ctx->saved_data["mode"] = mode;
    ctx->saved_data["argmax"] = f.argmax;
    ctx->saved_data["rows"] = weight.size(0);
    return f.out;
  }

  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &weight = saved[0], &psw = saved[1];
    const auto bags = std::any_cast<std::shared_ptr<const BagLayout>>(ctx->saved_data["bags"]);
    const auto mode = std::any_cast<BagReduce>(ctx->saved_data["mode"]);
    const auto argmax = std::any_cast<Tensor>(ctx->saved_data["argmax"]);
    const auto V = std::any_cast<int64_t>(ctx->saved_data["rows"]);
    const Tensor& g = grads[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const bool want_w = ctx->needs_input_grad(0), want_psw = psw.defined() && ctx->needs_input_grad(1);
    if (autograd::GradMode::is_enabled())
      return differentiable_backward(*bags, g, weight, psw, argmax, mode, V, want_w, want_psw);
    Tensor grad_w, grad_psw;
    if (want_w) grad_w = ops::embedding_bag_backward_weight(g, psw, argmax, *bags, V, mode);
    if (want_psw) grad_psw = ops::embedding_bag_backward_per_sample_weights(g, weight, *bags).view(psw.sizes());
    return {grad_w, grad_psw};
  }

  // The same gradients as differentiable ops (a backward with create_graph).
  static std::vector<Tensor> differentiable_backward(const BagLayout& bags, const Tensor& g, const Tensor& weight,
                                                     const Tensor& psw, const Tensor& argmax, BagReduce mode,
                                                     int64_t V, bool want_w, bool want_psw) {
    const int64_t D = g.size(1);
    const TensorOptions options = TensorOptions(g.dtype()).device(g.device());
    Tensor grad_w, grad_psw;
    if (mode == BagReduce::Max) {
      // Each output element's gradient to its flat position argmax * D + d in the table's gradient.
      const Tensor won = argmax >= 0;
      const Tensor to = masked_select(argmax * D + arange(D, TensorOptions(kInt64).device(g.device())), won);
      grad_w = index_add(zeros({V * D}, options), 0, to, masked_select(g, won)).view({V, D});
      return {grad_w, Tensor()};
    }
    Tensor per_entry = index_select(g, 0, bags.bag);  // each entry's bag's gradient
    if (mode == BagReduce::Mean) per_entry = per_entry / index_select(divisors(bags, g.dtype()), 0, bags.bag).unsqueeze(1);
    if (want_w) {
      const Tensor scaled =
          psw.defined() ? per_entry * index_select(psw.reshape({-1}), 0, bags.input).unsqueeze(1) : per_entry;
      grad_w = index_add(zeros({V, D}, options), 0, bags.row, scaled);
    }
    if (want_psw) {
      const Tensor dots = (per_entry * index_select(weight, 0, bags.row)).sum({1});
      grad_psw = index_add(zeros({bags.num_inputs}, options), 0, bags.input, dots).view(psw.sizes());
    }
    return {grad_w, grad_psw};
  }
};

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type, bool scale_grad_by_freq) {
  KILN_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding: indices must be int64 or int32, got ",
             indices.dtype());
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be (num_embeddings, dim), got ", shape_str(weight.sizes()));
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  const Tensor flat = indices.reshape({-1});
  if (max_norm) renorm_rows("embedding", weight, flat.to(kInt64), *max_norm, norm_type);
  Tensor rows = index_select(scale_grad_by_freq ? scaled_by_frequency(weight, flat) : weight, 0, flat);
  if (padding_idx) {
    // The padding row's lookups take its value but pass no gradient back.
    const Tensor looked_up = (flat != padding_row("embedding", padding_idx, weight.size(0))).unsqueeze(1);
    rows = where(looked_up, rows, rows.detach());
  }
  return rows.view(out_shape);
}

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const Tensor& offsets,
                     const EmbeddingBagOptions& options, const Tensor& per_sample_weights) {
  KILN_CHECK(input.dtype() == kInt64 || input.dtype() == kInt32, "embedding_bag: indices must be int64 or int32, got ",
             input.dtype());
  KILN_CHECK(weight.dim() == 2, "embedding_bag: weight must be (num_embeddings, dim), got ", shape_str(weight.sizes()));
  KILN_CHECK(input.dim() == 1 || input.dim() == 2, "embedding_bag: input must be (B, L) bags or 1-d indices with "
             "offsets, got ", shape_str(input.sizes()));
  const int64_t n = input.numel();
  // Where each bag starts, and one more entry where the last one ends.
  std::vector<int64_t> bounds;
  if (input.dim() == 2) {
    KILN_CHECK(!offsets.defined(), "embedding_bag: a 2-d input is its own bags (one per row); offsets must be "
               "undefined, got ", shape_str(offsets.sizes()));
    for (int64_t b = 0; b <= input.size(0); ++b) bounds.push_back(b * input.size(1));
  } else {
    KILN_CHECK(offsets.defined() && offsets.dim() == 1 && !is_floating(offsets.dtype()), "embedding_bag: a 1-d input "
               "needs 1-d integer offsets, one per bag");
    bounds = offsets.to(kInt64).to_vector<int64_t>();
    if (!options.include_last_offset) bounds.push_back(n);
    KILN_CHECK(bounds.size() >= 2 || (bounds.size() == 1 && !options.include_last_offset), "embedding_bag: "
               "include_last_offset needs at least one offset, where the last bag ends");
    KILN_CHECK(bounds.front() == 0, "embedding_bag: offsets must start at 0, got ", bounds.front());
    for (size_t b = 1; b < bounds.size(); ++b)
      KILN_CHECK(bounds[b] >= bounds[b - 1] && bounds[b] <= n, "embedding_bag: offsets must be non-decreasing and "
                 "at most the ", n, " indices; offset ", b, " is ", bounds[b], " after ", bounds[b - 1]);
  }
  KILN_CHECK(!options.scale_grad_by_freq || options.mode != BagMode::Max, "embedding_bag: scale_grad_by_freq needs "
             "mode Sum or Mean, got Max (as in PyTorch)");
  if (per_sample_weights.defined()) {
    KILN_CHECK(options.mode == BagMode::Sum, "embedding_bag: per_sample_weights need mode Sum, as in PyTorch");
    KILN_CHECK(per_sample_weights.sizes() == input.sizes(), "embedding_bag: per_sample_weights must have the "
               "input's shape ", shape_str(input.sizes()), ", got ", shape_str(per_sample_weights.sizes()));
    KILN_CHECK(per_sample_weights.dtype() == weight.dtype() && per_sample_weights.device() == weight.device(),
               "embedding_bag: per_sample_weights must have weight's dtype and device (", weight.dtype(), " on ",
               weight.device(), "), got ", per_sample_weights.dtype(), " on ", per_sample_weights.device(),
               ", as in PyTorch");
  }
  // The layout, on the host, written straight into its tensors.
  const int64_t B = static_cast<int64_t>(bounds.size()) - 1;
  const Tensor ids_tensor = input.reshape({-1}).to(Device::cpu(), kInt64).contiguous();  // read here, on the host
  const int64_t* ids = ids_tensor.data_ptr<int64_t>();
  // (-1, which no valid index equals, where there is no padding_idx)
  const int64_t pad = options.padding_idx ? padding_row("embedding_bag", options.padding_idx, weight.size(0)) : -1;
  BagLayout host;
  host.count = B, host.num_inputs = n;
  host.input = empty({n}, TensorOptions(kInt64)), host.row = empty({n}, TensorOptions(kInt64));
  host.bag = empty({n}, TensorOptions(kInt64)), host.start = empty({B + 1}, TensorOptions(kInt64));
  int64_t *at = host.input.data_ptr<int64_t>(), *row = host.row.data_ptr<int64_t>();
  int64_t *bag = host.bag.data_ptr<int64_t>(), *start = host.start.data_ptr<int64_t>();
  int64_t entries = 0;
  start[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = bounds[b]; i < bounds[b + 1]; ++i) {
      const int64_t id = ids[i];
      KILN_CHECK(id >= 0 && id < weight.size(0), "embedding_bag: index ", id, " at position ", i,
                 " is outside the ", weight.size(0), " embeddings");
      if (id == pad) continue;
      at[entries] = i, row[entries] = id, bag[entries] = b;
      ++entries;
    }
    start[b + 1] = entries;
  }
  if (entries < n) {  // padding left: the first `entries` (views of the same memory)
    host.input = host.input.narrow(0, 0, entries), host.row = host.row.narrow(0, 0, entries);
    host.bag = host.bag.narrow(0, 0, entries);
  }
  if (options.max_norm)  // every index the bags hold, as PyTorch renormalizes them
    renorm_rows("embedding_bag", weight, input.reshape({-1}).to(kInt64), *options.max_norm, options.norm_type);
  auto bags = std::make_shared<const BagLayout>(host.to(weight.device()));
  const BagReduce mode = reduce_of(options.mode);
  const Tensor table = options.scale_grad_by_freq ? scaled_by_frequency(weight, ids_tensor) : weight;
  const bool fused = !CompositeOnlyGuard::active() &&
                     (weight.dtype() == kFloat32 || weight.dtype() == kFloat64) &&
                     has_kernel<Op::embedding_bag>(weight.device().type);
  if (!fused) return embedding_bag_composite(host, *bags, table, mode, per_sample_weights);
  return EmbeddingBagFunction::apply(table, per_sample_weights, std::move(bags), mode);
}

}  // namespace kiln::nn::functional
