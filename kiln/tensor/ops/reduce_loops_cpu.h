// CPU loops for reductions: the plan (which dims are reduced, in what memory order) and the driver that
// splits the work across threads without changing the result.
//
// A reduction of x into out (x's shape with size 1 along the reduced dims) is first reshaped in thought:
// size-1 dims are dropped, the kept dims and the reduced dims are each sorted by x's stride (largest first)
// and neighbours that are contiguous with each other are merged. A contiguous tensor reduced over its last
// dims becomes (outputs, run); one reduced over its first dims becomes (run, outputs). Two loops follow:
//   rows:    each output reduces its own elements, a run along the innermost reduced dim at a time
//            (the sum of a row, a full sum); short rows a block of neighbouring outputs at a time
//   columns: the innermost kept dim lies innermost in memory, so a block of neighbouring outputs is reduced
//            together, one row at a time: out[j] += x[i][j] (a bias gradient, summed over the batch)
// Either way the reduction of each output is cut into chunks of a fixed number of elements, and the chunks'
// partial results are combined in chunk order. The cut depends only on the shapes, never on the number of
// threads, so neither do the bits of the result; when there are few outputs, the threads share the chunks of
// one output instead of idling (a full sum of a large tensor).
//
// An op supplies a policy (see reduce_cpu.cpp) with an accumulator type and how to fold elements into it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln::cpu {

// Elements per chunk: enough that combining partials costs nothing, few enough that a full sum of a large
// tensor gives every thread many chunks.
inline constexpr int64_t kReduceChunk = int64_t{1} << 15;
// Neighbouring outputs reduced together on the column loop: long enough that each row is read as one long
// contiguous stretch (short stretches at a large stride defeat the prefetcher: 256 ran at a quarter of the
// speed), short enough that the accumulators stay in L2.
inline constexpr int64_t kColumnBlock = 4096;
// Elements per chunk on the column loop: whole rows of the block, so a block of 4096 gets 64 rows.
inline constexpr int64_t kColumnChunk = int64_t{1} << 18;
// Rows of at most kShortRow elements are reduced a block of neighbouring outputs per call of the op's work,
// about kShortRowBlock elements in all: one output per call cost a walker step and two indirect calls for every
// few elements, and (4M, 4) summed over its last dim ran at 0.11 of memcpy's speed.
inline constexpr int64_t kShortRow = 256;
inline constexpr int64_t kShortRowBlock = 4096;
// Rows shorter than this are folded across the block (the column loop's work, each output's elements in
// order), so that the outputs' folds overlap instead of each being a short chain of dependent steps.
inline constexpr int64_t kColumnShortRow = 16;

// A strided index space walked in row-major order, keeping the offset (in elements) of N operands.
template <int N>
class IndexWalker {
 public:
  IndexWalker(const std::vector<int64_t>& sizes, const std::array<const std::vector<int64_t>*, N>& strides)
      : sizes_(sizes), index_(sizes.size(), 0) {
    for (int k = 0; k < N; ++k) strides_[k] = strides[k]->data();
  }

  void seek(int64_t linear) {
    offset_.fill(0);
    for (int64_t d = ndim() - 1; d >= 0; --d) {
      index_[d] = linear % sizes_[d];
      linear /= sizes_[d];
      for (int k = 0; k < N; ++k) offset_[k] += index_[d] * strides_[k][d];
    }
  }

  // Steps n positions along the innermost dim (n must not run past its end), carrying into outer dims.
  void advance(int64_t n) {
    int64_t d = ndim() - 1;
    index_[d] += n;
    for (int k = 0; k < N; ++k) offset_[k] += n * strides_[k][d];
    while (d > 0 && index_[d] == sizes_[d]) {
      for (int k = 0; k < N; ++k) offset_[k] -= sizes_[d] * strides_[k][d];
      index_[d] = 0;
      --d;
      ++index_[d];
      for (int k = 0; k < N; ++k) offset_[k] += strides_[k][d];
    }
  }

