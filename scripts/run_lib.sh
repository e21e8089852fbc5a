# shellcheck shell=sh disable=SC2154
# run_lib.sh - sourced by build.sh and build_deb.sh.
# run STAGE COMMAND...: COMMAND's output appended to $log; on failure, the
# caller's step() says so with the log's end, and the script exits 1.
run() {
    stage=$1
    shift
    if ! "$@" >>"$log" 2>&1; then
        step "$stage failed; the end of $log:"
        tail -n 25 "$log" >&2
        exit 1
    fi
}
