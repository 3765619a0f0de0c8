#pragma once
/// \file
/// Everything public in Tessera, in one include.

#include <tessera/comm/communicator.hpp>
#include <tessera/comm/device_mesh.hpp>
#include <tessera/comm/types.hpp>
#include <tessera/comm/work.hpp>
#include <tessera/config.hpp>
#include <tessera/core/build_info.hpp>
#include <tessera/core/dtype.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/files.hpp>
#include <tessera/core/host_threads.hpp>
#include <tessera/core/memory.hpp>
#include <tessera/core/session.hpp>
