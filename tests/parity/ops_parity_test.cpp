// kiln's element-wise rounding, trigonometric and modulo ops, cumsum, sort, topk, isclose, nonzero and
// masked_select against LibTorch's on the same inputs, in float64 and int64, with the cases where libraries
// differ drawn on purpose: halves (round), signs of dividend and divisor (fmod, remainder), ties, NaN and signed
// zeros (sort), infinities (isclose); and the gradients of cumsum, sort, topk and masked_select. Indexing with
// index tensors (index, index_put) over every way of mixing them with ints, slices, None and Ellipsis, and
// einsum over products, diagonals, broadcast dims and implicit outputs, with their gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

// (4, 9) float64: random values in [-3, 3], with halves, integers, signed zeros, infinities and NaN mixed in.
Tensor awkward_values(std::mt19937& rng, bool specials) {
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> v(36);
  for (double& x : v) x = u(rng);
  const double picks[] = {0.5, -0.5, 1.5, -2.5, 2.0, -0.0, 0.0, 3.0, 2.5};
  for (size_t i = 0; i < std::size(picks); ++i) v[4 * i + 1] = picks[i];
  if (specials) v[3] = INFINITY, v[7] = -INFINITY, v[11] = NAN, v[20] = NAN;
  return tensor(v, {4, 9});
}

TEST(OpsParity, UnaryOpsMatchLibTorch) {
  std::mt19937 rng(1);
  const Tensor x = awkward_values(rng, true);
  const torch::Tensor t = to_torch(x);
  const Tensor unit = x / 3.5;  // for asin and acos
  expect_same(floor(x), torch::floor(t), 0, "floor");
  expect_same(ceil(x), torch::ceil(t), 0, "ceil");
  expect_same(round(x), torch::round(t), 0, "round (halves to even)");
  expect_same(trunc(x), torch::trunc(t), 0, "trunc");
  expect_same(reciprocal(x), torch::reciprocal(t), 1e-15, "reciprocal");
  expect_same(log2(x.abs()), torch::log2(t.abs()), 1e-14, "log2");
  expect_same(log10(x.abs()), torch::log10(t.abs()), 1e-14, "log10");
  expect_same(tan(x), torch::tan(t), 1e-13, "tan");
  expect_same(atan(x), torch::atan(t), 1e-15, "atan");
  expect_same(asin(unit), torch::asin(to_torch(unit)), 1e-15, "asin");
  expect_same(acos(unit), torch::acos(to_torch(unit)), 1e-15, "acos");
  expect_same(sinh(x), torch::sinh(t), 1e-15, "sinh");
  expect_same(cosh(x), torch::cosh(t), 1e-15, "cosh");
  expect_same(asinh(x), torch::asinh(t), 1e-15, "asinh");
  expect_same(acosh(x.abs() + 1), torch::acosh(t.abs() + 1), 1e-15, "acosh");
  expect_same(atanh(unit), torch::atanh(to_torch(unit)), 1e-15, "atanh");
  // Integers keep their dtype and values through rounding.
  const Tensor i = tensor(std::vector<int64_t>{-7, 0, 5});
  expect_same(round(i), torch::round(torch::tensor({-7, 0, 5}, torch::kLong)), 0, "round of int64");
}

TEST(OpsParity, Atan2FmodAndRemainderMatchLibTorch) {
  std::mt19937 rng(2);
  const Tensor a = awkward_values(rng, false), b = flip(awkward_values(rng, false), {1});
  const torch::Tensor ta = to_torch(a), tb = to_torch(b);
  expect_same(atan2(a, b), torch::atan2(ta, tb), 1e-15, "atan2");
  expect_same(fmod(a, b), torch::fmod(ta, tb), 1e-15, "fmod");
  expect_same(remainder(a, b), torch::remainder(ta, tb), 1e-15, "remainder");
  // Every sign combination of integer dividend and divisor.
  const std::vector<int64_t> n = {7, -7, 7, -7, 0, 9, -9, 6}, d = {3, 3, -3, -3, 5, 4, -4, -3};
  const Tensor in = tensor(n), id = tensor(d);
  const torch::Tensor tn = torch::tensor(n, torch::kLong), td = torch::tensor(d, torch::kLong);
  expect_same(fmod(in, id), torch::fmod(tn, td), 0, "int64 fmod");
  expect_same(remainder(in, id), torch::remainder(tn, td), 0, "int64 remainder");
  expect_same(remainder(a, 1.25), torch::remainder(ta, 1.25), 1e-15, "remainder by a scalar");
}

