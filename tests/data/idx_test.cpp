// IDX: every type, plain and gzipped, every planted fault; and Fashion-MNIST where Debian's copy is installed.
#include <filesystem>

#include "data/data_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::data;

TEST(ReadIdx, Uint8PlainAndGzipped) {
  ScratchDir dir;
  std::string bytes = idx_header(0x08, {2, 3}) + std::string{1, 2, 3, 4, 5, '\xff'};
  write_bytes(dir.file("a.idx"), bytes);
  write_bytes(dir.file("a.idx.gz"), gzip_bytes(bytes));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    Tensor t = read_idx(dir.file(name));
    EXPECT_EQ(t.dtype(), kUInt8) << name;
    expect_tensor_near(t, {1, 2, 3, 4, 5, 255}, {2, 3}, name);
  }
  // Detected by content, not by name: a gzipped file without .gz.
  write_bytes(dir.file("b.idx"), gzip_bytes(bytes));
  expect_tensor_near(read_idx(dir.file("b.idx")), {1, 2, 3, 4, 5, 255}, {2, 3});
}

TEST(ReadIdx, SignedAndFloatTypesAreBigEndian) {
  ScratchDir dir;
  // int8: -1, 127, -128
  write_bytes(dir.file("i8"), idx_header(0x09, {3}) + std::string{'\xff', 0x7f, '\x80'});
  Tensor i8 = read_idx(dir.file("i8"));
  EXPECT_EQ(i8.dtype(), kInt32);
  expect_tensor_near(i8, {-1, 127, -128}, {3});
  // int16: 0x0102 = 258, 0xfffe = -2
  write_bytes(dir.file("i16"), idx_header(0x0B, {2}) + be(0x0102, 2) + be(0xfffe, 2));
  expect_tensor_near(read_idx(dir.file("i16")), {258, -2}, {2});
  // int32: 0x01020304, -5
  write_bytes(dir.file("i32"), idx_header(0x0C, {2, 1}) + be(0x01020304, 4) + be(0xfffffffb, 4));
  expect_tensor_near(read_idx(dir.file("i32")), {16909060, -5}, {2, 1});
  // float32: 1.5 = 0x3fc00000, -2 = 0xc0000000
  write_bytes(dir.file("f32"), gzip_bytes(idx_header(0x0D, {2}) + be(0x3fc00000, 4) + be(0xc0000000, 4)));
  Tensor f32 = read_idx(dir.file("f32"));
  EXPECT_EQ(f32.dtype(), kFloat32);
  expect_tensor_near(f32, {1.5, -2}, {2});
  // float64: 0.1 = 0x3fb999999999999a
  write_bytes(dir.file("f64"), idx_header(0x0E, {1, 1, 1}) + be(0x3fb999999999999aull, 8));
  Tensor f64 = read_idx(dir.file("f64"));
  EXPECT_EQ(f64.dtype(), kFloat64);
  EXPECT_EQ(f64.view({1}).to_vector<double>()[0], 0.1);
}

TEST(ReadIdx, WriteIdxRoundTrips) {
  ScratchDir dir;
  std::mt19937 rng(1);
  for (DType dt : {kUInt8, kInt32, kFloat32, kFloat64}) {
    for (bool gz : {false, true}) {
      Tensor t = random_tensor({3, 4, 5}, dt, rng, Layout::Transposed);
      std::string path = dir.file(std::string("t_") + dtype_name(dt) + (gz ? ".gz" : ""));
      write_idx(path, t, gz);
      Tensor back = read_idx(path);
      EXPECT_EQ(back.dtype(), dt);
      expect_tensor_near(back, values(t), {3, 4, 5}, 0, 0, path);
    }
  }
  expect_error([&] { write_idx(dir.file("x"), zeros({2}, kInt64)); }, {"write_idx", "int64"});
}

