#!/bin/bash
# test_readme.sh BUILD_DIR SOURCE_DIR
#
# README.md's commands run exactly as written: the commands are installed as
# scripts/install_local.sh installs them (cmake --install into .local/ of a
# folder), the README's set-up line (<!-- test_readme: setup -->) is run
# there, then every line of the block between <!-- test_readme: begin -->
# and <!-- test_readme: end --> in that folder, each by bash with stdin from
# /dev/null and a time budget, and each must exit 0. The folder holds the
# README's relative paths (assets/, README.md and LICENSE from the source tree), so the block is
# what a user types in the checkout. A README edit that breaks a command, or
# a command that no longer works, fails here.
set -u
BUILD=$1 SRC=$2
README=$SRC/README.md
fail() { echo "FAIL (readme): $*" >&2; exit 1; }
[ -f "$SRC/assets/qwen3-tokenizer/tokenizer.json" ] || { echo "SKIP: no assets/qwen3-tokenizer"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: the README's qrun commands need root (BPF)"; exit 77; }
W=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$W"' EXIT
cmake --install "$BUILD" --prefix "$W/.local" >"$W/install.log" 2>&1 || fail "cmake --install: $(tail -3 "$W/install.log")"
ln -s "$SRC/assets" "$W/assets"
ln -s "$README" "$W/README.md"
ln -s "$SRC/LICENSE" "$W/LICENSE"
ln -s "$SRC/examples" "$W/examples"
# a sanitized libqpack leaves the sanitizers' runtime to the program: the
# README's `cc` gets the same compiler and flags
cc_def=
[ "${QP_SANITIZE:-0}" = 1 ] && cc_def="cc() { ${CC:-clang} -fsanitize=address,undefined \"\$@\"; }; "

# the indented lines after a marker, up to the first line that is not one
setup=$(awk '/<!-- test_readme: setup -->/ {on = 1; next} on && /^    / {sub(/^    /, ""); print; next} on {exit}' "$README")
block=$(awk '/<!-- test_readme: begin -->/ {on = 1; next} /<!-- test_readme: end -->/ {on = 0; next}
             on && /^    / {sub(/^    /, ""); print}' "$README")
[ "$(printf '%s\n' "$setup" | grep -c .)" = 1 ] || fail "expected one set-up line in README.md, got: $setup"
[ "$(printf '%s\n' "$block" | grep -c .)" -ge 10 ] || fail "the README's command block is missing or short: $block"
case $setup in *PATH*) ;; *) fail "the set-up line does not set PATH: $setup" ;; esac
# the stand-in model never ends a turn: a chat line without -n would run
# its reply to qrun's budget and look hung in a walkthrough
while IFS= read -r line; do
    case " $line " in
    *" qrun "*" --chat "*) case " $line " in *" -n "[0-9]*) ;; *) fail "a chat line without -n: $line" ;; esac ;;
    esac
done <<<"$block"

cd "$W" || fail "cd"
# nothing of the caller's PATH may hide a missing installation: only the system's
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
command -v qpack >/dev/null && fail "qpack is on PATH before the set-up line"
eval "$setup" || fail "set-up line: $setup"
for tool in qpack qrun qeval qp-gen-checkpoint; do
    [ "$(command -v $tool)" = "$W/.local/bin/$tool" ] || fail "after '$setup', $tool is $(command -v $tool)"
done

n=0
while IFS= read -r line; do
    [ -n "$line" ] || continue
    n=$((n + 1))
    timeout 120 bash -c "${cc_def}set -o pipefail; $line" </dev/null >"$W/out.$n" 2>"$W/err.$n"
    rc=$?
    [ "$rc" = 0 ] || fail "exit $rc: $line: $(tail -3 "$W/err.$n")"
    echo "ok: $line"
done <<<"$block"
# what the block says it makes
for f in Qwen3-0.6B/config.json model.qpk model-int8.qpk model-int4.qpk generate; do
    [ -s "$f" ] || fail "the README's commands made no $f"
done
# what they make in a clone is ignored by git there (the walkthrough leaves
# the checkout clean)
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    for f in Qwen3-0.6B/config.json model.qpk model-int4.qpk generate; do
        git -C "$SRC" check-ignore -q "$f" || fail "the README's commands leave $f untracked in a clone (.gitignore)"
    done
fi
echo "ok: $n README commands ran as written"
