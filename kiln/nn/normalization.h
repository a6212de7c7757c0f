// Normalization layers: BatchNorm1d/2d (batch statistics, running averages for eval), GroupNorm, LayerNorm.
#pragma once

#include "kiln/nn/module.h"

namespace kiln::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;               // learned weight (ones) and bias (zeros)
  bool track_running_stats = true;  // keep running_mean/var for eval mode (buffers, in state_dict)
};

// Normalizes each channel (dim 1) with its batch statistics in training, its running ones in eval.
// BatchNorm1d takes (N, C) or (N, C, L); BatchNorm2d (N, C, H, W).
class BatchNormImpl : public Module {
 public:
  BatchNormImpl(const char* type_name, int64_t num_features, BatchNormOptions options, int64_t input_dims_lo,
                int64_t input_dims_hi);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  BatchNormOptions options_;
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

// Normalizes over the last dims (normalized_shape) to mean 0 and variance 1, then scales and shifts by the
// learned weight (ones) and bias (zeros) when elementwise_affine.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};
using LayerNorm = ModuleHolder<LayerNormImpl>;

}  // namespace kiln::nn
