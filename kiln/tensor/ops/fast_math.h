// exp, expm1, log, log1p, tanh and erf for float written so that loops over them vectorize on the CPU
// (std::exp, std::log and the others do not without -ffast-math, and cost ten to fifty times more per
// element). Used by the element-wise functors (exp, expm1, log, log1p, sigmoid, silu, tanh, erf, gelu and its
// gradient, the activations) and by softmax. On the GPU the functors call the CUDA math library instead.
//
// Accuracy: exp within 2 ulp of the exact value over the whole float range, denormal results included;
// exp(-inf) = 0, exp(+inf) = inf, exp(NaN) = NaN, overflow gives inf. expm1 within 1 ulp. log and log1p within
// 1 ulp on every positive float (log1p: above -1), denormals included. tanh and erf within 3 ulp (erf within 2 where
// the compiler fuses multiply-adds, as -march=native does). All checked against float64 in
// tests/tensor/unary_test.cpp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::fast_math {

// Host code only: the GPU has its own fast exp and tanh.

// x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite: ln2 split in two parts, the first short enough that n times
// it is exact); e^r from a degree-6 minimax polynomial (Cephes' expf coefficients); times 2^n applied as two
// factors 2^k1 * 2^k2, each a normal float, so results down to the smallest denormal are rounded once and
// results past FLT_MAX overflow to inf. Branch-free: every condition is a select.
inline __attribute__((always_inline)) float exp(float arg) {
  float x = arg > -104.0f ? arg : -104.0f;  // e^-104 rounds to 0; NaN becomes -104 here and NaN again below
  x = x < 88.8f ? x : 88.8f;                // e^88.8 > FLT_MAX: the product below overflows to inf
  // Round to nearest without std::nearbyint (which GCC does not vectorize): adding 1.5 * 2^23 pushes the
  // fraction bits out.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t k = static_cast<int32_t>(n), k1 = k >> 1, k2 = k - k1;  // k in [-150, 128]: k1, k2 in [-75, 64]
  const float e = p * std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23) *
                  std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  return arg != arg ? arg : e;
}

// tanh for float, branch-free like exp above. Small |x| (< 0.625) uses the odd polynomial
// x + x^3 P(x^2) (Cephes' tanhf coefficients), where 1 - 2 / (e^2x + 1) would lose digits to cancellation;
// larger |x| uses that formula, with the sign put back. Saturates to +-1 and keeps NaN.
inline __attribute__((always_inline)) float tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float large_abs = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  const float large = x < 0.0f ? -large_abs : large_abs;
  const float r = a < 0.625f ? small : large;
  return x != x ? x : std::copysign(r, x);  // copysign keeps tanh(-0) = -0
}

// e^x - 1 for float, branch-free like exp above, within 1 ulp: x = n ln2 + r as in exp, then
// e^x - 1 = 2^n (e^r - 1) + (2^n - 1), with e^r - 1 from its Taylor series to r^9 (|r| <= ln2 / 2: the
// first term left out is below 2e-10 of the result). Both parts are exact or nearly so, which keeps the
// digits that e^x - 1 computed directly loses near 0. Beyond |x| = 20 the result is e^x, or -1 in float.
// Keeps NaN and -0.
inline __attribute__((always_inline)) float expm1(float arg) {
  float x = arg > -20.0f ? arg : -20.0f;
  x = x < 20.0f ? x : 20.0f;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float q = 1.0f / 362880.0f;
  q = q * r + 1.0f / 40320.0f;
  q = q * r + 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  const float em1_r = r + r * r * q;
  const float two_n = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float moderate = two_n * em1_r + (two_n - 1.0f);
  const float result = arg > 20.0f ? exp(arg) : moderate;  // exp overflows to inf past FLT_MAX
  const float a = arg < 0.0f ? -arg : arg;
  return (arg != arg || a < 1e-10f) ? arg : result;  // below 1e-10, e^x - 1 rounds to x (and -0 stays -0)
}

