// Tests of index_select, gather, scatter, scatter_add, index_add, nonzero and masked_select (indexing.h). Each
// naive loop over coordinates written here, on values read straight from memory (test::values), for random
// inputs in every layout and dtype, with zero-size and one-element cases, and the errors a user sees. Sums
// (scatter_add, index_add) use small integer values, so every dtype holds them exactly and the comparison
// can be exact.
#include "indexing_test_util.h"

namespace kiln {
namespace {

using namespace kiln::test;
using test::Layout;
using test::values;

// ---- index_select ----

TEST(IndexSelect, MatchesReferenceInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(1);
  const Shape shape{3, 4, 5};
  int round = 0;
  for_each_case({0, 1, 2, -1, -3}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Tensor x = test::random_tensor(shape, dtype, rng, layout);
    Tensor index = with_layout(random_indices(7, shape[d], rng), {7}, kIndexDTypes[round++ % 2], layout, rng);
    Shape out_shape = shape;
    out_shape[d] = 7;
    auto xv = values(x), iv = values(index);
    std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
    for (size_t f = 0; f < want.size(); ++f) {
      Shape c = unravel(static_cast<int64_t>(f), out_shape);
      c[d] = static_cast<int64_t>(iv[c[d]]);
      want[f] = xv[ravel(c, shape)];
    }
    Tensor out = index_select(x, dim, index);
    EXPECT_EQ(out.dtype(), dtype);
    test::expect_tensor_near(out, want, out_shape);
  });
}

TEST(IndexSelect, LargeInputMatchesReference) {
  // Enough elements to be split across threads, gathering rows and (transposed) columns.
  std::mt19937 rng(2);
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    Tensor x = test::random_tensor({300, 64}, kFloat32, rng, layout);
    Tensor index = with_layout(random_indices(1000, 300, rng), {1000}, kInt64, Layout::Contiguous, rng);
    auto xv = values(x), iv = values(index);
    std::vector<double> want;
    for (double i : iv)
      for (int64_t j = 0; j < 64; ++j) want.push_back(xv[static_cast<int64_t>(i) * 64 + j]);
    test::expect_tensor_near(index_select(x, 0, index), want, {1000, 64}, test::layout_name(layout));
  }
}

TEST(IndexSelect, ZeroSizeAndOneElement) {
  Tensor x = arange(12, kFloat32).view({3, 4});
  EXPECT_EQ(index_select(x, 1, empty({0}, kInt64)).sizes(), (Shape{3, 0}));
  EXPECT_EQ(index_select(empty({0, 4}), 1, tensor(std::vector<int64_t>{1, 3})).sizes(), (Shape{0, 2}));
  // A 0-dim index keeps the dim, with size 1.
  test::expect_tensor_near(index_select(x, 0, scalar_tensor(2, kInt64)), {8, 9, 10, 11}, {1, 4});
  test::expect_tensor_near(index_select(full({1}, 5.0), 0, tensor(std::vector<int64_t>{0, 0, 0})), {5, 5, 5}, {3});
  test::expect_tensor_near(index_select(scalar_tensor(4.0), 0, tensor(std::vector<int64_t>{0})), {4}, {});
}

TEST(IndexSelect, Errors) {
  Tensor x = zeros({3, 4});
  test::expect_error([&] { index_select(x, 1, tensor(std::vector<int64_t>{0, 4})); },
                     {"index_select", "index 4", "dim 1", "size 4"});
  test::expect_error([&] { index_select(x, 0, tensor(std::vector<int64_t>{-1})); }, {"index_select", "index -1"});
  test::expect_error([&] { index_select(x, 0, zeros({2, 2}, kInt64)); }, {"index_select", "(2, 2)"});
  test::expect_error([&] { index_select(x, 0, zeros({2})); }, {"index_select", "int64", "float32"});
  test::expect_error([&] { index_select(x, 2, zeros({2}, kInt64)); }, {"index_select", "dim 2"});
}

// ---- gather ----

