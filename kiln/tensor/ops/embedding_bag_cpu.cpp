// CPU kernels of embedding_bag (ops/embedding_bag.h): each bag's rows summed, averaged or maxed straight into
// the output, and the table's gradient written row by row from the entries grouped by row (Sum and Mean) or
// column block by column block from the forward's argmax (Max). No (entries, D)
// copy of the rows is made either way. The reference is the composite of gathers and index_adds that
// nn::functional::embedding_bag runs for other dtypes (tests/nn/embedding_test.cpp holds the two against each
// other, and both against float64 definitions).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/embedding_bag.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"

namespace kiln {
namespace {

// The layout's arrays (all on the host).
struct Entries {
  const int64_t *input, *row, *bag, *start;
  int64_t count, entries;

  explicit Entries(const BagLayout& b)
      : input(b.input.data_ptr<int64_t>()), row(b.row.data_ptr<int64_t>()), bag(b.bag.data_ptr<int64_t>()),
        start(b.start.data_ptr<int64_t>()), count(b.count), entries(b.row.numel()) {}
  int64_t size(int64_t b) const { return start[b + 1] - start[b]; }
};

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The rows are read in random order from a table usually far larger than the caches: asking for the row a few
// entries ahead keeps several misses in flight (the max kernel's forward on composite_bench's batch: 36 ms
// to 17 on 1 thread; sum's 12.5 to 11).
constexpr int64_t kPrefetchAhead = 4;
template <typename T>
inline void prefetch_row(const Entries& e, const T* w, int64_t D, int64_t j) {
  if (j >= e.entries) return;
  const char* p = reinterpret_cast<const char*>(w + e.row[j] * D);
  for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) __builtin_prefetch(p + off);
}

template <typename T>
void forward(const Entries& e, const T* w, const T* psw, int64_t D, BagReduce mode, T* out, int64_t* argmax) {
  const int64_t per_bag = std::max<int64_t>(1, e.entries / std::max<int64_t>(e.count, 1));
  using Place = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  parallel_for(0, e.count, std::max<int64_t>(1, kDefaultGrain / (D * per_bag + 1)), [&](int64_t b0, int64_t b1) {
    std::vector<Place> place(mode == BagReduce::Max ? static_cast<size_t>(D) : 0);
    for (int64_t b = b0; b < b1; ++b) {
      T* o = out + b * D;
      const int64_t first = e.start[b], last = e.start[b + 1];
      if (mode == BagReduce::Max) {
        int64_t* arg = argmax + b * D;
        if (first == last) {
          std::fill(o, o + D, T(0)), std::fill(arg, arg + D, int64_t{-1});
          continue;
        }
        // Each element's winner as its place in the bag, an integer as wide as T, so that the loop below
        // vectorizes (a compare, then two blends); turned into table rows after.
        const int64_t r0 = e.row[first];
        std::copy(w + r0 * D, w + r0 * D + D, o);
        std::fill(place.begin(), place.end(), Place{0});
        for (int64_t j = first + 1; j < last; ++j) {
          prefetch_row(e, w, D, j + kPrefetchAhead);
          const T* __restrict row = w + e.row[j] * D;
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
        for (int64_t d = 0; d < D; ++d) arg[d] = e.row[first + place[d]];
        continue;
      }
      std::fill(o, o + D, T(0));
      for (int64_t j = first; j < last; ++j) {
        prefetch_row(e, w, D, j + kPrefetchAhead);
        const T* row = w + e.row[j] * D;
        if (psw != nullptr) {
          const T s = psw[e.input[j]];
          for (int64_t d = 0; d < D; ++d) o[d] += row[d] * s;
        } else {
          for (int64_t d = 0; d < D; ++d) o[d] += row[d];
        }
      }
      if (mode == BagReduce::Mean && last > first) {
        const T n = static_cast<T>(last - first);
        for (int64_t d = 0; d < D; ++d) o[d] /= n;
      }
    }
  });
}

// Sum and Mean: each named row the sum, over its entries in input order, of the entry's scale times its bag's
// gradient; one thread per row, so no row is written twice at once. The task of the k-th named row also zeroes
// the rows after the previous named one (and the last task the rows after it), so that the table's gradient
// is written in one pass, each row zeroed just before it is summed into.
template <typename T>
void backward_weight(const Entries& e, const RowGroups& groups, const T* g, const T* psw, int64_t V, int64_t D,
                     BagReduce mode, T* grad_w) {
  const int64_t* named = groups.rows_named.data_ptr<int64_t>();
  const int64_t* row_start = groups.row_start.data_ptr<int64_t>();
  const int64_t* order = groups.order.data_ptr<int64_t>();
  const int64_t R = groups.rows_named.numel();
  if (R == 0) {
    parallel_for(0, V * D, kDefaultGrain, [&](int64_t i0, int64_t i1) { std::fill(grad_w + i0, grad_w + i1, T(0)); });
    return;
  }
  std::vector<T> inv;
  if (mode == BagReduce::Mean) {
    inv.resize(static_cast<size_t>(e.count));
    for (int64_t b = 0; b < e.count; ++b) inv[b] = T(1) / static_cast<T>(std::max<int64_t>(e.size(b), 1));
  }
  const int64_t per_row = std::max<int64_t>(1, e.entries / R) + V / R;
  parallel_for(0, R, std::max<int64_t>(1, kDefaultGrain / (D * per_row + 1)), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t first_zero = k == 0 ? 0 : named[k - 1] + 1;
      const int64_t last_zero = k == R - 1 ? V : named[k] + 1;  // exclusive; the named row itself included
      std::fill(grad_w + first_zero * D, grad_w + last_zero * D, T(0));
      T* dst = grad_w + named[k] * D;
      for (int64_t i = row_start[k]; i < row_start[k + 1]; ++i) {
        const int64_t j = order[i], b = e.bag[j];
        const T s = psw != nullptr ? psw[e.input[j]] : mode == BagReduce::Mean ? inv[b] : T(1);
        const T* src = g + b * D;
        for (int64_t d = 0; d < D; ++d) dst[d] += s * src[d];
      }
    }
  });
}

