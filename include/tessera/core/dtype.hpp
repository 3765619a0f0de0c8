#pragma once
/// \file
/// Element types that Tessera moves and reduces, including the 16-bit float formats.

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
/// is done in float32.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  /// Rounds to nearest even; NaN stays NaN.
  explicit bfloat16(float value) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<std::uint16_t>(u >> 16);
    }
  }
  explicit operator float() const noexcept {
    std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

/// IEEE 754 binary16. Storage and conversion only; arithmetic is done in float32.
struct float16 {
  std::uint16_t bits = 0;
  float16() = default;
  /// Rounds to nearest even, with subnormals, infinities and NaN.
  explicit float16(float value) noexcept;
  explicit operator float() const noexcept;
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
