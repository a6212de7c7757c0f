// affine_grid and grid_sample against float64 loops written from PyTorch's definitions: normalized positions
// unnormalized ((g + 1) / 2 (n - 1) with align_corners, else ((g + 1) n - 1) / 2), positions outside the image
// read as zero, clamped to the edge (border) or mirrored about the edges until inside (reflection), then the four
// neighbours weighted bilinearly or the nearest one (halves to even); bicubic as PyTorch pads each of its 16 taps.
// Gradients by gradcheck.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
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
namespace F = nn::functional;

// The pixel coordinate sampled along a dim of n positions, before interpolation.
double source_position(double g, int64_t n, const F::GridSampleOptions& o) {
  const double size = static_cast<double>(n);
  double c = o.align_corners ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
  if (o.padding_mode == "reflection") {
    // Mirror about the edges until inside them: the corner centres, or the image's outer edges.
    const double lo = o.align_corners ? 0.0 : -0.5, hi = o.align_corners ? size - 1 : size - 0.5;
    if (hi <= lo) return 0.0;
    while (c < lo || c > hi) c = c < lo ? 2 * lo - c : 2 * hi - c;
  }
  if (o.padding_mode != "zeros") c = std::min(std::max(c, 0.0), size - 1);
  return c;
}

std::vector<double> grid_sample_loops(const Tensor& x, const Tensor& grid, const F::GridSampleOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), Ho = grid.size(1), Wo = grid.size(2);
  const std::vector<double> xv = x.to_vector<double>(), gv = grid.to_vector<double>();
  auto at = [&](int64_t n, int64_t c, int64_t y, int64_t z) {
    return (y < 0 || y >= H || z < 0 || z >= W) ? 0.0 : xv[static_cast<size_t>(((n * C + c) * H + y) * W + z)];
  };
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          const size_t g = static_cast<size_t>(((n * Ho + i) * Wo + j) * 2);
          const double px = source_position(gv[g], W, o), py = source_position(gv[g + 1], H, o);
          if (o.mode == "nearest") {
            out.push_back(at(n, c, static_cast<int64_t>(std::nearbyint(py)), static_cast<int64_t>(std::nearbyint(px))));
            continue;
          }
          const int64_t x0 = static_cast<int64_t>(std::floor(px)), y0 = static_cast<int64_t>(std::floor(py));
          const double fx = px - static_cast<double>(x0), fy = py - static_cast<double>(y0);
          out.push_back(at(n, c, y0, x0) * (1 - fx) * (1 - fy) + at(n, c, y0, x0 + 1) * fx * (1 - fy) +
                        at(n, c, y0 + 1, x0) * (1 - fx) * fy + at(n, c, y0 + 1, x0 + 1) * fx * fy);
        }
  return out;
}

// Bicubic, from PyTorch's definition: the unpadded pixel position, the 4 x 4 integer taps around it, each tap
// coordinate padded on its own (clamped, or mirrored then clamped; zeros: outside reads 0), and Keys' cubic
// weights with a = -0.75 along each dim.
double keys_cubic(double d) {
  constexpr double A = -0.75;
  d = std::abs(d);
  if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
  if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
  return 0;
}

std::vector<double> grid_sample_bicubic_loops(const Tensor& x, const Tensor& grid, const F::GridSampleOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), Ho = grid.size(1), Wo = grid.size(2);
  const std::vector<double> xv = x.to_vector<double>(), gv = grid.to_vector<double>();
  const F::GridSampleOptions unpadded{.mode = o.mode, .padding_mode = "zeros", .align_corners = o.align_corners};
  // A tap's coordinate padded as a position is (source_position of its normalized form keeps the rule in one
  // place): k -> the normalized coordinate that unnormalizes to k.
  auto padded_tap = [&](int64_t k, int64_t n) {
    const double size = static_cast<double>(n), c = static_cast<double>(k);
    const double g = o.align_corners ? 2 * c / (size - 1) - 1 : (2 * c + 1) / size - 1;
    return static_cast<int64_t>(std::nearbyint(source_position(g, n, o)));
  };
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          const size_t g = static_cast<size_t>(((n * Ho + i) * Wo + j) * 2);
          const double px = source_position(gv[g], W, unpadded), py = source_position(gv[g + 1], H, unpadded);
          const int64_t x0 = static_cast<int64_t>(std::floor(px)), y0 = static_cast<int64_t>(std::floor(py));
          double v = 0;
          for (int64_t a = -1; a <= 2; ++a)
            for (int64_t b = -1; b <= 2; ++b) {
              const int64_t ty = padded_tap(y0 + a, H), tx = padded_tap(x0 + b, W);
              if (ty < 0 || ty >= H || tx < 0 || tx >= W) continue;
              v += xv[static_cast<size_t>(((n * C + c) * H + ty) * W + tx)] *
                   keys_cubic(py - static_cast<double>(y0 + a)) * keys_cubic(px - static_cast<double>(x0 + b));
            }
          out.push_back(v);
        }
  return out;
}

