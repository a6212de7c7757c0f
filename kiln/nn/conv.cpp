#include "kiln/nn/conv.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/nn/init.h"

namespace kiln::nn {

std::string size_repr(functional::Pair size) { return detail::concat("(", size.h, ", ", size.w, ")"); }
std::string size_repr(functional::Triple size) {
  return detail::concat("(", size.d, ", ", size.h, ", ", size.w, ")");
}

namespace {
std::string pair_str(functional::Pair p) { return size_repr(p); }

// ", padding_mode=reflect" where PyTorch's repr shows it: any mode but zeros.
std::string padding_mode_str(functional::PadMode mode) {
  switch (mode) {
    case functional::PadMode::Constant:
      return "";
    case functional::PadMode::Reflect:
      return ", padding_mode=reflect";
    case functional::PadMode::Replicate:
      return ", padding_mode=replicate";
    case functional::PadMode::Circular:
      return ", padding_mode=circular";
  }
  return "";
}

std::string triple_str(functional::Triple t) { return size_repr(t); }

std::string rule_str(functional::PadRule rule) { return rule == functional::PadRule::Same ? "same" : "valid"; }

// The padding before and after each dim, the last dim's first (as functional::pad takes them): the sizes
// given, or what the rule asks for the kernel and dilation.
std::vector<int64_t> explicit_pads(std::optional<functional::PadRule> rule, std::vector<int64_t> padding,
                                   const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilation) {
  std::vector<int64_t> pads;
  for (size_t i = padding.size(); i-- > 0;) {
    int64_t before = padding[i], after = padding[i];
    if (rule == functional::PadRule::Valid) before = after = 0;
    if (rule == functional::PadRule::Same)
      std::tie(before, after) = functional::same_padding(kernel[i], dilation[i]);
    pads.push_back(before);
    pads.push_back(after);
  }
  return pads;
}

// padding="same" keeps the size only at stride 1, so PyTorch refuses it with any other at construction.
void check_same_stride(const char* layer, std::optional<functional::PadRule> rule, std::vector<int64_t> stride) {
  for (int64_t s : stride)
    KILN_CHECK(rule != functional::PadRule::Same || s == 1, layer, ": padding=\"same\" needs stride 1");
}

// Checks a convolution layer's channels, kernel and groups; its weight's shape: (out, in / groups, kernel...),
// or (in, out / groups, kernel...) for a transposed one.
Shape conv_weight_shape(const char* layer, int64_t in_channels, int64_t out_channels, const Shape& kernel,
                        int64_t groups, bool transposed) {
  const bool positive = in_channels > 0 && out_channels > 0 &&
                        std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k > 0; });
  KILN_CHECK(positive, layer, ": channels and kernel size must be positive, got ", in_channels, ", ", out_channels,
             " and ", shape_str(kernel));
  KILN_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, layer, ": in_channels ",
             in_channels, " and out_channels ", out_channels, " must be divisible by groups ", groups);
  Shape shape = transposed ? Shape{in_channels, out_channels / groups} : Shape{out_channels, in_channels / groups};
  shape.insert(shape.end(), kernel.begin(), kernel.end());
  return shape;
}

// PyTorch's default for convolutions: kaiming_uniform(a = sqrt(5)) on the weight, i.e. uniform in
// +-1/sqrt(fan_in), and the bias uniform in the same bound.
void reset_conv(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, functional::Pair kernel, Conv2dOptions options)
    : Module("Conv2d"), options_(options) {
  check_same_stride("Conv2d", options.padding.rule, {options.stride.h, options.stride.w});
  const Shape shape = conv_weight_shape("Conv2d", in_channels, out_channels, {kernel.h, kernel.w},
                                        options.groups, /*transposed=*/false);
  register_parameter("weight", weight, kiln::empty(shape));
  if (options.bias) register_parameter("bias", bias, empty({out_channels}));
  reset_conv(weight, bias);
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  const auto& o = options_;
  if (o.padding_mode == functional::PadMode::Constant) {
    if (o.padding.rule) return functional::conv2d(x, weight, bias, o.stride, *o.padding.rule, o.dilation, o.groups);
    return functional::conv2d(x, weight, bias, o.stride, o.padding.size, o.dilation, o.groups);
  }
  // Another mode pads first (both sides of each dim by the padding, as PyTorch's), then convolves unpadded.
  const Tensor padded = functional::pad(x,
                                        explicit_pads(o.padding.rule, {o.padding.size.h, o.padding.size.w},
                                                      {weight.size(2), weight.size(3)}, {o.dilation.h, o.dilation.w}),
                                        o.padding_mode);
  return functional::conv2d(padded, weight, bias, o.stride, 0, o.dilation, o.groups);
}

