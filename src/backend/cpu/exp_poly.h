// The constants of the vector e^x (exp8 in avx2_util.h, exp16 in avx512_util.h): x = n ln2 + r
// with ln2 in two parts (so r is exact), e^r = 1 + r + r^2 p(r), p of degree 5 by Horner from
// kExpPoly[0] (the classic polynomial of Cephes' expf). Within ~2 ulps of expf.
#pragma once

namespace moeflux::cpu {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace moeflux::cpu
