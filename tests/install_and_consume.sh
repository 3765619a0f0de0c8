#!/usr/bin/env bash
# install_and_consume.sh BUILD_DIR SOURCE_DIR [CMAKE_ARGS...]: installs the build into a
# fresh prefix, then configures, builds and runs tests/consumer against it with
# find_package(Tessera). CMAKE_ARGS locate dependencies outside the system paths.
set -euo pipefail
build="$1"
src="$2"
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src/tests/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" "$@" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
test -f "$work/prefix/include/tessera/comm/communicator.hpp"
test ! -e "$work/prefix/include/tessera/../comm"  # internal headers stay out
echo "installed package OK"
