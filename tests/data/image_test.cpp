// PNG writing and make_grid (kiln/data/image.h). The PNGs are read back by the test's own decoder
// (tests/data/png_reader.h: zlib's inflate, the specification's chunks and filters) and, where libpng was found
// at build time, by libpng too; the pixel values are worked out by hand from torchvision's rule
// (clamp(x * 255 + 0.5, 0, 255), truncated); make_grid's layout is checked position by position against
// torchvision's documented arithmetic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/png_reader.h"
#include "error_of.h"
#include "kiln/kiln.h"

namespace kiln::data {
namespace image_test {

namespace fs = std::filesystem;
using test::decode_png;
using test::PngImage;

using test::error_of;

// Both decoders agree with each other (where libpng is present) and the result is returned.
PngImage read_back(const std::string& png) {
  PngImage ours = decode_png(png);
#ifdef KILN_TEST_HAVE_LIBPNG
  PngImage reference = test::decode_png_libpng(png);
  EXPECT_EQ(reference.width, ours.width);
  EXPECT_EQ(reference.height, ours.height);
  EXPECT_EQ(reference.channels, ours.channels);
  EXPECT_EQ(reference.pixels, ours.pixels);
#endif
  return ours;
}

TEST(Png, FloatPixelsFollowTorchvisionsRounding) {
  // (1, 2, 3): one grey row of 3 pixels above another.
  const Tensor grey = tensor(std::vector<float>{0.0f, 0.5f, 1.0f, -1.0f, 1.5f, NAN}, {1, 2, 3});
  const PngImage g = read_back(encode_png(grey));
  EXPECT_EQ(g.width, 3);
  EXPECT_EQ(g.height, 2);
  EXPECT_EQ(g.channels, 1);
  // 0 -> 0; 0.5 -> 128 (127.5 + 0.5); 1 -> 255; -1 clamps to 0; 1.5 clamps to 255; NaN -> 0.
  EXPECT_EQ(g.pixels, (std::vector<uint8_t>{0, 128, 255, 0, 255, 0}));
  // The same values as (H, W): a grey image too.
  EXPECT_EQ(read_back(encode_png(grey.squeeze(0))).pixels, g.pixels);
  // 0.2 * 255 = 51 (+ 0.5 truncates to 51); 0.199 * 255 = 50.7 -> 51; 0.197 * 255 = 50.2 -> 50.
  EXPECT_EQ(read_back(encode_png(tensor(std::vector<double>{0.2, 0.199, 0.197}, {1, 1, 3}))).pixels,
            (std::vector<uint8_t>{51, 51, 50}));
}

TEST(Png, ChannelsBecomeInterleavedPixels) {
  // (3, 2, 2) uint8: channel c of pixel (y, x) holds 100 c + 10 y + x.
  std::vector<uint8_t> v;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 2; ++x) v.push_back(static_cast<uint8_t>(100 * c + 10 * y + x));
    }
  }
  const Tensor rgb = tensor(v, {3, 2, 2});
  const PngImage p = read_back(encode_png(rgb));
  EXPECT_EQ(p.channels, 3);
  EXPECT_EQ(p.pixels, (std::vector<uint8_t>{0, 100, 200, 1, 101, 201, 10, 110, 210, 11, 111, 211}));
  // A transposed (non-contiguous) view is read through its strides.
  const PngImage t = read_back(encode_png(rgb.transpose(1, 2)));
  EXPECT_EQ(t.pixels, (std::vector<uint8_t>{0, 100, 200, 10, 110, 210, 1, 101, 201, 11, 111, 211}));
  // RGBA, and a bool image in black and white.
  const PngImage a = read_back(encode_png(cat({rgb, full({1, 2, 2}, 7, kUInt8)}, 0)));
  EXPECT_EQ(a.channels, 4);
  EXPECT_EQ(a.pixels[3], 7);
  EXPECT_EQ(read_back(encode_png(tensor(std::vector<bool>{true, false}, {1, 2}))).pixels,
            (std::vector<uint8_t>{255, 0}));
}

TEST(Png, LargeRandomImagesRoundTrip) {
  // Noise zlib cannot compress, more than the 1 MiB a chunk holds: the stream is split over IDAT chunks.
  manual_seed(3);
  const Tensor img = randint(0, 256, {3, 620, 617}, kUInt8);
  const std::string png = encode_png(img);
  size_t idat = 0;
  for (size_t at = png.find("IDAT"); at != std::string::npos; at = png.find("IDAT", at + 4)) ++idat;
  EXPECT_GE(idat, 2u);
  const PngImage p = read_back(png);
  ASSERT_EQ(p.pixels.size(), size_t{620 * 617 * 3});
  const Tensor hwc = img.permute({1, 2, 0}).contiguous();
  EXPECT_TRUE(std::equal(p.pixels.begin(), p.pixels.end(), hwc.data_ptr<uint8_t>()));
}

TEST(Png, BadImagesAreRefusedByShapeAndDtype) {
  EXPECT_EQ(error_of([] { encode_png(zeros({2, 4, 4})); }),
            "encode_png: expected 1, 3 or 4 channels (grey, RGB, RGBA) in dim 0, got shape (2, 4, 4)");
  EXPECT_EQ(error_of([] { encode_png(zeros({1, 1, 4, 4})); }),
            "encode_png: expected an image (H, W) or (C, H, W), got shape (1, 1, 4, 4)");
  EXPECT_EQ(error_of([] { encode_png(zeros({1, 0, 4})); }), "encode_png: an empty image of shape (1, 0, 4)");
  EXPECT_EQ(error_of([] { encode_png(zeros({1, 2, 2}, kInt32)); }),
            "encode_png: expected a float, uint8 or bool image, got int32");
  EXPECT_EQ(error_of([] { to_pixels(zeros({5, 2, 2})); }),
            "to_pixels: expected 1, 3 or 4 channels (grey, RGB, RGBA) in dim 0, got shape (5, 2, 2)");
}