TEST(GridSample, BicubicMatchesTheDefinitionAndGradchecks) {
  Generator gen(940);
  const Tensor x = randn64({2, 2, 5, 6}, 941);
  const Tensor grid = rand({2, 3, 4, 2}, kFloat64, &gen) * 4.0 - 2.0;
  for (const char* padding : {"zeros", "border", "reflection"})
    for (bool align : {false, true}) {
      const F::GridSampleOptions o{.mode = "bicubic", .padding_mode = padding, .align_corners = align};
      SCOPED_TRACE(std::string(padding) + (align ? ", align_corners" : ""));
      const std::vector<double> want = grid_sample_bicubic_loops(x, grid, o),
                                got = F::grid_sample(x, grid, o).to_vector<double>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
      // The gradients on a corner of both (still 2 images of 2 channels, 4 x 5 pixels, 4 positions each):
      // every one of gradcheck's evaluations runs the whole composite bicubic path, and on the full inputs (168
      // of them, now 96) this test took 54 s under the sanitizers.
      const Tensor xs = x.narrow(2, 0, 4).narrow(3, 0, 5).contiguous(),
                   gs = grid.narrow(1, 0, 2).narrow(2, 0, 2).contiguous();
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::grid_sample(t[0], t[1], o); },
                            {xs.detach().requires_grad_(), gs.detach().requires_grad_()}).ok);
    }
  expect_error([&] { F::grid_sample(randn64({1, 1, 2, 3, 4}, 942), rand({1, 1, 1, 1, 3}, kFloat64, &gen),
                                    {.mode = "bicubic"}); },
               {"grid_sample", "bicubic takes a 4-d input"});
}

// Images in bilinear and nearest modes run fused CPU kernels; the composite path (volumes', bicubic's, every
// other device's) is held to the same definition under CompositeOnlyGuard.
class GridSamplePaths : public testing::TestWithParam<bool> {};  // true: the composite path
INSTANTIATE_TEST_SUITE_P(GridSample, GridSamplePaths, testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Composite" : "Fused"; });

TEST_P(GridSamplePaths, EveryModeMatchesTheDefinitionAndGradchecks) {
  std::optional<F::CompositeOnlyGuard> composite;
  if (GetParam()) composite.emplace();
  Generator gen(900);
  const Tensor x = randn64({2, 2, 4, 5}, 901);
  // positions inside and well outside the image (up to 2.5 image widths), where reflection folds twice
  const Tensor grid = rand({2, 3, 2, 2}, kFloat64, &gen) * 5.0 - 2.5;
  for (const char* mode : {"bilinear", "nearest"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (bool align : {false, true}) {
        const F::GridSampleOptions o{.mode = mode, .padding_mode = padding, .align_corners = align};
        SCOPED_TRACE(std::string(mode) + ", " + padding + (align ? ", align_corners" : ""));
        const Tensor y = F::grid_sample(x, grid, o);
        EXPECT_EQ(y.sizes(), (Shape{2, 2, 3, 2}));
        const std::vector<double> want = grid_sample_loops(x, grid, o), got = y.to_vector<double>();
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
        if (std::string(mode) == "bilinear")
          EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::grid_sample(t[0], t[1], o); },
                                {x.detach().requires_grad_(), grid.detach().requires_grad_()}).ok);
        else
          EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::grid_sample(t[0], grid, o); },
                                {x.detach().requires_grad_()}).ok);
      }
  expect_error([&] { F::grid_sample(x, grid.narrow(3, 0, 1)); }, {"grid_sample", "(N, Ho, Wo, 2)", "(2, 3, 2, 1)"});
  expect_error([&] { F::grid_sample(x, grid, {.mode = "bilinaer"}); }, {"grid_sample", "\"bicubic\", got \"bilinaer\""});
  expect_error([&] { F::grid_sample(x, grid.to(kFloat32)); }, {"grid_sample", "float64", "float32"});
}

