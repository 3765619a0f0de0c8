#pragma once
/// \file
/// tessera::comm::DeviceMesh: named data-, tensor- and pipeline-parallel groups.

#include <memory>

#include <tessera/comm/communicator.hpp>

namespace tessera::comm {

/// This rank's coordinates on a dp x tp x pp mesh.
struct MeshCoords {
  int dp = 0;
  int tp = 0;
  int pp = 0;
};

/// Splits a communicator of dp*tp*pp ranks into the three families of groups that
/// parallel strategies need. Ranks are laid out with tp varying fastest (consecutive
/// ranks, i.e. one node, share a tp group), then dp, then pp:
/// `rank = tp_index + tp * (dp_index + dp * pp_index)`.
class DeviceMesh {
 public:
  /// Collective over `world`. Throws ConfigError when a size is < 1 or dp*tp*pp differs
  /// from world.size().
  DeviceMesh(Communicator& world, int dp, int tp, int pp);

  int dp_size() const noexcept { return dp_; }
  int tp_size() const noexcept { return tp_; }
  int pp_size() const noexcept { return pp_; }
  const MeshCoords& coords() const noexcept { return coords_; }
  /// The mesh rank with the given coordinates.
  int rank_of(const MeshCoords& c) const noexcept { return c.tp + tp_ * (c.dp + dp_ * c.pp); }

  /// Ranks sharing this rank's (tp, pp) coordinates, ordered by dp index.
  Communicator& dp() noexcept { return *dp_comm_; }
  /// Ranks sharing this rank's (dp, pp) coordinates, ordered by tp index.
  Communicator& tp() noexcept { return *tp_comm_; }
  /// Ranks sharing this rank's (dp, tp) coordinates, ordered by pp index.
  Communicator& pp() noexcept { return *pp_comm_; }
  Communicator& world() noexcept { return world_; }

 private:
  Communicator& world_;
  int dp_, tp_, pp_;
  MeshCoords coords_;
  std::unique_ptr<Communicator> dp_comm_, tp_comm_, pp_comm_;
};

}  // namespace tessera::comm
