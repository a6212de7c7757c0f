// Lookups: embedding and embedding_bag.
//
// embedding_bag first turns its input into bags: for each bag, the entries that stay in it (padding_idx's
// leave), in input order, with their table rows. Then one of two paths reduces them:
//   - on the CPU, for float32 and float64 tables, fused kernels (EmbeddingBagFunction): each bag's rows summed,
//     averaged or maxed straight into the output, and backward writing the table's gradient row by row, with
//     the entries grouped by row (a counting sort), so that no two threads write one row and the sum over a
//     row's entries runs in input order whatever the thread count. No (entries, D) copy of the rows is made
//     either way; the composite below makes two (the gathered rows forward, the gathered gradients backward).
//   - anywhere else (a GPU, a 16-bit table), a composite of differentiable ops: one gather and one index_add
//     for sum and mean; for max the bags padded to the longest and a max over them.
// A backward with create_graph (a second derivative) runs the fused path's gradient as differentiable ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/autograd/function.h"
#include "kiln/nn/functional.h"
#include "kiln/tensor/parallel.h"

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

// The bags' entries that stay in them, in input order (so bag by bag).
struct Bags {
  int64_t count = 0;           // B
  int64_t num_inputs = 0;      // the input's numel (per_sample_weights has as many)
  std::vector<int64_t> input;  // each entry's position in the flattened input
  std::vector<int64_t> row;    // its row of the table
  std::vector<int64_t> bag;    // its bag
  std::vector<int64_t> start;  // B + 1: bag b's entries are [start[b], start[b + 1])
  int64_t size(int64_t b) const { return start[b + 1] - start[b]; }
};

Tensor as_index(const std::vector<int64_t>& v, Device device) {
  return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(kInt64).device(device));
}

// max(size, 1) per bag, as a (B) tensor: mean's divisor (an empty bag's zero sum stays zero).
Tensor divisors(const Bags& bags, const TensorOptions& options) {
  std::vector<double> n(static_cast<size_t>(bags.count));
  for (int64_t b = 0; b < bags.count; ++b) n[b] = static_cast<double>(std::max<int64_t>(bags.size(b), 1));
  return tensor(n, {bags.count}, options);
}

// ---- the composite path ----

Tensor embedding_bag_composite(const Bags& bags, const Tensor& weight, BagMode mode, const Tensor& psw) {
  const int64_t B = bags.count, D = weight.size(1);
  const Device device = weight.device();
  const Tensor zero = zeros({B, D}, TensorOptions(weight.dtype()).device(device));
  // Every bag empty: zeros, still in weight's graph (through an empty sum, which an inf in weight leaves 0).
  if (bags.row.empty()) return zero + weight.narrow(0, 0, 0).sum();
  if (mode == BagMode::Max) {
    // The bags padded to the longest: (B, longest, D), the padding -inf, then the max over each bag.
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b) longest = std::max(longest, bags.size(b));
    std::vector<int64_t> grid(static_cast<size_t>(B * longest), 0), filled(static_cast<size_t>(B * longest), 0);
    std::vector<int64_t> sizes(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      sizes[b] = bags.size(b);
      for (int64_t j = bags.start[b], k = 0; j < bags.start[b + 1]; ++j, ++k)
        grid[b * longest + k] = bags.row[j], filled[b * longest + k] = 1;
    }
    const Tensor mask = (as_index(filled, device) > 0).view({B, longest, 1});
    const Tensor rows = index_select(weight, 0, as_index(grid, device)).view({B, longest, D});
    const Tensor best = max(masked_fill(rows, logical_not(mask), -std::numeric_limits<double>::infinity()), 1).first;
    const Tensor nonempty = (as_index(sizes, device) > 0).unsqueeze(1);
    return where(nonempty, best, zero);
  }
  Tensor rows = index_select(weight, 0, as_index(bags.row, device));
  if (psw.defined())
    rows = rows * index_select(psw.reshape({-1}), 0, as_index(bags.input, device)).unsqueeze(1);
  const Tensor sums = index_add(zero, 0, as_index(bags.bag, device), rows);
  if (mode == BagMode::Sum) return sums;
  return sums / divisors(bags, TensorOptions(sums.dtype()).device(device)).unsqueeze(1);
}

