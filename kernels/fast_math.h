// SPDX-License-Identifier: MIT
// exp, expm1 and tanh that compile to vector code in the CPU kernels' loops.
//
// glibc's expf/tanhf are opaque calls, so a loop over them stays scalar (about 20 ns an element);
// ATen's own CPU kernels vectorize through SLEEF, which an extension cannot link. For float on the
// host these are branch-free and built from +, *, / and bit operations that GCC and Clang
// vectorize at -O3: about 1-2 ulp for exp, and an absolute error near float's epsilon for expm1
// and tanh. Device code and double use the C library, whose accuracy float64 gradchecks need.
#pragma once

#include "common.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace jitops {
namespace fast {

template <typename To, typename From>
JITOPS_HOST_DEVICE inline To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of one size");
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

#ifndef __CUDA_ARCH__
// e^x for |x| <= 80 (inputs beyond are clamped: e^-80 and e^80 are still normal floats, so the
// sigmoids, elu and tanh built on this saturate correctly): e^x = 2^k * e^r, |r| <= ln(2) / 2.
inline float host_exp(float x) {
  x = x < -80.0f ? -80.0f : x;
  x = x > 80.0f ? 80.0f : x;
  // Adding 1.5 * 2^23 rounds to an integer k, which then sits in the low bits of the sum.
  constexpr float kRoundMagic = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kRoundMagic;
  const float k = shifted - kRoundMagic;
  const float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;  // ln 2 in two parts
  // Taylor series to r^6: relative error below 2e-7 for |r| <= ln(2) / 2.
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  // 2^k, built from k's bits directly: no float-to-int conversion, which would stop vectorization.
  const int32_t k_bits = bit_cast<int32_t>(shifted) - bit_cast<int32_t>(kRoundMagic);
  const float scale = bit_cast<float>((k_bits + 127) << 23);
  return p * scale;
}
#endif

JITOPS_HOST_DEVICE inline float exp(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  return host_exp(x);
#endif
}
JITOPS_HOST_DEVICE inline double exp(double x) { return std::exp(x); }

JITOPS_HOST_DEVICE inline float expm1(float x) {
#ifdef __CUDA_ARCH__
  return ::expm1f(x);
#else
  return host_exp(x) - 1.0f;
#endif
}
JITOPS_HOST_DEVICE inline double expm1(double x) { return std::expm1(x); }

JITOPS_HOST_DEVICE inline float tanh(float x) {
#ifdef __CUDA_ARCH__
  return ::tanhf(x);
#else
  return 1.0f - 2.0f / (host_exp(2.0f * x) + 1.0f);
#endif
}
JITOPS_HOST_DEVICE inline double tanh(double x) { return std::tanh(x); }

}  // namespace fast
}  // namespace jitops
