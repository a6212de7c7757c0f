// nn::functional: the layers' math as plain differentiable functions, and the losses. Each is a composite of
// autograd's differentiable ops (no backward of its own), so it runs on every device its parts run on.
//
// Shapes follow PyTorch: N batch, C classes or channels, D features.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd/autograd.h"

namespace kiln::nn::functional {

// Some functions have fused kernels (CPU and CUDA) beside a composite of differentiable ops, which other dtypes
// and shapes take (embedding_bag; grid_sample over images in bilinear and nearest modes). While a
// CompositeOnlyGuard lives, those functions take the composite on this thread everywhere: for tests that hold
// the two against each other.
class CompositeOnlyGuard {
 public:
  CompositeOnlyGuard();
  ~CompositeOnlyGuard();
  CompositeOnlyGuard(const CompositeOnlyGuard&) = delete;
  CompositeOnlyGuard& operator=(const CompositeOnlyGuard&) = delete;
  // Whether one lives on this thread.
  static bool active();

 private:
  bool previous_;
};

enum class Reduction { None, Mean, Sum };

// x: (..., in), weight: (out, in), bias: (out) or undefined -> (..., out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training; identity otherwise.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
// Channel dropout: zeroes whole channels (dim 1 of (N, C, ...), dim 0 of an unbatched (C, ...)), each with
// probability p, and scales the rest by 1 / (1 - p) when training. dropout1d takes (N, C, L) or (C, L),
// dropout2d (N, C, H, W) or (C, H, W), dropout3d (N, C, D, H, W) or (C, D, H, W).
Tensor dropout1d(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
Tensor dropout3d(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
// Alpha dropout, for self-normalizing (SELU) networks: a dropped element takes SELU's negative saturation value
// -alpha' (alpha' = SELU's lambda * alpha = 1.7580993408473766) instead of 0, and then every element is moved by
// an affine map a x + b chosen so that an input of zero mean and unit variance keeps both:
//   a = 1 / sqrt((alpha'^2 p + 1) (1 - p)),   kept: a x + a alpha' p,   dropped: a alpha' (p - 1).
// The gradient is a where kept and 0 where dropped. feature_alpha_dropout draws once per channel ((N, C, ...),
// dim 1, two dims at least) and drops whole channels. NOTE: training defaults to false here, as in PyTorch's
// F.alpha_dropout (dropout's default is true); the modules pass their mode.
Tensor alpha_dropout(const Tensor& x, double p = 0.5, bool training = false, Generator* gen = nullptr);
Tensor feature_alpha_dropout(const Tensor& x, double p = 0.5, bool training = false, Generator* gen = nullptr);
// Normalizes over the last normalized_shape.size() dims; weight and bias (normalized_shape) may be undefined.
Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// Root-mean-square normalization over the last normalized_shape.size() dims: x / sqrt(mean(x^2) + eps), times
// weight (normalized_shape) when defined. eps unset: the dtype's machine epsilon, as PyTorch's. 16-bit inputs
// are normalized in float32 and rounded back once.
Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
// indices: int64 or int32 of any shape; weight: (num_embeddings, D) -> (*indices.shape, D). padding_idx (negative
// counts from the end): that row is looked up as any other but gets no gradient, as PyTorch's. max_norm: first,
// each row that indices name whose norm_type-norm exceeds max_norm is scaled in place, outside autograd, by
// max_norm / (norm + 1e-7), as PyTorch's embedding_renorm_ does (so weight changes, as there).
// scale_grad_by_freq: each row's gradient is divided by how many times indices name it (the batch's word
// frequencies), as PyTorch's.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2.0,
                 bool scale_grad_by_freq = false);
// How embedding_bag reduces each bag's rows.
enum class BagMode { Sum, Mean, Max };
struct EmbeddingBagOptions {
  BagMode mode = BagMode::Mean;  // PyTorch's default
  std::optional<int64_t> padding_idx;  // its entries leave their bags: not summed, counted or compared
  bool include_last_offset = false;    // offsets has B + 1 entries, the last one where the last bag ends
  std::optional<double> max_norm;      // as embedding's: the named rows renormalized in place first
  double norm_type = 2.0;
  bool scale_grad_by_freq = false;     // as embedding's, over all the bags' indices; not with mode Max (as PyTorch)
};
// The rows of weight (num_embeddings, D) that each bag's indices name, reduced to one: (B, D). Bags are the rows
// of a 2-d input (B, L), or, for a 1-d input, the runs offsets (B, int64, from 0, non-decreasing) start. An empty
// bag gives zeros. per_sample_weights (input's shape, weight's dtype, mode Sum only) scale each row first. Max's
// gradient goes to the first maximum of each bag and dim. For float32 and float64 tables fused kernels each way
// (CPU and CUDA); for 16-bit ones a composite: for sum and mean one gather and one index_add, for max the bags
// padded to the longest one (kiln/nn/embedding.cpp). The indices and offsets are read on the host (a
// synchronization on a GPU), where the bags are laid out, then copied to the table's device.
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const Tensor& offsets = {},
                     const EmbeddingBagOptions& options = {}, const Tensor& per_sample_weights = {});

// x1 (..., in1), x2 (..., in2), weight (out, in1, in2), bias (out) or undefined -> (..., out):
// y[o] = x1 weight[o] x2 + bias[o].
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = {});

