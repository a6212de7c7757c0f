// The ops kiln builds from other ops against LibTorch's (which has kernels for most of them), on the CPU, forward +
// backward through autograd where they are differentiable: indexing with index tensors (a row gather, a mask, an
// accumulating write; nonzero, forward only), topk, sort, gather, cumsum and tril (kernels), einsum (attention
// scores, a chain of three), torch.nn's activations beyond relu, gelu, silu, sigmoid and tanh (most one fused kernel
// each way, activation_kind.h; softsign and tanhshrink composites), log of |x| (kiln's vectorized float log),
// interpolate (bilinear and bicubic up, area down), padding (reflect, replicate), a transpose's copy, an NCHW to
// NHWC copy, pixel_shuffle and rms_norm (LibTorch 1.13 has none: its usual composite), and the 3-d convolutions and
// pools (kiln's composites over the 2-d kernels; LibTorch's own 3-d kernels), embedding_bag, unfold and fold,
// grid_sample, lp_pool2d and channel_shuffle; and max_pool2d with padding (ResNet's stem pool, a kernel).
// Interleaved in one process, medians; the ratio is kiln / LibTorch (below 1: faster). Each pair is checked to
// agree before it is timed. Without LibTorch (KILN_BENCH_WITH_TORCH unset) it times kiln alone.
//
//   composite_bench [reps] [filter]     (filter: run only the rows whose op name contains it)
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#ifdef KILN_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include "bench_util.h"

