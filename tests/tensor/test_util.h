// Test helpers: random inputs in every layout, an element reader that does not use kiln's kernels, and
// comparison against float64 references with per-dtype tolerances.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kiln::test {

// Shared by the suites, which take them with a using-declaration (the files of a unity batch share one
// anonymous namespace, so each defining its own would clash).
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Reads element `flat` (row-major position) of t straight from memory through its strides and offset.
inline double element(const Tensor& t, int64_t flat) {
  int64_t off = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t i = flat % t.size(d);
    flat /= t.size(d);
    off += i * t.stride(d);
  }
  const char* base = static_cast<const char*>(t.storage()->data()) + off * static_cast<int64_t>(t.element_size());
  return visit_dtype(t.dtype(), "element", [&]<typename T>() -> double {
    return static_cast<double>(static_cast<opmath_t<T>>(*reinterpret_cast<const T*>(base)));
  });
}

// All elements in row-major order as doubles (CPU tensors only), read as element() reads one, but walking the
// strides once instead of dividing each position by every size (through Tensor::size, which checks its dim):
// the suites read millions of elements, and under the sanitizers kiln_tensor_tests took 110 s with the
// division, 21 s with the walk (and reduce_test.cpp's grouping reading the sizes once), both at -O1.
inline std::vector<double> values(const Tensor& t) {
  EXPECT_TRUE(t.device().is_cpu());
  const int64_t n = t.numel();
  std::vector<double> v(static_cast<size_t>(n));
  if (n == 0) return v;
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  const int64_t nd = t.dim();
  visit_dtype(t.dtype(), "values", [&]<typename T>() {
    const T* base = reinterpret_cast<const T*>(t.storage()->data()) + t.storage_offset();
    std::vector<int64_t> index(static_cast<size_t>(nd), 0);
    int64_t off = 0;
    for (int64_t i = 0; i < n; ++i) {
      v[static_cast<size_t>(i)] = static_cast<double>(static_cast<opmath_t<T>>(base[off]));
      for (int64_t d = nd - 1; d >= 0; --d) {  // the next position: the last dim first, carrying over
        off += strides[d];
        if (++index[d] < sizes[d]) break;
        off -= strides[d] * sizes[d];
        index[d] = 0;
      }
    }
  });
  return v;
}

// Values representable in every dtype tested (exactly so in the 16-bit floats for small integers).
inline std::vector<double> random_values(int64_t n, DType dtype, std::mt19937& rng, double lo = -3, double hi = 3) {
  std::vector<double> v(static_cast<size_t>(n));
  if (dtype == kBool) {
    std::bernoulli_distribution b(0.5);
    for (auto& x : v) x = b(rng);
  } else if (!is_floating(dtype)) {
    std::uniform_int_distribution<int> d(dtype == kUInt8 ? 0 : static_cast<int>(lo) * 3,
                                         dtype == kUInt8 ? 20 : static_cast<int>(hi) * 3);
    for (auto& x : v) x = d(rng);
  } else {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = d(rng);
  }
  return v;
}

// A tensor of `dtype` holding `vals` (row-major) in a contiguous buffer.
inline Tensor make_tensor(const std::vector<double>& vals, IntArrayRef shape, DType dtype) {
  Tensor t = tensor(vals, shape.empty() && vals.size() == 1 ? IntArrayRef{} : shape).to(dtype);
  if (shape.empty()) t = t.reshape({});
  return t;
}

enum class Layout { Contiguous, Transposed, Strided, Offset };
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Strided: return "strided";
    default: return "offset";
  }
}
inline constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset};

// A random tensor of `shape` whose memory layout is `layout`: a transposed view (last two dims swapped in
// memory), every other element of a bigger buffer along the last dim, or a view starting mid-storage.
inline Tensor random_tensor(IntArrayRef shape, DType dtype, std::mt19937& rng, Layout layout = Layout::Contiguous,
                            double lo = -3, double hi = 3) {
  Shape s = shape.vec();
  int64_t n = shape_numel(s);
  if (layout == Layout::Transposed && s.size() >= 2) {
    Shape swapped = s;
    std::swap(swapped[s.size() - 1], swapped[s.size() - 2]);
    return make_tensor(random_values(n, dtype, rng, lo, hi), swapped, dtype).transpose(-1, -2);
  }
  if (layout == Layout::Strided && !s.empty()) {
    Shape wide = s;
    wide.back() *= 2;
    return make_tensor(random_values(shape_numel(wide), dtype, rng, lo, hi), wide, dtype).slice(-1, 0, std::nullopt, 2);
  }
  if (layout == Layout::Offset) {
    Tensor flat = make_tensor(random_values(n + 5, dtype, rng, lo, hi), {n + 5}, dtype);
    return flat.narrow(0, 5, n).view(s);
  }
  return make_tensor(random_values(n, dtype, rng, lo, hi), s, dtype);
}

// Relative and absolute tolerance for results stored in `dtype` (rounding of the result dominates).
inline double tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64: return 1e-12;
    case kFloat32: return 1e-5;
    case kFloat16: return 2e-3;
    case kBFloat16: return 1.6e-2;
    default: return 0;
  }
}

// Checks actual's shape, dtype and every value against `expected` (row-major), within rtol/atol.
inline void expect_tensor_near(const Tensor& actual, const std::vector<double>& expected, IntArrayRef shape,
                               double rtol, double atol, const std::string& what = "") {
  ASSERT_EQ(actual.sizes(), shape.vec()) << what;
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  const std::vector<double> a = values(actual.cpu());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double got = a[i], want = expected[i];
    bool ok = (std::isnan(want) && std::isnan(got)) || got == want ||
              std::fabs(got - want) <= atol + rtol * std::fabs(want);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected " << want;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements differ";
}

inline void expect_tensor_near(const Tensor& actual, const std::vector<double>& expected, IntArrayRef shape,
                               const std::string& what = "") {
  double tol = tolerance(actual.dtype());
  expect_tensor_near(actual, expected, shape, tol, tol, what);
}

// Runs `body` and checks it throws kiln::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& body, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "expected kiln::Error containing \"" << *parts.begin() << "\", nothing was thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message \"" << msg << "\" lacks \"" << p << "\"";
  }
}

inline constexpr DType kFloatDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};
inline constexpr DType kAllDTypes[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

}  // namespace kiln::test