// ---- convolution, pooling, normalization ----
// Two sizes (height, width); one number means both.
struct Pair {
  int64_t h, w;
  Pair(int64_t both) : h(both), w(both) {}  // NOLINT: conv2d(x, w, b, 2) reads as PyTorch's stride=2
  Pair(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  // {h, w} or {both}, also where a template forwards it as a list: nn::AdaptiveAvgPool2d({7, 7}).
  Pair(std::initializer_list<int64_t> values)  // NOLINT: as the braced list it is
      : h(values.size() ? *values.begin() : 0), w(values.size() ? *(values.end() - 1) : 0) {
    KILN_CHECK(values.size() == 1 || values.size() == 2, "Pair: expected one size or two (height, width), got ",
               values.size());
  }
};
// Three sizes (depth, height, width); one number means all three.
struct Triple {
  int64_t d, h, w;
  Triple(int64_t all) : d(all), h(all), w(all) {}  // NOLINT: as Pair's
  Triple(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
  Triple(std::initializer_list<int64_t> values)  // NOLINT: {d, h, w} or {all}
      : d(values.size() ? *values.begin() : 0), h(values.size() == 3 ? values.begin()[1] : d),
        w(values.size() ? *(values.end() - 1) : 0) {
    KILN_CHECK(values.size() == 1 || values.size() == 3, "Triple: expected one size or three (depth, height, "
               "width), got ", values.size());
  }
};
// A size that may be unset (a pool's stride, which is then the kernel): a number, a braced list, a Pair or Triple,
// or nothing. std::optional<Pair> itself cannot take a braced list ({.stride = {1, 2}}).
template <class Size>
struct OptionalSize : std::optional<Size> {
  OptionalSize() = default;
  OptionalSize(std::nullopt_t) {}                                   // NOLINT
  OptionalSize(Size size) : std::optional<Size>(size) {}            // NOLINT
  OptionalSize(int64_t all) : std::optional<Size>(Size(all)) {}     // NOLINT
  OptionalSize(std::initializer_list<int64_t> sizes) : std::optional<Size>(Size(sizes)) {}  // NOLINT
  OptionalSize(const std::optional<Size>& size) : std::optional<Size>(size) {}  // NOLINT
};
// PyTorch's padding="same" and padding="valid" for the convolutions: F::conv2d(x, w, b, 1, F::same).
// Same pads each dim by dilation (k - 1) in all, half before and the rest (one more when odd) after, so the
// output keeps the input's size; it needs stride 1. Valid is no padding.
enum class PadRule { Same, Valid };
inline constexpr PadRule same = PadRule::Same;
inline constexpr PadRule valid = PadRule::Valid;
// padding="same"'s (before, after) in one dim of that kernel and dilation.
std::pair<int64_t, int64_t> same_padding(int64_t kernel, int64_t dilation);

// x: (N, C, H, W), weight: (O, C / groups, kh, kw), bias: (O) or undefined -> (N, O, OH, OW) with
// OH = (H + 2 ph - dh (kh - 1) - 1) / sh + 1. im2col + GEMM: the patches are a strided view (unfold), copied
// into a (N OH OW, C kh kw) matrix and multiplied by the weight.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = 1, Pair padding = 0,
              Pair dilation = 1, int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, PadRule padding,
              Pair dilation = 1, int64_t groups = 1);
// x: (N, C, D, H, W), weight: (O, C / groups, kd, kh, kw) -> (N, O, OD, OH, OW), each dim as conv2d's. One conv2d
// over (N OD, kd C, H, W): each output depth's kd input slices stacked as channels (a copy of kd times x), the
// weight's kd taps laid out to match.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Triple stride = 1, Triple padding = 0,
              Triple dilation = 1, int64_t groups = 1);
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Triple stride, PadRule padding,
              Triple dilation = 1, int64_t groups = 1);
