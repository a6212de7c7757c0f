// CPU kernels of cumsum, sort and topk.
//
// The input is made contiguous and seen as (outer, n, inner), n the op's dim: a line is n elements `inner`
// apart. cumsum runs down a block of neighbouring columns at once, so that every step reads contiguous memory;
// along the last dim it runs along four rows at once, four chains of dependent adds side by side.
// sort copies each line out, sorts its positions and writes values and positions back: a line longer than
// kRadixMin by a least-significant-digit radix sort of its keys mapped to unsigned integers in sort's order
// (stable by construction, one pass per byte that is not the same in every key), a shorter one with
// std::stable_sort.
// topk keeps a small k in order in one pass, or selects its k positions (std::nth_element) and sorts only those,
// in an order made total by breaking ties by position: either way its k are the first k of the stable sort.
// Lines (or column blocks) are shared among the threads.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>
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

// Rows [r0, r1) of a cumsum along the last dim (rows of n): four rows at a time, so that four chains of
// dependent adds run side by side; each row still adds in its own order. By value, so that the stores cannot be
// taken to change the bounds.
template <typename T>
void cumsum_rows(const T* __restrict p, T* __restrict q, int64_t r0, int64_t r1, int64_t n) {
  using A = cum_acc_t<T>;
  using M = opmath_t<T>;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const T* a = p + r * n;
    T* b = q + r * n;
    A s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; ++i) {
      s0 += static_cast<A>(static_cast<M>(a[i]));
      s1 += static_cast<A>(static_cast<M>(a[n + i]));
      s2 += static_cast<A>(static_cast<M>(a[2 * n + i]));
      s3 += static_cast<A>(static_cast<M>(a[3 * n + i]));
      b[i] = static_cast<T>(static_cast<M>(s0));
      b[n + i] = static_cast<T>(static_cast<M>(s1));
      b[2 * n + i] = static_cast<T>(static_cast<M>(s2));
      b[3 * n + i] = static_cast<T>(static_cast<M>(s3));
    }
  }
  for (; r < r1; ++r) {
    A s = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += static_cast<A>(static_cast<M>(p[r * n + i]));
      q[r * n + i] = static_cast<T>(static_cast<M>(s));
    }
  }
}

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
    if (g.inner == 1) {
      const int64_t n = g.n;
      parallel_for(0, g.outer, std::max<int64_t>(4, kDefaultGrain / std::max<int64_t>(1, n)),
                   [=](int64_t r0, int64_t r1) { cumsum_rows(p, q, r0, r1, n); });
      return;
    }
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

// Lines longer than this are radix sorted; shorter ones compared.
constexpr int64_t kRadixMin = 256;

// A key as an unsigned integer whose order is sort's: floats by their bits with the sign made the top of the
// order (negative ones' bits flipped), -0.0 taken as 0.0 and every NaN the largest key; signed integers with
// the sign bit flipped. Descending sorts take the complement. 16-bit floats arrive as float, bool and uint8
// widened to 32 bits.
template <typename M>
using radix_key_t = std::conditional_t<sizeof(M) <= 4, uint32_t, uint64_t>;

template <typename M>
radix_key_t<M> radix_key(M x, bool descending) {
  using U = radix_key_t<M>;
  constexpr U top = U(1) << (8 * sizeof(U) - 1);
  U key;
  if constexpr (std::is_floating_point_v<M>) {
    static_assert(sizeof(M) == sizeof(U));
    const M y = x == M(0) ? M(0) : x;
    std::memcpy(&key, &y, sizeof key);
    key = std::isnan(x) ? ~U(0) : (key & top) ? ~key : (key | top);
  } else if constexpr (std::is_signed_v<M>) {
    key = static_cast<U>(static_cast<std::make_signed_t<U>>(x)) ^ top;
  } else {
    key = static_cast<U>(x);
  }
  return descending ? ~key : key;
}

// The positions 0..n-1 of keys[0, n) in ascending order of key, equal keys in position order: one stable
// counting pass per byte, least significant first, skipping a byte that is the same in every key. The buffers
// hold n each; returns the one (order or spare_order) the result ends in.
template <typename U>
const uint32_t* radix_sort_positions(U* keys, U* spare_keys, uint32_t* order, uint32_t* spare_order, int64_t n) {
  constexpr int kBytes = sizeof(U);
  std::array<std::array<uint32_t, 256>, kBytes> count{};
  for (int64_t i = 0; i < n; ++i)
    for (int b = 0; b < kBytes; ++b) ++count[b][(keys[i] >> (8 * b)) & 0xFF];
  std::iota(order, order + n, uint32_t{0});
  for (int b = 0; b < kBytes; ++b) {
    std::array<uint32_t, 256>& c = count[b];
    if (std::any_of(c.begin(), c.end(), [n](uint32_t m) { return m == n; })) continue;  // nothing would move
    uint32_t sum = 0;
    for (uint32_t& m : c) sum += std::exchange(m, sum);
    for (int64_t i = 0; i < n; ++i) {
      const U key = keys[i];
      const uint32_t at = c[(key >> (8 * b)) & 0xFF]++;
      spare_keys[at] = key;
      spare_order[at] = order[i];
    }
    std::swap(keys, spare_keys);
    std::swap(order, spare_order);
  }
  return order;
}

// One line of n keys (strided `inner` apart from p): values and positions written in sort's order, by the radix
// sort. The buffers are the calling thread's, n elements each.
template <typename T, typename U>
void radix_sort_line(const T* p, T* v, int64_t* idx, int64_t n, int64_t inner, bool descending, U* keys,
                     U* spare_keys, uint32_t* order, uint32_t* spare_order) {
  for (int64_t i = 0; i < n; ++i) keys[i] = radix_key(static_cast<opmath_t<T>>(p[i * inner]), descending);
  const uint32_t* sorted = radix_sort_positions(keys, spare_keys, order, spare_order, n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t from = sorted[i];
    v[i * inner] = p[from * inner];
    idx[i * inner] = from;
  }
}

void sort_cpu(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim, bool descending) {
  KILN_ASSERT(values.is_contiguous() && indices.is_contiguous() && indices.dtype() == kInt64 &&
              values.dtype() == x.dtype());
  const Tensor in = ops::contiguous(x);
  const Lines g = lines_of(x, dim);
  visit_dtype(x.dtype(), "sort", [&]<typename T>() {
    using M = opmath_t<T>;
    using U = radix_key_t<M>;
    const T* p = in.data_ptr<T>();
    T* v = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
    const bool radix = g.n > kRadixMin && g.n <= std::numeric_limits<uint32_t>::max();
    parallel_for(0, g.outer * g.inner, std::max<int64_t>(1, kDefaultGrain / g.n), [&](int64_t begin, int64_t end) {
      if (radix) {
        const auto size = static_cast<size_t>(g.n);
        std::vector<U> keys(size), spare_keys(size);
        std::vector<uint32_t> order(size), spare_order(size);
        for (int64_t line = begin; line < end; ++line) {
          const int64_t base = (line / g.inner) * g.n * g.inner + line % g.inner;
          radix_sort_line(p + base, v + base, idx + base, g.n, g.inner, descending, keys.data(), spare_keys.data(),
                          order.data(), spare_order.data());
        }
        return;
      }
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
