// CPU kernels of the reductions: sum, mean, prod, amax, amin, all, any, norm, var, and max/min along a dim with
// the index of the first extreme.
//
// Each op is a small policy (how to fold elements into an accumulator, how to combine two accumulators)
// handed to reduce_loop (reduce_loops_cpu.h), which owns the memory order, the chunking and the threads.
// Floating inputs accumulate in double, integers and bools in int64: a float32 sum of 16M elements is then
// exact to float32 rounding, and its order of additions does not matter at float32 precision.
// Contiguous runs fold into many independent lanes (kLanes partial sums in an array) so GCC vectorizes them
// and overlaps the latency of dependent adds without -ffast-math; the lanes are added pairwise in a fixed
// order, so results stay reproducible. The naive float64 references they are tested against live in
// tests/tensor/reduce_test.cpp.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/reduce_loops_cpu.h"
#include "kiln/tensor/ops/register.h"

namespace kiln {
namespace {

// The accumulator of sums and products: double for floats, int64 for integers and bools.
template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

template <typename A, typename T>
KILN_INLINE A to_acc(T v) {
  return static_cast<A>(static_cast<opmath_t<T>>(v));
}

// Rounds an accumulator once into the output type (double -> float -> half would round twice, but the
// second rounding only matters on exact ties, which a sum of halves essentially never hits).
template <typename Out, typename A>
KILN_INLINE Out from_acc(A a) {
  if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) return Out(static_cast<float>(a));
  else return static_cast<Out>(a);
}

template <typename V>
KILN_INLINE bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) return v != v;
  else return false;
}

// fold(p[0 .. n) with stride) = op(...op(op(init, f(p[0])), f(p[1]))...), reassociated into kLanes lanes.
// With stride 1 the inner loop is unit-stride and GCC turns the lanes into vector registers.
template <int kLanes, typename A, typename T, typename F, typename Op>
KILN_INLINE A fold_lanes(const T* p, int64_t n, int64_t stride, A init, const F& f, const Op& op) {
  if (n < 2 * kLanes) {
    A acc = init;
    for (int64_t i = 0; i < n; ++i) acc = op(acc, f(p[i * stride]));
    return acc;
  }
  A lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[j] = f(p[j * stride]);
  int64_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] = op(lanes[j], f(p[(i + j) * stride]));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] = op(lanes[j], lanes[j + w]);
  A acc = op(init, lanes[0]);
  for (; i < n; ++i) acc = op(acc, f(p[i * stride]));
  return acc;
}

template <typename A, typename T, typename F, typename Op>
KILN_INLINE A fold(const T* p, int64_t n, int64_t stride, A init, const F& f, const Op& op) {
  if (stride == 1) return fold_lanes<32>(p, n, 1, init, f, op);
  return fold_lanes<8>(p, n, stride, init, f, op);
}

// Integer sums and products wrap around on overflow, as in PyTorch: computed in unsigned arithmetic, where
// wrapping is defined (signed overflow is undefined behaviour, which the optimizer may exploit).
struct Plus {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    else return a + b;
  }
};
struct Times {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else return a * b;
  }
};
// max/min that let a NaN through, as PyTorch's amax does.
struct NanMax {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const { return (b > a || is_nan(b)) && !is_nan(a) ? b : a; }
};
struct NanMin {
  template <typename A>
  KILN_INLINE A operator()(A a, A b) const { return (b < a || is_nan(b)) && !is_nan(a) ? b : a; }
};

// Policies in the form reduce_loop wants: Acc, identity, run, column, combine. `Map` turns an element into
// the accumulator's domain (identity for sums, |x|^2 for the 2-norm, ...), `Op` folds.
template <typename T, typename A, typename Map, typename Op>
struct FoldOps {
  using Acc = A;
  A init;
  Map map;
  Op op;
  A identity() const { return init; }
  A run(const T* p, int64_t n, int64_t stride, int64_t) const { return fold(p, n, stride, init, map, op); }
  // Four rows at a time, so each accumulator is loaded and stored once per four elements.
  void column(A* acc, const T* p, int64_t n, int64_t stride, int64_t rows, int64_t row_stride, int64_t) const {
    int64_t i = 0;
    for (; i + 4 <= rows; i += 4) {
      const T *p0 = p + i * row_stride, *p1 = p0 + row_stride, *p2 = p1 + row_stride, *p3 = p2 + row_stride;
      if (stride == 1) {
        for (int64_t j = 0; j < n; ++j) acc[j] = op(acc[j], op(op(map(p0[j]), map(p1[j])), op(map(p2[j]), map(p3[j]))));
      } else {
        for (int64_t j = 0; j < n; ++j) {
          int64_t k = j * stride;
          acc[j] = op(acc[j], op(op(map(p0[k]), map(p1[k])), op(map(p2[k]), map(p3[k]))));
        }
      }
    }
    for (; i < rows; ++i) {
      const T* q = p + i * row_stride;
      if (stride == 1) {
        for (int64_t j = 0; j < n; ++j) acc[j] = op(acc[j], map(q[j]));
      } else {
        for (int64_t j = 0; j < n; ++j) acc[j] = op(acc[j], map(q[j * stride]));
      }
    }
  }
  A combine(A a, A b) const { return op(a, b); }
};