// The transposed convolution (conv2d's gradient with respect to its input, used as a layer, e.g. to upsample):
// x: (N, C, H, W), weight: (C, O / groups, kh, kw), bias: (O) or undefined -> (N, O, OH, OW) with
// OH = (H - 1) sh - 2 ph + dh (kh - 1) + oph + 1; output_padding (< stride or dilation) picks among the sizes
// a strided conv2d maps to H. Through the convolution kernels, with gradients of any order.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = 1,
                        Pair padding = 0, Pair output_padding = 0, int64_t groups = 1, Pair dilation = 1);
// The same over (N, C, L) (conv_transpose2d over a height of 1) and over (N, C, D, H, W): weight (C, O / groups,
// k...), each dim's output (in - 1) s - 2 p + d (k - 1) + op + 1. The 3-d one is one conv_transpose2d per input
// depth with the kd taps as output channels, each tap's result then added at depth i sd + u dd (index_add).
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Triple stride = 1,
                        Triple padding = 0, Triple output_padding = 0, int64_t groups = 1, Triple dilation = 1);
// x: (N, C, L), weight: (O, C / groups, k) -> (N, O, OL)
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, PadRule padding,
              int64_t dilation = 1, int64_t groups = 1);
// x: (N, C, L) or (C, L): max_pool2d and avg_pool2d over a height of one.
Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  bool count_include_pad = true, bool ceil_mode = false);
// x: (N, C, H, W) (or (C, H, W)); padding is implicit -inf; the gradient goes to the first maximum of a window.
// ceil_mode: the output size rounds up, so a last window that runs past the end still counts, as long as it
// starts inside the input or its left padding (PyTorch's rule).
Tensor max_pool2d(const Tensor& x, Pair kernel, OptionalSize<Pair> stride = std::nullopt, Pair padding = 0,
                  Pair dilation = 1, bool ceil_mode = false);
// max_pool2d's values with, for each, where its maximum is: h * W + w within its (n, c) plane of x, PyTorch's
// return_indices (what max_unpool2d takes). Floating inputs, on a device with the max-pool kernels.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel,
                                                  OptionalSize<Pair> stride = std::nullopt,
                                                  Pair padding = 0, Pair dilation = 1, bool ceil_mode = false);
// The same over (N, C, L) or (C, L); the indices are positions along L.
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel,
                                                  std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                                                  int64_t dilation = 1, bool ceil_mode = false);
// max_pool2d's partial inverse: a zero tensor of output_size (by default (H - 1) stride - 2 padding + kernel per
// dim) with each value of x written at its index; the gradient gathers from there. x and indices: the pool's
// (N, C, H, W) (or (C, H, W)) outputs. An index outside the output is an error. Where two values share an
// index (overlapping windows), the later one in x's order stays, and the gradient still reaches both, as in
// PyTorch on the CPU.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, Pair kernel, OptionalSize<Pair> stride = std::nullopt,
                    Pair padding = 0, std::optional<Pair> output_size = std::nullopt);
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t kernel,
                    std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                    std::optional<int64_t> output_size = std::nullopt);
