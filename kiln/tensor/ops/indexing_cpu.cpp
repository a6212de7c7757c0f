// CPU kernels of the indexed reads (index_select, gather) and writes (scatter, scatter_add, index_add), and of
// nonzero.
//
// All five rest on one trick: the indexed operand is restrided to the shape of the iteration with stride 0
// along `dim`, so one StridedIter walks every operand at any strides, and the element an index value names
// is that position plus index * stride(dim). index_select and index_add are gather and scatter_add whose
// (k) index is expanded to the iteration's shape (stride 0 outside dim).
//
// Reads run in parallel over all output elements. Writes do not: two index entries that differ only along
// dim may name one element of self, so the writes are split across threads only by their positions outside
// dim, and every collision is handled by one thread, in order (scatter_add sums without a race, scatter
// keeps the last value). The frontends (indexing.cpp) check shapes and dtypes; index values are checked
// here, where they are read. A read along the last dim with out and x contiguous (gather's usual case, and
// index_select's) goes row by row instead of through the iterator, which cost ~10 ns an element there.
//
// nonzero counts the nonzeros of fixed chunks in parallel, then each chunk writes its coordinates from its
// place in the output.
#include <algorithm>
#include <vector>

#include "kiln/tensor/parallel.h"
#include "kiln/tensor/views.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

// A view of t's storage from t's offset with any shape and strides, unchecked: the kernels build views
// whose elements they address only through checked index values (t may be empty along dim).
Tensor raw_view(const Tensor& t, Shape shape, Shape strides) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), t.dtype(), std::move(shape), std::move(strides),
                                             t.storage_offset()));
}

// t with `shape` (no larger than t's outside dim) and stride 0 along dim.
Tensor restride_along(const Tensor& t, const Shape& shape, int64_t dim) {
  Shape strides = t.strides();
  strides[dim] = 0;
  return raw_view(t, shape, std::move(strides));
}

// A (k) index seen with `shape` (shape[dim] == k): index[c] = index[c[dim]].
Tensor expand_index(const Tensor& index, const Shape& shape, int64_t dim) {
  Shape strides(shape.size(), 0);
  strides[dim] = index.stride(0);
  return raw_view(index, shape, std::move(strides));
}

KILN_INLINE void check_index(const char* op, int64_t idx, int64_t dim, int64_t size) {
  KILN_CHECK(idx >= 0 && idx < size, op, ": index ", idx, " is out of range for dim ", dim, " of size ", size);
}

// Each element costs a dependent load and a bounds check: smaller chunks than plain element-wise loops.
constexpr int64_t kIndexGrain = 8192;

// Rows [r0, r1) of a read along the last dim, everything contiguous: out row r (k) from x row r (n) at index row
// r (index_stride apart: k, or 0 for one index row shared by all). By value, so that no store can be taken to
// change a bound.
template <typename T>
void gather_rows(T* __restrict out, const T* __restrict x, const int64_t* __restrict index, int64_t r0, int64_t r1,
                 int64_t k, int64_t n, int64_t index_stride, const char* op, int64_t dim) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * n;
    const int64_t* at = index + r * index_stride;
    T* dst = out + r * k;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t idx = at[j];
      check_index(op, idx, dim, n);
      dst[j] = row[idx];
    }
  }
}

// The index's stride from one row of the last dim to the next when gather_rows can take it (k for contiguous
// rows, 0 for index_select's one row), else -1.
int64_t index_row_stride(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t last = out.dim() - 1;
  if (dim != last || !out.is_contiguous() || !x.is_contiguous() || index.stride(last) != 1) return -1;
  for (int64_t d = 0; d < last; ++d)
    if (x.size(d) != out.size(d)) return -1;
  if (index.is_contiguous()) return out.size(last);
  for (int64_t d = 0; d < last; ++d)
    if (index.stride(d) != 0 && index.size(d) > 1) return -1;
  return 0;
}

