// Pooling's output sizes and windows as PyTorch defines them, ceil_mode included, against float64 loops
// written from that definition: the output size from the formula, each window clipped to the input (max) or
// divided as count_include_pad and divisor_override say (average); the kernels and the composite path (an
// integer input) alike; gradients by gradcheck and the first-maximum rule; the modules' options and reprs;
// return_indices and max_unpool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::randn64;
using test::values;
namespace F = nn::functional;

// One dim of a pooling geometry.
struct Dim {
  int64_t in, kernel, stride, padding, dilation;
  // The number of windows: floor((in + 2p - d(k - 1) - 1) / s) + 1, or with ceil_mode the ceiling, less a last
  // window that would start at or past in + p (inside the right padding only).
  int64_t windows(bool ceil_mode) const {
    const double span = static_cast<double>(in + 2 * padding - dilation * (kernel - 1) - 1) / static_cast<double>(stride);
    int64_t n = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
    if (ceil_mode && (n - 1) * stride >= in + padding) --n;
    return n;
  }
};

struct PoolCase {
  Dim h, w;
  bool ceil_mode;
};

// Reference pooling of one (H, W) plane: for output (i, j), the positions y = i s - p + u d (u < k) inside
// [0, H) (and likewise z); `max`: their maximum (-inf if none) and the flat index of the first one; else the
// average as PyTorch divides it.
struct Pooled {
  std::vector<double> values;
  std::vector<int64_t> argmax;
};
Pooled reference(const std::vector<double>& x, const PoolCase& c, bool max, bool count_include_pad,
                 std::optional<int64_t> divisor) {
  const int64_t OH = c.h.windows(c.ceil_mode), OW = c.w.windows(c.ceil_mode), H = c.h.in, W = c.w.in;
  Pooled r;
  for (int64_t i = 0; i < OH; ++i)
    for (int64_t j = 0; j < OW; ++j) {
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t arg = -1, inside = 0;
      for (int64_t u = 0; u < c.h.kernel; ++u)
        for (int64_t v = 0; v < c.w.kernel; ++v) {
          const int64_t y = i * c.h.stride - c.h.padding + u * c.h.dilation;
          const int64_t z = j * c.w.stride - c.w.padding + v * c.w.dilation;
          if (y < 0 || y >= H || z < 0 || z >= W) continue;
          ++inside;
          sum += x[y * W + z];
          if (x[y * W + z] > best) best = x[y * W + z], arg = y * W + z;
        }
      // count_include_pad: the window's positions within the padded input [-p, in + p) (dilation 1)
      auto span = [](int64_t start, int64_t k, int64_t in, int64_t p) {
        return std::min(start + k, in + p) - start;
      };
      const double padded_count = static_cast<double>(span(i * c.h.stride - c.h.padding, c.h.kernel, H, c.h.padding) *
                                                      span(j * c.w.stride - c.w.padding, c.w.kernel, W, c.w.padding));
      r.values.push_back(max ? best
                             : sum / (divisor ? static_cast<double>(*divisor)
                                              : count_include_pad ? padded_count : static_cast<double>(inside)));
      r.argmax.push_back(arg);
    }
  return r;
}

// dilation 1 for the average (PyTorch's avg_pool2d has none)
const std::vector<PoolCase> kCases = {
    {{7, 3, 2, 0, 1}, {8, 2, 2, 0, 1}, true},   // a last window of one row past the end; W divides evenly
    {{7, 3, 2, 1, 1}, {9, 3, 3, 1, 1}, true},   // padding and an overhang
    {{6, 3, 2, 1, 1}, {5, 2, 2, 1, 1}, true},   // the ceiling's last window would start in the padding: dropped
    {{10, 3, 4, 0, 1}, {11, 2, 5, 1, 1}, true},  // stride above the kernel
    {{7, 3, 2, 1, 1}, {9, 3, 3, 1, 1}, false},
    {{9, 2, 2, 0, 2}, {10, 3, 3, 1, 2}, true},  // dilation (max only)
};

