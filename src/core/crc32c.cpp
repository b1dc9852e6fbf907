// CRC-32C: a slicing-by-8 table loop, and on x86 CPUs with SSE4.2 the crc32 instruction over
// three interleaved streams (see crc32c.h). All loops work on the raw register (no inversion);
// crc32c_update applies the initial and final ~.
#include "core/crc32c.h"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define MOEFLUX_CRC32C_X86 1
#endif

namespace moeflux {

static_assert(std::endian::native == std::endian::little, "the table loop reads little-endian words");

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed: bit 31 holds x^0

// a * b modulo the polynomial, both in the reflected form.
uint32_t mul_mod_poly(uint32_t a, uint32_t b) {
  uint32_t prod = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) prod ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;  // b * x
  }
  return prod;
}

// x^(8 n) modulo the polynomial: what n zero bytes do to the raw register (a product).
uint32_t zero_bytes_operator(uint64_t n) {
  uint32_t result = 1u << 31, square = 1u << 23;  // x^0, x^8
  for (; n != 0; n >>= 1) {
    if (n & 1) result = mul_mod_poly(result, square);
    square = mul_mod_poly(square, square);
  }
  return result;
}

// The register after n zero bytes, by four table lookups (the operator is linear in the bits).
struct ZeroShift {
  explicit ZeroShift(uint64_t n) {
    const uint32_t op = zero_bytes_operator(n);
    for (uint32_t k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = mul_mod_poly(b << (8 * k), op);
  }
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
  uint32_t t[4][256];
};

struct SliceTables {
  SliceTables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (size_t k = 1; k < 8; ++k)
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  uint32_t t[8][256];
};

uint32_t raw_portable(uint32_t c, const uint8_t* p, uint64_t n) {
  static const SliceTables tables;
  const auto& t = tables.t;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return c;
}

#ifdef MOEFLUX_CRC32C_X86
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Three streams of `len` bytes each (a multiple of 8): the instruction's latency is three times
// its issue interval, so three independent chains keep it busy; the results are joined by
// shifting each over the bytes that follow it.
__attribute__((target("sse4.2"))) uint32_t three_streams(uint32_t c, const uint8_t* p, uint64_t len,
                                                          const ZeroShift& shift) {
  uint64_t a = c, b = 0, d = 0;
  const uint8_t *p1 = p + len, *p2 = p + 2 * len;
  for (uint64_t i = 0; i < len; i += 8) {
    a = _mm_crc32_u64(a, load64(p + i));
    b = _mm_crc32_u64(b, load64(p1 + i));
    d = _mm_crc32_u64(d, load64(p2 + i));
  }
  return shift(shift(uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(d);
}

__attribute__((target("sse4.2"))) uint32_t raw_hardware(uint32_t c, const uint8_t* p, uint64_t n) {
  constexpr uint64_t kLong = 8192, kShort = 256;  // bytes per stream
  static const ZeroShift long_shift(kLong), short_shift(kShort);
  for (; n >= 3 * kLong; p += 3 * kLong, n -= 3 * kLong) c = three_streams(c, p, kLong, long_shift);
  for (; n >= 3 * kShort; p += 3 * kShort, n -= 3 * kShort) c = three_streams(c, p, kShort, short_shift);
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = uint32_t(c64);
  for (; n > 0; ++p, --n) c = _mm_crc32_u8(c, *p);
  return c;
}
#endif

}  // namespace

bool crc32c_hardware() {
#ifdef MOEFLUX_CRC32C_X86
  static const bool has = [] {
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("sse4.2"));
  }();
  return has;
#else
  return false;
#endif
}

uint32_t crc32c_update_portable(uint32_t crc, const uint8_t* p, uint64_t n) { return ~raw_portable(~crc, p, n); }

uint32_t crc32c_update(uint32_t crc, const uint8_t* p, uint64_t n) {
#ifdef MOEFLUX_CRC32C_X86
  if (crc32c_hardware()) return ~raw_hardware(~crc, p, n);
#endif
  return ~raw_portable(~crc, p, n);
}

}  // namespace moeflux