// out[c] = x[c with c[dim] = index[c]]; out, index: one shape, no larger than x outside dim.
void gather_loop(const char* op, const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  const int64_t x_size = x.size(dim);
  if (const int64_t stride = index_row_stride(out, x, dim, index); stride >= 0) {
    const int64_t k = out.size(dim), rows = out.numel() / k;
    visit_dtype(out.dtype(), op, [&]<typename T>() {
      T* po = out.data_ptr<T>();
      const T* px = x.data_ptr<T>();
      const int64_t* pi = index.data_ptr<int64_t>();
      parallel_for(0, rows, std::max<int64_t>(1, kIndexGrain / k), [=](int64_t r0, int64_t r1) {
        gather_rows(po, px, pi, r0, r1, k, x_size, stride, op, dim);
      });
    });
    return;
  }
  const Tensor x_r = restride_along(x, out.sizes(), dim);
  visit_dtype(out.dtype(), op, [&]<typename T>() {
    const int64_t step = x.stride(dim) * static_cast<int64_t>(sizeof(T));
    cpu::StridedIter<3> iter({&out, &x_r, &index});
    iter.run([&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t idx = *reinterpret_cast<const int64_t*>(p[2] + i * s[2]);
        check_index(op, idx, dim, x_size);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[1] + i * s[1] + idx * step);
      }
    }, kIndexGrain);
  });
}

// self[c with c[dim] = index[c]] = combine(that element, src[c]) for every position c of index.
// index, src: one shape, no larger than self outside dim.
template <typename T, typename Combine>
void scatter_loop(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                  const Combine& combine) {
  if (index.numel() == 0) return;
  const Tensor self_r = restride_along(self, index.sizes(), dim);
  // Iterate over the positions outside dim (`rest`); walk dim inside, serially.
  const Tensor self0 = ops::select(self_r, dim, 0), index0 = ops::select(index, dim, 0), src0 = ops::select(src, dim, 0);
  cpu::StridedIter<3> rest({&self0, &index0, &src0});
  const int64_t len = index.size(dim), self_size = self.size(dim);
  const int64_t self_step = self.stride(dim) * static_cast<int64_t>(sizeof(T));
  const int64_t index_step = index.stride(dim) * static_cast<int64_t>(sizeof(int64_t));
  const int64_t src_step = src.stride(dim) * static_cast<int64_t>(sizeof(T));
  auto apply = [&](char* self_p, const char* index_p, const char* src_p) {
    const int64_t idx = *reinterpret_cast<const int64_t*>(index_p);
    check_index(op, idx, dim, self_size);
    T& dst = *reinterpret_cast<T*>(self_p + idx * self_step);
    dst = combine(dst, *reinterpret_cast<const T*>(src_p));
  };
  const int64_t grain = std::max<int64_t>(1, kIndexGrain / len);
  // src is closer in memory along dim than along the positions outside it (an index_add along the last dim):
  // walking dim innermost reads it in memory order.
  const bool along_dim_first = std::abs(src_step) < std::abs(rest.inner_stride(2));
  parallel_for(0, rest.numel(), grain, [&](int64_t b, int64_t e) {
    if (e - b < 8 || along_dim_first) {
      // Few positions outside dim (a 1-D scatter has one), or src laid out along dim: walk dim innermost, one
      // pass.
      rest.for_each_run(b, e, [&](char** p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < len; ++j)
            apply(p[0] + i * s[0], p[1] + i * s[1] + j * index_step, p[2] + i * s[2] + j * src_step);
      });
      return;
    }
    // Many: one sweep of the chunk per step along dim, so rows of src (index_add's (k, D) src) are read in
    // memory order rather than column by column.
    for (int64_t j = 0; j < len; ++j) {
      rest.for_each_run(b, e, [&](char** p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          apply(p[0] + i * s[0], p[1] + i * s[1] + j * index_step, p[2] + i * s[2] + j * src_step);
      });
    }
  });
}

