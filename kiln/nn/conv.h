// Conv1d/2d/3d, ConvTranspose1d/2d/3d, the pooling layers, Unfold/Fold and Upsample.
#pragma once

#include <initializer_list>
#include <limits>
#include <string>
#include <optional>
#include <type_traits>
#include <utility>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// A convolution layer's padding: its size in each dim, or a rule, as PyTorch's padding="same" / "valid":
// nn::Conv2d(3, 8, 3, {.padding = F::same}) keeps the input's size (stride 1 only).
template <class Size>
struct ConvPadding {
  Size size = 0;
  std::optional<functional::PadRule> rule;
  ConvPadding(int64_t all) : size(all) {}  // NOLINT: .padding = 1
  ConvPadding(Size s) requires(!std::is_same_v<Size, int64_t>) : size(s) {}  // NOLINT
  ConvPadding(std::initializer_list<int64_t> sizes) requires(!std::is_same_v<Size, int64_t>)  // NOLINT: {0, 1}
      : size(sizes) {}
  ConvPadding(functional::PadRule r) : rule(r) {}  // NOLINT: .padding = F::same
};

struct Conv2dOptions {
  functional::Pair stride = 1;
  ConvPadding<functional::Pair> padding = 0;
  functional::Pair dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  // What the padding holds: zeros (Constant, PyTorch's "zeros"), or the input reflected, replicated or wrapped
  // around (functional::pad).
  functional::PadMode padding_mode = functional::PadMode::Constant;
};

// x: (N, C, H, W) -> (N, O, OH, OW); weight (O, C / groups, kh, kw), bias (O). Initialized as PyTorch's:
// uniform in +-1/sqrt(C / groups * kh * kw).
class Conv2dImpl : public Module {
 public:
  using Options = Conv2dOptions;  // ModuleHolder takes it as a braced list
  Conv2dImpl(int64_t in_channels, int64_t out_channels, functional::Pair kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Conv2dOptions options_;
};
using Conv2d = ModuleHolder<Conv2dImpl>;

struct ConvTranspose2dOptions {
  functional::Pair stride = 1, padding = 0, output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  functional::Pair dilation = 1;
};

// x: (N, C, H, W) -> (N, O, OH, OW) with OH = (H - 1) sh - 2 ph + dh (kh - 1) + oph + 1 (functional.h); weight
// (C, O / groups, kh, kw), bias (O), initialized as PyTorch's: uniform in +-1/sqrt(O / groups * kh * kw).
class ConvTranspose2dImpl : public Module {
 public:
  using Options = ConvTranspose2dOptions;  // ModuleHolder takes it as a braced list
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, functional::Pair kernel_size,
                      ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  ConvTranspose2dOptions options_;
};
using ConvTranspose2d = ModuleHolder<ConvTranspose2dImpl>;

struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding<int64_t> padding = 0;
  int64_t dilation = 1, groups = 1;
  bool bias = true;
  functional::PadMode padding_mode = functional::PadMode::Constant;  // as Conv2dOptions'
};

// x: (N, C, L) -> (N, O, OL); weight (O, C / groups, k).
class Conv1dImpl : public Module {
 public:
  using Options = Conv1dOptions;  // ModuleHolder takes it as a braced list
  Conv1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Conv1dOptions options_;
};
using Conv1d = ModuleHolder<Conv1dImpl>;

struct Conv3dOptions {
  functional::Triple stride = 1;
  ConvPadding<functional::Triple> padding = 0;
  functional::Triple dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  functional::PadMode padding_mode = functional::PadMode::Constant;  // as Conv2dOptions'
};

