// A test-only PNG reader, written from the PNG specification rather than from kiln's writer: it checks the
// signature, every chunk's CRC-32, IHDR's fields and the chunk order, inflates IDAT with zlib and undoes all
// five scanline filters, so the data tests read kiln's PNGs back through a second implementation. With
// libpng present at build time (KILN_TEST_HAVE_LIBPNG), decode_png_libpng reads them through the reference
// decoder as well.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef KILN_TEST_HAVE_LIBPNG
#include <png.h>
#endif

namespace kiln::test {

struct PngImage {
  int64_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // rows top to bottom, each width * channels bytes
};

inline uint32_t png_u32(const std::string& s, size_t at) {
  if (at + 4 > s.size()) throw std::runtime_error("png: truncated");
  return uint32_t{static_cast<uint8_t>(s[at])} << 24 | uint32_t{static_cast<uint8_t>(s[at + 1])} << 16 |
         uint32_t{static_cast<uint8_t>(s[at + 2])} << 8 | uint32_t{static_cast<uint8_t>(s[at + 3])};
}

inline PngImage decode_png(const std::string& file) {
  if (file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) throw std::runtime_error("png: bad signature");
  PngImage img;
  std::string idat;
  bool seen_header = false, seen_end = false;
  int color_type = -1;
  for (size_t at = 8; at < file.size();) {
    if (seen_end) throw std::runtime_error("png: data after IEND");
    const uint32_t length = png_u32(file, at);
    if (at + 12 + length > file.size()) throw std::runtime_error("png: chunk runs past the end");
    const std::string type = file.substr(at + 4, 4);
    const std::string data = file.substr(at + 8, length);
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(file.data() + at + 4), length + 4);
    if (crc != png_u32(file, at + 8 + length)) throw std::runtime_error("png: CRC mismatch in " + type);
    if (type == "IHDR") {
      if (seen_header || length != 13) throw std::runtime_error("png: bad IHDR");
      seen_header = true;
      img.width = png_u32(data, 0);
      img.height = png_u32(data, 4);
      const int depth = static_cast<uint8_t>(data[8]);
      color_type = static_cast<uint8_t>(data[9]);
      if (depth != 8) throw std::runtime_error("png: bit depth " + std::to_string(depth));
      if (data[10] != 0 || data[11] != 0 || data[12] != 0) throw std::runtime_error("png: unknown method");
      img.channels = color_type == 0 ? 1 : color_type == 2 ? 3 : color_type == 4 ? 2 : color_type == 6 ? 4 : 0;
      if (img.channels == 0) throw std::runtime_error("png: colour type " + std::to_string(color_type));
    } else if (type == "IDAT") {
      if (!seen_header) throw std::runtime_error("png: IDAT before IHDR");
      idat += data;
    } else if (type == "IEND") {
      seen_end = true;
    } else if (type[0] >= 'A' && type[0] <= 'Z') {
      throw std::runtime_error("png: unknown critical chunk " + type);
    }
    at += 12 + length;
  }
  if (!seen_end) throw std::runtime_error("png: no IEND");
  const size_t row = static_cast<size_t>(img.width * img.channels);
  std::vector<uint8_t> raw(static_cast<size_t>(img.height) * (row + 1));
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    throw std::runtime_error("png: IDAT does not inflate to height * (1 + row) bytes");
  }
  img.pixels.assign(static_cast<size_t>(img.height) * row, 0);
  const size_t bpp = static_cast<size_t>(img.channels);
  for (int64_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (row + 1)];
    const uint8_t* in = &raw[y * (row + 1) + 1];
    uint8_t* out = &img.pixels[y * row];
    const uint8_t* up = y > 0 ? &img.pixels[(y - 1) * row] : nullptr;
    for (size_t i = 0; i < row; ++i) {
      const int a = i >= bpp ? out[i - bpp] : 0, b = up ? up[i] : 0, c = (up && i >= bpp) ? up[i - bpp] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: throw std::runtime_error("png: filter type " + std::to_string(filter));
      }
      out[i] = static_cast<uint8_t>(in[i] + predictor);
    }
  }
  return img;
}

#ifdef KILN_TEST_HAVE_LIBPNG
// The same through libpng's simplified API, in the file's own format.
inline PngImage decode_png_libpng(const std::string& file) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, file.data(), file.size())) {
    throw std::runtime_error(std::string("libpng: ") + image.message);
  }
  PngImage out;
  out.width = image.width;
  out.height = image.height;
  out.channels = PNG_IMAGE_SAMPLE_CHANNELS(image.format);
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr)) {
    throw std::runtime_error(std::string("libpng: ") + image.message);
  }
  return out;
}
#endif

}  // namespace kiln::test
