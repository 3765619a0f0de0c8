#include <tessera/core/rng.hpp>

#include "core/fnv1a.hpp"

namespace tessera {

std::uint64_t stream_key(std::uint64_t seed, const std::string& name) noexcept {
  const std::uint64_t h = detail::fnv1a(name);
  // Mix in the seed with a splitmix64 finaliser, so nearby seeds give unrelated keys.
  std::uint64_t z = h ^ (seed + 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace tessera