TEST(PoolingCeilMode, MaxMatchesTheDefinitionOnBothPaths) {
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE("H " + std::to_string(c.h.in) + " W " + std::to_string(c.w.in) + " k " + std::to_string(c.h.kernel) +
                 "x" + std::to_string(c.w.kernel) + (c.ceil_mode ? " ceil" : " floor"));
    Tensor x = randn64({2, 3, c.h.in, c.w.in}, 60).requires_grad_();
    Tensor y = F::max_pool2d(x, {c.h.kernel, c.w.kernel}, F::Pair(c.h.stride, c.w.stride),
                             F::Pair(c.h.padding, c.w.padding), F::Pair(c.h.dilation, c.w.dilation), c.ceil_mode);
    const int64_t OH = c.h.windows(c.ceil_mode), OW = c.w.windows(c.ceil_mode), plane = c.h.in * c.w.in;
    ASSERT_EQ(y.sizes(), (Shape{2, 3, OH, OW}));
    y.sum().backward();
    std::vector<double> xv = values(x.detach()), yv = values(y), gv = values(x.grad());
    for (int64_t q = 0; q < 6; ++q) {
      std::vector<double> xq(xv.begin() + q * plane, xv.begin() + (q + 1) * plane);
      Pooled want = reference(xq, c, true, true, std::nullopt);
      std::vector<double> grad(static_cast<size_t>(plane), 0.0);
      for (size_t o = 0; o < want.values.size(); ++o) {
        EXPECT_EQ(yv[q * OH * OW + o], want.values[o]) << "plane " << q << " output " << o;
        grad[want.argmax[o]] += 1;
      }
      for (int64_t e = 0; e < plane; ++e) EXPECT_EQ(gv[q * plane + e], grad[e]) << "plane " << q << " input " << e;
    }
    // the composite path (integers have no kernel) gives the same windows
    Tensor xi = (x.detach() * 100).to(kInt64);
    Tensor yi = F::max_pool2d(xi, {c.h.kernel, c.w.kernel}, F::Pair(c.h.stride, c.w.stride),
                              F::Pair(c.h.padding, c.w.padding), F::Pair(c.h.dilation, c.w.dilation), c.ceil_mode);
    Tensor yf = F::max_pool2d(xi.to(kFloat64), {c.h.kernel, c.w.kernel}, F::Pair(c.h.stride, c.w.stride),
                              F::Pair(c.h.padding, c.w.padding), F::Pair(c.h.dilation, c.w.dilation), c.ceil_mode);
    EXPECT_EQ(values(yi), values(yf));
  }
}

TEST(PoolingCeilMode, AverageDividesAsPyTorch) {
  for (const PoolCase& c : kCases) {
    if (c.h.dilation != 1) continue;
    for (bool include_pad : {true, false})
      for (std::optional<int64_t> divisor : {std::optional<int64_t>(), std::optional<int64_t>(5)}) {
        SCOPED_TRACE("H " + std::to_string(c.h.in) + " W " + std::to_string(c.w.in) + (c.ceil_mode ? " ceil" : "") +
                     (include_pad ? " include_pad" : " exclude_pad") + (divisor ? " divisor 5" : ""));
        Tensor x = randn64({1, 2, c.h.in, c.w.in}, 61);
        Tensor y = F::avg_pool2d(x, {c.h.kernel, c.w.kernel}, F::Pair(c.h.stride, c.w.stride),
                                 F::Pair(c.h.padding, c.w.padding), include_pad, c.ceil_mode, divisor);
        const int64_t plane = c.h.in * c.w.in, outs = c.h.windows(c.ceil_mode) * c.w.windows(c.ceil_mode);
        ASSERT_EQ(y.numel(), 2 * outs);
        std::vector<double> xv = values(x), yv = values(y);
        for (int64_t q = 0; q < 2; ++q) {
          Pooled want = reference(std::vector<double>(xv.begin() + q * plane, xv.begin() + (q + 1) * plane), c, false,
                                  include_pad, divisor);
          for (int64_t o = 0; o < outs; ++o) EXPECT_NEAR(yv[q * outs + o], want.values[o], 1e-14) << q << ", " << o;
        }
      }
  }
}

