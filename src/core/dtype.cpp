// DType names, sizes and the scalar conversions that are not one-liners.
#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace moeflux {

namespace {
struct DTypeInfo {
  DType t;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kInfo[] = {
    {DType::F32, "F32", 4},   {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F64, "F64", 8}, {DType::I64, "I64", 8},
    {DType::I32, "I32", 4},   {DType::I16, "I16", 2},   {DType::I8, "I8", 1},
    {DType::U32, "U32", 4},   {DType::U16, "U16", 2},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

size_t dtype_size(DType t) { return kInfo[size_t(t)].size; }
std::string_view dtype_name(DType t) { return kInfo[size_t(t)].name; }

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.name == s) return i.t;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8_E4M3 ||
         t == DType::F64;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(float(man), -24);                       // subnormal / zero
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(float(man | 0x400), int(exp) - 25);
  return sign ? -v : v;
}

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities, S.1111.111 is NaN.
float f8e4m3_to_f32(uint8_t b) {
  uint32_t sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
  float v;
  if (exp == 15 && man == 7) v = NAN;
  else if (exp == 0) v = std::ldexp(float(man), -9);
  else v = std::ldexp(float(man | 8), int(exp) - 10);
  return sign ? -v : v;
}

float load_f32(DType t, const void* base, size_t i) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, static_cast<const char*>(base) + 4 * i, 4);
      return f;
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(base) + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(base) + 2 * i, 2);
      return f16_to_f32(h);
    }
    case DType::F8_E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::F64: {
      double d;
      std::memcpy(&d, static_cast<const char*>(base) + 8 * i, 8);
      return float(d);
    }
    default: MF_ASSERT(!"load_f32 on a non-float dtype");
  }
  return 0;
}

}  // namespace moeflux
