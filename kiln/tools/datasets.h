// The built-in datasets of `kiln train` (data.name in a run.yaml), split into training, validation and test
// sets the same way on every run (data.seed):
//   fashion-mnist, mnist  the IDX files of either (data.path, or Debian's /usr/share/datasets/fashion-mnist)
//   idx                   a folder of MNIST-style IDX files under the same four names
//   csv                   a numeric CSV with a header; data.label_column holds the class (0 .. K-1)
//   synthetic             data.num_samples Gaussian clusters in data.num_features dims, data.num_classes
//   text                  a file's bytes (data.path; a folder: its regular files in name order, one after the
//                         other) as windows of data.block_size tokens, each labelled with the next byte at
//                         every position (a vocabulary of 256); for gpt-mini and lstm-lm
// Images are scaled to [0, 1] and, with data.normalize, standardized by the training set's mean and std (CSV
// and synthetic features per column). data.val_size examples of the training set are held out for validation
// (for csv and synthetic, which have no test split, the test set is another held-out part of the same size,
// or a tenth of the data with val_size 0; for text those parts are the file's last windows, in order).
// Images stay as stored (uint8) in the datasets and are scaled and standardized a batch at a time
// (DataSplits::prepare, which the loaders' collate() applies); augmentation (data.random_crop_padding,
// data.horizontal_flip) works on the stored pixels, so a crop pads with 0 (black), as torchvision's RandomCrop
// before ToTensor and Normalize does.
#pragma once

#include <functional>
#include <memory>

#include "kiln/data/data.h"
#include "kiln/tools/models.h"
#include "kiln/tools/run_config.h"

namespace kiln::tools {

struct DataSplits {
  std::shared_ptr<data::Dataset> train, val, test;  // val may be null (val_size 0)
  DataInfo info;
  // The model's input from the datasets' first field (one example, or a batch of them): for uint8 images the
  // scaling and standardization above; empty when the datasets hold the input as the model takes it.
  std::function<Tensor(const Tensor&)> prepare;
  // What the loaders merge a batch's examples with: default_collate, then prepare on the input field.
  data::CollateFn collate() const;
  // prepare(x), or x when there is nothing to prepare.
  Tensor inputs(const Tensor& x) const { return prepare ? prepare(x) : x; }
};

DataSplits make_data(const RunConfig::Data& config);

}  // namespace kiln::tools
