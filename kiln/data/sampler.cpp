// The samplers: sequential, random, weighted and distributed.
#include "kiln/data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/data/dataset.h"
#include "kiln/data/random.h"

namespace kiln::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  KILN_CHECK(n >= 0, "SequentialSampler: n must be non-negative, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  KILN_CHECK(n >= 0, "RandomSampler: n must be non-negative, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const { return random_permutation(n_, derive_seed(seed_, epoch_)); }

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement,
                                             uint64_t seed)
    : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement), seed_(seed) {
  KILN_CHECK(num_samples >= 0, "WeightedRandomSampler: num_samples must be non-negative, got ", num_samples);
  double sum = 0;
  int64_t positive = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    KILN_CHECK(std::isfinite(weights_[i]) && weights_[i] >= 0, "WeightedRandomSampler: weight ", i, " is ", weights_[i],
               "; weights must be finite and non-negative");
    sum += weights_[i];
    positive += weights_[i] > 0;
    cumulative_.push_back(sum);
  }
  KILN_CHECK(num_samples == 0 || sum > 0, "WeightedRandomSampler: all ", weights_.size(), " weights are zero");
  KILN_CHECK(replacement || num_samples <= positive, "WeightedRandomSampler: cannot draw ", num_samples,
             " samples without replacement from ", positive, " indices of positive weight");
}

std::vector<int64_t> WeightedRandomSampler::indices() const {
  Generator gen(derive_seed(seed_, epoch_));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (replacement_) {
    double total = cumulative_.empty() ? 0 : cumulative_.back();
    for (int64_t s = 0; s < num_samples_; ++s) {
      double u = draw_uniform(gen) * total;
      // The first index whose running sum exceeds u; zero-weight indices (equal running sums) are never it.
      auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
      if (it == cumulative_.end()) --it;  // NOTE: u * total can round up to total itself
      while (weights_[static_cast<size_t>(it - cumulative_.begin())] == 0) --it;
      out.push_back(it - cumulative_.begin());
    }
    return out;
  }
  // Without replacement: key_i = log(u_i) / w_i (the log of u^(1/w)); the num_samples largest keys win.
  std::vector<std::pair<double, int64_t>> keys;
  for (size_t i = 0; i < weights_.size(); ++i) {
    double u = draw_uniform(gen);
    if (weights_[i] > 0) keys.push_back({std::log(std::max(u, 1e-300)) / weights_[i], static_cast<int64_t>(i)});
  }
  std::partial_sort(keys.begin(), keys.begin() + num_samples_, keys.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  for (int64_t s = 0; s < num_samples_; ++s) out.push_back(keys[static_cast<size_t>(s)].second);
  return out;
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  KILN_CHECK(n >= 0, "DistributedSampler: n must be non-negative, got ", n);
  KILN_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be at least 1, got ", num_replicas);
  KILN_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is out of range [0, ", num_replicas, ")");
  // With drop_last the tail that does not divide evenly is dropped; otherwise the list is padded up.
  num_samples_ = drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = random_permutation(n_, derive_seed(seed_, epoch_));
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  size_t total = static_cast<size_t>(num_samples_ * num_replicas_);
  if (all.size() < total) {
    // Pad by cycling through the list from its start (n >= 1 here: n == 0 gives total == 0).
    size_t n = all.size();
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % n]);
  }
  all.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace kiln::data