// Max: grad_w (V, D) gets each element of g (B, D) at the row argmax (B, D) names. Threads split the columns
// in blocks of a cache line's worth, so two never write one element (rows need not start on a line, so two
// may share a line at a block's edge); within a column the bags go in order.
template <typename T>
void backward_weight_max(const int64_t* argmax, const T* g, int64_t B, int64_t V, int64_t D, T* grad_w) {
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

// Each entry's bag's gradient dotted with its row; entries that left their bags keep 0.
template <typename T>
void backward_per_sample_weights(const Entries& e, const T* g, const T* w, int64_t D, T* grad_psw, int64_t n) {
  std::fill(grad_psw, grad_psw + n, T(0));
  parallel_for(0, e.entries, std::max<int64_t>(1, kDefaultGrain / (D + 1)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const T* row = w + e.row[j] * D;
      const T* src = g + e.bag[j] * D;
      T dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += row[d] * src[d];
      grad_psw[e.input[j]] = dot;
    }
  });
}

void embedding_bag_cpu(const Tensor& out, const Tensor& argmax, const Tensor& weight, const Tensor& psw,
                       const BagLayout& bags, BagReduce mode) {
  visit_dtype<kFloat32Set | kFloat64Set>(weight.dtype(), "embedding_bag", [&]<typename T>() {
    forward<T>(Entries(bags), weight.data_ptr<T>(), ptr_or_null<T>(psw), weight.size(1), mode, out.data_ptr<T>(),
               argmax.defined() ? argmax.data_ptr<int64_t>() : nullptr);
  });
}

void embedding_bag_backward_cpu(const Tensor& grad_w, const Tensor& grad_out, const Tensor& psw, const Tensor& argmax,
                                const BagLayout& bags, BagReduce mode) {
  visit_dtype<kFloat32Set | kFloat64Set>(grad_w.dtype(), "embedding_bag backward", [&]<typename T>() {
    const int64_t V = grad_w.size(0), D = grad_w.size(1);
    if (mode == BagReduce::Max) {
      backward_weight_max<T>(argmax.data_ptr<int64_t>(), grad_out.data_ptr<T>(), bags.count, V, D,
                             grad_w.data_ptr<T>());
    } else {
      backward_weight<T>(Entries(bags), ops::group_by_row(bags, V), grad_out.data_ptr<T>(), ptr_or_null<T>(psw), V, D,
                         mode, grad_w.data_ptr<T>());
    }
  });
}

void embedding_bag_psw_backward_cpu(const Tensor& grad_psw, const Tensor& grad_out, const Tensor& weight,
                                    const BagLayout& bags) {
  visit_dtype<kFloat32Set | kFloat64Set>(weight.dtype(), "embedding_bag backward", [&]<typename T>() {
    backward_per_sample_weights<T>(Entries(bags), grad_out.data_ptr<T>(), weight.data_ptr<T>(), weight.size(1),
                                   grad_psw.data_ptr<T>(), grad_psw.numel());
  });
}

}  // namespace

namespace detail {
void register_embedding_bag_cpu_kernels() {
  register_kernel<Op::embedding_bag>(DeviceType::CPU, embedding_bag_cpu);
  register_kernel<Op::embedding_bag_backward>(DeviceType::CPU, embedding_bag_backward_cpu);
  register_kernel<Op::embedding_bag_psw_backward>(DeviceType::CPU, embedding_bag_psw_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