TEST(Gather, MatchesReferenceInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(3);
  const Shape shape{4, 5, 6};
  int round = 0;
  for_each_case({0, 1, 2, -1}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    // The index may be smaller than x outside dim, and of any size along it.
    Shape ishape{3, 4, 5};
    ishape[d] = 7;
    Tensor x = test::random_tensor(shape, dtype, rng, layout);
    Tensor index = with_layout(random_indices(shape_numel(ishape), shape[d], rng), ishape,
                               kIndexDTypes[round++ % 2], layout, rng);
    auto xv = values(x), iv = values(index);
    std::vector<double> want(iv.size());
    for (size_t f = 0; f < want.size(); ++f) {
      Shape c = unravel(static_cast<int64_t>(f), ishape);
      c[d] = static_cast<int64_t>(iv[f]);
      want[f] = xv[ravel(c, shape)];
    }
    Tensor out = gather(x, dim, index);
    EXPECT_EQ(out.dtype(), dtype);
    test::expect_tensor_near(out, want, ishape);
  });
}

TEST(Gather, ZeroSizeAndScalar) {
  Tensor x = arange(6, kFloat64).view({2, 3});
  EXPECT_EQ(gather(x, 1, empty({2, 0}, kInt64)).sizes(), (Shape{2, 0}));
  test::expect_tensor_near(gather(scalar_tensor(3.0), 0, scalar_tensor(0, kInt64)), {3}, {});
  test::expect_tensor_near(gather(x, 1, tensor(std::vector<int64_t>{2}, {1, 1})), {2}, {1, 1});
}

TEST(Gather, Errors) {
  Tensor x = zeros({4, 5});
  test::expect_error([&] { gather(x, 0, zeros({4}, kInt64)); }, {"gather", "(4)", "(4, 5)"});
  test::expect_error([&] { gather(x, 1, zeros({5, 2}, kInt64)); }, {"gather", "(5, 2)", "dim 0"});
  test::expect_error([&] { gather(x, 1, full({1, 1}, 5, kInt64)); }, {"gather", "index 5", "dim 1", "size 5"});
}

// Along the last dim with x, index and out contiguous and of one size outside it: the kernel's row-by-row path
// (the cases above, whose index is smaller than x, take the strided one). Every dtype, 2-d and 3-d, enough rows
// to be split across threads, and its index check.
TEST(Gather, AlongTheLastDimOfContiguousRows) {
  std::mt19937 rng(13);
  for (DType dtype : test::kAllDTypes) {
    for (const auto& [shape, ishape] : std::vector<std::pair<Shape, Shape>>{{{37, 50}, {37, 9}}, {{3, 7, 20}, {3, 7, 5}},
                                                                           {{4096, 64}, {4096, 16}}}) {
      const Tensor x = test::random_tensor(shape, dtype, rng);
      const Tensor index = tensor(random_indices(shape_numel(ishape), shape.back(), rng), ishape).to(kInt64);
      const auto xv = values(x), iv = values(index);
      std::vector<double> want(iv.size());
      for (size_t f = 0; f < want.size(); ++f) {
        Shape c = unravel(static_cast<int64_t>(f), ishape);
        c.back() = static_cast<int64_t>(iv[f]);
        want[f] = xv[ravel(c, shape)];
      }
      test::expect_tensor_near(gather(x, -1, index), want, ishape,
                               std::string(dtype_name(dtype)) + " " + shape_str(shape));
    }
  }
  Tensor x = zeros({4, 5});
  test::expect_error([&] { gather(x, 1, full({4, 2}, 5, kInt64)); }, {"gather", "index 5", "dim 1", "size 5"});
  test::expect_error([&] { gather(x, 1, full({4, 2}, -1, kInt64)); }, {"gather", "index -1", "dim 1"});
}

// ---- scatter, scatter_add ----

// Indices for scatter along dim d of a tensor of size n there: distinct within every line along d, so the
// result does not depend on which duplicate wins.
std::vector<double> distinct_indices(const Shape& ishape, int64_t d, int64_t n, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(shape_numel(ishape)));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t f = 0; f < shape_numel(ishape); ++f) {
    Shape c = unravel(f, ishape);
    if (c[d] != 0) continue;
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (c[d] = 0; c[d] < ishape[d]; ++c[d]) v[ravel(c, ishape)] = static_cast<double>(perm[c[d]]);
  }
  return v;
}

// self[c with c[d] = index[c]] (op)= src[c] over the positions c of index; src may be larger than index.
std::vector<double> scatter_reference(std::vector<double> self, const Shape& shape, int64_t d, const Tensor& index,
                                      const std::vector<double>& src, const Shape& src_shape, bool add) {
  auto iv = values(index);
  for (size_t f = 0; f < iv.size(); ++f) {
    Shape c = unravel(static_cast<int64_t>(f), index.sizes());
    double s = src[ravel(c, src_shape)];
    c[d] = static_cast<int64_t>(iv[f]);
    double& dst = self[ravel(c, shape)];
    dst = add ? dst + s : s;
  }
  return self;
}

