#pragma once
// Internal: access to the Gloo context behind a Gloo communicator (for the benchmark's
// raw-library baseline).

#include <memory>

#include <gloo/context.h>

#include <tessera/comm/communicator.hpp>

namespace tessera::comm::detail {
/// The gloo::Context of a communicator created with Backend::Gloo; throws otherwise.
std::shared_ptr<gloo::Context> gloo_context(Communicator& comm);
}  // namespace tessera::comm::detail