// count_include_pad: padded zeros count in the mean (PyTorch's default); the part of a ceil_mode window past
// the padded end never does. divisor_override: divide every window's sum by it instead.
// NOTE: count_include_pad comes before ceil_mode here (PyTorch has ceil_mode first), as kiln had it before.
Tensor avg_pool2d(const Tensor& x, Pair kernel, OptionalSize<Pair> stride = std::nullopt, Pair padding = 0,
                  bool count_include_pad = true, bool ceil_mode = false,
                  std::optional<int64_t> divisor_override = std::nullopt);
// im2col as a function: the sliding blocks of x (N, C, H, W) or (C, H, W) as columns, (N, C kh kw, L), L the
// number of blocks (conv2d's output positions), each column ordered channel, then kernel row, then column.
// fold is its adjoint: columns (N, C kh kw, L) or (C kh kw, L) added back into an image of output_size,
// overlapping blocks summing (one index_add). PyTorch's argument order: kernel, dilation, padding, stride.
Tensor unfold(const Tensor& x, Pair kernel, Pair dilation = 1, Pair padding = 0, Pair stride = 1);
Tensor fold(const Tensor& columns, Pair output_size, Pair kernel, Pair dilation = 1, Pair padding = 0, Pair stride = 1);
// AlexNet's local response normalization across channels of x (N, C, ...): x / (k + alpha / size *
// sum of x^2 over the size channels around each, zeros past the ends)^beta.
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
// The 3-d pools over (N, C, D, H, W) or (C, D, H, W), with the 2-d ones' rules in each dim (the average's
// divisor is the product of each dim's count). Both are separable: the 2-d pool over every (H, W) plane, then
// windows along depth.
Tensor max_pool3d(const Tensor& x, Triple kernel, OptionalSize<Triple> stride = std::nullopt, Triple padding = 0,
                  Triple dilation = 1, bool ceil_mode = false);
// max_pool3d's values with, for each, where its maximum is: d * H * W + h * W + w within its (n, c) volume of
// x, the first maximum in that order (PyTorch's return_indices, what max_unpool3d takes). Floating inputs.
std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, Triple kernel,
                                                  OptionalSize<Triple> stride = std::nullopt, Triple padding = 0,
                                                  Triple dilation = 1, bool ceil_mode = false);
// max_unpool2d over volumes: x and indices (N, C, D, H, W) or (C, D, H, W) from max_pool3d_with_indices.
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, Triple kernel, OptionalSize<Triple> stride = std::nullopt,
                    Triple padding = 0, std::optional<Triple> output_size = std::nullopt);
Tensor avg_pool3d(const Tensor& x, Triple kernel, OptionalSize<Triple> stride = std::nullopt, Triple padding = 0,
                  bool count_include_pad = true, bool ceil_mode = false,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Power-average pooling, PyTorch's LPPool: (sum over each window of x^p)^(1/p), computed as PyTorch does, from
// the average pool of x^p (no padding) times the window's size, so a ceil_mode window that runs past the end
// is scaled as if whole. p = 1 is sum pooling; as p grows it tends to max pooling of non-negative inputs. A
// negative window sum (odd p, negative inputs) has no real 1/p-th power: NaN, as in PyTorch. (N, C, L) or
// (C, L); (N, C, H, W) or (C, H, W); (N, C, D, H, W) or (C, D, H, W). An unset stride is the kernel.
Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, std::optional<int64_t> stride = std::nullopt,
                 bool ceil_mode = false);
Tensor lp_pool2d(const Tensor& x, double norm_type, Pair kernel, OptionalSize<Pair> stride = std::nullopt,
                 bool ceil_mode = false);
