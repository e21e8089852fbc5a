#!/bin/bash
# test_qrun_cli.sh CASE QRUN QPACK QP_GEN TOKENIZER_DIR WORK_DIR
#
# The qrun command end to end, one CASE per ctest test (tests/qrun/qrun_cli.cmake).
# "setup" writes a tiny random checkpoint with the real Qwen3 tokenizer and
# packs it into WORK_DIR/M.qpk; the other cases use it. Cases that load BPF
# programs need root and are skipped (exit 77) without it.
set -u

CASE=$1 QRUN=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 WORK=$6
M=$WORK/M.qpk
T=$WORK/$CASE.tmp
KERNELS='["embed","rmsnorm","quant_x","matvec_q24","matvec_i8","matvec_i8_block","matvec_i4","matvec_i4_block","matvec_i6","matvec_i6_block","rope_store","attention","attn_merge","swiglu","argmax_reduce"]'

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }
skip() { echo "SKIP ($CASE): $*"; exit 77; }
need_root() { [ "$(id -u)" = 0 ] || skip "loading BPF programs needs root"; }

if [ "$CASE" != setup ]; then
    [ -f "$TOKDIR/tokenizer.json" ] || skip "no $TOKDIR/tokenizer.json (scripts/fetch_tokenizer.sh)"
    [ -f "$M" ] || fail "no $M: the qrun_cli_setup test must run first"
    rm -rf "$T" && mkdir -p "$T" || fail "cannot create $T"
fi

# run NAME ARGS...: qrun with stdout in $T/NAME.out, stderr in $T/NAME.err; sets rc
run() {
    local name=$1
    shift
    "$QRUN" "$@" >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
}

lines() { wc -l <"$1" | tr -d ' '; }
# pack_refuses DIR FILE TEXT...: with each TEXT as DIR/FILE, qpack pack DIR
# is refused before any work, one line naming FILE, nothing written
pack_refuses() {
    local dir=$1 file=$2 bad
    shift 2
    for bad in "$@"; do
        printf '%s' "$bad" >"$dir/$file"
        "$QPACK" pack "$dir" -o "$T/bad.qpk" --quiet 2>"$T/bad.err" && fail "packed $file $bad"
        [ "$(lines "$T/bad.err")" = 1 ] && grep -q "$file" "$T/bad.err" || fail "$file $bad: $(cat "$T/bad.err")"
        [ ! -e "$T/bad.qpk" ] || fail "a refused pack wrote bad.qpk"
        echo "ok refused $bad: $(cat "$T/bad.err")"
    done
}

valid_utf8() { iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1; }

# expect_one_line_error NAME: non-zero exit, nothing on stdout, exactly one line on stderr
expect_one_line_error() {
    local name=$1
    [ "$rc" != 0 ] || fail "$name: exit status 0, expected an error"
    [ ! -s "$T/$name.out" ] || fail "$name: unexpected stdout: $(head -c 200 "$T/$name.out")"
    [ "$(lines "$T/$name.err")" = 1 ] ||
        fail "$name: expected one line on stderr, got: $(cat "$T/$name.err")"
    echo "ok $name (exit $rc): $(cat "$T/$name.err")"
}

# ids of the BPF programs named like our kernels, loaded anywhere on the machine
kernel_ids() {
    bpftool prog list -j | jq -r --argjson k "$KERNELS" '.[] | select(.name as $n | $k | index($n)) | .id' | sort
}