// ---- the CPU's fused path ----

// The rows are read in random order from a table usually far larger than the caches: asking for the row a few
// entries ahead keeps several misses in flight (the max kernel's forward on composite_bench's batch: 36 ms
// to 17 on 1 thread; sum's 12.5 to 11).
constexpr int64_t kPrefetchAhead = 4;
template <typename T>
inline void prefetch_row(const Bags& bags, const T* w, int64_t D, int64_t j) {
  if (j >= static_cast<int64_t>(bags.row.size())) return;
  const char* p = reinterpret_cast<const char*>(w + bags.row[j] * D);
  for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) __builtin_prefetch(p + off);
}

// out (B, D) from the table w (V, D), both contiguous, and psw (the flattened input's numel) or null; for max
// also argmax (B, D): each output element's row (-1 in an empty bag).
template <typename T>
void embedding_bag_forward(const Bags& bags, const T* w, const T* psw, int64_t D, BagMode mode, T* out,
                           int64_t* argmax) {
  const int64_t entries = static_cast<int64_t>(bags.row.size());
  const int64_t per_bag = std::max<int64_t>(1, entries / std::max<int64_t>(bags.count, 1));
  using Place = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  parallel_for(0, bags.count, std::max<int64_t>(1, kDefaultGrain / (D * per_bag + 1)), [&](int64_t b0, int64_t b1) {
    std::vector<Place> place(mode == BagMode::Max ? static_cast<size_t>(D) : 0);
    for (int64_t b = b0; b < b1; ++b) {
      T* o = out + b * D;
      const int64_t first = bags.start[b], last = bags.start[b + 1];
      if (mode == BagMode::Max) {
        int64_t* arg = argmax + b * D;
        if (first == last) {
          std::fill(o, o + D, T(0)), std::fill(arg, arg + D, int64_t{-1});
          continue;
        }
        // Each element's winner as its place in the bag, an integer as wide as T, so that the loop below
        // vectorizes (a compare, then two blends); turned into table rows after.
        const int64_t r0 = bags.row[first];
        std::copy(w + r0 * D, w + r0 * D + D, o);
        std::fill(place.begin(), place.end(), Place{0});
        for (int64_t j = first + 1; j < last; ++j) {
          prefetch_row(bags, w, D, j + kPrefetchAhead);
          const T* __restrict row = w + bags.row[j] * D;
          T* __restrict best = o;
          Place* __restrict at = place.data();
          const Place k = static_cast<Place>(j - first);
          // The first maximum wins; a NaN, once met, stays (as max does).
          for (int64_t d = 0; d < D; ++d) {
            const T v = row[d], m = best[d];
            const bool take = v > m || (v != v && m == m);
            best[d] = take ? v : m;
            at[d] = take ? k : at[d];
          }
        }
        for (int64_t d = 0; d < D; ++d) arg[d] = bags.row[first + place[d]];
        continue;
      }
      std::fill(o, o + D, T(0));
      for (int64_t j = first; j < last; ++j) {
        prefetch_row(bags, w, D, j + kPrefetchAhead);
        const T* row = w + bags.row[j] * D;
        if (psw != nullptr) {
          const T s = psw[bags.input[j]];
          for (int64_t d = 0; d < D; ++d) o[d] += row[d] * s;
        } else {
          for (int64_t d = 0; d < D; ++d) o[d] += row[d];
        }
      }
      if (mode == BagMode::Mean && last > first) {
        const T n = static_cast<T>(last - first);
        for (int64_t d = 0; d < D; ++d) o[d] /= n;
      }
    }
  });
}

