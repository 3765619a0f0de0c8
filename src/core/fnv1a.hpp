#pragma once
// Internal: FNV-1a, the 64-bit fingerprint the ranks compare where they must agree (their
// settings, their replicas, a collective's signature in check mode) and the seed of the
// random streams' keys. Cheap and the same on every rank and build; not for security.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::detail {

class Fnv1a {
 public:
  Fnv1a& bytes(const void* data, std::size_t n) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) hash_ = (hash_ ^ p[i]) * kPrime;
    return *this;
  }
  Fnv1a& text(std::string_view s) noexcept { return bytes(s.data(), s.size()); }
  /// The 8 bytes of `v`, lowest first, whatever the machine's byte order.
  Fnv1a& word(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i, v >>= 8) hash_ = (hash_ ^ (v & 0xffu)) * kPrime;
    return *this;
  }
  std::uint64_t value() const noexcept { return hash_; }

 private:
  static constexpr std::uint64_t kPrime = 1099511628211ull;
  std::uint64_t hash_ = 1469598103934665603ull;
};

inline std::uint64_t fnv1a(std::string_view s) noexcept { return Fnv1a().text(s).value(); }

}  // namespace tessera::detail
