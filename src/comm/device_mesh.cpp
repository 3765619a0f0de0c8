#include <tessera/comm/device_mesh.hpp>

namespace tessera::comm {

DeviceMesh::DeviceMesh(Communicator& world, int dp, int tp, int pp) : world_(world), dp_(dp), tp_(tp), pp_(pp) {
  if (dp < 1 || tp < 1 || pp < 1)
    throw ConfigError("DeviceMesh: dp, tp and pp must each be >= 1 (got dp=" + std::to_string(dp) +
                      ", tp=" + std::to_string(tp) + ", pp=" + std::to_string(pp) + ")");
  if (static_cast<long long>(dp) * tp * pp != world.size())
    throw ConfigError("DeviceMesh: dp*tp*pp = " + std::to_string(dp) + "*" + std::to_string(tp) + "*" +
                      std::to_string(pp) + " = " + std::to_string(static_cast<long long>(dp) * tp * pp) +
                      " does not match the " + std::to_string(world.size()) + " ranks; choose sizes whose product is " +
                      std::to_string(world.size()));
  const int r = world.rank();
  coords_.tp = r % tp;
  coords_.dp = (r / tp) % dp;
  coords_.pp = r / (tp * dp);
  const std::string& base = world.name();
  // Every rank joins all three splits (collective), each group keyed by its own index.
  tp_comm_ = world.split(coords_.dp + dp * coords_.pp, coords_.tp, base + ".tp");
  dp_comm_ = world.split(coords_.tp + tp * coords_.pp, coords_.dp, base + ".dp");
  pp_comm_ = world.split(coords_.tp + tp * coords_.dp, coords_.pp, base + ".pp");
}

}  // namespace tessera::comm