TEST(Scatter, MatchesReferenceInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(4);
  const Shape shape{4, 5, 6};
  for_each_case({0, 1, -1}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Shape ishape{3, 4, 5}, src_shape{4, 5, 6};
    ishape[d] = 3;
    src_shape[d] = 4;
    Tensor self = test::random_tensor(shape, dtype, rng, layout);
    Tensor index = with_layout(distinct_indices(ishape, d, shape[d], rng), ishape, kInt64, layout, rng);
    Tensor src = test::random_tensor(src_shape, dtype, rng, layout);
    auto before = values(self);
    auto want = scatter_reference(before, shape, d, index, values(src), src_shape, false);
    test::expect_tensor_near(scatter(self, dim, index, src), want, shape, "out of place");
    EXPECT_EQ(values(self), before) << "scatter changed its input";
    uint64_t version = self.version();
    Tensor& ret = scatter_(self, dim, index, src);
    EXPECT_EQ(&ret, &self);
    EXPECT_GT(self.version(), version);
    test::expect_tensor_near(self, want, shape, "in place");
  });
}

TEST(Scatter, ScalarValue) {
  std::mt19937 rng(5);
  for (DType dtype : test::kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor self = zeros({3, 4}, dtype);
    Tensor index = with_layout(distinct_indices({3, 2}, 1, 4, rng), {3, 2}, kInt32, Layout::Contiguous, rng);
    std::vector<double> twos(6, in_dtype(2, dtype));
    auto want = scatter_reference(values(self), {3, 4}, 1, index, twos, {3, 2}, false);
    test::expect_tensor_near(scatter(self, 1, index, Scalar(2)), want, {3, 4});
  }
}

TEST(ScatterAdd, SumsDuplicateIndicesInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(6);
  const Shape shape{4, 5, 6};
  for_each_case({0, 1, 2, -2}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Shape ishape{3, 4, 5}, src_shape{4, 5, 6};
    ishape[d] = 8;  // more entries than positions: duplicates for sure
    src_shape[d] = 9;
    Tensor self = small_ints(shape, dtype, rng, layout);
    Tensor index = with_layout(random_indices(shape_numel(ishape), shape[d], rng), ishape, kInt64, layout, rng);
    Tensor src = small_ints(src_shape, dtype, rng, layout);
    auto want = scatter_reference(values(self), shape, d, index, values(src), src_shape, true);
    for (auto& w : want) w = in_dtype(w, dtype);
    test::expect_tensor_near(scatter_add(self, dim, index, src), want, shape, "out of place");
    scatter_add_(self, dim, index, src);
    test::expect_tensor_near(self, want, shape, "in place");
  });
}

TEST(ScatterAdd, LargeInputIsRaceFree) {
  // Many entries land on few elements, along dim 0 and dim 1, and in a 1-D tensor: a lost update under
  // threads, or a wrong step through src, shows as a wrong sum.
  std::mt19937 rng(7);
  for (int64_t dim : {0, 1}) {
    Shape shape = dim == 0 ? Shape{8, 500} : Shape{500, 8};
    Shape ishape = dim == 0 ? Shape{400, 500} : Shape{500, 400};
    Tensor index = with_layout(random_indices(shape_numel(ishape), 8, rng), ishape, kInt64, Layout::Contiguous, rng);
    Tensor src = small_ints(ishape, kInt64, rng);
    auto want = scatter_reference(std::vector<double>(4000, 0), shape, dim, index, values(src), ishape, true);
    test::expect_tensor_near(scatter_add(zeros(shape, kInt64), dim, index, src), want, shape);
  }
  Tensor index = with_layout(random_indices(200000, 10, rng), {200000}, kInt64, Layout::Contiguous, rng);
  Tensor src = small_ints({200000}, kInt64, rng);
  auto want = scatter_reference(std::vector<double>(10, 0), {10}, 0, index, values(src), {200000}, true);
  test::expect_tensor_near(scatter_add(zeros({10}, kInt64), 0, index, src), want, {10});
}

