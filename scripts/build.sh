#!/bin/sh
# build.sh [BUILD_DIR] [cmake args...] - installs what is missing, then
# configures and builds qpack into BUILD_DIR (default: build). A line per
# stage on stderr (the first build takes a minute or more); cmake's output
# goes to BUILD_DIR/build.log, whose end is shown when a stage fails.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
start=$(date +%s)
step() { echo "build.sh: $*" >&2; }
. "$root/scripts/run_lib.sh"

step "1/3 the Debian packages and the tokenizer qpack needs (apt-get only for what is missing)"
"$root/scripts/install_deps.sh"
mkdir -p "$build"
log=$build/build.log
: >"$log"
step "2/3 configuring with cmake in $build"
run configuring cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
step "3/3 compiling on $(nproc) cores (about a minute the first time; the log: $log)"
run compiling cmake --build "$build" -j "$(nproc)"
step "built in $(($(date +%s) - start)) s"
