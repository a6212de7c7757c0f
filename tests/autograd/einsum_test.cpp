// einsum against a brute-force sum written here: for every assignment of values to the subscripts, the
// product of the operands' elements is added to the output's element. Implicit outputs and "..." are checked
// against the explicit equations they stand for; the gradients are in ops_grad_test.cpp's table.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

// The brute force for letter-only equations with "->"; a subscript of size 1 in an operand broadcasts.
Tensor brute_einsum(const std::string& eq, const std::vector<Tensor>& xs) {
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow), rhs = eq.substr(arrow + 2);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < xs.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d)
      size[terms[i][d]] = std::max(size[terms[i][d]], xs[i].size(static_cast<int64_t>(d)));
  std::vector<char> letters;
  for (const auto& [c, n] : size) letters.push_back(c);
  Shape out_shape;
  for (char c : rhs) out_shape.push_back(size[c]);
  std::vector<double> out(static_cast<size_t>(shape_numel(out_shape)), 0.0);
  std::vector<std::vector<double>> vals;
  for (const Tensor& x : xs) vals.push_back(values(x));
  for (const auto& [c, n] : size)
    if (n == 0) return tensor(out, out_shape).reshape(out_shape);
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  while (true) {
    double prod = 1;
    for (size_t i = 0; i < xs.size(); ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const int64_t n = xs[i].size(static_cast<int64_t>(d));
        flat = flat * n + (n == 1 ? 0 : at[terms[i][d]]);
      }
      prod *= vals[i][static_cast<size_t>(flat)];
    }
    int64_t o = 0;
    for (char c : rhs) o = o * size[c] + at[c];
    out[static_cast<size_t>(o)] += prod;
    size_t k = 0;  // the next assignment, the last letter fastest
    for (; k < letters.size(); ++k) {
      char c = letters[letters.size() - 1 - k];
      if (++at[c] < size[c]) break;
      at[c] = 0;
    }
    if (k == letters.size()) break;
  }
  return tensor(out, out_shape).reshape(out_shape);  // tensor() reads an empty shape as 1-D
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-12 * std::max(1.0, std::fabs(w[i]))) << what << " at " << i;
}

std::vector<Tensor> randoms(std::mt19937& rng, const std::vector<Shape>& shapes) {
  std::vector<Tensor> xs;
  for (const Shape& s : shapes) xs.push_back(random_tensor(s, kFloat64, rng));
  return xs;
}

TEST(Einsum, MatchesTheBruteForceSum) {
  struct Case {
    std::string eq;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
      {"ii->i", {{4, 4}}},
      {"ii->", {{4, 4}}},
      {"iij->j", {{3, 3, 2}}},
      {"iji->ij", {{3, 2, 3}}},
      {"ij->", {{3, 4}}},
      {"ij->ji", {{3, 4}}},
      {"i,i->", {{5}, {5}}},
      {"i,j->ij", {{3}, {4}}},
      {"ij,kl->ijkl", {{2, 3}, {2, 2}}},
      {"ijk,kji->", {{2, 3, 4}, {4, 3, 2}}},
      {"abc,cd,de->abe", {{2, 3, 4}, {4, 5}, {5, 2}}},
      {"i,i,i->i", {{4}, {4}, {4}}},
      {"ij,ij->ij", {{3, 4}, {3, 4}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"ab,ab->ab", {{3, 1}, {1, 4}}},      // size 1 broadcasts
      {"ab,bc->ac", {{3, 1}, {4, 2}}},      // a contracted subscript of size 1 against 4
      {"Ab,bA->A", {{3, 2}, {2, 3}}},       // upper case
      {"ij,jk->ik", {{3, 0}, {0, 2}}},      // an empty sum is 0
      {"ij,jk,kl,lm->im", {{2, 3}, {3, 2}, {2, 4}, {4, 3}}},
      {"ij,ji->j", {{3, 3}, {3, 3}}},       // kept by the output although both have it
      {"ijk->kj", {{2, 3, 4}}},
  };
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    const std::vector<Tensor> xs = randoms(rng, c.shapes);
    expect_close(einsum(c.eq, xs), brute_einsum(c.eq, xs), c.eq);
  }
}

