#pragma once
/// \file
/// Model parameters in HDF5: one float32 dataset /model/<name> per parameter, in its global
/// shape. The checkpoint milestone extends this layout with optimizer and sampler state.

#include <string>

#include <tessera/comm/communicator.hpp>
#include <tessera/nn/parameter.hpp>

namespace tessera::checkpoint {

/// Writes every parameter of `store` to `path` (collective over `comm`; rank 0 writes, after
/// gathering the ranks' shards where values are sharded, as in ZeRO stage 3). The file
/// appears complete or not at all: it is written beside `path` and renamed into place (when
/// `path` is a symbolic link, beside the file it leads to, and the link stays).
/// Throws CheckpointError for a store that holds tensor-parallel blocks.
void save_model(const std::string& path, const nn::ParameterStore& store, comm::Communicator& comm);

/// Reads /model/<name> into every parameter of `store` (each rank reads, and keeps what its
/// store keeps: the whole model, or its owned part when values are sharded). Throws
/// CheckpointError naming the file and parameter, with the model as it was, when one is
/// missing, has another shape or type, is no dataset, or is compressed with a filter this
/// HDF5 lacks, and, as save_model, for a store that holds tensor-parallel blocks. A tensor
/// that fails to read or holds NaN or an infinity is refused as it is read, and the message
/// says how many tensors before it were loaded.
void load_model(const std::string& path, nn::ParameterStore& store);

/// The same on every rank of `comm` together (collective): where some ranks cannot load the
/// file (a copy on node-local disk missing on one node), every rank throws a CheckpointError
/// naming the first that could not, rather than those that could going on to wait for it in
/// their next collective.
void load_model(const std::string& path, nn::ParameterStore& store, comm::Communicator& comm);

}  // namespace tessera::checkpoint
