#pragma once
// Internal: the check that replicated parameters hold the same values on every rank.

#include <deque>

#include <tessera/comm/communicator.hpp>
#include <tessera/nn/parameter.hpp>

namespace tessera::parallel {

/// Collective. Throws tessera::Error naming the first parameter whose value differs between
/// the ranks of `comm` (compared by a hash of its bits).
void verify_replicas(std::deque<nn::Parameter>& params, comm::Communicator& comm);

}  // namespace tessera::parallel
