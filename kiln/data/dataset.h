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
#include <functional>
#include <memory>
#include <optional>
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

// ---- iterable datasets: examples read as a stream, not by index ----
//
// For data with no cheap random access or no known length (records arriving over a socket, a generator, logs
// too large to index), as PyTorch's IterableDataset. A DataLoader over one asks for one stream per worker per
// epoch and makes each worker's batches from its own stream; the streams must split the examples between them
// (StreamInfo::part() of num_parts()), or every worker yields the same examples.

// Which stream is asked for: the epoch, and this stream's share of the epoch's examples.
struct StreamInfo {
  uint64_t epoch = 0;
  int worker = 0, num_workers = 1;  // the loader's worker that reads it (0 of 1 without worker threads)
  int rank = 0, world_size = 1;     // the process's share under ddp (the Trainer sets it)
  uint64_t seed = 0;                // the loader's seed, for a stream that shuffles
  // This stream's part of all the streams of the epoch, 0 <= part() < num_parts().
  int part() const { return rank * num_workers + worker; }
  int num_parts() const { return world_size * num_workers; }
};

// The next example, or std::nullopt at the end of the stream.
using ExampleStream = std::function<std::optional<Example>()>;

class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  // A new pass over the examples of `info`'s share of epoch info.epoch. Called on the loader's thread when an
  // epoch starts, once per stream; each stream is then read by one worker thread alone. A stream that gives the
  // same examples for the same info makes loaders resumable (DataLoader::set_state replays the batches
  // already handed out).
  virtual ExampleStream stream(const StreamInfo& info) const = 0;
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

// Several datasets one after another, as torch.utils.data.ConcatDataset: example i of the whole is example
// i - (the sizes before it) of the dataset it falls in. set_epoch reaches every part. The sizes are read once,
// when it is made.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<Dataset>> datasets);
  int64_t size() const override { return ends_.empty() ? 0 : ends_.back(); }
  Example get(int64_t index) const override;
  void set_epoch(uint64_t epoch) override;
  const std::vector<std::shared_ptr<Dataset>>& datasets() const { return datasets_; }
  // The index one past each part's last example: the running sum of the sizes.
  const std::vector<int64_t>& cumulative_sizes() const { return ends_; }

 private:
  std::vector<std::shared_ptr<Dataset>> datasets_;
  std::vector<int64_t> ends_;
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