// x: (N, C, D, H, W) -> (N, O, OD, OH, OW); weight (O, C / groups, kd, kh, kw), bias (O), initialized as Conv2d's.
class Conv3dImpl : public Module {
 public:
  using Options = Conv3dOptions;  // ModuleHolder takes it as a braced list
  Conv3dImpl(int64_t in_channels, int64_t out_channels, functional::Triple kernel_size, Conv3dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Conv3dOptions options_;
};
using Conv3d = ModuleHolder<Conv3dImpl>;

struct ConvTranspose1dOptions {
  int64_t stride = 1, padding = 0, output_padding = 0, groups = 1;
  bool bias = true;
  int64_t dilation = 1;
};

// x: (N, C, L) -> (N, O, OL) with OL = (L - 1) s - 2 p + d (k - 1) + op + 1; weight (C, O / groups, k).
class ConvTranspose1dImpl : public Module {
 public:
  using Options = ConvTranspose1dOptions;  // ModuleHolder takes it as a braced list
  ConvTranspose1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                      ConvTranspose1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  ConvTranspose1dOptions options_;
};
using ConvTranspose1d = ModuleHolder<ConvTranspose1dImpl>;

struct ConvTranspose3dOptions {
  functional::Triple stride = 1, padding = 0, output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  functional::Triple dilation = 1;
};

// x: (N, C, D, H, W) -> (N, O, OD, OH, OW), each dim as ConvTranspose1d's; weight (C, O / groups, kd, kh, kw).
class ConvTranspose3dImpl : public Module {
 public:
  using Options = ConvTranspose3dOptions;  // ModuleHolder takes it as a braced list
  ConvTranspose3dImpl(int64_t in_channels, int64_t out_channels, functional::Triple kernel_size,
                      ConvTranspose3dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  ConvTranspose3dOptions options_;
};
using ConvTranspose3d = ModuleHolder<ConvTranspose3dImpl>;

// "(h, w)" and "(d, h, w)", as the layers' reprs show sizes.
std::string size_repr(functional::Pair size);
std::string size_repr(functional::Triple size);
inline std::string size_repr(int64_t size) { return std::to_string(size); }

// MaxPool2d and MaxPool3d, told apart by their kernel's type (Pair or Triple). They take their settings
// positionally (nn::MaxPool2d(3, 2, 1)) or after the kernel as options (nn::MaxPool2d(3, {.stride = 2,
// .ceil_mode = true}), nn::MaxPool3d({1, 3, 3}, {.stride = {1, 2, 2}})); an unset stride is the kernel.
template <class Size>
struct MaxPoolOptions {
  functional::OptionalSize<Size> stride;
  Size padding = 0;
  Size dilation = 1;
  bool ceil_mode = false;
};
template <class Size>
class MaxPoolImpl : public Module {
 public:
  using Options = MaxPoolOptions<Size>;  // ModuleHolder takes it as a braced list
  MaxPoolImpl(Size kernel, Options options)
      : Module(std::is_same_v<Size, functional::Pair> ? "MaxPool2d" : "MaxPool3d"), kernel_(kernel),
        options_(std::move(options)) {
    options_.stride = options_.stride.value_or(kernel);
  }
  explicit MaxPoolImpl(Size kernel, functional::OptionalSize<Size> stride = std::nullopt, Size padding = 0)
      : MaxPoolImpl(kernel, Options{stride, padding}) {}
  Tensor forward(const Tensor& x) override {
    const Options& o = options_;
    if constexpr (std::is_same_v<Size, functional::Pair>)
      return functional::max_pool2d(x, kernel_, o.stride, o.padding, o.dilation, o.ceil_mode);
    else
      return functional::max_pool3d(x, kernel_, o.stride, o.padding, o.dilation, o.ceil_mode);
  }
  // The values and where each maximum is (PyTorch's return_indices = True), for MaxUnpool2d/3d.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x) const {
    const Options& o = options_;
    if constexpr (std::is_same_v<Size, functional::Pair>)
      return functional::max_pool2d_with_indices(x, kernel_, o.stride, o.padding, o.dilation, o.ceil_mode);
    else
      return functional::max_pool3d_with_indices(x, kernel_, o.stride, o.padding, o.dilation, o.ceil_mode);
  }
  std::string extra_repr() const override {
    const Options& o = options_;
    return "kernel_size=" + size_repr(kernel_) + ", stride=" + size_repr(*o.stride) + ", padding=" +
           size_repr(o.padding) + ", dilation=" + size_repr(o.dilation) + (o.ceil_mode ? ", ceil_mode=true" : "");
  }

