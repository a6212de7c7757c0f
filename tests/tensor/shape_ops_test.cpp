// Tests of the shape ops built from other ops (indexing.h): cat, stack, split, chunk, one_hot, tril/triu,
// flip, repeat, pad. Each is compared with a naive loop over coordinates written here, on values read straight
// from memory (test::values), for random inputs in every layout and dtype, with zero-size and one-element
// cases, and the errors a user sees.
#include <algorithm>
#include <limits>
#include <map>

#include "indexing_test_util.h"

namespace kiln {
namespace {

using namespace kiln::test;
using test::Layout;
using test::values;

// ---- cat, stack ----

TEST(Cat, MatchesReferenceInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(10);
  for_each_case({0, 1, 2, -1, -2}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    std::vector<Tensor> parts;
    std::vector<std::vector<double>> pv;
    Shape out_shape{3, 4, 5};
    out_shape[d] = 0;
    for (int64_t n : {2, 0, 3}) {  // a part empty along dim is kept (only 1-D (0) is skipped)
      Shape s{3, 4, 5};
      s[d] = n;
      parts.push_back(test::random_tensor(s, dtype, rng, layout));
      pv.push_back(values(parts.back()));
      out_shape[d] += n;
    }
    std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
    for (size_t f = 0; f < want.size(); ++f) {
      Shape c = unravel(static_cast<int64_t>(f), out_shape);
      size_t p = 0;
      while (c[d] >= parts[p].size(d)) c[d] -= parts[p++].size(d);
      want[f] = pv[p][ravel(c, parts[p].sizes())];
    }
    Tensor out = cat(parts, dim);
    EXPECT_EQ(out.dtype(), dtype);
    test::expect_tensor_near(out, want, out_shape);
  });
}

TEST(Cat, PromotesDtypesAndSkipsLegacyEmpty) {
  Tensor a = tensor(std::vector<int32_t>{1, 2}), b = tensor(std::vector<float>{0.5f, 3.5f, 4});
  Tensor ab = cat({a, b});
  EXPECT_EQ(ab.dtype(), kFloat32);
  test::expect_tensor_near(ab, {1, 2, 0.5, 3.5, 4}, {5});
  Tensor flags = tensor(std::vector<bool>{true, false});
  Tensor bytes = tensor(std::vector<uint8_t>{7});
  EXPECT_EQ(cat({flags, bytes}).dtype(), kUInt8);
  test::expect_tensor_near(cat({flags, bytes}), {1, 0, 7}, {3});
  // 1-D (0) tensors are skipped whatever the others' shapes; they still take part in type promotion.
  Tensor x = arange(6, kFloat32).view({2, 3});
  Tensor xx = cat({empty({0}, kFloat64), x, empty({0})}, 1);
  EXPECT_EQ(xx.dtype(), kFloat64);
  test::expect_tensor_near(xx, values(x), {2, 3});
  EXPECT_FALSE(xx.shares_storage_with(x));
  EXPECT_EQ(cat({empty({0}, kInt64), empty({0}, kInt64)}).sizes(), (Shape{0}));
}

TEST(Cat, Errors) {
  test::expect_error([] { cat({}); }, {"cat", "non-empty"});
  test::expect_error([] { cat({zeros({2, 3}), zeros({3, 3})}, 1); },
                     {"cat", "dim 1", "tensor 0", "(2, 3)", "tensor 1", "(3, 3)", "2 vs 3"});
  test::expect_error([] { cat({zeros({2, 3}), zeros({2, 3}), zeros({2})}); }, {"cat", "tensor 2", "(2)", "(2, 3)"});
  test::expect_error([] { cat({zeros({2}), scalar_tensor(1.0)}); }, {"cat", "tensor 1", "0-dim"});
  test::expect_error([] { cat({zeros({2, 3})}, 2); }, {"cat", "dim 2"});
}

TEST(Stack, MatchesReferenceInEveryDtypeLayoutAndDim) {
  std::mt19937 rng(11);
  const Shape shape{2, 3};
  for_each_case({0, 1, 2, -1, -3}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    std::vector<Tensor> parts;
    std::vector<std::vector<double>> pv;
    for (int i = 0; i < 4; ++i) {
      parts.push_back(test::random_tensor(shape, dtype, rng, layout));
      pv.push_back(values(parts.back()));
    }
    Shape out_shape = shape;
    out_shape.insert(out_shape.begin() + d, 4);
    std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
    for (size_t f = 0; f < want.size(); ++f) {
      Shape c = unravel(static_cast<int64_t>(f), out_shape);
      int64_t p = c[d];
      c.erase(c.begin() + d);
      want[f] = pv[p][ravel(c, shape)];
    }
    test::expect_tensor_near(stack(parts, dim), want, out_shape);
  });
}