TEST(PoolingCeilMode, GradchecksAndOneDimension) {
  Tensor x = randn64({1, 2, 7, 6}, 62).requires_grad_();
  gradcheck([](const std::vector<Tensor>& t) { return F::max_pool2d(t[0], 3, 2, 1, 1, true); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return F::avg_pool2d(t[0], 3, 2, 1, false, true); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return F::avg_pool2d(t[0], 2, 2, 0, true, true, 3); }, {x});
  // 1-d: the 2-d pools over a height of one
  Tensor s = randn64({2, 3, 10}, 63);
  EXPECT_EQ(values(F::max_pool1d(s, 3, 2, 0, 1, true)),
            values(F::max_pool2d(s.unsqueeze(2), {1, 3}, F::Pair(1, 2), 0, 1, true).squeeze(2)));
  EXPECT_EQ(F::max_pool1d(s, 3, 2, 0, 1, true).size(2), 5);  // ceil(7 / 2) + 1
  EXPECT_EQ(F::max_pool1d(s, 3, 2).size(2), 4);
  EXPECT_EQ(values(F::avg_pool1d(s, 4, 3, 1, false, true)),
            values(F::avg_pool2d(s.unsqueeze(2), {1, 4}, F::Pair(1, 3), F::Pair(0, 1), false, true).squeeze(2)));
}

TEST(PoolingCeilMode, ModulesTakeOptions) {
  Tensor x = randn64({1, 2, 7, 7}, 64);
  EXPECT_EQ(values(nn::MaxPool2d(3, {.stride = 2, .ceil_mode = true})(x)), values(F::max_pool2d(x, 3, 2, 0, 1, true)));
  EXPECT_EQ(values(nn::AvgPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false})(x)),
            values(F::avg_pool2d(x, 3, 2, 1, false, true)));
  EXPECT_EQ(values(nn::AvgPool2d(2, {.divisor_override = 3})(x)), values(F::avg_pool2d(x, 2, 2, 0, true, false, 3)));
  Tensor s = x.select(2, 0);
  EXPECT_EQ(values(nn::MaxPool1d(2, {.ceil_mode = true})(s)), values(F::max_pool1d(s, 2, 2, 0, 1, true)));
  EXPECT_EQ(values(nn::AvgPool1d(2, {.ceil_mode = true})(s)), values(F::avg_pool1d(s, 2, 2, 0, true, true)));
  // positional, as before
  EXPECT_EQ(values(nn::MaxPool2d(3, 2, 1)(x)), values(F::max_pool2d(x, 3, 2, 1)));
  EXPECT_EQ(nn::MaxPool2d(3, {.stride = 2, .ceil_mode = true})->str(),
            "MaxPool2d(kernel_size=(3, 3), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=true)");
  EXPECT_EQ(nn::AvgPool2d(2)->str(), "AvgPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  EXPECT_EQ(nn::AvgPool1d(3, {.stride = 1, .ceil_mode = true, .count_include_pad = false})->str(),
            "AvgPool1d(kernel_size=3, stride=1, padding=0, ceil_mode=true, count_include_pad=false)");
}

TEST(PoolingCeilMode, WindowsLargerThanTheInputAreErrors) {
  // (2 + 0 - 3) / 2 floors to -1: no window fits (truncation gave one)
  expect_error([] { F::max_pool2d(randn64({1, 1, 2, 5}, 1), 3, 2); }, {"max_pool2d", "smaller than the kernel"});
  expect_error([] { F::max_pool2d(randn64({1, 1, 2, 5}, 1).to(kInt64), 3, 2); }, {"max_pool2d", "smaller"});
  expect_error([] { F::avg_pool2d(randn64({1, 1, 5, 5}, 1), 2, 2, 0, true, false, 0); }, {"divisor_override"});
}

