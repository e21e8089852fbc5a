#!/bin/sh
# install_local.sh [BUILD_DIR] - installs the commands built in BUILD_DIR
# (default: build) into .local/ of this folder, and prints the one line that
# puts them on PATH (README.md's set-up). demo.sh and test.sh run it.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cmake --install "$build" --prefix "$root/.local" >/dev/null
echo "qpack, qrun, qeval and qp-gen-checkpoint are in $root/.local/bin; to run them by name:"
echo "    export PATH=\"$root/.local/bin:\$PATH\""
