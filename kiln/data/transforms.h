// Transforms: functions on one example's tensor (an image (C, H, W), a feature vector, ...).
//
// A transform gets the tensor and a Generator to draw from. TransformDataset seeds that generator from
// (its seed, the epoch, the example's index) for every get(), so a random crop or flip is the same whatever the
// number of DataLoader workers and whatever order they reach examples in, and different from epoch to epoch.
// Compose passes one generator through its transforms in order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // Must not modify `x` (it may view the dataset's storage) and must draw randomness only from `gen`.
  virtual Tensor operator()(const Tensor& x, Generator& gen) const = 0;
};

// Applies transforms in order.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<Transform>> transforms);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  std::vector<std::shared_ptr<Transform>> transforms_;
};

// uint8 -> float32 / 255 (values in [0, 1]); other dtypes -> float32 unchanged in value.
class ToFloat : public Transform {
 public:
  Tensor operator()(const Tensor& x, Generator& gen) const override;
};

// x: (C, ...) floating: out[c] = (x[c] - mean[c]) / std[c]. One mean and std may serve every channel.
class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  std::vector<double> mean_, std_;
};

// x: (C, H, W) or (H, W): zero-pads `padding` on every side, then crops a (height, width) window at a random
// position (uniform over all positions that fit).
class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t height, int64_t width, int64_t padding = 0);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  int64_t height_, width_, padding_;
};

// Reverses the last dim (W) with probability p.
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  double p_;
};

// `dataset` with `transform` applied to field `field` of every example. The transform's generator for example
// i in epoch e is seeded from (seed, e, i).
class TransformDataset : public Dataset {
 public:
  TransformDataset(std::shared_ptr<Dataset> dataset, std::shared_ptr<Transform> transform, size_t field = 0,
                   uint64_t seed = 0);
  int64_t size() const override { return dataset_->size(); }
  Example get(int64_t index) const override;
  void set_epoch(uint64_t epoch) override;
  uint64_t epoch() const { return epoch_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<Transform> transform_;
  size_t field_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
};

}  // namespace kiln::data
