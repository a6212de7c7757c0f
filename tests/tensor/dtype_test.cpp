// Dtypes: sizes, names, PyTorch's promotion table and result_type with scalars and 0-dim tensors. The
// expected values are PyTorch's documented behaviour (torch.promote_types / torch.result_type).
#include <cstring>

#include "test_util.h"

namespace kiln {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(kBool), 1u);
  EXPECT_EQ(dtype_size(kUInt8), 1u);
  EXPECT_EQ(dtype_size(kInt32), 4u);
  EXPECT_EQ(dtype_size(kInt64), 8u);
  EXPECT_EQ(dtype_size(kFloat16), 2u);
  EXPECT_EQ(dtype_size(kBFloat16), 2u);
  EXPECT_EQ(dtype_size(kFloat32), 4u);
  EXPECT_EQ(dtype_size(kFloat64), 8u);
  EXPECT_STREQ(dtype_name(kBFloat16), "bfloat16");
  EXPECT_TRUE(is_floating(kFloat16));
  EXPECT_FALSE(is_floating(kInt64));
}

// A float stored into uint8 wraps modulo 256 through int64 (a plain cast is undefined for negatives, and x86 and
// CUDA disagree on it); every kernel converts through kiln::convert, so both devices give these values.
TEST(DType, FloatToUint8WrapsModulo256) {
  EXPECT_EQ(convert<uint8_t>(-2.0f), 254);
  EXPECT_EQ(convert<uint8_t>(300.0), 44);
  EXPECT_EQ(convert<uint8_t>(-0.5), 0);
  EXPECT_EQ(test::values(tensor({-2.0, 255.9, 256.0, -1.0}).to(kUInt8)), (std::vector<double>{254, 255, 0, 255}));
}

TEST(DType, PromoteTypesMatchesPyTorch) {
  struct Case {
    DType a, b, want;
  };
  const Case cases[] = {
      {kBool, kBool, kBool},         {kBool, kUInt8, kUInt8},       {kUInt8, kInt32, kInt32},
      {kUInt8, kInt64, kInt64},      {kInt32, kInt64, kInt64},      {kInt64, kFloat16, kFloat16},
      {kInt64, kBFloat16, kBFloat16}, {kFloat16, kBFloat16, kFloat32}, {kFloat16, kFloat32, kFloat32},
      {kBFloat16, kFloat64, kFloat64}, {kInt32, kFloat32, kFloat32}, {kFloat32, kFloat64, kFloat64},
      {kBool, kFloat16, kFloat16},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(promote_types(c.a, c.b), c.want) << c.a << " + " << c.b;
    EXPECT_EQ(promote_types(c.b, c.a), c.want) << c.b << " + " << c.a;
  }
}

TEST(DType, ResultTypeWithScalars) {
  Tensor i32 = zeros({2}, kInt32), f16 = zeros({2}, kFloat16), b = zeros({2}, kBool), u8 = zeros({2}, kUInt8);
  EXPECT_EQ(result_type(i32, Scalar(2)), kInt32);      // int tensor + int: stays int32
  EXPECT_EQ(result_type(i32, Scalar(2.5)), kFloat32);  // int tensor + float: the default float dtype
  EXPECT_EQ(result_type(f16, Scalar(2.5)), kFloat16);  // same category: the tensor wins
  EXPECT_EQ(result_type(b, Scalar(1)), kInt64);        // bool tensor + int: int64
  EXPECT_EQ(result_type(u8, Scalar(300)), kUInt8);     // PyTorch does not widen for the value
  EXPECT_EQ(result_type(b, Scalar(true)), kBool);
}

TEST(DType, ResultTypeWithZeroDimTensors) {
  Tensor f32 = zeros({2}), i64 = zeros({2}, kInt64);
  EXPECT_EQ(result_type(f32, zeros({}, kFloat64)), kFloat32);  // a 0-dim tensor of one category yields
  EXPECT_EQ(result_type(i64, zeros({}, kFloat64)), kFloat64);  // ... unless its category is higher
  EXPECT_EQ(result_type(zeros({}, kFloat64), zeros({}, kFloat32)), kFloat64);  // both 0-dim: ordinary promotion
  EXPECT_EQ(result_type(zeros({}, kInt32), Scalar(1.5)), kFloat32);
}

TEST(DType, DefaultDtypeFollowsSetting) {
  set_default_dtype(kFloat64);
  EXPECT_EQ(zeros({1}).dtype(), kFloat64);
  EXPECT_EQ(result_type(zeros({1}, kInt32), Scalar(0.5)), kFloat64);
  set_default_dtype(kFloat32);
  EXPECT_EQ(zeros({1}).dtype(), kFloat32);
  test::expect_error([] { set_default_dtype(kInt32); }, {"set_default_dtype", "int32"});
}

TEST(DType, UnsupportedDtypeNamesOpAndDtype) {
  EXPECT_EQ(exp(zeros({2}, kBool)).dtype(), kFloat32);  // float math on bool computes in the default float dtype
  test::expect_error([] { (void)neg(zeros({2}, kBool)); }, {"neg", "bool"});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

bool is_nan_half(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(Half, PortableConversionRoundTripsEveryHalf) {
  // Every non-NaN binary16 value is exactly a float, so half -> float -> half must give the same bits.
  for (uint32_t h = 0; h < 65536; ++h) {
    auto b = static_cast<uint16_t>(h);
    float f = detail::half_bits_to_float_portable(b);
    if (is_nan_half(b)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(detail::float_to_half_bits_portable(f), b) << std::hex << h;
  }
}

TEST(Half, PortableConversionMatchesTheHardware) {
#ifndef KILN_HAVE_F16C
  GTEST_SKIP() << "this build has no F16C instructions to compare with";
#else
  for (uint32_t h = 0; h < 65536; ++h) {
    auto b = static_cast<uint16_t>(h);
    if (is_nan_half(b)) continue;
    ASSERT_EQ(detail::half_bits_to_float_portable(b), _cvtsh_ss(b)) << std::hex << h;
  }
  // Floats around every half value (exact, halfway, just off halfway), plus random bit patterns.
  std::mt19937 rng(40);
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    float lo = _cvtsh_ss(static_cast<uint16_t>(h)), hi = _cvtsh_ss(static_cast<uint16_t>(h + 1));
    float mid = 0.5f * (lo + hi);
    probes.insert(probes.end(), {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid});
  }
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) probes.push_back(f);
  }
  for (float f : probes)
    ASSERT_EQ(detail::float_to_half_bits_portable(f), static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)))
        << f;
#endif
}

}  // namespace
}  // namespace kiln
