#!/bin/bash
# test_qrun_cli.sh CASE QRUN QPACK QP_GEN TOKENIZER_DIR WORK_DIR
#
# The qrun command end to end, one CASE per ctest test (tests/qrun_cli.cmake).
# "setup" writes a tiny random checkpoint with the real Qwen3 tokenizer and
# packs it into WORK_DIR/M.qpk; the other cases use it. Cases that load BPF
# programs need root and are skipped (exit 77) without it.
set -u

CASE=$1 QRUN=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 WORK=$6
M=$WORK/M.qpk
T=$WORK/$CASE.tmp
KERNELS='["embed","rmsnorm","matvec","rope_store","attention","attn_merge","swiglu","argmax_reduce"]'

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
        [ -n "$ids" ] && [ -s "$T/$name.out" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    [ -n "$ids" ] || { kill -KILL $pid 2>/dev/null; wait $pid; fail "$name: qrun never held its 8 BPF programs"; }
    [ -s "$T/$name.out" ] || { kill -KILL $pid 2>/dev/null; wait $pid; fail "$name: qrun printed nothing"; }
    kill -"$sig" $pid
    wait $pid
    rc=$?
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
    "$QRUN" -m "$M" --chat -n 6 --print-ids >"$T/two.out" 2>"$T/two.err" <<'EOF'
Hi there
How are you?
EOF
    rc=$?
    [ "$rc" = 0 ] || fail "two turns: exit $rc: $(cat "$T/two.err")"
    [ ! -s "$T/two.err" ] || fail "two turns: unexpected stderr (no prompt marker without a terminal): $(cat "$T/two.err")"
    [ "$(lines "$T/two.out")" = 2 ] || fail "two turns: expected two replies, got: $(cat "$T/two.out")"
    r1=$(sed -n 1p "$T/two.out") r2=$(sed -n 2p "$T/two.out")
    [ -n "$r1" ] && [ -n "$r2" ] || fail "an empty reply: $(cat "$T/two.out")"
    # the KV cache is kept: turn 2 continues exactly the token sequence
    # turn 1 + reply 1 + turn 2 (chat.h's contract), as one --ids prompt
    t1=$(printf '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    t2=$(printf '<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' |
        "$QRUN" tokenize -m "$M")
    run whole -m "$M" --ids "$t1 $r1 $t2" -n 6 --print-ids
    [ "$rc" = 0 ] || fail "--ids of the conversation: exit $rc: $(cat "$T/whole.err")"
    [ "$(cat "$T/whole.out")" = "$r2" ] || fail "turn 2 gave '$r2', the whole conversation '$(cat "$T/whole.out")'"
    echo "ok: reply 1 '$r1', reply 2 '$r2'"

    printf 'Hi there\nHow are you?\n' | "$QRUN" -m "$M" --chat -n 6 >"$T/text.out" 2>"$T/text.err"
    rc=$?
    [ "$rc" = 0 ] || fail "text: exit $rc: $(cat "$T/text.err")"
    valid_utf8 "$T/text.out" || fail "text: not valid UTF-8"
    printf 'Hi there\nHow are you?\n' | "$QRUN" -m "$M" --chat -n 6 --backend emu --print-ids >"$T/emu.out" 2>&1
    cmp -s "$T/two.out" "$T/emu.out" || fail "emu: $(cat "$T/emu.out") != bpf $(cat "$T/two.out")"

    # empty lines are skipped; a bad line is refused with one message, the chat goes on, exit 1
    printf 'Hi there\n\n\xff\xfe\nx\0y\nHow are you?\n' | "$QRUN" -m "$M" --chat -n 6 --print-ids \
        >"$T/bad.out" 2>"$T/bad.err"
    rc=$?
    [ "$rc" = 1 ] || fail "bad lines: exit $rc, expected 1"
    cmp -s "$T/two.out" "$T/bad.out" || fail "bad lines changed the replies: $(cat "$T/bad.out")"
    [ "$(lines "$T/bad.err")" = 2 ] && grep -q "line 3: invalid UTF-8" "$T/bad.err" && grep -q "line 4 holds a NUL" "$T/bad.err" ||
        fail "bad lines: $(cat "$T/bad.err")"
    echo "ok: $(tr '\n' '|' <"$T/bad.err")"

    # the conversation filling the context is an error, not a wrap-around
    printf 'Hi\nAgain\nAnd again\nOnce more\n' | "$QRUN" -m "$M" --chat -n 4 --print-ids -c 40 \
        >"$T/full.out" 2>"$T/full.err"
    rc=$?
    [ "$rc" = 1 ] || fail "full context: exit $rc, expected 1"
    [ "$(lines "$T/full.err")" = 1 ] && grep -q "context" "$T/full.err" || fail "full context: $(cat "$T/full.err")"
    [ "$(lines "$T/full.out")" = 2 ] || fail "full context: expected 2 replies first: $(cat "$T/full.out")"
    echo "ok: $(cat "$T/full.err")"
    # and no input at all is a clean, empty end
    "$QRUN" -m "$M" --chat -n 4 </dev/null >"$T/eof.out" 2>"$T/eof.err"
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
    grep -q "directory" "$T/dir_model.err" || fail "dir_model: $(cat "$T/dir_model.err")"
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
    run past -m "$M" -c 8 --ids "9707 11" -n 8 --print-ids
    [ "$rc" = 1 ] || fail "-c 8 -n 8: exit $rc, expected 1"
    [ "$(wc -w <"$T/past.out")" = 7 ] || fail "-c 8 -n 8: printed $(cat "$T/past.out")"
    [ "$(lines "$T/past.err")" = 1 ] && grep -q "reached the end of the context" "$T/past.err" ||
        fail "-c 8 -n 8: $(cat "$T/past.err")"
    cmp -s "$T/fits.out" "$T/past.out" || fail "the tokens before the end differ"
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
        start_and_signal sig$sig $sig -m "$M" -p "Hello" -n 100000
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
    IN=$T/fifo start_and_signal chatINT INT -m "$M" --chat -n 4 --print-ids
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
    grep -q "CAP_BPF" "$T/bpf.err" && grep -q "root" "$T/bpf.err" && grep -q "uid 65534" "$T/bpf.err" ||
        fail "message: $(cat "$T/bpf.err")"
    # the same user can read the model: only the privilege was missing
    nobody "$U/qrun" -m "$M" -p "Hello" -n 4 --backend emu >"$T/emu.out" 2>"$T/emu.err"
    rc=$?
    [ "$rc" = 0 ] || fail "emu as nobody: exit $rc: $(cat "$T/emu.err")"
    ;;

*)
    fail "unknown case"
    ;;
esac
exit 0