// return_indices and max_unpool: the indices are each window's first maximum as h * W + w in its plane (the
// reference above), and unpooling writes each value there into zeros.
TEST(MaxUnpool, PlacesEachMaximumAtItsIndex) {
  const PoolCase c{{6, 3, 2, 1, 1}, {7, 2, 2, 0, 1}, true};
  Tensor x = randn64({2, 3, 6, 7}, 65);
  auto [y, idx] = F::max_pool2d_with_indices(x, {3, 2}, F::Pair(2, 2), F::Pair(1, 0), 1, true);
  EXPECT_EQ(values(y), values(F::max_pool2d(x, {3, 2}, F::Pair(2, 2), F::Pair(1, 0), 1, true)));
  const int64_t plane = 6 * 7, outs = c.h.windows(true) * c.w.windows(true);
  ASSERT_EQ(idx.sizes(), (Shape{2, 3, c.h.windows(true), c.w.windows(true)}));
  std::vector<double> xv = values(x), iv = values(idx);
  for (int64_t q = 0; q < 6; ++q) {
    Pooled want = reference(std::vector<double>(xv.begin() + q * plane, xv.begin() + (q + 1) * plane), c, true, true,
                            std::nullopt);
    for (int64_t o = 0; o < outs; ++o)
      EXPECT_EQ(iv[q * outs + o], static_cast<double>(want.argmax[o])) << q << ", " << o;
  }
  // unpooled into the input's size: the maxima where they were, zeros elsewhere
  Tensor u = F::max_unpool2d(y, idx, {3, 2}, F::Pair(2, 2), F::Pair(1, 0), F::Pair(6, 7));
  std::vector<double> uv = values(u), yv = values(y);
  std::vector<double> want(uv.size(), 0.0);
  for (int64_t q = 0; q < 6; ++q)
    for (int64_t o = 0; o < outs; ++o) want[q * plane + static_cast<int64_t>(iv[q * outs + o])] = yv[q * outs + o];
  EXPECT_EQ(uv, want);
  // the default size, (OH - 1) s - 2 p + k, and the module
  Tensor even = randn64({1, 2, 4, 6}, 66);
  auto [ye, ie] = F::max_pool2d_with_indices(even, 2);
  // the gradient gathers from the indices (windows apart: overlapping ones can share an index, whose gradient
  // then reaches every value written there, as in PyTorch, while only the last one stays)
  Tensor yl = ye.detach().requires_grad_();
  gradcheck([&](const std::vector<Tensor>& t) { return F::max_unpool2d(t[0], ie, 2); }, {yl});
  EXPECT_EQ(F::max_unpool2d(ye, ie, 2).sizes(), (Shape{1, 2, 4, 6}));
  EXPECT_EQ(values(nn::MaxUnpool2d(2)(ye, ie)), values(F::max_unpool2d(ye, ie, 2)));
  EXPECT_EQ(nn::MaxUnpool2d(2)->str(), "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  // 1-d, and unbatched
  Tensor s = randn64({2, 9}, 67);
  auto [ys, is] = F::max_pool1d_with_indices(s, 3);
  EXPECT_EQ(values(is), values(F::max_pool2d_with_indices(s.unsqueeze(1), {1, 3}).second.squeeze(1)));
  EXPECT_EQ(values(nn::MaxUnpool1d(3)(ys, is)),
            values(F::max_unpool2d(ys.unsqueeze(1), is.unsqueeze(1), {1, 3}).squeeze(1)));
  // an index outside the output is said, not written past the end
  expect_error([&] { F::max_unpool2d(y, idx, {3, 2}, F::Pair(2, 2), F::Pair(1, 0), F::Pair(3, 3)); },
               {"max_unpool2d", "outside the output plane of (3, 3) = 9 positions"});
  expect_error([&] { F::max_pool2d_with_indices(x.to(kInt64), 2); }, {"max_pool2d_with_indices", "floating"});
}

}  // namespace
}  // namespace kiln