  int64_t offset(int k) const { return offset_[k]; }
  int64_t inner_index() const { return index_.back(); }
  int64_t inner_size() const { return sizes_.back(); }

 private:
  int64_t ndim() const { return static_cast<int64_t>(sizes_.size()); }

  const std::vector<int64_t>& sizes_;
  std::array<const int64_t*, N> strides_{};
  std::vector<int64_t> index_;
  std::array<int64_t, N> offset_{};
};

// The reduction in x's memory order. Strides are in elements; kept_strides = {x, out0, out1}.
struct ReducePlan {
  std::vector<int64_t> kept_sizes;
  std::array<std::vector<int64_t>, 3> kept_strides;
  std::vector<int64_t> red_sizes, red_strides;
  int64_t num_out = 1;    // outputs
  int64_t red_numel = 1;  // elements reduced into each output
};

namespace detail {

// Sorts dims by their first stride array, largest first (stable), then merges neighbour d into d + 1 when,
// in every stride array, one step of d equals a full sweep of d + 1.
template <size_t K>
void order_and_merge(std::vector<int64_t>& sizes, std::array<std::vector<int64_t>*, K> strides) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*strides[0])[a] > (*strides[0])[b]; });
  std::vector<int64_t> s;
  std::array<std::vector<int64_t>, K> st;
  for (size_t i : order) {
    bool merge = !s.empty();
    for (size_t k = 0; k < K && merge; ++k) merge = st[k].back() == (*strides[k])[i] * sizes[i];
    if (merge) {
      s.back() *= sizes[i];
      for (size_t k = 0; k < K; ++k) st[k].back() = (*strides[k])[i];
    } else {
      s.push_back(sizes[i]);
      for (size_t k = 0; k < K; ++k) st[k].push_back((*strides[k])[i]);
    }
  }
  sizes = std::move(s);
  for (size_t k = 0; k < K; ++k) *strides[k] = std::move(st[k]);
}

}  // namespace detail

// x: any shape; out0 (and out1, e.g. the indices of max): x's shape with size 1 along `dims`.
inline ReducePlan plan_reduction(const Tensor& x, IntArrayRef dims, const Tensor& out0, const Tensor* out1 = nullptr) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  for (int64_t d : dims) {
    KILN_ASSERT(d >= 0 && d < nd, "reduction dim ", d, " for a tensor of ", nd, " dims");
    reduced[d] = true;
  }
  ReducePlan plan;
  for (int64_t d = 0; d < nd; ++d) {
    int64_t size = x.size(d);
    KILN_ASSERT(out0.size(d) == (reduced[d] ? 1 : size), "output shape ", shape_str(out0.sizes()), " for input ",
                shape_str(x.sizes()));
    if (reduced[d]) plan.red_numel *= size;
    else plan.num_out *= size;
    if (size == 1) continue;
    if (reduced[d]) {
      plan.red_sizes.push_back(size);
      plan.red_strides.push_back(x.stride(d));
    } else {
      plan.kept_sizes.push_back(size);
      plan.kept_strides[0].push_back(x.stride(d));
      plan.kept_strides[1].push_back(out0.stride(d));
      plan.kept_strides[2].push_back(out1 ? out1->stride(d) : 0);
    }
  }
  detail::order_and_merge<1>(plan.red_sizes, {&plan.red_strides});
  detail::order_and_merge<3>(plan.kept_sizes, {&plan.kept_strides[0], &plan.kept_strides[1], &plan.kept_strides[2]});
  // Walkers want at least one dim.
  if (plan.red_sizes.empty()) {
    plan.red_sizes.push_back(1);
    plan.red_strides.push_back(0);
  }
  if (plan.kept_sizes.empty()) {
    plan.kept_sizes.push_back(1);
    for (auto& s : plan.kept_strides) s.push_back(0);
  }
  return plan;
}