// The fused kernels against the composite on a larger random batch, with positions inside and far outside, in
// float32 and float64, every mode and padding: outputs and both gradients. Then the fused results do not
// depend on the thread count (one image per thread in backward).
TEST(GridSample, FusedKernelsMatchTheCompositeAndAnyThreadCount) {
  Generator gen(960);
  for (DType dtype : {kFloat64, kFloat32})
    for (const char* mode : {"bilinear", "nearest"})
      for (const char* padding : {"zeros", "border", "reflection"})
        for (bool align : {false, true}) {
          const F::GridSampleOptions o{.mode = mode, .padding_mode = padding, .align_corners = align};
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + mode + ", " + padding + (align ? ", align" : ""));
          const Tensor x0 = randn({3, 5, 7, 9}, TensorOptions(dtype), &gen);
          const Tensor grid0 = rand({3, 6, 4, 2}, TensorOptions(dtype), &gen) * 3.0 - 1.5;
          const Tensor up = randn({3, 5, 6, 4}, TensorOptions(dtype), &gen);
          const auto run = [&](bool composite) {
            std::optional<F::CompositeOnlyGuard> guard;
            if (composite) guard.emplace();
            const Tensor x = x0.detach().requires_grad_(), grid = grid0.detach().requires_grad_();
            const Tensor y = F::grid_sample(x, grid, o);
            (y * up).sum().backward();
            return std::vector<Tensor>{y, x.grad(), grid.grad()};
          };
          const std::vector<Tensor> fused = run(false), composite = run(true);
          const double tol = dtype == kFloat64 ? 1e-12 : 1e-4;
          for (size_t i = 0; i < fused.size(); ++i) {
            ASSERT_EQ(fused[i].defined(), composite[i].defined()) << "output " << i;
            if (fused[i].defined()) EXPECT_TRUE(allclose(fused[i], composite[i], tol, tol)) << "output " << i;
          }
          const int threads = get_num_threads();
          set_num_threads(1);
          const std::vector<Tensor> one = run(false);
          set_num_threads(3);
          const std::vector<Tensor> three = run(false);
          set_num_threads(threads);
          for (size_t i = 0; i < fused.size(); ++i)
            if (fused[i].defined()) EXPECT_TRUE(one[i].equal(fused[i]) && three[i].equal(fused[i])) << "output " << i;
        }
}

// An exact identity grid (affine_grid of the identity with align_corners: the edge positions exactly -1 and 1,
// as a spatial transformer starts) under border and reflection padding: the edges count as clamped, so the
// grid's gradient there is 0 along that dim, as PyTorch has it, and the rest moves. On both paths; also a
// 1-pixel-wide image, where every position is an edge.
TEST_P(GridSamplePaths, ClampedEdgesPassTheGridNoGradient) {
  std::optional<F::CompositeOnlyGuard> composite;
  if (GetParam()) composite.emplace();
  const Tensor identity = tensor(std::vector<double>{1, 0, 0, 0, 1, 0}, {1, 2, 3});
  for (const char* padding : {"border", "reflection"}) {
    SCOPED_TRACE(padding);
    const F::GridSampleOptions o{.padding_mode = padding, .align_corners = true};
    const Tensor x = randn64({1, 2, 4, 5}, 980);
    Tensor grid = F::affine_grid(identity, {1, 2, 4, 5}, true).detach().requires_grad_();
    (F::grid_sample(x, grid, o) * randn64({1, 2, 4, 5}, 981)).sum().backward();
    const Tensor gx = grid.grad().select(-1, 0), gy = grid.grad().select(-1, 1);  // (1, 4, 5)
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(gx[0][i][0].item<double>(), 0.0) << "row " << i;
      EXPECT_EQ(gx[0][i][4].item<double>(), 0.0) << "row " << i;
      EXPECT_NE(gx[0][i][2].item<double>(), 0.0) << "row " << i;
    }
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(gy[0][0][j].item<double>(), 0.0) << "column " << j;
      EXPECT_EQ(gy[0][3][j].item<double>(), 0.0) << "column " << j;
    }
    // A 1-pixel-wide image: x is always clamped; the output is the column itself.
    const Tensor column = randn64({1, 1, 3, 1}, 982);
    Tensor g1 = F::affine_grid(identity, {1, 1, 3, 1}, true).detach().requires_grad_();
    const Tensor y = F::grid_sample(column, g1, o);
    EXPECT_TRUE(allclose(y, column, 1e-12, 1e-12));
    y.sum().backward();
    EXPECT_EQ(g1.grad().select(-1, 0).abs().sum().item<double>(), 0.0);
  }
}

