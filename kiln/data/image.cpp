// PNG writing and make_grid.
//
// A PNG file is the 8-byte signature, then chunks, each: uint32 big-endian length | 4-byte type | data |
// uint32 big-endian CRC-32 (ISO 3309, zlib's crc32) of type and data. Three chunks are enough:
//   IHDR  width, height (uint32 BE each), bit depth 8, colour type (0 grey, 2 RGB, 6 RGBA; 4 grey + alpha is
//         not produced), compression 0, filter 0, interlace 0;
//   IDAT  the zlib stream of the scanlines, each a filter-type byte (0: none) and the row's bytes;
//   IEND  empty.
#include "kiln/data/image.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kiln/autograd/functions.h"
#include "kiln/tensor/error.h"

namespace kiln::data {

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xFF);
}

void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(out.data() + start), out.size() - start);
  put_u32(out, static_cast<uint32_t>(crc));
}

// (C, H, W) of any accepted input shape, with the name encode_png's errors use.
Tensor as_chw(const Tensor& image, const char* who) {
  KILN_CHECK(image.defined(), who, ": an undefined tensor");
  KILN_CHECK(image.dim() == 2 || image.dim() == 3, who, ": expected an image (H, W) or (C, H, W), got shape ",
             shape_str(image.shape()));
  Tensor chw = image.dim() == 2 ? image.unsqueeze(0) : image;
  const int64_t c = chw.size(0);
  KILN_CHECK(c == 1 || c == 3 || c == 4, who, ": expected 1, 3 or 4 channels (grey, RGB, RGBA) in dim 0, got shape ",
             shape_str(image.shape()));
  KILN_CHECK(chw.size(1) >= 1 && chw.size(2) >= 1, who, ": an empty image of shape ", shape_str(image.shape()));
  KILN_CHECK(chw.size(1) < (int64_t{1} << 31) && chw.size(2) < (int64_t{1} << 31), who, ": an image of shape ",
             shape_str(image.shape()), " is larger than PNG allows (2^31 - 1 pixels a side)");
  return chw;
}

Tensor pixels_of(const Tensor& image, const char* who) {
  const Tensor chw = as_chw(image, who).to(Device::cpu());
  Tensor bytes;
  if (chw.dtype() == kUInt8) {
    bytes = chw;
  } else if (chw.dtype() == kBool) {
    bytes = chw.to(kUInt8) * 255;
  } else {
    KILN_CHECK(is_floating(chw.dtype()), who, ": expected a float, uint8 or bool image, got ", chw.dtype());
    // torchvision's rounding: x * 255 + 0.5, clamped to [0, 255], truncated; NaN to 0.
    Tensor f = chw.to(kFloat32);
    f = where(isnan(f), 0.0, f);
    bytes = clamp(f * 255.0 + 0.5, 0.0, 255.0).to(kUInt8);
  }
  return bytes.permute({1, 2, 0}).contiguous();  // (H, W, C): the rows PNG stores
}

}  // namespace

Tensor to_pixels(const Tensor& image) { return pixels_of(image, "to_pixels"); }