template <typename T>
KILN_INLINE T add_in_opmath(T a, opmath_t<T> b) {
  return static_cast<T>(static_cast<opmath_t<T>>(a) + b);
}

// ---- reads ----

// out: x's shape with dim -> k, x: (..., n, ...), index: (k)
void index_select_cpu(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  gather_loop("index_select", out, x, dim, expand_index(index, out.sizes(), dim));
}

// out, index: one shape, no larger than x outside dim
void gather_cpu(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  gather_loop("gather", out, x, dim, index);
}

// ---- writes ----

// index: no larger than src, nor than self outside dim; src is read over index's shape.
void scatter_cpu(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar&) {
  const Tensor src_v = raw_view(src, index.sizes(), src.strides());
  visit_dtype(self.dtype(), "scatter", [&]<typename T>() {
    scatter_loop<T>("scatter", self, dim, index, src_v, [](T, T s) { return s; });
  });
}

void scatter_add_cpu(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar&) {
  const Tensor src_v = raw_view(src, index.sizes(), src.strides());
  visit_dtype(self.dtype(), "scatter_add", [&]<typename T>() {
    scatter_loop<T>("scatter_add", self, dim, index, src_v,
                    [](T d, T s) { return add_in_opmath(d, static_cast<opmath_t<T>>(s)); });
  });
}

// index_add of whole rows: self (outer, n, inner) and src (outer, k, inner) contiguous, inner (the elements after
// dim) at least 16 long, as an embedding table's gradient (dim 0) is. Each thread owns a band of self's rows and
// adds into them, in index order, the src rows that land there: contiguous rows the compiler vectorizes, and
// every collision on one thread, in order, as in scatter_loop. False where the layout does not fit.
template <typename T, typename M>
bool index_add_rows(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, M alpha) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  if (!self.is_contiguous() || !src.is_contiguous() || inner < 16) return false;
  const int64_t n = self.size(dim), k = index.numel(), istride = index.stride(0);
  const int64_t* idx = index.data_ptr<int64_t>();
  for (int64_t j = 0; j < k; ++j) check_index("index_add", idx[j * istride], dim, n);
  T* out = self.data_ptr<T>();
  const T* in = src.data_ptr<T>();
  const int64_t rows = outer * n, threads = get_num_threads();
  parallel_for(0, rows, std::max<int64_t>(1, (rows + threads - 1) / threads), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo / n; o <= (hi - 1) / n; ++o)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = o * n + idx[j * istride];
        if (r < lo || r >= hi) continue;
        T* dst = out + r * inner;
        const T* row = in + (o * k + j) * inner;
        for (int64_t c = 0; c < inner; ++c)
          dst[c] = add_in_opmath(dst[c], static_cast<M>(alpha * static_cast<M>(row[c])));
      }
  });
  return true;
}

// self: (..., n, ...), index: (k), src: self's shape with dim -> k
void index_add_cpu(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  visit_dtype(self.dtype(), "index_add", [&]<typename T>() {
    using M = opmath_t<T>;
    const M a = alpha.to<M>();
    if (index_add_rows<T, M>(self, dim, index, src, a)) return;
    scatter_loop<T>("index_add", self, dim, expand_index(index, src.sizes(), dim), src,
                    [a](T d, T s) { return add_in_opmath(d, static_cast<M>(a * static_cast<M>(s))); });
  });
}

// ---- nonzero ----

// Elements per task in nonzero's two passes: one counts each chunk's nonzeros, the other writes them.
constexpr int64_t kNonzeroChunk = int64_t{1} << 16;

template <typename T>
int64_t count_nonzero_run(const T* __restrict p, int64_t n) {
  using M = opmath_t<T>;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += static_cast<M>(p[i]) != M(0);
  return count;
}