std::string Conv2dImpl::extra_repr() const {
  const auto& p = options_.padding;
  return detail::concat(weight.size(1) * options_.groups, ", ", weight.size(0), ", kernel_size=",
                        pair_str({weight.size(2), weight.size(3)}), ", stride=", pair_str(options_.stride),
                        ", padding=", p.rule ? rule_str(*p.rule) : pair_str(p.size),
                        options_.groups > 1 ? ", groups=" : "",
                        options_.groups > 1 ? std::to_string(options_.groups) : "",
                        bias.defined() ? "" : ", bias=false",
                        padding_mode_str(options_.padding_mode));
}

ConvTranspose2dImpl::ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, functional::Pair kernel,
                                         ConvTranspose2dOptions options)
    : Module("ConvTranspose2d"), options_(options) {
  const Shape shape = conv_weight_shape("ConvTranspose2d", in_channels, out_channels, {kernel.h, kernel.w},
                                        options.groups, /*transposed=*/true);
  register_parameter("weight", weight, kiln::empty(shape));
  if (options.bias) register_parameter("bias", bias, empty({out_channels}));
  reset_conv(weight, bias);  // fan_in from dim 1, as PyTorch computes it for this layout too
}

Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  return functional::conv_transpose2d(x, weight, bias, options_.stride, options_.padding, options_.output_padding,
                                      options_.groups, options_.dilation);
}

std::string ConvTranspose2dImpl::extra_repr() const {
  return detail::concat(weight.size(0), ", ", weight.size(1) * options_.groups, ", kernel_size=",
                        pair_str({weight.size(2), weight.size(3)}), ", stride=", pair_str(options_.stride),
                        ", padding=", pair_str(options_.padding), ", output_padding=",
                        pair_str(options_.output_padding), options_.groups > 1 ? ", groups=" : "",
                        options_.groups > 1 ? std::to_string(options_.groups) : "",
                        bias.defined() ? "" : ", bias=false");
}

Conv1dImpl::Conv1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, Conv1dOptions options)
    : Module("Conv1d"), options_(options) {
  check_same_stride("Conv1d", options.padding.rule, {options.stride});
  const Shape shape = conv_weight_shape("Conv1d", in_channels, out_channels, {kernel},
                                        options.groups, /*transposed=*/false);
  register_parameter("weight", weight, kiln::empty(shape));
  if (options.bias) register_parameter("bias", bias, empty({out_channels}));
  reset_conv(weight, bias);
}

Tensor Conv1dImpl::forward(const Tensor& x) {
  const auto& o = options_;
  if (o.padding_mode == functional::PadMode::Constant) {
    if (o.padding.rule) return functional::conv1d(x, weight, bias, o.stride, *o.padding.rule, o.dilation, o.groups);
    return functional::conv1d(x, weight, bias, o.stride, o.padding.size, o.dilation, o.groups);
  }
  const Tensor padded = functional::pad(
      x, explicit_pads(o.padding.rule, {o.padding.size}, {weight.size(2)}, {o.dilation}), o.padding_mode);
  return functional::conv1d(padded, weight, bias, o.stride, 0, o.dilation, o.groups);
}