TEST(OpsParity, CumsumSortTopkMatchLibTorch) {
  std::mt19937 rng(3);
  // Few distinct values, so that ties are common; NaN and signed zeros in some rows.
  std::uniform_int_distribution<int> pick(-3, 3);
  std::vector<double> v(6 * 40);
  for (double& x : v) x = pick(rng) * 0.5;
  v[5] = NAN, v[17] = -0.0, v[18] = NAN, v[60] = -0.0, v[61] = 0.0;
  const Tensor x = tensor(v, {6, 40});
  const torch::Tensor t = to_torch(x);
  for (int64_t dim : {0, 1}) {
    const std::string d = " along dim " + std::to_string(dim);
    expect_same(cumsum(x, dim), torch::cumsum(t, dim), 1e-12, "cumsum" + d);
    for (bool descending : {false, true}) {
      auto [values, indices] = sort(x, dim, descending);
      auto [tv, ti] = torch::sort(t, /*stable=*/true, dim, descending);
      expect_same(values, tv, 0, "sort values" + d);
      expect_same(indices, ti, 0, "stable sort indices" + d + (descending ? " descending" : ""));
    }
  }
  const Tensor ints = tensor(std::vector<int32_t>{3, -1, 4, 1, -5, 9});
  expect_same(cumsum(ints, 0), torch::cumsum(torch::tensor({3, -1, 4, 1, -5, 9}, torch::kInt), 0), 0,
              "int32 cumsum");
  EXPECT_EQ(cumsum(ints, 0).dtype(), kInt64);  // as torch: integers sum in int64
  // topk's values (its tie order is not specified by LibTorch), and indices where the values are distinct.
  auto [tk, tki] = topk(x, 7, 1);
  expect_same(tk, std::get<0>(torch::topk(t, 7, 1)), 0, "topk values");
  const Tensor distinct = tensor(std::vector<double>{0.3, -1.0, 2.5, 0.0, 7.0, -3.0, 1.0}, {1, 7});
  expect_same(topk(distinct, 3, 1, false).second, std::get<1>(torch::topk(to_torch(distinct), 3, 1, false)), 0,
              "topk smallest indices");
  // unique (sorted, with inverse and counts) and searchsorted on the same tied values, without the NaNs (whose
  // uniqueness LibTorch 1.13's CPU kernel treats differently across versions).
  const Tensor finite = x.narrow(0, 1, 2);
  const auto [tu, tinv, tcnt] = at::_unique2(to_torch(finite), /*sorted=*/true, true, true);
  const UniqueResult u = unique(finite);
  expect_same(u.values, tu, 0, "unique values");
  expect_same(u.inverse, tinv, 0, "unique inverse");
  expect_same(u.counts, tcnt, 0, "unique counts");
  const Tensor seq = tensor(std::vector<double>{-1.5, -0.5, -0.5, 0.0, 0.5, 0.5, 0.5, 1.5});
  for (bool right : {false, true}) {
    expect_same(searchsorted(seq, finite, right), torch::searchsorted(to_torch(seq), to_torch(finite), false, right),
                0, right ? "searchsorted right" : "searchsorted left");
  }
}

TEST(OpsParity, IscloseNonzeroAndMaskedSelectMatchLibTorch) {
  const Tensor a = tensor({1.0, INFINITY, -INFINITY, NAN, 100.0, 0.0, INFINITY, 5.0});
  const Tensor b = tensor({1.0 + 1e-6, INFINITY, INFINITY, NAN, 100.002, 1e-9, 5.0, INFINITY});
  const torch::Tensor ta = to_torch(a), tb = to_torch(b);
  for (bool equal_nan : {false, true}) {
    for (double rtol : {1e-5, 1e-4}) {
      expect_same(isclose(a, b, rtol, 1e-8, equal_nan).to(kFloat64),
                  torch::isclose(ta, tb, rtol, 1e-8, equal_nan).to(torch::kDouble), 0,
                  "isclose rtol " + std::to_string(rtol) + (equal_nan ? " equal_nan" : ""));
    }
  }
  std::mt19937 rng(4);
  const Tensor x = awkward_values(rng, false).round().view({2, 3, 6});
  const torch::Tensor t = to_torch(x);
  expect_same(nonzero(x), torch::nonzero(t), 0, "nonzero");
  const Tensor mask = gt(x, 0).select(0, 1);  // (3, 6), broadcast over dim 0
  expect_same(masked_select(x, mask), torch::masked_select(t, to_torch(mask.to(kFloat64)).to(torch::kBool)), 0,
              "masked_select with a broadcast mask");
}

