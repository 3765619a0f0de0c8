#include <tessera/core/dtype.hpp>
#include <tessera/core/error.hpp>

#include <algorithm>
#include <cctype>

namespace tessera {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::BFloat16:
      return 2;
    case DType::Float16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float16:
      return "float16";
  }
  return "unknown";
}

bool is_floating(DType dtype) noexcept { return dtype != DType::Int32 && dtype != DType::Int64; }

DType parse_dtype(const std::string& name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "float32" || s == "fp32" || s == "float") return DType::Float32;
  if (s == "float64" || s == "fp64" || s == "double") return DType::Float64;
  if (s == "int32" || s == "int") return DType::Int32;
  if (s == "int64") return DType::Int64;
  if (s == "bfloat16" || s == "bf16") return DType::BFloat16;
  if (s == "float16" || s == "fp16" || s == "half") return DType::Float16;
  throw ConfigError("unknown dtype '" + name + "'; use one of float32, float64, int32, int64, bfloat16, float16");
}

float16::float16(float value) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep it quiet and non-zero
    bits = static_cast<std::uint16_t>(sign | 0x7e00u);
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: infinity
    bits = static_cast<std::uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Scale into the subnormal range with a float add, which rounds to nearest even.
    float f;
    std::uint32_t a = abs;
    std::memcpy(&f, &a, sizeof f);
    f += 0.5f;  // 0.5 = 2^-1; the half subnormal step 2^-24 lands on the float's last bits
    std::uint32_t r;
    std::memcpy(&r, &f, sizeof r);
    bits = static_cast<std::uint16_t>(sign | (r - 0x3f000000u));
    return;
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t h = abs - 0x38000000u;
  h += 0x0fffu + ((h >> 13) & 1u);
  bits = static_cast<std::uint16_t>(sign | (h >> 13));
}

float16::operator float() const noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t man = bits & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    // Zero or subnormal: value = man * 2^-24, exact in float.
    float f = static_cast<float>(man) * 5.9604644775390625e-8f;
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

}  // namespace tessera