// The table's gradient grad_w (V, D) for sum and mean, from the output's g (B, D) and psw (the flattened
// input's numel) or null: row r gets the sum, over the entries that name it in input order, of the entry's
// scale times its bag's gradient. One thread per row, so no row is written twice at once.
template <typename T>
void embedding_bag_backward_weight(const Bags& bags, const T* g, const T* psw, int64_t V, int64_t D, BagMode mode,
                                   T* grad_w) {
  // The entries grouped by row (a counting sort, stable: input order within a row).
  std::vector<int64_t> row_start(static_cast<size_t>(V) + 1, 0), order(bags.row.size());
  for (int64_t r : bags.row) ++row_start[r + 1];
  for (int64_t r = 0; r < V; ++r) row_start[r + 1] += row_start[r];
  {
    std::vector<int64_t> next(row_start.begin(), row_start.end() - 1);
    for (size_t j = 0; j < bags.row.size(); ++j) order[next[bags.row[j]]++] = static_cast<int64_t>(j);
  }
  std::vector<T> inv;
  if (mode == BagMode::Mean) {
    inv.resize(static_cast<size_t>(bags.count));
    for (int64_t b = 0; b < bags.count; ++b) inv[b] = T(1) / static_cast<T>(std::max<int64_t>(bags.size(b), 1));
  }
  parallel_for(0, V, std::max<int64_t>(1, kDefaultGrain / (2 * D + 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* dst = grad_w + r * D;
      std::fill(dst, dst + D, T(0));
      for (int64_t k = row_start[r]; k < row_start[r + 1]; ++k) {
        const size_t j = static_cast<size_t>(order[k]);
        const int64_t b = bags.bag[j];
        const T s = psw != nullptr ? psw[bags.input[j]] : mode == BagMode::Mean ? inv[b] : T(1);
        const T* src = g + b * D;
        for (int64_t d = 0; d < D; ++d) dst[d] += s * src[d];
      }
    }
  });
}

// max: grad_w (V, D) gets each element of g (B, D) at the row argmax (B, D) names. Threads split the columns
// in blocks of a cache line's worth, so two never write one element (rows need not start on a line, so two
// may share a line at a block's edge); within a column the bags go in order.
template <typename T>
void embedding_bag_backward_weight_max(const int64_t* argmax, const T* g, int64_t B, int64_t V, int64_t D,
                                       T* grad_w) {
  parallel_for(0, V * D, kDefaultGrain, [&](int64_t i0, int64_t i1) { std::fill(grad_w + i0, grad_w + i1, T(0)); });
  constexpr int64_t kBlock = 64 / sizeof(T);
  const int64_t blocks = (D + kBlock - 1) / kBlock;
  parallel_for(0, blocks, 1, [&](int64_t k0, int64_t k1) {
    const int64_t d0 = k0 * kBlock, d1 = std::min(D, k1 * kBlock);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t d = d0; d < d1; ++d)
        if (const int64_t r = argmax[b * D + d]; r >= 0) grad_w[r * D + d] += g[b * D + d];
  });
}

// per_sample_weights' gradient grad_psw (the flattened input's numel, zeroed by the caller): entry j's is its
// bag's gradient (g, (B, D)) dotted with its row of w (V, D); left-out entries keep 0.
template <typename T>
void embedding_bag_backward_per_sample_weights(const Bags& bags, const T* g, const T* w, int64_t D, T* grad_psw) {
  const int64_t entries = static_cast<int64_t>(bags.row.size());
  parallel_for(0, entries, std::max<int64_t>(1, kDefaultGrain / (D + 1)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const T* row = w + bags.row[j] * D;
      const T* src = g + bags.bag[j] * D;
      T dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += row[d] * src[d];
      grad_psw[bags.input[j]] = dot;
    }
  });
}

struct EmbeddingBagFunction : autograd::Function<EmbeddingBagFunction> {
  static constexpr const char* name = "EmbeddingBagBackward";