Tensor lp_pool3d(const Tensor& x, double norm_type, Triple kernel, OptionalSize<Triple> stride = std::nullopt,
                 bool ceil_mode = false);
// Averages over the bins PyTorch uses: bin i of n covers [floor(i H / n), ceil((i + 1) H / n)). Inputs with or
// without the batch dim: (N, C, L) or (C, L); (N, C, H, W) or (C, H, W); (N, C, D, H, W) or (C, D, H, W).
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);
// output_size: one value for all three dims, or (D, H, W)
Tensor adaptive_avg_pool3d(const Tensor& x, IntArrayRef output_size);
// The max of each of those bins; the gradient goes to the first maximum of a bin (a NaN is a bin's maximum).
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size);
Tensor adaptive_max_pool3d(const Tensor& x, IntArrayRef output_size);  // one value for all dims, or (D, H, W)
// {values, indices} over x's last output_size.size() dims (one to three; at least one dim before them): each
// index is where its value is within those dims flattened (h * W + w for two), int64, as PyTorch's.
std::pair<Tensor, Tensor> adaptive_max_pool_with_indices(const Tensor& x, IntArrayRef output_size);
// What pad fills the border with (kiln::PadMode): a constant value; the input mirrored about its edge element
// (Reflect: for (a, b, c, d) padded by 2, c b | a b c d | c b); the edge element repeated (Replicate:
// a a | a b c d | d d); or the other end wrapped around (Circular: c d | a b c d | a b).
using kiln::PadMode;
// Pads x's last pads.size() / 2 dims by (before, after) pairs, the last dim's first (as kiln::pad, which is the
// constant mode). Reflect needs each pad below the dim's size, replicate a non-empty dim, circular each pad in
// [0, the dim's size]; other negative pads crop. The gradient sums each output back into the element it copied.
// Up to three dims run the pad kernels (kiln::pad with a mode), more a gather per dim.
Tensor pad(const Tensor& x, IntArrayRef pads, PadMode mode, double value = 0.0);
// The constant mode: kiln::pad.
Tensor pad(const Tensor& x, IntArrayRef pads, const Scalar& value = 0);
// (*, C r^2, H, W) -> (*, C, H r, W r): each group of r^2 channels becomes an r x r block of pixels (sub-pixel
// convolution's upsampling); pixel_unshuffle is its inverse. Views and one copy; any device.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// (N, C, *) -> (N, C, *) with the channels regrouped: the C = g k channels read as (g, k) come out in (k, g)
// order, channel i k + j moving to j g + i (ShuffleNet's channel shuffle). Views and one copy; any device.
Tensor channel_shuffle(const Tensor& x, int64_t groups);
struct InterpolateOptions {
  // The output's spatial sizes, one per spatial dim (L; H, W; or D, H, W) or one for all of them; or
  std::vector<int64_t> size;
  // each spatial dim scaled by its factor (one for all, or one per dim) and rounded down; the factors also place
  // the source positions, as PyTorch's do (recompute_scale_factor unset).
  std::vector<double> scale_factor;
  // nearest, nearest-exact, linear (N, C, L), bilinear or bicubic (N, C, H, W), trilinear (N, C, D, H, W), area.
  std::string mode = "nearest";
  bool align_corners = false;  // linear modes and bicubic: the corner pixels' centres map onto each other
};
// Resizes x (N, C, ...) over its 1 to 3 spatial dims as torch.nn.functional.interpolate, with PyTorch's source
// positions: nearest reads floor(out position * in / out) (in single precision), nearest-exact the pixel whose
// centre is nearest; linear weighs the two nearest positions per dim (bilinear, trilinear: per dim in turn),
// bicubic the four nearest with Keys' cubic (a = -0.75, edges repeated); area averages adaptive pooling's bins.
// Any device; its gradient sums each output's share back into the positions it read.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// A spatial transformer's sampling grid: theta (N, 2, 3) maps each output pixel's normalized position (x, y, 1)
// (-1 and 1 the image's edges, or with align_corners its corner pixels' centres) to where it samples from;
// size is the output's (N, C, H, W) -> grid (N, H, W, 2), the last dim (x, y). Volumes: theta (N, 3, 4), size
// (N, C, D, H, W) -> grid (N, D, H, W, 3), the last dim (x, y, z).
Tensor affine_grid(const Tensor& theta, IntArrayRef size, bool align_corners = false);
struct GridSampleOptions {
  // or "nearest" (halves round to even, as PyTorch's), or "bicubic" (images only: Keys' cubic, a = -0.75, over
  // the 4 x 4 taps around each position, each tap's coordinate padded on its own, as PyTorch does)
  std::string mode = "bilinear";
  std::string padding_mode = "zeros";  // outside the image: "zeros", "border" (the edge repeated), "reflection"
  bool align_corners = false;          // as affine_grid's
};
// Samples x (N, C, H, W) at grid (N, Ho, Wo, 2) of normalized (x, y) positions -> (N, C, Ho, Wo), as
// torch.nn.functional.grid_sample; volumes x (N, C, D, H, W) at grid (N, Do, Ho, Wo, 3) of (x, y, z) ->
// (N, C, Do, Ho, Wo), "bilinear" then being trilinear, as in PyTorch. Images in float32 or float64, bilinear or
// nearest, take fused kernels (CPU and CUDA); the rest a composite: the positions unnormalized, padded and
// reflected with differentiable ops, then one gather per corner (4 or 8). Gradients reach x and (bilinear,
// bicubic) the grid. On a GPU the fused backward adds into x's gradient with atomics (its last bits may vary
// from run to run).
Tensor grid_sample(const Tensor& x, const Tensor& grid, const GridSampleOptions& options = {});
// x: (N, C, ...). Training: normalizes with the batch's statistics over every dim but C and updates the running
// ones (running = (1 - momentum) running + momentum batch, with the unbiased batch variance); eval: uses them.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
// Sums a float64 tensor in place over the processes that share batch statistics (each gets the same bits).
using CrossProcessSum = std::function<void(Tensor&)>;
// batch_norm in training over the batches of several processes (PyTorch's SyncBatchNorm): each process passes
// its own x (N_r, C, ...; N_r may differ, even be 0), and the statistics are those of all of them together.
// One `sum` of 2C + 1 float64 values forward, one of 2C backward (when x needs a gradient), so every process
// must make the same calls. The gradients of weight and bias are this process's own sums, as PyTorch's: DDP
// averages them. First-order only (no create_graph through it).
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, double momentum, double eps, const CrossProcessSum& sum);
// x: (N, C, ...): normalizes each of num_groups groups of C / num_groups channels (with all their positions).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