// The coordinates of the nonzero elements among p[b, e) (x of `sizes`, D dims, contiguous), D per element, to
// out. b's coordinate is unravelled once and then carried row by row; within a row, the positions of up to 64
// elements are gathered without a branch (a slot written for each, kept only for a nonzero), then written out.
template <typename T>
void nonzero_chunk(const T* __restrict p, int64_t b, int64_t e, const int64_t* __restrict sizes, int64_t D,
                   int64_t* __restrict out) {
  using M = opmath_t<T>;
  constexpr int64_t kBlock = 64;
  std::vector<int64_t> coord(static_cast<size_t>(D));
  for (int64_t d = D - 1, r = b; d >= 0; --d) coord[static_cast<size_t>(d)] = r % sizes[d], r /= sizes[d];
  const int64_t W = sizes[D - 1];
  int64_t found[kBlock];
  for (int64_t i = b; i < e;) {
    const int64_t row_end = std::min(e, i + (W - coord[static_cast<size_t>(D - 1)]));
    const int64_t column_of_i = coord[static_cast<size_t>(D - 1)];
    for (int64_t j0 = i; j0 < row_end; j0 += kBlock) {
      const int64_t j1 = std::min(row_end, j0 + kBlock);
      int64_t m = 0;
      for (int64_t j = j0; j < j1; ++j) {
        found[m] = j;
        m += static_cast<M>(p[j]) != M(0);
      }
      for (int64_t f = 0; f < m; ++f, out += D) {
        for (int64_t d = 0; d < D - 1; ++d) out[d] = coord[static_cast<size_t>(d)];
        out[D - 1] = column_of_i + (found[f] - i);
      }
    }
    i = row_end;
    coord[static_cast<size_t>(D - 1)] = 0;
    for (int64_t d = D - 2; d >= 0 && ++coord[static_cast<size_t>(d)] == sizes[d]; --d) coord[static_cast<size_t>(d)] = 0;
  }
}

void nonzero_cpu(const Tensor& out, const Tensor& x) {
  const int64_t n = x.numel(), D = x.dim();
  KILN_ASSERT(x.is_contiguous() && out.is_contiguous() && out.dtype() == kInt64 && D >= 1 && out.dim() == 2 &&
              out.size(1) == D);
  if (n == 0) return;
  const int64_t chunks = (n + kNonzeroChunk - 1) / kNonzeroChunk;
  std::vector<int64_t> start(static_cast<size_t>(chunks + 1), 0);
  const Shape sizes = x.sizes();
  visit_dtype(x.dtype(), "nonzero", [&]<typename T>() {
    const T* p = x.data_ptr<T>();
    parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        start[static_cast<size_t>(c + 1)] =
            count_nonzero_run(p + c * kNonzeroChunk, std::min(kNonzeroChunk, n - c * kNonzeroChunk));
    });
    for (size_t c = 0; c < static_cast<size_t>(chunks); ++c) start[c + 1] += start[c];
    KILN_CHECK(start.back() == out.size(0), "nonzero: the output holds ", out.size(0), " rows, but x has ",
               start.back(), " nonzero elements");
    int64_t* po = out.data_ptr<int64_t>();
    parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        nonzero_chunk(p, c * kNonzeroChunk, std::min(n, (c + 1) * kNonzeroChunk), sizes.data(), D,
                      po + start[static_cast<size_t>(c)] * D);
    });
  });
}

}  // namespace

namespace detail {
void register_indexing_cpu_kernels() {
  register_kernel<Op::index_select>(DeviceType::CPU, index_select_cpu);
  register_kernel<Op::gather>(DeviceType::CPU, gather_cpu);
  register_kernel<Op::scatter>(DeviceType::CPU, scatter_cpu);
  register_kernel<Op::scatter_add>(DeviceType::CPU, scatter_add_cpu);
  register_kernel<Op::index_add>(DeviceType::CPU, index_add_cpu);
  register_kernel<Op::nonzero>(DeviceType::CPU, nonzero_cpu);
}
}  // namespace detail
}  // namespace kiln
