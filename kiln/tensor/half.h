// 16-bit floating point storage types: Half (IEEE binary16) and BFloat16 (the top half of a float32).
//
// Both are storage formats only: every op loads them into float, computes in float, and rounds back once
// (round to nearest, ties to even), so CPU and CUDA kernels that share a functor give the same bits.
// The conversions are written with integer bit manipulation instead of compiler intrinsics for that reason.
#pragma once

#include <cstdint>
#include <cstring>

#include "kiln/tensor/macros.h"

#if defined(__F16C__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#define KILN_HAVE_F16C 1
#endif

namespace kiln {

namespace detail {

KILN_INLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

KILN_INLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// float32 -> binary16, round to nearest even; overflow gives inf, NaN stays NaN (quiet). Written with integer
// operations: the portable reference, and what the GPU and CPUs without F16C run.
KILN_INLINE uint16_t float_to_half_bits_portable(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Adding 0.5 (as float) aligns the mantissa so the FPU rounds to the subnormal half grid for us.
    float shifted = bits_float(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(shifted) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

KILN_INLINE float half_bits_to_float_portable(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// With F16C (x86 since 2012) one instruction does the same IEEE rounding, several times faster; the tests
// check the two agree.
KILN_INLINE uint16_t float_to_half_bits(float f) {
#ifdef KILN_HAVE_F16C
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return float_to_half_bits_portable(f);
#endif
}

KILN_INLINE float half_bits_to_float(uint16_t h) {
#ifdef KILN_HAVE_F16C
  return _cvtsh_ss(h);
#else
  return half_bits_to_float_portable(h);
#endif
}

KILN_INLINE uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

KILN_INLINE float bfloat16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  KILN_INLINE Half(float f) : bits(detail::float_to_half_bits(f)) {}
  KILN_INLINE operator float() const { return detail::half_bits_to_float(bits); }
  static KILN_INLINE Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  KILN_INLINE BFloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  KILN_INLINE operator float() const { return detail::bfloat16_bits_to_float(bits); }
  static KILN_INLINE BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace kiln
