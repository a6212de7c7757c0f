// Against the reference implementation: data/reference.safetensors was written by the Python `safetensors`
// package (0.8.0, numpy 2.4.6) with data/make_fixture.py. kiln must read it exactly, and writing the same
// tensors and metadata must give the same bytes (same layout order, same JSON, same padding).
#include <limits>

#include "serialize/serialize_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

const std::string kFixture = std::string(KILN_SERIALIZE_TEST_DATA) + "/reference.safetensors";

// The fixture's tensors, built from the values in make_fixture.py (16-bit floats as the bits numpy rounds to).
serialize::TensorMap expected_tensors() {
  float f32[] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-40f};
  double f64[] = {3.141592653589793, -1e300, 5e-324};
  uint16_t f16[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x7C00};  // 1, -2.5, 65504, 6e-8 -> 2^-24, inf
  int32_t i32[] = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), 7};
  int64_t i64[] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 42, -1};
  uint8_t u8[] = {0, 1, 127, 128, 255};
  bool flags[] = {true, false, true};
  float scalar = 7.0f;
  return {{"f32", from_buffer(f32, {2, 3}, kFloat32)},  {"f64", from_buffer(f64, {3}, kFloat64)},
          {"f16", from_buffer(f16, {5}, kFloat16)},     {"i32", from_buffer(i32, {3, 1}, kInt32)},
          {"i64", from_buffer(i64, {4}, kInt64)},       {"u8", from_buffer(u8, {5}, kUInt8)},
          {"flags", from_buffer(flags, {3}, kBool)},    {"scalar", from_buffer(&scalar, {}, kFloat32)},
          {"empty", empty({0, 3}, kFloat32)}};
}
const serialize::Metadata kMetadata{{"format", "np"}, {"note", "written by safetensors"}};

TEST(SafetensorsReference, ReadsTheReferenceWritersFile) {
  auto expected = expected_tensors();
  for (bool mmap : {false, true}) {
    auto loaded = serialize::load_safetensors(kFixture, {.mmap = mmap});
    EXPECT_EQ(loaded.metadata, kMetadata);
    ASSERT_EQ(loaded.tensors.size(), expected.size());
    for (const auto& [name, t] : expected) {
      const Tensor& got = loaded.tensors.at(name);
      EXPECT_EQ(got.dtype(), t.dtype()) << name;
      EXPECT_EQ(got.sizes(), t.sizes()) << name;
      EXPECT_EQ(tensor_bytes(got), tensor_bytes(t)) << name << (mmap ? " (mapped)" : "");
    }
    // A few values through an independent element reader, not just bytes.
    EXPECT_EQ(values(loaded.tensors.at("f16")), (std::vector<double>{1.0, -2.5, 65504.0, std::ldexp(1.0, -24),
                                                                     std::numeric_limits<double>::infinity()}));
    EXPECT_EQ(values(loaded.tensors.at("i64"))[2], 42.0);
    EXPECT_EQ(values(loaded.tensors.at("flags")), (std::vector<double>{1, 0, 1}));
    EXPECT_EQ(values(loaded.tensors.at("scalar")), std::vector<double>{7.0});
  }
}

TEST(SafetensorsReference, WritesTheSameBytesAsTheReferenceWriter) {
  EXPECT_EQ(serialize::to_bytes(expected_tensors(), kMetadata), read_file(kFixture));
}

}  // namespace
}  // namespace kiln::test