TEST(Stack, ScalarsAndErrors) {
  test::expect_tensor_near(stack({scalar_tensor(1.0), scalar_tensor(2.0)}), {1, 2}, {2});
  EXPECT_EQ(stack({empty({0, 3}), empty({0, 3})}, 1).sizes(), (Shape{0, 2, 3}));
  test::expect_error([] { stack({}); }, {"stack", "non-empty"});
  test::expect_error([] { stack({zeros({2, 3}), zeros({2, 3}), zeros({3, 2})}); },
                     {"stack", "tensor 0", "(2, 3)", "tensor 2", "(3, 2)"});
  test::expect_error([] { stack({zeros({2, 3})}, 3); }, {"stack", "dim 3"});
}

// ---- split, chunk ----

// Checks that `pieces` are views of x, of the given sizes along d, holding x's values in order.
void expect_pieces(const std::vector<Tensor>& pieces, const Tensor& x, int64_t d, const Shape& sizes) {
  ASSERT_EQ(pieces.size(), sizes.size());
  auto xv = values(x);
  int64_t start = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    Shape want_shape = x.sizes();
    want_shape[d] = sizes[p];
    EXPECT_TRUE(pieces[p].shares_storage_with(x)) << "piece " << p;
    std::vector<double> want;
    for (int64_t f = 0; f < shape_numel(want_shape); ++f) {
      Shape c = unravel(f, want_shape);
      c[d] += start;
      want.push_back(xv[ravel(c, x.sizes())]);
    }
    test::expect_tensor_near(pieces[p], want, want_shape, "piece " + std::to_string(p));
    start += sizes[p];
  }
}

TEST(Split, PiecesAreViewsInEveryLayout) {
  std::mt19937 rng(12);
  for (Layout layout : test::kLayouts) {
    SCOPED_TRACE(test::layout_name(layout));
    Tensor x = test::random_tensor({7, 4}, kFloat32, rng, layout);
    expect_pieces(split(x, 3), x, 0, {3, 3, 1});
    expect_pieces(split(x, 3, -1), x, 1, {3, 1});
    expect_pieces(split(x, 10), x, 0, {7});
    expect_pieces(split(x, {1, 0, 3}, 1), x, 1, {1, 0, 3});
  }
  Tensor x = zeros({4, 2});
  split(x, 2)[1].fill_(5);  // writes through the view
  EXPECT_EQ(values(x), (std::vector<double>{0, 0, 0, 0, 5, 5, 5, 5}));
  // An empty dim still gives one piece, as in PyTorch.
  Tensor none = empty({0, 3});
  expect_pieces(split(none, 2), none, 0, {0});
}

TEST(Split, Errors) {
  Tensor x = zeros({5, 3});
  test::expect_error([&] { split(x, {1, 2}); }, {"split", "(1, 2)", "add up to 3", "5"});
  test::expect_error([&] { split(x, 0); }, {"split", "0", "size 5"});
  test::expect_error([&] { split(x, {6, -1}); }, {"split", "non-negative"});
  test::expect_error([] { split(scalar_tensor(1.0), 1); }, {"split", "0-dim"});
}

