#include "kiln/nn/normalization.h"

#include "kiln/nn/functional.h"

namespace kiln::nn {

namespace {
// What batch and instance norm layers hold, under PyTorch's names: weight (ones) and bias (zeros) when affine;
// running_mean (zeros), running_var (ones) and num_batches_tracked when they track statistics.
void register_norm_state(Module& m, int64_t num_features, bool affine, bool track_running_stats, Tensor& weight,
                         Tensor& bias, Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked) {
  KILN_CHECK(num_features > 0, m.type_name(), ": num_features must be positive, got ", num_features);
  if (affine) {
    m.register_parameter("weight", weight, ones({num_features}));
    m.register_parameter("bias", bias, zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = m.register_buffer("running_mean", zeros({num_features}));
    running_var = m.register_buffer("running_var", ones({num_features}));
    num_batches_tracked = m.register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}
}  // namespace

BatchNormImpl::BatchNormImpl(const char* type_name, int64_t num_features, BatchNormOptions options,
                             int64_t dims_lo, int64_t dims_hi)
    : Module(type_name), options_(options), dims_lo_(dims_lo), dims_hi_(dims_hi) {
  register_norm_state(*this, num_features, options.affine, options.track_running_stats, weight, bias, running_mean,
                      running_var, num_batches_tracked);
}

Tensor BatchNormImpl::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= dims_lo_ && x.dim() <= dims_hi_, type_name(), ": expected ",
             dims_lo_ == dims_hi_ ? detail::concat(dims_lo_) : detail::concat(dims_lo_, " or ", dims_hi_),
             "-D input, got shape ", shape_str(x.sizes()));
  int64_t C = weight.defined() ? weight.size(0) : running_mean.size(0);
  KILN_CHECK(x.size(1) == C, type_name(), ": expected ", C, " channels in dim 1, got shape ", shape_str(x.sizes()));
  bool use_batch = is_training() || !running_mean.defined();
  double momentum = options_.momentum.value_or(0.0);
  const bool counts = is_training() && num_batches_tracked.defined();
  // momentum unset: the plain mean, 1 / (the count with this batch)
  if (counts && !options_.momentum) momentum = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>() + 1);
  Tensor y = sync_ && is_training()
                 ? functional::sync_batch_norm(x, running_mean, running_var, weight, bias, momentum, options_.eps, sync_)
                 : functional::batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum, options_.eps);
  if (counts) {  // counted once the batch went through (a failed all-reduce leaves the count as it was)
    NoGradGuard no_grad;
    Tensor n = num_batches_tracked;
    ops::add_(n, 1);
  }
  return y;
}

void BatchNormImpl::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

std::string BatchNormImpl::extra_repr() const {
  int64_t C = weight.defined() ? weight.size(0) : running_mean.size(0);
  return detail::concat(C, ", eps=", options_.eps, ", momentum=",
                        options_.momentum ? detail::concat(*options_.momentum) : std::string("None"),
                        ", affine=", options_.affine ? "true" : "false",
                        ", track_running_stats=", options_.track_running_stats ? "true" : "false",
                        sync_ ? ", synchronized across processes" : "");
}

InstanceNormImpl::InstanceNormImpl(const char* type_name, int64_t num_features, InstanceNormOptions options,
                                   int64_t input_dims)
    : Module(type_name), options_(options), num_features_(num_features), dims_(input_dims) {
  // num_batches_tracked is there for PyTorch's state_dict names; instance norm never counts (nor does PyTorch's).
  register_norm_state(*this, num_features, options.affine, options.track_running_stats, weight, bias, running_mean,
                      running_var, num_batches_tracked);
}

Tensor InstanceNormImpl::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == dims_ || x.dim() == dims_ - 1, type_name(), ": expected ", dims_, "-D (batched) or ",
             dims_ - 1, "-D input, got shape ", shape_str(x.sizes()));
  const bool unbatched = x.dim() == dims_ - 1;
  const Tensor in = unbatched ? x.unsqueeze(0) : x;
  KILN_CHECK(in.size(1) == num_features_, type_name(), ": expected ", num_features_, " channels, got shape ",
             shape_str(x.sizes()));
  const bool use_input_stats = is_training() || !options_.track_running_stats;
  Tensor y = functional::instance_norm(in, running_mean, running_var, weight, bias, use_input_stats,
                                       options_.momentum, options_.eps);
  return unbatched ? y.squeeze(0) : y;
}

std::string InstanceNormImpl::extra_repr() const {
  return detail::concat(num_features_, ", eps=", options_.eps, ", momentum=", options_.momentum,
                        ", affine=", options_.affine ? "true" : "false",
                        ", track_running_stats=", options_.track_running_stats ? "true" : "false");
}

GroupNormImpl::GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : Module("GroupNorm"), groups_(num_groups), eps_(eps) {
  KILN_CHECK(num_groups > 0 && num_channels % num_groups == 0, "GroupNorm: ", num_channels,
             " channels cannot be split into ", num_groups, " groups");
  if (affine) {
    register_parameter("weight", weight, ones({num_channels}));
    register_parameter("bias", bias, zeros({num_channels}));
  }
}

Tensor GroupNormImpl::forward(const Tensor& x) { return functional::group_norm(x, groups_, weight, bias, eps_); }

std::string GroupNormImpl::extra_repr() const { return detail::concat(groups_, ", eps=", eps_); }

LayerNormImpl::LayerNormImpl(Shape normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : Module("LayerNorm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  KILN_CHECK(!normalized_shape_.empty(), "LayerNorm: normalized_shape must not be empty");
  if (elementwise_affine) {
    register_parameter("weight", weight, ones(normalized_shape_));
    if (with_bias) register_parameter("bias", bias, zeros(normalized_shape_));
  }
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  return functional::layer_norm(x, normalized_shape_, weight, bias, eps_);
}

RMSNormImpl::RMSNormImpl(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : Module("RMSNorm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  KILN_CHECK(!normalized_shape_.empty(), "RMSNorm: normalized_shape must not be empty");
  if (elementwise_affine) register_parameter("weight", weight, ones(normalized_shape_));
}

Tensor RMSNormImpl::forward(const Tensor& x) { return functional::rms_norm(x, normalized_shape_, weight, eps_); }

std::string RMSNormImpl::extra_repr() const {
  return detail::concat(shape_str(normalized_shape_), ", eps=", eps_ ? detail::concat(*eps_) : std::string("None"),
                        ", elementwise_affine=", weight.defined() ? "true" : "false");
}

std::string LayerNormImpl::extra_repr() const {
  return detail::concat(shape_str(normalized_shape_), ", eps=", eps_, ", elementwise_affine=",
                        weight.defined() ? "true" : "false");
}

}  // namespace kiln::nn