// The gradient of sum(w * f(x)) for fixed random weights w, through both libraries' autograd.
TEST(OpsParity, GradientsMatchLibTorch) {
  std::mt19937 rng(5);
  const Tensor x0 = awkward_values(rng, false), w = awkward_values(rng, false);
  const Tensor mask = gt(w, 0);
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> ours;
    std::function<torch::Tensor(const torch::Tensor&)> theirs;
  };
  const std::vector<Case> cases = {
      {"cumsum", [](const Tensor& x) { return cumsum(x, 1); }, [](const torch::Tensor& x) { return x.cumsum(1); }},
      {"sort", [](const Tensor& x) { return sort(x, 0, true).first; },
       [](const torch::Tensor& x) { return std::get<0>(torch::sort(x, true, 0, true)); }},
      {"topk", [](const Tensor& x) { return topk(x * 1.0 + 0.001 * x * x, 3, 1).first; },
       [](const torch::Tensor& x) { return std::get<0>(torch::topk(x * 1.0 + 0.001 * x * x, 3, 1)); }},
      {"atan2", [](const Tensor& x) { return atan2(x, flip(x, {0}) + 0.5); },
       [](const torch::Tensor& x) { return torch::atan2(x, x.flip({0}) + 0.5); }},
      {"remainder", [](const Tensor& x) { return remainder(x * 3.0, 1.7); },
       [](const torch::Tensor& x) { return torch::remainder(x * 3.0, 1.7); }},
  };
  for (const Case& c : cases) {
    Tensor x = x0.clone().requires_grad_();
    Tensor y = c.ours(x);
    (y * w.narrow(0, 0, y.size(0)).narrow(1, 0, y.size(1))).sum().backward();
    torch::Tensor tx = to_torch(x0).requires_grad_();
    torch::Tensor ty = c.theirs(tx);
    (ty * to_torch(w).narrow(0, 0, ty.size(0)).narrow(1, 0, ty.size(1))).sum().backward();
    expect_same(x.grad(), tx.grad(), 1e-12, c.name + " gradient");
  }
  Tensor x = x0.clone().requires_grad_();
  masked_select(x, mask).pow(2).sum().backward();
  torch::Tensor tx = to_torch(x0).requires_grad_();
  torch::masked_select(tx, to_torch(mask.to(kFloat64)).to(torch::kBool)).pow(2).sum().backward();
  expect_same(x.grad(), tx.grad(), 1e-12, "masked_select gradient");
}