TEST(Chunk, GivesFewerChunksWhenItMust) {
  std::mt19937 rng(13);
  for (Layout layout : test::kLayouts) {
    SCOPED_TRACE(test::layout_name(layout));
    Tensor five = test::random_tensor({3, 5}, kFloat64, rng, layout);
    expect_pieces(chunk(five, 4, 1), five, 1, {2, 2, 1});  // ceil(5/4) = 2: three pieces, not four
    expect_pieces(chunk(five, 5, -1), five, 1, {1, 1, 1, 1, 1});
    expect_pieces(chunk(five, 8, 1), five, 1, {1, 1, 1, 1, 1});
    expect_pieces(chunk(five, 3, 0), five, 0, {1, 1, 1});
  }
  Tensor six = arange(6);
  expect_pieces(chunk(six, 4), six, 0, {2, 2, 2});
  expect_pieces(chunk(six, 1), six, 0, {6});
  Tensor none = empty({0, 2});
  expect_pieces(chunk(none, 3), none, 0, {0, 0, 0});
  test::expect_error([&] { chunk(six, 0); }, {"chunk", "positive", "0"});
}

// ---- one_hot ----

TEST(OneHot, MatchesReference) {
  std::mt19937 rng(14);
  for (Layout layout : test::kLayouts)
    for (DType idx_dtype : kIndexDTypes)
      for (int64_t num_classes : {-1, 6, 9}) {
        SCOPED_TRACE(what(idx_dtype, layout, "num_classes " + std::to_string(num_classes)));
        auto iv = random_indices(12, 6, rng);
        Tensor idx = with_layout(iv, {3, 4}, idx_dtype, layout, rng);
        int64_t c = num_classes == -1 ? static_cast<int64_t>(*std::max_element(iv.begin(), iv.end())) + 1 : num_classes;
        std::vector<double> want(static_cast<size_t>(12 * c), 0);
        for (size_t i = 0; i < iv.size(); ++i) want[i * c + static_cast<size_t>(iv[i])] = 1;
        Tensor out = one_hot(idx, num_classes);
        EXPECT_EQ(out.dtype(), kInt64);
        test::expect_tensor_near(out, want, {3, 4, c});
      }
  test::expect_tensor_near(one_hot(scalar_tensor(2, kInt64), 4), {0, 0, 1, 0}, {4});
  EXPECT_EQ(one_hot(empty({0}, kInt64), 3).sizes(), (Shape{0, 3}));
}

TEST(OneHot, Errors) {
  Tensor idx = tensor(std::vector<int64_t>{0, 5, 2});
  test::expect_error([&] { one_hot(idx, 4); }, {"one_hot", "5", "num_classes 4"});
  test::expect_error([] { one_hot(tensor(std::vector<int64_t>{1, -1}), 3); }, {"one_hot", "-1", "non-negative"});
  test::expect_error([] { one_hot(empty({0}, kInt64)); }, {"one_hot", "empty"});
  test::expect_error([] { one_hot(zeros({2}), 3); }, {"one_hot", "float32"});
  test::expect_error([&] { one_hot(idx, -2); }, {"one_hot", "-2"});
}

// ---- tril, triu ----