TEST(Scatter, ZeroSizeAndScalar) {
  Tensor self = ones({2, 3});
  test::expect_tensor_near(scatter_add(self, 1, empty({2, 0}, kInt64), empty({2, 0})), values(self), {2, 3});
  test::expect_tensor_near(scatter(scalar_tensor(1.0), 0, scalar_tensor(0, kInt64), scalar_tensor(7.0)), {7}, {});
}

TEST(Scatter, Errors) {
  Tensor self = zeros({4, 5});
  Tensor index = zeros({2, 2}, kInt64);
  test::expect_error([&] { scatter_(self, 0, index, zeros({2, 2}, kFloat64)); }, {"scatter_", "float32", "float64"});
  test::expect_error([&] { scatter(self, 0, index, zeros({1, 2})); }, {"scatter", "(2, 2)", "(1, 2)", "src"});
  test::expect_error([&] { scatter(self, 0, zeros({2, 6}, kInt64), zeros({2, 6})); }, {"scatter", "(2, 6)", "dim 1"});
  test::expect_error([&] { scatter(self, 0, zeros({2}, kInt64), zeros({2})); }, {"scatter", "(2)", "(4, 5)"});
  test::expect_error([&] { scatter_add(self, 0, full({1, 1}, 4, kInt64), ones({1, 1})); },
                     {"scatter_add", "index 4", "dim 0", "size 4"});
  test::expect_error([&] { scatter(self, 1, zeros({1, 1}), ones({1, 1})); }, {"scatter", "int64", "float32"});
  Tensor expanded = zeros({1, 5}).expand({4, 5});
  test::expect_error([&] { scatter_add_(expanded, 1, index, ones({2, 2})); }, {"scatter_add_", "stride 0"});
}

// ---- index_add ----

TEST(IndexAdd, SumsDuplicatesWithAlphaInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(8);
  const Shape shape{4, 5, 3};
  int round = 0;
  for_each_case({0, 1, 2, -1}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Shape src_shape = shape;
    src_shape[d] = 7;
    // alpha -1 would wrap in uint8 and is not a bool; both get 1.
    int alpha = dtype == kBool || dtype == kUInt8 ? 1 : -2;
    Tensor self = small_ints(shape, dtype, rng, layout);
    Tensor index = with_layout(random_indices(7, shape[d], rng), {7}, kIndexDTypes[round++ % 2], layout, rng);
    Tensor src = small_ints(src_shape, dtype, rng, layout);
    auto want = values(self), sv = values(src), iv = values(index);
    for (size_t f = 0; f < sv.size(); ++f) {
      Shape c = unravel(static_cast<int64_t>(f), src_shape);
      c[d] = static_cast<int64_t>(iv[c[d]]);
      want[ravel(c, shape)] += alpha * sv[f];
    }
    for (auto& w : want) w = in_dtype(w, dtype);
    test::expect_tensor_near(index_add(self, dim, index, src, alpha), want, shape, "out of place");
    uint64_t version = self.version();
    index_add_(self, dim, index, src, alpha);
    EXPECT_GT(self.version(), version);
    test::expect_tensor_near(self, want, shape, "in place");
  });
}

// alpha * src is rounded to float before it is added (no FMA), in the row kernel (inner >= 16) and the general
// loop alike: the CUDA kernels round so too, so the GPU's sums can have the CPU's bits. The reference: the
// product of two floats is exact in double, then rounded to float; then the sum, exact in double, rounded.
TEST(IndexAdd, RoundsTheProductBeforeTheSumInFloat32) {
  std::mt19937 rng(10);
  const float alpha = 0.1f;
  for (int64_t inner : {1, 16}) {
    const Tensor self = test::random_tensor({3, inner}, kFloat32, rng), src = test::random_tensor({2, inner}, kFloat32, rng);
    const Tensor index = tensor(std::vector<int64_t>{2, 0});
    const std::vector<double> sv = values(self), srcv = values(src);
    std::vector<double> want = sv;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < inner; ++c) {
        const int64_t to = (r == 0 ? 2 : 0) * inner + c;
        const float product = static_cast<float>(static_cast<double>(alpha) * srcv[r * inner + c]);
        want[to] = static_cast<float>(want[to] + static_cast<double>(product));
      }
    EXPECT_EQ(values(index_add(self, 0, index, src, alpha)), want) << "inner " << inner;
  }
}

