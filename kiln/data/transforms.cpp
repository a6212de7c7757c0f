// The transforms and TransformDataset.
#include "kiln/data/transforms.h"

#include "kiln/data/random.h"

namespace kiln::data {

Compose::Compose(std::vector<std::shared_ptr<Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i) KILN_CHECK(transforms_[i] != nullptr, "Compose: transform ", i, " is null");
}

Tensor Compose::operator()(const Tensor& x, Generator& gen) const {
  Tensor y = x;
  for (const auto& t : transforms_) y = (*t)(y, gen);
  return y;
}

Tensor ToFloat::operator()(const Tensor& x, Generator& gen) const {
  if (x.dtype() == kUInt8) return x.to(kFloat32) / 255.0;
  return x.to(kFloat32);
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  KILN_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize: mean and std need the same, non-zero, number of ",
             "values; got ", mean_.size(), " and ", std_.size());
  for (size_t c = 0; c < std_.size(); ++c)
    KILN_CHECK(std_[c] != 0, "Normalize: std of channel ", c, " is zero");
}

Tensor Normalize::operator()(const Tensor& x, Generator& gen) const {
  KILN_CHECK(x.is_floating_point(), "Normalize: expects a floating tensor, got ", x.dtype(), " (apply ToFloat first)");
  KILN_CHECK(x.dim() >= 1, "Normalize: expects a tensor of shape (C, ...), got a 0-dim one");
  int64_t c = x.size(0);
  KILN_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == c, "Normalize: input of shape ", shape_str(x.sizes()),
             " has ", c, " channels but ", mean_.size(), " means and stds were given");
  // mean, std: (C, 1, ..., 1), broadcast over the rest of x.
  Shape shape(static_cast<size_t>(x.dim()), 1);
  shape[0] = static_cast<int64_t>(mean_.size());
  Tensor mean = tensor(mean_, {static_cast<int64_t>(mean_.size())}, x.dtype()).view(shape);
  Tensor std = tensor(std_, {static_cast<int64_t>(std_.size())}, x.dtype()).view(shape);
  return (x - mean) / std;
}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding) : height_(height), width_(width), padding_(padding) {
  KILN_CHECK(height >= 1 && width >= 1 && padding >= 0, "RandomCrop: size must be positive and padding non-negative, got ",
             height, "x", width, " with padding ", padding);
}

Tensor RandomCrop::operator()(const Tensor& x, Generator& gen) const {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "RandomCrop: expects (C, H, W) or (H, W), got shape ", shape_str(x.sizes()));
  Tensor padded = padding_ > 0 ? pad(x, {padding_, padding_, padding_, padding_}) : x;
  int64_t h = padded.size(-2), w = padded.size(-1);
  KILN_CHECK(height_ <= h && width_ <= w, "RandomCrop: crop ", height_, "x", width_, " is larger than the padded input ",
             h, "x", w);
  int64_t top = static_cast<int64_t>(draw_below(gen, static_cast<uint64_t>(h - height_ + 1)));
  int64_t left = static_cast<int64_t>(draw_below(gen, static_cast<uint64_t>(w - width_ + 1)));
  return padded.narrow(-2, top, height_).narrow(-1, left, width_).contiguous();
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  KILN_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must lie in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x, Generator& gen) const {
  KILN_CHECK(x.dim() >= 1, "RandomHorizontalFlip: expects at least one dim, got a 0-dim tensor");
  // Always draw, so that the transforms after this one see the same stream whether or not it flipped.
  bool do_flip = draw_uniform(gen) < p_;
  return do_flip ? flip(x, {-1}) : x;
}

TransformDataset::TransformDataset(std::shared_ptr<Dataset> dataset, std::shared_ptr<Transform> transform, size_t field,
                                   uint64_t seed)
    : dataset_(std::move(dataset)), transform_(std::move(transform)), field_(field), seed_(seed) {
  KILN_CHECK(dataset_ != nullptr && transform_ != nullptr, "TransformDataset: dataset and transform must not be null");
}

Example TransformDataset::get(int64_t index) const {
  Example e = dataset_->get(index);
  KILN_CHECK(field_ < e.size(), "TransformDataset: field ", field_, " asked for, but example ", index, " has ", e.size(),
             " fields");
  Generator gen(derive_seed(seed_, epoch_, static_cast<uint64_t>(index)));
  e[field_] = (*transform_)(e[field_], gen);
  return e;
}

void TransformDataset::set_epoch(uint64_t epoch) {
  epoch_ = epoch;
  dataset_->set_epoch(epoch);
}

}  // namespace kiln::data