TEST(TrilTriu, MatchReferenceInEveryDtypeLayoutAndDiagonal) {
  std::mt19937 rng(15);
  for (const Shape& shape : {Shape{4, 6}, Shape{2, 3, 5, 4}, Shape{0, 3}, Shape{3, 0}, Shape{1, 1}})
    for (DType dtype : test::kAllDTypes)
      for (Layout layout : test::kLayouts)
        for (int64_t k : std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -5, -4, -1, 0, 1, 2, 5, 6, 7,
                                             std::numeric_limits<int64_t>::max()}) {
          SCOPED_TRACE(what(dtype, layout, shape_str(shape) + " k " + std::to_string(k)));
          Tensor x = test::random_tensor(shape, dtype, rng, layout);
          auto xv = values(x);
          std::vector<double> lower(xv.size()), upper(xv.size());
          for (size_t f = 0; f < xv.size(); ++f) {
            Shape c = unravel(static_cast<int64_t>(f), shape);
            int64_t col_minus_row = c[c.size() - 1] - c[c.size() - 2];
            lower[f] = col_minus_row <= k ? xv[f] : 0;
            upper[f] = col_minus_row >= k ? xv[f] : 0;
          }
          Tensor lo = tril(x, k), up = triu(x, k);
          EXPECT_EQ(lo.dtype(), dtype);
          EXPECT_EQ(up.dtype(), dtype);
          test::expect_tensor_near(lo, lower, shape, "tril");
          test::expect_tensor_near(up, upper, shape, "triu");
        }
}

TEST(TrilTriu, Errors) {
  test::expect_error([] { tril(zeros({3})); }, {"tril", "2 dims", "(3)"});
  test::expect_error([] { triu(scalar_tensor(1.0)); }, {"triu", "()"});
}

// ---- flip ----

TEST(Flip, MatchesReferenceInEveryDtypeLayoutAndDims) {
  std::mt19937 rng(16);
  const Shape shape{3, 4, 5};
  const std::vector<Shape> dim_sets{{0}, {-1}, {0, 2}, {1, -3, 2}, {}};
  for (DType dtype : test::kAllDTypes)
    for (Layout layout : test::kLayouts)
      for (const Shape& dims : dim_sets) {
        SCOPED_TRACE(what(dtype, layout, "dims " + shape_str(dims)));
        Tensor x = test::random_tensor(shape, dtype, rng, layout);
        auto xv = values(x);
        std::vector<double> want(xv.size());
        for (size_t f = 0; f < xv.size(); ++f) {
          Shape c = unravel(static_cast<int64_t>(f), shape);
          for (int64_t d : dims) {
            int64_t w = d < 0 ? d + 3 : d;
            c[w] = shape[w] - 1 - c[w];
          }
          want[f] = xv[ravel(c, shape)];
        }
        Tensor out = flip(x, dims);
        EXPECT_FALSE(out.shares_storage_with(x));
        EXPECT_TRUE(out.is_contiguous());
        test::expect_tensor_near(out, want, shape);
      }
}

TEST(Flip, ZeroSizeScalarAndErrors) {
  EXPECT_EQ(flip(empty({0, 3}), {0, 1}).sizes(), (Shape{0, 3}));
  test::expect_tensor_near(flip(scalar_tensor(2.0), {0}), {2}, {});
  test::expect_tensor_near(flip(arange(3).view({3, 1}), {0, 1}), {2, 1, 0}, {3, 1});
  test::expect_error([] { flip(zeros({2, 3, 4}), {1, -2}); }, {"flip", "dim 1", "more than once"});
  test::expect_error([] { flip(zeros({2, 3}), {2}); }, {"flip", "dim 2"});
}

// ---- roll ----