namespace detail {

// A reference to a callable, without owning it or allocating: how run_groups takes an op's work. Through it
// run_groups is compiled once per accumulator type, and each op's loops once (in reduce_loop's lambdas), instead
// of both once per op and per way of sharing the threads: the reductions' file compiled in 111 s, most of its
// code being copies of those loops. The indirect call comes once per chunk of thousands of elements.
template <typename Sig>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
    requires(!std::is_same_v<std::decay_t<F>, FunctionRef>)
  FunctionRef(const F& f)  // NOLINT(google-explicit-constructor): stands for the callable it refers to
      : object_(&f), call_([](const void* o, Args... args) -> R {
          return (*static_cast<const F*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  const void* object_;
  R (*call_)(const void*, Args...);
};

// Computes `groups` groups of up to `width` results, each the in-order combination of `chunks` partials.
//   partial(walker, chunk, acc) -> width written;  combine(result, part, w): result[j] = result[j] then part[j];
//   finish(walker, acc, width)
// The walker is positioned on the group (offsets of x, out0, out1). Threads take whole groups when there
// are enough of them; otherwise they share the chunks, a bounded wave of chunks at a time, and the partials
// of each wave are folded into the results in chunk order. Both ways compute the same partials and combine
// them in the same order, so they give the same bits.
template <typename Acc>
void run_groups(const std::vector<int64_t>& sizes, const std::array<const std::vector<int64_t>*, 3>& strides,
                int64_t groups, int64_t chunks, int64_t width, int64_t work_per_group,
                FunctionRef<int64_t(const IndexWalker<3>&, int64_t, Acc*)> partial,
                FunctionRef<void(Acc*, const Acc*, int64_t)> combine,
                FunctionRef<void(const IndexWalker<3>&, const Acc*, int64_t)> finish) {
  const int threads = get_num_threads();
  const bool share = chunks > 1 && threads > 1 && !in_parallel_region() && groups < 2 * threads;
  if (!share) {
    int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, work_per_group));
    parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
      IndexWalker<3> walker(sizes, strides);
      walker.seek(begin);
      std::vector<Acc> result(static_cast<size_t>(width)), part(static_cast<size_t>(width));
      for (int64_t g = begin; g < end; ++g) {
        int64_t w = partial(walker, 0, result.data());
        for (int64_t c = 1; c < chunks; ++c) {
          partial(walker, c, part.data());
          combine(result.data(), part.data(), w);
        }
        finish(walker, result.data(), w);
        walker.advance(1);
      }
    });
    return;
  }
  constexpr int64_t kWaveBytes = int64_t{8} << 20;  // partials held at once
  const int64_t wave = std::max<int64_t>(threads, kWaveBytes / static_cast<int64_t>(sizeof(Acc)) / (groups * width));
  std::vector<Acc> results(static_cast<size_t>(groups * width));
  std::vector<Acc> parts(static_cast<size_t>(groups * std::min(wave, chunks) * width));
  std::vector<int64_t> widths(static_cast<size_t>(groups));
  for (int64_t c0 = 0; c0 < chunks; c0 += wave) {
    const int64_t n = std::min(wave, chunks - c0);
    // Item i is chunk c0 + i % n of group i / n.
    parallel_for(0, groups * n, 1, [&](int64_t begin, int64_t end) {
      IndexWalker<3> walker(sizes, strides);
      for (int64_t i = begin; i < end; ++i) {
        walker.seek(i / n);
        int64_t w = partial(walker, c0 + i % n, parts.data() + i * width);
        if (c0 == 0 && i % n == 0) widths[i / n] = w;
      }
    });
    for (int64_t g = 0; g < groups; ++g) {
      Acc* result = results.data() + g * width;
      for (int64_t c = 0; c < n; ++c) {
        const Acc* part = parts.data() + (g * n + c) * width;
        if (c0 + c == 0) std::copy(part, part + widths[g], result);
        else combine(result, part, widths[g]);
      }
    }
  }
  IndexWalker<3> walker(sizes, strides);
  for (int64_t g = 0; g < groups; ++g) {
    walker.seek(g);
    finish(walker, results.data() + g * width, widths[g]);
  }
}

}  // namespace detail

