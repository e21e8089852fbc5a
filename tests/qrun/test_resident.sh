#!/bin/bash
# test_resident.sh CASE QRUN QPACK QP_GEN TOKENIZER_DIR WORK_DIR
#
# Loaded models (qpack load, -m pin:NAME; docs/RESIDENT.md), one CASE per
# ctest test (tests/qrun/resident.cmake). "setup" packs a tiny random model
# as q24 and int4 and a stress checkpoint as int8; the cases load them under
# names of their own and unload them on exit. Every case needs root (it
# loads BPF programs and pins them) and is skipped without.
set -u

CASE=$1 QRUN=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 WORK=$6
T=$WORK/$CASE.tmp
PIN=/sys/fs/bpf/qpack

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }
skip() { echo "SKIP ($CASE): $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "loading and pinning BPF programs needs root"
[ -f "$TOKDIR/tokenizer.json" ] || skip "no $TOKDIR/tokenizer.json (scripts/fetch_tokenizer.sh)"

cleanup() {
    local n
    for n in $(jobs -p); do kill -KILL "$n" 2>/dev/null; done
    for n in "$PIN"/rt$$-*; do [ -e "$n" ] && "$QPACK" unload "${n##*/}"; done
    [ -z "${U:-}" ] || rm -rf "$U"
}
trap cleanup EXIT

lines() { wc -l <"$1" | tr -d ' '; }

# load NAME MODEL ARGS...: qpack load as rt<pid>-NAME (this run unloads it at
# exit), the full name in $L
load() {
    L=rt$$-$1
    local model=$2
    shift 2
    "$QPACK" load "$model" --name "$L" "$@" >"$T/load.out" 2>"$T/load.err" ||
        fail "qpack load $model $*: $(cat "$T/load.err")"
}

# refused NAME CMD...: CMD fails with exactly one line on stderr, nothing on stdout
refused() {
    local name=$1
    shift
    "$@" >"$T/$name.out" 2>"$T/$name.err" && fail "$name: $* succeeded"
    [ ! -s "$T/$name.out" ] || fail "$name: printed $(head -c 200 "$T/$name.out")"
    [ "$(lines "$T/$name.err")" = 1 ] || fail "$name: expected one line on stderr, got: $(cat "$T/$name.err")"
    echo "ok $name: $(cat "$T/$name.err")"
}

# same_logits MODEL NAME ARGS...: qrun on the loaded model and qrun on the
# file (each a process of its own) dump the same logits and print the same ids
same_logits() {
    local model=$1 name=$2
    shift 2
    "$QRUN" -m "$model" --ids "9 8 7 6 5 4 3" -n 12 --print-ids --seed 3 --temp 1 --dump-logits "$T/file.bin" "$@" \
        >"$T/file.ids" 2>"$T/file.err" || fail "qrun -m $model: $(cat "$T/file.err")"
    rm -f "$T/pin.bin"
    "$QRUN" -m "pin:$name" --ids "9 8 7 6 5 4 3" -n 12 --print-ids --seed 3 --temp 1 --dump-logits "$T/pin.bin" \
        >"$T/pin.ids" 2>"$T/pin.err" || fail "qrun -m pin:$name: $(cat "$T/pin.err")"
    cmp -s "$T/file.bin" "$T/pin.bin" || fail "pin:$name: logits differ from $model's in-process"
    cmp -s "$T/file.ids" "$T/pin.ids" || fail "pin:$name: ids $(cat "$T/pin.ids") against $(cat "$T/file.ids")"
    echo "ok pin:$name: the logits and ids of $model in-process ($(cat "$T/pin.ids"))"
}

# claimed_by NAME PID: qpack ps lists PID as a slot owner of NAME (waits 10 s)
claimed_by() {
    local i
    for i in $(seq 200); do
        "$QPACK" ps | grep -q "slot [0-9]*: pid $2 " && return 0
        kill -0 "$2" 2>/dev/null || fail "process $2 ended before it claimed a slot of $1"
        sleep 0.05
    done
    fail "process $2 never claimed a slot of $1"
}

# hold NAME: an interactive chat on pin:NAME that holds a slot until killed; sets pid
hold() {
    rm -f "$T/fifo.$1" && mkfifo "$T/fifo.$1"
    "$QRUN" -m "pin:$1" --chat <"$T/fifo.$1" >/dev/null 2>"$T/hold.err" &
    pid=$!
    exec {holdfd}>"$T/fifo.$1"
    claimed_by "$1" "$pid"
}

if [ "$CASE" = setup ]; then
    rm -rf "$WORK" && mkdir -p "$WORK" && chmod 755 "$WORK" || fail "cannot create $WORK"
    "$QP_GEN" "$WORK/ckpt" --preset tiny --vocab 151936 --seed 2 --tokenizer-dir "$TOKDIR" >/dev/null ||
        fail "qp-gen-checkpoint failed"
    "$QP_GEN" "$WORK/stress" --preset tiny --vocab 151936 --seed 4 --stress --tokenizer-dir "$TOKDIR" >/dev/null ||
        fail "qp-gen-checkpoint --stress failed"
    "$QPACK" pack "$WORK/ckpt" -o "$WORK/q24.qpk" --quiet || fail "qpack pack q24 failed"
    "$QPACK" pack "$WORK/ckpt" -o "$WORK/int4.qpk" --format int4 --quiet || fail "qpack pack int4 failed"
    "$QPACK" pack "$WORK/stress" -o "$WORK/stress.qpk" --format int8 --quiet || fail "qpack pack stress failed"
    chmod 644 "$WORK"/*.qpk
    echo "ok: $WORK/q24.qpk int4.qpk stress.qpk"
    exit 0
fi
[ -f "$WORK/q24.qpk" ] || fail "no $WORK/q24.qpk: the resident_setup test must run first"
rm -rf "$T" && mkdir -p "$T" && chmod 755 "$T" || fail "cannot create $T"

case $CASE in
same_bits)
    # a model loaded by qpack load gives, in another process, the logits
    # and tokens of the same container loaded in-process
    load q24 "$WORK/q24.qpk" -c 256 && same_logits "$WORK/q24.qpk" "$L" -c 256
    load int4 "$WORK/int4.qpk" -c 256 && same_logits "$WORK/int4.qpk" "$L" -c 256
    load stress "$WORK/stress.qpk" -c 256 && same_logits "$WORK/stress.qpk" "$L" -c 256
    load kv8 "$WORK/q24.qpk" -c 256 --kv-cache int8 && same_logits "$WORK/q24.qpk" "$L" -c 256 --kv-cache int8
    # the start-up as --stats reports it: no verification, no copy
    "$QRUN" -m "pin:rt$$-int4" --ids "1 2" -n 1 --stats >/dev/null 2>"$T/stats.err" || fail "$(cat "$T/stats.err")"
    grep -q "maps and programs 0 ms, weight copy 0 ms" "$T/stats.err" || fail "pin: start-up: $(head -1 "$T/stats.err")"
    echo "ok $(head -1 "$T/stats.err")"
    ;;

refusals)
    load a "$WORK/q24.qpk" -c 128 --sessions 1 && name=$L
    refused loaded_twice "$QPACK" load "$WORK/q24.qpk" --name "$name"
    grep -q "already loaded" "$T/loaded_twice.err" || fail "loaded twice: $(cat "$T/loaded_twice.err")"
    for bad in ../x a/b .hidden "" "$(printf 'x%.0s' $(seq 70))"; do
        refused bad_name "$QPACK" load "$WORK/q24.qpk" --name "$bad"
        grep -q "bad model name" "$T/bad_name.err" || fail "name '$bad': $(cat "$T/bad_name.err")"
    done
    # what does not fit memory (QP_MEM_AVAILABLE: as if 600 MiB were available)
    refused too_big env QP_MEM_AVAILABLE=$((600 << 20)) "$QPACK" load "$WORK/q24.qpk" --name "rt$$-big" -c 2048 \
        --sessions 64
    grep -q "MemAvailable" "$T/too_big.err" || fail "too big: $(cat "$T/too_big.err")"
    [ ! -e "$PIN/rt$$-big" ] || fail "a refused load left $PIN/rt$$-big"
    refused unknown "$QRUN" -m "pin:rt$$-none" --ids 1 -n 1
    grep -q "no model named" "$T/unknown.err" || fail "unknown name: $(cat "$T/unknown.err")"
    refused unload_unknown "$QPACK" unload "rt$$-none"
    # a container changed on disk since the load is refused, never run
    cp "$WORK/q24.qpk" "$T/c.qpk"
    load changed "$T/c.qpk" -c 128 && changed=$L
    "$QRUN" -m "pin:$changed" --ids "1 2" -n 2 >/dev/null 2>"$T/before.err" || fail "before: $(cat "$T/before.err")"
    touch "$T/c.qpk"
    refused changed "$QRUN" -m "pin:$changed" --ids "1 2" -n 2
    grep -q "changed on disk" "$T/changed.err" || fail "changed: $(cat "$T/changed.err")"
    # a manifest that does not match: bad magic, another version, another
    # build (written with bpftool as a forger would; 4296 bytes)
    manifest() {    # manifest MAGIC VERSION BUILD_ID_BYTE: the value as hex bytes
        perl -e 'my $v = pack("a8 V V C", $ARGV[0], $ARGV[1], 4296, $ARGV[2]); $v .= "\0" x (4296 - length $v);
                 print join(" ", map { sprintf "%02x", $_ } unpack("C*", $v))' "$@"
    }
    fake=$PIN/rt$$-fake
    for bad in "XXXXXX 1 0:bad magic" "QPKPIN 9 0:manifest version 9" "QPKPIN 2 7:another build of qpack"; do
        read -r magic version build <<<"${bad%%:*}"
        rm -rf "$fake" && mkdir "$fake" || fail "cannot create $fake"
        bpftool map create "$fake/manifest" type array key 4 value 4296 entries 1 name qp_manifest ||
            fail "bpftool map create"
        # shellcheck disable=SC2046
        bpftool map update pinned "$fake/manifest" key hex 00 00 00 00 value hex $(manifest "$magic" "$version" "$build") ||
            fail "bpftool map update"
        refused forged "$QRUN" -m "pin:rt$$-fake" --ids "1 2" -n 2
        grep -q "${bad#*:}" "$T/forged.err" || fail "${bad%%:*}: $(cat "$T/forged.err")"
    done
    # one session, held: the next gets a clear line, not the cache
    hold "$name"
    refused all_taken "$QRUN" -m "pin:$name" --ids "1 2" -n 2
    grep -q "all 1 sessions" "$T/all_taken.err" || fail "all taken: $(cat "$T/all_taken.err")"
    refused waited_out "$QRUN" -m "pin:$name" --session-wait 1 --ids "1 2" -n 2
    grep -q "all 1 sessions" "$T/waited_out.err" || fail "waited out: $(cat "$T/waited_out.err")"
    # asked to wait, a session gets the slot once its holder leaves (the
    # waiter must not hold the holder's fifo open)
    "$QRUN" -m "pin:$name" --session-wait 60 --ids "1 2" -n 2 --print-ids --temp 0 >"$T/waited.out" \
        2>"$T/waited.err" {holdfd}>&- &
    waiter=$!
    sleep 1
    kill -0 $waiter 2>/dev/null || fail "--session-wait 60 did not wait: $(cat "$T/waited.err")"
    exec {holdfd}>&-
    wait "$pid"
    wait $waiter || fail "--session-wait 60 after the holder left: $(cat "$T/waited.err")"
    "$QRUN" -m "pin:$name" --ids "1 2" -n 2 --print-ids --temp 0 >"$T/free.out" 2>/dev/null
    cmp -s "$T/waited.out" "$T/free.out" || fail "the waiting run printed $(cat "$T/waited.out")"
    echo "ok --session-wait: waited for the holder, then ran ($(cat "$T/waited.out"))"
    ;;

sessions)
    # two processes decode at once on separate slots, each with the tokens
    # of its own run alone (sampled from near-uniform logits: any mix-up of
    # state between them changes them)
    load s "$WORK/q24.qpk" -c 256 --sessions 2 && name=$L
    run_alone() { "$QRUN" -m "$WORK/q24.qpk" -c 256 --ids "$1" -n 80 --print-ids --temp 1 --seed "$2" 2>/dev/null; }
    run_alone "11 12 13" 1 >"$T/a.want" && run_alone "21 22 23 24 25" 2 >"$T/b.want" || fail "in-process runs"
    for round in 1 2 3; do
        "$QRUN" -m "pin:$name" --ids "11 12 13" -n 80 --print-ids --temp 1 --seed 1 >"$T/a.got" 2>"$T/a.err" &
        a=$!
        "$QRUN" -m "pin:$name" --ids "21 22 23 24 25" -n 80 --print-ids --temp 1 --seed 2 >"$T/b.got" 2>"$T/b.err" &
        b=$!
        wait $a || fail "round $round, first process: $(cat "$T/a.err")"
        wait $b || fail "round $round, second process: $(cat "$T/b.err")"
        cmp -s "$T/a.want" "$T/a.got" || fail "round $round: the first process's tokens differ from its run alone"
        cmp -s "$T/b.want" "$T/b.got" || fail "round $round: the second process's tokens differ from its run alone"
    done
    echo "ok two processes at once, 3 rounds, each the tokens of its run alone"
    # a client killed mid-step leaves a slot the next claim reclaims
    "$QRUN" -m "pin:$name" --ids "1 2 3" -n 250 --print-ids --temp 1 >/dev/null 2>&1 &
    victim=$!
    claimed_by "$name" $victim
    sleep 0.3
    kill -KILL $victim
    wait $victim 2>/dev/null
    hold "$name"
    "$QPACK" ps >"$T/ps.out" || fail "qpack ps failed"
    grep -q "slot .: pid $victim .*exited" "$T/ps.out" || grep -q "sessions 1/2" "$T/ps.out" ||
        fail "qpack ps after the kill: $(cat "$T/ps.out")"
    # the dead owner's slot is taken again, and the run is its run alone
    "$QRUN" -m "pin:$name" --ids "11 12 13" -n 80 --print-ids --temp 1 --seed 1 >"$T/a.got" 2>"$T/a.err" ||
        fail "after kill -9 of a client: $(cat "$T/a.err")"
    cmp -s "$T/a.want" "$T/a.got" || fail "after kill -9 of a client: the tokens differ from the run alone"
    grep -q "pid $pid" "$T/ps.out" || fail "qpack ps does not show the holder $pid: $(cat "$T/ps.out")"
    echo "ok a client killed mid-step: its slot reclaimed, the next run the same tokens ($(grep -c pid "$T/ps.out") owners listed)"
    ;;

unprivileged)
    # root loads with a group; a member with no capability runs a chat, a
    # user outside the group is refused with one line
    command -v setpriv >/dev/null || skip "no setpriv"
    gid=$(getent group users | cut -d: -f3)
    [ -n "$gid" ] || skip "no group 'users'"
    # the member reaches qrun and the container through a folder of its own
    # under /tmp: the build tree's parents need not be open to others
    U=$(mktemp -d /tmp/qp-resident-XXXXXX) || fail "mktemp"
    chmod 755 "$U" && cp "$QRUN" "$U/qrun" && cp "$WORK/q24.qpk" "$U/q24.qpk" && chmod 644 "$U/q24.qpk" ||
        fail "cannot stage qrun and the container in $U"
    QRUN=$U/qrun
    load u "$U/q24.qpk" -c 256 --group users && name=$L
    [ "$(stat -c %a:%G "$PIN/$name")" = 770:users ] || fail "folder: $(stat -c %a:%G "$PIN/$name")"
    [ "$(stat -c %a:%G "$PIN/$name/map_kcache")" = 660:users ] || fail "map: $(stat -c %a:%G "$PIN/$name/map_kcache")"
    member=(setpriv --reuid=65534 --regid="$gid" --clear-groups --inh-caps=-all --bounding-set=-all)
    "${member[@]}" "$QRUN" -m "pin:$name" --chat -p "Hello" -n 6 --temp 0 >"$T/chat.out" 2>"$T/chat.err" ||
        fail "a member of users: $(cat "$T/chat.err")"
    "$QRUN" -m "$U/q24.qpk" -c 256 --chat -p "Hello" -n 6 --temp 0 >"$T/chat.want" 2>/dev/null
    cmp -s "$T/chat.out" "$T/chat.want" || fail "the member's chat differs from root's in-process one"
    echo "ok uid 65534 in group users, no capability: the chat of root's in-process run"
    # and a server: its reply is the same chat's
    "${member[@]}" "$QRUN" serve -m "pin:$name" --port 0 --parallel 1 >/dev/null 2>"$T/serve.err" &
    server=$!
    for i in $(seq 200); do
        port=$(sed -n 's|.* on http://[^ ]*:\([0-9]*\)/ with .*|\1|p' "$T/serve.err")
        [ -n "$port" ] && break
        kill -0 $server 2>/dev/null || fail "the member's server ended: $(cat "$T/serve.err")"
        sleep 0.05
    done
    [ -n "$port" ] || fail "the member's server did not listen"
    curl -sS --max-time 60 "http://127.0.0.1:$port/v1/chat/completions" \
        -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":6,"temperature":0}' >"$T/reply.json" ||
        fail "no reply from the member's server"
    kill $server && wait $server
    [ "$(jq -r '.choices[0].message.content' "$T/reply.json")" = "$(cat "$T/chat.want")" ] ||
        fail "the member's server replied $(cat "$T/reply.json"), the chat is $(cat "$T/chat.want")"
    echo "ok the member's qrun serve -m pin:$name: the same reply"
    refused outsider setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
        "$QRUN" -m "pin:$name" --ids "1 2" -n 2
    grep -q "permission denied" "$T/outsider.err" || fail "outsider: $(cat "$T/outsider.err")"
    # loading stays root's, said in one line
    refused member_load "${member[@]}" "$QPACK" load "$WORK/q24.qpk" --name "rt$$-m"
    grep -q "needs root" "$T/member_load.err" || fail "a member's load: $(cat "$T/member_load.err")"
    [ ! -e "$PIN/rt$$-m" ] || fail "a refused load left $PIN/rt$$-m"
    ;;

lifecycle)
    # loaded and unloaded 10 times: every program and map it pinned is freed
    # (by id: other tests may load kernels of the same names meanwhile)
    ids() {
        local f
        for f in "$PIN/$L"/$2*; do bpftool "$1" show pinned "$f" -j 2>/dev/null | jq -r .id; done
    }
    : >"$T/progs" && : >"$T/maps"
    for i in $(seq 10); do
        load l "$WORK/q24.qpk" -c 64 --sessions 1
        ids prog prog_ >>"$T/progs" && ids map "[mor]" >>"$T/maps"
        "$QPACK" unload "$L" || fail "unload $L"
        [ ! -e "$PIN/$L" ] || fail "unload left $PIN/$L"
    done
    [ "$(sort -u "$T/progs" | wc -l)" -ge $((10 * 15)) ] || fail "only $(sort -u "$T/progs" | wc -l) program ids seen"
    left() {
        local kind id
        for kind in prog map; do
            for id in $(sort -u "$T/${kind}s"); do bpftool "$kind" show id "$id" >/dev/null 2>&1 && echo "$kind $id"; done
        done
    }
    for i in $(seq 50); do
        [ -z "$(left)" ] && break
        sleep 0.1
    done
    [ -z "$(left)" ] || fail "after 10 loads and unloads, still there: $(left | head -5 | tr '\n' ' ')"
    echo "ok 10 loads and unloads: $(sort -u "$T/progs" | wc -l) programs and $(sort -u "$T/maps" | wc -l) maps, all freed"
    ;;

*)
    fail "unknown case $CASE"
    ;;
esac
exit 0