TEST(Roll, MatchesReferenceInEveryDtypeLayoutAndShifts) {
  std::mt19937 rng(17);
  const Shape shape{3, 4, 5};
  struct Case {
    Shape shifts, dims;
  };
  // Shifts past the size, negative ones, a dim twice (the shifts add up), and the flattened form.
  const std::vector<Case> cases{{{1}, {0}}, {{-2}, {-1}}, {{7, 3}, {1, 2}}, {{2, -9}, {0, 0}}, {{0}, {1}}, {{11}, {}}};
  for (DType dtype : test::kAllDTypes)
    for (Layout layout : test::kLayouts)
      for (const Case& c : cases) {
        SCOPED_TRACE(what(dtype, layout, "shifts " + shape_str(c.shifts) + " dims " + shape_str(c.dims)));
        Tensor x = test::random_tensor(shape, dtype, rng, layout);
        auto xv = values(x);
        std::vector<double> want(xv.size());
        const int64_t n = static_cast<int64_t>(xv.size());
        for (int64_t f = 0; f < n; ++f) {
          if (c.dims.empty()) {  // out[(f + s) mod n] = x[f] over the flat order
            want[static_cast<size_t>((((f + c.shifts[0]) % n) + n) % n)] = xv[f];
            continue;
          }
          Shape at = unravel(f, shape);
          for (size_t i = 0; i < c.dims.size(); ++i) {
            const int64_t d = c.dims[i] < 0 ? c.dims[i] + 3 : c.dims[i];
            at[d] = (((at[d] + c.shifts[i]) % shape[d]) + shape[d]) % shape[d];
          }
          want[ravel(at, shape)] = xv[f];
        }
        Tensor out = x.roll(c.shifts, c.dims);
        EXPECT_FALSE(out.shares_storage_with(x));
        test::expect_tensor_near(out, want, shape);
      }
}

TEST(Roll, ZeroSizeAndErrors) {
  EXPECT_EQ(roll(empty({0, 3}), {2}, {0}).sizes(), (Shape{0, 3}));
  test::expect_tensor_near(roll(arange(5), {-1}), {1, 2, 3, 4, 0}, {5});
  test::expect_error([] { roll(zeros({2, 3}), {1, 2}, {0}); }, {"roll", "2 shifts for 1 dims"});
  test::expect_error([] { roll(zeros({2, 3}), {1, 2}); }, {"roll", "one shift", "got 2"});
  test::expect_error([] { roll(zeros({2, 3}), {1}, {2}); }, {"roll", "dim 2"});
}

// ---- bincount ----

TEST(Bincount, CountsAndWeightsMatchALoop) {
  std::mt19937 rng(18);
  std::uniform_int_distribution<int64_t> pick(0, 9);
  for (DType dtype : {kInt64, kInt32, kUInt8}) {
    std::vector<double> v(200);
    std::vector<double> w(200);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(pick(rng)), w[i] = 0.25 * pick(rng) - 1;
    const Tensor x = tensor(v, {200}).to(dtype);
    const Tensor weights = tensor(w, {200});
    std::vector<double> counts(12, 0), sums(12, 0);
    int64_t top = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      counts[static_cast<size_t>(v[i])] += 1;
      sums[static_cast<size_t>(v[i])] += w[i];
      top = std::max(top, static_cast<int64_t>(v[i]));
    }
    SCOPED_TRACE(detail::concat(dtype));
    const Tensor c = bincount(x);
    EXPECT_EQ(c.dtype(), kInt64);
    test::expect_tensor_near(c, std::vector<double>(counts.begin(), counts.begin() + top + 1), {top + 1});
    const Tensor s = bincount(x, weights, 12);  // minlength past the largest value pads with zeros
    EXPECT_EQ(s.dtype(), kFloat64);
    test::expect_tensor_near(s, sums, {12}, 1e-12, 1e-12);
  }
  EXPECT_EQ(bincount(empty({0}, kInt64)).sizes(), (Shape{0}));
  EXPECT_EQ(bincount(empty({0}, kInt64), {}, 4).sizes(), (Shape{4}));
}

TEST(Bincount, Errors) {
  test::expect_error([] { bincount(tensor(std::vector<int64_t>{1, -2, 3})); }, {"bincount", "non-negative", "-2"});
  test::expect_error([] { bincount(zeros({3})); }, {"bincount", "integers", "float32"});
  test::expect_error([] { bincount(zeros({2, 2}, kInt64)); }, {"bincount", "1-D", "(2, 2)"});
  test::expect_error([] { bincount(zeros({3}, kInt64), ones({4})); }, {"bincount", "weights", "(4)", "(3)"});
}