std::string Conv1dImpl::extra_repr() const {
  const auto& p = options_.padding;
  return detail::concat(weight.size(1) * options_.groups, ", ", weight.size(0), ", kernel_size=", weight.size(2),
                        ", stride=", options_.stride, ", padding=", p.rule ? rule_str(*p.rule) : std::to_string(p.size),
                        padding_mode_str(options_.padding_mode));
}

Conv3dImpl::Conv3dImpl(int64_t in_channels, int64_t out_channels, functional::Triple kernel, Conv3dOptions options)
    : Module("Conv3d"), options_(options) {
  check_same_stride("Conv3d", options.padding.rule, {options.stride.d, options.stride.h, options.stride.w});
  const Shape shape = conv_weight_shape("Conv3d", in_channels, out_channels, {kernel.d, kernel.h, kernel.w},
                                        options.groups, /*transposed=*/false);
  register_parameter("weight", weight, kiln::empty(shape));
  if (options.bias) register_parameter("bias", bias, empty({out_channels}));
  reset_conv(weight, bias);
}

Tensor Conv3dImpl::forward(const Tensor& x) {
  const auto& o = options_;
  if (o.padding_mode == functional::PadMode::Constant) {
    if (o.padding.rule) return functional::conv3d(x, weight, bias, o.stride, *o.padding.rule, o.dilation, o.groups);
    return functional::conv3d(x, weight, bias, o.stride, o.padding.size, o.dilation, o.groups);
  }
  const auto& p = o.padding.size;
  const Tensor padded = functional::pad(x,
                                        explicit_pads(o.padding.rule, {p.d, p.h, p.w},
                                                      {weight.size(2), weight.size(3), weight.size(4)},
                                                      {o.dilation.d, o.dilation.h, o.dilation.w}),
                                        o.padding_mode);
  return functional::conv3d(padded, weight, bias, o.stride, 0, o.dilation, o.groups);
}

std::string Conv3dImpl::extra_repr() const {
  const auto& p = options_.padding;
  return detail::concat(weight.size(1) * options_.groups, ", ", weight.size(0), ", kernel_size=",
                        triple_str({weight.size(2), weight.size(3), weight.size(4)}), ", stride=",
                        triple_str(options_.stride), ", padding=", p.rule ? rule_str(*p.rule) : triple_str(p.size),
                        options_.groups > 1 ? ", groups=" : "",
                        options_.groups > 1 ? std::to_string(options_.groups) : "",
                        bias.defined() ? "" : ", bias=false", padding_mode_str(options_.padding_mode));
}

ConvTranspose1dImpl::ConvTranspose1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                         ConvTranspose1dOptions options)
    : Module("ConvTranspose1d"), options_(options) {
  const Shape shape = conv_weight_shape("ConvTranspose1d", in_channels, out_channels, {kernel},
                                        options.groups, /*transposed=*/true);
  register_parameter("weight", weight, kiln::empty(shape));
  if (options.bias) register_parameter("bias", bias, empty({out_channels}));
  reset_conv(weight, bias);
}

Tensor ConvTranspose1dImpl::forward(const Tensor& x) {
  const auto& o = options_;
  return functional::conv_transpose1d(x, weight, bias, o.stride, o.padding, o.output_padding, o.groups, o.dilation);
}

std::string ConvTranspose1dImpl::extra_repr() const {
  const auto& o = options_;
  return detail::concat(weight.size(0), ", ", weight.size(1) * o.groups, ", kernel_size=", weight.size(2),
                        ", stride=", o.stride, ", padding=", o.padding, ", output_padding=", o.output_padding,
                        o.groups > 1 ? ", groups=" + std::to_string(o.groups) : "",
                        bias.defined() ? "" : ", bias=false");
}

ConvTranspose3dImpl::ConvTranspose3dImpl(int64_t in_channels, int64_t out_channels, functional::Triple kernel,
                                         ConvTranspose3dOptions options)
    : Module("ConvTranspose3d"), options_(options) {
  const Shape shape = conv_weight_shape("ConvTranspose3d", in_channels, out_channels, {kernel.d, kernel.h, kernel.w},
                                        options.groups, /*transposed=*/true);
  register_parameter("weight", weight, kiln::empty(shape));
  if (options.bias) register_parameter("bias", bias, empty({out_channels}));
  reset_conv(weight, bias);
}