 private:
  Size kernel_;
  Options options_;
};
using MaxPool2dOptions = MaxPoolOptions<functional::Pair>;
using MaxPool2dImpl = MaxPoolImpl<functional::Pair>;
using MaxPool2d = ModuleHolder<MaxPool2dImpl>;
using MaxPool3dOptions = MaxPoolOptions<functional::Triple>;
using MaxPool3dImpl = MaxPoolImpl<functional::Triple>;
using MaxPool3d = ModuleHolder<MaxPool3dImpl>;

// AvgPool2d and AvgPool3d, as the max pools.
template <class Size>
struct AvgPoolOptions {
  functional::OptionalSize<Size> stride;
  Size padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override = std::nullopt;
};
template <class Size>
class AvgPoolImpl : public Module {
 public:
  using Options = AvgPoolOptions<Size>;  // ModuleHolder takes it as a braced list
  AvgPoolImpl(Size kernel, Options options)
      : Module(std::is_same_v<Size, functional::Pair> ? "AvgPool2d" : "AvgPool3d"), kernel_(kernel),
        options_(std::move(options)) {
    options_.stride = options_.stride.value_or(kernel);
  }
  explicit AvgPoolImpl(Size kernel, functional::OptionalSize<Size> stride = std::nullopt, Size padding = 0)
      : AvgPoolImpl(kernel, Options{stride, padding}) {}
  Tensor forward(const Tensor& x) override {
    const Options& o = options_;
    if constexpr (std::is_same_v<Size, functional::Pair>)
      return functional::avg_pool2d(x, kernel_, o.stride, o.padding, o.count_include_pad, o.ceil_mode,
                                    o.divisor_override);
    else
      return functional::avg_pool3d(x, kernel_, o.stride, o.padding, o.count_include_pad, o.ceil_mode,
                                    o.divisor_override);
  }
  std::string extra_repr() const override {
    const Options& o = options_;
    return "kernel_size=" + size_repr(kernel_) + ", stride=" + size_repr(*o.stride) + ", padding=" +
           size_repr(o.padding) + (o.ceil_mode ? ", ceil_mode=true" : "") +
           (o.count_include_pad ? "" : ", count_include_pad=false") +
           (o.divisor_override ? ", divisor_override=" + std::to_string(*o.divisor_override) : "");
  }

