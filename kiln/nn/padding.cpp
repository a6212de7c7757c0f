// Padding in every mode and the pixel shuffles: functions that only move elements. Padding by copies runs the
// pad kernels (kiln::pad with a mode) over up to three dims, and a gather per group of dims beyond that or on a
// device without them; the shuffles are views and a copy.
#include "kiln/nn/padding.h"

#include <algorithm>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/indexing.h"
#include "kiln/tensor/ops/pad.h"

namespace kiln::nn {
namespace functional {

namespace {
// Where each of the `before + n + after` outputs of one padded dim of size n reads from (pad.h, as the kernels).
std::vector<int64_t> source_positions(PadMode mode, int64_t n, int64_t before, int64_t after) {
  std::vector<int64_t> src;
  src.reserve(static_cast<size_t>(before + n + after));
  for (int64_t o = 0; o < before + n + after; ++o) src.push_back(padding::source(mode, o, n, before));
  return src;
}
}  // namespace

Tensor pad(const Tensor& x, IntArrayRef pads, PadMode mode, double value) {
  if (mode == PadMode::Constant) return kiln::pad(x, pads, value);
  KILN_CHECK(value == 0.0, "pad: mode ", padding::mode_name(mode), " takes no value (", value,
             "); only mode constant fills with one");
  ops::check_pad(x, pads, mode);
  const int64_t pairs = static_cast<int64_t>(pads.size()) / 2;
  if (pairs <= 3 && has_kernel<Op::pad>(x.device().type) && has_kernel<Op::pad_backward>(x.device().type))
    return kiln::pad(x, pads, mode);
  // With nothing to copy the output is empty too (the checks above leave no other case): constant's is the same.
  if (x.numel() == 0) return kiln::pad(x, pads, 0.0);
  // Beyond three dims, or on a device without the pad kernels: one gather per group of padded dims, each over
  // its dims flattened into one. The last two go together (a plane: one index_select forward, one index_add
  // back), the others one at a time, so that an index holds at most a plane's output positions.
  Tensor y = x;
  for (int64_t j = 0; j < pairs;) {
    const int64_t take = j == 0 ? std::min<int64_t>(2, pairs) : 1;
    const int64_t hi = x.dim() - 1 - j, lo = hi - take + 1;  // the group's dims, [lo, hi]
    // flat[k]: where output position k of the group reads, within the group's input positions (row-major).
    std::vector<int64_t> flat = {0};
    int64_t span = 1;  // the product of the group's input sizes after the current dim
    Shape out_shape = y.sizes();
    for (int64_t d = hi; d >= lo; --d) {
      const int64_t k = x.dim() - 1 - d, n = x.size(d), before = pads[2 * k], after = pads[2 * k + 1];
      const std::vector<int64_t> src = source_positions(mode, n, before, after);
      out_shape[static_cast<size_t>(d)] = static_cast<int64_t>(src.size());
      std::vector<int64_t> next;  // dim d varies slower than the dims already in flat
      next.reserve(src.size() * flat.size());
      for (int64_t s : src)
        for (int64_t f : flat) next.push_back(s * span + f);
      flat = std::move(next);
      span *= n;
    }
    int64_t outer = 1, rest = 1;
    for (int64_t d = 0; d < lo; ++d) outer *= y.size(d);
    for (int64_t d = hi + 1; d < y.dim(); ++d) rest *= y.size(d);
    const Tensor index =
        tensor(flat, {static_cast<int64_t>(flat.size())}, TensorOptions(kInt64).device(x.device()));
    y = index_select(y.reshape({outer, span, rest}), 1, index).view(out_shape);
    j += take;
  }
  return y;
}

Tensor pad(const Tensor& x, IntArrayRef pads, const Scalar& value) { return kiln::pad(x, pads, value); }

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  KILN_CHECK(r >= 1, "pixel_shuffle: upscale_factor must be positive, got ", r);
  KILN_CHECK(x.dim() >= 3, "pixel_shuffle: expected input (*, C r^2, H, W), got shape ", shape_str(x.sizes()));
  const int64_t k = x.dim() - 3, c = x.size(-3), h = x.size(-2), w = x.size(-1);
  KILN_CHECK(c % (r * r) == 0, "pixel_shuffle: ", c, " channels of input ", shape_str(x.sizes()),
             " are not divisible by upscale_factor^2 = ", r * r);
  Shape split(x.sizes().begin(), x.sizes().begin() + k), order, out = split;
  for (int64_t i = 0; i < k; ++i) order.push_back(i);
  for (int64_t s : {c / (r * r), r, r, h, w}) split.push_back(s);
  for (int64_t i : {0, 3, 1, 4, 2}) order.push_back(k + i);  // (C, r, r, H, W) -> (C, H, r, W, r)
  for (int64_t s : {c / (r * r), h * r, w * r}) out.push_back(s);
  return x.reshape(split).permute(order).reshape(out);
}

Tensor channel_shuffle(const Tensor& x, int64_t groups) {
  KILN_CHECK(groups >= 1, "channel_shuffle: groups must be positive, got ", groups);
  KILN_CHECK(x.dim() >= 3, "channel_shuffle: expected input (N, C, *) with at least one dim after C, got shape ",
             shape_str(x.sizes()));
  const int64_t c = x.size(1);
  KILN_CHECK(c % groups == 0, "channel_shuffle: ", c, " channels of input ", shape_str(x.sizes()),
             " are not divisible by groups = ", groups);
  Shape split = x.sizes();
  split[1] = c / groups;
  split.insert(split.begin() + 1, groups);  // (N, g, C / g, *)
  return x.reshape(split).transpose(1, 2).reshape(x.sizes());
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  KILN_CHECK(r >= 1, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  KILN_CHECK(x.dim() >= 3, "pixel_unshuffle: expected input (*, C, H r, W r), got shape ", shape_str(x.sizes()));
  const int64_t k = x.dim() - 3, c = x.size(-3), h = x.size(-2), w = x.size(-1);
  KILN_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: height and width of input ", shape_str(x.sizes()),
             " are not divisible by downscale_factor ", r);
  Shape split(x.sizes().begin(), x.sizes().begin() + k), order, out = split;
  for (int64_t i = 0; i < k; ++i) order.push_back(i);
  for (int64_t s : {c, h / r, r, w / r, r}) split.push_back(s);
  for (int64_t i : {0, 2, 4, 1, 3}) order.push_back(k + i);  // (C, H, r, W, r) -> (C, r, r, H, W)
  for (int64_t s : {c * r * r, h / r, w / r}) out.push_back(s);
  return x.reshape(split).permute(order).reshape(out);
}

}  // namespace functional