TEST(IndexAdd, LargeInputMatchesReference) {
  // An embedding's backward: many rows of src added into few rows of self.
  std::mt19937 rng(9);
  Tensor index = with_layout(random_indices(3000, 50, rng), {3000}, kInt64, Layout::Contiguous, rng);
  Tensor src = small_ints({3000, 256}, kFloat64, rng);
  auto sv = values(src), iv = values(index);
  std::vector<double> want(50 * 256, 0);
  for (int64_t k = 0; k < 3000; ++k)
    for (int64_t j = 0; j < 256; ++j) want[static_cast<int64_t>(iv[k]) * 256 + j] += 0.5 * sv[k * 256 + j];
  test::expect_tensor_near(index_add(zeros({50, 256}, kFloat64), 0, index, src, 0.5), want, {50, 256});
  // Whole rows along a middle dim (outer 3, inner 20: the row kernel), onto a non-zero self, and in float32
  // (small integers: exact in any order), with a strided index.
  Tensor index1 = with_layout(random_indices(300, 50, rng), {300}, kInt64, Layout::Strided, rng);
  Tensor src1 = small_ints({3, 300, 20}, kFloat32, rng), self1 = small_ints({3, 50, 20}, kFloat32, rng);
  auto want1 = values(self1);
  const auto sv1 = values(src1), iv1 = values(index1);
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t k = 0; k < 300; ++k)
      for (int64_t j = 0; j < 20; ++j)
        want1[(o * 50 + static_cast<int64_t>(iv1[k])) * 20 + j] -= 2 * sv1[(o * 300 + k) * 20 + j];
  test::expect_tensor_near(index_add(self1, 1, index1, src1, -2), want1, {3, 50, 20});
  test::expect_error([] { index_add(zeros({4, 16}), 0, tensor(std::vector<int64_t>{1, 4}), ones({2, 16})); },
                     {"index_add", "index 4", "dim 0", "size 4"});
}

TEST(IndexAdd, Errors) {
  Tensor self = zeros({4, 5});
  Tensor index = tensor(std::vector<int64_t>{0, 1});
  test::expect_error([&] { index_add(self, 0, index, ones({3, 5})); }, {"index_add", "(3, 5)", "(2, 5)"});
  test::expect_error([&] { index_add(self, 1, tensor(std::vector<int64_t>{5}), ones({4, 1})); },
                     {"index_add", "index 5", "dim 1", "size 5"});
  test::expect_error([&] { index_add(zeros({4}, kInt64), 0, index, ones({2}, kInt64), 0.5); },
                     {"index_add", "alpha", "int64"});
  test::expect_error([&] { index_add(self, 0, index, ones({2, 5}, kFloat64)); }, {"index_add", "float64"});
  test::expect_error([&] { index_add(self, 0, zeros({2, 1}, kInt64), ones({2, 5})); }, {"index_add", "(2, 1)"});
}

// ---- nonzero, masked_select ----

// Random values with many zeros (floats: those below 0.5 in magnitude, set to 0 in place so that the layout stays).
TEST(Nonzero, MatchesALoopOverCoordinatesInEveryDtypeAndLayout) {
  std::mt19937 rng(11);
  for (DType dtype : test::kAllDTypes) {
    for (Layout layout : test::kLayouts) {
      for (const Shape& shape : std::vector<Shape>{{7}, {3, 4}, {2, 3, 5}, {0, 3}, {1, 1}}) {
        Tensor x = test::random_tensor(shape, dtype, rng, layout, -1.4, 1.4);
        if (is_floating(dtype)) x.masked_fill_(lt(abs(x), 0.5), 0);
        const auto xv = values(x);
        std::vector<double> coords, picked;
        std::vector<double> flat;
        for (size_t f = 0; f < xv.size(); ++f) {
          if (xv[f] == 0) continue;
          for (int64_t c : unravel(static_cast<int64_t>(f), shape)) coords.push_back(static_cast<double>(c));
          flat.push_back(static_cast<double>(f));
          picked.push_back(xv[f]);
        }
        const std::string what = std::string(dtype_name(dtype)) + " " + test::layout_name(layout) + " " +
                                 shape_str(shape);
        Tensor nz = nonzero(x);
        EXPECT_EQ(nz.dtype(), kInt64) << what;
        EXPECT_EQ(nz.sizes(), (Shape{static_cast<int64_t>(flat.size()), static_cast<int64_t>(shape.size())}))
            << what;
        EXPECT_EQ(values(nz), coords) << what;
        EXPECT_EQ(values(flat_nonzero(x)), flat) << what;
        Tensor sel = masked_select(x, ne(x, 0));
        EXPECT_EQ(sel.dtype(), dtype) << what;
        EXPECT_EQ(values(sel), picked) << what;
      }
    }
  }
}