Tensor ConvTranspose3dImpl::forward(const Tensor& x) {
  const auto& o = options_;
  return functional::conv_transpose3d(x, weight, bias, o.stride, o.padding, o.output_padding, o.groups, o.dilation);
}

std::string ConvTranspose3dImpl::extra_repr() const {
  const auto& o = options_;
  return detail::concat(weight.size(0), ", ", weight.size(1) * o.groups, ", kernel_size=",
                        triple_str({weight.size(2), weight.size(3), weight.size(4)}), ", stride=",
                        triple_str(o.stride), ", padding=", triple_str(o.padding), ", output_padding=",
                        triple_str(o.output_padding), o.groups > 1 ? ", groups=" + std::to_string(o.groups) : "",
                        bias.defined() ? "" : ", bias=false");
}

// The pools' settings as PyTorch prints them, the non-default ones after the first three.
std::string MaxPool1dImpl::extra_repr() const {
  const auto& o = options_;
  return detail::concat("kernel_size=", kernel_, ", stride=", *o.stride, ", padding=", o.padding,
                        ", dilation=", o.dilation, o.ceil_mode ? ", ceil_mode=true" : "");
}
std::string AvgPool1dImpl::extra_repr() const {
  const auto& o = options_;
  return detail::concat("kernel_size=", kernel_, ", stride=", *o.stride, ", padding=", o.padding,
                        o.ceil_mode ? ", ceil_mode=true" : "", o.count_include_pad ? "" : ", count_include_pad=false");
}
std::string MaxUnpool2dImpl::extra_repr() const {
  return "kernel_size=" + pair_str(kernel_) + ", stride=" + pair_str(stride_) + ", padding=" + pair_str(padding_);
}
std::string MaxUnpool1dImpl::extra_repr() const {
  return detail::concat("kernel_size=", kernel_, ", stride=", stride_, ", padding=", padding_);
}
std::string MaxUnpool3dImpl::extra_repr() const {
  return "kernel_size=" + size_repr(kernel_) + ", stride=" + size_repr(stride_) + ", padding=" + size_repr(padding_);
}
std::string AdaptiveAvgPool2dImpl::extra_repr() const { return "output_size=" + pair_str(size_); }
std::string AdaptiveMaxPool2dImpl::extra_repr() const { return "output_size=" + pair_str(size_); }
std::string AdaptiveAvgPool1dImpl::extra_repr() const { return detail::concat("output_size=", size_); }
std::string AdaptiveAvgPool3dImpl::extra_repr() const {
  return "output_size=" + (size_.size() == 1 ? std::to_string(size_[0]) : shape_str(size_));
}

std::string UnfoldImpl::extra_repr() const {
  return "kernel_size=" + pair_str(kernel_) + ", dilation=" + pair_str(options_.dilation) + ", padding=" +
         pair_str(options_.padding) + ", stride=" + pair_str(options_.stride);
}
std::string FoldImpl::extra_repr() const {
  return "output_size=" + pair_str(output_size_) + ", kernel_size=" + pair_str(kernel_) + ", dilation=" +
         pair_str(options_.dilation) + ", padding=" + pair_str(options_.padding) + ", stride=" +
         pair_str(options_.stride);
}

std::string UpsampleImpl::extra_repr() const {
  const auto& o = options_;
  auto list = [](const auto& values) {
    std::string s = values.size() == 1 ? "" : "(";
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) s += ", ";
      s += detail::concat(values[i]);
    }
    return values.size() == 1 ? s : s + ")";
  };
  const std::string what = o.size.empty() ? "scale_factor=" + list(o.scale_factor) : "size=" + list(o.size);
  return detail::concat(what, ", mode='", o.mode, "'", o.align_corners ? ", align_corners=true" : "");
}

}  // namespace kiln::nn
