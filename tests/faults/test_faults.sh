#!/bin/bash
# test_faults.sh CASE QRUN QPACK QP_GEN TOKENIZER_DIR WORK_DIR
#
# qpack and qrun under damage and stress, one CASE per ctest test
# (tests/faults/faults.cmake). Each case writes its own tiny random checkpoints into
# WORK_DIR (removed at the end). Cases that load BPF programs, mount or
# create cgroups need root: skipped (exit 77) without it. The corruption
# sweep is tests/faults/test_corruption.c.
#   kill_pack        SIGKILL during qpack pack: the destination is absent or the
#                    previous complete file, and nothing else is in its folder
#                    (the output is unnamed until complete: O_TMPFILE)
#   enospc           packing into a full file system: one line, nothing left;
#                    the same for qrun --dump-logits (no 0-byte file)
#   pack_signals     SIGINT/SIGTERM/SIGHUP during qpack pack: exit 128 + signal
#                    within 0.5 s, "qpack: interrupted", the destination's
#                    folder as it was; a SIGHUP ignored at start (nohup) stays
#                    ignored
#   outputs          qpack pack -o and qrun --dump-logits naming /dev/null, a
#                    FIFO, a folder, a symbolic link, an unwritable folder or
#                    one of their inputs: refused before any work, the target
#                    as it was
#   symlinks         symbolic links planted at the old predictable partial
#                    names (the next 2000 PIDs, and the pack's own PID) are
#                    never followed; no other name appears during the pack
#   input_fifos      FIFOs (and a device) as every input of qpack pack, qpack
#                    info/verify, qrun --backend ref, qrun tokenize and qeval:
#                    refused with one line, never waited on
#   pack_inputs      config.json/tokenizer_config.json with a key twice, a
#                    tokenizer.json that is JSON but not loadable: refused at
#                    pack time; no tokenizer.json: a one-line warning
#   signals          SIGINT/SIGTERM to qrun at start-up, in the prompt, in
#                    generation: 130/143, whole characters, no BPF program left
#   memory           a memory cgroup too small for --resident: one line naming
#                    --stream; --stream works in the same cgroup
#   truncate         the container truncated while a resident qrun generates
#   truncate_stream  the same in --stream mode (which reads the file: one
#                    line, never a signal), and during a resident start-up
#                    (reads of the mapped file: SIGBUS, an expected failure)
#   bad_input        newer container versions, directories and missing files
#   load             four qrun at once, and a 2000-token run with a flat RSS
set -u

CASE=$1 QRUN=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 W=$6
KERNELS='["embed","rmsnorm","quant_x","matvec_q24","matvec_i8","matvec_i8_block","matvec_i4","matvec_i4_block","matvec_i6","matvec_i6_block","rope_store","attention","attn_merge","swiglu","argmax_reduce"]'

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }
skip() { echo "SKIP ($CASE): $*"; exit 77; }
need_root() { [ "$(id -u)" = 0 ] || skip "needs root (BPF programs, mount, cgroups)"; }

rm -rf "$W" && mkdir -p "$W" || fail "cannot create $W"
cleanups=()
cleanup() {
    local c
    for c in "${cleanups[@]}"; do eval "$c"; done
    rm -rf "$W"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }

# gen NAME ARGS...: a random checkpoint in $W/NAME (preset tiny)
gen() {
    local name=$1
    shift
    "$QP_GEN" "$W/$name" --preset tiny "$@" >/dev/null || fail "qp-gen-checkpoint $name $* failed"
}

# pack NAME: $W/NAME -> $W/NAME.qpk
pack() { "$QPACK" pack "$W/$1" -o "$W/$1.qpk" --quiet || fail "qpack pack $1 failed"; }

# run NAME CMD ARGS...: stdout in $W/NAME.out, stderr in $W/NAME.err; sets rc
run() {
    local name=$1
    shift
    "$@" >"$W/$name.out" 2>"$W/$name.err"
    rc=$?
}

lines() { wc -l <"$1" | tr -d ' '; }
valid_utf8() { iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1; }

# one_line_error NAME [WORD]: exit 1..127, nothing on stdout, one line on
# stderr (containing WORD, case-insensitive, when given)
one_line_error() {
    local name=$1 word=${2:-}
    [ "$rc" != 0 ] || fail "$name: exit status 0, expected an error"
    [ "$rc" -lt 128 ] || fail "$name: killed by signal $((rc - 128)): $(cat "$W/$name.err")"
    [ ! -s "$W/$name.out" ] || fail "$name: unexpected stdout: $(head -c 200 "$W/$name.out")"
    [ "$(lines "$W/$name.err")" = 1 ] || fail "$name: expected one line on stderr, got: $(cat "$W/$name.err")"
    [ -z "$word" ] || grep -qi -- "$word" "$W/$name.err" || fail "$name: message lacks '$word': $(cat "$W/$name.err")"
    echo "ok $name (exit $rc): $(cat "$W/$name.err")"
}

