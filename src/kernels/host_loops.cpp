#include "kernels/host_loops.hpp"

#include <cctype>
#include <cstdlib>
#include <string>

#include <tessera/core/error.hpp>
#include <tessera/core/memory.hpp>

#include "core/log.hpp"

namespace tessera::kernels {

extern const HostLoops k_baseline_loops;
#if TESSERA_HOST_X86_ISAS
extern const HostLoops k_avx2_loops;
extern const HostLoops k_avx512_loops;
#endif

std::vector<const HostLoops*> host_loops_available() {
  std::vector<const HostLoops*> out{&k_baseline_loops};
#if TESSERA_HOST_X86_ISAS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) out.push_back(&k_avx2_loops);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw"))
    out.push_back(&k_avx512_loops);
#endif
  return out;
}

const HostLoops& host_loops_named(const char* isa) {
  std::string names;
  std::string lower = isa;  // "AVX2" as "avx2", as the flags take their words in any case
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const HostLoops* l : host_loops_available()) {
    if (std::string(l->isa) == lower) return *l;
    names += std::string(names.empty() ? "" : ", ") + l->isa;
  }
  // A GPU build has the baseline loops alone, and runs its elementwise kernels on the GPU: a
  // site's TESSERA_HOST_ISA for its CPU builds is said to have no effect, not an error.
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device)
    if (lower == "avx2" || lower == "avx512") return k_baseline_loops;
  throw ConfigError(std::string("TESSERA_HOST_ISA='") + isa +
                    "' is not an instruction set this build and CPU run; use " + names);
}

const HostLoops& host_loops() {
  static const HostLoops& chosen = []() -> const HostLoops& {
    const char* isa = std::getenv("TESSERA_HOST_ISA");
    const bool named = isa != nullptr && *isa != '\0';
    const HostLoops& loops = named ? host_loops_named(isa) : *host_loops_available().back();
    tessera::detail::logger().debug("elementwise host loops: {}{}", loops.isa,
                                    named ? " (TESSERA_HOST_ISA)" : " (the widest this CPU runs)");
    return loops;
  }();
  return chosen;
}

void check_host_isa_setting(bool note_unused) {
  const char* isa = std::getenv("TESSERA_HOST_ISA");
  if (isa == nullptr || *isa == '\0') return;
  host_loops();  // throws ConfigError for a name this build or CPU does not run (a GPU build: one no build has)
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    if (note_unused)
      tessera::detail::logger().warn(
          "TESSERA_HOST_ISA='{}' has no effect in this build: its elementwise kernels run on the GPU", isa);
  }
}

}  // namespace tessera::kernels
