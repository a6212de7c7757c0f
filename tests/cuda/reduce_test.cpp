// CUDA reductions and softmax against the CPU kernels on the same random inputs (a fresh seed each run, printed
// with every failure): every op on every dtype it takes; full reductions, each single dim, two non-adjacent
// dims, keepdim on and off; contiguous, transposed, strided and offset inputs; sizes 0, 1, 31, 32, 33, 1000
// and 2^20 + 3 (which takes the split, two-pass paths); NaN and infinities; softmax rows of -inf.
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace kiln {
namespace {

using test::Layout;
using test::kInf;
using test::kNan;

using test::fresh_seed;

// The same values in the same layout on the CPU and on the GPU: the base buffer is copied to the device whole,
// then both sides take the same view of it.
struct Pair {
  Tensor cpu, gpu;
};

// gen(n): the n values of the base buffer.
Pair make_pair(IntArrayRef shape, DType dtype, Layout layout, const std::function<std::vector<double>(int64_t)>& gen) {
  const Shape s = shape.vec();
  const int64_t n = shape_numel(s);
  Shape base_shape = s;
  const bool transposed = layout == Layout::Transposed && s.size() >= 2;
  const bool strided = layout == Layout::Strided && !s.empty();
  const bool offset = layout == Layout::Offset;
  if (transposed) std::swap(base_shape[s.size() - 1], base_shape[s.size() - 2]);
  if (strided) base_shape.back() *= 2;
  if (offset) base_shape = {n + 5};
  Tensor base = test::make_tensor(gen(shape_numel(base_shape)), base_shape, dtype);
  auto view = [&](const Tensor& b) {
    if (transposed) return b.transpose(-1, -2);
    if (strided) return b.slice(-1, 0, std::nullopt, 2);
    if (offset) return b.narrow(0, 5, n).view(s);
    return b;
  };
  return {view(base), view(base.to(Device::cuda()))};
}

// Random values in [lo, hi] (integers for the integer dtypes, see test::random_values); with `specials`, about
// one in `specials` floats becomes NaN, +inf or -inf.
std::function<std::vector<double>(int64_t)> random_gen(DType dtype, std::mt19937& rng, double lo, double hi,
                                                       int specials = 0) {
  return [&rng, dtype, lo, hi, specials](int64_t n) {
    std::vector<double> v = test::random_values(n, dtype, rng, lo, hi);
    if (specials > 0 && is_floating(dtype)) {
      std::uniform_int_distribution<int> pick(0, 3 * specials - 1);
      for (double& x : v) {
        int k = pick(rng);
        if (k < 3) x = k == 0 ? kNan : k == 1 ? kInf : -kInf;
      }
    }
    return v;
  };
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "{";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(dims[i]);  // (appending, not "," + string: GCC 12 warns falsely on that)
  }
  return s + "}";
}

// ---- the reductions of ReduceKernel / ReduceParamKernel ----

using ReduceFn = std::function<Tensor(const Tensor&, const std::vector<int64_t>&, bool)>;

struct ReduceCase {
  std::string name;
  ReduceFn fn;
  bool floating_only = false;
  bool needs_elements = false;  // undefined over zero elements (the frontend throws)
  double lo = -3, hi = 3;
  bool integer_values = false;  // values 0..3 in every dtype, so all/any see zeros
  bool integer_dtypes_only = false;
  // A sum of random signs cancels: its float32 partial sums are far larger than the result, and their
  // rounding (float32 on the GPU, double on the CPU) needs an absolute tolerance that grows with the count.
  bool cancels = false;
};

std::vector<ReduceCase> reduce_cases() {
  std::vector<ReduceCase> c;
  ReduceCase sum_c{"sum", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return sum(x, d, k); }};
  sum_c.cancels = true;
  c.push_back(sum_c);
  // An integer sum into the input's own dtype (the frontend's dtype argument), wrapping around there.
  ReduceCase same{"sum(dtype = input's)",
                  [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return sum(x, d, k, x.dtype()); }};
  same.integer_dtypes_only = true;
  c.push_back(same);
  c.push_back({"mean", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return mean(x, d, k); }, true});
  // Floats in [0.5, 1.5], so that float32 partial products neither overflow nor meet 0 * inf.
  c.push_back({"prod", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return prod(x, d, k); }, false,
               false, 0.5, 1.5});
  c.push_back({"amax", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return amax(x, d, k); }, false, true});
  c.push_back({"amin", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return amin(x, d, k); }, false, true});
  ReduceCase all_c{"all", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return all(x, d, k); }};
  all_c.integer_values = true;
  c.push_back(all_c);
  ReduceCase any_c{"any", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return any(x, d, k); }};
  any_c.integer_values = true;
  c.push_back(any_c);
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    c.push_back({"norm(p " + std::to_string(p) + ")",
                 [p](const Tensor& x, const std::vector<int64_t>& d, bool k) { return norm(x, p, d, k); }, true,
                 p < 0 || p == kInf});
  }
  for (double corr : {1.0, 0.0}) {
    c.push_back({"var(correction " + std::to_string(corr) + ")",
                 [corr](const Tensor& x, const std::vector<int64_t>& d, bool k) { return var(x, d, corr, k); }, true});
  }
  return c;
}

