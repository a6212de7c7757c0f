// Helpers shared by the data-movement tests (indexing_test.cpp, shape_ops_test.cpp).
#pragma once

#include <algorithm>
#include <numeric>
#include <string>

#include "test_util.h"

namespace kiln::test {

// Coordinates of row-major position `flat` in `shape` (no zero sizes), and back.
inline Shape unravel(int64_t flat, const Shape& shape) {
  Shape c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = flat % shape[d];
    flat /= shape[d];
  }
  return c;
}
inline int64_t ravel(const Shape& c, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + c[d];
  return flat;
}

inline std::string what(DType dtype, Layout layout, const std::string& extra = "") {
  return std::string(dtype_name(dtype)) + ", " + test::layout_name(layout) + (extra.empty() ? "" : ", " + extra);
}

// A tensor holding `vals` (row-major) in the memory layout test::random_tensor gives `layout`.
inline Tensor with_layout(const std::vector<double>& vals, const Shape& shape, DType dtype, Layout layout,
                   std::mt19937& rng) {
  Tensor t = test::random_tensor(shape, dtype, rng, layout);
  t.copy_(test::make_tensor(vals, shape, dtype));
  return t;
}

inline std::vector<double> random_indices(int64_t count, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  std::vector<double> v(static_cast<size_t>(count));
  for (auto& x : v) x = static_cast<double>(pick(rng));
  return v;
}

// Small integers every dtype holds exactly (0/1 for bool, 0..20 for uint8, -9..9 otherwise).
inline Tensor small_ints(const Shape& shape, DType dtype, std::mt19937& rng, Layout layout = Layout::Contiguous) {
  auto v = test::random_values(shape_numel(shape), is_floating(dtype) ? kInt32 : dtype, rng);
  return with_layout(v, shape, dtype, layout, rng);
}

// What a double becomes when stored in `dtype` (the tests keep integer values in range).
inline double in_dtype(double v, DType dtype) { return dtype == kBool ? (v != 0 ? 1 : 0) : v; }

const DType kIndexDTypes[] = {kInt64, kInt32};

// Runs body(dtype, layout, dim, d) for every dtype, layout and each dim of a 3-D tensor in `dims` (d is dim
// wrapped to [0, 3)), tracing which case failed.
template <typename F>
void for_each_case(std::initializer_list<int64_t> dims, const F& body) {
  for (DType dtype : test::kAllDTypes)
    for (Layout layout : test::kLayouts)
      for (int64_t dim : dims) {
        SCOPED_TRACE(what(dtype, layout, "dim " + std::to_string(dim)));
        body(dtype, layout, dim, dim < 0 ? dim + 3 : dim);
      }
}

}  // namespace kiln::test
