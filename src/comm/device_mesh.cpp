#include <tessera/comm/device_mesh.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::comm {

DeviceMesh::DeviceMesh(Communicator& world, int dp, int tp, int pp) : world_(world), dp_(dp), tp_(tp), pp_(pp) {
  // The ranks compare the layouts they ask for first, so that all of them refuse what any
  // of them would: ranks that built different meshes formed groups of other sizes than
  // dp_size(), tp_size() and pp_size() say, in silence, and one that refused alone left the
  // others waiting in the splits below for the timeout.
  const std::int64_t mine[3] = {dp, tp, pp};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(world.size()));
  world.all_gather({mine, 3}, {all.data(), all.size()});
  const auto layout = [&](int r) {
    const auto* l = all.data() + 3 * static_cast<std::size_t>(r);
    return "dp=" + std::to_string(l[0]) + " x tp=" + std::to_string(l[1]) + " x pp=" + std::to_string(l[2]);
  };
  for (int r = 1; r < world.size(); ++r)
    if (layout(r) != layout(0))
      throw ConfigError("DeviceMesh on communicator '" + world.name() + "': rank " + std::to_string(r) + " asked for " +
                        layout(r) + " where rank 0 asked for " + layout(0) + "; every rank must build the same mesh");
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
