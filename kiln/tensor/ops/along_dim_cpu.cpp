// CPU kernels of cumsum, sort and topk.
//
// The input is made contiguous and seen as (outer, n, inner), n the op's dim: a line is n elements `inner`
// apart. cumsum runs down a block of neighbouring columns at once, so that every step reads contiguous memory;
// sort copies each line out, sorts its positions with std::stable_sort and writes values and positions back.
// topk keeps a small k in order in one pass, or selects its k positions (std::nth_element) and sorts only those,
// in an order made total by breaking ties by position: either way its k are the first k of the stable sort.
// Lines (or column blocks) are shared among the threads.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
};

Lines lines_of(const Tensor& x, int64_t dim) {
  Lines g;
  g.n = x.size(dim);
  for (int64_t k = 0; k < dim; ++k) g.outer *= x.size(k);
  for (int64_t k = dim + 1; k < x.dim(); ++k) g.inner *= x.size(k);
  return g;
}

// Columns summed together when the dim is not the last one.
constexpr int64_t kColumnBlock = 256;

// Floating types accumulate in float64 (as PyTorch's CPU cumsum), integers in int64.
template <typename T>
using cum_acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

void cumsum_cpu(const Tensor& out, const Tensor& x, int64_t dim) {
  KILN_ASSERT(out.dtype() == x.dtype() && out.sizes() == x.sizes());
  const Tensor in = ops::contiguous(x);
  const bool direct = out.is_contiguous();
  const Tensor dst = direct ? out : empty(out.sizes(), TensorOptions(out.dtype()));
  const Lines g = lines_of(x, dim);
  visit_dtype<kNumericSet>(x.dtype(), "cumsum", [&]<typename T>() {
    using A = cum_acc_t<T>;
    using M = opmath_t<T>;
    const T* p = in.data_ptr<T>();
    T* q = dst.data_ptr<T>();
    const int64_t blocks = (g.inner + kColumnBlock - 1) / kColumnBlock;
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (g.n * std::min(g.inner, kColumnBlock)));
    parallel_for(0, g.outer * blocks, grain, [&](int64_t begin, int64_t end) {
      A acc[kColumnBlock];
      for (int64_t b = begin; b < end; ++b) {
        const int64_t o = b / blocks, c0 = (b % blocks) * kColumnBlock;
        const int64_t w = std::min(kColumnBlock, g.inner - c0);
        const int64_t base = o * g.n * g.inner + c0;
        std::fill(acc, acc + w, A(0));
        for (int64_t i = 0; i < g.n; ++i) {
          const T* src = p + base + i * g.inner;
          T* dest = q + base + i * g.inner;
          for (int64_t j = 0; j < w; ++j) {
            acc[j] += static_cast<A>(static_cast<M>(src[j]));
            dest[j] = static_cast<T>(static_cast<M>(acc[j]));
          }
        }
      }
    });
  });
  if (!direct) ops::copy_(out, dst);
}

// The order sort uses: NaN above every number (and equal to NaN); otherwise <, so -0.0 equals 0.0.
template <typename M>
bool sorts_before(M a, M b) {
  if constexpr (std::is_floating_point_v<M>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

void sort_cpu(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, bool descending) {
  KILN_ASSERT(values.is_contiguous() && indices.is_contiguous() && indices.dtype() == kInt64 &&
              values.dtype() == x.dtype());
  const Tensor in = ops::contiguous(x);
  const Lines g = lines_of(x, dim);
  visit_dtype(x.dtype(), "sort", [&]<typename T>() {
    using M = opmath_t<T>;
    const T* p = in.data_ptr<T>();
    T* v = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
    parallel_for(0, g.outer * g.inner, std::max<int64_t>(1, kDefaultGrain / g.n), [&](int64_t begin, int64_t end) {
      std::vector<M> keys(static_cast<size_t>(g.n));
      std::vector<int64_t> order(static_cast<size_t>(g.n));
      for (int64_t line = begin; line < end; ++line) {
        const int64_t base = (line / g.inner) * g.n * g.inner + line % g.inner;
        for (int64_t i = 0; i < g.n; ++i) keys[static_cast<size_t>(i)] = static_cast<M>(p[base + i * g.inner]);
        std::iota(order.begin(), order.end(), int64_t{0});
        if (descending) {
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return sorts_before(keys[static_cast<size_t>(b)], keys[static_cast<size_t>(a)]);
          });
        } else {
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return sorts_before(keys[static_cast<size_t>(a)], keys[static_cast<size_t>(b)]);
          });
        }
        for (int64_t i = 0; i < g.n; ++i) {
          const int64_t from = order[static_cast<size_t>(i)];
          v[base + i * g.inner] = p[base + from * g.inner];
          idx[base + i * g.inner] = from;
        }
      }
    });
  });
}