// A backward with create_graph through the fused path: gradcheck of the first-order gradients (by the input,
// the grid and the upstream gradient) checks the second derivatives.
TEST(GridSample, SecondDerivativesThroughTheFusedPath) {
  Generator gen(970);
  for (const char* padding : {"zeros", "reflection"}) {
    SCOPED_TRACE(padding);
    const F::GridSampleOptions o{.padding_mode = padding};
    // inputs: the image, the grid, the upstream gradient (gradcheck's numeric pass calls with grad off)
    auto first_order = [&](const std::vector<Tensor>& in) {
      EnableGradGuard grad_on;
      std::vector<Tensor> t;
      for (const Tensor& v : in) t.push_back(v.requires_grad() ? v : v.detach().requires_grad_());
      return autograd::grad({F::grid_sample(t[0], t[1], o)}, {t[0], t[1]}, {t[2]}, std::nullopt, true);
    };
    EXPECT_TRUE(gradcheck(first_order, {randn64({1, 2, 3, 4}, 971).requires_grad_(),
                                        (rand({1, 2, 3, 2}, kFloat64, &gen) * 2.4 - 1.2).requires_grad_(),
                                        randn64({1, 2, 2, 3}, 972).requires_grad_()}).ok);
  }
}

TEST(AffineGrid, MapsEachPixelThroughTheMatrixAndSamplesTheIdentity) {
  const Tensor theta = randn64({2, 2, 3}, 910);
  for (bool align : {false, true}) {
    const Tensor grid = F::affine_grid(theta, {2, 1, 3, 4}, align);
    ASSERT_EQ(grid.sizes(), (Shape{2, 3, 4, 2}));
    const std::vector<double> t = theta.to_vector<double>(), g = grid.to_vector<double>();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          // pixel centres: -1 .. 1 over the corner pixels with align_corners, half a pixel in without
          const double xn = align ? -1 + 2.0 * j / 3 : (2.0 * j + 1) / 4 - 1, yn = align ? -1 + 2.0 * i / 2 : (2.0 * i + 1) / 3 - 1;
          for (int64_t k = 0; k < 2; ++k) {
            const double* r = &t[static_cast<size_t>((n * 2 + k) * 3)];
            EXPECT_NEAR(g[static_cast<size_t>(((n * 3 + i) * 4 + j) * 2 + k)], r[0] * xn + r[1] * yn + r[2], 1e-14);
          }
        }
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return F::affine_grid(in[0], {2, 1, 3, 4}, align); },
                          {theta.detach().requires_grad_()}).ok);
  }
  // The identity transform samples the image back exactly (either corner convention, any padding).
  const Tensor x = randn64({1, 2, 5, 7}, 911);
  const Tensor identity = tensor(std::vector<double>{1, 0, 0, 0, 1, 0}, {1, 2, 3});
  for (bool align : {false, true}) {
    const Tensor y = F::grid_sample(x, F::affine_grid(identity, {1, 2, 5, 7}, align), {.align_corners = align});
    const std::vector<double> got = y.to_vector<double>(), want = x.to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
  }
  expect_error([&] { F::affine_grid(theta, {2, 1, 3}); }, {"affine_grid", "(N, C, H, W) or (N, C, D, H, W)"});
  expect_error([&] { F::affine_grid(theta, {3, 1, 3, 4}); }, {"affine_grid", "N = 3", "(2, 2, 3)"});
}