// Inputs long enough for the kernel's chunks (65536 elements): rows that a chunk boundary cuts, coordinates that
// carry into the dims above, a chunk all zero and a chunk all nonzero, NaN (nonzero) and -0.0 (zero).
TEST(Nonzero, ChunksThatCutRowsCarryTheirCoordinates) {
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> pick(0, 9);
  for (DType dtype : {kFloat32, kFloat64, kBool, kInt32, kFloat16}) {
    for (const Shape& shape : std::vector<Shape>{{300001}, {3, 70001}, {5, 7, 4001}, {140000, 2}}) {
      const int64_t n = shape_numel(shape);
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t f = 0; f < n; ++f) {
        const int r = pick(rng);
        // Elements [65536, 131072) all zero, [131072, 196608) all nonzero; elsewhere a mix.
        v[static_cast<size_t>(f)] = f >= 65536 && f < 131072     ? (r < 5 ? 0.0 : -0.0)
                                    : f >= 131072 && f < 196608 ? 1 + r
                                    : r < 4                     ? 0.0
                                    : r < 5                     ? -0.0
                                    : r < 6 && is_floating(dtype) ? NAN
                                                                  : r;
      }
      const Tensor x = test::make_tensor(v, shape, kFloat64).to(dtype);
      const auto xv = values(x);
      std::vector<int64_t> coords, flat;
      for (int64_t f = 0; f < n; ++f) {
        if (xv[static_cast<size_t>(f)] == 0) continue;  // NaN != 0: kept
        for (int64_t c : unravel(f, shape)) coords.push_back(c);
        flat.push_back(f);
      }
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor nz = nonzero(x);
      ASSERT_EQ(nz.sizes(), (Shape{static_cast<int64_t>(flat.size()), static_cast<int64_t>(shape.size())})) << what;
      EXPECT_TRUE(nz.to_vector<int64_t>() == coords) << what;
      EXPECT_TRUE(flat_nonzero(x).to_vector<int64_t>() == flat) << what;
      EXPECT_EQ(masked_select(x, ne(x, 0)).numel(), static_cast<int64_t>(flat.size())) << what;
    }
  }
}

TEST(MaskedSelect, BroadcastsTheMaskScalarsAndErrors) {
  Tensor x = arange(0, 6, 1, TensorOptions(kFloat64)).view({2, 3});
  Tensor row_mask = tensor(std::vector<bool>{true, false, true});  // (3): broadcast over the rows
  EXPECT_EQ(values(masked_select(x, row_mask)), (std::vector<double>{0, 2, 3, 5}));
  Tensor col_mask = tensor(std::vector<bool>{false, true}).view({2, 1});
  EXPECT_EQ(values(x.masked_select(col_mask)), (std::vector<double>{3, 4, 5}));
  // A mask larger than x broadcasts x: each element once per true place.
  Tensor v = tensor({10.0, 20.0});
  EXPECT_EQ(values(masked_select(v, tensor(std::vector<bool>{true, true, false, true}).view({2, 2}))),
            (std::vector<double>{10, 20, 20}));
  EXPECT_EQ(masked_select(x, zeros({2, 3}, kBool)).sizes(), (Shape{0}));
  EXPECT_EQ(values(nonzero(scalar_tensor(5.0))).size(), 0u);  // a 0-dim tensor: (1, 0)
  EXPECT_EQ(nonzero(scalar_tensor(5.0)).sizes(), (Shape{1, 0}));
  EXPECT_EQ(nonzero(scalar_tensor(0.0)).sizes(), (Shape{0, 0}));
  EXPECT_EQ(values(x.nonzero()), (std::vector<double>{0, 1, 0, 2, 1, 0, 1, 1, 1, 2}));
  test::expect_error([&] { (void)masked_select(x, ones({2, 3})); }, {"masked_select", "bool mask", "float32"});
  test::expect_error([&] { (void)masked_select(x, ones({4}, kBool)); }, {"masked_select", "(2, 3)", "(4)"});
}

}  // namespace
}  // namespace kiln
