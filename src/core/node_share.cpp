#include "core/node_share.hpp"

#include <cstring>
#include <vector>

#include "core/mpi_check.hpp"

namespace tessera::detail {

NodeShare share_on_node(MPI_Comm group, const std::string& key) {
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_CHECK_MPI(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  NodeShare share;
  MPI_Comm_size(node, &share.on_node);
  // Keys of one length on every rank: the longest, padded with zeros.
  int length = static_cast<int>(key.size()) + 1;
  int rc = MPI_Allreduce(MPI_IN_PLACE, &length, 1, MPI_INT, MPI_MAX, node);
  std::vector<char> mine(static_cast<std::size_t>(length), '\0'), all;
  if (rc == MPI_SUCCESS) {
    std::memcpy(mine.data(), key.data(), key.size());
    all.resize(static_cast<std::size_t>(share.on_node) * mine.size());
    rc = MPI_Allgather(mine.data(), length, MPI_CHAR, all.data(), length, MPI_CHAR, node);
  }
  MPI_Comm_free(&node);
  TESSERA_CHECK_MPI(rc);
  share.same = 0;
  for (int r = 0; r < share.on_node; ++r)
    share.same += std::memcmp(all.data() + static_cast<std::size_t>(r) * mine.size(), mine.data(), mine.size()) == 0;
  return share;
}

}  // namespace tessera::detail
