#!/bin/sh
# build_deb.sh [OUT_DIR] - builds the Debian package qpack_VERSION_ARCH.deb
# from this tree into OUT_DIR (default: build/) and prints its path. CPack's
# DEB generator makes it from the CMake install rules (packaging/CMakeLists.txt:
# the commands, libqpack, qpack.h, qpack.pc, man pages made by help2man,
# the systemd units, the documents), in its own build folder, build-deb/
# (prefix /usr, QP_PACKAGE=ON), beside build/ of scripts/build.sh.
# scripts/check_deb.sh installs, runs and purges it in a clean Debian 12.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build}
build=$root/build-deb
step() { echo "build_deb.sh: $*" >&2; }
. "$root/scripts/run_lib.sh"

"$root/scripts/install_deps.sh"
# help2man for the man pages; dpkg-dev (dpkg-shlibdeps) and file for the
# dependencies CPack derives
missing=""
for p in help2man dpkg-dev file; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    step "installing:$missing"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

mkdir -p "$build" "$out"
log=$build/build_deb.log
: >"$log"
# the man pages' date: the commit's, so that a rebuild gives the same pages
SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH
step "configuring $build (prefix /usr, QP_PACKAGE=ON)"
run configuring cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
    -DQP_PACKAGE=ON -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON
step "compiling what the package holds on $(nproc) cores (the log: $log)"
run compiling cmake --build "$build" -j "$(nproc)" --target qp_package_files
step "packing with cpack -G DEB"
rm -f "$build"/qpack_*.deb
run packing sh -c "cd '$build' && cpack -G DEB"
deb=$(ls "$build"/qpack_*.deb)
cp "$deb" "$out/"
echo "$out/$(basename "$deb")"