# BPF program accounting, as in test_qrun_cli.sh's lifecycle case: a
# leftover is a program named like our kernels that no live process holds
# and that was not orphaned before this case started
kernel_ids() {
    bpftool prog list -j | jq -r --argjson k "$KERNELS" '.[] | select(.name as $n | $k | index($n)) | .id' | sort
}
held_ids() { cat /proc/[0-9]*/fdinfo/* 2>/dev/null | awk '/^prog_id:/ {print $2}' | sort -u; }
orphans() { comm -23 <(kernel_ids) <(held_ids); }
no_leftovers() {
    local i new
    for i in $(seq 50); do
        new=$(comm -13 <(echo "$base_orphans") <(orphans))
        [ -z "$new" ] && return 0
        sleep 0.1
    done
    fail "BPF programs left after $1: $(echo $new)"
}
prog_ids_of() { cat /proc/"$1"/fdinfo/* 2>/dev/null | awk '/^prog_id:/ {print $2}' | sort -n; }
gone() {
    local id i
    for id in "$@"; do
        for i in $(seq 50); do
            bpftool prog show id "$id" >/dev/null 2>&1 || continue 2
            sleep 0.1
        done
        fail "program $id is still loaded"
    done
}

# partials DIR NAME: the partial files of destination DIR/NAME
partials() { ls -A "$1" | grep -F ".$2.partial-" || true; }

# only DIR NAME...: DIR holds exactly the files NAME... (none when no NAME)
only() {
    local dir=$1
    shift
    local want have
    want=$(printf '%s\n' "$@" | grep . | sort)
    have=$(ls -A "$dir" | sort)
    [ "$have" = "$want" ] || fail "$dir holds [$(echo $have)], expected [$(echo $want)]"
}

# timed NAME CMD ARGS...: run with a 5 s timeout; sets rc and ms
timed() {
    local name=$1 t0
    shift
    t0=$(now_ms)
    timeout 5 "$@" >"$W/$name.out" 2>"$W/$name.err" </dev/null
    rc=$?
    ms=$(($(now_ms) - t0))
    [ "$rc" != 124 ] || fail "$name: still running after 5 s (blocked?)"
}

case "$CASE" in
kill_pack)
    # ~1 s to pack (157 MB); prev: a different, small complete container
    gen big --seed 1 --vocab 151936 --hidden 256
    gen small --seed 2
    pack small
    "$QPACK" pack "$W/big" -o "$W/ref.qpk" --quiet || fail "pack big failed"
    t0=$(now_ms)
    "$QPACK" pack "$W/big" -o "$W/ref.qpk" --quiet || fail "pack big failed"
    full=$(($(now_ms) - t0))
    echo "a normal pack takes $full ms"
    D=$W/dest
    mkdir -p "$D"
    for pct in 10 50 90; do
        delay=$(awk -v ms=$((full * pct / 100)) 'BEGIN { printf "%.3f", ms / 1000 }')
        for prev in absent previous; do
            rm -f "$D/OUT.qpk"
            [ $prev = previous ] && cp "$W/small.qpk" "$D/OUT.qpk"
            "$QPACK" pack "$W/big" -o "$D/OUT.qpk" --quiet 2>"$W/kill.err" &
            # (bash reports the kill on stderr: "Killed ...")
            pid=$!
            sleep "$delay"
            kill -KILL $pid 2>/dev/null
            wait $pid
            rc=$?
            what="kill at $pct% ($delay s), destination $prev"
            [ $rc = 137 ] || [ $rc = 0 ] || fail "$what: exit $rc: $(cat "$W/kill.err")"
            if [ -e "$D/OUT.qpk" ] && cmp -s "$D/OUT.qpk" "$W/ref.qpk"; then
                # the rename happened before the kill (or the pack finished):
                # the new complete file
                state=new
            elif [ $rc = 0 ]; then
                fail "$what: finished, but OUT.qpk differs from a normal pack"
            elif [ $prev = absent ]; then
                [ ! -e "$D/OUT.qpk" ] || fail "$what: OUT.qpk exists after the kill and is not the complete file"
                state=absent
            else
                cmp -s "$D/OUT.qpk" "$W/small.qpk" || fail "$what: OUT.qpk is neither the previous nor the new file"
                "$QPACK" verify "$D/OUT.qpk" >/dev/null || fail "$what: the previous file no longer verifies"
                state=previous
            fi
            # the file being written has no name until it is complete
            if [ $state = absent ]; then only "$D"; else only "$D" OUT.qpk; fi
            echo "ok $what: exit $rc, destination: $state file, nothing else in the folder"
        done
    done
    "$QPACK" pack "$W/big" -o "$D/OUT.qpk" --quiet || fail "the pack after the kills failed"
    cmp -s "$D/OUT.qpk" "$W/ref.qpk" || fail "the pack after the kills differs from a normal pack"
    only "$D" OUT.qpk
    echo "ok: no partial file left by any kill"
    ;;

enospc)
    need_root
    gen big --seed 1 --vocab 65536 # a 17 MB container, 4.3 MB in int8
    gen small --seed 2
    pack small
    D=$W/mnt
    mkdir -p "$D"
    mount -t tmpfs -o size=2m tmpfs "$D" 2>"$W/mount.err" || skip "cannot mount a tmpfs: $(cat "$W/mount.err")"
    cleanups+=("umount '$D'")
    # into an empty file system
    # the message names the file written and the errno text
    space_msg() {
        grep -qF "$D/OUT.qpk" "$W/$1.err" && grep -q "No space left on device" "$W/$1.err" ||
            fail "$1: the message does not name the destination in $D and the errno: $(cat "$W/$1.err")"
    }
    run empty "$QPACK" pack "$W/big" -o "$D/OUT.qpk"
    one_line_error empty "space"
    space_msg empty
    [ -z "$(ls -A "$D")" ] || fail "left in the file system: $(ls -A "$D")"
    # over a previous container that fits: it stays as it was
    cp "$W/small.qpk" "$D/OUT.qpk"
    run previous "$QPACK" pack "$W/big" -o "$D/OUT.qpk"
    one_line_error previous "space"
    space_msg previous
    cmp -s "$D/OUT.qpk" "$W/small.qpk" || fail "the previous OUT.qpk changed"
    [ "$(ls -A "$D")" = OUT.qpk ] || fail "left in the file system: $(ls -A "$D")"
    "$QPACK" verify "$D/OUT.qpk" >/dev/null || fail "the previous OUT.qpk no longer verifies"
    # int8 (a different writer path) the same way
    rm -f "$D/OUT.qpk"
    run int8 "$QPACK" pack "$W/big" -o "$D/OUT.qpk" --format int8 --quant rtn
    one_line_error int8 "space"
    space_msg int8
    [ -z "$(ls -A "$D")" ] || fail "int8: left in the file system: $(ls -A "$D")"
    # qrun --dump-logits into the full file system: no file, not even empty;
    # over a previous dump: the previous one as it was
    head -c 1000 /dev/urandom >"$W/prev.bin"
    dd if=/dev/zero of="$D/fill" bs=64k 2>/dev/null
    run dump "$QRUN" -m "$W/small.qpk" --ids "1 2 3" -n 1 --print-ids --backend emu --dump-logits "$D/logits.bin"
    one_line_error dump "space"
    grep -qF "$D/logits.bin" "$W/dump.err" || fail "dump: the message does not name logits.bin"
    only "$D" fill
    rm "$D/fill"
    cp "$W/prev.bin" "$D/logits.bin"
    dd if=/dev/zero of="$D/fill" bs=64k 2>/dev/null
    run dump_prev "$QRUN" -m "$W/small.qpk" --ids "1 2 3" -n 1 --print-ids --backend emu --dump-logits "$D/logits.bin"
    one_line_error dump_prev "space"
    cmp -s "$D/logits.bin" "$W/prev.bin" || fail "dump_prev: the previous logits.bin changed"
    only "$D" fill logits.bin
    ;;

signals)
    need_root
    command -v bpftool >/dev/null && command -v jq >/dev/null || skip "needs bpftool and jq"
    env --default-signal=INT true 2>/dev/null || skip "needs env --default-signal (coreutils 8.31)"
    [ -f "$TOKDIR/tokenizer.json" ] || skip "no $TOKDIR/tokenizer.json (scripts/fetch_tokenizer.sh)"
    # untied: varied tokens; the real tokenizer (qrun --tokenizer: a container
    # may not carry one with ids past its vocabulary) over a vocabulary of 512
    # (mostly byte tokens): text of partial characters the UTF-8 stream must
    # hold back
    gen m --seed 2 --untied --max-pos 4096
    pack m
    M=$W/m.qpk
    TOK=$TOKDIR/tokenizer.json
    long=$(for i in $(seq 3000); do printf '%d ' $((i * 7 % 500 + 1)); done)
    base_orphans=$(orphans)
    # launch NAME ARGS...: qrun in the background; sets pid. A background
    # job of a script ignores SIGINT: env restores the default disposition,
    # so a signal before qrun's handlers are installed ends it as the
    # default action does. Returns once the process runs qrun (exec done).
    launch() {
        local name=$1 i
        shift
        : >"$W/$name.out"
        env --default-signal=INT,TERM "$QRUN" "$@" </dev/null >"$W/$name.out" 2>"$W/$name.err" &
        pid=$!
        # by the clock: on a busy machine the exec can take a while, and a
        # signal that reaches env before it resets SIGINT is lost
        for i in $(seq 4000); do
            [ /proc/$pid/exe -ef "$QRUN" ] && return 0
            kill -0 $pid 2>/dev/null || return 0
            sleep 0.005
        done
        fail "$name: qrun did not start within 20 s"
    }
    # check NAME SIG PHASE: the exit of a signalled run
    check() {
        local name=$1 sig=$2 phase=$3 want
        want=$([ $sig = INT ] && echo 130 || echo 143)
        valid_utf8 "$W/$name.out" || fail "$name: stdout is not valid UTF-8"
        if [ "$rc" = "$want" ]; then
            # handled: "qrun: interrupted", or killed by the signal before the
            # handlers were installed (only at start-up): nothing printed
            [ ! -s "$W/$name.err" ] && [ "$phase" = start-up ] ||
                [ "$(cat "$W/$name.err")" = "qrun: interrupted" ] ||
                fail "$name: exit $rc, stderr: $(cat "$W/$name.err")"
        elif [ "$rc" = 1 ] && [ "$phase" = start-up ]; then
            [ "$(lines "$W/$name.err")" = 1 ] || fail "$name: exit 1 with stderr: $(cat "$W/$name.err")"
        else
            fail "$name: SIG$sig during $phase: exit $rc, expected $want: $(head -c 300 "$W/$name.err")"
        fi
        no_leftovers "$name"
        echo "ok $name: SIG$sig during $phase: exit $rc, $(wc -c <"$W/$name.out") bytes of valid UTF-8, $([ -s "$W/$name.err" ] && tr '\n' ' ' <"$W/$name.err" || echo "ended by the signal before the handlers were installed")"
    }
    for sig in INT TERM; do
        # start-up: right after the launch
        for i in 1 2 3; do
            launch start$sig$i -m "$M" --tokenizer "$TOK" --ids "1 2 3" -n 3990 -c 4000
            kill -$sig $pid
            wait $pid
            rc=$?
            check start$sig$i $sig start-up
        done
        # start-up, a little later (loading or verifying)
        launch late$sig -m "$M" --tokenizer "$TOK" --ids "1 2 3" -n 3990 -c 4000
        sleep 0.03
        t0=$(now_ms)
        kill -$sig $pid
        wait $pid
        rc=$?
        took=$(($(now_ms) - t0))
        [ "$took" -le 500 ] || fail "late$sig: qrun took $took ms to end while loading (at most 500)"
        check late$sig $sig start-up

        # prompt processing: 3000 prompt tokens take seconds
        launch prompt$sig -m "$M" --tokenizer "$TOK" --ids "$long" -n 5 -c 4000
        ids=
        for i in $(seq 200); do
            ids=$(prog_ids_of $pid)
            [ "$(echo "$ids" | grep -c .)" -ge 8 ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.05
        done
        sleep 0.3
        [ ! -s "$W/prompt$sig.out" ] || fail "prompt$sig: output before the signal: the prompt was too fast"
        kill -0 $pid 2>/dev/null || fail "prompt$sig: qrun ended early: $(cat "$W/prompt$sig.err")"
        t0=$(now_ms)
        kill -$sig $pid
        wait $pid
        rc=$?
        took=$(($(now_ms) - t0))
        echo "prompt$sig: stopped $took ms after the signal"
        [ "$took" -le 500 ] || fail "prompt$sig: qrun took $took ms to stop (at most 500)"
        [ -n "$ids" ] || fail "prompt$sig: qrun never held its BPF programs"
        check prompt$sig $sig "prompt processing"
        gone $ids

        # generation, text output
        launch gen$sig -m "$M" --tokenizer "$TOK" --ids "1 2 3" -n 3990 -c 4000
        for i in $(seq 200); do
            [ -s "$W/gen$sig.out" ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.05
        done
        ids=$(prog_ids_of $pid)
        sleep 0.2
        kill -0 $pid 2>/dev/null || fail "gen$sig: qrun ended early: $(cat "$W/gen$sig.err")"
        kill -$sig $pid
        wait $pid
        rc=$?
        check gen$sig $sig generation
        [ -n "$ids" ] && gone $ids
    done
    # a second signal ends qrun at once (SA_RESETHAND): killed by it, still nothing left
    launch twice -m "$M" --tokenizer "$TOK" --ids "1 2 3" -n 3990 -c 4000
    for i in $(seq 200); do
        [ -s "$W/twice.out" ] && break
        sleep 0.05
    done
    kill -INT $pid
    kill -INT $pid
    wait $pid
    rc=$?
    [ "$rc" = 130 ] || fail "two SIGINTs: exit $rc: $(cat "$W/twice.err")"
    valid_utf8 "$W/twice.out" || fail "two SIGINTs: stdout is not valid UTF-8"
    no_leftovers "two SIGINTs"
    echo "ok: two SIGINTs: exit 130; no BPF program left after any run"
    ;;

memory)
    need_root
    # BPF map memory is charged to the memory cgroup of the process creating
    # the maps. cgroup v2 when it offers the memory controller, else v1.
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
        grep -qw memory /sys/fs/cgroup/cgroup.subtree_control ||
            echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
            skip "cannot enable the memory controller for child cgroups"
        CG=/sys/fs/cgroup/qp-test-$$
        LIMIT_FILE=memory.max
    else
        v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
        [ -n "$v1" ] && [ -f "/sys/fs/cgroup/memory$v1/memory.limit_in_bytes" ] ||
            skip "no cgroup v2 memory controller and no cgroup v1 memory hierarchy"
        # v1: a child of our own memory cgroup (its limits still apply)
        CG=/sys/fs/cgroup/memory${v1%/}/qp-test-$$
        LIMIT_FILE=memory.limit_in_bytes
    fi
    gen big --seed 4 --vocab 151936 --hidden 512
    pack big
    rm -rf "$W/big"
    M=$W/big.qpk
    run free "$QRUN" -m "$M" --ids "1 2" -n 4 --print-ids --stats
    [ "$rc" = 0 ] || fail "resident run without a limit: exit $rc: $(cat "$W/free.err")"
    maps=$(sed -n 's/.*BPF maps \([0-9.]*\) MB.*/\1/p' "$W/free.err")
    [ -n "$maps" ] || fail "no 'BPF maps' in --stats: $(cat "$W/free.err")"
    limit_mb=$((${maps%.*} * 2 / 3))
    [ $limit_mb -ge 150 ] || fail "the resident maps ($maps MB) are too small for this test"
    mkdir "$CG" 2>"$W/mkdir.err" || skip "cannot create $CG: $(cat "$W/mkdir.err")"
    cleanups+=("for i in \$(seq 50); do rmdir '$CG' 2>/dev/null && break; sleep 0.1; done")
    echo $((limit_mb * 1024 * 1024)) >"$CG/$LIMIT_FILE" || skip "cannot set $CG/$LIMIT_FILE"
    [ -f "$CG/memory.swap.max" ] && echo 0 >"$CG/memory.swap.max"
    # in_cg ARGS...: runs ARGS in the cgroup
    in_cg() { bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$CG" "$@"; }
    run resident in_cg "$QRUN" -m "$M" --ids "1 2" -n 4 --print-ids
    [ "$rc" != 0 ] || skip "a resident run fit in $limit_mb MB: BPF map memory is not charged to this memory cgroup (kmem accounting off?)"
    [ "$rc" != 137 ] || fail "resident run in $limit_mb MB: killed (OOM killer), expected a clean error"
    one_line_error resident "--stream"
    run stream in_cg "$QRUN" -m "$M" --ids "1 2" -n 4 --print-ids --stream -c 64 --stats
    [ "$rc" = 0 ] || fail "--stream -c 64 in $limit_mb MB: exit $rc: $(cat "$W/stream.err")"
    cmp -s "$W/stream.out" "$W/free.out" || fail "--stream printed $(cat "$W/stream.out"), resident $(cat "$W/free.out")"
    echo "ok: resident maps $maps MB, limit $limit_mb MB ($LIMIT_FILE); --stream: $(grep -o 'BPF maps.*' "$W/stream.err")"
    ;;

truncate)
    need_root
    gen m --seed 2 --untied --max-pos 4096
    pack m
    cp "$W/m.qpk" "$W/t.qpk"
    run intact "$QRUN" -m "$W/m.qpk" --ids "1 2 3" -n 1500 -c 2048 --print-ids
    [ "$rc" = 0 ] || fail "intact run: exit $rc"
    "$QRUN" -m "$W/t.qpk" --ids "1 2 3" -n 1500 -c 2048 --print-ids >"$W/t.out" 2>"$W/t.err" &
    pid=$!
    for i in $(seq 200); do
        [ -s "$W/t.out" ] && break
        sleep 0.05
    done
    truncate -s 100 "$W/t.qpk"
    at=$(wc -w <"$W/t.out")
    wait $pid
    rc=$?
    [ "$rc" -lt 128 ] || fail "resident: killed by signal $((rc - 128)) after the file was truncated"
    if [ "$rc" = 0 ]; then
        cmp -s "$W/t.out" "$W/intact.out" || fail "resident: the tokens differ from a run on the intact file"
        echo "ok: resident run finished after the truncation at token ~$at: same 1500 tokens"
    else
        [ "$(lines "$W/t.err")" = 1 ] || fail "resident: exit $rc with stderr: $(cat "$W/t.err")"
        echo "ok: resident run failed cleanly after the truncation at token ~$at: $(cat "$W/t.err")"
    fi
    ;;

truncate_stream)
    need_root
    # --stream reads the matrices with preadv for every token: a truncated
    # file is a short read and one line. A resident start-up reads the mapped
    # file to verify and copy: a truncated file raises SIGBUS, which qrun
    # turns into one line and exit 1.
    gen m --seed 2 --untied --max-pos 4096
    pack m
    gen big --seed 4 --vocab 151936 --hidden 256
    pack big
    rm -rf "$W/big"
    notes=()
    # stream, mid-run
    cp "$W/m.qpk" "$W/t.qpk"
    "$QRUN" -m "$W/t.qpk" --ids "1 2 3" -n 1500 -c 2048 --print-ids --stream >"$W/s.out" 2>"$W/s.err" &
    pid=$!
    for i in $(seq 200); do
        [ -s "$W/s.out" ] && break
        sleep 0.05
    done
    truncate -s 100 "$W/t.qpk"
    at=$(wc -w <"$W/s.out")
    wait $pid
    rc=$?
    echo "--stream, truncated at token ~$at: exit $rc after $(wc -w <"$W/s.out") tokens: $(cat "$W/s.err")"
    [ "$rc" -lt 128 ] || fail "--stream: killed by signal $((rc - 128)) after the truncation"
    if [ "$rc" != 0 ]; then
        [ "$(lines "$W/s.err")" = 1 ] || fail "--stream: exit $rc with stderr: $(cat "$W/s.err")"
        grep -q "truncated or changed on disk" "$W/s.err" || fail "--stream: the message does not say the file changed"
    fi
    # resident, truncated during start-up (checksums and weight copy read the map)
    cp "$W/big.qpk" "$W/t.qpk"
    "$QRUN" -m "$W/t.qpk" --ids "1 2" -n 4 --print-ids >"$W/r.out" 2>"$W/r.err" &
    pid=$!
    sleep 0.3
    truncate -s 100 "$W/t.qpk"
    wait $pid
    rc=$?
    echo "resident, truncated 0.3 s into start-up: exit $rc: $(cat "$W/r.err")"
    if [ "$rc" -ge 128 ]; then
        [ "$rc" = 135 ] || fail "resident start-up: killed by signal $((rc - 128)), not SIGBUS"
        notes+=("resident start-up: SIGBUS after the truncation")
    elif [ "$rc" != 0 ]; then
        [ "$(lines "$W/r.err")" = 1 ] || fail "resident start-up: exit $rc with stderr: $(cat "$W/r.err")"
    fi
    [ ${#notes[@]} = 0 ] || skip "expected failure (undocumented): ${notes[*]}"
    echo "ok: no crash"
    ;;

bad_input)
    gen m --seed 2
    pack m
    M=$W/m.qpk
    # a newer major version: bytes 8..9 patched, nothing else fixed (the
    # minor, bytes 10..11, is the packer's)
    minor=$(od -An -tu2 -j10 -N2 "$M" | tr -d ' ')
    for v in 2 256; do
        cp "$M" "$W/v$v.qpk"
        printf "\\x$(printf %02x $((v & 255)))\\x$(printf %02x $((v >> 8)))" |
            dd of="$W/v$v.qpk" bs=1 seek=8 conv=notrunc 2>/dev/null
        for c in "verify" "info" "info --json"; do
            run "v$v" "$QPACK" $c "$W/v$v.qpk"
            one_line_error "v$v" "version $v.$minor is not supported"
            grep -q "1\.x\|1\.0" "$W/v$v.err" || fail "v$v: the message does not name the supported version"
        done
        if [ "$(id -u)" = 0 ]; then
            run "v$v" "$QRUN" -m "$W/v$v.qpk" --ids "1 2" -n 2 --print-ids
            one_line_error "v$v" "version $v.$minor is not supported"
        fi
        run "v$v" "$QRUN" -m "$W/v$v.qpk" --ids "1 2" -n 2 --print-ids --backend emu
        one_line_error "v$v" "version $v.$minor is not supported"
        run "v$v" "$QRUN" tokenize -m "$W/v$v.qpk" </dev/null
        one_line_error "v$v" "version $v.$minor is not supported"
    done
    # directories where a file is expected
    mkdir -p "$W/dir.qpk"
    for c in "verify" "info" "info --json"; do
        run dir "$QPACK" $c "$W/dir.qpk"
        one_line_error dir "directory"
    done
    # files that are not containers
    : >"$W/empty.qpk"
    head -c 100 "$M" >"$W/short.qpk"
    head -c 5000 "$M" >"$W/trunc.qpk"
    cp "$M" "$W/long.qpk" && echo >>"$W/long.qpk"
    for f in empty short trunc long; do
        run $f "$QPACK" verify "$W/$f.qpk"
        one_line_error $f
        run $f "$QRUN" -m "$W/$f.qpk" --ids "1 2" -n 2 --print-ids $([ "$(id -u)" = 0 ] || echo --backend emu)
        one_line_error $f
    done
    grep -q "truncated" "$W/trunc.err" && grep -q "trailing" "$W/long.err" || fail "truncated/trailing not named"
    # missing files for qpack
    for c in "verify" "info" "info --json"; do
        run missing "$QPACK" $c "$W/no-such.qpk"
        one_line_error missing "No such file"
    done
    run no_src "$QPACK" pack "$W/no-such-dir" -o "$W/x.qpk"
    one_line_error no_src "No such file"
    mkdir -p "$W/no_config" "$W/no_weights"
    cp "$W/m/model.safetensors" "$W/no_config/"
    cp "$W/m/config.json" "$W/no_weights/"
    run no_config "$QPACK" pack "$W/no_config" -o "$W/x.qpk"
    one_line_error no_config "config.json"
    run no_weights "$QPACK" pack "$W/no_weights" -o "$W/x.qpk"
    one_line_error no_weights "safetensors"
    run src_file "$QPACK" pack "$W/m/config.json" -o "$W/x.qpk"
    one_line_error src_file "folder"
    gen sharded --seed 2 --shards 3
    rm "$W/sharded/model-00002-of-00003.safetensors"
    run no_shard "$QPACK" pack "$W/sharded" -o "$W/x.qpk"
    one_line_error no_shard "model-00002-of-00003"
    gen short_src --seed 2
    truncate -s 200000 "$W/short_src/model.safetensors"
    run short_src "$QPACK" pack "$W/short_src" -o "$W/x.qpk"
    one_line_error short_src "truncated"
    run no_out_dir "$QPACK" pack "$W/m" -o "$W/no-such-dir/x.qpk"
    one_line_error no_out_dir "No such file"
    mkdir -p "$W/out_dir"
    run out_is_dir "$QPACK" pack "$W/m" -o "$W/out_dir"
    one_line_error out_is_dir "directory"
    [ "$rc" = 2 ] || fail "out_is_dir: exit $rc, expected 2 (bad usage: -o)"
    [ ! -e "$W/x.qpk" ] || fail "a failed pack wrote x.qpk"
    p=$(ls -A "$W" | grep "\.partial-" || true)
    [ -z "$p" ] || fail "failed packs left partial files: $p"
    [ -z "$(ls -A "$W/out_dir")" ] || fail "out_is_dir: files in the folder: $(ls -A "$W/out_dir")"
    ;;

load)
    need_root
    gen m --seed 2 --untied --max-pos 4096
    pack m
    M=$W/m.qpk
    prompt="97 11 187 0 42 300 17 5"
    run lone "$QRUN" -m "$M" --ids "$prompt" -n 20 --print-ids
    [ "$rc" = 0 ] && [ "$(wc -w <"$W/lone.out")" = 20 ] || fail "lone run: exit $rc: $(cat "$W/lone.out" "$W/lone.err")"
    pids=()
    for i in 1 2 3 4; do
        "$QRUN" -m "$M" --ids "$prompt" -n 20 --print-ids >"$W/c$i.out" 2>"$W/c$i.err" &
        pids+=($!)
    done
    for i in 1 2 3 4; do
        wait ${pids[$((i - 1))]}
        rc=$?
        [ "$rc" = 0 ] || fail "concurrent run $i: exit $rc: $(cat "$W/c$i.err")"
        cmp -s "$W/c$i.out" "$W/lone.out" || fail "concurrent run $i printed $(cat "$W/c$i.out"), alone $(cat "$W/lone.out")"
        [ ! -s "$W/c$i.err" ] || fail "concurrent run $i: stderr: $(cat "$W/c$i.err")"
    done
    echo "ok: four concurrent runs = the lone run: $(cat "$W/lone.out")"

    # 2000 tokens (sampled: greedy decoding of a random model loops)
    t0=$(now_ms)
    "$QRUN" -m "$M" --ids "1 2 3" -n 2000 -c 2100 --temp 0.9 --seed 5 --print-ids >"$W/long.out" 2>"$W/long.err" &
    pid=$!
    samples=() at=()
    for mark in 500 1000 1500 1900; do
        for i in $(seq 600); do
            n=$(wc -w <"$W/long.out")
            [ "$n" -ge $mark ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.01
        done
        r=$(awk '/^VmRSS:/ {print $2}' /proc/$pid/status 2>/dev/null)
        [ -n "$r" ] && samples+=("$r") && at+=("$n")
    done
    wait $pid
    rc=$?
    secs=$(($(now_ms) - t0))
    [ "$rc" = 0 ] || fail "2000 tokens: exit $rc: $(cat "$W/long.err")"
    [ "$(wc -w <"$W/long.out")" = 2000 ] || fail "2000 tokens: printed $(wc -w <"$W/long.out")"
    [ ${#samples[@]} -ge 2 ] || fail "too few RSS samples (the run was too fast?)"
    first=${samples[0]} last=${samples[$((${#samples[@]} - 1))]}
    tol=$((first / 10))
    [ $tol -ge 2048 ] || tol=2048
    echo "VmRSS (KiB) at tokens ${at[*]}: ${samples[*]}; 2000 tokens in $secs ms"
    [ $((last - first)) -le $tol ] || fail "RSS grew from $first KiB to $last KiB"
    run emu "$QRUN" -m "$M" --ids "1 2 3" -n 2000 -c 2100 --temp 0.9 --seed 5 --print-ids --backend emu
    [ "$rc" = 0 ] || fail "emu: exit $rc: $(cat "$W/emu.err")"
    cmp -s "$W/long.out" "$W/emu.out" || fail "2000 tokens: bpf and emu differ"
    echo "ok: 2000 tokens, RSS flat, $(tr ' ' '\n' <"$W/long.out" | sort -u | wc -l) distinct ids, bpf = emu"
    ;;

pack_signals)
    env --default-signal=INT true 2>/dev/null || skip "needs env --default-signal (coreutils 8.31)"
    gen big --seed 1 --vocab 151936 --hidden 256
    gen small --seed 2
    pack small
    "$QPACK" pack "$W/big" -o "$W/ref.qpk" --quiet || fail "pack big failed"
    D=$W/dest
    mkdir -p "$D"
    # launch: qpack pack in the background with the default dispositions (a
    # background job of a script ignores SIGINT); sets pid. Returns once the
    # process runs qpack: a signal before the exec would hit a copy of this
    # script (whose EXIT trap removes $W) or env, which still ignores SIGINT
    # until it resets it, so the pack would complete. On a busy machine the
    # exec can take a while: wait up to 20 s, by the clock.
    launch() {
        local i
        env --default-signal=INT,TERM,HUP "$QPACK" pack "$W/big" -o "$D/OUT.qpk" --quiet 2>"$W/sig.err" &
        pid=$!
        for i in $(seq 4000); do
            [ /proc/$pid/exe -ef "$QPACK" ] && return 0
            kill -0 $pid 2>/dev/null || fail "qpack pack ended before it could be signalled: $(cat "$W/sig.err")"
            sleep 0.005
        done
        fail "qpack did not start within 20 s"
    }
    for sig in INT TERM HUP; do
        want=$((128 + $(kill -l $sig)))
        for prev in absent previous; do
            rm -f "$D/OUT.qpk"
            [ $prev = previous ] && cp "$W/small.qpk" "$D/OUT.qpk"
            launch
            # writing: the output is open (an unnamed file shows as "DIR/#INODE (deleted)")
            for i in $(seq 1000); do
                ls -l /proc/$pid/fd 2>/dev/null | grep -qF -- "-> $D/" && break
                kill -0 $pid 2>/dev/null || break
                sleep 0.01
            done
            sleep 0.1
            kill -0 $pid 2>/dev/null || fail "SIG$sig, $prev: the pack ended before the signal: $(cat "$W/sig.err")"
            t0=$(now_ms)
            kill -$sig $pid
            wait $pid
            rc=$?
            took=$(($(now_ms) - t0))
            [ "$rc" = $want ] || fail "SIG$sig, $prev: exit $rc, expected $want: $(cat "$W/sig.err")"
            [ "$(cat "$W/sig.err")" = "qpack: interrupted" ] || fail "SIG$sig, $prev: stderr: $(cat "$W/sig.err")"
            [ $took -le 500 ] || fail "SIG$sig, $prev: exited $took ms after the signal (limit 500)"
            if [ $prev = previous ]; then
                only "$D" OUT.qpk
                cmp -s "$D/OUT.qpk" "$W/small.qpk" || fail "SIG$sig: the previous OUT.qpk changed"
            else
                only "$D"
            fi
            echo "ok SIG$sig while writing, destination $prev: exit $rc after $took ms, the folder as it was"
        done
        # at once, as qpack starts
        rm -f "$D/OUT.qpk"
        launch
        kill -$sig $pid
        wait $pid
        rc=$?
        [ "$rc" = $want ] || fail "SIG$sig at start-up: exit $rc: $(cat "$W/sig.err")"
        only "$D"
        echo "ok SIG$sig at start-up: exit $rc, nothing written"
    done
    # nohup: a SIGHUP ignored when qpack starts stays ignored, the pack completes
    (trap '' HUP && exec "$QPACK" pack "$W/big" -o "$D/OUT.qpk" --quiet) 2>"$W/hup.err" &
    pid=$!
    for i in $(seq 4000); do
        [ /proc/$pid/exe -ef "$QPACK" ] && break
        sleep 0.005
    done
    sleep 0.3
    kill -HUP $pid 2>/dev/null
    wait $pid
    rc=$?
    [ "$rc" = 0 ] || fail "SIGHUP ignored at start: exit $rc: $(cat "$W/hup.err")"
    cmp -s "$D/OUT.qpk" "$W/ref.qpk" || fail "SIGHUP ignored at start: OUT.qpk differs from a normal pack"
    only "$D" OUT.qpk
    echo "ok: an ignored SIGHUP stays ignored (nohup), the pack completes"
    ;;

outputs)
    gen m --seed 2
    pack m
    M=$W/m.qpk
    cp "$M" "$W/m.orig"
    cp -r "$W/m" "$W/m.orig.d"
    # a source that fails as soon as it is read: a refusal that names the
    # output comes before any work
    gen short --seed 2
    truncate -s 200000 "$W/short/model.safetensors"
    # refused NAME WORD OUT: qpack pack short -o OUT is refused before any work
    refused() {
        run "$1" "$QPACK" pack "$W/short" -o "$3"
        one_line_error "$1" "$2"
        [ "$rc" = 2 ] || fail "$1: exit $rc, expected 2 (bad usage: -o)"
        grep -qF -- "$3" "$W/$1.err" || fail "$1: the message does not name $3"
        ! grep -q "truncated" "$W/$1.err" || fail "$1: the source was read before the output was checked"
    }
    refused devnull "not a regular file" /dev/null
    [ -c /dev/null ] || fail "/dev/null is no longer a character device"
    mkfifo "$W/fifo"
    refused fifo "fifo" "$W/fifo"
    [ -p "$W/fifo" ] || fail "the FIFO is no longer a FIFO"
    mkdir -p "$W/outdir"
    refused outdir "directory" "$W/outdir"
    refused outdir_slash "folder" "$W/outdir/"
    only "$W/outdir"
    ln -s "$W/m.orig" "$W/link.qpk"
    refused link "symbolic link" "$W/link.qpk"
    [ -L "$W/link.qpk" ] || fail "link.qpk is no longer a symbolic link"
    refused no_dir "No such file" "$W/no-such-dir/x.qpk"
    if [ "$(id -u)" = 0 ]; then
        mkdir -p "$W/ro"
        mount -t tmpfs -o ro,size=1m tmpfs "$W/ro" 2>/dev/null && cleanups+=("umount '$W/ro'") &&
            refused read_only "Read-only file system" "$W/ro/x.qpk"
    else
        mkdir -p "$W/ro" && chmod 555 "$W/ro"
        refused read_only "Permission denied" "$W/ro/x.qpk"
    fi
    # the checkpoint's own files, by name, by hard link and by symbolic link
    run own_config "$QPACK" pack "$W/m" -o "$W/m/config.json"
    one_line_error own_config "input"
    [ "$rc" = 2 ] || fail "own_config: exit $rc, expected 2 (bad usage: -o)"
    ln "$W/m/model.safetensors" "$W/hard.qpk"
    run own_hard "$QPACK" pack "$W/m" -o "$W/hard.qpk"
    one_line_error own_hard "input"
    diff -r "$W/m" "$W/m.orig.d" >/dev/null || fail "the checkpoint changed"
    [ "$(ls -A "$W" | grep -c partial)" = 0 ] || fail "partial files left: $(ls -A "$W" | grep partial)"

    # qp-gen-checkpoint: an output file that is a FIFO or a link is refused
    # before anything is written or removed
    mkdir -p "$W/g"
    mkfifo "$W/g/config.json"
    run gen_fifo "$QP_GEN" "$W/g" --preset tiny
    one_line_error gen_fifo "fifo"
    [ -p "$W/g/config.json" ] || fail "gen_fifo: config.json is no longer a FIFO"
    rm "$W/g/config.json"
    ln -s "$W/m.orig" "$W/g/model.safetensors"
    run gen_link "$QP_GEN" "$W/g" --preset tiny
    one_line_error gen_link "symbolic link"
    [ -L "$W/g/model.safetensors" ] || fail "gen_link: model.safetensors is no longer a link"
    cmp -s "$W/m.orig" "$M" || fail "gen_link: the link's target changed"
    only "$W/g" model.safetensors
    if [ -f "$TOKDIR/tokenizer.json" ]; then
        rm "$W/g/model.safetensors"
        cp "$TOKDIR/tokenizer.json" "$W/g/"
        run gen_own_tok "$QP_GEN" "$W/g" --preset tiny --vocab 151936 --tokenizer-dir "$W/g"
        one_line_error gen_own_tok "input"
    fi

    # qrun --dump-logits: never over its inputs, never a non-regular file
    run dump "$QRUN" -m "$M" --ids "1 2 3" -n 1 --print-ids --backend emu --dump-logits "$W/logits.bin"
    [ "$rc" = 0 ] || fail "dump: exit $rc: $(cat "$W/dump.err")"
    vocab=$("$QPACK" info "$M" --json | jq .config.vocab_size)
    [ "$(stat -c %s "$W/logits.bin")" = $((4 * vocab)) ] || fail "dump: logits.bin is not $vocab float32"
    dump_refused() {
        local name=$1 word=$2
        shift 2
        run "$name" "$QRUN" --ids "1 2 3" -n 1 --print-ids "$@"
        one_line_error "$name" "$word"
    }
    dump_refused dump_model "input" -m "$M" --backend emu --dump-logits "$M"
    ln "$M" "$W/m.hard"
    dump_refused dump_model_hard "input" -m "$M" --backend emu --dump-logits "$W/m.hard"
    cmp -s "$M" "$W/m.orig" || fail "the container changed"
    dump_refused dump_devnull "not a regular file" -m "$M" --backend emu --dump-logits /dev/null
    [ -c /dev/null ] || fail "/dev/null is no longer a character device"
    dump_refused dump_fifo "fifo" -m "$M" --backend emu --dump-logits "$W/fifo"
    [ -p "$W/fifo" ] || fail "the FIFO is no longer a FIFO"
    dump_refused dump_dir "directory" -m "$M" --backend emu --dump-logits "$W/outdir"
    dump_refused dump_ref "input" -m "$W/m" --backend ref --dump-logits "$W/m/model.safetensors"
    diff -r "$W/m" "$W/m.orig.d" >/dev/null || fail "the checkpoint changed"
    if [ -f "$TOKDIR/tokenizer.json" ]; then
        cp "$TOKDIR/tokenizer.json" "$W/tok.json"
        cp "$W/tok.json" "$W/tok.orig"
        dump_refused dump_tokenizer "input" -m "$M" --backend emu --tokenizer "$W/tok.json" --dump-logits "$W/tok.json"
        cmp -s "$W/tok.json" "$W/tok.orig" || fail "the tokenizer changed"
    fi
    ;;

symlinks)
    # ~1 s of writing, so that the folder is seen while the pack runs
    gen big --seed 1 --vocab 151936 --hidden 256
    D=$W/dest
    mkdir -p "$D"
    echo "precious" >"$W/victim"
    cp "$W/victim" "$W/victim.orig"
    # the names qpack wrote to before (".OUT.qpk.partial-PID"): the next
    # 2000 PIDs, and below the pack's own PID
    last=$(cat /proc/sys/kernel/ns_last_pid 2>/dev/null || sh -c 'echo $$')
    max=$(cat /proc/sys/kernel/pid_max)
    top=$((last + 2000 < max - 1 ? last + 2000 : max - 1))
    pids="$(seq $((last + 1)) $top)"
    # PIDs wrap around to 300 after pid_max - 1
    [ $((top - last)) -ge 2000 ] || pids+=" $(seq 300 $((300 + 2000 - (top - last) - 1)))"
    # one process plants them all (2000 ln would take a minute on a busy host)
    perl -e 'for (@ARGV[2 .. $#ARGV]) { symlink($ARGV[0], "$ARGV[1]/.OUT.qpk.partial-$_") or die "$_: $!" }' \
        "$W/victim" "$D" $pids || fail "cannot plant the links"
    planted=$(ls -A "$D" | wc -l)
    # bash's $$ is the PID qpack keeps across exec. Not `ln -sf`: over an
    # existing name coreutils links a random temporary name and renames it
    # over, and the loop below may see that name.
    bash -c 'rm -f "$2/.OUT.qpk.partial-$$" && ln -s "$1" "$2/.OUT.qpk.partial-$$" &&
        exec "$3" pack "$4" -o "$2/OUT.qpk" --quiet' _ \
        "$W/victim" "$D" "$QPACK" "$W/big" 2>"$W/pack.err" &
    pid=$!
    : >"$W/names"
    polls=0
    while kill -0 $pid 2>/dev/null; do
        ls -A "$D" | grep -vxE '\.OUT\.qpk\.partial-[0-9]+' >>"$W/names"
        find "$D" -maxdepth 1 -type l -name '.OUT.qpk.partial-*-*' >>"$W/random_links"
        polls=$((polls + 1))
    done
    wait $pid
    rc=$?
    [ "$rc" = 0 ] || fail "the pack failed: exit $rc: $(cat "$W/pack.err")"
    cmp -s "$W/victim" "$W/victim.orig" || fail "the file a planted link points to was written"
    "$QPACK" verify "$D/OUT.qpk" >/dev/null || fail "OUT.qpk does not verify"
    [ ! -L "$D/OUT.qpk" ] || fail "OUT.qpk is a symbolic link"
    [ ! -s "$W/random_links" ] || fail "a randomly named partial file was a link: $(head -3 "$W/random_links")"
    # every name seen: OUT.qpk, a planted link, or a random partial name
    others=$(sort -u "$W/names" | grep -vxE 'OUT\.qpk' || true)
    bad=$(echo "$others" | grep -vxE '\.OUT\.qpk\.partial-[0-9]+-[0-9a-f]{16}' | grep . || true)
    [ -z "$bad" ] || fail "unexpected names in the folder during the pack: $bad"
    # the planted links are untouched: still links, still to the victim
    echo "$pids" | tr ' ' '\n' | grep -qx "$pid" && own=0 || own=1 # the pack's own PID among the 2000?
    n=$(find "$D" -maxdepth 1 -type l -lname "$W/victim" | wc -l)
    [ "$n" = $((planted + own)) ] || fail "$n planted links left of $((planted + own))"
    only_others=$(ls -A "$D" | grep -vxE '\.OUT\.qpk\.partial-[0-9]+' || true)
    [ "$only_others" = OUT.qpk ] || fail "left in the folder besides the planted links: $only_others"
    echo "ok: $((planted + own)) links planted, the target untouched; $polls looks at the folder saw $(echo "$others" | grep -c .) other name(s): $(echo $others)"
    ;;

input_fifos)
    gen m --seed 2 --untied
    pack m
    gen sh --seed 2 --shards 2
    [ -f "$TOKDIR/tokenizer.json" ] && tok=1 || tok=
    # fifo_in NAME DIR FILE CMD ARGS...: a copy of DIR with FILE a FIFO; CMD is
    # run with @ in ARGS replaced by the copy; it must refuse at once, with
    # one line naming FILE ("not a regular file (a fifo)": fsafe.h)
    fifo_in() {
        local name=$1 dir=$2 file=$3 a args=()
        shift 3
        rm -rf "$W/$name.d"
        cp -r "$dir" "$W/$name.d"
        rm -f "$W/$name.d/$file"
        mkfifo "$W/$name.d/$file"
        for a in "$@"; do args+=("${a//@/$W/$name.d}"); done
        timed "$name" "${args[@]}"
        one_line_error "$name" "not a regular file"
        grep -qF "$file" "$W/$name.err" || fail "$name: the message does not name $file"
        [ $ms -lt 2000 ] || fail "$name: took $ms ms to refuse"
    }
    [ -n "$tok" ] && cp "$TOKDIR"/tokenizer*.json "$W/m/"
    for f in config.json model.safetensors ${tok:+tokenizer.json tokenizer_config.json}; do
        fifo_in "pack_${f%%.*}" "$W/m" $f "$QPACK" pack @ -o "$W/x.qpk"
    done
    fifo_in pack_index "$W/sh" model.safetensors.index.json "$QPACK" pack @ -o "$W/x.qpk"
    fifo_in pack_shard "$W/sh" model-00002-of-00002.safetensors "$QPACK" pack @ -o "$W/x.qpk"
    [ ! -e "$W/x.qpk" ] || fail "a refused pack wrote x.qpk"
    mkdir -p "$W/c"
    fifo_in info "$W/c" m.qpk "$QPACK" info @/m.qpk
    fifo_in verify "$W/c" m.qpk "$QPACK" verify @/m.qpk
    fifo_in qrun_m "$W/c" m.qpk "$QRUN" -m @/m.qpk --backend emu --ids "1 2" -n 1 --print-ids
    for f in config.json model.safetensors; do
        fifo_in "ref_${f%%.*}" "$W/m" $f "$QRUN" -m @ --backend ref --ids "1 2" -n 1 --print-ids
    done
    if [ -n "$tok" ]; then
        fifo_in ref_tokenizer "$W/m" tokenizer.json "$QRUN" -m @ --backend ref -p "Hi" -n 1
        fifo_in tokenize "$W/c" tok.json "$QRUN" tokenize --tokenizer @/tok.json
        fifo_in run_tokenizer "$W/c" tok.json "$QRUN" -m "$W/m.qpk" --backend emu --tokenizer @/tok.json -p "Hi" -n 1
    fi
    # a device, through a symbolic link
    rm -rf "$W/dev.d" && cp -r "$W/m" "$W/dev.d" && ln -sf /dev/zero "$W/dev.d/config.json"
    timed dev "$QPACK" pack "$W/dev.d" -o "$W/x.qpk"
    one_line_error dev "character device"
    QEVAL=$(dirname "$QRUN")/qeval
    if [ -x "$QEVAL" ]; then
        fifo_in qeval_ref "$W/m" config.json "$QEVAL" --ref @ "$W/m.qpk" --backend emu
        if [ -n "$tok" ]; then
            fifo_in qeval_text "$W/c" text.txt "$QEVAL" --ref "$W/m" "$W/m.qpk" --backend emu --text @/text.txt
            fifo_in qeval_prompts "$W/c" p.txt "$QEVAL" --ref "$W/m" "$W/m.qpk" --backend emu --prompts @/p.txt
        fi
    fi
    ;;

pack_inputs)
    gen m --seed 2
    cp "$W/m/config.json" "$W/config.orig"
    # a folder that is no checkpoint, a mistyped option, a mistyped command:
    # one line each that says what to do
    mkdir -p "$W/empty"
    run no_config "$QPACK" pack "$W/empty" -o "$W/x.qpk"
    one_line_error no_config "$W/empty: not a Hugging Face checkpoint folder: it has no config.json"
    run typo_option "$QPACK" pack "$W/m" --fromat int4 -o "$W/x.qpk"
    one_line_error typo_option "unknown option '--fromat': did you mean --format? (see qpack pack --help)"
    [ "$rc" = 2 ] || fail "typo_option: exit $rc, expected 2"
    run typo_command "$QPACK" inf "$W/x.qpk"
    one_line_error typo_command "unknown command 'inf': did you mean info? (see qpack --help)"
    run no_out "$QPACK" pack "$W/m"
    one_line_error no_out "need SRC and -o OUT.qpk (see qpack pack --help)"
    # a key twice in config.json: Hugging Face (Python's json) takes the last
    # value; a first value that differs must not be packed silently
    for kv in "rope_theta 5" "rms_norm_eps 0.5" "max_position_embeddings 77"; do
        set -- $kv
        sed "0,/{/s//{\n  \"$1\": $2,/" "$W/config.orig" >"$W/m/config.json"
        [ "$(grep -c "\"$1\"" "$W/m/config.json")" = 2 ] || fail "$1: the test did not write the key twice"
        if command -v python3 >/dev/null; then
            last=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/m/config.json" "$1")
            [ "$last" != "$2" ] || fail "$1: Python's json took the first value"
        fi
        run "dup_$1" "$QPACK" pack "$W/m" -o "$W/x.qpk"
        one_line_error "dup_$1" "\"$1\" appears twice"
        grep -qF "config.json" "$W/dup_$1.err" || fail "dup_$1: the message does not name config.json"
    done
    cp "$W/config.orig" "$W/m/config.json"
    printf '{"chat_template": "a", "added_tokens_decoder": {"7": {"content": "x"}, "7": {"content": "y"}}}' \
        >"$W/m/tokenizer_config.json"
    run dup_tokcfg "$QPACK" pack "$W/m" -o "$W/x.qpk"
    one_line_error dup_tokcfg '"7" appears twice'
    grep -qF "tokenizer_config.json" "$W/dup_tokcfg.err" || fail "dup_tokcfg: the message does not name the file"
    printf '{"chat_template": "a", "chat_template": "b"}' >"$W/m/tokenizer_config.json"
    run dup_template "$QPACK" pack "$W/m" -o "$W/x.qpk"
    one_line_error dup_template '"chat_template" appears twice'
    # a chat template that is not UTF-8 (Python's json refuses the file): refused
    # before any work, naming the file and the byte, rather than packed and
    # then refused by qpack verify
    printf '{"chat_template": "\xff{%% x %%}"}' >"$W/m/tokenizer_config.json"
    run bad_utf8 "$QPACK" pack "$W/m" -o "$W/x.qpk"
    one_line_error bad_utf8 "tokenizer_config.json: byte 19: not UTF-8"
    [ ! -e "$W/x.qpk" ] || fail "a refused pack wrote x.qpk"
    printf '{"chat_template": "a\nb"}' >"$W/m/tokenizer_config.json"
    run raw_newline "$QPACK" pack "$W/m" -o "$W/x.qpk"
    one_line_error raw_newline "a control character inside a string"
    rm "$W/m/tokenizer_config.json"
    # JSON, but not a tokenizer qrun can load
    printf '{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}' >"$W/m/tokenizer.json"
    run bad_tok "$QPACK" pack "$W/m" -o "$W/x.qpk"
    one_line_error bad_tok "tokenizer.json"
    [ ! -e "$W/x.qpk" ] || fail "a refused pack wrote x.qpk"
    rm "$W/m/tokenizer.json"
    # no tokenizer.json: packed, with one warning line (none with --quiet)
    run no_tok "$QPACK" pack "$W/m" -o "$W/x.qpk"
    [ "$rc" = 0 ] || fail "no_tok: exit $rc: $(cat "$W/no_tok.err")"
    [ "$(grep -c warning "$W/no_tok.err")" = 1 ] && grep -q "no tokenizer.json.*--tokenizer" "$W/no_tok.err" ||
        fail "no_tok: no one-line warning: $(cat "$W/no_tok.err")"
    echo "ok no_tok: $(grep warning "$W/no_tok.err")"
    run no_tok_quiet "$QPACK" pack "$W/m" -o "$W/x.qpk" --quiet
    [ "$rc" = 0 ] && [ ! -s "$W/no_tok_quiet.err" ] || fail "no_tok_quiet: exit $rc: $(cat "$W/no_tok_quiet.err")"
    run no_tok_run "$QRUN" -m "$W/x.qpk" --backend emu -p "Hi" -n 1
    one_line_error no_tok_run "no tokenizer"
    if [ -f "$TOKDIR/tokenizer.json" ]; then
        # a tokenizer with ids past the model's vocabulary is refused
        # at pack time (qrun would fail only on the texts that use them)
        cp "$TOKDIR/tokenizer.json" "$W/m/"
        rm -f "$W/x.qpk"
        run small_vocab "$QPACK" pack "$W/m" -o "$W/x.qpk" --quiet
        one_line_error small_vocab "has ids up to 151668, past the model's vocab_size of 512"
        [ ! -e "$W/x.qpk" ] || fail "small_vocab: a refused pack wrote x.qpk"
        gen m --seed 2 --vocab 151936
        cp "$TOKDIR/tokenizer.json" "$W/m/"
        run with_tok "$QPACK" pack "$W/m" -o "$W/x.qpk" --quiet
        [ "$rc" = 0 ] && [ ! -s "$W/with_tok.err" ] || fail "with_tok: exit $rc: $(cat "$W/with_tok.err")"
    fi
    ;;

*)
    fail "unknown case"
    ;;
esac
exit 0