// Order statistics with NaNs placed on purpose: a line with one, a line of them, ties among the numbers.
TEST(OpsParity, QuantileMedianAndKthvalueMatchLibTorch) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<double> v(5 * 8);
  for (double& x : v) x = small(rng) * 0.5;  // ties
  v[3] = NAN;
  for (int j = 0; j < 8; ++j) v[static_cast<size_t>(2 * 8 + j)] = NAN;  // row 2: all NaN
  const Tensor x = tensor(v, {5, 8});
  const torch::Tensor tx = to_torch(x);
  const Tensor q = tensor(std::vector<double>{0.0, 0.2, 0.5, 0.77, 1.0}, {5});
  for (const char* how : {"linear", "lower", "higher", "midpoint", "nearest"}) {
    expect_same(quantile(x, q, 1, false, how), torch::quantile(tx, to_torch(q), 1, false, how), 1e-15,
                std::string("quantile ") + how);
    expect_same(nanquantile(x, q, 1, true, how), torch::nanquantile(tx, to_torch(q), 1, true, how), 1e-15,
                std::string("nanquantile ") + how);
  }
  expect_same(nanquantile(x, 0.3), torch::nanquantile(tx, 0.3), 1e-15, "nanquantile of all");
  for (bool skip : {false, true}) {
    auto [values, indices] = skip ? nanmedian(x, 1) : median(x, 1);
    auto [tv, ti] = skip ? torch::nanmedian(tx, 1) : torch::median(tx, 1);
    expect_same(values, tv, 0, skip ? "nanmedian" : "median");
    // Among tied values the index may be any of theirs: it must point at the same value. median's at a NaN
    // (row 0, one NaN; row 2, all NaN) is the first NaN's in both. (nanmedian's over a line of NaNs is
    // LibTorch's nth_element's leftover, 6 here; kiln gives the first, 0.)
    expect_same(ops::gather(x, 1, indices.unsqueeze(1)).squeeze(1), tv, 0, "the value at the median's index");
    if (!skip)
      for (int64_t row : {0, 2})
        EXPECT_EQ(indices.select(0, row).item<int64_t>(), ti.select(0, row).item<int64_t>()) << "median index, row " << row;
  }
  const Tensor m = test::randn64({4, 3}, 40);
  expect_same(m.pinverse(), to_torch(m).pinverse(), 1e-12, "pinverse");
  expect_same(median(x.select(0, 1)), torch::median(tx.select(0, 1)), 0, "median of all");
  expect_same(nanmedian(x), torch::nanmedian(tx), 0, "nanmedian of all");
  expect_same(kthvalue(x.select(0, 1), 3).first, std::get<0>(torch::kthvalue(tx.select(0, 1), 3)), 0, "kthvalue");
  expect_same(nansum(x, {1}), torch::nansum(tx, {1}), 1e-15, "nansum");
  expect_same(nanmean(x, {1}), torch::nanmean(tx, {1}), 1e-15, "nanmean");
}

// Indexing with index tensors: each case is written once in kiln's terms and translated to LibTorch's.
torch::indexing::TensorIndex torch_index(const TensorIndex& i) {
  namespace ti = torch::indexing;
  if (const int64_t* k = std::get_if<int64_t>(&i.value)) return ti::TensorIndex(*k);
  auto opt = [](std::optional<int64_t> o) { return o ? c10::optional<int64_t>(*o) : c10::nullopt; };
  if (const Slice* s = std::get_if<Slice>(&i.value)) return ti::Slice(opt(s->start), opt(s->stop), s->step);
  if (std::holds_alternative<NoneIndex>(i.value)) return ti::None;
  if (std::holds_alternative<EllipsisIndex>(i.value)) return ti::Ellipsis;
  const Tensor& t = std::get<Tensor>(i.value);
  return to_torch(t.to(kFloat64)).to(t.dtype() == kBool ? torch::kBool : torch::kLong);
}
std::vector<torch::indexing::TensorIndex> torch_indices(const std::vector<TensorIndex>& indices) {
  std::vector<torch::indexing::TensorIndex> out;
  for (const TensorIndex& i : indices) out.push_back(torch_index(i));
  return out;
}