TEST(ReadIdx, PlantedFaultsNameFileAndProblem) {
  ScratchDir dir;
  auto check = [&](const std::string& name, const std::string& bytes, std::initializer_list<std::string> parts) {
    std::string path = dir.file(name);
    write_bytes(path, bytes);
    std::vector<std::string> all(parts);
    all.push_back(path);
    try {
      read_idx(path);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      for (const auto& p : all) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << name << ": " << e.what();
    }
  };
  std::string good = idx_header(0x08, {2, 2}) + std::string{1, 2, 3, 4};
  check("empty", "", {"too short"});
  check("magic_zero", std::string{1, 0, 8, 1, 0, 0, 0, 1, 7}, {"bad magic", "two zero bytes"});
  check("magic_type", idx_header(0x0A, {1}) + "x", {"bad magic", "type code 0xa"});
  check("zero_dims", idx_header(0x08, {}), {"0 dims"});
  check("short_header", idx_header(0x08, {2, 2}).substr(0, 9), {"truncated header", "2 dims need 12"});
  check("truncated", good.substr(0, good.size() - 1), {"truncated data", "(2, 2)", "needs 4", "has 3"});
  check("trailing", good + "zz", {"2 bytes of trailing garbage"});
  check("wrong_dims", idx_header(0x0C, {3}) + std::string(8, '\0'), {"truncated data", "int32", "needs 12"});
  check("overflow", idx_header(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}), {"overflow"});
  // gzip faults: cut mid-stream, corrupted bytes, garbage after the stream.
  std::string gz = gzip_bytes(good);
  check("gz_truncated", gz.substr(0, gz.size() - 6), {"gzip stream is truncated"});
  std::string bad = gz;
  bad[bad.size() - 5] ^= 0x55;  // the trailer's length field / CRC
  check("gz_corrupt", bad, {"corrupt gzip"});
  check("gz_trailing", gz + "garbage", {"trailing garbage after the gzip stream"});
  // Truncated IDX data inside a valid gzip stream.
  check("gz_short_data", gzip_bytes(good.substr(0, good.size() - 2)), {"truncated data"});
  expect_error([&] { read_idx(dir.file("missing")); }, {"read_idx", "cannot open", "missing"});
  // Two concatenated gzip members read as one stream (what `cat a.gz b.gz` makes).
  write_bytes(dir.file("two_members"), gzip_bytes(good.substr(0, 6)) + gzip_bytes(good.substr(6)));
  expect_tensor_near(read_idx(dir.file("two_members")), {1, 2, 3, 4}, {2, 2});
}

TEST(LoadMnist, SmallSyntheticCopy) {
  ScratchDir dir;
  // 3 images of 28x28 where image k is all k * 100; labels 7, 0, 9.
  std::string pixels;
  for (int k = 0; k < 3; ++k) pixels += std::string(784, static_cast<char>(k * 100));
  write_bytes(dir.file("t10k-images-idx3-ubyte.gz"), gzip_bytes(idx_header(0x08, {3, 28, 28}) + pixels));
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_header(0x08, {3}) + std::string{7, 0, 9});
  auto ds = load_mnist(dir.file(""), MnistSplit::Test);
  ASSERT_EQ(ds->size(), 3);
  Example e = ds->get(2);
  EXPECT_EQ(e[0].sizes(), (Shape{1, 28, 28}));
  EXPECT_EQ(e[0].dtype(), kFloat32);
  EXPECT_FLOAT_EQ(e[0].max().item<float>(), 200.0f / 255.0f);
  EXPECT_EQ(e[1].dtype(), kInt64);
  EXPECT_EQ(e[1].item<int64_t>(), 9);
  auto raw = load_mnist(dir.file(""), MnistSplit::Test, {.float_images = false});
  EXPECT_EQ(raw->get(1)[0].dtype(), kUInt8);
  EXPECT_EQ(raw->get(1)[0].max().item<int64_t>(), 100);
  expect_error([&] { load_mnist(dir.file(""), MnistSplit::Train); }, {"load_mnist", "train-images-idx3-ubyte"});
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_header(0x08, {2}) + std::string{7, 0});
  expect_error([&] { load_mnist(dir.file(""), MnistSplit::Test); }, {"load_mnist", "3 images", "2 labels"});
}

TEST(LoadMnist, DebianFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-labels-idx1-ubyte.gz")) GTEST_SKIP() << dir << " is not installed";
  auto train = load_mnist(dir, MnistSplit::Train, {.float_images = false});
  auto test = load_mnist(dir, MnistSplit::Test, {.float_images = false});
  ASSERT_EQ(train->size(), 60000);
  ASSERT_EQ(test->size(), 10000);
  EXPECT_EQ(train->tensors()[0].sizes(), (Shape{60000, 1, 28, 28}));
  for (auto [ds, per_class] : {std::pair{train, 6000}, std::pair{test, 1000}}) {
    std::vector<int64_t> count(10, 0);
    for (int64_t y : ds->tensors()[1].to_vector<int64_t>()) {
      ASSERT_TRUE(y >= 0 && y < 10) << y;
      ++count[static_cast<size_t>(y)];
    }
    for (int c = 0; c < 10; ++c) EXPECT_EQ(count[c], per_class) << "class " << c;
  }
  // Published facts: the first training label is 9 (ankle boot), the first test label is 9, mean pixel ~0.286.
  EXPECT_EQ(train->tensors()[1].to_vector<int64_t>()[0], 9);
  EXPECT_EQ(test->tensors()[1].to_vector<int64_t>()[0], 9);
  Tensor pixels = train->tensors()[0].contiguous();
  const uint8_t* px = pixels.data_ptr<uint8_t>();
  uint64_t sum = 0;
  for (int64_t i = 0; i < pixels.numel(); ++i) sum += px[i];
  double mean = static_cast<double>(sum) / static_cast<double>(pixels.numel()) / 255.0;
  EXPECT_NEAR(mean, 0.2860, 0.001);
}

}  // namespace
}  // namespace kiln::test
