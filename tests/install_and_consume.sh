#!/usr/bin/env bash
# install_and_consume.sh BUILD_DIR SOURCE_DIR [CMAKE_ARGS...]: installs the build into a
# fresh prefix, then configures, builds and runs tests/consumer against it with
# find_package(Tessera), and with it the first C++ example of README.md and of
# docs/communication.md exactly as they are written there, alone and, when MPIEXEC is set
# (the launcher up to its rank count, e.g. "mpiexec -n"), on 2 ranks. CMAKE_ARGS locate
# dependencies outside the system paths.
set -euo pipefail
build="$1"
src="$2"
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
mkdir "$work/examples"
first_cpp_block() { awk '/^```cpp$/ { inside = 1; next } inside && /^```$/ { exit } inside' "$1"; }
first_cpp_block "$src/README.md" > "$work/examples/readme_example.cpp"
first_cpp_block "$src/docs/communication.md" > "$work/examples/communication_example.cpp"
for e in readme_example communication_example; do
  test -s "$work/examples/$e.cpp" || { echo "no C++ example found for $e"; exit 1; }
done
cmake -S "$src/tests/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  "-DTESSERA_DOC_EXAMPLES=$work/examples/readme_example.cpp;$work/examples/communication_example.cpp" "$@" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
if [ -n "${MPIEXEC:-}" ]; then $MPIEXEC 2 "$work/build/consumer"; fi
for e in readme_example communication_example; do
  "$work/build/$e"
  if [ -n "${MPIEXEC:-}" ]; then $MPIEXEC 2 "$work/build/$e"; fi
  echo "$e: ran"
done
test -f "$work/prefix/include/tessera/comm/communicator.hpp"
test ! -e "$work/prefix/include/tessera/../comm"  # internal headers stay out
echo "installed package OK"