// ---- modules ----

const char* pad_layer_name(int dims, PadMode mode, bool zero) {
  static constexpr const char* kNames[5][3] = {{"ConstantPad1d", "ConstantPad2d", "ConstantPad3d"},
                                               {"ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d"},
                                               {"ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d"},
                                               {"CircularPad1d", "CircularPad2d", "CircularPad3d"},
                                               {"ZeroPad1d", "ZeroPad2d", "ZeroPad3d"}};
  return kNames[zero ? 4 : static_cast<int>(mode)][dims - 1];
}

PadImpl::PadImpl(const char* type_name, int64_t dims, PadMode mode, IntArrayRef padding, double value)
    : Module(type_name), mode_(mode), value_(value) {
  KILN_CHECK(padding.size() == 1 || static_cast<int64_t>(padding.size()) == 2 * dims, type_name,
             ": padding must be one value for every side or ", 2 * dims, " values (the last dim's first), got ",
             shape_str(padding));
  padding_ = padding.size() == 1 ? Shape(static_cast<size_t>(2 * dims), padding[0]) : padding.vec();
}

Tensor PadImpl::forward(const Tensor& x) {
  KILN_CHECK(x.dim() > static_cast<int64_t>(padding_.size()) / 2, type_name(), ": expected an input with more than ",
             padding_.size() / 2, " dims (its leading ones batch and channels), got shape ", shape_str(x.sizes()));
  return functional::pad(x, padding_, mode_, value_);
}

// As PyTorch prints them: ReflectionPad2d((1, 1, 2, 0)), ZeroPad1d((1, 1)), ConstantPad1d(padding=(1, 1), value=0).
std::string PadImpl::extra_repr() const {
  const std::string sides = shape_str(padding_);
  const bool constant = type_name().rfind("ConstantPad", 0) == 0;
  return constant ? detail::concat("padding=", sides, ", value=", value_) : sides;
}

PixelShuffleImpl::PixelShuffleImpl(int64_t upscale_factor) : Module("PixelShuffle"), factor_(upscale_factor) {
  KILN_CHECK(upscale_factor >= 1, "PixelShuffle: upscale_factor must be positive, got ", upscale_factor);
}

ChannelShuffleImpl::ChannelShuffleImpl(int64_t groups) : Module("ChannelShuffle"), groups_(groups) {
  KILN_CHECK(groups >= 1, "ChannelShuffle: groups must be positive, got ", groups);
}

PixelUnshuffleImpl::PixelUnshuffleImpl(int64_t downscale_factor)
    : Module("PixelUnshuffle"), factor_(downscale_factor) {
  KILN_CHECK(downscale_factor >= 1, "PixelUnshuffle: downscale_factor must be positive, got ", downscale_factor);
}

}  // namespace kiln::nn