namespace {

using kiln::Tensor;
namespace F = kiln::nn::functional;

#ifdef KILN_BENCH_WITH_TORCH
torch::Tensor to_torch(const Tensor& t) {
  const Tensor c = t.detach().contiguous();
  std::vector<int64_t> shape(c.sizes().begin(), c.sizes().end());
  const auto dtype = c.dtype() == kiln::kInt64 ? torch::kInt64 : c.dtype() == kiln::kBool ? torch::kBool : torch::kFloat32;
  return torch::from_blob(c.raw_data_ptr(), shape, dtype).clone();
}

// The two sums agree before they are timed: a fast wrong answer is not a figure.
void check(const std::string& what, double ours, double theirs) {
  if (std::abs(ours - theirs) > 1e-3 * std::max(1.0, std::abs(theirs))) {
    std::fprintf(stderr, "composite_bench: %s: %g against LibTorch's %g\n", what.c_str(), ours, theirs);
    std::exit(1);
  }
}
#endif

struct Row {
  std::string op, shape;
  std::function<Tensor()> ours;  // returns the value whose sum backward runs on (undefined: no backward)
#ifdef KILN_BENCH_WITH_TORCH
  std::function<torch::Tensor()> theirs;
#endif
};

void run(const Row& row, int reps, bool backward) {
  std::vector<std::function<void()>> variants = {[&] {
    const Tensor y = row.ours();
    if (backward) y.sum().backward();
    kiln::bench::do_not_optimize(y.impl());
  }};
#ifdef KILN_BENCH_WITH_TORCH
  check(row.op + " " + row.shape, row.ours().sum().item<double>(), row.theirs().sum().item<double>());
  variants.push_back([&] {
    const torch::Tensor y = row.theirs();
    if (backward) y.sum().backward();
    kiln::bench::do_not_optimize(y.data_ptr());
  });
#endif
  const std::vector<double> t = kiln::bench::time_interleaved(variants, reps);
  std::printf("| %s | %s | %.1f |", row.op.c_str(), row.shape.c_str(), t[0] * 1e6);
  if (t.size() > 1) std::printf(" %.1f | %.2f |", t[1] * 1e6, t[0] / t[1]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string filter = argc > 2 ? argv[2] : "";
  const auto wanted = [&](const Row& row) { return row.op.find(filter) != std::string::npos; };
  kiln::manual_seed(1);
  bool torch = false;
#ifdef KILN_BENCH_WITH_TORCH
  torch = true;
  torch::set_num_threads(kiln::get_num_threads());
#endif
  std::printf("composite_bench on cpu, %d threads, medians of %d interleaved runs, us per forward + backward\n\n",
              kiln::get_num_threads(), reps);
  std::printf("| op | shape | kiln |%s\n", torch ? " LibTorch | kiln / LibTorch |" : "");
  std::printf("|---|---|---|%s\n", torch ? "---|---|" : "");

  // Leaves that require grad, and LibTorch's copies of them.
  Tensor rows = kiln::randn({65536, 256}).requires_grad_();
  Tensor idx = kiln::randint(0, 65536, {16384});
  Tensor wide = kiln::randn({4096, 1024}).requires_grad_();
  Tensor mask = kiln::rand({4096, 1024}) > 0.5;
  Tensor picks = kiln::randint(0, 1024, {4096, 16});  // 16 columns of each row of `wide`
  Tensor updates = kiln::randn({16384, 256});
  Tensor q = kiln::randn({8, 8, 128, 64}).requires_grad_(), k = kiln::randn({8, 8, 128, 64}).requires_grad_();
  Tensor a = kiln::randn({256, 512}).requires_grad_(), b = kiln::randn({512, 384}).requires_grad_(),
         c = kiln::randn({384, 128}).requires_grad_();
  Tensor act = kiln::randn({1 << 20}).requires_grad_();
  Tensor image = kiln::randn({8, 16, 64, 64}).requires_grad_(), big = kiln::randn({8, 16, 128, 128}).requires_grad_();
  Tensor norm_weight = kiln::randn({1024}).requires_grad_();
  Tensor img3 = kiln::randn({64, 3, 64, 64}).requires_grad_();
  // A video clip batch through C3D-sized layers: a 3x3x3 convolution, a 2x2x2 upsampling and the 3-d pools.
  Tensor clip = kiln::randn({4, 32, 8, 28, 28}).requires_grad_(), w3 = kiln::randn({64, 32, 3, 3, 3}).requires_grad_();
  Tensor coarse = kiln::randn({4, 32, 4, 14, 14}).requires_grad_();
  Tensor wt3 = kiln::randn({32, 16, 2, 2, 2}).requires_grad_();
  // A recommender's lookups: 16384 bags of 20 indices into a (100000, 64) table.
  Tensor table = kiln::randn({100000, 64}).requires_grad_();
  Tensor bag_ids = kiln::randint(0, 100000, {16384 * 20}), bag_starts = kiln::arange(0, 16384 * 20, 20);
  // A spatial transformer's resampling: a batch of 64x64 feature maps through a random affine warp.
  Tensor warp = kiln::tensor(std::vector<float>{0.9f, 0.2f, 0.1f, -0.15f, 1.1f, -0.05f}, {1, 2, 3}).expand({8, 2, 3})
                    .contiguous().requires_grad_();
  // The conv2d that conv3d above reduces to: its kd = 3 input slices stacked as 96 channels, (N OD) = 32 images.
  Tensor stacked = kiln::randn({32, 96, 28, 28}).requires_grad_(), w2 = kiln::randn({64, 96, 3, 3}).requires_grad_();
#ifdef KILN_BENCH_WITH_TORCH
  // LibTorch 1.13's accumulating index_put_ takes its indices as a list of optional tensors.
  auto torch_put = [](const torch::Tensor& positions, const torch::Tensor& values) {
    torch::Tensor z = torch::zeros({65536, 256});
    c10::List<c10::optional<torch::Tensor>> indices;
    indices.push_back(positions);
    return z.index_put_(indices, values, true);
  };
  auto leaf = [](const Tensor& t) { return to_torch(t).requires_grad_(); };
  torch::Tensor trows = leaf(rows), tidx = to_torch(idx), twide = leaf(wide), tmask = to_torch(mask);
  torch::Tensor tpicks = to_torch(picks);
  torch::Tensor tupdates = to_torch(updates), tq = leaf(q), tk = leaf(k), ta = leaf(a), tb = leaf(b), tc = leaf(c);
  torch::Tensor tact = leaf(act), timage = leaf(image), tbig = leaf(big), tnorm_weight = leaf(norm_weight), timg3 = leaf(img3);
  torch::Tensor twarp = leaf(warp);
  torch::Tensor ttable = leaf(table), tbag_ids = to_torch(bag_ids), tbag_starts = to_torch(bag_starts);
  torch::Tensor tclip = leaf(clip), tw3 = leaf(w3), tcoarse = leaf(coarse), twt3 = leaf(wt3), tstacked = leaf(stacked),
                tw2 = leaf(w2);
  // LibTorch 1.13 has no rms_norm: the usual composite, as models written against it spell it.
  auto torch_rms_norm = [&] {
    return twide * torch::rsqrt(twide.pow(2).mean(-1, true) + 1e-6) * tnorm_weight;
  };
  namespace tf = torch::nn::functional;
#define THEIRS(...) , [&] { return __VA_ARGS__; }
#else
#define THEIRS(...)
#endif
  const std::vector<Row> differentiable = {
      {"x[idx] (rows)", "(65536, 256)[16384]", [&] { return rows[idx]; } THEIRS(trows.index({tidx}))},
      {"x[mask]", "(4096, 1024), half true", [&] { return wide[mask]; } THEIRS(twide.index({tmask}))},
      {"topk, 5 of each row", "(4096, 1024)", [&] { return kiln::topk(wide, 5, 1).first; } THEIRS(std::get<0>(twide.topk(5, 1)))},
      {"sort, each row", "(4096, 1024)", [&] { return kiln::sort(wide, 1).first; } THEIRS(std::get<0>(twide.sort(1)))},
      {"gather along rows", "(4096, 1024), 16 of each row", [&] { return kiln::gather(wide, 1, picks); }
       THEIRS(twide.gather(1, tpicks))},
      {"cumsum along rows", "(4096, 1024)", [&] { return kiln::cumsum(wide, 1); } THEIRS(twide.cumsum(1))},
      {"tril", "(4096, 1024)", [&] { return kiln::tril(wide); } THEIRS(twide.tril())},
      {"einsum bhqd,bhkd->bhqk", "(8, 8, 128, 64) x2", [&] { return kiln::einsum("bhqd,bhkd->bhqk", {q, k}); }
       THEIRS(torch::einsum("bhqd,bhkd->bhqk", {tq, tk}))},
      {"einsum ij,jk,kl->il", "256x512x384x128", [&] { return kiln::einsum("ij,jk,kl->il", {a, b, c}); }
       THEIRS(torch::einsum("ij,jk,kl->il", {ta, tb, tc}))},
      {"mish", "(1M)", [&] { return F::mish(act); } THEIRS(torch::mish(tact))},
      {"hardswish", "(1M)", [&] { return F::hardswish(act); } THEIRS(torch::hardswish(tact))},
      {"elu", "(1M)", [&] { return F::elu(act); } THEIRS(torch::elu(tact))},
      {"softplus", "(1M)", [&] { return F::softplus(act); } THEIRS(tf::softplus(tact))},
      {"logsigmoid", "(1M)", [&] { return F::logsigmoid(act); } THEIRS(tf::logsigmoid(tact))},
      {"softsign", "(1M)", [&] { return F::softsign(act); } THEIRS(tf::softsign(tact))},
      {"tanhshrink", "(1M)", [&] { return F::tanhshrink(act); } THEIRS(tf::tanhshrink(tact))},
      {"softshrink", "(1M)", [&] { return F::softshrink(act, 0.5); } THEIRS(tf::softshrink(tact, 0.5))},
      {"hardshrink", "(1M)", [&] { return F::hardshrink(act, 0.5); } THEIRS(tf::hardshrink(tact, 0.5))},
      {"threshold", "(1M)", [&] { return F::threshold(act, 0.1, 20.0); } THEIRS(torch::threshold(tact, 0.1, 20.0))},
      {"log(abs)", "(1M)", [&] { return kiln::log(kiln::abs(act)); } THEIRS(torch::log(torch::abs(tact)))},
      {"interpolate bilinear", "(8, 16, 64, 64) to 128", [&] { return F::interpolate(image, {.size = {128, 128}, .mode = "bilinear"}); }
       THEIRS(tf::interpolate(timage, tf::InterpolateFuncOptions().size(std::vector<int64_t>{128, 128}).mode(torch::kBilinear).align_corners(false)))},
      {"interpolate bicubic", "(8, 16, 64, 64) to 128", [&] { return F::interpolate(image, {.size = {128, 128}, .mode = "bicubic"}); }
       THEIRS(tf::interpolate(timage, tf::InterpolateFuncOptions().size(std::vector<int64_t>{128, 128}).mode(torch::kBicubic).align_corners(false)))},
      {"interpolate area", "(8, 16, 128, 128) to 32", [&] { return F::interpolate(big, {.size = {32, 32}, .mode = "area"}); }
       THEIRS(tf::interpolate(tbig, tf::InterpolateFuncOptions().size(std::vector<int64_t>{32, 32}).mode(torch::kArea)))},
      {"interpolate area, uneven", "(8, 16, 128, 128) to 30", [&] { return F::interpolate(big, {.size = {30, 30}, .mode = "area"}); }
       THEIRS(tf::interpolate(tbig, tf::InterpolateFuncOptions().size(std::vector<int64_t>{30, 30}).mode(torch::kArea)))},
      {"adaptive_avg_pool2d, uneven", "(8, 16, 64, 64) to 7", [&] { return F::adaptive_avg_pool2d(image, {7, 7}); }
       THEIRS(tf::adaptive_avg_pool2d(timage, tf::AdaptiveAvgPool2dFuncOptions({7, 7})))},
      {"adaptive_max_pool2d, uneven", "(8, 16, 64, 64) to 7", [&] { return F::adaptive_max_pool2d(image, {7, 7}); }
       THEIRS(tf::adaptive_max_pool2d(timage, tf::AdaptiveMaxPool2dFuncOptions({7, 7})))},
      {"max_pool2d 3x3, stride 2, padding 1", "(8, 16, 64, 64)", [&] { return F::max_pool2d(image, 3, 2, 1); }
       THEIRS(tf::max_pool2d(timage, tf::MaxPool2dFuncOptions(3).stride(2).padding(1)))},
      {"pad reflect", "(8, 16, 64, 64) by 2", [&] { return F::pad(image, {2, 2, 2, 2}, F::PadMode::Reflect); }
       THEIRS(tf::pad(timage, tf::PadFuncOptions({2, 2, 2, 2}).mode(torch::kReflect)))},
      {"pad replicate", "(8, 16, 64, 64) by 2", [&] { return F::pad(image, {2, 2, 2, 2}, F::PadMode::Replicate); }
       THEIRS(tf::pad(timage, tf::PadFuncOptions({2, 2, 2, 2}).mode(torch::kReplicate)))},
      // A transpose's copy, in tiles (copy_cpu.cpp).
      {"transpose, contiguous", "(4096, 1024)", [&] { return wide.t().contiguous(); } THEIRS(twide.t().contiguous())},
      // A copy whose innermost dim is short (3 channels): StridedIter moves a longer dim inside.
      {"NCHW to NHWC, contiguous", "(64, 3, 64, 64)", [&] { return img3.permute({0, 2, 3, 1}).contiguous(); }
       THEIRS(timg3.permute({0, 2, 3, 1}).contiguous())},
      {"pixel_shuffle", "(8, 16, 64, 64) by 2", [&] { return F::pixel_shuffle(image, 2); }
       THEIRS(torch::pixel_shuffle(timage, 2))},
      {"rms_norm", "(4096, 1024)", [&] { return F::rms_norm(wide, {1024}, norm_weight, 1e-6); }
       THEIRS(torch_rms_norm())},
      {"embedding_bag sum", "16384 bags of 20, (100000, 64)",
       [&] { return F::embedding_bag(bag_ids, table, bag_starts, {.mode = F::BagMode::Sum}); }
       THEIRS(tf::embedding_bag(tbag_ids, ttable, tf::EmbeddingBagFuncOptions().offsets(tbag_starts).mode(torch::kSum)))},
      {"embedding_bag max", "16384 bags of 20, (100000, 64)",
       [&] { return F::embedding_bag(bag_ids, table, bag_starts, {.mode = F::BagMode::Max}); }
       THEIRS(tf::embedding_bag(tbag_ids, ttable, tf::EmbeddingBagFuncOptions().offsets(tbag_starts).mode(torch::kMax)))},
      {"unfold 3x3, padding 1", "(8, 16, 64, 64)", [&] { return F::unfold(image, 3, 1, 1); }
       THEIRS(tf::unfold(timage, tf::UnfoldFuncOptions({3, 3}).padding(1)))},
      {"fold(unfold) 3x3, padding 1", "(8, 16, 64, 64)",
       [&] { return F::fold(F::unfold(image, 3, 1, 1), {64, 64}, 3, 1, 1); }
       THEIRS(tf::fold(tf::unfold(timage, tf::UnfoldFuncOptions({3, 3}).padding(1)),
                       tf::FoldFuncOptions({64, 64}, {3, 3}).padding(1)))},
      {"grid_sample bilinear of affine_grid", "(8, 16, 64, 64)",
       [&] { return F::grid_sample(image, F::affine_grid(warp, {8, 16, 64, 64})); }
       THEIRS(tf::grid_sample(timage, tf::affine_grid(twarp, {8, 16, 64, 64}),
                              tf::GridSampleFuncOptions().align_corners(false)))},
      {"conv3d 3x3x3, padding 1", "(4, 32, 8, 28, 28) to 64", [&] { return F::conv3d(clip, w3, {}, 1, 1); }
       THEIRS(torch::conv3d(tclip, tw3, {}, 1, 1))},
      {"conv2d 3x3, padding 1 (conv3d's own)", "(32, 96, 28, 28) to 64",
       [&] { return F::conv2d(stacked, w2, {}, 1, 1); }
       THEIRS(torch::conv2d(tstacked, tw2, {}, 1, 1))},
      {"conv_transpose3d 2x2x2, stride 2", "(4, 32, 4, 14, 14) to 16",
       [&] { return F::conv_transpose3d(coarse, wt3, {}, 2); }
       THEIRS(torch::conv_transpose3d(tcoarse, twt3, {}, 2))},
      {"avg_pool2d 3x3, stride 2, padding 1", "(8, 16, 64, 64)", [&] { return F::avg_pool2d(image, 3, 2, 1); }
       THEIRS(torch::avg_pool2d(timage, 3, 2, 1))},
      {"max_pool3d 2x2x2", "(4, 32, 8, 28, 28)", [&] { return F::max_pool3d(clip, 2); }
       THEIRS(torch::max_pool3d(tclip, 2))},
      {"avg_pool3d 3x3x3, stride 2, padding 1", "(4, 32, 8, 28, 28)", [&] { return F::avg_pool3d(clip, 3, 2, 1); }
       THEIRS(torch::avg_pool3d(tclip, 3, 2, 1))},
      // LibTorch's LP pool is the same composite over its average pool. Its channel_shuffle has no derivative
      // (1.13), so the anchor is the shuffle as its users write it: a view, a transpose and a copy.
      {"lp_pool2d p 2, 2x2", "(8, 16, 64, 64)", [&] { return F::lp_pool2d(image, 2.0, 2); }
       THEIRS(tf::lp_pool2d(timage, tf::LPPool2dFuncOptions(2.0, {2, 2})))},
      {"channel_shuffle, 4 groups", "(8, 16, 64, 64)", [&] { return F::channel_shuffle(image, 4); }
       THEIRS(timage.view({8, 4, 4, 64, 64}).transpose(1, 2).reshape({8, 16, 64, 64}))},
  };
  for (const Row& row : differentiable)
    if (wanted(row)) run(row, reps, true);
  // A write without autograd: index_put_ with accumulate into a fresh zero tensor each time.
  const Row put = {"index_put_ accumulate", "(65536, 256)[16384] +=", [&] {
                     Tensor z = kiln::zeros({65536, 256});
                     z.index_put_({idx}, updates, true);
                     return z;
                   } THEIRS(torch_put(tidx, tupdates))};
  const Row nonzero = {"nonzero", "(4096, 1024), half true", [&] { return kiln::nonzero(mask); }
                       THEIRS(tmask.nonzero())};
  for (const Row& row : {put, nonzero}) {
    if (!wanted(row)) continue;
    kiln::NoGradGuard no_grad;
    run(row, reps, false);
  }
#undef THEIRS
  return 0;
}
