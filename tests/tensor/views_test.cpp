// Views: every view shares storage with its base and reads the elements PyTorch's would (checked against
// index arithmetic done by hand here).
#include "test_util.h"

namespace kiln {
namespace {

using test::values;

Tensor iota(IntArrayRef shape) { return arange(shape_numel(shape), kFloat32).view(shape); }

// The suites' reader of all elements (test::values, one walk over the strides) against its reader of one
// (test::element, the position divided by each size), on every layout the suites draw, a broadcast view (a
// zero stride), a permuted one, a scalar and an empty tensor: the references of every suite rest on both.
TEST(Views, TheTestsElementReadersAgreeOnEveryLayout) {
  std::mt19937 rng(5);
  std::vector<Tensor> cases;
  for (test::Layout layout : test::kLayouts)
    for (DType dtype : {kFloat32, kFloat16, kInt64, kBool}) cases.push_back(test::random_tensor({3, 4, 5}, dtype, rng, layout));
  const Tensor x = test::random_tensor({3, 1, 5}, kFloat64, rng);
  cases.push_back(x.expand({3, 4, 5}));
  cases.push_back(test::random_tensor({2, 3, 4}, kInt32, rng).permute({2, 0, 1}));
  cases.push_back(test::random_tensor({}, kFloat32, rng));
  cases.push_back(zeros({2, 0, 3}));
  for (const Tensor& t : cases) {
    const std::vector<double> all = values(t);
    ASSERT_EQ(static_cast<int64_t>(all.size()), t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(all[static_cast<size_t>(i)], test::element(t, i)) << shape_str(t.sizes()) << " " << i;
  }
  // and against values written in a known order
  EXPECT_EQ(values(arange(6, kFloat32).view({2, 3}).t()), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Views, ViewAndReshape) {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({6, 4});
  EXPECT_TRUE(v.shares_storage_with(x));
  EXPECT_EQ(v.sizes(), (Shape{6, 4}));
  EXPECT_EQ(x.view({-1}).sizes(), (Shape{24}));
  EXPECT_EQ(x.view({4, -1}).sizes(), (Shape{4, 6}));
  test::expect_error([&] { (void)x.view({5, -1}); }, {"view", "(5, -1)", "(2, 3, 4)"});
  test::expect_error([&] { (void)x.view({-1, -1}); }, {"view", "only one dim"});
  // A transposed tensor cannot be flattened by a view; reshape copies.
  Tensor t = x.transpose(0, 2);
  test::expect_error([&] { (void)t.view({-1}); }, {"view", "reshape"});
  Tensor r = t.reshape({-1});
  EXPECT_FALSE(r.shares_storage_with(x));
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) want.push_back(i * 12 + j * 4 + k);
  EXPECT_EQ(values(r), want);
  // Splitting a transposed dim that stays contiguous within itself is still a view.
  Tensor u = iota({4, 6}).t();  // (6, 4), strides (1, 6)
  Tensor w = u.view({2, 3, 4});
  EXPECT_TRUE(w.shares_storage_with(u));
  EXPECT_EQ(values(w), values(u));
}

TEST(Views, ViewOfScalarAndEmpty) {
  Tensor s = full({}, 3.0);
  EXPECT_EQ(s.view({1, 1}).sizes(), (Shape{1, 1}));
  EXPECT_EQ(s.reshape({1}).sizes(), (Shape{1}));
  EXPECT_EQ(ones({1, 1}).view({}).dim(), 0);
  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.view({3, 0}).sizes(), (Shape{3, 0}));
  EXPECT_EQ(e.reshape({-1, 3}).sizes(), (Shape{0, 3}));
}

TEST(Views, TransposePermuteT) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(p.index({k, i, j}).item<double>(), i * 12 + j * 4 + k);
  EXPECT_EQ(x.transpose(-1, 0).sizes(), (Shape{4, 3, 2}));
  test::expect_error([&] { (void)x.permute({0, 0, 1}); }, {"permute", "twice"});
  test::expect_error([&] { (void)x.permute({0, 1}); }, {"permute"});
  test::expect_error([&] { (void)x.t(); }, {"t:", "(2, 3, 4)"});
  EXPECT_EQ(iota({5}).t().sizes(), (Shape{5}));
  EXPECT_EQ(x.mT().sizes(), (Shape{2, 4, 3}));
}

TEST(Views, NarrowSliceSelect) {
  Tensor x = iota({4, 5});
  EXPECT_EQ(values(x.narrow(1, 1, 2)), (std::vector<double>{1, 2, 6, 7, 11, 12, 16, 17}));
  EXPECT_EQ(values(x.slice(0, 1, std::nullopt, 2)), (std::vector<double>{5, 6, 7, 8, 9, 15, 16, 17, 18, 19}));
  EXPECT_EQ(values(x.slice(1, -2)), (std::vector<double>{3, 4, 8, 9, 13, 14, 18, 19}));
  EXPECT_EQ(x.slice(1, 10, 20).sizes(), (Shape{4, 0}));  // clamped, as Python slices
  EXPECT_EQ(values(x.select(1, -1)), (std::vector<double>{4, 9, 14, 19}));
  EXPECT_EQ(values(x[2]), (std::vector<double>{10, 11, 12, 13, 14}));
  test::expect_error([&] { (void)x.narrow(0, 3, 2); }, {"narrow", "out of range", "size 4"});
  test::expect_error([&] { (void)x.select(0, 4); }, {"select", "index 4", "size 4"});
  test::expect_error([&] { (void)x.select(2, 0); }, {"select", "dim 2"});
  test::expect_error([&] { (void)x.slice(0, 0, 2, 0); }, {"slice", "step"});
}

TEST(Views, BasicIndexing) {
  Tensor x = iota({2, 3, 4});
  Tensor a = x.index({1, Slice(None, None, 2), None});
  EXPECT_EQ(a.sizes(), (Shape{2, 1, 4}));
  EXPECT_EQ(values(a), (std::vector<double>{12, 13, 14, 15, 20, 21, 22, 23}));
  Tensor b = x.index({Ellipsis, 1});
  EXPECT_EQ(b.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(b), (std::vector<double>{1, 5, 9, 13, 17, 21}));
  Tensor c = x.index({Slice(), Ellipsis, Slice(1, 3)});
  EXPECT_EQ(c.sizes(), (Shape{2, 3, 2}));
  EXPECT_TRUE(c.shares_storage_with(x));
  test::expect_error([&] { (void)x.index({0, 0, 0, 0}); }, {"index", "too many"});
}

TEST(Views, ExpandSqueezeUnsqueeze) {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(values(e.select(0, 1).select(0, 2)), (std::vector<double>{2, 2, 2, 2}));
  EXPECT_EQ(x.expand({-1, 5}).sizes(), (Shape{3, 5}));
  test::expect_error([&] { (void)x.expand({4, 4}); }, {"expand", "(3, 1)", "(4, 4)"});
  Tensor y = iota({1, 3, 1, 2});
  EXPECT_EQ(y.squeeze().sizes(), (Shape{3, 2}));
  EXPECT_EQ(y.squeeze(2).sizes(), (Shape{1, 3, 2}));
  EXPECT_EQ(y.squeeze(1).sizes(), (Shape{1, 3, 1, 2}));  // not size 1: unchanged
  EXPECT_EQ(y.unsqueeze(-1).sizes(), (Shape{1, 3, 1, 2, 1}));
  EXPECT_EQ(y.unsqueeze(0).sizes(), (Shape{1, 1, 3, 1, 2}));
  test::expect_error([&] { (void)y.unsqueeze(6); }, {"unsqueeze", "dim 6"});
}

TEST(Views, FlattenUnflattenUnfoldDiagonal) {
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(x.flatten().sizes(), (Shape{24}));
  EXPECT_EQ(x.flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(x.flatten(0, 1).sizes(), (Shape{6, 4}));
  EXPECT_EQ(x.unflatten(2, {2, 2}).sizes(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(full({}, 1.0).flatten().sizes(), (Shape{1}));
  Tensor base = iota({7});
  Tensor u = base.unfold(0, 3, 2);  // windows [0,1,2], [2,3,4], [4,5,6]
  EXPECT_EQ(u.sizes(), (Shape{3, 3}));
  EXPECT_EQ(values(u), (std::vector<double>{0, 1, 2, 2, 3, 4, 4, 5, 6}));
  EXPECT_TRUE(u.shares_storage_with(base));
  Tensor m = iota({3, 4});
  EXPECT_EQ(values(m.diagonal()), (std::vector<double>{0, 5, 10}));
  EXPECT_EQ(values(m.diagonal(1)), (std::vector<double>{1, 6, 11}));
  EXPECT_EQ(values(m.diagonal(-1)), (std::vector<double>{4, 9}));
}

TEST(Views, AsStridedChecksBounds) {
  Tensor x = iota({6});
  EXPECT_EQ(values(x.as_strided({2, 2}, {1, 2})), (std::vector<double>{0, 2, 1, 3}));
  test::expect_error([&] { (void)x.as_strided({3, 3}, {3, 1}); }, {"as_strided", "outside the storage"});
}

TEST(Views, InPlaceWriteThroughViewBumpsSharedVersion) {
  Tensor x = zeros({2, 3});
  Tensor row = x[1];
  uint64_t before = x.version();
  row.fill_(5);
  EXPECT_GT(x.version(), before);
  EXPECT_EQ(values(x), (std::vector<double>{0, 0, 0, 5, 5, 5}));
  row.add_(ones({3}));
  EXPECT_EQ(values(x), (std::vector<double>{0, 0, 0, 6, 6, 6}));
}

// Copies and element-wise ops whose innermost dim is short (3 channels to NHWC, a pixel shuffle's 2, a
// broadcast row of 4) iterate a longer dim innermost (StridedIter::prefer_long_runs): every element must still
// land where index arithmetic says, for outputs of any strides.
TEST(Views, ShortInnermostDimsCopyEveryElementOnce) {
  const Tensor x = iota({4, 3, 5, 6});
  const std::vector<double> xv = values(x);
  // NCHW to NHWC: out[n][h][w][c] = x[n][c][h][w].
  std::vector<double> nhwc;
  for (int n = 0; n < 4; ++n)
    for (int h = 0; h < 5; ++h)
      for (int w = 0; w < 6; ++w)
        for (int c = 0; c < 3; ++c) nhwc.push_back(xv[((n * 3 + c) * 5 + h) * 6 + w]);
  EXPECT_EQ(values(x.permute({0, 2, 3, 1}).contiguous()), nhwc);
  // A pixel shuffle's copy: (1, 2 * 2 * 2, 3, 4) as (C, r, r, H, W) to (C, H, r, W, r).
  const Tensor p = iota({2, 2, 2, 3, 4});
  const std::vector<double> pv = values(p);
  std::vector<double> shuffled;
  for (int c = 0; c < 2; ++c)
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < 2; ++i)
        for (int w = 0; w < 4; ++w)
          for (int j = 0; j < 2; ++j) shuffled.push_back(pv[(((c * 2 + i) * 2 + j) * 3 + h) * 4 + w]);
  EXPECT_EQ(values(p.permute({0, 3, 1, 4, 2}).contiguous()), shuffled);
  // Into a non-contiguous output: copy_ into the NHWC view of an NCHW tensor is the inverse.
  Tensor back = zeros({4, 3, 5, 6});
  back.permute({0, 2, 3, 1}).copy_(tensor(nhwc, {4, 5, 6, 3}));
  EXPECT_EQ(values(back), xv);
  // A broadcast add with rows of 4 and of 2 x 3, and a dtype conversion on the way.
  const Tensor rows = iota({64, 4}), bias = tensor(std::vector<double>{100, 200, 300, 400}, {4}, kFloat64);
  std::vector<double> sum;
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 4; ++c) sum.push_back(r * 4 + c + 100 * (c + 1));
  EXPECT_EQ(values(rows + bias), sum);
  const Tensor small = iota({40, 2, 3}).transpose(1, 2).to(kFloat64);
  std::vector<double> tv;
  for (int a = 0; a < 40; ++a)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) tv.push_back(a * 6 + i * 3 + j);
  EXPECT_EQ(values(small), tv);
}

// Copies into a contiguous tensor from one whose elements are adjacent along another dim than the last run in
// 32 x 32 tiles (copy_cpu.cpp): every element lands where index arithmetic says, for partial tiles at the
// edges, a unit-stride dim in the middle, other dims around the two, and every element size.
TEST(Views, TransposedCopiesInTilesPutEveryElementInPlace) {
  // (37, 50).t(): partial tiles along both dims. uint8 holds the positions mod 251.
  for (DType d : {kUInt8, kFloat16, kFloat32, kFloat64}) {
    const double wrap = d == kUInt8 ? 251 : 1e9;
    std::vector<double> m, want;
    for (int f = 0; f < 37 * 50; ++f) m.push_back(std::fmod(f, wrap));
    for (int j = 0; j < 50; ++j)
      for (int i = 0; i < 37; ++i) want.push_back(std::fmod(i * 50 + j, wrap));
    EXPECT_EQ(values(test::make_tensor(m, {37, 50}, kFloat64).to(d).t().contiguous()), want) << dtype_name(d);
  }
  // (3, 40, 20, 17) permuted to (3, 17, 20, 40) ... as (a, b, c, e) -> (a, e, c, b): unit stride (e) in the
  // middle of the result, with dims before and between the two tile dims.
  const Tensor v = iota({3, 40, 20, 17});
  const std::vector<double> vv = values(v);
  std::vector<double> permuted;
  for (int a = 0; a < 3; ++a)
    for (int e = 0; e < 17; ++e)
      for (int c = 0; c < 20; ++c)
        for (int b = 0; b < 40; ++b) permuted.push_back(vv[((a * 40 + b) * 20 + c) * 17 + e]);
  EXPECT_EQ(values(v.permute({0, 3, 2, 1}).contiguous()), permuted);
  // A transposed slice (strides that are not the base's sizes) and a broadcast last dim (stride 0).
  const Tensor tall = iota({64, 20});
  std::vector<double> sliced;
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 29; ++j) sliced.push_back((3 + 2 * j) * 20 + i);
  EXPECT_EQ(values(tall.slice(0, 3, 61, 2).t().contiguous()), sliced);
  const Tensor col = iota({24, 1});
  std::vector<double> spread;
  for (int i = 0; i < 24; ++i)
    for (int j = 0; j < 20; ++j) spread.push_back(i);
  EXPECT_EQ(values(col.expand({24, 20}).contiguous()), spread);
}

}  // namespace
}  // namespace kiln