// x: (N, C, ...): normalizes each channel of each sample over its positions (group_norm with one group a
// channel). With use_input_stats false it uses running_mean/var instead (eval with tracked statistics); with it
// true and running statistics given, they move towards the batch's mean over samples of each sample's mean and
// unbiased variance, as PyTorch's instance_norm does.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

// ---- losses ----
struct CrossEntropyOptions {
  Tensor weight;                 // (C) per-class weights, or undefined
  int64_t ignore_index = -100;   // targets with this class contribute nothing (class-index targets only)
  double label_smoothing = 0.0;  // in [0, 1]
  Reduction reduction = Reduction::Mean;
};
// input: (N, C) or (N, C, d1, ...) logits; target: (N) / (N, d1, ...) int64 class indices, or probabilities of
// input's shape. Mean reduction divides by the summed weights of the counted targets, as PyTorch does.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});
struct NllLossOptions {
  Tensor weight;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};
// input: (N, C) / (N, C, d1, ...) log-probabilities; target: (N) / (N, d1, ...) int64 class indices.
Tensor nll_loss(const Tensor& input, const Tensor& target, const NllLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);
// input: probabilities in [0, 1]; log terms clamped at -100, as PyTorch does.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);
// input: logits; numerically stable (never computes sigmoid then log). pos_weight: (C) or undefined.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);
// input: log-probabilities; target: probabilities (or log-probabilities with log_target). "batchmean" is
// Reduction::Mean divided by the batch size instead of the element count: pass batchmean = true.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, bool log_target = false,
              bool batchmean = false);