template <typename T, typename A, typename Map, typename Op>
FoldOps<T, A, Map, Op> fold_ops(A init, Map map, Op op) {
  return {init, map, op};
}

template <typename A>
struct ToAcc {
  template <typename T>
  KILN_INLINE A operator()(T v) const { return to_acc<A>(v); }
};

// Reduces x into out with `ops`; out[i] = convert(acc, count) for the Out type the caller picked.
template <typename T, typename Out, typename Ops, typename Convert>
void reduce_into(const Tensor& out, const Tensor& x, IntArrayRef dims, const Ops& ops, const Convert& convert) {
  cpu::ReducePlan plan = cpu::plan_reduction(x, dims, out);
  const int64_t count = plan.red_numel;
  Out* o = static_cast<Out*>(out.raw_data_ptr());
  cpu::reduce_loop(plan, static_cast<const T*>(x.raw_data_ptr()), ops,
                   [&](const typename Ops::Acc& acc, int64_t off, int64_t) { o[off] = convert(acc, count); });
}

// Calls f.template operator()<T, Out>() for x's dtype T and out's dtype Out: either out has x's dtype, or x is
// an integer or bool tensor whose sum/prod the frontend asked for in int64.
template <uint32_t Set, typename F>
void visit_in_out(const char* op, const Tensor& out, const Tensor& x, F&& f) {
  visit_dtype<Set>(x.dtype(), op, [&]<typename T>() {
    if (out.dtype() == x.dtype()) {
      f.template operator()<T, T>();
    } else {
      KILN_CHECK(out.dtype() == kInt64 && !is_floating(x.dtype()), op, ": the CPU kernel writes the result for a ",
                 x.dtype(), " input as ", x.dtype(), " (or as int64 for integer and bool inputs), not as ", out.dtype());
      if constexpr (!std::is_floating_point_v<opmath_t<T>>) f.template operator()<T, int64_t>();
    }
  });
}

// ---- sum, mean, prod ----

// out: x's shape with size 1 along dims (the frontend's keepdim shape); same for every kernel below.
void sum_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_in_out<kAllSet>("sum", out, x, [&]<typename T, typename Out>() {
    using A = acc_t<T>;
    reduce_into<T, Out>(out, x, dims, fold_ops<T>(A(0), ToAcc<A>{}, Plus{}),
                        [](A acc, int64_t) { return from_acc<Out>(acc); });
  });
}

void mean_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype<kFloatingSet>(x.dtype(), "mean", [&]<typename T>() {
    // NOTE: an empty mean is 0 / 0 = nan, as in PyTorch.
    reduce_into<T, T>(out, x, dims, fold_ops<T>(0.0, ToAcc<double>{}, Plus{}),
                      [](double acc, int64_t n) { return from_acc<T>(acc / static_cast<double>(n)); });
  });
}

void prod_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_in_out<kAllSet>("prod", out, x, [&]<typename T, typename Out>() {
    using A = acc_t<T>;
    reduce_into<T, Out>(out, x, dims, fold_ops<T>(A(1), ToAcc<A>{}, Times{}),
                        [](A acc, int64_t) { return from_acc<Out>(acc); });
  });
}

// ---- amax, amin, all, any ----

// The type extremes are compared in: float for the 16-bit floats, the type itself otherwise (uint8_t for
// bool, because reduce_loop keeps accumulators in std::vector).
template <typename T>
using cmp_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, opmath_t<T>>;

template <typename T, bool kMax>
cmp_t<T> extreme_identity() {
  using C = cmp_t<T>;
  if constexpr (std::is_floating_point_v<C>) return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  else return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
}