// Volumes: x (N, C, D, H, W) at grid (N, Do, Ho, Wo, 3) of (x, y, z), the eight neighbours weighted
// trilinearly or the nearest one.
std::vector<double> grid_sample3d_loops(const Tensor& x, const Tensor& grid, const F::GridSampleOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t outputs = grid.size(1) * grid.size(2) * grid.size(3);
  const std::vector<double> xv = x.to_vector<double>(), gv = grid.to_vector<double>();
  auto at = [&](int64_t n, int64_t c, int64_t z, int64_t y, int64_t w) {
    if (z < 0 || z >= D || y < 0 || y >= H || w < 0 || w >= W) return 0.0;
    return xv[static_cast<size_t>((((n * C + c) * D + z) * H + y) * W + w)];
  };
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < outputs; ++q) {
        const size_t g = static_cast<size_t>((n * outputs + q) * 3);
        const double px = source_position(gv[g], W, o), py = source_position(gv[g + 1], H, o),
                     pz = source_position(gv[g + 2], D, o);
        if (o.mode == "nearest") {
          out.push_back(at(n, c, static_cast<int64_t>(std::nearbyint(pz)), static_cast<int64_t>(std::nearbyint(py)),
                           static_cast<int64_t>(std::nearbyint(px))));
          continue;
        }
        const int64_t x0 = static_cast<int64_t>(std::floor(px)), y0 = static_cast<int64_t>(std::floor(py)),
                      z0 = static_cast<int64_t>(std::floor(pz));
        const double fx = px - static_cast<double>(x0), fy = py - static_cast<double>(y0),
                     fz = pz - static_cast<double>(z0);
        double v = 0;
        for (int dz = 0; dz < 2; ++dz)
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx)
              v += at(n, c, z0 + dz, y0 + dy, x0 + dx) * (dz ? fz : 1 - fz) * (dy ? fy : 1 - fy) * (dx ? fx : 1 - fx);
        out.push_back(v);
      }
  return out;
}

TEST(GridSample, VolumesMatchTheDefinitionAndGradcheck) {
  Generator gen(920);
  const Tensor x = randn64({2, 2, 3, 4, 5}, 921);
  const Tensor grid = rand({2, 2, 3, 2, 3}, kFloat64, &gen) * 5.0 - 2.5;
  for (const char* mode : {"bilinear", "nearest"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (bool align : {false, true}) {
        const F::GridSampleOptions o{.mode = mode, .padding_mode = padding, .align_corners = align};
        SCOPED_TRACE(std::string(mode) + ", " + padding + (align ? ", align_corners" : ""));
        const Tensor y = F::grid_sample(x, grid, o);
        EXPECT_EQ(y.sizes(), (Shape{2, 2, 2, 3, 2}));
        const std::vector<double> want = grid_sample3d_loops(x, grid, o), got = y.to_vector<double>();
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
      }
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return F::grid_sample(t[0], t[1], {.padding_mode = "reflection"}); },
                        {x.detach().requires_grad_(), grid.detach().requires_grad_()}).ok);
  expect_error([&] { F::grid_sample(x, grid.narrow(4, 0, 2)); }, {"grid_sample", "(N, Do, Ho, Wo, 3)", "(2, 2, 3, 2, 2)"});
}

TEST(AffineGrid, VolumesMapEachVoxelAndSampleTheIdentity) {
  const Tensor theta = randn64({1, 3, 4}, 930);
  for (bool align : {false, true}) {
    const Tensor grid = F::affine_grid(theta, {1, 1, 2, 3, 4}, align);
    ASSERT_EQ(grid.sizes(), (Shape{1, 2, 3, 4, 3}));
    const std::vector<double> t = theta.to_vector<double>(), g = grid.to_vector<double>();
    auto centre = [&](int64_t i, int64_t n) {
      return align ? -1 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1)
                   : (2.0 * static_cast<double>(i) + 1) / static_cast<double>(n) - 1;
    };
    for (int64_t k = 0; k < 2; ++k)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          const double xn = centre(j, 4), yn = centre(i, 3), zn = centre(k, 2);
          for (int64_t r = 0; r < 3; ++r) {
            const double* row = &t[static_cast<size_t>(r * 4)];
            EXPECT_NEAR(g[static_cast<size_t>(((k * 3 + i) * 4 + j) * 3 + r)],
                        row[0] * xn + row[1] * yn + row[2] * zn + row[3], 1e-14);
          }
        }
  }
  const Tensor x = randn64({1, 2, 3, 4, 5}, 931);
  const Tensor identity = tensor(std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, {1, 3, 4});
  for (bool align : {false, true}) {
    const Tensor y = F::grid_sample(x, F::affine_grid(identity, {1, 2, 3, 4, 5}, align), {.align_corners = align});
    const std::vector<double> got = y.to_vector<double>(), want = x.to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
  }
  expect_error([&] { F::affine_grid(theta, {1, 1, 2, 3, 4, 5}); }, {"affine_grid", "(N, C, D, H, W)"});
  expect_error([&] { F::affine_grid(randn64({1, 2, 3}, 932), {1, 1, 2, 3, 4}); }, {"affine_grid", "(N, 3, 4)"});
}

}  // namespace
}  // namespace kiln