// Up to this k, topk keeps its k in order in one pass over the line; above it, it selects and then sorts.
constexpr int64_t kStreamingTopK = 16;

void topk_cpu(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, int64_t k, bool largest) {
  KILN_ASSERT(values.is_contiguous() && indices.is_contiguous() && indices.dtype() == kInt64 &&
              values.dtype() == x.dtype() && k >= 1 && k <= x.size(dim));
  const Tensor in = ops::contiguous(x);
  const Lines g = lines_of(x, dim);
  visit_dtype(x.dtype(), "topk", [&]<typename T>() {
    using M = opmath_t<T>;
    const T* p = in.data_ptr<T>();
    T* v = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
    parallel_for(0, g.outer * g.inner, std::max<int64_t>(1, kDefaultGrain / g.n), [&](int64_t begin, int64_t end) {
      const size_t line_size = k > kStreamingTopK ? static_cast<size_t>(g.n) : 0;  // the selection's
      std::vector<M> keys(line_size);
      std::vector<int64_t> order(line_size);
      // Sort's order (descending when largest), equal keys in position order: a strict total order.
      const auto first = [&](int64_t a, int64_t b) {
        const M ka = keys[static_cast<size_t>(a)], kb = keys[static_cast<size_t>(b)];
        if (largest ? sorts_before(kb, ka) : sorts_before(ka, kb)) return true;
        if (largest ? sorts_before(ka, kb) : sorts_before(kb, ka)) return false;
        return a < b;
      };
      // Whether key a goes before key b (strictly) in the line's order.
      const auto better = [largest](M a, M b) { return largest ? sorts_before(b, a) : sorts_before(a, b); };
      const size_t kept_size = k <= kStreamingTopK ? static_cast<size_t>(k) : 0;  // the one pass's
      std::vector<M> best_keys(kept_size);
      std::vector<int64_t> best_at(kept_size);
      for (int64_t line = begin; line < end; ++line) {
        const int64_t outer = line / g.inner, col = line % g.inner;
        const int64_t base = outer * g.n * g.inner + col, out_base = outer * k * g.inner + col;
        if (k <= kStreamingTopK) {
          // One pass in position order, keeping the best k so far in order: an element goes in only when it
          // beats the k-th (on shuffled data, rarely after the first few k), and after every key it does not
          // beat, so equal keys stay in position order.
          int64_t kept = 0;
          for (int64_t i = 0; i < g.n; ++i) {
            const M key = static_cast<M>(p[base + i * g.inner]);
            if (kept == k && !better(key, best_keys[static_cast<size_t>(k - 1)])) continue;
            int64_t j = kept < k ? kept++ : k - 1;
            for (; j > 0 && better(key, best_keys[static_cast<size_t>(j - 1)]); --j) {
              best_keys[static_cast<size_t>(j)] = best_keys[static_cast<size_t>(j - 1)];
              best_at[static_cast<size_t>(j)] = best_at[static_cast<size_t>(j - 1)];
            }
            best_keys[static_cast<size_t>(j)] = key, best_at[static_cast<size_t>(j)] = i;
          }
          for (int64_t i = 0; i < k; ++i) {
            const int64_t from = best_at[static_cast<size_t>(i)];
            v[out_base + i * g.inner] = p[base + from * g.inner];
            idx[out_base + i * g.inner] = from;
          }
          continue;
        }
        for (int64_t i = 0; i < g.n; ++i) keys[static_cast<size_t>(i)] = static_cast<M>(p[base + i * g.inner]);
        std::iota(order.begin(), order.end(), int64_t{0});
        if (k < g.n) std::nth_element(order.begin(), order.begin() + k, order.end(), first);
        std::sort(order.begin(), order.begin() + k, first);
        for (int64_t i = 0; i < k; ++i) {
          const int64_t from = order[static_cast<size_t>(i)];
          v[out_base + i * g.inner] = p[base + from * g.inner];
          idx[out_base + i * g.inner] = from;
        }
      }
    });
  });
}

}  // namespace

namespace detail {
void register_along_dim_cpu_kernels() {
  register_kernel<Op::cumsum>(DeviceType::CPU, cumsum_cpu);
  register_kernel<Op::sort>(DeviceType::CPU, sort_cpu);
  register_kernel<Op::topk>(DeviceType::CPU, topk_cpu);
}
}  // namespace detail
}  // namespace kiln