struct ShapeCase {
  Shape shape;
  std::vector<std::vector<int64_t>> dim_sets;  // {} is every dim
};

// Small shapes, in every layout.
const std::vector<ShapeCase>& small_shapes() {
  static const std::vector<ShapeCase> s = {
      {{}, {{}}},
      {{0}, {{}, {0}}},
      {{1}, {{}, {0}}},
      {{31}, {{}}},
      {{32}, {{0}}},
      {{33}, {{}}},
      {{1000}, {{0}}},
      {{5, 33, 7}, {{}, {0}, {1}, {-1}, {0, 2}, {0, 1}, {1, 2}}},
      {{3, 0, 4}, {{1}, {0}, {0, 2}}},
      {{2, 1, 33}, {{1}, {0, 1}, {2}, {0, 2}}},
      {{1000, 33}, {{0}, {1}}},
  };
  return s;
}

// Shapes large enough to split the reduced range across blocks, contiguous and transposed.
const std::vector<ShapeCase>& large_shapes() {
  static const std::vector<ShapeCase> s = {
      {{(1 << 20) + 3}, {{}}},
      {{4, 262147}, {{1}, {0}}},
      {{262147, 3}, {{0}, {1}}},
      {{2048, 513}, {{0}, {1}, {}}},
  };
  return s;
}

