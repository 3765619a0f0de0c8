#pragma once
// Internal: what the ranks of a group on one node have in common (the GPU they use).

#include <mpi.h>

#include <string>

namespace tessera::detail {

struct NodeShare {
  int same = 1;     ///< ranks of the group on this node that passed this rank's key, itself included
  int on_node = 1;  ///< ranks of the group on this node
};

/// Collective over `group`: compares `key` (e.g. a GPU's PCI bus id) with the keys of the
/// group's other ranks on this node.
NodeShare share_on_node(MPI_Comm group, const std::string& key);

}  // namespace tessera::detail