// ---- unique, searchsorted ----

TEST(Unique, ValuesInverseAndCountsMatchAMap) {
  std::mt19937 rng(19);
  std::uniform_int_distribution<int> pick(-4, 6);
  for (DType dtype : {kFloat32, kFloat64, kInt64, kInt32}) {
    SCOPED_TRACE(detail::concat(dtype));
    std::vector<double> v(60);
    for (double& e : v) e = pick(rng) * (is_floating(dtype) ? 0.5 : 1.0);
    const Tensor x = tensor(v, {6, 10}).to(dtype);
    std::map<double, int64_t> count;
    for (double e : v) ++count[e];
    std::vector<double> want_values, want_counts, want_inverse;
    for (const auto& [value, c] : count) want_values.push_back(value), want_counts.push_back(static_cast<double>(c));
    for (double e : v)
      want_inverse.push_back(static_cast<double>(std::distance(count.begin(), count.find(e))));
    const UniqueResult u = unique(x);
    EXPECT_EQ(u.values.dtype(), dtype);
    test::expect_tensor_near(u.values, want_values, {static_cast<int64_t>(want_values.size())});
    test::expect_tensor_near(u.inverse, want_inverse, {6, 10});
    test::expect_tensor_near(u.counts, want_counts, {static_cast<int64_t>(want_counts.size())});
  }
  // NaNs are all distinct (as PyTorch's); an empty input has no values.
  const UniqueResult nan = unique(tensor(std::vector<double>{NAN, 1, NAN, 1}));
  test::expect_tensor_near(nan.values, {1, NAN, NAN}, {3});
  test::expect_tensor_near(nan.counts, {2, 1, 1}, {3});
  test::expect_tensor_near(nan.inverse, {1, 0, 2, 0}, {4});
  EXPECT_EQ(unique(empty({0, 3})).values.sizes(), (Shape{0}));
  EXPECT_EQ(unique(empty({0, 3})).inverse.sizes(), (Shape{0, 3}));
}

TEST(Searchsorted, MatchesLowerAndUpperBoundWithTies) {
  std::mt19937 rng(20);
  std::uniform_int_distribution<int> pick(-3, 12);
  std::vector<double> seq(25);
  for (double& e : seq) e = pick(rng);
  std::sort(seq.begin(), seq.end());  // repeated elements: the ties left and right differ on
  std::vector<double> vals(40);
  for (double& e : vals) e = pick(rng) + (pick(rng) % 2 ? 0.5 : 0.0);
  for (bool right : {false, true}) {
    std::vector<double> want;
    for (double v : vals) {
      auto it = right ? std::upper_bound(seq.begin(), seq.end(), v) : std::lower_bound(seq.begin(), seq.end(), v);
      want.push_back(static_cast<double>(it - seq.begin()));
    }
    SCOPED_TRACE(right ? "right" : "left");
    const Tensor out = searchsorted(tensor(seq, {25}), tensor(vals, {5, 8}), right);
    EXPECT_EQ(out.dtype(), kInt64);
    test::expect_tensor_near(out, want, {5, 8});
    test::expect_tensor_near(bucketize(tensor(vals, {5, 8}).to(kFloat32), tensor(seq, {25}).to(kInt64), right), want,
                             {5, 8});
  }
  test::expect_tensor_near(searchsorted(empty({0}), tensor(std::vector<double>{1, 2})), {0, 0}, {2});
  test::expect_error([] { searchsorted(zeros({2, 2}), zeros({3})); }, {"searchsorted", "1-D", "(2, 2)"});
}

// ---- repeat ----

