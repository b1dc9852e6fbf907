// Element types of tensors in checkpoints and packs, and scalar conversions to f32.
// bf16 / f16 / f8_e4m3 conversions are exact (every value of the narrow type is an f32).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace moeflux {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, F64, I64, I32, I16, I8, U32, U16, U8, BOOL };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtype_from_name(std::string_view s);
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as torch's .to(bfloat16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
float f8e4m3_to_f32(uint8_t v);

// Reads element i of a float tensor of type t as f32 (F32, F16, BF16, F8_E4M3, F64).
float load_f32(DType t, const void* base, size_t i);

}  // namespace moeflux
