// The padding layers (ZeroPad, ConstantPad, ReflectionPad, ReplicationPad, CircularPad; 1d, 2d and 3d) and
// PixelShuffle / PixelUnshuffle / ChannelShuffle: functional::pad and the pixel and channel shuffles as layers.
#pragma once

#include <string>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

using functional::PadMode;

// Pads the last `dims` dims of its input: padding is one value for every side, or 2 * dims values in
// functional::pad's order (the last dim's before and after first). The named layers below fix dims and mode.
class PadImpl : public Module {
 public:
  PadImpl(const char* type_name, int64_t dims, PadMode mode, IntArrayRef padding, double value = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  PadMode mode_;
  Shape padding_;
  double value_;
};

// "ReflectionPad2d" for (2, Reflect); zero: "ZeroPad2d" (a constant mode).
const char* pad_layer_name(int dims, PadMode mode, bool zero = false);

// One layer per (dims, mode): nn::ReflectionPad2d(1), nn::ReplicationPad1d({2, 0}), nn::ConstantPad2d(1, -1.0).
template <int Dims, PadMode Mode>
class PadNdImpl : public PadImpl {
 public:
  explicit PadNdImpl(IntArrayRef padding)
    requires(Mode != PadMode::Constant)
      : PadImpl(pad_layer_name(Dims, Mode), Dims, Mode, padding) {}
  PadNdImpl(IntArrayRef padding, double value)
    requires(Mode == PadMode::Constant)
      : PadImpl(pad_layer_name(Dims, Mode), Dims, Mode, padding, value) {}
};

// Constant padding with zeros.
template <int Dims>
class ZeroPadNdImpl : public PadImpl {
 public:
  explicit ZeroPadNdImpl(IntArrayRef padding)
      : PadImpl(pad_layer_name(Dims, PadMode::Constant, true), Dims, PadMode::Constant, padding) {}
};

using ZeroPad1d = ModuleHolder<ZeroPadNdImpl<1>>;
using ZeroPad2d = ModuleHolder<ZeroPadNdImpl<2>>;
using ZeroPad3d = ModuleHolder<ZeroPadNdImpl<3>>;
using ConstantPad1d = ModuleHolder<PadNdImpl<1, PadMode::Constant>>;
using ConstantPad2d = ModuleHolder<PadNdImpl<2, PadMode::Constant>>;
using ConstantPad3d = ModuleHolder<PadNdImpl<3, PadMode::Constant>>;
using ReflectionPad1d = ModuleHolder<PadNdImpl<1, PadMode::Reflect>>;
using ReflectionPad2d = ModuleHolder<PadNdImpl<2, PadMode::Reflect>>;
using ReflectionPad3d = ModuleHolder<PadNdImpl<3, PadMode::Reflect>>;
using ReplicationPad1d = ModuleHolder<PadNdImpl<1, PadMode::Replicate>>;
using ReplicationPad2d = ModuleHolder<PadNdImpl<2, PadMode::Replicate>>;
using ReplicationPad3d = ModuleHolder<PadNdImpl<3, PadMode::Replicate>>;
using CircularPad1d = ModuleHolder<PadNdImpl<1, PadMode::Circular>>;
using CircularPad2d = ModuleHolder<PadNdImpl<2, PadMode::Circular>>;
using CircularPad3d = ModuleHolder<PadNdImpl<3, PadMode::Circular>>;

// (*, C r^2, H, W) -> (*, C, H r, W r) (functional::pixel_shuffle).
class PixelShuffleImpl : public Module {
 public:
  explicit PixelShuffleImpl(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override { return functional::pixel_shuffle(x, factor_); }
  std::string extra_repr() const override { return detail::concat("upscale_factor=", factor_); }

 private:
  int64_t factor_;
};
using PixelShuffle = ModuleHolder<PixelShuffleImpl>;

// (*, C, H r, W r) -> (*, C r^2, H, W) (functional::pixel_unshuffle).
class PixelUnshuffleImpl : public Module {
 public:
  explicit PixelUnshuffleImpl(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override { return functional::pixel_unshuffle(x, factor_); }
  std::string extra_repr() const override { return detail::concat("downscale_factor=", factor_); }

 private:
  int64_t factor_;
};
using PixelUnshuffle = ModuleHolder<PixelUnshuffleImpl>;

// ShuffleNet's channel shuffle of (N, C, *) with C = groups k: the (groups, k) channels come out in (k, groups)
// order (functional::channel_shuffle).
class ChannelShuffleImpl : public Module {
 public:
  explicit ChannelShuffleImpl(int64_t groups);
  Tensor forward(const Tensor& x) override { return functional::channel_shuffle(x, groups_); }
  std::string extra_repr() const override { return detail::concat("groups=", groups_); }

 private:
  int64_t groups_;
};
using ChannelShuffle = ModuleHolder<ChannelShuffleImpl>;

}  // namespace kiln::nn