TEST(Einsum, ImplicitOutputIsTheSubscriptsSeenOnceInOrder) {
  std::mt19937 rng(12);
  const std::vector<Tensor> ab = randoms(rng, {{3, 4}, {4, 5}});
  expect_close(einsum("ij,jk", ab), brute_einsum("ij,jk->ik", ab), "ij,jk");
  const Tensor x = random_tensor({3, 4}, kFloat64, rng);
  expect_close(einsum("ba", {x}), x.t(), "ba is a transpose");
  expect_close(einsum("aB", {x}), x.t(), "upper case comes first");
  const Tensor sq = random_tensor({3, 3}, kFloat64, rng);
  const Tensor trace = einsum("ii", {sq});
  EXPECT_EQ(trace.dim(), 0);
  expect_close(trace, brute_einsum("ii->", {sq}), "a trace");
  expect_close(einsum(" i j , j k -> i k ", ab), brute_einsum("ij,jk->ik", ab), "spaces");
}

TEST(Einsum, EllipsisBroadcastsTheDimsNoLetterNames) {
  std::mt19937 rng(13);
  const Tensor a = random_tensor({2, 1, 3, 4}, kFloat64, rng), b = random_tensor({5, 4, 2}, kFloat64, rng);
  // "...ij,...jk->...ik": a's (2, 1) and b's (5) broadcast to (2, 5).
  const Tensor want = brute_einsum("xyij,xyjk->xyik", {a.expand({2, 5, 3, 4}), b.expand({2, 5, 4, 2})});
  expect_close(einsum("...ij,...jk->...ik", {a, b}), want, "batched matmul");
  expect_close(einsum("...ij,...jk", {a, b}), want, "implicit: the broadcast dims first");
  const Tensor m = random_tensor({3, 4, 4}, kFloat64, rng);
  expect_close(einsum("...ii->...i", {m}), brute_einsum("bii->bi", {m}), "batched diagonal");
  expect_close(einsum("i...->...", {m}), brute_einsum("ijk->jk", {m}), "sum over the named dim");
  expect_close(einsum("...ij->ij", {m}), brute_einsum("bij->ij", {m}), "broadcast dims left out are summed");
  expect_close(einsum("...,...->...", {scalar_tensor(2.0, kFloat64), m}), m * 2.0, "0-dim operand");
}

TEST(Einsum, GradientsReachEveryOperand) {
  std::mt19937 rng(14);
  std::vector<Tensor> xs = randoms(rng, {{2, 3, 4}, {4, 5}, {5, 2}});
  for (Tensor& x : xs) x.requires_grad_();
  const Tensor w = random_tensor({2, 3, 2}, kFloat64, rng);
  (einsum("abc,cd,de->abe", xs) * w).sum().backward();
  // d/dx0[a,b,c] = sum_e w[a,b,e] (x1 x2)[c,e], computed by the brute force.
  const Tensor x12 = brute_einsum("cd,de->ce", {xs[1].detach(), xs[2].detach()});
  expect_close(xs[0].grad(), brute_einsum("abe,ce->abc", {w, x12}), "d/d operand 0");
  expect_close(xs[2].grad(), brute_einsum("abc,cd,abe->de", {xs[0].detach(), xs[1].detach(), w}), "d/d operand 2");
}

TEST(Einsum, ErrorsNameTheEquationAndTheOperand) {
  const Tensor a = zeros({2, 3}, kFloat64), b = zeros({3, 4}, kFloat64);
  expect_error([&] { einsum("ij,jk->ik", {a}); }, {"ij,jk->ik", "subscripts for 2 operands", "1 tensors"});
  expect_error([&] { einsum("i1,jk->ik", {a, b}); }, {"'1' is not a subscript"});
  expect_error([&] { einsum("ijk,jk->ik", {a, b}); }, {"operand 0 has shape (2, 3) (2 dims)", "name 3"});
  expect_error([&] { einsum("ij,ik->jk", {a, b}); }, {"subscript i has size 3 in operand 1 but 2 elsewhere"});
  expect_error([&] { einsum("ij,jk->iz", {a, b}); }, {"output's subscript 'z' is in no operand"});
  expect_error([&] { einsum("ij,jk->ii", {a, b}); }, {"'i' appears twice"});
  expect_error([&] { einsum("ii->i", {a}); }, {"subscript i is repeated in operand 0 over dims of sizes 2 and 3"});
  expect_error([&] { einsum("ij,jk->ik", {a, b.to(kFloat32)}); }, {"operand 1 is float32", "operand 0 is float64"});
  expect_error([&] { einsum("i..j", {a}); }, {"'.' that is not part of \"...\""});
  expect_error([&] { einsum("...i...", {a}); }, {"\"...\" appears twice"});
  expect_error([&] { einsum("ij", {}); }, {"no operands"});
}

}  // namespace
}  // namespace kiln::test
