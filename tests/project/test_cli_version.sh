#!/bin/bash
# test_cli_version.sh VERSION SOURCE_DIR QPACK QRUN QEVAL QP_GEN
#
# Every tool answers --version with one line "NAME VERSION (git COMMIT)":
# VERSION is CMake's project version, COMMIT `git describe --always --dirty`
# of the tree the build came from, a commit of SOURCE_DIR's history when it
# is a git checkout. From a tree without .git (a source tarball) the header
# generator writes "unknown", and it leaves an unchanged header untouched
# (no rebuild at the same commit).
set -u
VERSION=$1 SRC=$2 QPACK=$3 QRUN=$4 QEVAL=$5 QP_GEN=$6

fail() { echo "FAIL: $*" >&2; exit 1; }
W=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$W"' EXIT

# check NAME CMD...: CMD --version prints one well-formed line for NAME, exit 0, no stderr
check() {
    local name=$1 out
    shift
    "$@" --version >"$W/out" 2>"$W/err" || fail "$name --version: exit $?: $(cat "$W/err")"
    [ ! -s "$W/err" ] || fail "$name --version: stderr: $(cat "$W/err")"
    [ "$(wc -l <"$W/out")" = 1 ] || fail "$name --version: not one line: $(cat "$W/out")"
    out=$(cat "$W/out")
    [[ $out =~ ^$name\ ([0-9]+\.[0-9]+\.[0-9]+)\ \(git\ ([^\ \(\)]+)\)$ ]] ||
        fail "$name --version: '$out' is not '$name VERSION (git COMMIT)'"
    [ "${BASH_REMATCH[1]}" = "$VERSION" ] || fail "$name --version: version ${BASH_REMATCH[1]}, CMake says $VERSION"
    commit=${BASH_REMATCH[2]}
    echo "ok: $out"
}

check qpack "$QPACK"
check qrun "$QRUN"
check qeval "$QEVAL"
check qp-gen-checkpoint "$QP_GEN"
check qrun "$QRUN" tokenize
check qrun "$QRUN" detokenize

# the commit: one of the source tree's, or "unknown" when it has no history
if [ -e "$SRC/.git" ] && command -v git >/dev/null && git -C "$SRC" rev-parse HEAD >/dev/null 2>&1; then
    hash=${commit%-dirty}
    hash=${hash##*-g} # "v1.2-3-gabc1234" after a tag
    [[ $hash =~ ^[0-9a-f]{4,40}$ ]] && git -C "$SRC" cat-file -e "$hash^{commit}" 2>/dev/null ||
        fail "commit '$commit' is not a commit of $SRC"
    echo "ok: $commit is a commit of $SRC"
fi

# a source tree without .git: "unknown"; rerun with the same result: file untouched
mkdir "$W/tarball" && cmake -DSRC="$W/tarball" -DOUT="$W/h.h" -P "$SRC/cmake/git_version.cmake" ||
    fail "git_version.cmake failed"
grep -qx '#define QP_GIT_COMMIT "unknown"' "$W/h.h" || fail "outside a checkout: $(cat "$W/h.h")"
touch -d '2000-01-01' "$W/h.h"
cmake -DSRC="$W/tarball" -DOUT="$W/h.h" -P "$SRC/cmake/git_version.cmake" || fail "git_version.cmake failed"
[ "$(stat -c %Y "$W/h.h")" = "$(date -d '2000-01-01' +%s)" ] || fail "an unchanged header was rewritten"
echo "ok: outside a git checkout: unknown; an unchanged header is left alone"

# --version's line is output like any other: lost, it is an error
"$QPACK" --version >/dev/full 2>"$W/err" && fail "qpack --version >/dev/full: exit 0"
[ "$(cat "$W/err")" = "qpack: writing standard output: No space left on device" ] || fail "stderr: $(cat "$W/err")"
echo "ok: --version >/dev/full: $(cat "$W/err")"