TEST(OpsParity, AdvancedIndexingMatchesLibTorch) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(3 * 4 * 5 * 6);
  for (double& e : v) e = u(rng);
  const Tensor x = tensor(v, {3, 4, 5, 6});
  const torch::Tensor t = to_torch(x);
  auto ints = [](std::vector<int64_t> p, Shape s) { return tensor(p, s, kInt64); };
  const Tensor m34 = gt(x.select(2, 0).select(2, 0), 0), m56 = gt(x[0][0], 0.3), m4 = gt(x[0].select(1, 0).select(1, 0), -2);
  const std::vector<std::pair<std::string, std::vector<TensorIndex>>> cases = {
      {"rows (2, 2) with repeats", {ints({2, -1, 0, 2}, {2, 2})}},
      {"dim 1", {Slice(), ints({3, 0, -4}, {3})}},
      {"apart, broadcast", {ints({0, 2}, {2, 1}), Slice(), ints({4, 0, 1}, {3})}},
      {"side by side after a slice", {Slice(1, None), ints({1, 2}, {2}), ints({0, 4}, {2})}},
      {"an int between", {Slice(), ints({1, 3}, {2}), 1, ints({5, 0}, {2})}},
      {"None between", {ints({1, 2}, {2}), None, ints({3, 0}, {2})}},
      {"ellipsis, then a slice", {Ellipsis, ints({2, 2, 0}, {3}), Slice(1, None, 2)}},
      {"mask over the leading dims", {m34}},
      {"mask in the middle and a tensor", {Slice(), Slice(), m56}},
      {"mask and positions", {1, m4, ints({0, 4, 2, 1}, {4})}},
      {"0-dim position", {Slice(), ints({2}, {})}},
      {"all three kinds", {ints({0, 2}, {2}), Slice(None, None, 2), None, ints({1, 4}, {2}), Ellipsis}},
  };
  for (const auto& [name, indices] : cases) {
    expect_same(x.index(indices), t.index(torch_indices(indices)), 0, "index: " + name);
    // index_put with accumulate. LibTorch 1.13's C++ API has no accumulating index_put over these indices, so
    // its side is the gradient of its own index(), which scatter-adds the upstream values the same way.
    const Tensor target = x.index(indices);
    std::vector<double> w(static_cast<size_t>(target.numel()));
    for (double& e : w) e = u(rng);
    const Tensor values = tensor(w, target.sizes());
    Tensor ours = x.clone().requires_grad_(), vals = values.clone().requires_grad_();
    const Tensor put = ours.index_put(indices, vals, true);
    torch::Tensor scattered = t.clone().requires_grad_();
    scattered.index(torch_indices(indices)).backward(to_torch(values));
    const torch::Tensor tput = t + scattered.grad();
    expect_same(put, tput, 1e-15, "index_put accumulate: " + name);
    (put * put).sum().backward();
    expect_same(ours.grad(), 2 * tput, 1e-14, "index_put: gradient of the tensor: " + name);
    expect_same(vals.grad(), (2 * tput).index(torch_indices(indices)), 1e-14, "index_put: gradient of the values: " + name);
    // Without accumulate, where every place is written once (LibTorch's in-place index_put_).
    if (ones_like(x).index_put(indices, ones_like(values), true).max().item<double>() == 1.0) {
      torch::Tensor tp = t.clone();
      tp.index_put_(torch_indices(indices), to_torch(values));
      expect_same(x.index_put(indices, values), tp, 0, "index_put: " + name);
    }
    // The gradient of reading, where repeated places add up.
    Tensor xr = x.clone().requires_grad_();
    torch::Tensor tr = t.clone().requires_grad_();
    (xr.index(indices) * values).sum().backward();
    (tr.index(torch_indices(indices)) * to_torch(values)).sum().backward();
    expect_same(xr.grad(), tr.grad(), 1e-15, "index: gradient: " + name);
  }
}

TEST(OpsParity, EinsumMatchesLibTorch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  auto random = [&](Shape shape) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
    for (double& e : v) e = u(rng);
    return tensor(v, shape);
  };
  const std::vector<std::pair<std::string, std::vector<Shape>>> cases = {
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
      {"ij,jk", {{3, 4}, {4, 5}}},
      {"Ba,aB", {{3, 4}, {4, 3}}},
      {"ii->i", {{4, 4}}},
      {"iij->j", {{3, 3, 2}}},
      {"abc,cd,de->abe", {{2, 3, 4}, {4, 5}, {5, 2}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"...ij,...jk", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"i...->...", {{3, 4, 2}}},
      {"...ii->...i", {{2, 3, 3}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"ab,ab->ab", {{3, 1}, {1, 4}}},
  };
  for (const auto& [eq, shapes] : cases) {
    std::vector<Tensor> ours;
    std::vector<torch::Tensor> theirs;
    for (const Shape& s : shapes) {
      const Tensor x = random(s);
      ours.push_back(x.clone().requires_grad_());
      theirs.push_back(to_torch(x).requires_grad_());
    }
    const Tensor y = einsum(eq, ours);
    const torch::Tensor ty = torch::einsum(eq, theirs);
    expect_same(y, ty, 1e-14, "einsum " + eq);
    const Tensor w = random(y.sizes());
    (y * w).sum().backward();
    (ty * to_torch(w)).sum().backward();
    for (size_t i = 0; i < ours.size(); ++i)
      expect_same(ours[i].grad(), theirs[i].grad(), 1e-14, "einsum " + eq + ": gradient of operand " + std::to_string(i));
  }
}

}  // namespace
}  // namespace kiln::parity
