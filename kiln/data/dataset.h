// Datasets: random access to examples by index.
//
// An Example is a short list of tensors (the fields), e.g. {image, label}: a vector rather than a fixed
// {data, target} pair, so that datasets with one field (unsupervised) or three (image, label, weight) need no
// other type. A DataLoader stacks field k of every example into field k of the batch.
//
// Datasets are shared, not copied (std::shared_ptr): Subset and TransformDataset wrap another dataset, and a
// DataLoader's worker threads call get() concurrently, so get() must be safe to call from several threads
// (every dataset here is: get() only reads).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/autograd/autograd.h"
#include "kiln/tensor/factories.h"

namespace kiln::data {

using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  // The number of examples.
  virtual int64_t size() const = 0;
  // Example `index`, 0 <= index < size(). Called from worker threads: must not modify shared state.
  virtual Example get(int64_t index) const = 0;
  // Called by a DataLoader before each epoch's first get(); random transforms key their randomness on it.
  // Wrappers forward it to the dataset they wrap.
  virtual void set_epoch(uint64_t epoch) {}
};

// Slices along dim 0 of several tensors: example i is {t[i] for t in tensors}.
class TensorDataset : public Dataset {
 public:
  // tensors: (N, ...) each, with the same N.
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// The examples of `dataset` at `indices` (in that order; repeats allowed).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  void set_epoch(uint64_t epoch) override { dataset_->set_epoch(epoch); }
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// Splits `dataset` into disjoint random Subsets of the given lengths (which must sum to its size), as
// torch.utils.data.random_split. The permutation depends only on `seed`.
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<int64_t>& lengths, uint64_t seed);
// Fractions (summing to 1 within 1e-6): each gets floor(fraction * size), and the examples left over go one
// each to the first subsets, round-robin, as PyTorch does.
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<double>& fractions, uint64_t seed);

// As above, with the seed drawn from `gen` (advancing it), as PyTorch's generator= argument.
// NOTE: a braced list of ints ({3, 7}) matches both the lengths and the fractions overloads; name the type.
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<int64_t>& lengths, Generator& gen);
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<double>& fractions, Generator& gen);

// A permutation of [0, n) that depends only on `seed` (Fisher-Yates over Philox draws).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace kiln::data
