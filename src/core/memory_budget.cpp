#include <tessera/core/memory.hpp>
#include <tessera/core/session.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/device_copy.hpp"

namespace tessera {
namespace {
/// A number of bytes read from a file holding one, or -1 ("max", missing, unreadable).
double read_bytes(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stod(text);
  } catch (...) {
    return -1;
  }
}

/// MemAvailable of /proc/meminfo in bytes, or -1.
double mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

std::string gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}
}  // namespace

MemoryBudget memory_budget() {
  const int ranks = std::max(1, Session::current().local_size());
  MemoryBudget budget;
  if (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    const auto [free, devices] = detail::device_free_bytes();
    if (free <= 0 || devices <= 0) return budget;
    // The ranks that use this GPU (by PCI bus id); else as if the node's ranks were spread
    // evenly over the GPUs this rank sees.
    const int on_gpu = Session::current().ranks_on_gpu();
    const int sharing = on_gpu > 0 ? on_gpu : std::max(1, (ranks + devices - 1) / devices);
    budget.bytes = free / sharing;
    budget.source =
        gb(free) + " free on its GPU, shared by " + std::to_string(sharing) + (sharing == 1 ? " rank" : " ranks");
    return budget;
  }
  return host_memory_budget();
}

MemoryBudget host_memory_budget() {
  const int ranks = std::max(1, Session::current().local_size());
  MemoryBudget budget;
  double node = mem_available();
  std::string source = "available on this node";
  // A cgroup limit (v2, then v1) leaves its limit less its use.
  for (auto [limit_path, usage_path] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const double limit = read_bytes(limit_path), used = read_bytes(usage_path);
    if (limit > 0 && used >= 0 && limit < 1e18 && (node < 0 || limit - used < node)) {
      node = limit - used;
      source = "left under this job's memory limit (cgroup)";
    }
  }
  if (node <= 0) return budget;
  budget.bytes = node / ranks;
  budget.source = gb(node) + " " + source + ", shared by " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
  return budget;
}

}  // namespace tessera