// The loss's reduction: the elements themselves (None), their sum, or their mean; for losses written by hand.
Tensor reduce_loss(const Tensor& loss, Reduction reduction);

// ---- distances, and the margin, embedding and likelihood losses (distance_losses.cpp), as PyTorch's ----
// x / max(||x||_p, eps) along dim.
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// The cosine of the angle between x1 and x2 (broadcast together) along dim, each divided by its 2-norm held at
// eps or above (the hold passes the gradient, as PyTorch's).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// ||x1 - x2 + eps||_p along the last dim.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);
// y = 1 ranks x1 above x2, y = -1 below: max(0, -y (x1 - x2) + margin). All three of one shape.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin = 0.0,
                           Reduction reduction = Reduction::Mean);
// x: distances; y = 1: x, y = -1: max(0, margin - x) (other values of y: both terms, as PyTorch).
Tensor hinge_embedding_loss(const Tensor& x, const Tensor& y, double margin = 1.0, Reduction reduction = Reduction::Mean);
// log(1 + e^(-y x)) for y in {-1, 1}, computed without overflow.
Tensor soft_margin_loss(const Tensor& x, const Tensor& y, Reduction reduction = Reduction::Mean);
// x1, x2: (N, D) or (D); y: (N) or 0-dim, in {-1, 1}. y = 1: 1 - cos, y = -1: max(0, cos - margin), with cos
// computed as PyTorch's cosine_embedding_loss does (1e-12 added to each squared norm).
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin = 0.0,
                             Reduction reduction = Reduction::Mean);
struct TripletMarginOptions {
  double margin = 1.0;
  double p = 2.0;
  double eps = 1e-6;
  bool swap = false;  // the negative's distance is the smaller of its distances to the anchor and the positive
  Reduction reduction = Reduction::Mean;
};
// max(d(anchor, positive) - d(anchor, negative) + margin, 0), d the pairwise_distance.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginOptions& options = {});
struct PoissonNLLOptions {
  bool log_input = true;  // the input is the log of the rate
  bool full = false;      // add Stirling's approximation of log(target!)
  double eps = 1e-8;      // without log_input: log(input + eps)
  Reduction reduction = Reduction::Mean;
};
// log_input: e^x - y x; else x - y log(x + eps). full adds y log y - y + log(2 pi y) / 2 where y > 1.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNLLOptions& options = {});
struct GaussianNLLOptions {
  bool full = false;  // add log(2 pi) / 2
  double eps = 1e-6;  // the variance is held at eps or above (passing its gradient, as PyTorch's)
  Reduction reduction = Reduction::Mean;
};
// (log(var) + (input - target)^2 / var) / 2. var: input's shape, or input's without its last dim, or with a last
// dim of 1 (one variance for the features); no entry negative.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         const GaussianNLLOptions& options = {});
// x: (N, C) logits, y: (N, C) of 0 and 1: the mean over the C classes of -(y log sigmoid(x) + (1 - y)
// log sigmoid(-x)), each class times weight (C) when given.
Tensor multilabel_soft_margin_loss(const Tensor& x, const Tensor& y, const Tensor& weight = {},
                                   Reduction reduction = Reduction::Mean);
struct MultiMarginOptions {
  int64_t p = 1;  // 1 or 2
  double margin = 1.0;
  Tensor weight;  // (C) per-class weights, or undefined
  Reduction reduction = Reduction::Mean;
};
// x: (N, C) or (C) scores, y: (N) or 0-dim int64 classes: the sum over classes i != y of
// max(0, margin - x[y] + x[i])^p, divided by C, times weight[y] when given.
Tensor multi_margin_loss(const Tensor& x, const Tensor& y, const MultiMarginOptions& options = {});

