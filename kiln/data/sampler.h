// Samplers: which dataset indices an epoch visits, and in what order.
//
// A sampler hands out a whole epoch's index list at once (indices()), computed from its seed and the epoch set
// by set_epoch(): the same (seed, epoch) always gives the same list, whatever else happened before. That is
// what lets a DataLoader cut the list into batches by batch number, give them to any number of workers, and
// resume mid-epoch from (epoch, batches yielded).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The number of indices one epoch yields.
  virtual int64_t size() const = 0;
  // The indices of the current epoch, in order.
  virtual std::vector<int64_t> indices() const = 0;
  // Selects the epoch; samplers that shuffle draw a new order for each.
  virtual void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

 protected:
  uint64_t epoch_ = 0;
};

// 0, 1, ..., n - 1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
};

// A permutation of [0, n), a different one each epoch, derived from (seed, epoch) only.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;
  uint64_t seed() const { return seed_; }
  void set_seed(uint64_t seed) { seed_ = seed; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// num_samples indices drawn with probability proportional to `weights` (non-negative, not all zero), with or
// without replacement (without: each index at most once, so num_samples <= the number of positive weights;
// drawn by Efraimidis-Spirakis keys u^(1/w)).
class WeightedRandomSampler : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;

 private:
  std::vector<double> weights_;
  std::vector<double> cumulative_;  // running sums of weights_, for inverse-CDF draws
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// The share of rank `rank` among `num_replicas` data-parallel processes, as torch's DistributedSampler: the
// (shuffled by (seed, epoch), or sequential) index list is padded by repeating its start so that its length
// divides evenly (or, with drop_last, cut to a multiple of num_replicas), then rank r takes positions
// r, r + num_replicas, ... Every rank gets size() indices; without drop_last their union is the whole dataset.
// All ranks must use the same seed and call set_epoch with the same epoch.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

}  // namespace kiln::data