TEST(MakeGrid, LaysImagesOutAsTorchvisionDoes) {
  // Five 1 x 2 x 3 images, image k filled with k + 1; nrow 2, padding 1, pad value 0.5.
  std::vector<Tensor> images;
  for (int k = 0; k < 5; ++k) images.push_back(full({1, 2, 3}, k + 1.0));
  const Tensor grid = make_grid(stack(images, 0), {.nrow = 2, .padding = 1, .pad_value = 0.5});
  // Grey becomes three channels; 3 rows of cells (2 + 1) + 1 = 10 high, 2 columns (3 + 1) + 1 = 9 wide.
  ASSERT_EQ(grid.sizes(), (Shape{3, 10, 9}));
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < 10; ++y) {
      for (int64_t x = 0; x < 9; ++x) {
        // Cell (row, col) starts at (1 + 3 row, 1 + 4 col); its image is row * 2 + col.
        const int64_t row = (y - 1) / 3, col = (x - 1) / 4;
        const bool inside = y >= 1 && x >= 1 && (y - 1) % 3 < 2 && (x - 1) % 4 < 3 && row * 2 + col < 5;
        const double expected = inside ? static_cast<double>(row * 2 + col + 1) : 0.5;
        EXPECT_EQ(grid.index({c, y, x}).item<double>(), expected) << c << " " << y << " " << x;
      }
    }
  }
  // One image comes back without padding (three channels); nrow larger than the batch leaves one row.
  EXPECT_EQ(make_grid(full({1, 1, 2, 3}, 0.25)).sizes(), (Shape{3, 2, 3}));
  EXPECT_EQ(make_grid(zeros({2, 3, 4, 4}), {.nrow = 8, .padding = 0}).sizes(), (Shape{3, 4, 8}));
  // uint8 stays uint8.
  EXPECT_EQ(make_grid(zeros({2, 3, 4, 4}, kUInt8)).dtype(), kUInt8);
}

TEST(MakeGrid, NormalizeScalesByTheBatchOrEachImage) {
  const Tensor batch = stack({full({1, 1, 2}, 2.0), tensor(std::vector<double>{4.0, 6.0}, {1, 1, 2})}, 0);
  // Over the batch: min 2, max 6 -> (x - 2) / 4.
  const Tensor all = make_grid(batch, {.padding = 0, .normalize = true});
  EXPECT_EQ(all.select(0, 0).flatten().to_vector<double>(), (std::vector<double>{0.0, 0.0, 0.5, 1.0}));
  // Each by its own range: the constant image stays 0 (range below 1e-5 divides by 1e-5), the other 0, 1.
  const Tensor each = make_grid(batch, {.padding = 0, .normalize = true, .scale_each = true});
  EXPECT_EQ(each.select(0, 0).flatten().to_vector<double>(), (std::vector<double>{0.0, 0.0, 0.0, 1.0}));
  // A given range clamps first.
  const Tensor ranged = make_grid(batch, {.padding = 0, .normalize = true, .value_range = std::pair{3.0, 5.0}});
  EXPECT_EQ(ranged.select(0, 0).flatten().to_vector<double>(), (std::vector<double>{0.0, 0.0, 0.5, 1.0}));
  EXPECT_EQ(error_of([] { make_grid(zeros({2, 3, 2, 2}), {.nrow = 0}); }),
            "make_grid: nrow must be >= 1 and padding >= 0, got 0 and 2");
}

TEST(SaveImage, WritesTheFileWholeAndGridsABatch) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_image_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "grid.png").string();
  save_image(full({4, 1, 5, 5}, 1.0), path, {.nrow = 2, .padding = 1});
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const PngImage p = read_back(bytes.str());
  EXPECT_EQ(p.width, 2 * 6 + 1);
  EXPECT_EQ(p.height, 2 * 6 + 1);
  EXPECT_EQ(p.channels, 3);
  EXPECT_EQ(p.pixels[0], 0);                                // padding
  EXPECT_EQ(p.pixels[(1 * p.width + 1) * 3], 255);          // image 0's first pixel
  // One image goes through make_grid too, as torchvision's: normalize applies, grey becomes RGB.
  const std::string one = (dir / "one.png").string();
  save_image(tensor(std::vector<float>{-1, 0, 1}, {1, 1, 3}), one, {.normalize = true});
  std::ifstream in_one(one, std::ios::binary);
  std::stringstream one_bytes;
  one_bytes << in_one.rdbuf();
  const PngImage q = read_back(one_bytes.str());
  EXPECT_EQ(q.channels, 3);
  EXPECT_EQ(q.pixels, (std::vector<uint8_t>{0, 0, 0, 128, 128, 128, 255, 255, 255}));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 2u);  // no temporary left beside them
  EXPECT_NE(error_of([&] { save_image(zeros({1, 2, 2}), (dir / "no" / "such.png").string()); })
                .find("save_image: cannot write"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace image_test
}  // namespace kiln::data