void check_reductions(const std::vector<ShapeCase>& shapes, std::initializer_list<Layout> layouts, int specials) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  const auto cases = reduce_cases();
  for (DType dtype : test::kAllDTypes) {
    if (specials > 0 && !is_floating(dtype)) continue;
    for (const ShapeCase& sc : shapes) {
      for (Layout layout : layouts) {
        // One input per kind of values, shared by the ops that take it.
        std::map<std::string, Pair> inputs;
        for (const ReduceCase& rc : cases) {
          if (rc.floating_only && !is_floating(dtype)) continue;
          if (rc.integer_dtypes_only && (is_floating(dtype) || dtype == kBool)) continue;
          const std::string kind = rc.integer_values ? "integer" : std::to_string(rc.lo) + "," + std::to_string(rc.hi);
          if (inputs.count(kind) == 0) {
            inputs[kind] = rc.integer_values
                               ? make_pair(sc.shape, dtype, layout,
                                           [&](int64_t n) { return test::random_values(n, kInt32, rng, 0, 1); })
                               : make_pair(sc.shape, dtype, layout, random_gen(dtype, rng, rc.lo, rc.hi, specials));
          }
          const Pair& x = inputs[kind];
          for (const auto& dims : sc.dim_sets) {
            int64_t count = 1;
            for (int64_t d = 0; d < x.cpu.dim(); ++d) {
              bool reduced = dims.empty();
              for (int64_t r : dims) reduced = reduced || (r + x.cpu.dim()) % x.cpu.dim() == d;
              if (reduced) count *= x.cpu.size(d);
            }
            if (rc.needs_elements && count == 0) continue;
            // NOTE: a long float32 product of values around 1 may underflow to 0 in a partial on the GPU but not
            // in the CPU's double, and 0 * inf is nan where the CPU gets inf.
            if (specials > 0 && rc.name == "prod" && count > 100) continue;
            for (bool keepdim : {false, true}) {
              std::string context = rc.name + " of " + shape_str(sc.shape) + " " + dtype_name(dtype) + " " +
                                    test::layout_name(layout) + " dims " + dims_str(dims) +
                                    (keepdim ? " keepdim" : "") + " (seed " + std::to_string(seed) + ")";
              Tensor want = rc.fn(x.cpu, dims, keepdim);
              Tensor got = rc.fn(x.gpu, dims, keepdim);
              double atol = 0;
              if (rc.cancels && is_floating(dtype))
                atol = 8 * (dtype == kFloat64 ? 1.1e-16 : 6e-8) * std::sqrt(static_cast<double>(count)) * 3;
              test::expect_matches_cpu(got, want, context, -1, atol);
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

class CudaReduce : public test::CudaTest {};

TEST_F(CudaReduce, EveryOpDtypeAndLayoutMatchesTheCpu) {
  check_reductions(small_shapes(), {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}, 0);
}

TEST_F(CudaReduce, LargeReductionsMatchTheCpu) {
  check_reductions(large_shapes(), {Layout::Contiguous, Layout::Transposed}, 0);
}

TEST_F(CudaReduce, NanAndInfinitiesPropagateAsOnTheCpu) {
  check_reductions(small_shapes(), {Layout::Contiguous, Layout::Transposed}, 8);
  check_reductions({{{(1 << 20) + 3}, {{}}}, {{2048, 513}, {{0}, {1}}}}, {Layout::Contiguous}, 1000);
}

TEST_F(CudaReduce, AllOfOnesAndAnyOfZeros) {
  for (DType dtype : test::kAllDTypes) {
    for (int64_t n : {1, 33, 1000, (1 << 20) + 3}) {
      Tensor ones_cpu = ones({n}, TensorOptions(dtype)), zeros_cpu = zeros({n}, TensorOptions(dtype));
      std::string context = std::string(dtype_name(dtype)) + " n " + std::to_string(n);
      test::expect_matches_cpu(all(ones_cpu.to(Device::cuda())), all(ones_cpu), "all of ones, " + context);
      test::expect_matches_cpu(any(zeros_cpu.to(Device::cuda())), any(zeros_cpu), "any of zeros, " + context);
      test::expect_matches_cpu(all(zeros_cpu.to(Device::cuda())), all(zeros_cpu), "all of zeros, " + context);
    }
  }
}

TEST_F(CudaReduce, SumIsTheSameBitsEveryRun) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (DType dtype : {kFloat32, kFloat16, kFloat64}) {
    Pair x = make_pair({(1 << 22) + 5}, dtype, Layout::Contiguous, random_gen(dtype, rng, -3, 3));
    std::vector<double> first = test::values(sum(x.gpu).cpu());
    for (int run = 0; run < 3; ++run)
      EXPECT_EQ(test::values(sum(x.gpu).cpu()), first) << dtype_name(dtype) << " (seed " << seed << ")";
  }
}

// ---- max / min along a dim, with the index ----

// Calls body(x, dim, where) for every dtype (floating ones only when there are specials), shape, layout and dim
// (-1 included) on fresh inputs with values in [lo, hi]; `where` names the case and the seed. Stops at the first
// failure.
template <typename Body>
void for_each_dim_case(const std::vector<ShapeCase>& shapes, std::initializer_list<Layout> layouts, int specials,
                       double lo, double hi, const Body& body) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (DType dtype : test::kAllDTypes) {
    if (specials > 0 && !is_floating(dtype)) continue;
    for (const ShapeCase& sc : shapes) {
      for (Layout layout : layouts) {
        Pair x = make_pair(sc.shape, dtype, layout, random_gen(dtype, rng, lo, hi, specials));
        for (int64_t dim = -1; dim < std::max<int64_t>(x.cpu.dim(), 1); ++dim) {
          const std::string where = shape_str(sc.shape) + " " + dtype_name(dtype) + " " + test::layout_name(layout) +
                                    " dim " + std::to_string(dim) + " (seed " + std::to_string(seed) + ")";
          body(x, dim, where);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// Few distinct values, so ties are common and the first index must win.
void check_extreme_dims(const std::vector<ShapeCase>& shapes, std::initializer_list<Layout> layouts, int specials) {
  for_each_dim_case(shapes, layouts, specials, -1, 1, [](const Pair& x, int64_t dim, const std::string& where) {
    if (x.cpu.dim() > 0 && x.cpu.size((dim + x.cpu.dim()) % x.cpu.dim()) == 0) return;
    for (bool is_max : {true, false}) {
      for (bool keepdim : {false, true}) {
        const std::string context = std::string(is_max ? "max" : "min") + (keepdim ? " keepdim" : "") + " of " + where;
        auto [want_v, want_i] = is_max ? max(x.cpu, dim, keepdim) : min(x.cpu, dim, keepdim);
        auto [got_v, got_i] = is_max ? max(x.gpu, dim, keepdim) : min(x.gpu, dim, keepdim);
        test::expect_matches_cpu(got_v, want_v, context + " values");
        test::expect_matches_cpu(got_i, want_i, context + " indices");
      }
    }
  });
}

TEST_F(CudaReduce, MaxMinDimValuesAndFirstIndexMatchTheCpu) {
  const std::vector<ShapeCase> shapes = {{{}, {}}, {{1}, {}}, {{31}, {}}, {{33}, {}}, {{1000}, {}}, {{5, 33, 7}, {}},
                                         {{3, 0, 4}, {}}, {{1000, 33}, {}}};
  check_extreme_dims(shapes, {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}, 0);
  check_extreme_dims({{{(1 << 20) + 3}, {}}, {{4, 262147}, {}}, {{2048, 513}, {}}},
                     {Layout::Contiguous, Layout::Transposed}, 0);
}

TEST_F(CudaReduce, MaxMinDimNanWinsAndTheFirstNanIsReported) {
  check_extreme_dims({{{33}, {}}, {{5, 33, 7}, {}}, {{1000, 33}, {}}}, {Layout::Contiguous, Layout::Transposed}, 8);
  check_extreme_dims({{{(1 << 20) + 3}, {}}, {{2048, 513}, {}}}, {Layout::Contiguous}, 1000);
}

// ---- cumsum and sort along a dim ----

// Both accumulate in float64 (int64) in the same order, and both sort stably with NaN last and -0.0 == 0.0: the
// GPU's results are the CPU's, to the bit.
void check_along_dims(const std::vector<ShapeCase>& shapes, std::initializer_list<Layout> layouts, int specials) {
  for_each_dim_case(shapes, layouts, specials, -2, 2, [](const Pair& x, int64_t dim, const std::string& where) {
    if (x.cpu.dtype() != kBool) test::expect_matches_cpu(cumsum(x.gpu, dim), cumsum(x.cpu, dim), "cumsum of " + where);
    for (bool descending : {false, true}) {
      auto [want_v, want_i] = sort(x.cpu, dim, descending);
      auto [got_v, got_i] = sort(x.gpu, dim, descending);
      test::expect_matches_cpu(got_v, want_v, "sort values of " + where);
      test::expect_matches_cpu(got_i, want_i, "sort indices of " + where);
    }
  });
}

TEST_F(CudaReduce, CumsumAndSortMatchTheCpuBitForBit) {
  const std::vector<ShapeCase> shapes = {{{}, {}}, {{1}, {}}, {{33}, {}}, {{5, 33, 7}, {}}, {{3, 0, 4}, {}},
                                         {{1000, 33}, {}}, {{2, 5000}, {}}};
  check_along_dims(shapes, {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset}, 0);
  check_along_dims({{{33}, {}}, {{300, 17}, {}}}, {Layout::Contiguous, Layout::Transposed}, 8);
  auto [v, i] = topk(tensor({1.0, 3.0, 2.0, 3.0}).to(Device::cuda()), 2);
  EXPECT_EQ(test::values(i.cpu()), (std::vector<double>{1, 3}));
  // Signed zeros are equal and keep their order; a NaN with its sign bit set still sorts last (the GPU's radix
  // sort sees canonical keys).
  for (DType d : test::kFloatDTypes) {
    Tensor z = tensor({0.0, -0.0, -NAN, 0.0, -0.0, NAN, -1.0}).to(d);
    for (bool descending : {false, true}) {
      test::expect_matches_cpu(sort(z.to(Device::cuda()), 0, descending).second, sort(z, 0, descending).second,
                               std::string("signed zeros and NaN, ") + dtype_name(d));
    }
  }
}

// unique and searchsorted are composites of sort, cumsum, scatter and index_add: on the GPU they must give the
// CPU's answers exactly (repeated values, ties, NaN).
TEST_F(CudaReduce, UniqueAndSearchsortedMatchTheCpu) {
  const Tensor x = round(randn({40, 25}) * 3);
  Tensor with_nan = x.clone();
  with_nan.view({-1}).narrow(0, 7, 3).fill_(NAN);
  for (const Tensor& t : {x, with_nan}) {
    const UniqueResult want = unique(t), got = unique(t.to(Device::cuda()));
    test::expect_matches_cpu(got.values, want.values, "unique values");
    test::expect_matches_cpu(got.inverse, want.inverse, "unique inverse");
    test::expect_matches_cpu(got.counts, want.counts, "unique counts");
  }
  const Tensor seq = std::get<0>(sort(round(randn({300}) * 4), 0));
  for (bool right : {false, true})
    test::expect_matches_cpu(searchsorted(seq.to(Device::cuda()), x.to(Device::cuda()), right),
                             searchsorted(seq, x, right), right ? "searchsorted right" : "searchsorted left");
}

// topk's first k in sort's order, equal keys in position order: k from 0 to the whole line, both directions.
// Values in [-1, 1]: the integer, bool and 16-bit dtypes tie often; float32 and float64 are run a second time
// rounded to halves, so that they tie too. Lines past 8192 elements and k past 16 take the sort (the kernel's
// other path).
void expect_topk_matches(const Tensor& cpu, const Tensor& gpu, int64_t dim, const std::string& where) {
  const int64_t n = cpu.dim() == 0 ? 1 : cpu.size((dim + cpu.dim()) % cpu.dim());
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, n - 1, n}) {
    if (k < 0 || k > n) continue;
    for (bool largest : {true, false}) {
      const std::string context = "topk k " + std::to_string(k) + (largest ? " largest" : " smallest") + " of " + where;
      auto [want_v, want_i] = topk(cpu, k, dim, largest);
      auto [got_v, got_i] = topk(gpu, k, dim, largest);
      test::expect_matches_cpu(got_v, want_v, context + " values");
      test::expect_matches_cpu(got_i, want_i, context + " indices");
      if (::testing::Test::HasFailure()) return;
    }
  }
}

void check_topk(const std::vector<ShapeCase>& shapes, std::initializer_list<Layout> layouts, int specials) {
  for_each_dim_case(shapes, layouts, specials, -1, 1, [](const Pair& x, int64_t dim, const std::string& where) {
    expect_topk_matches(x.cpu, x.gpu, dim, where);
    if (x.cpu.dtype() == kFloat32 || x.cpu.dtype() == kFloat64) {
      const Tensor halves = round(x.cpu * 2) / 2;
      expect_topk_matches(halves, halves.to(Device::cuda()), dim, where + ", rounded to halves");
    }
  });
}

TEST_F(CudaReduce, TopkMatchesTheCpuBitForBit) {
  check_topk({{{}, {}}, {{1}, {}}, {{33}, {}}, {{5, 33, 7}, {}}, {{3, 0, 4}, {}}, {{1000, 40}, {}}, {{2, 9000}, {}}},
             {Layout::Contiguous, Layout::Transposed, Layout::Strided}, 0);
  check_topk({{{33}, {}}, {{300, 17}, {}}}, {Layout::Contiguous, Layout::Transposed}, 8);
  // Signed zeros are equal and keep their order; NaN (either sign) is above every number.
  for (DType d : test::kFloatDTypes) {
    const Tensor z = tensor({0.0, -0.0, -NAN, 0.0, -0.0, NAN, -1.0, 1.0, -0.0}).to(d);
    for (int64_t k = 1; k <= z.numel(); ++k)
      for (bool largest : {true, false}) {
        const std::string what = "topk k " + std::to_string(k) + (largest ? " largest" : " smallest") +
                                 " of signed zeros and NaNs, " + dtype_name(d);
        auto [want_v, want_i] = topk(z, k, 0, largest);
        auto [got_v, got_i] = topk(z.to(Device::cuda()), k, 0, largest);
        test::expect_matches_cpu(got_i, want_i, what + ": indices");
        test::expect_matches_cpu(got_v, want_v, what + ": values");
      }
  }
}

// ---- softmax, log_softmax ----

void check_softmax(IntArrayRef shape, Layout layout, DType dtype, std::mt19937& rng, uint32_t seed, int specials,
                   double lo = -10, double hi = 10) {
  Pair x = make_pair(shape, dtype, layout, random_gen(dtype, rng, lo, hi, specials));
  for (int64_t dim : {int64_t{0}, int64_t{1}, int64_t{-1}}) {
    if (dim >= static_cast<int64_t>(shape.size())) continue;
    for (bool log : {false, true}) {
      std::string context = std::string(log ? "log_softmax" : "softmax") + " of " + shape_str(shape.vec()) + " " +
                            dtype_name(dtype) + " " + test::layout_name(layout) + " dim " + std::to_string(dim) +
                            " (seed " + std::to_string(seed) + ")";
      Tensor want = log ? log_softmax(x.cpu, dim) : softmax(x.cpu, dim);
      Tensor got = log ? log_softmax(x.gpu, dim) : softmax(x.gpu, dim);
      test::expect_matches_cpu(got, want, context);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST_F(CudaReduce, SoftmaxAlongEveryDimMatchesTheCpu) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  const std::vector<Shape> shapes = {{1}, {31}, {1000}, {5, 33, 7}, {33, 1000}, {7, 2000}, {3, 0, 4}, {1000, 33}};
  for (DType dtype : test::kFloatDTypes) {
    for (const Shape& s : shapes)
      for (Layout layout : test::kLayouts) check_softmax(s, layout, dtype, rng, seed, 0);
    check_softmax({3, (1 << 20) + 3}, Layout::Contiguous, dtype, rng, seed, 0);
    check_softmax({(1 << 16) + 3, 16}, Layout::Transposed, dtype, rng, seed, 0);
  }
}

TEST_F(CudaReduce, SoftmaxOfNanInfinityAndRowsOfMinusInfinity) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (DType dtype : test::kFloatDTypes) {
    for (const Shape& s : std::vector<Shape>{{33, 1000}, {7, 2000}, {5, 33, 7}})
      check_softmax(s, Layout::Contiguous, dtype, rng, seed, 300);
    // Row 1 (and column 1) all -inf, the rest finite.
    for (int64_t dim : {0, 1}) {
      Tensor c = test::random_tensor({40, 3000}, dtype, rng, Layout::Contiguous, -5, 5);
      if (dim == 1) c.narrow(0, 1, 1).fill_(-kInf);
      else c.narrow(1, 1, 1).fill_(-kInf);
      Tensor g = c.to(Device::cuda());
      std::string context = std::string(dtype_name(dtype)) + " -inf line, dim " + std::to_string(dim);
      test::expect_matches_cpu(softmax(g, dim), softmax(c, dim), "softmax, " + context);
      test::expect_matches_cpu(log_softmax(g, dim), log_softmax(c, dim), "log_softmax, " + context);
    }
  }
}

// The order statistics are composites of sort, gather and reductions: on the GPU they must give the CPU's
// values and indices, NaN lines included.
TEST_F(CudaReduce, QuantileAndMedianMatchTheCpu) {
  std::mt19937 rng(test::fresh_seed());
  Tensor c = test::random_tensor({6, 300}, kFloat32, rng, Layout::Contiguous, -5, 5);
  c.narrow(0, 1, 1).narrow(1, 7, 1).fill_(NAN);
  c.narrow(0, 4, 1).fill_(NAN);
  const Tensor g = c.to(Device::cuda());
  const Tensor q = tensor(std::vector<float>{0.1f, 0.5f, 0.95f}, {3}, kFloat32);
  for (const char* how : {"linear", "nearest", "midpoint"}) {
    test::expect_matches_cpu(quantile(g, q.to(Device::cuda()), 1, false, how), quantile(c, q, 1, false, how),
                             std::string("quantile ") + how);
    test::expect_matches_cpu(nanquantile(g, q.to(Device::cuda()), 1, false, how), nanquantile(c, q, 1, false, how),
                             std::string("nanquantile ") + how);
  }
  for (bool skip : {false, true}) {
    auto [gv, gi] = skip ? nanmedian(g, 1) : median(g, 1);
    auto [cv, ci] = skip ? nanmedian(c, 1) : median(c, 1);
    test::expect_matches_cpu(gv, cv, skip ? "nanmedian" : "median");
    test::expect_matches_cpu(gi, ci, skip ? "nanmedian indices" : "median indices");
  }
  test::expect_matches_cpu(nanmean(g, {1}), nanmean(c, {1}), "nanmean");
}

}  // namespace
}  // namespace kiln