# ids of the BPF programs some live process holds a descriptor of
held_ids() {
    cat /proc/[0-9]*/fdinfo/* 2>/dev/null | awk '/^prog_id:/ {print $2}' | sort -u
}

# kernel programs no process holds. Other builds and tests on the machine may
# load and free programs with the same names at any time, so a leftover is a
# kernel program that nobody holds and that was not orphaned before.
orphans() { comm -23 <(kernel_ids) <(held_ids); }

# no_leftovers WHAT: no new orphaned kernel programs (freeing is asynchronous:
# allow it 5 s)
no_leftovers() {
    local i new
    for i in $(seq 50); do
        new=$(comm -13 <(echo "$base_orphans") <(orphans))
        [ -z "$new" ] && return 0
        sleep 0.1
    done
    fail "BPF programs left after $1: $(echo $new)"
}

# gone ID...: each program id is freed (within 5 s)
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

# ids of the BPF programs process $1 holds
prog_ids_of() {
    cat /proc/"$1"/fdinfo/* 2>/dev/null | awk '/^prog_id:/ {print $2}' | sort -n
}

# start_and_signal NAME SIGNAL ARGS...: starts qrun in the background, waits
# until it holds the 8 kernels and has printed something, sends SIGNAL, waits;
# sets rc and ids (the programs it held). stdin: $IN (a background job's
# stdin is /dev/null otherwise)
start_and_signal() {
    local name=$1 sig=$2
    shift 2
    "$QRUN" "$@" <"${IN:-/dev/null}" >"$T/$name.out" 2>"$T/$name.err" &
    local pid=$! i
    ids=
    for i in $(seq 200); do
        [ -z "$ids" ] && [ "$(prog_ids_of $pid | wc -l)" -ge 8 ] && ids=$(prog_ids_of $pid)
        # UNTIL_LINE=1: a whole line printed (a chat reply ended), not only a token
        [ -n "$ids" ] && [ -s "$T/$name.out" ] && { [ -z "${UNTIL_LINE:-}" ] || [ "$(tr -cd '\n' <"$T/$name.out" | wc -c)" -ge 1 ]; } && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    [ -n "$ids" ] || { kill -KILL $pid 2>/dev/null; wait $pid; fail "$name: qrun never held its 8 BPF programs"; }
    [ -s "$T/$name.out" ] || { kill -KILL $pid 2>/dev/null; wait $pid; fail "$name: qrun printed nothing"; }
    kill -"$sig" $pid
    wait $pid
    rc=$?
}

# ended_after_first_byte ARGS...: runs ARGS with stdout into a pipe, reads
# one byte, closes the pipe (what `| head -c 1` does) and prints how the
# command ended: "exit N" or "signal N" (a shell shows both as 128 + N).
# The command starts with SIGPIPE at its default action, whatever ours is.
ended_after_first_byte() {
    perl -e '
        pipe(my $r, my $w) or die "pipe: $!";
        my $pid = fork() // die "fork: $!";
        if (!$pid) { close $r; open(STDOUT, ">&", $w) or die; $SIG{PIPE} = "DEFAULT"; exec(@ARGV) or die "exec: $!" }
        close $w;
        sysread($r, my $byte, 1);
        close $r;
        waitpid($pid, 0);
        print $? & 127 ? "signal " . ($? & 127) : "exit " . ($? >> 8);
    ' "$@"
}

# expect_lost_output NAME PREFIX: exit 1, one line on stderr naming the lost output
expect_lost_output() {
    [ "$rc" = 1 ] || fail "$1: exit $rc with stdout on /dev/full, expected 1 ($(cat "$T/$1.err"))"
    [ "$(cat "$T/$1.err")" = "$2: writing standard output: No space left on device" ] ||
        fail "$1: stderr: $(cat "$T/$1.err")"
    echo "ok $1: $(cat "$T/$1.err")"
}

case "$CASE" in
setup)
    [ -f "$TOKDIR/tokenizer.json" ] || skip "no $TOKDIR/tokenizer.json (scripts/fetch_tokenizer.sh)"
    rm -rf "$WORK" && mkdir -p "$WORK" && chmod 755 "$WORK" || fail "cannot create $WORK"
    # seed 2: replies that depend on the conversation (seed 1 repeats one token)
    "$QP_GEN" "$WORK/ckpt" --preset tiny --vocab 151936 --seed 2 --tokenizer-dir "$TOKDIR" ||
        fail "qp-gen-checkpoint failed"
    "$QPACK" pack "$WORK/ckpt" -o "$M" --quiet || fail "qpack pack failed"
    chmod 644 "$M"
    echo "ok: $M"
    ;;

generation_config)
    # the authors' sampling, kept in the container, is qrun's default when
    # no sampling option is given: the same tokens as the options written
    # out (Qwen3's pair: thinking 0.6/20/0.95, chat without it 0.7/20/0.8);
    # --temp 0 is greedy again; its eos ids end a chat reply
    G=$T/gc
    mkdir -p "$G" && cp "$WORK/ckpt"/* "$G/" || fail "copying the checkpoint"
    printf '{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],\n "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}\n' \
        >"$G/generation_config.json"
    "$QPACK" pack "$G" -o "$T/gc.qpk" --quiet || fail "packing with generation_config.json"
    "$QPACK" verify "$T/gc.qpk" >/dev/null || fail "qpack verify of a container with a generation config"
    gen() { "$QRUN" -m "$T/gc.qpk" --backend emu --print-ids --seed 5 "$@" 2>"$T/gen.err" || fail "qrun $*: $(cat "$T/gen.err")"; }
    [ "$(gen -p Hello -n 12)" = "$(gen -p Hello -n 12 --temp 0.6 --top-k 20 --top-p 0.95)" ] ||
        fail "-p: the model's sampling is not temp 0.6, top-k 20, top-p 0.95"
    [ "$(gen -p Hello -n 12)" != "$(gen -p Hello -n 12 --temp 0)" ] || fail "-p: the model's sampling is greedy"
    [ "$(gen -p Hello -n 12 --temp 0)" = "$("$QRUN" -m "$M" --backend emu --print-ids -p Hello -n 12 --temp 0)" ] ||
        fail "--temp 0 is not the greedy reply of the container without a generation config"
    [ "$(gen --chat -p Hi -n 12)" = "$(gen --chat -p Hi -n 12 --temp 0.7 --top-k 20 --top-p 0.8)" ] ||
        fail "--chat: the model's sampling is not Qwen3's non-thinking 0.7, 20, 0.8"
    [ "$(gen --chat --think -p Hi -n 12)" = "$(gen --chat --think -p Hi -n 12 --temp 0.6 --top-k 20 --top-p 0.95)" ] ||
        fail "--chat --think: the model's sampling is not 0.6, 20, 0.95"
    gen -p Hello -n 2 --stats >/dev/null
    grep -q "sampling as the model's generation_config.json says: temp 0.6, top-k 20, top-p 0.95" "$T/gen.err" ||
        fail "--stats does not say where the sampling comes from: $(cat "$T/gen.err")"
    # an eos id of the generation config ends a chat reply: the greedy
    # reply's first token made an end id gives an empty reply
    first=$("$QRUN" -m "$M" --backend emu --print-ids --chat -p Hi -n 1 --temp 0)
    printf '{"do_sample": false, "eos_token_id": [151645, %s]}' "$first" >"$G/generation_config.json"
    "$QPACK" pack "$G" -o "$T/gc.qpk" --quiet || fail "packing with eos ids"
    [ -z "$(gen --chat -p Hi -n 4)" ] || fail "eos id $first of the generation config did not end the reply"
    [ -n "$(gen -p Hi -n 4)" ] || fail "an eos id ended a text that is no chat"
    # refused before any work, one line naming the file and the field
    pack_refuses "$G" generation_config.json '{"top_p": 2}' '{"temperature": "hot"}' '{"top_k": 2.5}' \
        '{"eos_token_id": [151936]}' '{"do_sample": 1}' '{"top_k": 1, "top_k": 2}' '[]'
    # a chat reply without -n runs until the end of the turn or of the
    # context, and says where the context cut it
    "$QRUN" -m "$M" --backend emu --print-ids --chat -p Hi -c 48 >"$T/long.out" 2>"$T/long.err" ||
        fail "--chat without -n: $(cat "$T/long.err")"
    grep -q "the reply reached the end of the context (48 positions)" "$T/long.err" ||
        [ "$(wc -w <"$T/long.out")" -lt 30 ] || fail "--chat without -n: $(wc -w <"$T/long.out") tokens, $(cat "$T/long.err")"
    "$QRUN" -m "$M" --backend emu --print-ids -p Hi >"$T/plain.out" 2>/dev/null
    [ "$(wc -w <"$T/plain.out")" = 32 ] || fail "-p without -n: $(wc -w <"$T/plain.out") tokens, not 32"
    echo "ok generation_config"
    ;;

pooling)
    # an embedding checkpoint's 1_Pooling/config.json goes into the
    # container as it is (qpack info lists the section, qpack verify reads
    # it); a broken one is refused before any work, one line naming it
    P=$T/pool
    mkdir -p "$P/1_Pooling" && cp "$WORK/ckpt"/* "$P/" || fail "copying the checkpoint"
    hidden=$(jq .hidden_size "$P/config.json")
    printf '{"word_embedding_dimension": %s, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false,\n "pooling_mode_lasttoken": true, "include_prompt": true}\n' \
        "$hidden" >"$P/1_Pooling/config.json"
    "$QPACK" pack "$P" -o "$T/pool.qpk" --quiet || fail "packing with 1_Pooling/config.json"
    "$QPACK" verify "$T/pool.qpk" >/dev/null || fail "qpack verify of a container with a pooling section"
    "$QPACK" info "$T/pool.qpk" --json | jq -e '.sections | map(.name) | index("pooling")' >/dev/null ||
        fail "qpack info lists no pooling section"
    pack_refuses "$P" 1_Pooling/config.json '{"pooling_mode_cls_token": true}' \
        '{"pooling_mode_lasttoken": true, "pooling_mode_mean_tokens": true}' '{"pooling_mode_lasttoken": 1}' '{}' \
        "{\"pooling_mode_lasttoken\": true, \"word_embedding_dimension\": $((hidden + 1))}" \
        '{"pooling_mode_lasttoken": true, "pooling_mode_lasttoken": true}' '[]'
    ;;

tokenize)
    out=$(printf 'Hello, world!' | "$QRUN" tokenize -m "$M") || fail "qrun tokenize -m failed"
    [ "$out" = "9707 11 1879 0" ] || fail "tokenize -m: got '$out'"
    out=$(printf 'Hello, world!' | "$QRUN" tokenize --tokenizer "$TOKDIR/tokenizer.json") ||
        fail "qrun tokenize --tokenizer failed"
    [ "$out" = "9707 11 1879 0" ] || fail "tokenize --tokenizer: got '$out'"
    echo "ok: 9707 11 1879 0"
    ;;

generate)
    need_root
    run hello -m "$M" -p "Hello" -n 8
    [ "$rc" = 0 ] || fail "exit $rc: $(cat "$T/hello.err")"
    [ -s "$T/hello.out" ] || fail "no output"
    valid_utf8 "$T/hello.out" || fail "stdout is not valid UTF-8"
    [ ! -s "$T/hello.err" ] || fail "unexpected stderr: $(cat "$T/hello.err")"
    run ids -m "$M" -p "Hello" -n 8 --print-ids
    [ "$rc" = 0 ] && [ "$(wc -w <"$T/ids.out")" = 8 ] || fail "--print-ids -n 8: $(cat "$T/ids.out" "$T/ids.err")"
    run zero -m "$M" -p "Hello" -n 0
    [ "$rc" = 0 ] && [ ! -s "$T/zero.out" ] || fail "-n 0: exit $rc, $(cat "$T/zero.out" "$T/zero.err")"
    run sample -m "$M" -p "Hello" -n 8 --temp 0.9 --top-k 50 --top-p 0.95 --seed 3
    [ "$rc" = 0 ] && valid_utf8 "$T/sample.out" || fail "sampling: exit $rc, $(cat "$T/sample.err")"
    run stats -m "$M" -p "Hello" -n 4 --stats
    [ "$rc" = 0 ] && grep -q "backend bpf" "$T/stats.err" || fail "--stats: $(cat "$T/stats.err")"
    # tokens/s beside ms/token, each the other's inverse (to the printed digits)
    sed -n 's|.* \([0-9.]*\) ms/token (\([0-9.]*\) tokens/s) over .*|\1 \2|p' "$T/stats.err" |
        awk '{ d = 1000 / $1 - $2; if (NF != 2 || d > 0.05 * $2 + 0.1 || d < -0.05 * $2 - 0.1) exit 1; n++ }
             END { exit n != 1 }' || fail "--stats tokens/s: $(cat "$T/stats.err")"
    # QP_BPF_STATS=1: one line, every kernel with its verifier count, each
    # within the verifier's limit of 1M processed instructions
    QP_BPF_STATS=1 "$QRUN" -m "$M" --ids "1 2" -n 1 >"$T/vstats.out" 2>"$T/vstats.err" ||
        fail "QP_BPF_STATS=1: $(cat "$T/vstats.err")"
    [ "$(lines "$T/vstats.err")" = 1 ] || fail "QP_BPF_STATS=1: $(cat "$T/vstats.err")"
    for k in $(echo "$KERNELS" | tr -d '[]"' | tr , ' '); do
        n=$(grep -o " $k [0-9]*" "$T/vstats.err" | head -1 | awk '{print $2}')
        [ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" -lt 1000000 ] || fail "QP_BPF_STATS=1: $k: '$n' in $(cat "$T/vstats.err")"
    done
    echo "ok: $(cat "$T/hello.out")"
    ;;

emu_bpf)
    need_root
    for p in "Hello" "The quick brown fox jumps over the lazy dog." "日本語のテキスト 🙂"; do
        run bpf -m "$M" -p "$p" -n 12 --print-ids
        [ "$rc" = 0 ] || fail "bpf: exit $rc: $(cat "$T/bpf.err")"
        run emu -m "$M" -p "$p" -n 12 --print-ids --backend emu
        [ "$rc" = 0 ] || fail "emu: exit $rc: $(cat "$T/emu.err")"
        run bpf1 -m "$M" -p "$p" -n 12 --print-ids --threads 1
        [ "$rc" = 0 ] || fail "bpf --threads 1: exit $rc: $(cat "$T/bpf1.err")"
        [ "$(wc -w <"$T/bpf.out")" = 12 ] || fail "bpf printed $(cat "$T/bpf.out")"
        cmp -s "$T/bpf.out" "$T/emu.out" || fail "'$p': bpf $(cat "$T/bpf.out") != emu $(cat "$T/emu.out")"
        cmp -s "$T/bpf.out" "$T/bpf1.out" || fail "'$p': 2 threads != 1 thread"
        echo "ok '$p': $(cat "$T/bpf.out")"
    done
    run cbpf -m "$M" --chat -p "Hi" -n 8 --print-ids
    run cemu -m "$M" --chat -p "Hi" -n 8 --print-ids --backend emu
    cmp -s "$T/cbpf.out" "$T/cemu.out" || fail "--chat: bpf $(cat "$T/cbpf.out") != emu $(cat "$T/cemu.out")"
    ;;

chat)
    need_root
    run text -m "$M" --chat -p "Hi" -n 8
    [ "$rc" = 0 ] || fail "--chat -p: exit $rc: $(cat "$T/text.err")"
    valid_utf8 "$T/text.out" || fail "--chat -p: stdout is not valid UTF-8"
    run ids -m "$M" --chat -p "Hi" -n 8 --print-ids
    [ "$rc" = 0 ] || fail "--chat -p --print-ids: exit $rc"
    # one-shot --chat -p is the chat template's prompt, generated from like --ids
    wrapped=$(printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    run plain -m "$M" --ids "$wrapped" -n 8 --print-ids
    cmp -s "$T/ids.out" "$T/plain.out" || fail "--chat -p gave $(cat "$T/ids.out"), --ids $(cat "$T/plain.out")"
    for id in $(cat "$T/ids.out"); do
        [ "$id" != 151645 ] && [ "$id" != 151643 ] || fail "a stop id was printed: $(cat "$T/ids.out")"
    done
    run think -m "$M" --chat --think -p "Hi" -n 8 --print-ids
    [ "$rc" = 0 ] || fail "--think: exit $rc"
    wrapped=$(printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' | "$QRUN" tokenize -m "$M")
    run tplain -m "$M" --ids "$wrapped" -n 8 --print-ids
    cmp -s "$T/think.out" "$T/tplain.out" || fail "--think gave $(cat "$T/think.out"), --ids $(cat "$T/tplain.out")"
    echo "ok: $(cat "$T/ids.out") / think: $(cat "$T/think.out")"
    ;;

interactive)
    need_root
    "$QRUN" -m "$M" --temp 0 --chat -n 6 --print-ids >"$T/two.out" 2>"$T/two.err" <<'EOF'
Hi there
How are you?
EOF
    rc=$?
    [ "$rc" = 0 ] || fail "two turns: exit $rc: $(cat "$T/two.err")"
    # stderr: no prompt marker without a terminal, only each reply's note
    # that -n cut it (a random model hardly ends a turn)
    ! grep -v '^qrun: the reply was cut at -n 6 tokens$' "$T/two.err" ||
        fail "two turns: unexpected stderr: $(cat "$T/two.err")"
    [ "$(lines "$T/two.err")" = "$(grep -c . "$T/two.out")" ] ||
        fail "two turns: not one note per cut reply: $(cat "$T/two.err")"
    [ "$(lines "$T/two.out")" = 2 ] || fail "two turns: expected two replies, got: $(cat "$T/two.out")"
    r1=$(sed -n 1p "$T/two.out") r2=$(sed -n 2p "$T/two.out")
    [ -n "$r1" ] && [ -n "$r2" ] || fail "an empty reply: $(cat "$T/two.out")"
    # the KV cache is kept: turn 2 continues exactly the token sequence
    # turn 1 + reply 1 + turn 2 (chat.h's contract), as one --ids prompt
    t1=$(printf '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    t2=$(printf '<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    run whole -m "$M" --temp 0 --ids "$t1 $r1 $t2" -n 6 --print-ids
    [ "$rc" = 0 ] || fail "--ids of the conversation: exit $rc: $(cat "$T/whole.err")"
    [ "$(cat "$T/whole.out")" = "$r2" ] || fail "turn 2 gave '$r2', the whole conversation '$(cat "$T/whole.out")'"
    echo "ok: reply 1 '$r1', reply 2 '$r2'"

    printf 'Hi there\nHow are you?\n' | "$QRUN" -m "$M" --temp 0 --chat -n 6 >"$T/text.out" 2>"$T/text.err"
    rc=$?
    [ "$rc" = 0 ] || fail "text: exit $rc: $(cat "$T/text.err")"
    valid_utf8 "$T/text.out" || fail "text: not valid UTF-8"
    printf 'Hi there\nHow are you?\n' | "$QRUN" -m "$M" --temp 0 --chat -n 6 --backend emu --print-ids >"$T/emu.out" 2>/dev/null
    cmp -s "$T/two.out" "$T/emu.out" || fail "emu: $(cat "$T/emu.out") != bpf $(cat "$T/two.out")"

    # empty lines are skipped; a bad line is refused with one message, the chat goes on, exit 1
    printf 'Hi there\n\n\xff\xfe\nx\0y\nHow are you?\n' | "$QRUN" -m "$M" --temp 0 --chat -n 6 --print-ids \
        >"$T/bad.out" 2>"$T/bad.err"
    rc=$?
    [ "$rc" = 1 ] || fail "bad lines: exit $rc, expected 1"
    cmp -s "$T/two.out" "$T/bad.out" || fail "bad lines changed the replies: $(cat "$T/bad.out")"
    grep -v '^qrun: the reply was cut at -n' "$T/bad.err" >"$T/bad.refused"
    [ "$(lines "$T/bad.refused")" = 2 ] && grep -q "line 3: invalid UTF-8" "$T/bad.err" && grep -q "line 4 holds a NUL" "$T/bad.err" ||
        fail "bad lines: $(cat "$T/bad.err")"
    echo "ok: $(tr '\n' '|' <"$T/bad.err")"

    # the conversation filling the context drops its oldest turns, says so,
    # and goes on: the reply after the drop is the one a conversation that
    # began at the kept turn gives
    printf 'Hi\nAgain\nAnd again\n' | "$QRUN" -m "$M" --temp 0 --chat -n 4 --print-ids -c 40 \
        >"$T/full.out" 2>"$T/full.err"
    rc=$?
    [ "$rc" = 0 ] || fail "full context: exit $rc: $(cat "$T/full.err")"
    [ "$(lines "$T/full.out")" = 3 ] || fail "full context: expected 3 replies: $(cat "$T/full.out")"
    [ "$(grep -v '^qrun: the reply was cut at -n 4 tokens$' "$T/full.err")" = \
      "qrun: the conversation fills the context of 40 positions: dropping the oldest 1 turn" ] ||
        fail "full context: $(cat "$T/full.err")"
    r2=$(sed -n 2p "$T/full.out") r3=$(sed -n 3p "$T/full.out")
    t2=$(printf '<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' | "$QRUN" tokenize -m "$M")
    t3=$(printf '<|im_end|>\n<|im_start|>user\nAnd again<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    run kept -m "$M" --temp 0 --ids "$t2 $r2 $t3" -n 4 --print-ids
    [ "$(cat "$T/kept.out")" = "$r3" ] || fail "after the drop: '$r3', the kept turns alone: '$(cat "$T/kept.out")'"
    # a turn that cannot fit even alone is refused; the chat goes on, exit 1
    printf 'Hi\n%s\nAgain\n' "$(printf 'word %.0s' $(seq 40))" | "$QRUN" -m "$M" --temp 0 --chat -n 4 --print-ids -c 40 \
        >"$T/huge.out" 2>"$T/huge.err"
    rc=$?
    [ "$rc" = 1 ] && [ "$(lines "$T/huge.out")" = 2 ] && grep -q "input line 2: this turn and -n 4 do not fit" "$T/huge.err" ||
        fail "a turn too long: exit $rc: $(cat "$T/huge.out" "$T/huge.err")"
    echo "ok: $(cat "$T/full.err")"
    # and no input at all is a clean, empty end
    "$QRUN" -m "$M" --temp 0 --chat -n 4 </dev/null >"$T/eof.out" 2>"$T/eof.err"
    rc=$?
    [ "$rc" = 0 ] && [ ! -s "$T/eof.out" ] && [ ! -s "$T/eof.err" ] || fail "empty stdin: exit $rc"
    ;;

bad_args)
    D=$T/dir
    mkdir -p "$D"
    n=0
    bad() {
        local name=$1
        shift
        run "$name" "$@"
        expect_one_line_error "$name"
        n=$((n + 1))
    }
    bad unknown_flag -m "$M" -p hi --no-such-flag
    bad unknown_short -m "$M" -p hi -x
    bad missing_value -m "$M" -p
    bad stray_arg -m "$M" -p hi extra
    bad n_negative -m "$M" -p hi -n -1
    bad n_word -m "$M" -p hi -n ten
    bad n_huge -m "$M" -p hi -n 99999999999
    bad ctx_zero -m "$M" -p hi -c 0
    bad top_p_2 -m "$M" -p hi --top-p 2
    bad top_p_0 -m "$M" -p hi --top-p 0
    bad top_p_nan -m "$M" -p hi --top-p nan
    bad threads_3 -m "$M" -p hi --threads 3
    bad threads_0 -m "$M" -p hi --threads 0
    bad threads_word -m "$M" -p hi --threads two
    bad temp_negative -m "$M" -p hi --temp -1
    bad temp_inf -m "$M" -p hi --temp inf
    bad temp_trailing -m "$M" -p hi --temp 0.5x
    bad top_k_negative -m "$M" -p hi --top-k -5
    bad top_k_fraction -m "$M" -p hi --top-k 2.5
    bad seed_negative -m "$M" -p hi --seed -1
    bad seed_word -m "$M" -p hi --seed abc
    bad backend -m "$M" -p hi --backend gpu
    bad kv_cache -m "$M" -p hi --kv-cache int4
    bad kv_cache_ref -m "$D" -p hi --backend ref --kv-cache int8
    bad no_model -p hi
    bad no_prompt -m "$M"
    bad both_prompts -m "$M" -p hi --ids 1
    bad think_alone -m "$M" -p hi --think
    bad missing_model -m "$T/no-such.qpk" -p hi
    bad dir_model -m "$D" -p hi
    bad dir_model_emu -m "$D" -p hi --backend emu
    bad ref_file -m "$M" -p hi --backend ref
    bad utf8_prompt -m "$M" -p $'ab\xffcd'
    bad utf8_chat_prompt -m "$M" --chat -p $'\xc3('
    bad ids_word -m "$M" --ids "12 abc"
    bad ids_empty -m "$M" --ids " , "
    bad ids_negative -m "$M" --ids "-3"
    grep -q -- "--top-p" "$T/top_p_2.err" && grep -q -- "--threads" "$T/threads_3.err" &&
        grep -q -- "-n" "$T/n_negative.err" && grep -q -- "--seed" "$T/seed_word.err" &&
        grep -q -- "--temp" "$T/temp_negative.err" && grep -q -- "--top-k" "$T/top_k_fraction.err" ||
        fail "a message does not name its option"
    grep -q "is a folder, not a .qpk container (nor a Hugging Face checkpoint folder: it has no config.json)" \
        "$T/dir_model.err" || fail "dir_model: $(cat "$T/dir_model.err")"
    # a Hugging Face folder: pack it first; a mistyped option: the closest
    # one; the container without -m: -m
    bad hf_folder -m "$WORK/ckpt" -p hi
    grep -qF "is a Hugging Face checkpoint folder: pack it first: qpack pack $WORK/ckpt -o ckpt.qpk" \
        "$T/hf_folder.err" || fail "hf_folder: $(cat "$T/hf_folder.err")"
    bad typo -m "$M" -p hi --tmep 0.5
    grep -qF "unknown option '--tmep': did you mean --temp? (see qrun --help)" "$T/typo.err" ||
        fail "typo: $(cat "$T/typo.err")"
    bad typo_value -m "$M" -p hi --top_p=0.5
    grep -qF "did you mean --top-p?" "$T/typo_value.err" || fail "typo_value: $(cat "$T/typo_value.err")"
    bad far_off -m "$M" -p hi --xyzzy
    ! grep -q "did you mean" "$T/far_off.err" || fail "far_off guesses: $(cat "$T/far_off.err")"
    bad positional_qpk "$M" -p hi
    # a mistyped subcommand: the closest one, as qpack's
    bad command_typo srve -m "$M"
    grep -qF "qrun: unknown command 'srve': did you mean serve? (see qrun --help)" "$T/command_typo.err" ||
        fail "command_typo: $(cat "$T/command_typo.err")"
    bad command_typo2 -m "$M" tokenise
    grep -qF "did you mean tokenize?" "$T/command_typo2.err" || fail "command_typo2: $(cat "$T/command_typo2.err")"
    grep -qF "did you mean -m $M?" "$T/positional_qpk.err" || fail "positional_qpk: $(cat "$T/positional_qpk.err")"
    grep -q "No such file" "$T/missing_model.err" || fail "missing_model: $(cat "$T/missing_model.err")"
    grep -q "UTF-8" "$T/utf8_prompt.err" || fail "utf8_prompt: $(cat "$T/utf8_prompt.err")"
    if [ "$(id -u)" = 0 ]; then
        bad ids_out_of_vocab -m "$M" --ids "9707 151936"
        bad ids_out_of_vocab_emu -m "$M" --ids "9707 4294967296" --backend emu
        grep -q "vocabulary" "$T/ids_out_of_vocab.err" || fail "ids_out_of_vocab: $(cat "$T/ids_out_of_vocab.err")"
    fi
    run help --help
    [ "$rc" = 0 ] && grep -q -- "--chat" "$T/help.out" || fail "--help"
    echo "ok: $n bad command lines, one line each"
    ;;

context)
    need_root
    run long -m "$M" -c 8 -p "one two three four five six seven eight nine ten eleven twelve"
    expect_one_line_error long
    grep -q "more than the context of 8" "$T/long.err" || fail "long prompt: $(cat "$T/long.err")"
    run long_ids -m "$M" -c 4 --ids "1 2 3 4 5" --backend emu
    expect_one_line_error long_ids
    # 2 prompt tokens + 6 fed replies fill -c 8: 7 tokens print, the 8th is past the context
    run fits -m "$M" -c 8 --ids "9707 11" -n 7 --print-ids
    [ "$rc" = 0 ] && [ "$(wc -w <"$T/fits.out")" = 7 ] || fail "-c 8 -n 7: exit $rc, $(cat "$T/fits.out" "$T/fits.err")"
    # one more is refused before the load, as bad usage (2), naming what to change
    run past -m "$M" -c 8 --ids "9707 11" -n 8 --print-ids
    expect_one_line_error past
    [ "$rc" = 2 ] || fail "-c 8 -n 8: exit $rc, expected 2"
    # 2 + 8 - 1: the last token made is printed, not fed, and the message says so
    grep -q "the prompt (2 tokens) and -n 8 need 9 positions (the last token made is printed, not fed), more than the context of 8: raise -c to 9 (at most 2048) or lower -n" "$T/past.err" ||
        fail "-c 8 -n 8: $(cat "$T/past.err")"
    # at the model's maximum (2048, also the default context here) -c cannot help
    for c in "" "-c 2048"; do
        run max -m "$M" $c --ids "9707 11" -n 2048 --print-ids
        expect_one_line_error max
        [ "$rc" = 2 ] && grep -q "more than this model's maximum of 2048: lower -n$" "$T/max.err" ||
            fail "-n 2048 $c: exit $rc: $(cat "$T/max.err")"
    done
    # -c past the maximum is bad usage too, like -c 0
    run cmax -m "$M" -c 3000 --ids "9707 11" -n 2
    expect_one_line_error cmax
    [ "$rc" = 2 ] && grep -q -- "-c 3000 is past this model's maximum of 2048 positions" "$T/cmax.err" ||
        fail "-c 3000: exit $rc: $(cat "$T/cmax.err")"
    echo "ok: $(cat "$T/long.err") / $(cat "$T/past.err")"
    ;;

lifecycle)
    need_root
    command -v bpftool >/dev/null && command -v jq >/dev/null || skip "needs bpftool and jq"
    base_orphans=$(orphans)
    run normal -m "$M" -p "Hello" -n 4
    [ "$rc" = 0 ] || fail "normal run: exit $rc"
    no_leftovers "a normal run"
    run after_load -m "$M" --ids "1 151936"
    expect_one_line_error after_load
    no_leftovers "an error exit"
    for sig in INT TERM; do
        want=$([ $sig = INT ] && echo 130 || echo 143)
        start_and_signal sig$sig $sig -m "$M" -p "Hello" -n 2000
        [ "$rc" = "$want" ] || fail "SIG$sig: exit $rc, expected $want: $(cat "$T/sig$sig.err")"
        [ "$(cat "$T/sig$sig.err")" = "qrun: interrupted" ] || fail "SIG$sig: stderr $(cat "$T/sig$sig.err")"
        valid_utf8 "$T/sig$sig.out" || fail "SIG$sig: the text printed is not valid UTF-8"
        gone $ids
        no_leftovers "SIG$sig"
        echo "ok SIG$sig: exit $rc, held $(echo $ids | wc -w) programs, none left"
    done
    # interrupted while waiting for a chat line
    mkfifo "$T/fifo"
    (printf 'Hi\n'; exec sleep 30) >"$T/fifo" &
    writer=$!
    IN=$T/fifo UNTIL_LINE=1 start_and_signal chatINT INT -m "$M" --chat -n 4 --print-ids
    kill $writer 2>/dev/null
    wait $writer 2>/dev/null
    [ "$rc" = 130 ] || fail "chat SIGINT: exit $rc: $(cat "$T/chatINT.err")"
    gone $ids
    no_leftovers "SIGINT in a chat"
    echo "ok: no BPF program left after any run"
    ;;

unprivileged)
    need_root
    command -v setpriv >/dev/null || skip "needs setpriv"
    # the build tree may sit in a folder only root can enter (a fresh
    # clone in a mktemp -d): give nobody its own readable copies
    U=$(mktemp -d /tmp/qp-unpriv-XXXXXX) || fail "mktemp"
    trap 'rm -rf "$U"' EXIT
    cp "$QRUN" "$U/qrun" && cp "$M" "$U/M.qpk" && chmod 755 "$U" "$U/qrun" && chmod 644 "$U/M.qpk"
    M=$U/M.qpk
    nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$@"; }
    nobody "$U/qrun" -m "$M" -p "Hello" -n 4 >"$T/bpf.out" 2>"$T/bpf.err"
    rc=$?
    expect_one_line_error bpf
    grep -q "CAP_BPF" "$T/bpf.err" && grep -q "root" "$T/bpf.err" && grep -q "uid 65534" "$T/bpf.err" &&
        grep -q -- "--backend emu" "$T/bpf.err" ||
        fail "message: $(cat "$T/bpf.err")"
    # root with CAP_BPF alone loads a socket filter but not the kernels:
    # told what is missing, not that the verifier refused them
    setpriv --inh-caps=-all --bounding-set=-all,+bpf "$U/qrun" -m "$M" -p "Hello" -n 4 >"$T/bpf.out" 2>"$T/bpf.err"
    rc=$?
    expect_one_line_error bpf
    grep -q "CAP_PERFMON" "$T/bpf.err" || fail "CAP_BPF alone: $(cat "$T/bpf.err")"
    # the same user can read the model: only the privilege was missing
    nobody "$U/qrun" -m "$M" -p "Hello" -n 4 --backend emu >"$T/emu.out" 2>"$T/emu.err"
    rc=$?
    [ "$rc" = 0 ] || fail "emu as nobody: exit $rc: $(cat "$T/emu.err")"
    ;;

lost_output)
    # stdout on /dev/full: every write fails with ENOSPC; nothing may pass for success
    "$QRUN" -m "$M" -p "Hello" -n 8 --backend emu >/dev/full 2>"$T/emu.err"
    rc=$?; expect_lost_output emu qrun
    "$QRUN" -m "$M" -p "Hello" -n 8 --backend emu --print-ids >/dev/full 2>"$T/ids.err"
    rc=$?; expect_lost_output ids qrun
    # a chat stops at the first reply it cannot write, not at the end of its input
    printf 'Hi\nAgain\n' | "$QRUN" -m "$M" --chat -n 4 --backend emu >/dev/full 2>"$T/chat.err"
    rc=$?; expect_lost_output chat qrun
    printf 'Hello, world!' | "$QRUN" tokenize -m "$M" >/dev/full 2>"$T/tok.err"
    rc=$?; expect_lost_output tok "qrun tokenize"
    printf '9707 11' | "$QRUN" detokenize -m "$M" >/dev/full 2>"$T/detok.err"
    rc=$?; expect_lost_output detok "qrun detokenize"
    printf '"Hello"\n"world"\n' | "$QRUN" tokenize -m "$M" --jsonl >/dev/full 2>"$T/jsonl.err"
    rc=$?; expect_lost_output jsonl "qrun tokenize"
    "$QRUN" --help >/dev/full 2>"$T/help.err"
    rc=$?; expect_lost_output help qrun
    if [ "$(id -u)" = 0 ]; then
        "$QRUN" -m "$M" -p "Hello" -n 8 >/dev/full 2>"$T/bpf.err"
        rc=$?; expect_lost_output bpf qrun
    fi
    ;;

closed_pipe)
    # `qrun ... | head -c 1`: qrun ends at the next token it cannot write,
    # quietly, with status 141, instead of dying by SIGPIPE or generating on.
    # 2000 tokens take minutes here; stopping after the first few, seconds.
    command -v perl >/dev/null || skip "needs perl"
    backends=emu
    [ "$(id -u)" = 0 ] && backends="emu bpf"
    for b in $backends; do
        start=$SECONDS
        how=$(ended_after_first_byte "$QRUN" -m "$M" -p "Hello" -n 2000 --backend $b 2>"$T/$b.err")
        took=$((SECONDS - start))
        [ "$how" = "exit 141" ] || fail "$b: qrun ended by '$how', expected 'exit 141'"
        [ ! -s "$T/$b.err" ] || fail "$b: stderr: $(cat "$T/$b.err")"
        [ "$took" -le 20 ] || fail "$b: qrun took $took s to stop after its reader went away"
        echo "ok $b: $how after $took s, nothing on stderr"
    done
    ;;

detokenize)
    # ids past the tokenizer's 151,669 but inside the model's 151,936 (Qwen3's
    # padding) print no text, as in generation; past the model's, an error
    out=$(printf '9707 151935 11 151669' | "$QRUN" detokenize -m "$M") || fail "padding ids: exit $?"
    [ "$out" = "Hello," ] || fail "padding ids: got '$out'"
    printf '9707 151936' | "$QRUN" detokenize -m "$M" >"$T/past.out" 2>"$T/past.err"
    rc=$?
    expect_one_line_error past
    grep -q "151936" "$T/past.err" || fail "past: $(cat "$T/past.err")"
    printf '[9707, 151935, 11]\n' | "$QRUN" detokenize -m "$M" --jsonl >"$T/jsonl.out" || fail "--jsonl: exit $?"
    [ "$(cat "$T/jsonl.out")" = '"Hello,"' ] || fail "--jsonl: got $(cat "$T/jsonl.out")"
    # a tokenizer alone knows no model: an id it lacks is an error (qrun detokenize --help)
    printf '9707 151935' | "$QRUN" detokenize --tokenizer "$TOKDIR/tokenizer.json" >"$T/tok.out" 2>"$T/tok.err"
    rc=$?
    expect_one_line_error tok
    "$QRUN" detokenize --help | grep -q "padding" || fail "detokenize --help does not say what padding ids do"
    # generation and detokenize agree: the text qrun streams is the text of the ids it generates
    run ids -m "$M" -p "Hello" -n 16 --backend emu --print-ids
    [ "$rc" = 0 ] || fail "--print-ids: exit $rc: $(cat "$T/ids.err")"
    run text -m "$M" -p "Hello" -n 16 --backend emu
    [ "$rc" = 0 ] || fail "text: exit $rc: $(cat "$T/text.err")"
    "$QRUN" detokenize -m "$M" <"$T/ids.out" >"$T/detok.out" || fail "detokenize of the generated ids: exit $?"
    printf '\n' >>"$T/detok.out" # qrun ends a reply with a newline
    cmp -s "$T/detok.out" "$T/text.out" ||
        fail "qrun printed '$(cat "$T/text.out")', detokenize of its ids '$(cat "$T/detok.out")'"
    echo "ok: padding ids print nothing; generation == detokenize: $(cat "$T/text.out")"
    ;;

prompt_sources)
    # -f FILE and -p - give the tokens of -p TEXT (one newline at the end of
    # a file is no text, as llama.cpp reads -f); their UTF-8 is checked
    run text -m "$M" -p "Hello there" -n 4 --backend emu --print-ids
    [ "$rc" = 0 ] || fail "-p: exit $rc: $(cat "$T/text.err")"
    printf 'Hello there\n' >"$T/p.txt"
    run file -m "$M" -f "$T/p.txt" -n 4 --backend emu --print-ids
    cmp -s "$T/text.out" "$T/file.out" || fail "-f gave $(cat "$T/file.out"), -p $(cat "$T/text.out")"
    printf 'Hello there' | "$QRUN" -m "$M" -p - -n 4 --backend emu --print-ids >"$T/stdin.out" 2>"$T/stdin.err" ||
        fail "-p -: $(cat "$T/stdin.err")"
    cmp -s "$T/text.out" "$T/stdin.out" || fail "-p - gave $(cat "$T/stdin.out"), -p $(cat "$T/text.out")"
    # the chat template around -f's text, and the system prompt
    run chat -m "$M" --chat --system "Be brief." -f "$T/p.txt" -n 4 --backend emu --print-ids
    [ "$rc" = 0 ] || fail "--chat --system -f: exit $rc: $(cat "$T/chat.err")"
    wrapped=$(printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    run plain -m "$M" --ids "$wrapped" -n 4 --backend emu --print-ids
    cmp -s "$T/chat.out" "$T/plain.out" || fail "--system gave $(cat "$T/chat.out"), its template $(cat "$T/plain.out")"
    printf 'ab\xffcd' >"$T/bad.txt"
    run badfile -m "$M" -f "$T/bad.txt" --backend emu
    expect_one_line_error badfile
    grep -q "invalid UTF-8 at byte offset 2" "$T/badfile.err" || fail "bad -f: $(cat "$T/badfile.err")"
    run nofile -m "$M" -f "$T/none.txt" --backend emu
    expect_one_line_error nofile
    run twice -m "$M" -f "$T/p.txt" -p hi
    expect_one_line_error twice
    [ "$rc" = 2 ] || fail "-f with -p: exit $rc"
    run sysalone -m "$M" -p hi --system "x"
    expect_one_line_error sysalone
    echo "ok: -f, -p - and -p give $(cat "$T/text.out"); --system: $(cat "$T/chat.out")"
    ;;

stop)
    # --stop: the reply ends where its text first holds the string, which
    # is not printed (a string across tokens too); one never met changes nothing
    args=(-m "$M" -p "Hello" -n 16 --backend emu --temp 0.9 --top-k 0 --top-p 1 --min-p 0 --seed 3)
    run full "${args[@]}"
    [ "$rc" = 0 ] || fail "exit $rc: $(cat "$T/full.err")"
    full=$(cat "$T/full.out")
    for stop in "Libre" "lter Lib" "renderItem"; do
        at=$(perl -e 'print index($ARGV[0], $ARGV[1])' "$full" "$stop")
        [ "$at" -gt 0 ] || fail "the sample text '$full' lacks '$stop'"
        want=$(perl -e 'print substr($ARGV[0], 0, $ARGV[1])' "$full" "$at")
        run cut "${args[@]}" --stop "$stop" --stop "never in this text"
        [ "$rc" = 0 ] || fail "--stop '$stop': exit $rc: $(cat "$T/cut.err")"
        [ "$(cat "$T/cut.out")" = "$want" ] || fail "--stop '$stop': '$(cat "$T/cut.out")', expected '$want'"
        echo "ok --stop '$stop': '$want'"
    done
    run none "${args[@]}" --stop "never in this text"
    cmp -s "$T/full.out" "$T/none.out" || fail "a stop string never met changed the text"
    run ids "${args[@]}" --stop x --print-ids
    expect_one_line_error ids
    ;;

sampling)
    # without a sampling option or a generation config: llama.cpp's default
    # (temp 0.8, top-k 40, top-p 0.95, min-p 0.05), as qrun serve's; a field
    # given changes only itself; --lookup alone is greedy
    run default -m "$M" -p "Hello" -n 12 --backend emu --print-ids --seed 4
    run written -m "$M" -p "Hello" -n 12 --backend emu --print-ids --seed 4 --temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05
    cmp -s "$T/default.out" "$T/written.out" || fail "the default: $(cat "$T/default.out"), written out $(cat "$T/written.out")"
    run topk -m "$M" -p "Hello" -n 12 --backend emu --print-ids --seed 4 --top-k 40
    cmp -s "$T/default.out" "$T/topk.out" || fail "--top-k 40 alone: $(cat "$T/topk.out"), the default $(cat "$T/default.out")"
    run flat -m "$M" -p "Hello" -n 12 --backend emu --print-ids --seed 4 --temp 0.8 --top-k 0 --top-p 1 --min-p 0
    ! cmp -s "$T/default.out" "$T/flat.out" || fail "the default is temp 0.8 without its cuts: $(cat "$T/flat.out")"
    run greedy -m "$M" -p "Hello" -n 12 --backend emu --print-ids --temp 0
    ! cmp -s "$T/default.out" "$T/greedy.out" || fail "the default is greedy: $(cat "$T/default.out")"
    run lookup -m "$M" -p "Hello" -n 12 --backend emu --print-ids --lookup 4
    cmp -s "$T/greedy.out" "$T/lookup.out" || fail "--lookup alone: $(cat "$T/lookup.out"), greedy $(cat "$T/greedy.out")"
    run stats -m "$M" -p "Hello" -n 1 --backend emu --stats
    grep -q "sampling as llama.cpp's default (the model has no generation_config.json): temp 0.8, top-k 40, top-p 0.95, min-p 0.05" \
        "$T/stats.err" || fail "--stats does not say the default: $(cat "$T/stats.err")"
    # --min-p 1 keeps only the most likely token: greedy at any temperature;
    # --repeat-penalty changes greedy decoding of a looping model, the same
    # way each run, and not at all with --repeat-last-n 0
    run minp -m "$M" -p "Hello" -n 12 --backend emu --print-ids --temp 1.5 --min-p 1 --seed 9
    cmp -s "$T/greedy.out" "$T/minp.out" || fail "--min-p 1: $(cat "$T/minp.out"), greedy $(cat "$T/greedy.out")"
    run pen -m "$M" -p "Hello" -n 12 --backend emu --print-ids --temp 0 --repeat-penalty 5
    run pen2 -m "$M" -p "Hello" -n 12 --backend emu --print-ids --temp 0 --repeat-penalty 5 --repeat-last-n -1
    run off -m "$M" -p "Hello" -n 12 --backend emu --print-ids --temp 0 --repeat-penalty 5 --repeat-last-n 0
    [ "$(tr ' ' '\n' <"$T/greedy.out" | sort -u | wc -l)" = 1 ] || fail "greedy does not loop: $(cat "$T/greedy.out")"
    [ "$(tr ' ' '\n' <"$T/pen.out" | sort -u | wc -l)" -gt 6 ] || fail "--repeat-penalty 5 still loops: $(cat "$T/pen.out")"
    cmp -s "$T/greedy.out" "$T/off.out" || fail "--repeat-last-n 0 changed greedy decoding"
    run again -m "$M" -p "Hello" -n 12 --backend emu --print-ids --temp 0 --repeat-penalty 5
    cmp -s "$T/pen.out" "$T/again.out" || fail "--repeat-penalty is not repeatable"
    for bad in "--min-p 2" "--min-p -0.1" "--repeat-penalty 0" "--repeat-last-n -2" "--repeat-last-n x"; do
        run bad -m "$M" -p hi $bad
        expect_one_line_error bad
        [ "$rc" = 2 ] || fail "$bad: exit $rc"
    done
    run look -m "$M" -p hi --lookup 4 --repeat-penalty 2
    expect_one_line_error look
    echo "ok: greedy $(cat "$T/greedy.out") / penalised $(cat "$T/pen.out")"
    ;;

chat_commands)
    # /clear forgets the conversation: the next turn answers as a fresh chat;
    # a line ending in \ goes on; /bye ends the chat (the rest is not read)
    printf 'Hi there\n' | "$QRUN" -m "$M" --temp 0 --chat -n 6 --print-ids --backend emu >"$T/fresh.out" 2>"$T/fresh.err" ||
        fail "fresh: $(cat "$T/fresh.err")"
    printf 'How are you?\n/clear\nHi there\n/bye\nAgain\n' | "$QRUN" -m "$M" --temp 0 --chat -n 6 --print-ids --backend emu \
        >"$T/clear.out" 2>"$T/clear.err"
    rc=$?
    [ "$rc" = 0 ] && ! grep -v '^qrun: \(the reply was cut at -n 6 tokens\|the conversation is cleared\)$' "$T/clear.err" ||
        fail "/clear: exit $rc: $(cat "$T/clear.err")"
    [ "$(lines "$T/clear.out")" = 2 ] || fail "/bye did not end the chat: $(cat "$T/clear.out")"
    [ "$(sed -n 2p "$T/clear.out")" = "$(cat "$T/fresh.out")" ] ||
        fail "after /clear: '$(sed -n 2p "$T/clear.out")', a fresh chat: '$(cat "$T/fresh.out")'"
    printf 'one\\\ntwo\n' | "$QRUN" -m "$M" --temp 0 --chat -n 6 --print-ids --backend emu >"$T/cont.out" 2>"$T/cont.err" ||
        fail "continued line: $(cat "$T/cont.out")"
    run joined -m "$M" --temp 0 --chat -p "one
two" -n 6 --print-ids --backend emu
    [ "$(cat "$T/cont.out")" = "$(cat "$T/joined.out")" ] ||
        fail "a line ending in \\ gave '$(cat "$T/cont.out")', the two lines as one turn '$(cat "$T/joined.out")'"
    # /help, /system, /think, // and an unknown command: none reaches the
    # model; /system starts the conversation again under the new prompt,
    # as --system does; // sends the rest
    printf '/help\n/nope\n/think maybe\n/system Be brief.\nHi there\n/clear\n//x\n/clear\n/think on\nHi there\n' |
        "$QRUN" -m "$M" --temp 0 --chat -n 6 --print-ids --backend emu >"$T/cmd.out" 2>"$T/cmd.err" || fail "commands: $(cat "$T/cmd.err")"
    [ "$(lines "$T/cmd.out")" = 3 ] || fail "commands: expected 3 replies: $(cat "$T/cmd.out") / $(cat "$T/cmd.err")"
    for want in "the chat's commands" "  /system TEXT" "unknown command '/nope'" "/think takes on or off, not 'maybe'" \
                "system prompt set; the conversation starts again" "the conversation is cleared" "thinking on"; do
        grep -qF "$want" "$T/cmd.err" || fail "commands: no '$want' in: $(cat "$T/cmd.err")"
    done
    run sys -m "$M" --temp 0 --chat --system "Be brief." -p "Hi there" -n 6 --print-ids --backend emu
    [ "$(sed -n 1p "$T/cmd.out")" = "$(cat "$T/sys.out")" ] || fail "/system: '$(sed -n 1p "$T/cmd.out")', --system: '$(cat "$T/sys.out")'"
    run slash -m "$M" --temp 0 --chat --system "Be brief." -p "/x" -n 6 --print-ids --backend emu
    [ "$(sed -n 2p "$T/cmd.out")" = "$(cat "$T/slash.out")" ] || fail "//x: '$(sed -n 2p "$T/cmd.out")', -p /x: '$(cat "$T/slash.out")'"
    run think -m "$M" --temp 0 --chat --system "Be brief." --think -p "Hi there" -n 6 --print-ids --backend emu
    [ "$(sed -n 3p "$T/cmd.out")" = "$(cat "$T/think.out")" ] || fail "/think on: '$(sed -n 3p "$T/cmd.out")', --think: '$(cat "$T/think.out")'"
    echo "ok: /clear gives the fresh reply '$(cat "$T/fresh.out")'; continued: '$(cat "$T/cont.out")'"
    ;;

chat_thinking)
    # --chat --think: the reasoning on stderr, the answer on stdout, as an
    # independent split (python) of the same reply's text says; the biases
    # make a random model write <think> and </think> often
    command -v python3 >/dev/null || skip "needs python3"
    bias="--logit-bias 151667=10 --logit-bias 151668=10"
    seen=0
    for seed in 1 2 3 4 5 6 7 8; do
        run ids$seed -m "$M" --chat --think -p Hi $bias --temp 1 --seed $seed -n 30 --backend emu --print-ids
        [ "$rc" = 0 ] || fail "ids, seed $seed: $(cat "$T/ids$seed.err")"
        "$QRUN" detokenize -m "$M" <"$T/ids$seed.out" >"$T/text$seed" || fail "detokenize"
        run split$seed -m "$M" --chat --think -p Hi $bias --temp 1 --seed $seed -n 30 --backend emu
        [ "$rc" = 0 ] || fail "text, seed $seed: $(cat "$T/split$seed.err")"
        grep -v '^qrun: the reply was cut at -n 30 tokens$' "$T/split$seed.err" >"$T/reason$seed"
        python3 - "$T/text$seed" "$T/reason$seed" "$T/split$seed.out" <<'PY' || fail "seed $seed: the split differs"
import sys
text = open(sys.argv[1], encoding="utf-8").read()
got_reason = open(sys.argv[2], encoding="utf-8").read()
got_answer = open(sys.argv[3], encoding="utf-8").read()
blank = " \n\r\t"
t = text.lstrip(blank)
if t.startswith("<think>"):
    body = t[len("<think>"):]
    reason, sep, answer = body.partition("</think>")
    reason, answer = reason.strip(blank), answer.lstrip(blank)
else:
    reason, answer = "", text   # leading blanks kept
want_reason = reason + "\n" if reason else ""
assert got_reason == want_reason, ("reasoning", got_reason, want_reason)
assert got_answer == answer + "\n", ("answer", got_answer, answer)
print(1 if reason else 0)
PY
        seen=$((seen + $(python3 -c 'import sys; print(1 if open(sys.argv[1]).read() else 0)' "$T/reason$seed")))
    done
    [ "$seen" -ge 1 ] || fail "only $seen of 8 replies had reasoning: the test shows nothing"
    echo "ok: 8 replies split as python splits them, $seen with reasoning"
    ;;

chat_budget)
    # a chat reply without -n: at most 1024 tokens when the model carries no
    # generation config (a random model never ends its turn), said after
    # its line; with one, until the end of the turn or of the context
    backend=emu
    [ "$(id -u)" = 0 ] && backend=bpf
    run plain -m "$M" --backend $backend --print-ids --chat -p Hi --temp 0
    [ "$rc" = 0 ] || fail "no generation config: $(cat "$T/plain.err")"
    [ "$(wc -w <"$T/plain.out")" = 1024 ] || fail "no generation config: $(wc -w <"$T/plain.out") tokens, not 1024"
    [ "$(cat "$T/plain.err")" = "qrun: the reply was cut at 1024 tokens, a chat's default for a model without a generation_config.json (-n sets another)" ] ||
        fail "no generation config: stderr: $(cat "$T/plain.err")"
    G=$T/gc
    mkdir -p "$G" && cp "$WORK/ckpt"/* "$G/" || fail "copying the checkpoint"
    printf '{"do_sample": false}' >"$G/generation_config.json"
    "$QPACK" pack "$G" -o "$T/gc.qpk" --quiet || fail "packing with generation_config.json"
    run gc -m "$T/gc.qpk" --backend $backend --print-ids --chat -p Hi -c 1100
    [ "$rc" = 0 ] || fail "generation config: $(cat "$T/gc.err")"
    [ "$(cat "$T/gc.err")" = "qrun: the reply reached the end of the context (1100 positions)" ] ||
        fail "generation config: stderr: $(cat "$T/gc.err")"
    [ "$(wc -w <"$T/gc.out")" -gt 1024 ] || fail "generation config: $(wc -w <"$T/gc.out") tokens"
    echo "ok: $(wc -w <"$T/plain.out") tokens without a generation config, $(wc -w <"$T/gc.out") with one (-c 1100)"
    ;;

info_units)
    # qpack info and verify give the file's size in the unit that fits it
    # (the 41 MB container here is not "0.04 GB"), figured from its bytes
    mb=$(stat -c %s "$M" | awk '{ printf "%.1f MB", $1 / 1e6 }')
    "$QPACK" info "$M" >"$T/info.out" || fail "qpack info"
    grep -qF ": $mb, container format" "$T/info.out" || fail "qpack info: not $mb: $(head -1 "$T/info.out")"
    "$QPACK" verify "$M" >"$T/verify.out" || fail "qpack verify"
    grep -qF "tensors, $mb verified)" "$T/verify.out" || fail "qpack verify: not $mb: $(cat "$T/verify.out")"
    echo "ok: $(head -1 "$T/info.out") / $(cat "$T/verify.out")"
    ;;

notes)
    # a note after a reply starts its own line, with stdout and stderr on
    # one terminal too (2>&1): the reply's line ends first, one-shot and
    # interactive alike; a reply the model ends at once says so
    end="qrun: the reply reached the end of the context (48 positions)"
    "$QRUN" -m "$M" --backend emu --print-ids --chat -p Hi -c 48 --temp 0 >"$T/one.all" 2>&1 ||
        fail "one-shot: $(cat "$T/one.all")"
    [ "$(tail -1 "$T/one.all")" = "$end" ] || fail "one-shot: the note is not a line of its own: $(cat "$T/one.all")"
    [ "$(grep -c . "$T/one.all")" = 2 ] || fail "one-shot: expected the reply's line, then the note: $(cat "$T/one.all")"
    printf 'Hi\n' | "$QRUN" -m "$M" --backend emu --print-ids --chat -c 48 --temp 0 >"$T/chat.all" 2>&1 ||
        fail "interactive: $(cat "$T/chat.all")"
    [ "$(tail -1 "$T/chat.all")" = "$end" ] || fail "interactive: the note is not a line of its own: $(cat "$T/chat.all")"
    # <|im_end|> biased first: the reply is empty, and stderr says why
    for think in "" --think; do
        run empty$think -m "$M" --backend emu --chat $think -p Hello --logit-bias 151645=100 --temp 0
        [ "$rc" = 0 ] && [ ! -s "$T/empty$think.out" ] || fail "empty reply $think: exit $rc, $(cat "$T/empty$think.out")"
        [ "$(cat "$T/empty$think.err")" = "qrun: the reply is empty: the model ended its turn at once" ] ||
            fail "empty reply $think: stderr: $(cat "$T/empty$think.err")"
    done
    echo "ok: $(tail -1 "$T/one.all") / $(cat "$T/empty.err")"
    ;;

chat_keys)
    # on a terminal (tmux): Ctrl-C stops the reply and returns to the prompt
    # within 0.5 s, the chat goes on; lines are edited (libedit: Up recalls
    # the last line, Ctrl-A goes to its start); Ctrl-C at the prompt ends
    # qrun (130) and leaves the terminal's settings as they were
    command -v tmux >/dev/null || skip "needs tmux (scripts/install_deps.sh)"
    S=qrun-keys-$$
    sock=$T/tmux.sock
    tm() { tmux -S "$sock" "$@"; }
    trap 'tm kill-server 2>/dev/null' EXIT
    tm new-session -d -s $S -x 200 -y 50 \
        "trap '' INT; stty -g >'$T/stty.before'; '$QRUN' -m '$M' --chat -n 2000 --backend emu --print-ids;
         echo \$? >'$T/status'; stty -g >'$T/stty.after'; sleep 30"
    screen() { tm capture-pane -p -t $S -S -200; }
    ms() { date +%s%3N; }
    # wait_for PATTERN: until the screen's last line matches (10 s); seen_ms:
    # when the matching screen had been captured. The harness's own costs
    # (tmux's send-keys, the grep after the capture) stay out of the
    # figures below, which matter on a loaded machine
    wait_for() {
        local i shot
        for i in $(seq 200); do
            shot=$(screen)
            seen_ms=$(ms)
            printf '%s\n' "$shot" | grep -v '^$' | tail -1 | grep -Eq "$1" && return 0
            sleep 0.05
        done
        fail "waited for '$1'; screen: $(screen | grep -v '^$' | tail -3)"
    }
    wait_for '^> ?$'
    screen | grep -q "^qrun: a chat with $M (q24, emu, [0-9]* positions): /help lists the commands" ||
        fail "no banner: $(screen | grep -v '^$' | head -3)"
    tm send-keys -t $S "/help" Enter
    wait_for '^> ?$'
    screen | grep -qF "  /think on|off" || fail "/help on the terminal: $(screen | grep -v '^$' | tail -8)"
    for turn in Hi Again; do
        tm send-keys -t $S "$turn" Enter
        wait_for '^[0-9]+ [0-9]+ [0-9]+ '       # the reply is streaming
        tm send-keys -t $S C-c
        t0=$(ms)                                # the key is in the terminal
        wait_for '^> ?$'
        took=$((seen_ms - t0))
        echo "ok: Ctrl-C in reply to '$turn': back at the prompt in $took ms"
        [ "$took" -le 500 ] || fail "Ctrl-C took $took ms to stop the reply"
    done
    tm send-keys -t $S Up
    wait_for '^> Again$'
    tm send-keys -t $S C-a "Say "
    wait_for '^> Say Again$'
    tm send-keys -t $S Enter
    wait_for '^[0-9]+ [0-9]+ [0-9]+ '
    tm send-keys -t $S C-c
    wait_for '^> ?$'
    ! screen | grep -qF '^[[A' || fail "Up was not edited: $(screen | grep -v '^$' | tail -3)"
    echo "ok: Up recalled the last line, Ctrl-A and typing edited it, the edited line was sent"
    tm send-keys -t $S C-c
    t0=$(ms)
    for i in $(seq 100); do [ -s "$T/status" ] && break; sleep 0.05; done
    took=$(($(ms) - t0))
    [ "$(cat "$T/status" 2>/dev/null)" = 130 ] || fail "Ctrl-C at the prompt: status '$(cat "$T/status" 2>/dev/null)'"
    [ "$took" -le 500 ] || fail "Ctrl-C at the prompt took $took ms"
    screen | grep -q "^qrun: interrupted$" || fail "screen: $(screen | grep -v '^$' | tail -5)"
    for i in $(seq 40); do [ -s "$T/stty.after" ] && break; sleep 0.05; done
    cmp -s "$T/stty.before" "$T/stty.after" ||
        fail "the terminal's settings changed: $(cat "$T/stty.before") -> $(cat "$T/stty.after" 2>/dev/null)"
    echo "ok: Ctrl-C at the prompt ended qrun in $took ms, status 130, the terminal as it was"
    ;;

progress)
    # a progress line on a terminal only (script(1) gives qrun one), and
    # never with --quiet or when stderr is a file
    command -v script >/dev/null || skip "needs script (util-linux)"
    # 2,040 positions take ~0.8 s on emu here; 1,200 took 0.3 s, the very
    # delay before qrun draws a prompt line, so a quiet machine drew none
    long=$(for i in $(seq 2040); do printf '%d ' $((i * 7 % 5000 + 1)); done)
    script -qfec "'$QRUN' -m '$M' --ids '$long' -n 2 --backend emu --print-ids" /dev/null >"$T/tty.out"
    grep -q "qrun: loading M.qpk: checksums 100% of" "$T/tty.out" || fail "no loading line: $(head -c 300 "$T/tty.out")"
    grep -Eq "qrun: prompt: [0-9]+ of 2040 positions, [0-9.]+ tokens/s, .* left" "$T/tty.out" ||
        fail "no prompt line: $(head -c 300 "$T/tty.out")"
    script -qfec "'$QRUN' -m '$M' --ids '$long' -n 2 --backend emu --print-ids --quiet" /dev/null >"$T/quiet.out"
    ! grep -q "loading\|positions" "$T/quiet.out" || fail "--quiet: $(head -c 300 "$T/quiet.out")"
    run file -m "$M" --ids "$long" -n 2 --backend emu --print-ids
    [ "$rc" = 0 ] && [ ! -s "$T/file.err" ] || fail "stderr to a file: $(head -c 300 "$T/file.err")"
    echo "ok: $(tr '\r' '\n' <"$T/tty.out" | grep -a 'prompt:' | tail -1)"
    ;;

stats)
    # --stats says what is true of each backend: no BPF maps for the host
    # twin, a float64 cache for the reference, no ms/token without a step
    run emu -m "$M" -p Hello -n 1 --backend emu --stats
    [ "$rc" = 0 ] || fail "emu: $(cat "$T/emu.err")"
    ! grep -q "BPF maps\|bpf calls\|ms/token (" "$T/emu.err" || fail "emu: $(cat "$T/emu.err")"
    grep -q "no decode step to time" "$T/emu.err" && grep -q "kernel calls (host twin)" "$T/emu.err" ||
        fail "emu -n 1: $(cat "$T/emu.err")"
    # int16 K and V of every layer's key-value heads: KiB as the docs count them
    kib=$(jq -r '[.num_hidden_layers, .num_key_value_heads, .head_dim // (.hidden_size / .num_attention_heads)] | join(" ")' \
              "$WORK/ckpt/config.json" | awk '{ printf "%.1f", $1 * $2 * $3 * 2 * 2 / 1024 }')
    grep -Eq "KV cache int16 $kib KiB/position, peak RSS [0-9]+ MB" "$T/emu.err" ||
        fail "units: expected $kib KiB/position: $(cat "$T/emu.err")"
    run ref -m "$WORK/ckpt" -p Hello -n 3 --backend ref --stats
    [ "$rc" = 0 ] || fail "ref: $(cat "$T/ref.err")"
    grep -q "the checkpoint mapped: each step reads its BF16 weights into float64" "$T/ref.err" &&
        grep -q "KV cache float64 " "$T/ref.err" && ! grep -q "calls\|KV cache float64 0.0" "$T/ref.err" || fail "ref: $(cat "$T/ref.err")"
    if [ "$(id -u)" = 0 ]; then
        run bpf -m "$M" -p Hello -n 4 --stats
        grep -Eq "BPF maps [0-9.]+ MB \(weights [0-9.]+ MB\)" "$T/bpf.err" && grep -q "bpf calls/prompt token" "$T/bpf.err" ||
            fail "bpf: $(cat "$T/bpf.err")"
    fi
    echo "ok: $(tr '\n' '|' <"$T/emu.err")"
    ;;

prompt_cache)
    # --prompt-cache: the first run saves the session after its prompt; a
    # second run with a longer prompt restores it, feeds only the rest and
    # prints what a run without the cache prints (greedy); the same prompt
    # again reuses all but its last token. Refusals stop qrun with one line.
    P1="The quick brown fox jumps over the lazy dog."
    P2="$P1 Then it ran far away into the woods"
    for b in emu bpf; do
        [ $b = bpf ] && [ "$(id -u)" != 0 ] && continue
        C=$T/$b.bin
        run $b-plain -m "$M" --backend $b -p "$P2" -n 8 --temp 0 --print-ids
        [ "$rc" = 0 ] || fail "$b plain: $(cat "$T/$b-plain.err")"
        run $b-first -m "$M" --backend $b -p "$P1" -n 8 --temp 0 --print-ids --prompt-cache "$C" --stats
        [ "$rc" = 0 ] && [ -s "$C" ] || fail "$b first: $(cat "$T/$b-first.err")"
        ! grep -q "prompt cache" "$T/$b-first.err" || fail "$b first restored: $(cat "$T/$b-first.err")"
        n1=$(sed -n 's/.*prompt \([0-9]*\) tokens in.*/\1/p' "$T/$b-first.err")
        run $b-second -m "$M" --backend $b -p "$P2" -n 8 --temp 0 --print-ids --prompt-cache "$C" --stats
        [ "$rc" = 0 ] || fail "$b second: $(cat "$T/$b-second.err")"
        cmp -s "$T/$b-plain.out" "$T/$b-second.out" ||
            fail "$b: restored run prints $(cat "$T/$b-second.out"), plain $(cat "$T/$b-plain.out")"
        grep -q "prompt cache $C: $n1 tokens restored, $n1 of the prompt's" "$T/$b-second.err" ||
            fail "$b second ($n1 tokens saved): $(cat "$T/$b-second.err")"
        n2=$(sed -n "s/.* of the prompt's \([0-9]*\) reused/\1/p" "$T/$b-second.err")
        grep -q "prompt $((n2 - n1)) tokens in" "$T/$b-second.err" || fail "$b second fed: $(cat "$T/$b-second.err")"
        run $b-third -m "$M" --backend $b -p "$P2" -n 8 --temp 0 --print-ids --prompt-cache "$C" --stats
        cmp -s "$T/$b-plain.out" "$T/$b-third.out" || fail "$b third: $(cat "$T/$b-third.err")"
        grep -q "prompt cache $C: $n2 tokens restored, $((n2 - 1)) of the prompt's $n2 reused" "$T/$b-third.err" &&
            grep -q "prompt 1 token in" "$T/$b-third.err" || fail "$b third: $(cat "$T/$b-third.err")"
        echo "ok $b: $(grep "prompt cache" "$T/$b-third.err")"
    done
    cp "$T/emu.bin" "$T/flip.bin"
    printf '\xff' | dd of="$T/flip.bin" bs=1 seek=100 conv=notrunc status=none
    run flip -m "$M" --backend emu -p "$P2" -n 2 --prompt-cache "$T/flip.bin"
    expect_one_line_error flip
    grep -q "checksum" "$T/flip.err" && [ "$rc" = 1 ] || fail "flip: $(cat "$T/flip.err")"
    run kv8 -m "$M" --backend emu --kv-cache int8 -p "$P2" -n 2 --prompt-cache "$T/emu.bin"
    expect_one_line_error kv8
    grep -q "int16 KV cache" "$T/kv8.err" && [ "$rc" = 1 ] || fail "kv8: $(cat "$T/kv8.err")"
    run small -m "$M" --backend emu -c 8 --ids "1 2" -n 2 --prompt-cache "$T/emu.bin"
    expect_one_line_error small
    grep -q "context of 8" "$T/small.err" && [ "$rc" = 1 ] || fail "small: $(cat "$T/small.err")"
    run chat -m "$M" --chat --prompt-cache "$T/emu.bin" </dev/null
    expect_one_line_error chat
    [ "$rc" = 2 ] || fail "chat: exit $rc"
    run ref -m "$WORK/ckpt" --backend ref -p "$P1" --prompt-cache "$T/ref.bin"
    expect_one_line_error ref
    [ "$rc" = 2 ] && [ ! -e "$T/ref.bin" ] || fail "ref: exit $rc"
    # a prompt the file holds the start of is not saved over it
    before=$(stat -c %Y.%s "$T/emu.bin"); sleep 1.1
    run short -m "$M" --backend emu -p "$P1" -n 2 --temp 0 --prompt-cache "$T/emu.bin" --stats
    [ "$rc" = 0 ] && [ "$(stat -c %Y.%s "$T/emu.bin")" = "$before" ] || fail "short: $(cat "$T/short.err")"
    ;;

*)
    fail "unknown case"
    ;;
esac
exit 0
