#!/bin/bash
# test_build_script.sh SOURCE_DIR - scripts/build.sh says what it does, a
# line per stage, and a stage that fails shows the end of its output. Run
# on a copy of the script beside a stub install_deps.sh, with a stub cmake
# first on PATH (no real build: the stages' words and the log are tested).
set -u
SRC=$1
fail() { echo "FAIL (build script): $*" >&2; exit 1; }
W=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/root/scripts" "$W/bin"
cp "$SRC/scripts/build.sh" "$SRC/scripts/run_lib.sh" "$W/root/scripts/" || fail "copying build.sh"
printf '#!/bin/sh\necho "deps: all there"\n' >"$W/root/scripts/install_deps.sh"
# the stub cmake: its words on stdout, and "CMake Error" when STUB_FAIL
# names its first argument
cat >"$W/bin/cmake" <<'STUB'
#!/bin/sh
echo "cmake $*"
[ "${STUB_FAIL:-}" = "$1" ] && { echo "CMake Error: the stub fails at $1" >&2; exit 1; }
exit 0
STUB
chmod +x "$W/root/scripts/"*.sh "$W/bin/cmake"
export PATH="$W/bin:$PATH"

"$W/root/scripts/build.sh" "$W/b" >"$W/ok.out" 2>"$W/ok.err" || fail "exit $?: $(cat "$W/ok.err")"
grep -o '^build.sh: [^ ]*' "$W/ok.err" | tr '\n' ' ' >"$W/stages"
[ "$(cat "$W/stages")" = "build.sh: 1/3 build.sh: 2/3 build.sh: 3/3 build.sh: built " ] ||
    fail "the stages: $(cat "$W/ok.err")"
grep -q "^cmake --build $W/b -j" "$W/b/build.log" && grep -q "^cmake -S $W/root -B $W/b" "$W/b/build.log" ||
    fail "cmake's output is not in the log: $(cat "$W/b/build.log")"
! grep -q "^cmake " "$W/ok.out" "$W/ok.err" || fail "cmake's output on the terminal"
echo "ok: $(tr '\n' '|' <"$W/ok.err")"

for stage in -S --build; do
    STUB_FAIL=$stage "$W/root/scripts/build.sh" "$W/b" >"$W/bad.out" 2>"$W/bad.err" && fail "$stage: a failing cmake exited 0"
    grep -q "CMake Error: the stub fails at $stage" "$W/bad.err" || fail "$stage: the error is not shown: $(cat "$W/bad.err")"
    grep -q "^build.sh: .* failed; the end of $W/b/build.log:" "$W/bad.err" || fail "$stage: $(cat "$W/bad.err")"
    echo "ok: cmake $stage failing: $(grep failed "$W/bad.err")"
done
