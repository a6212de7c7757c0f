// Dataset, TensorDataset, Subset and random_split.
#include "kiln/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/data/random.h"

namespace kiln::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  KILN_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    KILN_CHECK(tensors_[k].defined(), "TensorDataset: tensor ", k, " is undefined");
    KILN_CHECK(tensors_[k].dim() >= 1, "TensorDataset: tensor ", k, " is 0-dim; every tensor needs a dim 0 to slice");
    KILN_CHECK(tensors_[k].size(0) == tensors_[0].size(0), "TensorDataset: tensors differ in their first dim: tensor 0 has ",
               tensors_[0].size(0), " rows, tensor ", k, " has ", tensors_[k].size(0), " (shape ", shape_str(tensors_[k].sizes()), ")");
  }
  size_ = tensors_[0].size(0);
}

Example TensorDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size_, "TensorDataset: index ", index, " is out of range for ", size_, " examples");
  Example e;
  e.reserve(tensors_.size());
  for (const auto& t : tensors_) e.push_back(t.select(0, index));
  return e;
}

Subset::Subset(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  KILN_CHECK(dataset_ != nullptr, "Subset: dataset is null");
  int64_t n = dataset_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    KILN_CHECK(indices_[i] >= 0 && indices_[i] < n, "Subset: index ", indices_[i], " (position ", i,
               ") is out of range for a dataset of ", n, " examples");
}

Example Subset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "Subset: index ", index, " is out of range for ", size(), " examples");
  return dataset_->get(indices_[static_cast<size_t>(index)]);
}

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<Dataset>> datasets) : datasets_(std::move(datasets)) {
  KILN_CHECK(!datasets_.empty(), "ConcatDataset: no datasets given (expected at least one)");
  int64_t end = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    KILN_CHECK(datasets_[k] != nullptr, "ConcatDataset: dataset ", k, " is null");
    end += datasets_[k]->size();
    ends_.push_back(end);
  }
}

Example ConcatDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "ConcatDataset: index ", index, " is out of range for ", size(),
             " examples");
  // The first part that ends after index (parts of size 0 end where the one before does, and are passed over).
  const auto part = std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin();
  const int64_t start = part == 0 ? 0 : ends_[static_cast<size_t>(part) - 1];
  return datasets_[static_cast<size_t>(part)]->get(index - start);
}

void ConcatDataset::set_epoch(uint64_t epoch) {
  for (auto& d : datasets_) d->set_epoch(epoch);
}

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[draw_below(gen, static_cast<uint64_t>(i) + 1)]);
  return p;
}

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<int64_t>& lengths, uint64_t seed) {
  KILN_CHECK(dataset != nullptr, "random_split: dataset is null");
  int64_t total = 0;
  for (int64_t len : lengths) {
    KILN_CHECK(len >= 0, "random_split: lengths must be non-negative, got ", len);
    total += len;
  }
  KILN_CHECK(total == dataset->size(), "random_split: lengths sum to ", total, " but the dataset has ", dataset->size(),
             " examples");
  std::vector<int64_t> perm = random_permutation(total, seed);
  std::vector<std::shared_ptr<Subset>> out;
  int64_t start = 0;
  for (int64_t len : lengths) {
    out.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(perm.begin() + start, perm.begin() + start + len)));
    start += len;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<double>& fractions, uint64_t seed) {
  KILN_CHECK(dataset != nullptr, "random_split: dataset is null");
  double sum = 0;
  for (double f : fractions) {
    KILN_CHECK(f >= 0 && f <= 1, "random_split: fractions must lie in [0, 1], got ", f);
    sum += f;
  }
  KILN_CHECK(std::fabs(sum - 1) <= 1e-6, "random_split: fractions sum to ", sum, ", expected 1");
  int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  int64_t assigned = 0;
  for (double f : fractions) {
    lengths.push_back(static_cast<int64_t>(std::floor(f * static_cast<double>(n))));
    assigned += lengths.back();
  }
  for (int64_t i = 0; assigned < n && !lengths.empty(); ++i, ++assigned) ++lengths[i % lengths.size()];
  return random_split(dataset, lengths, seed);
}

namespace {
uint64_t draw_seed(Generator& gen) {
  auto d = gen.reserve(1);
  auto w = Philox4x32::generate(d.seed, d.offset);
  return static_cast<uint64_t>(w[0]) << 32 | w[1];
}
}  // namespace

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<int64_t>& lengths, Generator& gen) {
  return random_split(dataset, lengths, draw_seed(gen));
}

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<Dataset>& dataset,
                                                  const std::vector<double>& fractions, Generator& gen) {
  return random_split(dataset, fractions, draw_seed(gen));
}

}  // namespace kiln::data
