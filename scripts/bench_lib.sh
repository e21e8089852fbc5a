# bench_lib.sh - what the benchmark scripts share, sourced first thing:
#
#   . "$(dirname "$0")/bench_lib.sh"
#                          root (the source tree), build (the script's first
#                          argument, BUILD_DIR, default build/)
#   bench_checkpoint DIR ARGS...
#                          qp-gen-checkpoint DIR ARGS... unless DIR holds one
#   bench_06b KIND         the real-shape Qwen3-0.6B random checkpoint, plain
#                          or stress (seed 1), made once in $work
#                          (QP_BENCH_DIR, default /tmp/qp-bench); prints its
#                          folder
#
# and what a benchmark prints is also its table in docs/BENCHMARKS.md,
# replaced by each run:
#
#   bench_record NAME      from here on standard output is also kept
#   ... the benchmark prints its table ...
#   bench_recorded         the kept output replaces section NAME of
#                          docs/BENCHMARKS.md, stamped with the date, the
#                          machine, the load average at the start and the
#                          commit; a run that fails before this changes
#                          nothing
#
# QP_RECORD=0 leaves docs/BENCHMARKS.md alone (a quick look, a run with
# other settings than the table's).

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}

work=${QP_BENCH_DIR:-/tmp/qp-bench}

bench_checkpoint() {
    [ -f "$1/config.json" ] || "$build/bin/qp-gen-checkpoint" "$@" >/dev/null
}

bench_06b() {
    mkdir -p "$work"
    if [ "$1" = stress ]; then
        bench_checkpoint "$work/0.6b-$1" --preset 0.6b --seed 1 --stress
    else
        bench_checkpoint "$work/0.6b-$1" --preset 0.6b --seed 1
    fi
    echo "$work/0.6b-$1"
}

bench_record() {
    _bench_name=$1
    [ "${QP_RECORD:-1}" = 1 ] || return 0
    _bench_root=$root
    _bench_dir=$(mktemp -d)
    _bench_load=$(cut -d' ' -f1-3 /proc/loadavg)
    _bench_args=$*
    mkfifo "$_bench_dir/fifo"
    tee "$_bench_dir/out" <"$_bench_dir/fifo" &
    _bench_tee=$!
    exec 3>&1 >"$_bench_dir/fifo"
}

bench_recorded() {
    [ "${QP_RECORD:-1}" = 1 ] || return 0
    exec 1>&3 3>&-
    wait "$_bench_tee"
    doc=$_bench_root/docs/BENCHMARKS.md
    commit=$(git -C "$_bench_root" rev-parse --short HEAD 2>/dev/null || echo unknown)
    dirty=$(git -C "$_bench_root" status --porcelain --untracked-files=no 2>/dev/null | head -1)
    [ -n "$dirty" ] && commit="$commit (with uncommitted changes)"
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
    {
        echo "<!-- bench: $_bench_name -->"
        echo "\`scripts/$_bench_name.sh\`, run $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($cpu),"
        echo "$(uname -sr), load average $_bench_load at the start, commit $commit."
        echo
        echo '```text'
        cat "$_bench_dir/out"
        echo '```'
        echo "<!-- /bench: $_bench_name -->"
    } >"$_bench_dir/section"
    if grep -q "^<!-- bench: $_bench_name -->" "$doc" 2>/dev/null; then
        awk -v name="$_bench_name" -v file="$_bench_dir/section" '
            $0 == "<!-- bench: " name " -->" { while ((getline l < file) > 0) print l; skip = 1; next }
            $0 == "<!-- /bench: " name " -->" { skip = 0; next }
            !skip' "$doc" >"$_bench_dir/doc"
    else
        { cat "$doc" 2>/dev/null; echo; echo "## scripts/$_bench_name.sh"; echo; cat "$_bench_dir/section"; } >"$_bench_dir/doc"
    fi
    cp "$_bench_dir/doc" "$doc"
    rm -rf "$_bench_dir"
    echo "(recorded in docs/BENCHMARKS.md)" >&2
}
