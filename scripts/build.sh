#!/bin/sh
# build.sh [BUILD_DIR] [cmake args...] - installs what is missing, then
# configures and builds qpack into BUILD_DIR (default: build).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
"$root/scripts/install_deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