TEST(Repeat, MatchesReferenceInEveryDtypeAndLayout) {
  std::mt19937 rng(17);
  const Shape shape{2, 3};
  const std::vector<Shape> repeat_sets{{2, 3}, {1, 1}, {2, 1, 2}, {3, 0}, {1, 2, 1, 1}};
  for (DType dtype : test::kAllDTypes)
    for (Layout layout : test::kLayouts)
      for (const Shape& repeats : repeat_sets) {
        SCOPED_TRACE(what(dtype, layout, "repeats " + shape_str(repeats)));
        Tensor x = test::random_tensor(shape, dtype, rng, layout);
        auto xv = values(x);
        size_t lead = repeats.size() - shape.size();
        Shape out_shape(repeats.size());
        for (size_t i = 0; i < repeats.size(); ++i) out_shape[i] = repeats[i] * (i < lead ? 1 : shape[i - lead]);
        std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
        for (size_t f = 0; f < want.size(); ++f) {
          Shape c = unravel(static_cast<int64_t>(f), out_shape);
          Shape src(c.begin() + static_cast<int64_t>(lead), c.end());
          for (size_t i = 0; i < src.size(); ++i) src[i] %= shape[i];
          want[f] = xv[ravel(src, shape)];
        }
        Tensor out = repeat(x, repeats);
        EXPECT_FALSE(out.shares_storage_with(x));
        test::expect_tensor_near(out, want, out_shape);
      }
}

TEST(Repeat, ScalarAndErrors) {
  test::expect_tensor_near(repeat(scalar_tensor(4.0), {2, 1}), {4, 4}, {2, 1});
  test::expect_error([] { repeat(zeros({2, 3}), {2}); }, {"repeat", "(2)", "(2, 3)"});
  test::expect_error([] { repeat(zeros({2}), {-1}); }, {"repeat", "non-negative"});
}

// ---- pad ----

TEST(Pad, MatchesReferenceInEveryDtypeLayoutAndPadding) {
  std::mt19937 rng(18);
  const Shape shape{3, 4, 5};
  const std::vector<Shape> pad_sets{{1, 2}, {0, 0, 2, 1}, {-1, 2, 1, -2}, {1, 1, 1, 1, 1, 1}, {-2, -3}, {}};
  for (DType dtype : test::kAllDTypes)
    for (Layout layout : test::kLayouts)
      for (const Shape& pads : pad_sets) {
        SCOPED_TRACE(what(dtype, layout, "pads " + shape_str(pads)));
        Tensor x = test::random_tensor(shape, dtype, rng, layout);
        auto xv = values(x);
        Shape out_shape = shape, before(3, 0);
        for (size_t j = 0; j < pads.size() / 2; ++j) {
          before[2 - j] = pads[2 * j];
          out_shape[2 - j] += pads[2 * j] + pads[2 * j + 1];
        }
        std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
        for (size_t f = 0; f < want.size(); ++f) {
          Shape c = unravel(static_cast<int64_t>(f), out_shape);
          bool inside = true;
          for (size_t d = 0; d < 3; ++d) {
            c[d] -= before[d];
            inside &= c[d] >= 0 && c[d] < shape[d];
          }
          want[f] = inside ? xv[ravel(c, shape)] : in_dtype(7, dtype);
        }
        Tensor out = pad(x, pads, 7);
        EXPECT_EQ(out.dtype(), dtype);
        test::expect_tensor_near(out, want, out_shape);
      }
}

TEST(Pad, ZeroSizeAndErrors) {
  test::expect_tensor_near(pad(empty({0}), {1, 2}, 1.5), {1.5, 1.5, 1.5}, {3});
  test::expect_tensor_near(pad(arange(4, kFloat32), {-4, 0}), {}, {0});
  test::expect_error([] { pad(zeros({2, 3}), {1, 2, 3}); }, {"pad", "odd", "(1, 2, 3)"});
  test::expect_error([] { pad(zeros({2}), {1, 1, 1, 1}); }, {"pad", "2 pairs", "(2)"});
  test::expect_error([] { pad(zeros({2, 3}), {-2, -2}); }, {"pad", "dim 1", "size 3", "negative"});
}

}  // namespace
}  // namespace kiln
