#pragma once
/// \file
/// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11): a value is a pure
/// function of (key, counter), so any rank, in any layout, on host or device, computes the
/// same number for the same (seed, parameter name, global index) without shared state.

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <string>

namespace tessera {

/// One Philox4x32-10 block: 4 random 32-bit words for a 128-bit counter and 64-bit key.
struct Philox4x32 {
  std::uint32_t v[4];

  KOKKOS_INLINE_FUNCTION static Philox4x32 generate(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                                    std::uint32_t c3, std::uint32_t k0, std::uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
      const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
      const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
      const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return Philox4x32{{c0, c1, c2, c3}};
  }
};

/// Uniform float in [0, 1) for stream `key` and element `index` (24 random bits).
KOKKOS_INLINE_FUNCTION float uniform01(std::uint64_t key, std::uint64_t index) {
  const Philox4x32 r =
      Philox4x32::generate(static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u,
                           static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
  return static_cast<float>(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

/// Standard normal float for stream `key` and element `index` (Box-Muller on one block).
KOKKOS_INLINE_FUNCTION float normal01(std::uint64_t key, std::uint64_t index) {
  const Philox4x32 r =
      Philox4x32::generate(static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 1u, 0u,
                           static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
  const float u1 = (static_cast<float>(r.v[0] >> 8) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  const float u2 = static_cast<float>(r.v[1] >> 8) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

/// The stream key of a named tensor under a seed: every rank derives the same key.
std::uint64_t stream_key(std::uint64_t seed, const std::string& name) noexcept;

}  // namespace tessera