std::string encode_png(const Tensor& image) {
  const Tensor pixels = pixels_of(image, "encode_png");
  const int64_t h = pixels.size(0), w = pixels.size(1), c = pixels.size(2);
  const uint8_t* p = pixels.data_ptr<uint8_t>();
  const size_t row = static_cast<size_t>(w * c);
  std::string scanlines;
  scanlines.reserve(static_cast<size_t>(h) * (row + 1));
  for (int64_t y = 0; y < h; ++y) {
    scanlines += '\0';  // filter type none
    scanlines.append(reinterpret_cast<const char*>(p + y * row), row);
  }
  uLongf size = compressBound(scanlines.size());
  std::string deflated(size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(deflated.data()), &size,
                           reinterpret_cast<const Bytef*>(scanlines.data()), scanlines.size(), 6);
  KILN_CHECK(rc == Z_OK, "encode_png: zlib's compress2 failed (", rc, ") on ", scanlines.size(), " bytes");
  deflated.resize(size);

  std::string header;
  put_u32(header, static_cast<uint32_t>(w));
  put_u32(header, static_cast<uint32_t>(h));
  header += static_cast<char>(8);                              // bits per channel
  header += static_cast<char>(c == 1 ? 0 : c == 3 ? 2 : 6);    // colour type
  header += std::string(3, '\0');                              // compression, filter, interlace
  std::string png = "\x89PNG\r\n\x1a\n";
  put_chunk(png, "IHDR", header);
  // The zlib stream in IDAT chunks of at most 1 MiB (a chunk's length field is 31 bits; readers join them).
  constexpr size_t kIdat = size_t{1} << 20;
  for (size_t at = 0; at < deflated.size(); at += kIdat) put_chunk(png, "IDAT", deflated.substr(at, kIdat));
  put_chunk(png, "IEND", "");
  return png;
}

Tensor make_grid(const Tensor& images, const GridOptions& o) {
  KILN_CHECK(images.defined() && images.dim() >= 2 && images.dim() <= 4,
             "make_grid: expected images (N, C, H, W), one image (C, H, W) or (H, W), got ",
             images.defined() ? "shape " + shape_str(images.shape()) : std::string("an undefined tensor"));
  KILN_CHECK(o.nrow >= 1 && o.padding >= 0, "make_grid: nrow must be >= 1 and padding >= 0, got ", o.nrow, " and ",
             o.padding);
  Tensor t = images;
  if (t.dim() == 2) t = t.unsqueeze(0);
  if (t.dim() == 3) t = t.unsqueeze(0);
  KILN_CHECK(t.size(0) >= 1, "make_grid: an empty batch of shape ", shape_str(images.shape()));
  if (t.size(1) == 1) t = cat({t, t, t}, 1);  // grey as RGB, as torchvision
  if (o.normalize) {
    KILN_CHECK(t.is_floating_point(), "make_grid: normalize needs float images, got ", t.dtype());
    const auto scale = [&](const Tensor& x) {
      double lo, hi;
      if (o.value_range) {
        lo = o.value_range->first, hi = o.value_range->second;
      } else {
        lo = x.min().item<double>(), hi = x.max().item<double>();
      }
      return (clamp(x, lo, hi) - lo) / std::max(hi - lo, 1e-5);
    };
    if (o.scale_each) {
      std::vector<Tensor> each;
      for (int64_t i = 0; i < t.size(0); ++i) each.push_back(scale(t.select(0, i)));
      t = stack(each, 0);
    } else {
      t = scale(t);
    }
  }
  const int64_t n = t.size(0), ch = t.size(1), h = t.size(2), w = t.size(3);
  if (n == 1) return t.squeeze(0);  // torchvision: one image, no padding
  const int64_t cols = std::min(o.nrow, n), rows = (n + cols - 1) / cols;
  const int64_t cell_h = h + o.padding, cell_w = w + o.padding;
  Tensor grid = full({ch, rows * cell_h + o.padding, cols * cell_w + o.padding}, o.pad_value,
                     TensorOptions(t.dtype()).device(t.device()));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t y = k / cols, x = k % cols;
    grid.narrow(1, y * cell_h + o.padding, h).narrow(2, x * cell_w + o.padding, w).copy_(t.select(0, k));
  }
  return grid;
}

void save_image(const Tensor& image, const std::string& path, const GridOptions& options) {
  const std::string png = encode_png(make_grid(image, options));  // as torchvision's, for one image too
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  KILN_CHECK(f != nullptr, "save_image: cannot write ", path, ": ", std::strerror(errno));
  const bool written = std::fwrite(png.data(), 1, png.size(), f) == png.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    KILN_CHECK(false, "save_image: cannot write ", path, ": ", why);
  }
}

}  // namespace kiln::data
