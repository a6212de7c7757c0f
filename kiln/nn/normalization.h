// Normalization layers: BatchNorm1d/2d/3d (batch statistics, running averages for eval), InstanceNorm1d/2d/3d,
// GroupNorm, LayerNorm, RMSNorm.
#pragma once

#include <optional>
#include <utility>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // The running statistics' update: (1 - momentum) old + momentum batch. Unset: the plain mean of every batch
  // so far (momentum 1 / num_batches_tracked), as PyTorch's momentum=None.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learned weight (ones) and bias (zeros)
  bool track_running_stats = true;  // keep running_mean/var for eval mode (buffers, in state_dict)
};

// Normalizes each channel (dim 1) with its batch statistics in training, its running ones in eval.
// BatchNorm1d takes (N, C) or (N, C, L); BatchNorm2d (N, C, H, W); BatchNorm3d (N, C, D, H, W).
class BatchNormImpl : public Module {
 public:
  using Options = BatchNormOptions;  // ModuleHolder takes it as a braced list
  BatchNormImpl(const char* type_name, int64_t num_features, BatchNormOptions options, int64_t input_dims_lo,
                int64_t input_dims_hi);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  // The settings, changeable between calls (optim::update_bn unsets the momentum for one pass).
  BatchNormOptions& options() { return options_; }
  // Running mean 0, variance 1, no batches tracked, as PyTorch's reset_running_stats.
  void reset_running_stats();
  // Batch statistics over several processes (PyTorch's SyncBatchNorm, functional::sync_batch_norm): in training
  // the layer normalizes with the mean and variance of every process's batch, `sum` adding them up across the
  // processes. distributed::convert_sync_batchnorm sets it on every batch norm of a model; an empty function
  // makes the layer local again. Eval mode is local either way (the running statistics).
  void set_cross_process_sum(functional::CrossProcessSum sum) { sync_ = std::move(sum); }
  bool is_synchronized() const { return static_cast<bool>(sync_); }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  BatchNormOptions options_;
  functional::CrossProcessSum sync_;
  int64_t dims_lo_, dims_hi_;
};

class BatchNorm1dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm1dImpl(int64_t num_features, BatchNormOptions options = {})
      : BatchNormImpl("BatchNorm1d", num_features, options, 2, 3) {}
};
using BatchNorm1d = ModuleHolder<BatchNorm1dImpl>;

class BatchNorm2dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, BatchNormOptions options = {})
      : BatchNormImpl("BatchNorm2d", num_features, options, 4, 4) {}
};
using BatchNorm2d = ModuleHolder<BatchNorm2dImpl>;

class BatchNorm3dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm3dImpl(int64_t num_features, BatchNormOptions options = {})
      : BatchNormImpl("BatchNorm3d", num_features, options, 5, 5) {}
};
using BatchNorm3d = ModuleHolder<BatchNorm3dImpl>;

// PyTorch's defaults for instance norm differ from batch norm's: no affine parameters, no running statistics.
struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;               // learned weight (ones) and bias (zeros)
  bool track_running_stats = false;  // keep running_mean/var, and use them in eval mode
};

// Normalizes each channel of each sample over its positions (functional::instance_norm). InstanceNorm1d takes
// (N, C, L) or (C, L); InstanceNorm2d (N, C, H, W) or (C, H, W); InstanceNorm3d (N, C, D, H, W) or (C, D, H, W).
class InstanceNormImpl : public Module {
 public:
  using Options = InstanceNormOptions;  // ModuleHolder takes it as a braced list
  InstanceNormImpl(const char* type_name, int64_t num_features, InstanceNormOptions options, int64_t input_dims);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  InstanceNormOptions options_;
  int64_t num_features_, dims_;  // dims: of a batched input
};

class InstanceNorm1dImpl : public InstanceNormImpl {
 public:
  explicit InstanceNorm1dImpl(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormImpl("InstanceNorm1d", num_features, options, 3) {}
};
using InstanceNorm1d = ModuleHolder<InstanceNorm1dImpl>;

class InstanceNorm2dImpl : public InstanceNormImpl {
 public:
  explicit InstanceNorm2dImpl(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormImpl("InstanceNorm2d", num_features, options, 4) {}
};
using InstanceNorm2d = ModuleHolder<InstanceNorm2dImpl>;

class InstanceNorm3dImpl : public InstanceNormImpl {
 public:
  explicit InstanceNorm3dImpl(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormImpl("InstanceNorm3d", num_features, options, 5) {}
};
using InstanceNorm3d = ModuleHolder<InstanceNorm3dImpl>;

// Normalizes groups of channels of each sample; weight (ones) and bias (zeros) per channel when affine.
class GroupNormImpl : public Module {
 public:
  GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t groups_;
  double eps_;
};
using GroupNorm = ModuleHolder<GroupNormImpl>;

// AlexNet's normalization across neighbouring channels (functional::local_response_norm); no parameters.
class LocalResponseNormImpl : public Module {
 public:
  explicit LocalResponseNormImpl(int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0)
      : Module("LocalResponseNorm"), size_(size), alpha_(alpha), beta_(beta), k_(k) {
    KILN_CHECK(size > 0, "LocalResponseNorm: size must be positive, got ", size);
  }
  Tensor forward(const Tensor& x) override { return functional::local_response_norm(x, size_, alpha_, beta_, k_); }
  std::string extra_repr() const override {
    return detail::concat(size_, ", alpha=", alpha_, ", beta=", beta_, ", k=", k_);
  }

 private:
  int64_t size_;
  double alpha_, beta_, k_;
};
using LocalResponseNorm = ModuleHolder<LocalResponseNormImpl>;

// Normalizes over the last dims (normalized_shape) to mean 0 and variance 1, then scales and shifts by the
// learned weight (ones) and bias (zeros) when elementwise_affine. bias = false keeps only the weight, as
// PyTorch 2.1's LayerNorm(..., bias=False): `bias` is then undefined and not a parameter.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};
using LayerNorm = ModuleHolder<LayerNormImpl>;

// Divides by the root mean square over the last dims (normalized_shape), then scales by the learned weight
// (ones) when elementwise_affine; no mean subtracted, no bias (functional::rms_norm). eps unset: the dtype's
// machine epsilon.
class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(Shape normalized_shape, std::optional<double> eps = std::nullopt,
                       bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;

 private:
  Shape normalized_shape_;
  std::optional<double> eps_;
};
using RMSNorm = ModuleHolder<RMSNormImpl>;

}  // namespace kiln::nn
