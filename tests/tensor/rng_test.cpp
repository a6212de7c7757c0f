// Random numbers: Philox against the published known-answer vectors, the (seed, offset) contract, thread-count
// independence, and the distributions' moments (5-sigma bounds, so a correct generator fails ~never).
#include "test_util.h"

namespace kiln {
namespace {

TEST(Philox, KnownAnswerVectors) {
  // Philox4x32-10 test vectors from the Random123 distribution (kat_vectors).
  using B = Philox4x32::Block;
  EXPECT_EQ(Philox4x32::generate(B{0, 0, 0, 0}, 0, 0), (B{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32::generate(B{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff),
            (B{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32::generate(B{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0),
            (B{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, ElementIDependsOnlyOnSeedOffsetAndI) {
  Generator g(42);
  Tensor a = rand({10}, {}, &g);
  // The documented mapping: 4 floats per counter, 24 high bits each.
  for (int i = 0; i < 10; ++i) {
    auto block = Philox4x32::generate(uint64_t{42}, static_cast<uint64_t>(i / 4));
    EXPECT_EQ(a.to_vector<float>()[i], uniform_float(block[i % 4])) << i;
  }
  EXPECT_EQ(g.offset(), 3u);  // ceil(10 / 4) counters used
  // A longer draw from the same state starts with the same numbers.
  Generator h(42);
  std::vector<float> longer = rand({100}, {}, &h).to_vector<float>();
  std::vector<float> shorter = a.to_vector<float>();
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
}

TEST(Rng, ManualSeedReproducesAndStatesDiffer) {
  manual_seed(7);
  std::vector<float> a = randn({1000}).to_vector<float>();
  std::vector<float> b = randn({1000}).to_vector<float>();
  manual_seed(7);
  EXPECT_EQ(randn({1000}).to_vector<float>(), a);
  EXPECT_NE(a, b);
  Generator g1(1), g2(2);
  EXPECT_NE(rand({8}, {}, &g1).to_vector<float>(), rand({8}, {}, &g2).to_vector<float>());
  Generator g(5);
  g.set_state(5, 100);
  Generator ref(5);
  (void)rand({400}, {}, &ref);  // uses counters 0..99
  EXPECT_EQ(rand({16}, {}, &g).to_vector<float>(), rand({16}, {}, &ref).to_vector<float>());
}

TEST(Rng, SameNumbersOnAnyThreadCount) {
  int saved = get_num_threads();
  for (DType d : {kFloat32, kFloat64}) {
    set_num_threads(1);
    Generator g1(99);
    Tensor one = randn({300001}, d, &g1);
    Tensor uni1 = rand({300001}, d, &g1);
    set_num_threads(2);
    Generator g2(99);
    Tensor two = randn({300001}, d, &g2);
    Tensor uni2 = rand({300001}, d, &g2);
    EXPECT_EQ(one.to_vector<double>(), two.to_vector<double>()) << d;
    EXPECT_EQ(uni1.to_vector<double>(), uni2.to_vector<double>()) << d;
  }
  set_num_threads(saved);
}

struct Moments {
  double mean = 0, var = 0, lo = 1e300, hi = -1e300;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.lo = std::min(m.lo, x);
    m.hi = std::max(m.hi, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

TEST(Rng, UniformMoments) {
  const int n = 1 << 20;
  for (DType d : test::kFloatDTypes) {
    Generator g(3);
    Tensor t = empty({n}, d);
    uniform_(t, -2.0, 6.0, &g);
    Moments m = moments(t.to_vector<double>());
    // U(a, b): mean (a+b)/2 = 2, variance (b-a)^2/12 = 16/3; standard error of the mean sqrt(var/n).
    EXPECT_NEAR(m.mean, 2.0, 5 * std::sqrt(16.0 / 3 / n) + (d == kBFloat16 ? 0.02 : 0.0)) << d;
    EXPECT_NEAR(m.var, 16.0 / 3, 0.03) << d;
    EXPECT_GE(m.lo, -2.0) << d;
    EXPECT_LE(m.hi, 6.0) << d;
  }
}

TEST(Rng, NormalMoments) {
  const int n = 1 << 20;
  for (DType d : {kFloat32, kFloat64}) {
    Generator g(11);
    Tensor t = empty({n}, d);
    normal_(t, 1.5, 2.0, &g);
    std::vector<double> v = t.to_vector<double>();
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 1.5, 5 * 2.0 / std::sqrt(n)) << d;
    EXPECT_NEAR(m.var, 4.0, 5 * 4.0 * std::sqrt(2.0 / n)) << d;
    // Fraction within one sigma: 0.682689...
    double within = 0;
    for (double x : v) within += std::fabs(x - 1.5) < 2.0;
    EXPECT_NEAR(within / n, 0.682689, 5 * std::sqrt(0.6827 * 0.3173 / n)) << d;
  }
}

TEST(Rng, RandintAndBernoulli) {
  Generator g(5);
  std::vector<int64_t> v = randint(-3, 4, {70000}, kInt64, &g).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[x + 3];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 5 * std::sqrt(10000 * 6.0 / 7));
  // A range beyond 2^32 takes 64-bit draws.
  int64_t big = int64_t{1} << 40;
  for (int64_t x : randint(0, big, {1000}, kInt64, &g).to_vector<int64_t>()) {
    ASSERT_GE(x, 0);
    ASSERT_LT(x, big);
  }
  Tensor b = empty({100000});
  bernoulli_(b, 0.3, &g);
  double ones = 0;
  for (float x : b.to_vector<float>()) {
    ASSERT_TRUE(x == 0.0f || x == 1.0f);
    ones += x;
  }
  EXPECT_NEAR(ones / 100000, 0.3, 5 * std::sqrt(0.21 / 100000));
  test::expect_error([&] { (void)randint(3, 3, {2}); }, {"randint", "low < high"});
  test::expect_error([&] { Tensor i = zeros({2}, kInt64); uniform_(i); }, {"uniform_", "int64"});
}

TEST(Rng, RandpermIsAPermutation) {
  Generator g(8);
  std::vector<int64_t> p = randperm(1000, kInt64, &g).to_vector<int64_t>();
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
}

// multinomial's frequencies against the weights (5-sigma bounds, as above): with replacement, each category's
// share; without, the first pick's share and the second's given the first (w_j / (1 - w_i)), distinct picks,
// and weight-0 categories never drawn. Then the draws are the generator's (the same seed, the same draws),
// and bad weights or counts are errors.
TEST(Rng, MultinomialFrequenciesFollowTheWeights) {
  const std::vector<double> w = {0.1, 0.0, 0.3, 0.6};
  const auto within = [](double got, double p, int64_t n, const std::string& what) {
    EXPECT_NEAR(got, p, 5 * std::sqrt(p * (1 - p) / static_cast<double>(n)) + 1e-12) << what;
  };
  Generator g(11);
  const int64_t n = 40000;
  // Unnormalized weights (x 5), float32: the same distribution.
  const std::vector<int64_t> draws = multinomial(tensor(w) * 5, n, true, &g).to_vector<int64_t>();
  ASSERT_EQ(draws.size(), static_cast<size_t>(n));
  std::vector<int64_t> count(4, 0);
  for (int64_t d : draws) {
    ASSERT_TRUE(d >= 0 && d < 4) << d;
    ++count[static_cast<size_t>(d)];
  }
  EXPECT_EQ(count[1], 0);
  for (size_t c = 0; c < 4; ++c) within(count[c] / double(n), w[c], n, "with replacement, category " + std::to_string(c));

  // Without replacement: rows of 2 picks from the same weights.
  const Tensor rows = tensor(w, {}, kFloat64).unsqueeze(0).expand({n, 4}).contiguous();
  const std::vector<int64_t> pairs = multinomial(rows, 2, false, &g).to_vector<int64_t>();
  std::vector<std::vector<int64_t>> joint(4, std::vector<int64_t>(4, 0));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t a = pairs[static_cast<size_t>(2 * r)], b = pairs[static_cast<size_t>(2 * r + 1)];
    ASSERT_NE(a, b);
    ASSERT_TRUE(a != 1 && b != 1) << "a weight-0 category was drawn";
    ++joint[static_cast<size_t>(a)][static_cast<size_t>(b)];
  }
  for (size_t i : {0, 2, 3}) {
    int64_t first = 0;
    for (int64_t c : joint[i]) first += c;
    within(first / double(n), w[i], n, "first pick " + std::to_string(i));
    for (size_t j : {0, 2, 3}) {
      if (j == i) continue;
      within(joint[i][j] / double(first), w[j] / (1 - w[i]), first,
             "second pick " + std::to_string(j) + " after " + std::to_string(i));
    }
  }
  // Every category once, in some order, when all are drawn.
  std::vector<int64_t> all3 = multinomial(tensor({1.0, 0.0, 2.0, 3.0}), 3, false, &g).to_vector<int64_t>();
  std::sort(all3.begin(), all3.end());
  EXPECT_EQ(all3, (std::vector<int64_t>{0, 2, 3}));

  Generator a(5), b(5);
  EXPECT_TRUE(multinomial(rows.narrow(0, 0, 7), 3, true, &a).equal(multinomial(rows.narrow(0, 0, 7), 3, true, &b)));
  // A million categories: the draws are compared in slices (16 per slice here); two categories carry the weight.
  const int64_t wide = int64_t{1} << 20;
  Tensor sparse = zeros({wide}, kFloat64);
  sparse.narrow(0, 5, 1).fill_(1.0);
  sparse.narrow(0, wide - 1, 1).fill_(1.0);
  const std::vector<int64_t> far = multinomial(sparse, 200, true, &g).to_vector<int64_t>();
  int64_t at_end = 0;
  for (int64_t d : far) {
    ASSERT_TRUE(d == 5 || d == wide - 1) << d;
    at_end += d == wide - 1;
  }
  within(at_end / 200.0, 0.5, 200, "two equal weights a million apart");
  EXPECT_EQ(multinomial(zeros({0, 4}), 2).sizes(), (Shape{0, 2}));
  test::expect_error([] { multinomial(tensor({0.5, -0.1}), 1); }, {"multinomial", "negative, infinite or NaN"});
  test::expect_error([] { multinomial(tensor({0.0, 0.0}), 1); }, {"multinomial", "no positive weight"});
  test::expect_error([] { multinomial(tensor({1.0, 0.0, 1.0}), 3); }, {"fewer categories of positive weight"});
  test::expect_error([] { multinomial(tensor({1.0, 1.0}), 3); }, {"3 samples without replacement from 2"});
  test::expect_error([] { multinomial(ones({2, 2, 2}), 1); }, {"1-D (n) or 2-D"});
  test::expect_error([] { multinomial(tensor(std::vector<int64_t>{1, 2}), 1); }, {"floating point"});
  test::expect_error([] { multinomial(ones({3}), 0); }, {"num_samples = 0"});
}

TEST(Rng, NonContiguousTargetIsFilledInRowMajorOrder) {
  Generator g1(21), g2(21);
  Tensor base = zeros({4, 6});
  Tensor view = base.t();  // (6, 4) view
  uniform_(view, 0, 1, &g1);
  Tensor ref = rand({6, 4}, {}, &g2);
  EXPECT_EQ(view.contiguous().to_vector<float>(), ref.to_vector<float>());
}

}  // namespace
}  // namespace kiln
