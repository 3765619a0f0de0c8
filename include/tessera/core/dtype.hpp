#pragma once
/// \file
/// Element types that Tessera moves and reduces, including the 16-bit float formats.

#include <Kokkos_Macros.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace tessera {

/// The element types of buffers, parameters and datasets.
enum class DType : std::uint8_t { Float32, Float64, Int32, Int64, BFloat16, Float16 };

/// Bytes per element.
std::size_t dtype_size(DType dtype) noexcept;
/// Lower-case name as users write it: "float32", "bfloat16", ...
const char* dtype_name(DType dtype) noexcept;
/// Parses "float32"/"fp32"/"float", "bf16"/"bfloat16", ...; throws ConfigError otherwise.
DType parse_dtype(const std::string& name);
/// True for float32, float64, bfloat16, float16.
bool is_floating(DType dtype) noexcept;

/// bfloat16: the top 16 bits of an IEEE float32. Storage and conversion only; arithmetic
/// is done in float32. The conversions are valid in device code (Kokkos kernels) too.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  /// Rounds to nearest even; NaN stays NaN.
  KOKKOS_INLINE_FUNCTION explicit bfloat16(float value) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<std::uint16_t>(u >> 16);
    }
  }
  KOKKOS_INLINE_FUNCTION explicit operator float() const noexcept {
    std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

/// IEEE 754 binary16. Storage and conversion only; arithmetic is done in float32. The
/// conversions are valid in device code too.
struct float16 {
  std::uint16_t bits = 0;
  float16() = default;
  /// Rounds to nearest even, with subnormals, infinities and NaN.
  KOKKOS_INLINE_FUNCTION explicit float16(float value) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) {  // NaN: keep it quiet and non-zero
      bits = static_cast<std::uint16_t>(sign | 0x7e00u);
    } else if (abs >= 0x477ff000u) {  // rounds to >= 65520: infinity
      bits = static_cast<std::uint16_t>(sign | 0x7c00u);
    } else if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
      // Scale into the subnormal range with a float add, which rounds to nearest even:
      // 0.5 = 2^-1, so the half subnormal step 2^-24 lands on the float's last bits.
      float f;
      std::memcpy(&f, &abs, sizeof f);
      f += 0.5f;
      std::uint32_t r;
      std::memcpy(&r, &f, sizeof r);
      bits = static_cast<std::uint16_t>(sign | (r - 0x3f000000u));
    } else {  // normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits
      std::uint32_t h = abs - 0x38000000u;
      h += 0x0fffu + ((h >> 13) & 1u);
      bits = static_cast<std::uint16_t>(sign | (h >> 13));
    }
  }
  KOKKOS_INLINE_FUNCTION explicit operator float() const noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    const std::uint32_t exp = (bits >> 10) & 0x1fu;
    const std::uint32_t man = bits & 0x3ffu;
    std::uint32_t u;
    if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
      const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
      std::memcpy(&u, &f, sizeof u);
      u |= sign;
    } else if (exp == 31) {
      u = sign | 0x7f800000u | (man << 13);
    } else {
      u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2, "16-bit types must be 2 bytes");

/// The DType of a C++ element type, at compile time.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::Float16;
};

/// True when T is one of the element types above.
template <class T, class = void>
struct is_dtype : std::false_type {};
template <class T>
struct is_dtype<T, std::void_t<decltype(dtype_of<T>::value)>> : std::true_type {};

}  // namespace tessera
