// Indexing with index tensors: x.index({...}) and x[mask] against loops that read x element by element through
// its strides, index_put and index_put_ against loops that write a copy, and the errors. The gradients are in
// ops_grad_test.cpp's table (central differences, and their second-order twins).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kiln/kiln.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

// x (4, 5, 6) float64, distinct values; X(i, j, k) reads it without kiln's kernels.
struct Cube {
  Tensor x;
  std::vector<double> v;
  Cube() {
    std::mt19937 rng(7);
    x = random_tensor({4, 5, 6}, kFloat64, rng);
    v = values(x);
  }
  double operator()(int64_t i, int64_t j, int64_t k) const { return v[static_cast<size_t>((i * 5 + j) * 6 + k)]; }
};

// (tensor() reads an empty shape as "1-D"; the reshape makes it 0-dim.)
Tensor ai_ints(const std::vector<int64_t>& v, IntArrayRef shape) { return tensor(v, shape, kInt64).reshape(shape); }
Tensor ai_mask(const std::vector<int>& v, IntArrayRef shape) {
  std::vector<bool> b(v.begin(), v.end());
  return tensor(b).view(shape);
}
int64_t ai_wrap(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

// Checks out (row-major) against expected(flat position) element by element.
void ai_expect(const Tensor& out, IntArrayRef shape, const std::function<double(int64_t)>& expected) {
  ASSERT_EQ(out.sizes(), Shape(shape.begin(), shape.end()));
  const std::vector<double> got = values(out);
  for (int64_t f = 0; f < out.numel(); ++f) ASSERT_EQ(got[static_cast<size_t>(f)], expected(f)) << "element " << f;
}

TEST(AdvancedIndex, RowsWithRepeatsAndNegativePositions) {
  Cube c;
  const std::vector<int64_t> idx = {2, -1, 0, 2, 1, -4};
  const Tensor out = c.x.index({ai_ints(idx, {2, 3})});
  ai_expect(out, {2, 3, 5, 6}, [&](int64_t f) {
    const int64_t k = f % 6, j = f / 6 % 5, ab = f / 30;
    return c(ai_wrap(idx[static_cast<size_t>(ab)], 4), j, k);
  });
  EXPECT_FALSE(out.shares_storage_with(c.x));
  ai_expect(c.x[ai_ints(idx, {2, 3})], {2, 3, 5, 6}, [&](int64_t f) { return values(out)[static_cast<size_t>(f)]; });
}

TEST(AdvancedIndex, OneTensorInTheMiddleKeepsItsPlace) {
  Cube c;
  const std::vector<int64_t> idx = {4, -5, 0, 1, 1, 3};
  ai_expect(c.x.index({Slice(), ai_ints(idx, {2, 3})}), {4, 2, 3, 6}, [&](int64_t f) {
    const int64_t k = f % 6, ab = f / 6 % 6, i = f / 36;
    return c(i, ai_wrap(idx[static_cast<size_t>(ab)], 5), k);
  });
}

TEST(AdvancedIndex, TensorsApartBroadcastAndGoFirst) {
  Cube c;
  const std::vector<int64_t> i0 = {0, 3, -1}, i2 = {5, -6};  // (3) and (2, 1) broadcast to (2, 3)
  ai_expect(c.x.index({ai_ints(i0, {3}), Slice(), ai_ints(i2, {2, 1})}), {2, 3, 5}, [&](int64_t f) {
    const int64_t j = f % 5, b = f / 5 % 3, a = f / 15;
    return c(ai_wrap(i0[static_cast<size_t>(b)], 4), j, ai_wrap(i2[static_cast<size_t>(a)], 6));
  });
}

TEST(AdvancedIndex, TensorsSideBySideStayInPlace) {
  Cube c;
  const std::vector<int64_t> i1 = {4, 0, 2}, i2 = {1, 5, 0};
  ai_expect(c.x.index({Slice(), ai_ints(i1, {3}), ai_ints(i2, {3})}), {4, 3}, [&](int64_t f) {
    const int64_t b = f % 3, i = f / 3;
    return c(i, i1[static_cast<size_t>(b)], i2[static_cast<size_t>(b)]);
  });
  // An int between two tensors picks first, leaving them side by side.
  const std::vector<int64_t> i0 = {3, 1};
  ai_expect(c.x.index({ai_ints(i0, {2}), 2, ai_ints({5, 0}, {2})}), {2},
            [&](int64_t f) { return c(i0[static_cast<size_t>(f)], 2, f == 0 ? 5 : 0); });
}

TEST(AdvancedIndex, MasksStandForTheirTrueCoordinates) {
  Cube c;
  std::vector<int> m45(20), m56(30);
  for (size_t i = 0; i < m45.size(); ++i) m45[i] = (i * 7) % 3 == 0;
  for (size_t i = 0; i < m56.size(); ++i) m56[i] = (i * 5) % 4 == 1;
  std::vector<std::pair<int64_t, int64_t>> t45, t56;  // the true coordinates, row-major
  for (int64_t i = 0; i < 20; ++i)
    if (m45[static_cast<size_t>(i)]) t45.push_back({i / 5, i % 5});
  for (int64_t i = 0; i < 30; ++i)
    if (m56[static_cast<size_t>(i)]) t56.push_back({i / 6, i % 6});
  const int64_t n45 = static_cast<int64_t>(t45.size()), n56 = static_cast<int64_t>(t56.size());
  ai_expect(c.x.index({ai_mask(m45, {4, 5})}), {n45, 6}, [&](int64_t f) {
    const auto [i, j] = t45[static_cast<size_t>(f / 6)];
    return c(i, j, f % 6);
  });
  ai_expect(c.x.index({Slice(), ai_mask(m56, {5, 6})}), {4, n56}, [&](int64_t f) {
    const auto [j, k] = t56[static_cast<size_t>(f % n56)];
    return c(f / n56, j, k);
  });
  // A mask over every dim is masked_select.
  const Tensor full_mask = c.x > 0.5;
  const Tensor picked = c.x[full_mask];
  EXPECT_TRUE(equal(picked, c.x.masked_select(full_mask)));
  EXPECT_GT(picked.numel(), 0);
  // A mask and a position tensor broadcast together: the mask's 3 true rows against 3 positions.
  const std::vector<int> rows = {1, 0, 1, 1};
  ai_expect(c.x.index({ai_mask(rows, {4}), Slice(), ai_ints({2, -1, 0}, {3})}), {3, 5}, [&](int64_t f) {
    const int64_t r[] = {0, 2, 3}, k[] = {2, 5, 0};
    return c(r[f / 5], f % 5, k[f / 5]);
  });
}

TEST(AdvancedIndex, WithEllipsisNoneAndZeroDimIndices) {
  Cube c;
  const std::vector<int64_t> k = {5, 0, 5};
  ai_expect(c.x.index({Ellipsis, ai_ints(k, {3})}), {4, 5, 3}, [&](int64_t f) {
    return c(f / 15, f / 3 % 5, k[static_cast<size_t>(f % 3)]);
  });
  ai_expect(c.x.index({None, Slice(), ai_ints({1, 3}, {2})}), {1, 4, 2, 6}, [&](int64_t f) {
    return c(f / 12, f / 6 % 2 == 0 ? 1 : 3, f % 6);
  });
  // A 0-dim index tensor removes its dim, as an int does, but copies.
  const Tensor picked = c.x.index({Slice(), ai_ints({3}, {})});
  EXPECT_TRUE(equal(picked, c.x.select(1, 3)));
  EXPECT_FALSE(picked.shares_storage_with(c.x));
}

TEST(AdvancedIndex, Int32NonContiguousAndEmpty) {
  Cube c;
  const Tensor xt = c.x.transpose(0, 2);  // (6, 5, 4), not contiguous
  const Tensor i32 = tensor(std::vector<int32_t>{3, -2, 0}, {3}, kInt32);
  ai_expect(xt.index({i32, Slice(), ai_ints({1, 1, 3}, {3})}), {3, 5}, [&](int64_t f) {
    const int64_t k[] = {3, 4, 0}, i[] = {1, 1, 3};
    return c(i[f / 5], f % 5, k[f / 5]);
  });
  EXPECT_EQ(c.x.index({Slice(), ai_ints({}, {0})}).sizes(), Shape({4, 0, 6}));
  EXPECT_EQ(c.x.index({zeros({4, 5}, kBool)}).sizes(), Shape({0, 6}));
  EXPECT_EQ(zeros({0, 3}).index({ai_ints({}, {0})}).sizes(), Shape({0, 3}));
}

TEST(AdvancedIndex, IndexPutWritesAndBroadcastsValues) {
  Cube c;
  Tensor y = c.x.clone();
  const Tensor v = tensor(std::vector<double>{1, 2, 3, 4, 5, 6});
  y.index_put_({Slice(), ai_ints({3, -5}, {2})}, v);  // dims 1 = 3 and 0 of every row take v
  ai_expect(y, {4, 5, 6}, [&](int64_t f) {
    const int64_t k = f % 6, j = f / 6 % 5, i = f / 30;
    return j == 3 || j == 0 ? static_cast<double>(k + 1) : c(i, j, k);
  });
  // The out-of-place form leaves its input alone.
  const Tensor z = c.x.index_put({ai_ints({1}, {1}), ai_ints({2}, {1}), ai_ints({3}, {1})}, tensor(std::vector<double>{-9}));
  ai_expect(z, {4, 5, 6}, [&](int64_t f) { return f == (1 * 5 + 2) * 6 + 3 ? -9.0 : c.v[static_cast<size_t>(f)]; });
  ai_expect(c.x, {4, 5, 6}, [&](int64_t f) { return c.v[static_cast<size_t>(f)]; });
}

TEST(AdvancedIndex, AccumulateAddsRepeatedPlaces) {
  Tensor y = zeros({5}, kFloat64);
  y.index_put_({ai_ints({1, 3, 1, -4}, {4})}, tensor(std::vector<double>{1, 2, 3, 4}), true);
  ai_expect(y, {5}, [](int64_t f) { return std::vector<double>{0, 8, 0, 2, 0}[static_cast<size_t>(f)]; });
  // Without accumulate one of the repeated writes wins.
  Tensor w = zeros({3}, kFloat64);
  w.index_put_({ai_ints({2, 2}, {2})}, tensor(std::vector<double>{5, 7}));
  const double last = values(w)[2];
  EXPECT_TRUE(last == 5 || last == 7) << last;
}

TEST(AdvancedIndex, MaskPutIsMaskedFill) {
  Cube c;
  Tensor y = c.x.clone();
  y.index_put_({c.x > 0}, -1.0);
  EXPECT_TRUE(equal(y, c.x.masked_fill(c.x > 0, -1.0)));
  // A mask over the leading dims writes whole rows; the values broadcast over them.
  Tensor r = c.x.clone();
  std::vector<int> m(20, 0);
  m[3] = m[17] = 1;  // (0, 3) and (3, 2)
  r.index_put_({ai_mask(m, {4, 5})}, tensor(std::vector<double>{10, 20}).view({2, 1}));
  ai_expect(r, {4, 5, 6}, [&](int64_t f) {
    const int64_t ij = f / 6;
    return ij == 3 ? 10.0 : ij == 17 ? 20.0 : c.v[static_cast<size_t>(f)];
  });
}

TEST(AdvancedIndex, IndexPutIntoNonContiguousAndViews) {
  Cube c;
  Tensor base = c.x.clone();
  Tensor yt = base.transpose(0, 2);  // (6, 5, 4) over base's storage
  yt.index_put_({ai_ints({5, 0}, {2}), Slice(1, 3), ai_ints({2, 2}, {2})}, 0.0);
  ai_expect(base, {4, 5, 6}, [&](int64_t f) {
    const int64_t k = f % 6, j = f / 6 % 5, i = f / 30;
    const bool hit = i == 2 && (k == 5 || k == 0) && (j == 1 || j == 2);
    return hit ? 0.0 : c(i, j, k);
  });
  // Basic indices alone write through their view.
  Tensor y = c.x.clone();
  y.index_put_({Slice(), 1}, 7.0);
  ai_expect(y, {4, 5, 6}, [&](int64_t f) { return f / 6 % 5 == 1 ? 7.0 : c.v[static_cast<size_t>(f)]; });
  // A view of y written in place changes y.
  Tensor row = y[2];
  row.index_put_({ai_ints({4}, {1})}, tensor(std::vector<double>{1, 2, 3, 4, 5, 6}).view({1, 6}));
  EXPECT_EQ(values(y[2][4]), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(AdvancedIndex, ValuesThatOverlapTheTargetAreReadFirst) {
  Tensor y = arange(6, kFloat64);
  y.index_put_({ai_ints({1, 2, 3, 4, 5}, {5})}, y.index({Slice(0, 5)}));
  EXPECT_EQ(values(y), (std::vector<double>{0, 0, 1, 2, 3, 4}));
}

TEST(AdvancedIndex, RecordedInPlaceWriteGivesTheOutOfPlaceGradients) {
  std::mt19937 rng(3);
  const Tensor w0 = random_tensor({4, 3}, kFloat64, rng), v0 = random_tensor({3}, kFloat64, rng);
  const Tensor weights = random_tensor({4, 3}, kFloat64, rng);
  const Tensor idx = ai_ints({2, 0}, {2});
  auto run = [&](bool inplace) {
    Tensor w = w0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    Tensor h = w * 3.0;
    if (inplace) h.index_put_({idx}, v, true);
    else h = h.index_put({idx}, v, true);
    (h * h * weights).sum().backward();
    return std::pair{w.grad(), v.grad()};
  };
  const auto [gw, gv] = run(true);
  const auto [ow, ov] = run(false);
  EXPECT_TRUE(equal(gw, ow));
  EXPECT_TRUE(equal(gv, ov));
  // d/dv of sum(weights * h^2) with h[r] = 3 w[r] + v at rows 2 and 0: 2 h weights summed over those rows.
  const std::vector<double> W = values(w0), V = values(v0), M = values(weights);
  std::vector<double> expected(3, 0);
  for (int64_t r : {2, 0})
    for (int64_t k = 0; k < 3; ++k) {
      const size_t f = static_cast<size_t>(r * 3 + k);
      expected[static_cast<size_t>(k)] += 2 * (3 * W[f] + V[static_cast<size_t>(k)]) * M[f];
    }
  const std::vector<double> got = values(gv);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(got[k], expected[k], 1e-12);
}

TEST(AdvancedIndex, ErrorsSayWhatAndWhere) {
  Cube c;
  expect_error([&] { c.x.index({Slice(), ai_ints({0, 5}, {2})}); },
               {"index 5 is out of range for dim 1 of size 5", "position 1"});
  expect_error([&] { c.x.index({ai_ints({-5}, {1})}); }, {"index -5 is out of range for dim 0 of size 4"});
  expect_error([&] { c.x.index({zeros({2}, kFloat32)}); }, {"int64, int32 or bool", "position 0", "float32"});
  expect_error([&] { c.x.index({zeros({4, 4}, kBool)}); }, {"mask at position 0 has shape (4, 4)", "(4, 5)"});
  expect_error([&] { c.x.index({0, zeros({5, 6, 1}, kBool)}); }, {"too many indices", "index 4 dims"});
  expect_error([&] { c.x.index({ai_ints({0, 1}, {2}), Slice(), ai_ints({0, 1, 2}, {3})}); },
               {"index", "(2)", "(3)"});
  Tensor y = c.x.clone();
  expect_error([&] { y.index_put_({ai_ints({0}, {1})}, zeros({6}, kFloat32)); },
               {"index_put_", "values are float32 but the tensor is float64"});
  expect_error([&] { y.index_put_({ai_ints({0}, {1})}, zeros({4}, kFloat64)); },
               {"values of shape (4) do not broadcast to the indexed shape (1, 5, 6)"});
  expect_error([&] { ops::index(c.x, {ai_ints({0}, {1})}); }, {"ops::index takes basic indices only"});
  // A failed write leaves the tensor as it was.
  ai_expect(y, {4, 5, 6}, [&](int64_t f) { return c.v[static_cast<size_t>(f)]; });
}

// Counts the bytes the CPU allocator hands out while it is installed, and passes every call on. One instance
// for the whole run: a storage keeps the allocator that made it, and frees through it after the test.
class CountingCpuAllocator : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    bytes += nbytes;
    return cpu_allocator()->allocate(nbytes, device);
  }
  void deallocate(void* ptr, size_t nbytes, Device device) override {
    cpu_allocator()->deallocate(ptr, nbytes, device);
  }
  size_t bytes = 0;
};

// The bytes allocated on the CPU while `body` runs.
size_t cpu_bytes_allocated_by(const std::function<void()>& body) {
  static CountingCpuAllocator counting;
  counting.bytes = 0;
  set_allocator(DeviceType::CPU, &counting);
  try {
    body();
  } catch (...) {
    set_allocator(DeviceType::CPU, cpu_allocator());
    throw;
  }
  set_allocator(DeviceType::CPU, cpu_allocator());
  return counting.bytes;
}

// The gradient of a few picked rows (x[idx], gather, topk) is one zero-filled buffer of x's size with the rows
// added in. x[idx]'s used to be three: its whole x[:] view filled a zeroed copy, and the index_add of the rows
// copied its zeros before adding. gather's and topk's copied their zeros too.
TEST(AdvancedIndex, BackwardOfAFewRowsWritesOneInputSizedBuffer) {
  const Tensor x = randn({4096, 64}).requires_grad_();
  const size_t x_bytes = static_cast<size_t>(x.numel()) * sizeof(float);
  const Tensor idx = randint(0, 4096, {64});
  for (const auto& [what, pick] : std::vector<std::pair<const char*, std::function<Tensor()>>>{
           {"x[idx]", [&] { return x.index({idx}); }},
           {"gather(x, 0, idx)", [&] { return gather(x, 0, idx.view({64, 1}).expand({64, 64}).contiguous()); }},
           {"topk(x, 1, 0)", [&] { return topk(x, 1, 0).first; }}}) {
    x.set_grad(Tensor());
    const Tensor y = pick().sum();
    const size_t bytes = cpu_bytes_allocated_by([&] { y.backward(); });
    EXPECT_LT(bytes, x_bytes + x_bytes / 4) << what << "'s backward allocated " << bytes << " bytes for an x of "
                                            << x_bytes;
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().sum().item<float>(), static_cast<float>(pick().numel())) << what;
  }
}

}  // namespace
}  // namespace kiln::test