template <bool kMax>
void extreme_cpu(const char* name, const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype(x.dtype(), name, [&]<typename T>() {
    using C = cmp_t<T>;
    auto convert = [](C acc, int64_t) { return static_cast<T>(acc); };
    if constexpr (kMax) reduce_into<T, T>(out, x, dims, fold_ops<T>(extreme_identity<T, true>(), ToAcc<C>{}, NanMax{}), convert);
    else reduce_into<T, T>(out, x, dims, fold_ops<T>(extreme_identity<T, false>(), ToAcc<C>{}, NanMin{}), convert);
  });
}
void amax_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) { extreme_cpu<true>("amax", out, x, dims); }
void amin_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) { extreme_cpu<false>("amin", out, x, dims); }

// out: bool. A NaN is nonzero, hence true, as in PyTorch.
template <bool kAll>
void all_any_cpu(const char* name, const Tensor& out, const Tensor& x, IntArrayRef dims) {
  visit_dtype(x.dtype(), name, [&]<typename T>() {
    auto truth = [](T v) -> uint8_t { return static_cast<opmath_t<T>>(v) != opmath_t<T>(0); };
    auto op = [](uint8_t a, uint8_t b) -> uint8_t { return kAll ? (a & b) : (a | b); };
    reduce_into<T, bool>(out, x, dims, fold_ops<T>(uint8_t{kAll}, truth, op),
                         [](uint8_t acc, int64_t) { return acc != 0; });
  });
}
void all_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) { all_any_cpu<true>("all", out, x, dims); }
void any_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims) { all_any_cpu<false>("any", out, x, dims); }

// ---- norm ----

// p = 2: sqrt(sum x^2); 1: sum |x|; inf / -inf: max / min |x|; 0: the count of nonzeros; else (sum |x|^p)^(1/p).
// x is floating (the frontend checks).
void norm_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims, double p) {
  visit_dtype<kFloatingSet>(x.dtype(), "norm", [&]<typename T>() {
    auto as_is = [](double acc, int64_t) { return from_acc<T>(acc); };
    auto abs = [](T v) { return std::fabs(to_acc<double>(v)); };
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (p == 2) {
      auto square = [](T v) { double d = to_acc<double>(v); return d * d; };
      reduce_into<T, T>(out, x, dims, fold_ops<T>(0.0, square, Plus{}),
                        [](double acc, int64_t) { return from_acc<T>(std::sqrt(acc)); });
    } else if (p == 1) {
      reduce_into<T, T>(out, x, dims, fold_ops<T>(0.0, abs, Plus{}), as_is);
    } else if (p == kInf) {
      reduce_into<T, T>(out, x, dims, fold_ops<T>(0.0, abs, NanMax{}), as_is);
    } else if (p == -kInf) {
      reduce_into<T, T>(out, x, dims, fold_ops<T>(kInf, abs, NanMin{}), as_is);
    } else if (p == 0) {
      auto nonzero = [](T v) { return to_acc<double>(v) != 0.0 ? 1.0 : 0.0; };
      reduce_into<T, T>(out, x, dims, fold_ops<T>(0.0, nonzero, Plus{}), as_is);
    } else {
      auto power = [p](T v) { return std::pow(std::fabs(to_acc<double>(v)), p); };
      reduce_into<T, T>(out, x, dims, fold_ops<T>(0.0, power, Plus{}),
                        [p](double acc, int64_t) { return from_acc<T>(std::pow(acc, 1.0 / p)); });
    }
  });
}

// ---- var ----

// Count, mean and sum of squared deviations (M2) of a piece of the data.
struct Moments {
  double n = 0, mean = 0, m2 = 0;
};

// Runs are done in two passes (mean, then squared deviations from it), which is accurate and vectorizes;
// pieces merge with Chan et al.'s formula; columns update one element at a time (Welford).
template <typename T>
struct VarOps {
  using Acc = Moments;
  Moments identity() const { return {}; }
  Moments run(const T* p, int64_t n, int64_t stride, int64_t) const {
    double mean = fold(p, n, stride, 0.0, ToAcc<double>{}, Plus{}) / static_cast<double>(n);
    auto dev2 = [mean](T v) { double d = to_acc<double>(v) - mean; return d * d; };
    return {static_cast<double>(n), mean, fold(p, n, stride, 0.0, dev2, Plus{})};
  }
  void column(Moments* acc, const T* p, int64_t n, int64_t stride, int64_t rows, int64_t row_stride, int64_t) const {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        Moments& m = acc[j];
        double v = to_acc<double>(p[i * row_stride + j * stride]);
        m.n += 1;
        double d = v - m.mean;
        m.mean += d / m.n;
        m.m2 += d * (v - m.mean);
      }
    }
  }
  Moments combine(const Moments& a, const Moments& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    double n = a.n + b.n, d = b.mean - a.mean;
    return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};
  }
};

