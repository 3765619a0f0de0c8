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

}  // namespace tessera
