# Sourced by the scripts: where to build, how to launch MPI jobs on this machine.
TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${TESSERA_BUILD_DIR:-$TESSERA_ROOT/build}"
JOBS="${TESSERA_JOBS:-$(nproc)}"
# Open MPI refuses to run as root unless told; containers and CI often are root.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# More ranks than cores (e.g. 4 ranks on a 2-core laptop) needs --oversubscribe in Open MPI.
MPIEXEC_FLAGS=()
if mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
  MPIEXEC_FLAGS+=(--oversubscribe)
fi

# CMake options every script passes: warnings are errors where the environment asks for it
# (CI exports TESSERA_WARNINGS_AS_ERRORS=ON; a user's build is not stopped by a new warning).
CMAKE_OPTIONS=()
if [ -n "${TESSERA_WARNINGS_AS_ERRORS:-}" ]; then
  CMAKE_OPTIONS+=(-DTESSERA_WARNINGS_AS_ERRORS="$TESSERA_WARNINGS_AS_ERRORS")
fi

configure() {
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  # Optimized, with line tables only (-g1): debuggers' backtraces and profilers still name the
  # file and line. CMake's RelWithDebInfo (-O2 -g) made the build 1.3x slower on 2 cores
  # (tessera-train's main.cpp: 41 s against 31 s); configure by hand for full debug info.
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S "$TESSERA_ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" ${CMAKE_OPTIONS[@]+"${CMAKE_OPTIONS[@]}"} "$@"
  fi
}