// param: the correction (1 for Bessel's). M2 / max(0, N - correction), so N <= correction gives inf or nan.
void var_cpu(const Tensor& out, const Tensor& x, IntArrayRef dims, double correction) {
  visit_dtype<kFloatingSet>(x.dtype(), "var", [&]<typename T>() {
    reduce_into<T, T>(out, x, dims, VarOps<T>{}, [correction](const Moments& m, int64_t n) {
      return from_acc<T>(m.m2 / std::max(0.0, static_cast<double>(n) - correction));
    });
  });
}

// ---- max / min along a dim, with the index ----

template <typename C>
struct ValueIndex {
  C value{};
  int64_t index = -1;  // -1: nothing seen yet
};

// The first extreme wins ties; a NaN beats everything and the first NaN stays (PyTorch's max).
template <typename T, bool kMax>
struct ArgOps {
  using C = cmp_t<T>;
  using Acc = ValueIndex<C>;
  static KILN_INLINE bool better(C v, C best) {
    if (is_nan(best)) return false;
    return kMax ? (v > best || is_nan(v)) : (v < best || is_nan(v));
  }
  Acc identity() const { return {}; }
  Acc run(const T* p, int64_t n, int64_t stride, int64_t r) const {
    Acc best{to_acc<C>(p[0]), r};
    for (int64_t i = 1; i < n; ++i) {
      C v = to_acc<C>(p[i * stride]);
      if (better(v, best.value)) best = {v, r + i};
    }
    return best;
  }
  void column(Acc* acc, const T* p, int64_t n, int64_t stride, int64_t rows, int64_t row_stride, int64_t r) const {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        C v = to_acc<C>(p[i * row_stride + j * stride]);
        if (acc[j].index < 0 || better(v, acc[j].value)) acc[j] = {v, r + i};
      }
    }
  }
  Acc combine(const Acc& a, const Acc& b) const {
    if (b.index < 0) return a;
    if (a.index < 0 || better(b.value, a.value)) return b;
    return a;
  }
};

// values: x's shape with size 1 along dim (x's dtype); indices: the same shape, int64.
template <bool kMax>
void extreme_dim_cpu(const char* name, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  KILN_CHECK(x.size(dim) > 0, name, ": cannot reduce dim ", dim, " of size 0 (shape ", shape_str(x.sizes()), ")");
  KILN_ASSERT(indices.dtype() == kInt64 && values.dtype() == x.dtype());
  visit_dtype(x.dtype(), name, [&]<typename T>() {
    cpu::ReducePlan plan = cpu::plan_reduction(x, IntArrayRef(dim), values, &indices);
    T* v = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
    cpu::reduce_loop(plan, static_cast<const T*>(x.raw_data_ptr()), ArgOps<T, kMax>{},
                     [&](const ValueIndex<cmp_t<T>>& acc, int64_t v_off, int64_t i_off) {
                       v[v_off] = static_cast<T>(acc.value);
                       idx[i_off] = acc.index;
                     });
  });
}
void max_dim_cpu(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  extreme_dim_cpu<true>("max", values, indices, x, dim);
}
void min_dim_cpu(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  extreme_dim_cpu<false>("min", values, indices, x, dim);
}

}  // namespace

namespace detail {
void register_reduce_cpu_kernels() {
#define KILN_REGISTER(op) register_kernel<Op::op>(DeviceType::CPU, op##_cpu);
  KILN_REGISTER(sum)
  KILN_REGISTER(mean)
  KILN_REGISTER(prod)
  KILN_REGISTER(amax)
  KILN_REGISTER(amin)
  KILN_REGISTER(all)
  KILN_REGISTER(any)
  KILN_REGISTER(norm)
  KILN_REGISTER(var)
  KILN_REGISTER(max_dim)
  KILN_REGISTER(min_dim)
#undef KILN_REGISTER
}
}  // namespace detail
}  // namespace kiln
