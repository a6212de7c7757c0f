// Images out of tensors: PNG encoding, saving, and torchvision's make_grid, for looking at what a model sees or
// makes (the TensorBoard logger's images go through encode_png).
//
//   data::save_image(data::make_grid(batch.narrow(0, 0, 16), 4), "samples.png");   // a 4 x 4 grid
//
// Pixel values follow torchvision's save_image: a float image holds values in [0, 1], each becoming
// round-half-up(255 x) after clamping (NaN becomes 0); a uint8 image is written as it is; a bool image is
// black and white. Channels: 1 (grey), 3 (RGB) or 4 (RGBA). A tensor on any device, any strides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "kiln/tensor/tensor.h"

namespace kiln::data {

// The PNG file of `image`: (H, W), or (C, H, W) with C 1, 3 or 4; 8 bits per channel, rows unfiltered, the
// pixels deflated by zlib. Errors name the shape or dtype at fault.
std::string encode_png(const Tensor& image);

// (H, W, C) uint8 pixels of `image`, as encode_png stores them (for the TensorBoard logger and tests).
Tensor to_pixels(const Tensor& image);

struct GridOptions {
  int64_t nrow = 8;      // images per row
  int64_t padding = 2;   // pixels between images and around the grid
  double pad_value = 0;  // the padding's value (in the images' own scale)
  // Scale the whole batch to [0, 1] by its minimum and maximum (or by value_range, clamping first).
  bool normalize = false;
  std::optional<std::pair<double, double>> value_range;
  bool scale_each = false;  // with normalize: each image by its own minimum and maximum
};

// torchvision.utils.make_grid: a batch (N, C, H, W) laid out in rows of nrow images, as one (C', H', W')
// image. As in torchvision, one-channel images become three (grey repeated), a (C, H, W) or (H, W) input is
// one image, and the grid is (3 or C, ceil(N / nrow) (H + padding) + padding, min(N, nrow) (W + padding) +
// padding). Floats stay floats (uint8 stays uint8), on the input's device.
Tensor make_grid(const Tensor& images, const GridOptions& options = {});

// Writes encode_png(make_grid(image, options)) to `path`, as torchvision's save_image: a batch (N, C, H, W) as a
// grid, one image (C, H, W) or (H, W) as it is (grey as RGB; normalize and value_range apply). The file
// appears whole or not at all (written beside it, then renamed).
void save_image(const Tensor& image, const std::string& path, const GridOptions& options = {});

}  // namespace kiln::data