 private:
  Size kernel_;
  Options options_;
};
using AvgPool2dOptions = AvgPoolOptions<functional::Pair>;
using AvgPool2dImpl = AvgPoolImpl<functional::Pair>;
using AvgPool2d = ModuleHolder<AvgPool2dImpl>;
using AvgPool3dOptions = AvgPoolOptions<functional::Triple>;
using AvgPool3dImpl = AvgPoolImpl<functional::Triple>;
using AvgPool3d = ModuleHolder<AvgPool3dImpl>;

// LPPool1d, LPPool2d and LPPool3d (functional::lp_pool1d/2d/3d), told apart by their kernel's type (a number,
// Pair or Triple): nn::LPPool2d(2, 3), nn::LPPool2d(2, {3, 2}, {.stride = 2, .ceil_mode = true}); an unset
// stride is the kernel.
template <class Size>
struct LPPoolOptions {
  std::conditional_t<std::is_same_v<Size, int64_t>, std::optional<int64_t>, functional::OptionalSize<Size>> stride;
  bool ceil_mode = false;
};
template <class Size>
class LPPoolImpl : public Module {
 public:
  using Options = LPPoolOptions<Size>;  // ModuleHolder takes it as a braced list
  LPPoolImpl(double norm_type, Size kernel, Options options)
      : Module(kName), norm_type_(norm_type), kernel_(kernel), options_(std::move(options)) {
    KILN_CHECK(norm_type > 0 && norm_type < std::numeric_limits<double>::infinity(), kName,
               ": norm_type must be positive and finite, got ", norm_type);
    options_.stride = options_.stride.value_or(kernel);
  }
  explicit LPPoolImpl(double norm_type, Size kernel, decltype(Options::stride) stride = std::nullopt,
                      bool ceil_mode = false)
      : LPPoolImpl(norm_type, kernel, Options{stride, ceil_mode}) {}
  Tensor forward(const Tensor& x) override {
    const Options& o = options_;
    if constexpr (std::is_same_v<Size, int64_t>)
      return functional::lp_pool1d(x, norm_type_, kernel_, o.stride, o.ceil_mode);
    else if constexpr (std::is_same_v<Size, functional::Pair>)
      return functional::lp_pool2d(x, norm_type_, kernel_, o.stride, o.ceil_mode);
    else
      return functional::lp_pool3d(x, norm_type_, kernel_, o.stride, o.ceil_mode);
  }
  std::string extra_repr() const override {
    return detail::concat("norm_type=", norm_type_, ", kernel_size=", size_repr(kernel_),
                          ", stride=", size_repr(*options_.stride), options_.ceil_mode ? ", ceil_mode=true" : "");
  }

 private:
  static constexpr const char* kName = std::is_same_v<Size, int64_t>            ? "LPPool1d"
                                       : std::is_same_v<Size, functional::Pair> ? "LPPool2d"
                                                                                : "LPPool3d";
  double norm_type_;
  Size kernel_;
  Options options_;
};
using LPPool1dOptions = LPPoolOptions<int64_t>;
using LPPool1dImpl = LPPoolImpl<int64_t>;
using LPPool1d = ModuleHolder<LPPool1dImpl>;
using LPPool2dOptions = LPPoolOptions<functional::Pair>;
using LPPool2dImpl = LPPoolImpl<functional::Pair>;
using LPPool2d = ModuleHolder<LPPool2dImpl>;
using LPPool3dOptions = LPPoolOptions<functional::Triple>;
using LPPool3dImpl = LPPoolImpl<functional::Triple>;
using LPPool3d = ModuleHolder<LPPool3dImpl>;

// Called with a max pool's output and indices (functional::max_pool2d_with_indices), and optionally the size
// to restore: nn::MaxUnpool2d(2)(y, indices).
class MaxUnpool2dImpl : public Module {
 public:
  explicit MaxUnpool2dImpl(functional::Pair kernel, functional::OptionalSize<functional::Pair> stride = std::nullopt,
                           functional::Pair padding = 0)
      : Module("MaxUnpool2d"), kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x, const Tensor& indices,
                 std::optional<functional::Pair> output_size = std::nullopt) const {
    return functional::max_unpool2d(x, indices, kernel_, stride_, padding_, output_size);
  }
  std::string extra_repr() const override;

 private:
  functional::Pair kernel_, stride_, padding_;
};
using MaxUnpool2d = ModuleHolder<MaxUnpool2dImpl>;

class MaxUnpool1dImpl : public Module {
 public:
  explicit MaxUnpool1dImpl(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0)
      : Module("MaxUnpool1d"), kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x, const Tensor& indices, std::optional<int64_t> output_size = std::nullopt) const {
    return functional::max_unpool1d(x, indices, kernel_, stride_, padding_, output_size);
  }
  std::string extra_repr() const override;

 private:
  int64_t kernel_, stride_, padding_;
};
using MaxUnpool1d = ModuleHolder<MaxUnpool1dImpl>;