  // weight (V, D) float32 or float64 on the CPU; psw undefined or the input's shape, with weight's dtype.
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& weight, const Tensor& psw,
                        std::shared_ptr<const Bags> bags, BagMode mode) {
    const int64_t D = weight.size(1);
    const Tensor w = weight.contiguous();
    const Tensor p = psw.defined() ? psw.reshape({-1}).contiguous() : Tensor();
    Tensor out = empty({bags->count, D}, TensorOptions(weight.dtype()));
    Tensor argmax;
    if (mode == BagMode::Max) argmax = empty({bags->count, D}, TensorOptions(kInt64));
    visit_dtype<kFloat32Set | kFloat64Set>(weight.dtype(), "embedding_bag", [&]<typename T>() {
      embedding_bag_forward<T>(*bags, w.data_ptr<T>(), p.defined() ? p.data_ptr<T>() : nullptr, D, mode,
                               out.data_ptr<T>(), argmax.defined() ? argmax.data_ptr<int64_t>() : nullptr);
    });
    // The table is needed only for per_sample_weights' gradient, per_sample_weights only for the table's.
    ctx->save_for_backward({psw.defined() ? weight : Tensor(), psw});
    ctx->saved_data["bags"] = bags;
    ctx->saved_data["mode"] = mode;
    ctx->saved_data["argmax"] = argmax;
    ctx->saved_data["rows"] = weight.size(0);
    return out;
  }

  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &weight = saved[0], &psw = saved[1];
    const auto bags = std::any_cast<std::shared_ptr<const Bags>>(ctx->saved_data["bags"]);
    const auto mode = std::any_cast<BagMode>(ctx->saved_data["mode"]);
    const auto argmax = std::any_cast<Tensor>(ctx->saved_data["argmax"]);
    const auto V = std::any_cast<int64_t>(ctx->saved_data["rows"]);
    const Tensor& g = grads[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const int64_t D = g.size(1);
    const bool want_w = ctx->needs_input_grad(0), want_psw = psw.defined() && ctx->needs_input_grad(1);
    if (autograd::GradMode::is_enabled())
      return differentiable_backward(*bags, g, weight, psw, argmax, mode, V, want_w, want_psw);
    const Tensor gc = g.contiguous();
    Tensor grad_w, grad_psw;
    const Tensor p = psw.defined() ? psw.reshape({-1}).contiguous() : Tensor();
    visit_dtype<kFloat32Set | kFloat64Set>(g.dtype(), "embedding_bag backward", [&]<typename T>() {
      if (want_w) {
        grad_w = empty({V, D}, TensorOptions(g.dtype()));
        if (mode == BagMode::Max) {
          embedding_bag_backward_weight_max<T>(argmax.data_ptr<int64_t>(), gc.data_ptr<T>(), bags->count, V, D,
                                               grad_w.data_ptr<T>());
        } else {
          embedding_bag_backward_weight<T>(*bags, gc.data_ptr<T>(), p.defined() ? p.data_ptr<T>() : nullptr, V, D,
                                           mode, grad_w.data_ptr<T>());
        }
      }
      if (want_psw) {
        grad_psw = zeros({bags->num_inputs}, TensorOptions(g.dtype()));
        const Tensor w = weight.contiguous();
        embedding_bag_backward_per_sample_weights<T>(*bags, gc.data_ptr<T>(), w.data_ptr<T>(), D,
                                                     grad_psw.data_ptr<T>());
        grad_psw = grad_psw.view(psw.sizes());
      }
    });
    return {grad_w, grad_psw};
  }

  // The same gradients as differentiable ops (a backward with create_graph).
  static std::vector<Tensor> differentiable_backward(const Bags& bags, const Tensor& g, const Tensor& weight,
                                                     const Tensor& psw, const Tensor& argmax, BagMode mode, int64_t V,
                                                     bool want_w, bool want_psw) {
    const int64_t D = g.size(1);
    const TensorOptions options = TensorOptions(g.dtype());
    Tensor grad_w, grad_psw;
    if (mode == BagMode::Max) {
      std::vector<int64_t> to, from;  // flat positions in the table's gradient and in g
      const int64_t* arg = argmax.data_ptr<int64_t>();
      for (int64_t i = 0; i < bags.count * D; ++i)
        if (arg[i] >= 0) to.push_back(arg[i] * D + i % D), from.push_back(i);
      grad_w = index_add(zeros({V * D}, options), 0, as_index(to, kCPU),
                         index_select(g.reshape({-1}), 0, as_index(from, kCPU))).view({V, D});
      return {grad_w, Tensor()};
    }
    const Tensor bag_of = as_index(bags.bag, kCPU);
    Tensor per_entry = index_select(g, 0, bag_of);  // each entry's bag's gradient
    if (mode == BagMode::Mean) per_entry = per_entry / index_select(divisors(bags, options), 0, bag_of).unsqueeze(1);
    const Tensor entries = as_index(bags.input, kCPU);
    if (want_w) {
      const Tensor scaled =
          psw.defined() ? per_entry * index_select(psw.reshape({-1}), 0, entries).unsqueeze(1) : per_entry;
      grad_w = index_add(zeros({V, D}, options), 0, as_index(bags.row, kCPU), scaled);
    }
    if (want_psw) {
      const Tensor dots = (per_entry * index_select(weight, 0, as_index(bags.row, kCPU))).sum({1});
      grad_psw = index_add(zeros({bags.num_inputs}, options), 0, entries, dots).view(psw.sizes());
    }
    return {grad_w, grad_psw};
  }
};

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type) {
  KILN_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding: indices must be int64 or int32, got ",
             indices.dtype());
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be (num_embeddings, dim), got ", shape_str(weight.sizes()));
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  const Tensor flat = indices.reshape({-1});
  if (max_norm) renorm_rows("embedding", weight, flat.to(kInt64), *max_norm, norm_type);
  Tensor rows = index_select(weight, 0, flat);
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
  if (per_sample_weights.defined()) {
    KILN_CHECK(options.mode == BagMode::Sum, "embedding_bag: per_sample_weights need mode Sum, as in PyTorch");
    KILN_CHECK(per_sample_weights.sizes() == input.sizes(), "embedding_bag: per_sample_weights must have the "
               "input's shape ", shape_str(input.sizes()), ", got ", shape_str(per_sample_weights.sizes()));
    KILN_CHECK(per_sample_weights.dtype() == weight.dtype() && per_sample_weights.device() == weight.device(),
               "embedding_bag: per_sample_weights must have weight's dtype and device (", weight.dtype(), " on ",
               weight.device(), "), got ", per_sample_weights.dtype(), " on ", per_sample_weights.device(),
               ", as in PyTorch");
  }
  auto bags = std::make_shared<Bags>();
  bags->count = static_cast<int64_t>(bounds.size()) - 1;
  bags->num_inputs = n;
  const std::vector<int64_t> ids = input.reshape({-1}).to(kInt64).to_vector<int64_t>();
  // (-1, which no valid index equals, where there is no padding_idx)
  const int64_t pad = options.padding_idx ? padding_row("embedding_bag", options.padding_idx, weight.size(0)) : -1;
  bags->input.reserve(ids.size()), bags->row.reserve(ids.size()), bags->bag.reserve(ids.size());
  bags->start.push_back(0);
  for (int64_t b = 0; b < bags->count; ++b) {
    for (int64_t i = bounds[b]; i < bounds[b + 1]; ++i) {
      const int64_t id = ids[i];
      KILN_CHECK(id >= 0 && id < weight.size(0), "embedding_bag: index ", id, " at position ", i,
                 " is outside the ", weight.size(0), " embeddings");
      if (id == pad) continue;
      bags->input.push_back(i), bags->row.push_back(id), bags->bag.push_back(b);
    }
    bags->start.push_back(static_cast<int64_t>(bags->row.size()));
  }
  if (options.max_norm)  // every index the bags hold, as PyTorch renormalizes them
    renorm_rows("embedding_bag", weight, input.reshape({-1}).to(kInt64), *options.max_norm, options.norm_type);
  const bool fused = !CompositeOnlyGuard::active() && weight.device().is_cpu() &&
                     (weight.dtype() == kFloat32 || weight.dtype() == kFloat64);
  if (!fused) return embedding_bag_composite(*bags, weight, options.mode, per_sample_weights);
  return EmbeddingBagFunction::apply(weight, per_sample_weights,
                                     std::shared_ptr<const Bags>(std::move(bags)), options.mode);
}

}  // namespace kiln::nn::functional