// Reduces x (its data pointer, offset applied) as planned. Ops is the op's policy:
//   using Acc;                                     the accumulator
//   Acc identity() const;                          the result of reducing nothing
//   Acc run(const T* p, int64_t n, int64_t stride, int64_t r) const;
//                                                  folds p[i * stride], i < n (n >= 1); r is the reduction index
//                                                  of p[0] (the position along the dim for argmax)
//   void column(Acc* acc, const T* p, int64_t n, int64_t stride, int64_t rows, int64_t row_stride, int64_t r) const;
//                                                  folds p[i * row_stride + j * stride] into acc[j], j < n, for
//                                                  the rows i < rows in order; row i is at reduction index r + i
//   Acc combine(const Acc& a, const Acc& b) const; a then b (b's elements come after a's)
// store(const Acc& acc, int64_t out0_offset, int64_t out1_offset) writes one result.
template <typename T, typename Ops, typename Store>
void reduce_loop(const ReducePlan& plan, const T* x, const Ops& ops, const Store& store) {
  using Acc = typename Ops::Acc;
  if (plan.num_out == 0) return;
  const int64_t R = plan.red_numel;
  const auto& red_sizes = plan.red_sizes;
  const auto& red_strides = plan.red_strides;
  const bool single_red_dim = red_sizes.size() == 1;

  if (R == 0) {  // sum -> 0, prod -> 1, mean -> nan: what the op makes of no elements
    IndexWalker<3> walker(plan.kept_sizes, {&plan.kept_strides[0], &plan.kept_strides[1], &plan.kept_strides[2]});
    walker.seek(0);
    const Acc empty = ops.identity();
    for (int64_t o = 0; o < plan.num_out; ++o, walker.advance(1)) store(empty, walker.offset(1), walker.offset(2));
    return;
  }

  auto combine = [&](Acc* result, const Acc* part, int64_t w) {
    for (int64_t j = 0; j < w; ++j) result[j] = ops.combine(result[j], part[j]);
  };
  const int64_t inner_kept = plan.kept_sizes.back();
  const int64_t col_stride = plan.kept_strides[0].back();
  const int64_t out0_stride = plan.kept_strides[1].back(), out1_stride = plan.kept_strides[2].back();
  // A group of up to `block` neighbouring outputs along the innermost kept dim: the groups form the outer kept
  // dims plus one dim of blocks.
  std::vector<int64_t> group_sizes;
  std::array<std::vector<int64_t>, 3> group_strides;
  const auto make_blocks = [&](int64_t block) {
    group_sizes.assign(plan.kept_sizes.begin(), plan.kept_sizes.end() - 1);
    group_sizes.push_back((inner_kept + block - 1) / block);
    for (int k = 0; k < 3; ++k) {
      group_strides[k].assign(plan.kept_strides[k].begin(), plan.kept_strides[k].end() - 1);
      group_strides[k].push_back(plan.kept_strides[k].back() * block);
    }
  };
  const auto finish_block = [&](const IndexWalker<3>& group, const Acc* acc, int64_t w) {
    for (int64_t j = 0; j < w; ++j) store(acc[j], group.offset(1) + j * out0_stride, group.offset(2) + j * out1_stride);
  };

  const bool columns = inner_kept > 1 && R > 1 && col_stride < red_strides.back();
  if (!columns && single_red_dim && R <= kShortRow && inner_kept > 1) {
    // Short rows, a block of outputs per group: each output's fold is the same call as on the rows loop below
    // (one chunk, from index 0), so the bits are too.
    const int64_t block = std::min(inner_kept, std::max<int64_t>(1, kShortRowBlock / R));
    make_blocks(block);
    const int64_t red_stride = red_strides[0];
    auto partial = [&](const IndexWalker<3>& group, int64_t, Acc* acc) -> int64_t {
      const int64_t w = std::min(block, inner_kept - group.inner_index() * block);
      const T* base = x + group.offset(0);
      if (R < kColumnShortRow) {
        for (int64_t j = 0; j < w; ++j) acc[j] = ops.identity();
        ops.column(acc, base, w, col_stride, R, red_stride, 0);
      } else {
        for (int64_t j = 0; j < w; ++j) acc[j] = ops.run(base + j * col_stride, R, red_stride, 0);
      }
      return w;
    };
    detail::run_groups<Acc>(group_sizes, {&group_strides[0], &group_strides[1], &group_strides[2]},
                            shape_numel(group_sizes), 1, block, R * block, partial, combine, finish_block);
    return;
  }
  if (!columns) {
    // Rows: one output per group; chunk c covers reduction indices [c * kReduceChunk, ...).
    const int64_t chunks = (R + kReduceChunk - 1) / kReduceChunk;
    auto partial = [&](const IndexWalker<3>& out, int64_t c, Acc* acc) -> int64_t {
      const T* base = x + out.offset(0);
      const int64_t r0 = c * kReduceChunk, r1 = std::min(R, r0 + kReduceChunk);
      if (single_red_dim) {
        acc[0] = ops.run(base + r0 * red_strides[0], r1 - r0, red_strides[0], r0);
        return 1;
      }
      IndexWalker<1> red(red_sizes, {&red_strides});
      red.seek(r0);
      for (int64_t r = r0; r < r1;) {
        int64_t n = std::min(red.inner_size() - red.inner_index(), r1 - r);
        Acc part = ops.run(base + red.offset(0), n, red_strides.back(), r);
        acc[0] = r == r0 ? part : ops.combine(acc[0], part);
        red.advance(n);
        r += n;
      }
      return 1;
    };
    auto finish = [&](const IndexWalker<3>& out, const Acc* acc, int64_t) { store(acc[0], out.offset(1), out.offset(2)); };
    detail::run_groups<Acc>(plan.kept_sizes, {&plan.kept_strides[0], &plan.kept_strides[1], &plan.kept_strides[2]},
                            plan.num_out, chunks, 1, R, partial, combine, finish);
    return;
  }

  // Columns: a group is a block of up to kColumnBlock neighbouring outputs along the innermost kept dim.
  const int64_t block = std::min(inner_kept, kColumnBlock);
  make_blocks(block);
  const int64_t rows_per_chunk = std::max<int64_t>(1, kColumnChunk / block);
  const int64_t chunks = (R + rows_per_chunk - 1) / rows_per_chunk;
  auto partial = [&](const IndexWalker<3>& group, int64_t c, Acc* acc) -> int64_t {
    const int64_t w = std::min(block, inner_kept - group.inner_index() * block);
    const T* base = x + group.offset(0);
    for (int64_t j = 0; j < w; ++j) acc[j] = ops.identity();
    const int64_t r0 = c * rows_per_chunk, r1 = std::min(R, r0 + rows_per_chunk);
    if (single_red_dim) {
      ops.column(acc, base + r0 * red_strides[0], w, col_stride, r1 - r0, red_strides[0], r0);
      return w;
    }
    // The rows of a run along the innermost reduced dim are evenly spaced: hand them over together.
    IndexWalker<1> red(red_sizes, {&red_strides});
    red.seek(r0);
    for (int64_t r = r0; r < r1;) {
      int64_t n = std::min(red.inner_size() - red.inner_index(), r1 - r);
      ops.column(acc, base + red.offset(0), w, col_stride, n, red_strides.back(), r);
      red.advance(n);
      r += n;
    }
    return w;
  };
  detail::run_groups<Acc>(group_sizes, {&group_strides[0], &group_strides[1], &group_strides[2]},
                          shape_numel(group_sizes), chunks, block, R * block, partial, combine, finish_block);
}

}  // namespace kiln::cpu