// Natural log for float, branch-free like exp above. x = 2^k m with m in [sqrt(1/2), sqrt(2)), read off the
// bits: subtracting the bits of sqrt(1/2) makes the exponent field k, and taking k back off the exponent leaves
// m. Then log x = k ln2 + log(1 + f), f = m - 1 in [-0.293, 0.414], with log(1 + f) = f - f^2/2 + f^3 P(f)
// (Cephes' logf coefficients) and ln2 split in two parts as in exp. Denormals are scaled by 2^23 first. log(0)
// = -inf, log(inf) = inf, log of a negative number or NaN is NaN.
inline __attribute__((always_inline)) float log(float arg) {
  const bool denormal = arg < 1.17549435e-38f;  // also true for 0 and negatives, whose results are set below
  const float x = denormal ? arg * 8388608.0f : arg;
  // Unsigned arithmetic: a negative input's bits would overflow an int (its result is NaN in any case).
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const int32_t k = static_cast<int32_t>(bits - 0x3f3504f3u) >> 23;  // 0x3f3504f3: the bits of sqrt(1/2)
  const float f = std::bit_cast<float>(bits - (static_cast<uint32_t>(k) << 23)) - 1.0f;
  const float e = static_cast<float>(denormal ? k - 23 : k);
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = f * z * p + e * -2.12194440e-4f - 0.5f * z;
  y = (f + y) + e * 0.693359375f;
  y = arg == 0.0f ? -INFINITY : y;
  y = arg == INFINITY ? arg : y;
  return arg < 0.0f ? NAN : (arg != arg ? arg : y);
}

// log(1 + x) for float, branch-free: with u = 1 + x rounded, log1p(x) = log(u) + (x - (u - 1)) / u,
// the second term putting back the part of x that the rounding of u dropped (u - 1 is exact). Keeps -0 and NaN;
// log1p(-1) = -inf, log1p(inf) = inf, below -1 NaN.
inline __attribute__((always_inline)) float log1p(float x) {
  const float u = 1.0f + x;
  const float r = log(u) + (x - (u - 1.0f)) / u;
  const float special = x == -1.0f ? -INFINITY : x;  // -1, inf and +-0 are their own results, or -inf
  return (x == 0.0f || x == -1.0f || x == INFINITY) ? special : r;
}

// erf for float, branch-free like the ones above. |x| <= 1: x P(x^2), P of degree 6, relative error 1.2e-9
// before rounding. 1 < |x| < 4: 1 - e^(-x^2) Q(1 / |x|), where Q(u) approximates erfc(x) e^(x^2) (smooth,
// between 0.14 and 0.43 there) by a degree-8 polynomial, relative error 6.5e-8; that term is below 0.16, so
// erf's error is a few 1e-8 at most. From |x| = 3.92 on, erf rounds to +-1 in float. Both polynomials were
// fitted for kiln (weighted least squares iterated towards equal relative error, at 400 Chebyshev nodes, in
// 40-digit arithmetic). Keeps NaN, -0 and the sign.
inline __attribute__((always_inline)) float erf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = 7.85392259324775e-5f;
  p = p * z - 8.0102123245315644e-4f;
  p = p * z + 5.188329835523831e-3f;
  p = p * z - 2.6853813080845313e-2f;
  p = p * z + 1.1283585176432234e-1f;
  p = p * z - 3.7612625826735047e-1f;
  p = p * z + 1.1283791657270831f;
  const float small = x * p;
  const float b = a < 1.0f ? 1.0f : (a > 4.0f ? 4.0f : a);  // Q's range; beyond 4, e^(-x^2) Q is below 1e-8
  const float u = 1.0f / b;
  float q = -1.1364513637441391e-2f;
  q = q * u + 3.7950279991808363e-2f;
  q = q * u + 4.1285203460278959e-3f;
  q = q * u - 2.1918480959041269e-1f;
  q = q * u + 4.8101885409216194e-1f;
  q = q * u - 4.6470088844065471e-1f;
  q = q * u + 4.0168358394919907e-2f;
  q = q * u + 5.5931457949019176e-1f;
  q = q * u + 2.5316763225445558e-4f;
  const float large_abs = 1.0f - exp(-z) * q;  // z = inf: exp gives 0, and the result 1
  const float r = a <= 1.0f ? small : (x < 0.0f ? -large_abs : large_abs);
  return x != x ? x : r;
}

}  // namespace kiln::fast_math