class MaxUnpool3dImpl : public Module {
 public:
  explicit MaxUnpool3dImpl(functional::Triple kernel,
                           functional::OptionalSize<functional::Triple> stride = std::nullopt,
                           functional::Triple padding = 0)
      : Module("MaxUnpool3d"), kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x, const Tensor& indices,
                 std::optional<functional::Triple> output_size = std::nullopt) const {
    return functional::max_unpool3d(x, indices, kernel_, stride_, padding_, output_size);
  }
  std::string extra_repr() const override;

 private:
  functional::Triple kernel_, stride_, padding_;
};
using MaxUnpool3d = ModuleHolder<MaxUnpool3dImpl>;

struct MaxPool1dOptions {
  std::optional<int64_t> stride;
  int64_t padding = 0;
  int64_t dilation = 1;
  bool ceil_mode = false;
};
class MaxPool1dImpl : public Module {
 public:
  using Options = MaxPool1dOptions;  // ModuleHolder takes it as a braced list
  MaxPool1dImpl(int64_t kernel, MaxPool1dOptions options)
      : Module("MaxPool1d"), kernel_(kernel), options_(options) {
    options_.stride = options_.stride.value_or(kernel);
  }
  explicit MaxPool1dImpl(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                         int64_t dilation = 1)
      : MaxPool1dImpl(kernel, MaxPool1dOptions{stride, padding, dilation}) {}
  Tensor forward(const Tensor& x) override {
    return functional::max_pool1d(x, kernel_, options_.stride, options_.padding, options_.dilation, options_.ceil_mode);
  }
  // The values and where each maximum is along L, for MaxUnpool1d.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x) const {
    return functional::max_pool1d_with_indices(x, kernel_, options_.stride, options_.padding, options_.dilation,
                                               options_.ceil_mode);
  }
  std::string extra_repr() const override;

 private:
  int64_t kernel_;
  MaxPool1dOptions options_;
};
using MaxPool1d = ModuleHolder<MaxPool1dImpl>;

struct AvgPool1dOptions {
  std::optional<int64_t> stride;
  int64_t padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};
class AvgPool1dImpl : public Module {
 public:
  using Options = AvgPool1dOptions;  // ModuleHolder takes it as a braced list
  AvgPool1dImpl(int64_t kernel, AvgPool1dOptions options)
      : Module("AvgPool1d"), kernel_(kernel), options_(options) {
    options_.stride = options_.stride.value_or(kernel);
  }
  explicit AvgPool1dImpl(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                         bool count_include_pad = true)
      : AvgPool1dImpl(kernel, AvgPool1dOptions{stride, padding, false, count_include_pad}) {}
  Tensor forward(const Tensor& x) override {
    return functional::avg_pool1d(x, kernel_, options_.stride, options_.padding, options_.count_include_pad,
                                  options_.ceil_mode);
  }
  std::string extra_repr() const override;

 private:
  int64_t kernel_;
  AvgPool1dOptions options_;
};
using AvgPool1d = ModuleHolder<AvgPool1dImpl>;

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(functional::Pair output_size) : Module("AdaptiveAvgPool2d"), size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_avg_pool2d(x, size_); }
  std::string extra_repr() const override;

 private:
  functional::Pair size_;
};
using AdaptiveAvgPool2d = ModuleHolder<AdaptiveAvgPool2dImpl>;

class AdaptiveAvgPool1dImpl : public Module {
 public:
  explicit AdaptiveAvgPool1dImpl(int64_t output_size) : Module("AdaptiveAvgPool1d"), size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_avg_pool1d(x, size_); }
  std::string extra_repr() const override;

 private:
  int64_t size_;
};
using AdaptiveAvgPool1d = ModuleHolder<AdaptiveAvgPool1dImpl>;

