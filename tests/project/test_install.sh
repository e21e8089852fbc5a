#!/bin/bash
# test_install.sh BUILD_DIR SOURCE_DIR TOKENIZER_DIR
#
# `cmake --install` into a fresh prefix gives what a user needs: the four
# commands in PREFIX/bin, and libqpack (shared and static), qpack.h and
# qpack.pc, with which examples/generate.c builds through pkg-config and
# prints the same text as the installed qrun --temp 0. Generation runs on the emu
# backend (no privilege needed).
set -u
BUILD=$1 SRC=$2 TOKDIR=$3
fail() { echo "FAIL (install): $*" >&2; exit 1; }
# a sanitized libqpack leaves the sanitizers' runtime to the program
CC=${CC:-cc} SAN=
[ "${QP_SANITIZE:-0}" = 1 ] && SAN="-fsanitize=address,undefined"
[ -f "$TOKDIR/tokenizer.json" ] || { echo "SKIP: no tokenizer"; exit 77; }
P=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$P"' EXIT
cmake --install "$BUILD" --prefix "$P/usr" >"$P/install.log" 2>&1 || fail "cmake --install: $(tail -3 "$P/install.log")"
for tool in qpack qrun qeval qp-gen-checkpoint; do
    [ -x "$P/usr/bin/$tool" ] || fail "no $P/usr/bin/$tool"
    "$P/usr/bin/$tool" --version | grep -q "^$tool [0-9]" || fail "$tool --version"
done
[ -f "$P/usr/include/qpack.h" ] || fail "no qpack.h"
pc=$(find "$P/usr" -name qpack.pc) && [ -n "$pc" ] || fail "no qpack.pc"
lib=$(dirname "$(dirname "$pc")")
[ -f "$lib/libqpack.a" ] && [ -e "$lib/libqpack.so" ] || fail "no libqpack.a/.so in $lib"
exported=$(nm -D --defined-only "$lib/libqpack.so" | awk '$2 == "T" {print $3}' | grep -vc '^qpack_')
[ "$exported" = 0 ] || fail "libqpack.so exports $exported functions outside qpack_*"

export PATH="$P/usr/bin:$PATH" PKG_CONFIG_PATH="$lib/pkgconfig"
cd "$P" || fail "cd"
qp-gen-checkpoint ck --preset tiny --vocab 151936 --seed 2 --tokenizer-dir "$TOKDIR" >/dev/null || fail "gen"
qpack pack ck -o m.qpk --quiet || fail "pack"
want=$(qrun -m m.qpk --backend emu -p "Hello, world!" -n 12 --temp 0) || fail "qrun"

# shellcheck disable=SC2046
$CC -Wall -Werror $SAN "$SRC/examples/generate.c" $(pkg-config --cflags --libs qpack) -o gen_shared ||
    fail "building generate.c against libqpack.so through pkg-config"
got=$(LD_LIBRARY_PATH="$lib" ./gen_shared m.qpk "Hello, world!" 12 emu) || fail "gen_shared failed"
[ "$got" = "$want" ] || fail "shared: '$got', qrun: '$want'"
# shellcheck disable=SC2046
$CC -Wall -Werror $SAN "$SRC/examples/generate.c" $(pkg-config --cflags qpack) "$lib/libqpack.a" \
    $(pkg-config --static --libs qpack | sed 's/-lqpack//') -o gen_static || fail "building against libqpack.a"
ldd gen_static | grep -q libqpack && fail "gen_static still needs libqpack.so"
got=$(./gen_static m.qpk "Hello, world!" 12 emu) || fail "gen_static failed"
[ "$got" = "$want" ] || fail "static: '$got', qrun: '$want'"
echo "ok: installed tools, libqpack.so and .a through pkg-config: '$got'"