// ---- connectionist temporal classification (ctc_loss.cpp) ----
struct CTCLossOptions {
  int64_t blank = 0;  // the blank class
  // Mean: each loss divided by its target's length (at least 1), then the mean over the batch, as PyTorch's.
  Reduction reduction = Reduction::Mean;
  bool zero_infinity = false;  // infinite losses (targets that cannot fit their inputs) and their gradients -> 0
};
// The negative log-likelihood of each target sequence summed over every alignment of it to the inputs' frames
// (kiln/tensor/ops/ctc.h has the math). log_probs: (T, N, C) log-probabilities over C classes (a log_softmax's
// output), or unbatched (T, C); targets: (N, S) labels padded to S, or 1-D with each row's labels one after
// another (unbatched: (S)), int64 or int32, never blank; input_lengths, target_lengths: one per batch element
// (input_lengths <= T). 16-bit log_probs are computed in float32.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, IntArrayRef input_lengths, IntArrayRef target_lengths,
                const CTCLossOptions& options = {});
// The lengths as integer tensors of N elements (0-dim when unbatched), on any device, as PyTorch takes them.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CTCLossOptions& options = {});

// ---- more activations (activation.cpp), as torch.nn.functional's; at a kink the gradient is PyTorch's where
// it says which side (elu takes x <= 0's, hardtanh's family passes none at its edges) ----
Tensor elu(const Tensor& x, double alpha = 1.0);   // x > 0 ? x : alpha (e^x - 1)
Tensor selu(const Tensor& x);                     // scale elu(x, alpha), SELU's two constants
Tensor celu(const Tensor& x, double alpha = 1.0);  // x > 0 ? x : alpha (e^(x / alpha) - 1); alpha != 0
Tensor softsign(const Tensor& x);                 // x / (1 + |x|)
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);  // x clamped to [min, max]
Tensor relu6(const Tensor& x);                    // hardtanh(x, 0, 6)
Tensor hardsigmoid(const Tensor& x);              // relu6(x + 3) / 6
Tensor hardswish(const Tensor& x);                // x relu6(x + 3) / 6
Tensor mish(const Tensor& x);                     // x tanh(softplus(x))
Tensor logsigmoid(const Tensor& x);               // log(sigmoid(x)) = min(x, 0) - log1p(e^-|x|), never overflows
Tensor tanhshrink(const Tensor& x);               // x - tanh(x)
Tensor softshrink(const Tensor& x, double lambd = 0.5);  // x -+ lambd beyond +-lambd, 0 between; lambd >= 0
Tensor hardshrink(const Tensor& x, double lambd = 0.5);  // x where |x| > lambd, else 0
Tensor threshold(const Tensor& x, double threshold, double value);  // value where x <= threshold, else x
Tensor glu(const Tensor& x, int64_t dim = -1);    // a sigmoid(b), where a, b are x's halves along dim
Tensor softmin(const Tensor& x, int64_t dim);      // softmax(-x, dim)
// x > 0 ? x : weight x; weight: (1), or (C) for x's dim 1 (the channels of (N, C, ...)).
Tensor prelu(const Tensor& x, const Tensor& weight);
// Randomized leaky ReLU: training, each x <= 0 times its own slope drawn uniformly from [lower, upper]; else
// times (lower + upper) / 2.
Tensor rrelu(const Tensor& x, double lower = 1.0 / 8, double upper = 1.0 / 3, bool training = false,
             Generator* gen = nullptr);

// The activations and softmax are autograd's ops themselves (namespace kiln); named here too, so that
// F::relu(x) and F::softmax(x, 1) read as in PyTorch.
using kiln::gelu;
using kiln::leaky_relu;
using kiln::log_softmax;
using kiln::relu;
using kiln::sigmoid;
using kiln::silu;
using kiln::softmax;
using kiln::softplus;
using kiln::tanh;

}  // namespace kiln::nn::functional

namespace kiln::nn {
namespace F = functional;
}