// output_size: one value for all three dims, or (D, H, W).
class AdaptiveAvgPool3dImpl : public Module {
 public:
  explicit AdaptiveAvgPool3dImpl(IntArrayRef output_size) : Module("AdaptiveAvgPool3d"), size_(output_size.vec()) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_avg_pool3d(x, size_); }
  std::string extra_repr() const override;

 private:
  Shape size_;
};
using AdaptiveAvgPool3d = ModuleHolder<AdaptiveAvgPool3dImpl>;

class AdaptiveMaxPool1dImpl : public Module {
 public:
  explicit AdaptiveMaxPool1dImpl(int64_t output_size) : Module("AdaptiveMaxPool1d"), size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_max_pool1d(x, size_); }
  std::string extra_repr() const override { return detail::concat("output_size=", size_); }

 private:
  int64_t size_;
};
using AdaptiveMaxPool1d = ModuleHolder<AdaptiveMaxPool1dImpl>;

class AdaptiveMaxPool2dImpl : public Module {
 public:
  explicit AdaptiveMaxPool2dImpl(functional::Pair output_size) : Module("AdaptiveMaxPool2d"), size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_max_pool2d(x, size_); }
  std::string extra_repr() const override;

 private:
  functional::Pair size_;
};
using AdaptiveMaxPool2d = ModuleHolder<AdaptiveMaxPool2dImpl>;

// output_size: one value for all three dims, or (D, H, W).
class AdaptiveMaxPool3dImpl : public Module {
 public:
  explicit AdaptiveMaxPool3dImpl(IntArrayRef output_size) : Module("AdaptiveMaxPool3d"), size_(output_size.vec()) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_max_pool3d(x, size_); }
  std::string extra_repr() const override { return "output_size=" + shape_str(size_); }

 private:
  Shape size_;
};
using AdaptiveMaxPool3d = ModuleHolder<AdaptiveMaxPool3dImpl>;

struct FoldOptions {
  functional::Pair dilation = 1, padding = 0, stride = 1;
};
using UnfoldOptions = FoldOptions;

// functional::unfold as a layer: (N, C, H, W) -> (N, C kh kw, L).
class UnfoldImpl : public Module {
 public:
  using Options = UnfoldOptions;  // ModuleHolder takes it as a braced list
  explicit UnfoldImpl(functional::Pair kernel, UnfoldOptions options = {})
      : Module("Unfold"), kernel_(kernel), options_(options) {}
  Tensor forward(const Tensor& x) override {
    return functional::unfold(x, kernel_, options_.dilation, options_.padding, options_.stride);
  }
  std::string extra_repr() const override;

 private:
  functional::Pair kernel_;
  UnfoldOptions options_;
};
using Unfold = ModuleHolder<UnfoldImpl>;

// functional::fold as a layer: (N, C kh kw, L) -> (N, C, output_size).
class FoldImpl : public Module {
 public:
  using Options = FoldOptions;  // ModuleHolder takes it as a braced list
  FoldImpl(functional::Pair output_size, functional::Pair kernel, FoldOptions options = {})
      : Module("Fold"), output_size_(output_size), kernel_(kernel), options_(options) {}
  Tensor forward(const Tensor& x) override {
    return functional::fold(x, output_size_, kernel_, options_.dilation, options_.padding, options_.stride);
  }
  std::string extra_repr() const override;

 private:
  functional::Pair output_size_, kernel_;
  FoldOptions options_;
};
using Fold = ModuleHolder<FoldImpl>;

using UpsampleOptions = functional::InterpolateOptions;
// Resizes (N, C, ...) to a size or by a scale factor, in any of interpolate's modes: functional::interpolate as a
// layer.
class UpsampleImpl : public Module {
 public:
  using Options = UpsampleOptions;  // ModuleHolder takes it as a braced list
  explicit UpsampleImpl(UpsampleOptions options) : Module("Upsample"), options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return functional::interpolate(x, options_); }
  std::string extra_repr() const override;

 private:
  UpsampleOptions options_;
};
using Upsample = ModuleHolder<UpsampleImpl>;

}  // namespace kiln::nn
