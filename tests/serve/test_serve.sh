#!/bin/bash
# test_serve.sh CASE QRUN QPACK QP_GEN TOKENIZER_DIR WORK_DIR SOURCE_DIR
#
# qrun serve with real clients, one CASE per ctest test (tests/serve/serve.cmake).
# "setup" packs a tiny random model with the real Qwen3 tokenizer into
# WORK_DIR/M.qpk and installs the JavaScript clients (tests/serve/
# package.json: the official openai package, Anthropic's @anthropic-ai/sdk,
# LangChain's @langchain/openai and playwright-core) into WORK_DIR/node with npm ci. The expectation for every greedy reply is
# qrun's own output for the same prompt. Cases on the bpf backend need root
# (skipped otherwise); the others run the server on emu, the kernels' host
# twin, bit-identical.
set -u

CASE=$1 QRUN=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 WORK=$6 SRC=$7
M=$WORK/M.qpk
NODE_DIR=$WORK/node
T=$WORK/$CASE.tmp
J='Content-Type: application/json'
PID=

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }
skip() { echo "SKIP ($CASE): $*"; exit 77; }
need_root() { [ "$(id -u)" = 0 ] || skip "loading BPF programs needs root"; }
PID2= PIN=
trap '[ -n "$PID" ] && kill -KILL $PID 2>/dev/null; [ -n "$PID2" ] && kill -KILL $PID2 2>/dev/null
      [ -n "$PIN" ] && "$QPACK" unload "$PIN" 2>/dev/null' EXIT

if [ "$CASE" != setup ]; then
    [ -f "$TOKDIR/tokenizer.json" ] || skip "no $TOKDIR/tokenizer.json (scripts/fetch_tokenizer.sh)"
    [ -f "$M" ] || fail "no $M: the serve_setup test must run first"
    rm -rf "$T" && mkdir -p "$T" || fail "cannot create $T"
fi

# start_server NAME ARGS...: qrun serve -m M on a free port, in the
# background; sets PID and URL once it listens (stderr in $T/NAME.err)
start_server() {
    local name=$1
    shift
    serve_on_free_port "$name" -m "$M" "$@"
}

# serve_on_free_port NAME ARGS...: qrun serve ARGS on a free port, as start_server does
serve_on_free_port() {
    local name=$1 port= i
    shift
    rm -f "$T/$name.err"   # not an earlier server's line
    "$QRUN" serve --port 0 "$@" >"$T/$name.out" 2>"$T/$name.err" &
    PID=$!
    for i in $(seq 600); do
        port=$(sed -n 's|.* on http://[^ ]*:\([0-9]*\)/ with .*|\1|p' "$T/$name.err" 2>/dev/null)
        [ -n "$port" ] && break
        kill -0 $PID 2>/dev/null || fail "$name: the server exited: $(cat "$T/$name.err")"
        sleep 0.1
    done
    [ -n "$port" ] || fail "$name: the server did not listen within 60 s"
    URL=http://127.0.0.1:$port
    SERVER=$name
}

# stop_server [SIGNAL]: the server must exit 0 within 30 s
stop_server() {
    local i
    kill -"${1:-TERM}" $PID
    for i in $(seq 300); do
        kill -0 $PID 2>/dev/null || break
        sleep 0.1
    done
    kill -0 $PID 2>/dev/null && fail "the server did not stop within 30 s of SIG${1:-TERM}"
    wait $PID
    local rc=$?
    PID=
    [ "$rc" = 0 ] || fail "the server exited with $rc after SIG${1:-TERM}: $(tail -3 "$T/$SERVER.err")"
    grep -q "stopped$" "$T/$SERVER.err" || fail "no 'stopped' line: $(tail -3 "$T/$SERVER.err")"
}

# post PATH BODY [CURL ARGS...]: the response body in $T/resp, its status in $code
post() {
    local path=$1 body=$2
    shift 2
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' --max-time 120 -H "$J" "$@" --data-binary "$body" "$URL$path")
}

get() {
    local path=$1
    shift
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' --max-time 30 "$@" "$URL$path")
}

# expect_error STATUS [CODE]: the response is OpenAI's error object
expect_error() {
    [ "$code" = "$1" ] || fail "status $code, expected $1: $(head -c 300 "$T/resp")"
    jq -e '.error | (.message | type == "string" and length > 0) and (.type | type == "string")
                  and has("param") and has("code")' "$T/resp" >/dev/null ||
        fail "not OpenAI's error object: $(head -c 300 "$T/resp")"
    [ -z "${2:-}" ] || [ "$(jq -r .error.code "$T/resp")" = "$2" ] ||
        fail "error code $(jq -r .error.code "$T/resp"), expected $2"
    echo "ok $1 $(jq -r .error.message "$T/resp")"
}

expect_ok() {
    [ "$code" = 200 ] || fail "$1: status $code: $(head -c 300 "$T/resp")"
}

# qrun's greedy output (text and a final newline): the expectation
qrun_chat() { "$QRUN" -m "$M" --temp 0 --backend emu --chat -p "$1" -n "$2" >"$3" 2>"$T/qrun.err" || fail "qrun --chat: $(cat "$T/qrun.err")"; }
qrun_text() { "$QRUN" -m "$M" --temp 0 --backend emu -p "$1" -n "$2" >"$3" 2>"$T/qrun.err" || fail "qrun -p: $(cat "$T/qrun.err")"; }

# the text of a streamed response ($T/resp): its deltas or texts joined, and a newline
stream_text() {
    grep '^data: {' "$T/resp" | sed 's/^data: //' |
        jq -rj '.choices[0] | select(.) | (.delta.content // .text // empty)'
    echo
}

# count_tokens TEXT: how many ids qrun's tokenizer gives TEXT
count_tokens() { printf '%s' "$1" | "$QRUN" tokenize -m "$M" | wc -w; }

metric() { curl -sS --max-time 30 "$@" "$URL/metrics" | awk -v m="$METRIC" '$1 == m { print $2 }'; }

# BPF programs and maps process $1 holds
bpf_ids_of() { cat /proc/"$1"/fdinfo/* 2>/dev/null | awk '/^(prog|map)_id:/ {print $1 $2}' | sort -u; }

# bpf_gone IDS: every program and map of the list is freed (within 5 s)
bpf_gone() {
    local id kind num i
    for id in $1; do
        kind=${id%%_id:*} num=${id#*:}
        for i in $(seq 50); do
            bpftool "$kind" show id "$num" >/dev/null 2>&1 || continue 2
            sleep 0.1
        done
        fail "BPF $kind $num is still there after the server stopped"
    done
}

case $CASE in
setup)
    rm -rf "$WORK/ck" "$M" && mkdir -p "$WORK" || fail "cannot create $WORK"
    [ -f "$TOKDIR/tokenizer.json" ] || skip "no $TOKDIR/tokenizer.json (scripts/fetch_tokenizer.sh)"
    "$QP_GEN" "$WORK/ck" --preset tiny --vocab 151936 --seed 2 --tokenizer-dir "$TOKDIR" >/dev/null ||
        fail "generating the checkpoint"
    "$QPACK" pack "$WORK/ck" -o "$M" --quiet || fail "packing"
    # the JavaScript clients, pinned by tests/serve/package-lock.json; kept
    # while the lock file is the same
    command -v npm >/dev/null || fail "npm is missing (scripts/install_deps.sh installs it)"
    mkdir -p "$NODE_DIR"
    if ! cmp -s "$SRC/tests/serve/package-lock.json" "$NODE_DIR/package-lock.json" ||
        [ ! -d "$NODE_DIR/node_modules/openai" ] || [ ! -d "$NODE_DIR/node_modules/playwright-core" ] ||
        [ ! -d "$NODE_DIR/node_modules/@langchain/openai" ] || [ ! -d "$NODE_DIR/node_modules/@anthropic-ai/sdk" ]; then
        rm -f "$NODE_DIR/unreachable"
        cp "$SRC/tests/serve/package.json" "$SRC/tests/serve/package-lock.json" "$NODE_DIR/" || fail "copying"
        if ! (cd "$NODE_DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error); then
            # only an unreachable registry excuses the clients' tests (they
            # skip, saying so); any other failure of npm is one
            timeout 30 npm ping >/dev/null 2>&1 && fail "npm ci in $NODE_DIR"
            echo "the npm registry ($(npm config get registry)) is unreachable: the openai and browser cases will skip" |
                tee "$NODE_DIR/unreachable"
            exit 0
        fi
    fi
    echo "ok openai $(jq -r .version "$NODE_DIR/node_modules/openai/package.json")," \
         "@langchain/openai $(jq -r .version "$NODE_DIR/node_modules/@langchain/openai/package.json")," \
         "@anthropic-ai/sdk $(jq -r .version "$NODE_DIR/node_modules/@anthropic-ai/sdk/package.json")," \
         "playwright-core $(jq -r .version "$NODE_DIR/node_modules/playwright-core/package.json")"
    ;;

endpoints)
    start_server emu --backend emu
    get /health; expect_ok health
    [ "$(jq -c . "$T/resp")" = '{"status":"ok"}' ] || fail "health: $(cat "$T/resp")"
    get /v1/models; expect_ok models
    [ "$(jq -r '.object + " " + .data[0].id + " " + .data[0].object' "$T/resp")" = "list M model" ] ||
        fail "models: $(cat "$T/resp")"
    get /v1/models/M; expect_ok "models/M"
    [ "$(jq -r .id "$T/resp")" = M ] || fail "models/M: $(cat "$T/resp")"
    get /v1/models/other; expect_error 404
    [ "$(jq -r '[.data[0].max_model_len, .data[0].meta.n_ctx] | join(" ")' <<<"$(curl -sS "$URL/v1/models")")" = \
      "$(jq -r .default_generation_settings.n_ctx <<<"$(curl -sS "$URL/props")") $(jq -r .default_generation_settings.n_ctx <<<"$(curl -sS "$URL/props")")" ] ||
        fail "/v1/models' context is not /props'"

    # llama-server's endpoints: /tokenize and /detokenize against qrun
    # tokenize / detokenize, /props, /slots
    text='Hello <|im_start|>wörld 🐉!'
    want=$(printf '%s' "$text" | "$QRUN" tokenize -m "$M")
    post /tokenize "$(jq -nc --arg t "$text" '{content: $t}')"; expect_ok tokenize
    [ "$(jq -r '.tokens | map(tostring) | join(" ")' "$T/resp")" = "$want" ] ||
        fail "/tokenize: $(cat "$T/resp"), qrun tokenize: $want"
    post /tokenize "$(jq -nc --arg t "$text" '{content: $t, with_pieces: true, add_special: false}')"
    expect_ok "tokenize with pieces"
    [ "$(jq -r '.tokens | map(.id | tostring) | join(" ")' "$T/resp")" = "$want" ] || fail "pieces' ids: $(cat "$T/resp")"
    [ "$(jq -r '.tokens[0].piece' "$T/resp")" = "$(printf '%s' "${want%% *}" | "$QRUN" detokenize -m "$M")" ] ||
        fail "the first piece: $(cat "$T/resp")"
    post /detokenize "$(jq -nc --arg w "$want" '{tokens: ($w | split(" ") | map(tonumber))}')"; expect_ok detokenize
    [ "$(jq -r .content "$T/resp")" = "$text" ] || fail "/detokenize: $(cat "$T/resp"), expected '$text'"
    post /tokenize '{"content": 5}'; expect_error 400 >/dev/null
    post /tokenize '{"content": "a", "parse_special": false}'; expect_error 400 >/dev/null
    post /detokenize '{"tokens": [-1]}'; expect_error 400 >/dev/null
    post /detokenize '{"tokens": [99999999]}'; expect_error 400 >/dev/null
    get /tokenize; expect_error 405
    post /apply-template '{"messages": [{"role": "user"}]}'; expect_error 400 >/dev/null
    post /apply-template '{"messages": "Hi"}'; expect_error 400 >/dev/null
    get /props; expect_ok props
    # without a generation config: llama.cpp's sampling, qrun's default too
    [ "$(jq -r '[.total_slots, .model_alias, .modalities.vision, (.default_generation_settings.params | .temperature, .top_k, .top_p, .min_p | tostring)] | join(" ")' "$T/resp")" = \
      "1 M false 0.8 40 0.95 0.05" ] || fail "/props: $(cat "$T/resp")"
    get /slots; expect_ok slots
    [ "$(jq -r '[length, .[0].id, .[0].is_processing] | map(tostring) | join(" ")' "$T/resp")" = "1 0 false" ] ||
        fail "/slots while idle: $(cat "$T/resp")"
    echo "ok llama-server endpoints: /tokenize /detokenize /props /slots"

    # chat, whole and streamed, against qrun --chat
    for p in "Hi" "Tell me a story about a dragon"; do
        qrun_chat "$p" 12 "$T/want"
        body=$(jq -nc --arg p "$p" '{model: "M", messages: [{role: "user", content: $p}], max_tokens: 12, temperature: 0}')
        post /v1/chat/completions "$body"; expect_ok chat
        jq -r '.choices[0].message.content' "$T/resp" >"$T/got"
        cmp -s "$T/got" "$T/want" || fail "chat '$p': '$(cat "$T/got")', qrun --chat: '$(cat "$T/want")'"
        # Qwen3's template, thinking off, written out: its tokens are the prompt's
        n=$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' "$p" |
            "$QRUN" tokenize -m "$M" | wc -w)
        want_usage="$n 12 $((n + 12))"
        [ "$(jq -r '[.object, .choices[0].message.role, .choices[0].finish_reason] | join(" ")' "$T/resp")" = \
          "chat.completion assistant length" ] || fail "chat fields: $(cat "$T/resp")"
        [ "$(jq -r '[.usage.prompt_tokens, .usage.completion_tokens, .usage.total_tokens] | join(" ")' "$T/resp")" = \
          "$want_usage" ] || fail "chat usage: $(jq -c .usage "$T/resp"), expected $want_usage"
        # llama-server's timings: the prompt's tokens run or found cached, the
        # tokens generated, times that add up to no more than the request's
        jq -e --argjson n "$n" '.timings as $t | $t.prompt_n + $t.cache_n == $n and $t.predicted_n == 12
              and $t.cache_n == .usage.prompt_tokens_details.cached_tokens and $t.prompt_ms > 0 and $t.predicted_ms > 0
              and ($t.predicted_per_second - 12e3 / $t.predicted_ms | fabs) < 1e-6 * $t.predicted_per_second' \
            "$T/resp" >/dev/null || fail "chat timings: $(jq -c '[.timings, .usage]' "$T/resp")"
        # /apply-template: the prompt the chat fed
        post /apply-template "$body"; expect_ok apply-template
        [ "$(jq -j .prompt "$T/resp")" = "$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' "$p")" ] ||
            fail "/apply-template: $(cat "$T/resp")"
        post /v1/chat/completions "$(jq -c '. + {stream: true, stream_options: {include_usage: true}}' <<<"$body")"
        expect_ok "chat stream"
        stream_text >"$T/got"
        cmp -s "$T/got" "$T/want" || fail "streamed chat '$p': '$(cat "$T/got")', qrun: '$(cat "$T/want")'"
        [ "$(tail -n 2 "$T/resp" | head -n 1)" = "data: [DONE]" ] || fail "the stream does not end in data: [DONE]"
        grep '^data: {' "$T/resp" | head -n 1 | sed 's/^data: //' | jq -e '.choices[0].delta.role == "assistant"' \
            >/dev/null || fail "the first chunk does not carry the role"
        grep '^data: {' "$T/resp" | tail -n 2 | head -n 1 | sed 's/^data: //' |
            jq -e '.choices[0].finish_reason == "length" and .choices[0].delta == {} and .timings.predicted_n == 12' \
            >/dev/null || fail "no final chunk with the finish reason and the timings"
        [ "$(grep '^data: {' "$T/resp" | tail -n 1 | sed 's/^data: //' |
             jq -r '[.usage.prompt_tokens, .usage.completion_tokens, .usage.total_tokens] | join(" ")')" = \
          "$want_usage" ] || fail "no usage chunk"
        echo "ok chat '$p' whole and streamed: $(cat "$T/got")"
    done

    # text completions, from text and from ids, against qrun -p and --ids
    qrun_text "Hello" 8 "$T/want"
    post /v1/completions '{"prompt": "Hello", "max_tokens": 8, "temperature": 0}'; expect_ok completion
    jq -r '.choices[0].text' "$T/resp" >"$T/got"
    cmp -s "$T/got" "$T/want" || fail "completion: '$(cat "$T/got")', qrun -p: '$(cat "$T/want")'"
    [ "$(jq -r '[.object, .usage.prompt_tokens, .usage.completion_tokens] | join(" ")' "$T/resp")" = \
      "text_completion $(count_tokens Hello) 8" ] || fail "completion fields: $(cat "$T/resp")"
    post /v1/completions '{"prompt": "Hello", "max_tokens": 8, "temperature": 0, "stream": true}'
    expect_ok "completion stream"
    stream_text >"$T/got"
    cmp -s "$T/got" "$T/want" || fail "streamed completion: '$(cat "$T/got")'"
    "$QRUN" -m "$M" --temp 0 --backend emu --ids "9707 11 1879 0" -n 8 >"$T/want" || fail "qrun --ids"
    post /v1/completions '{"prompt": [9707, 11, 1879, 0], "max_tokens": 8, "temperature": 0}'; expect_ok ids
    jq -r '.choices[0].text' "$T/resp" >"$T/got"
    cmp -s "$T/got" "$T/want" || fail "completion of ids: '$(cat "$T/got")', qrun --ids: '$(cat "$T/want")'"
    echo "ok completions of text and of ids equal qrun's"

    # echo: the prompt's text, then the completion; from ids, their text
    qrun_text "Hello" 8 "$T/want"
    for stream in false true; do
        post /v1/completions "{\"prompt\": \"Hello\", \"max_tokens\": 8, \"temperature\": 0, \"echo\": true, \"stream\": $stream}"
        expect_ok "echo, stream $stream"
        if [ $stream = true ]; then stream_text >"$T/got"; else jq -r '.choices[0].text' "$T/resp" >"$T/got"; fi
        [ "$(cat "$T/got")" = "Hello$(cat "$T/want")" ] || fail "echo (stream $stream): '$(cat "$T/got")'"
    done
    post /v1/completions '{"prompt": [9707, 11, 1879, 0], "max_tokens": 1, "temperature": 0, "echo": true}'
    expect_ok "echo of ids"
    [ "$(jq -r '.choices[0].text' "$T/resp" | head -c "$(printf '9707 11 1879 0' | "$QRUN" detokenize -m "$M" | wc -c)")" = \
      "$(printf '9707 11 1879 0' | "$QRUN" detokenize -m "$M")" ] || fail "echo of ids: $(cat "$T/resp")"
    echo "ok echo"

    # logprobs against the logits qrun dumps for the prompt and the reply
    # fed as one prompt (float32 there: 1e-4), and the most likely ones
    prompt_ids=$(printf 'Hello' | "$QRUN" tokenize -m "$M")
    reply_ids=$("$QRUN" -m "$M" --temp 0 --backend emu -p Hello -n 4 --print-ids 2>/dev/null)
    "$QRUN" -m "$M" --backend emu --ids "$prompt_ids $reply_ids" -n 1 --dump-logits-all "$T/logits" >/dev/null 2>&1 ||
        fail "qrun --dump-logits-all"
    post /v1/completions '{"prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 3}'; expect_ok logprobs
    python3 - "$T/logits" "$(echo $prompt_ids | wc -w)" "$reply_ids" "$T/resp" <<'PY' || fail "logprobs differ from qrun's logits"
import array, json, math, sys
logits = array.array("f")
with open(sys.argv[1], "rb") as f:
    logits.frombytes(f.read())
n_prompt, reply = int(sys.argv[2]), [int(x) for x in sys.argv[3].split()]
lp = json.load(open(sys.argv[4]))["choices"][0]["logprobs"]
vocab = len(logits) // (n_prompt + len(reply))
assert len(lp["token_logprobs"]) == len(reply), lp
for i, tok in enumerate(reply):
    row = logits[(n_prompt - 1 + i) * vocab:(n_prompt + i) * vocab]
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    want = row[tok] - lse
    assert abs(lp["token_logprobs"][i] - want) < 1e-4, (i, lp["token_logprobs"][i], want)
    top = sorted(((x - lse) for x in row), reverse=True)[:3]
    got = sorted(lp["top_logprobs"][i].values(), reverse=True)
    assert len(got) == 3 and all(abs(a - b) < 1e-4 for a, b in zip(got, top)), (i, got, top)
print("ok", len(reply), "token logprobs and their top 3 equal qrun's logits")
PY
    body='{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 2}'
    post /v1/chat/completions "$body"; expect_ok "chat logprobs"
    # the tokens' bytes make the reply; greedy: each is the most likely
    python3 - "$T/resp" <<'PY' || fail "chat logprobs: $(jq -c .choices[0].logprobs "$T/resp" | head -c 600)"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
content = c["logprobs"]["content"]
assert len(content) == 6
assert bytes(b for e in content for b in e["bytes"]) == c["message"]["content"].encode()
assert all(e["logprob"] == e["top_logprobs"][0]["logprob"] and len(e["top_logprobs"]) == 2 for e in content)
PY
    post /v1/chat/completions "$(jq -c '. + {stream: true}' <<<"$body")"; expect_ok "chat logprobs streamed"
    [ "$(grep '^data: {' "$T/resp" | sed 's/^data: //' | jq -s -c '[.[].choices[0].logprobs.content // [] | .[].logprob]')" = \
      "$(curl -sS -H "$J" --data-binary "$body" "$URL/v1/chat/completions" | jq -c '[.choices[0].logprobs.content[].logprob]')" ] ||
        fail "streamed logprobs differ from the whole reply's"
    echo "ok chat logprobs, whole and streamed"

    # stop strings: the reply ends before the first one, which is not in it
    qrun_text "Hello" 12 "$T/want"
    full=$(cat "$T/want")
    stop=${full:4:3}
    want=${full%%"$stop"*}
    [ -n "$stop" ] && [ "$want" != "$full" ] || fail "no stop string to take from '$full'"
    for stream in false true; do
        post /v1/completions "$(jq -nc --arg s "$stop" --argjson st $stream \
            '{prompt: "Hello", max_tokens: 12, temperature: 0, stop: ["never here", $s], stream: $st}')"
        expect_ok "stop"
        if [ $stream = true ]; then
            got=$(stream_text)
        else
            got=$(jq -r '.choices[0].text' "$T/resp")
            stop_tokens=$(jq -r .usage.completion_tokens "$T/resp")
            [ "$stop_tokens" -lt 12 ] || fail "stop: $stop_tokens tokens generated"
        fi
        [ "$got" = "$want" ] || fail "stop '$stop' (stream $stream): '$got', expected '$want'"
        grep -q '"finish_reason":"stop"' "$T/resp" || fail "stop: finish_reason is not stop"
    done
    echo "ok stop '$stop': '$want'"

    # sampling: a seed repeats exactly
    body='{"prompt": "Hello", "max_tokens": 16, "temperature": 1.0, "top_p": 0.95, "seed": 42}'
    post /v1/completions "$body"; expect_ok seed; a=$(jq -r '.choices[0].text' "$T/resp")
    post /v1/completions "$body"; expect_ok seed; b=$(jq -r '.choices[0].text' "$T/resp")
    [ "$a" = "$b" ] || fail "seed 42 gave '$a' then '$b'"
    echo "ok seed 42 repeats: $a"

    # the page: self-contained
    get /; expect_ok page
    grep -q '<title>qpack chat</title>' "$T/resp" || fail "the page has no title"
    grep -Eiq '(src|href)=|@import|url\(' "$T/resp" && fail "the page loads something: $(grep -Eio '(src|href)=[^ >]*' "$T/resp")"
    curl -sS -D "$T/headers" -o /dev/null "$URL/"
    grep -qi '^content-type: text/html' "$T/headers" || fail "the page is not text/html"

    # metrics: Prometheus text that counted what happened
    get /metrics; expect_ok metrics
    grep -q '^qpack_requests_total{endpoint="/v1/chat/completions",code="200"} 7$' "$T/resp" ||
        fail "metrics: chat requests: $(grep requests_total "$T/resp")"
    grep -q '^qpack_requests_total{endpoint="/v1/completions",code="200"} 11$' "$T/resp" ||
        fail "metrics: completions: $(grep requests_total "$T/resp")"
    tokens=$(awk '$1 == "qpack_completion_tokens_total" { print $2 }' "$T/resp")
    [ "$tokens" = $((4 * 12 + 3 * 8 + 2 * 8 + 1 + 4 + 3 * 6 + 2 * stop_tokens + 2 * 16)) ] ||
        fail "metrics: $tokens completion tokens"
    for m in qpack_prompt_seconds_total qpack_decode_seconds_total qpack_sessions_busy qpack_bpf_map_bytes \
             qpack_kv_cache_bytes; do
        grep -q "^# TYPE $m " "$T/resp" && grep -q "^$m [0-9.e+-]*$" "$T/resp" || fail "metrics: no $m"
    done
    [ "$(awk '$1 == "qpack_sessions_busy" { print $2 }' "$T/resp")" = 0 ] || fail "metrics: a session still busy"
    grep -q '^qpack_kv_cache_bytes_per_position{type="int16"} [0-9]*$' "$T/resp" ||
        fail "metrics: no int16 KV cache bytes per position"
    echo "ok metrics: $tokens completion tokens"
    stop_server
    ;;

errors)
    # before any server: a folder for -m says to pack it, a mistyped option
    # gets the closest one; one line each
    mkdir -p "$T/hf" && echo '{}' >"$T/hf/config.json"
    "$QRUN" serve -m "$T/hf" --backend emu >"$T/hf.out" 2>"$T/hf.err" && fail "serve -m a folder started"
    [ "$(wc -l <"$T/hf.err")" = 1 ] && grep -qF "pack it first: qpack pack $T/hf -o hf.qpk" "$T/hf.err" ||
        fail "serve -m a Hugging Face folder: $(cat "$T/hf.err")"
    "$QRUN" serve -m "$M" --prot 1 >"$T/typo.out" 2>"$T/typo.err"
    [ $? = 2 ] && [ "$(wc -l <"$T/typo.err")" = 1 ] &&
        grep -qF "unknown option '--prot': did you mean --port? (see qrun serve --help)" "$T/typo.err" ||
        fail "serve --prot: $(cat "$T/typo.err")"
    start_server emu --backend emu -c 64 --timeout 3
    chat='{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}'
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}'; expect_error 400
    post /v1/chat/completions '[1, 2]'; expect_error 400
    post /v1/chat/completions '{"messages": "Hi"}'; expect_error 400
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": "2"}'; expect_error 400
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "temperature": -1}'; expect_error 400
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function"}]}'
    expect_error 400
    jq -e '.error.param == "tools"' "$T/resp" >/dev/null || fail "tools: $(cat "$T/resp")"
    post /v1/chat/completions '{"messages": [], "messages": [{"role": "user", "content": "Hi"}]}'; expect_error 400
    # what ordinary clients send: another model's name, neutral values of
    # unsupported fields, fields this server does not know
    post /v1/chat/completions '{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
        "logprobs": false, "tools": [], "n": 1, "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.1,
        "presence_penalty": 0.5, "frequency_penalty": 0.5, "logit_bias": {"0": -100}, "cache_prompt": true,
        "response_format": {"type": "text"}, "some_future_field": {"x": 1}}'
    expect_ok "ordinary client fields"
    post /v1/completions '{"prompt": [1, 151936]}'; expect_error 400
    post /v1/completions "{\"prompt\": \"$(printf 'word %.0s' $(seq 80))\"}"; expect_error 400 context_length_exceeded
    # JSON whatever the Content-Type says (curl -d sends form-urlencoded)
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' -H 'Content-Type: text/plain' -d "$chat" "$URL/v1/chat/completions")
    expect_ok "a text/plain body"
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' -d "$chat" "$URL/v1/chat/completions")
    expect_ok "curl -d's body"
    # but a browser's request from another site's page is refused
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' -H 'Content-Type: text/plain' -H 'Origin: http://evil.example' \
               -d "$chat" "$URL/v1/chat/completions")
    expect_error 403 cross_origin
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' -H "Origin: http://127.0.0.1:${URL##*:}" -H "$J" -d "$chat" \
               "$URL/v1/chat/completions")
    expect_ok "a request from the server's own page"
    head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$T/big"
    post /v1/chat/completions "@$T/big"; expect_error 413
    post /v1/chat/completions "@$T/big" -H 'Transfer-Encoding: chunked'; expect_error 413
    get /v1/chat/completions; expect_error 405
    get /v2/nothing; expect_error 404
    # not HTTP: libmicrohttpd's own 400 (or a closed connection for a
    # request line that is not one), and the server goes on
    raw() {
        exec 3<>/dev/tcp/127.0.0.1/${URL##*:} || fail "connecting"
        (printf "$1" >&3) 2>/dev/null   # the server may close before it has all (SIGPIPE)
        timeout 10 cat <&3 >"$T/raw"
        exec 3<&-
    }
    raw 'GET / HTTP/1.1\r\nNot a header line\r\n\r\n'
    head -n 1 "$T/raw" | grep -q '^HTTP/1.1 400' || fail "a malformed header: $(head -n 1 "$T/raw")"
    raw 'NONSENSE\r\n\r\n'
    [ ! -s "$T/raw" ] || head -n 1 "$T/raw" | grep -q '^HTTP/1.1 400' || fail "a line that is not HTTP: $(head -n 1 "$T/raw")"
    # a body two parsers would delimit differently: 400, connection closed
    raw "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: ${#chat}\r\n\r\n$chat"
    head -n 1 "$T/raw" | grep -q '^HTTP/1.1 400' || fail "two Content-Length headers: $(head -n 1 "$T/raw")"
    grep -q 'ambiguous_length' "$T/raw" || fail "two Content-Length headers: $(cat "$T/raw")"
    raw "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    head -n 1 "$T/raw" | grep -q '^HTTP/1.1 400' || fail "Content-Length and chunked: $(head -n 1 "$T/raw")"
    # error bodies stay UTF-8 JSON whatever they quote; raw control
    # characters inside JSON strings are refused (RFC 8259)
    code=$(curl -sS -o "$T/resp" -w '%{http_code}' "$URL/%ff%fe"); expect_error 404
    iconv -f UTF-8 -t UTF-8 "$T/resp" >/dev/null 2>&1 || fail "the 404 body is not UTF-8: $(cat -v "$T/resp")"
    post /v1/chat/completions "$(printf '{"messages": [{"role": "user", "content": "a\nb"}]}')"; expect_error 400
    grep -q 'control character' "$T/resp" || fail "a raw newline in a string: $(cat "$T/resp")"
    post /v1/chat/completions "$chat"; expect_ok "after every bad request"
    jq -e '.choices[0].finish_reason == "length"' "$T/resp" >/dev/null || fail "after the errors: $(cat "$T/resp")"
    echo "ok the server answers after every bad request"
    stop_server
    ;;

clients)
    # a client that goes away stops its generation; a slow one is closed
    # after --timeout without holding up the others; the queue is bounded
    start_server emu --backend emu --parallel 1 --queue 1 --timeout 2
    long='{"prompt": "Hello", "max_tokens": 2000, "temperature": 0, "stream": true}'
    curl -sSN --max-time 60 -H "$J" -d "$long" "$URL/v1/completions" >"$T/gone" 2>/dev/null &
    c=$!
    for i in $(seq 100); do [ -s "$T/gone" ] && break; sleep 0.1; done
    [ -s "$T/gone" ] || fail "the stream sent nothing"
    kill $c; wait $c 2>/dev/null
    for i in $(seq 50); do
        [ "$(METRIC=qpack_requests_cancelled_total metric)" = 1 ] && [ "$(METRIC=qpack_sessions_busy metric)" = 0 ] && break
        sleep 0.1
    done
    [ "$(METRIC=qpack_requests_cancelled_total metric)" = 1 ] || fail "a client that went away did not cancel"
    [ "$(METRIC=qpack_sessions_busy metric)" = 0 ] || fail "the session is still busy after its client went away"
    generated=$(METRIC=qpack_completion_tokens_total metric)
    [ "$generated" -lt 2000 ] || fail "the generation ran to its end ($generated tokens)"
    echo "ok a client gone mid-stream stopped its generation after $generated tokens"

    # one running (not streamed, then gone), one waiting, one refused
    curl -sS --max-time 60 -H "$J" -d '{"prompt": "Hello", "max_tokens": 2000}' "$URL/v1/completions" >/dev/null 2>&1 &
    c1=$!
    for i in $(seq 50); do [ "$(METRIC=qpack_sessions_busy metric)" = 1 ] && break; sleep 0.1; done
    curl -sS --max-time 60 -o "$T/waiting" -w '%{http_code}' -H "$J" \
        -d '{"prompt": "Hello", "max_tokens": 4, "temperature": 0}' "$URL/v1/completions" >"$T/waiting.code" &
    c2=$!
    for i in $(seq 50); do [ "$(METRIC=qpack_queue_waiting metric)" = 1 ] && break; sleep 0.1; done
    [ "$(METRIC=qpack_queue_waiting metric)" = 1 ] || fail "the second request is not waiting"
    code=$(curl -sS -D "$T/headers" -o "$T/resp" -w '%{http_code}' -H "$J" -d '{"prompt": "Hi"}' "$URL/v1/completions")
    expect_error 503 server_busy
    grep -qi '^retry-after:' "$T/headers" || fail "503 without Retry-After"
    kill $c1; wait $c1 2>/dev/null
    wait $c2
    [ "$(cat "$T/waiting.code")" = 200 ] || fail "the waiting request: $(cat "$T/waiting.code") $(cat "$T/waiting")"
    qrun_text "Hello" 4 "$T/want"
    [ "$(jq -r '.choices[0].text' "$T/waiting")" = "$(cat "$T/want")" ] || fail "the waiting request's text"
    [ "$(METRIC=qpack_requests_cancelled_total metric)" = 2 ] || fail "the non-streamed request gone did not cancel"
    echo "ok queue: one ran, one waited and got its answer, one got 503; the gone client's generation stopped"

    # a client gone while it waits leaves the queue
    curl -sS --max-time 60 -H "$J" -d '{"prompt": "Hello", "max_tokens": 2000}' "$URL/v1/completions" >/dev/null 2>&1 &
    c1=$!
    for i in $(seq 50); do [ "$(METRIC=qpack_sessions_busy metric)" = 1 ] && break; sleep 0.1; done
    curl -sS --max-time 60 -H "$J" -d '{"prompt": "Hello", "max_tokens": 4}' "$URL/v1/completions" >/dev/null 2>&1 &
    c2=$!
    for i in $(seq 50); do [ "$(METRIC=qpack_queue_waiting metric)" = 1 ] && break; sleep 0.1; done
    kill $c2; wait $c2 2>/dev/null
    for i in $(seq 50); do [ "$(METRIC=qpack_queue_waiting metric)" = 0 ] && break; sleep 0.1; done
    [ "$(METRIC=qpack_queue_waiting metric)" = 0 ] || fail "a gone client's request is still queued"
    kill $c1; wait $c1 2>/dev/null
    echo "ok a client gone while waiting leaves the queue"

    # a slow client: half a request, then silence
    exec 3<>/dev/tcp/127.0.0.1/${URL##*:} || fail "connecting"
    printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"pro' >&3
    post /v1/completions '{"prompt": "Hello", "max_tokens": 4, "temperature": 0}'
    expect_ok "beside a slow client"
    start=$(date +%s)
    timeout 20 cat <&3 >"$T/slow"
    waited=$(( $(date +%s) - start ))
    exec 3<&-
    [ $waited -lt 15 ] || fail "the slow client's connection was not closed ($waited s)"
    echo "ok a slow client was closed after ${waited} s while others were served"

    # a stream cancelled while the session's decoder holds part of a
    # character: logit_bias forces token 160, the byte 0xE4 (the first of a
    # three-byte character), at every step, so each token turns the one
    # before into U+FFFD and is itself held. Nothing of it may reach the
    # next request on the session, whose greedy reply is qrun's.
    cancelled=$(METRIC=qpack_requests_cancelled_total metric)
    partial='{"prompt": "Hello", "max_tokens": 2000, "temperature": 0, "stream": true, "logit_bias": {"160": 100}}'
    curl -sSN --max-time 60 -H "$J" -d "$partial" "$URL/v1/completions" >"$T/resp" 2>/dev/null &
    c=$!
    for i in $(seq 100); do [ "$(grep -c '^data: {' "$T/resp")" -ge 2 ] && break; sleep 0.1; done
    kill $c; wait $c 2>/dev/null
    [[ "$(stream_text)" == *$'\xef\xbf\xbd'* ]] || fail "token 160 did not stream as U+FFFD: $(head -c 300 "$T/resp")"
    for i in $(seq 50); do
        [ "$(METRIC=qpack_requests_cancelled_total metric)" = $((cancelled + 1)) ] &&
            [ "$(METRIC=qpack_sessions_busy metric)" = 0 ] && break
        sleep 0.1
    done
    [ "$(METRIC=qpack_requests_cancelled_total metric)" = $((cancelled + 1)) ] ||
        fail "the stream of U+FFFD was not cancelled mid-reply"
    post /v1/completions '{"prompt": "Hello", "max_tokens": 4, "temperature": 0}'
    expect_ok "after a cancelled stream"
    qrun_text "Hello" 4 "$T/want"
    [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(cat "$T/want")" ] ||
        fail "the reply after a cancelled stream: $(jq -c '.choices[0].text' "$T/resp"), qrun: $(jq -Rsc . "$T/want")"
    echo "ok a stream cancelled mid-character left nothing to the next reply"
    stop_server

    # authentication
    start_server key --backend emu --api-key 's3cret key'
    get /v1/models; expect_error 401 invalid_api_key
    get /v1/models -H 'Authorization: Bearer wrong'; expect_error 401 invalid_api_key
    get /metrics; expect_error 401
    post /v1/completions '{"prompt": "Hi", "max_tokens": 1}'; expect_error 401
    get /v1/models -H 'Authorization: Bearer s3cret key'; expect_ok "with the key"
    post /v1/completions '{"prompt": "Hi", "max_tokens": 1}' -H 'Authorization: Bearer s3cret key'; expect_ok "with the key"
    get /health; expect_ok "health without the key"
    get /; expect_ok "the page without the key"
    stop_server INT
    ;;

openai)
    [ -f "$NODE_DIR/unreachable" ] && skip "$(cat "$NODE_DIR/unreachable")"
    [ -d "$NODE_DIR/node_modules/openai" ] || fail "no openai package in $NODE_DIR (serve_setup)"
    qrun_chat Hi 8 "$T/chat.txt"
    qrun_text Hello 8 "$T/text.txt"
    start_server emu --backend emu --api-key k --parallel 2
    cp "$SRC/tests/serve/openai_client.mjs" "$NODE_DIR/" || fail "copying the client"
    timeout 120 node "$NODE_DIR/openai_client.mjs" "$URL" M k "$T" || fail "the OpenAI client"
    "$QRUN" -m "$M" --temp 0 --backend emu --chat --system "Be brief." -p Hi -n 8 >"$T/system.txt" 2>"$T/qrun.err" ||
        fail "qrun --chat --system: $(cat "$T/qrun.err")"
    cp "$SRC/tests/serve/langchain_client.mjs" "$NODE_DIR/" || fail "copying the LangChain client"
    timeout 120 node "$NODE_DIR/langchain_client.mjs" "$URL" M k "$T" || fail "LangChain's ChatOpenAI"
    stop_server
    ;;

responses)
    # POST /v1/responses: the openai client, then curl's refusals
    [ -f "$NODE_DIR/unreachable" ] && skip "$(cat "$NODE_DIR/unreachable")"
    [ -d "$NODE_DIR/node_modules/openai" ] || fail "no openai package in $NODE_DIR (serve_setup)"
    qrun_chat Hi 8 "$T/chat.txt"
    start_server emu --backend emu --api-key k
    cp "$SRC/tests/serve/responses_client.mjs" "$NODE_DIR/" || fail "copying the client"
    timeout 120 node "$NODE_DIR/responses_client.mjs" "$URL" M k "$T" || fail "the OpenAI client's responses"
    A=(-H 'Authorization: Bearer k')
    # refused STATUS PARAM [CODE]: OpenAI's error object naming the field
    refused() {
        expect_error "$1" "${3:-}"
        [ "$(jq -r .error.param "$T/resp")" = "$2" ] || fail "param $(jq -r .error.param "$T/resp"), expected $2"
    }
    post /v1/responses '{"input": 3}' "${A[@]}"; refused 400 input
    post /v1/responses '{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}' "${A[@]}"
    refused 400 input
    post /v1/responses '{"input": [{"type": "reasoning", "summary": []}]}' "${A[@]}"; refused 400 input
    post /v1/responses '{"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}' "${A[@]}"
    refused 400 input
    post /v1/responses '{"input": []}' "${A[@]}"; refused 400 input
    post /v1/responses '{"input": "Hi", "tools": [{"type": "web_search"}]}' "${A[@]}"; refused 400 tools
    post /v1/responses '{"input": "Hi", "tools": [{"type": "function"}]}' "${A[@]}"; refused 400 tools
    post /v1/responses '{"input": "Hi", "tool_choice": {"type": "file_search"}}' "${A[@]}"
    refused 400 tool_choice
    post /v1/responses '{"input": "Hi", "text": {"format": {"type": "xml"}}}' "${A[@]}"; refused 400 text.format
    post /v1/responses '{"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}}' "${A[@]}"
    refused 400 text.format
    post /v1/responses '{"input": "Hi", "max_output_tokens": 0}' "${A[@]}"; refused 400 max_output_tokens
    post /v1/responses '{"input": "Hi", "temperature": "hot"}' "${A[@]}"; refused 400 temperature
    post /v1/responses '{"input": "Hi", "background": true}' "${A[@]}"; refused 400 background
    post /v1/responses '{"input": "Hi", "store": 1}' "${A[@]}"; refused 400 store
    post /v1/responses '{"input": "Hi", "previous_response_id": "resp_nope"}' "${A[@]}"
    refused 404 previous_response_id previous_response_not_found
    grep -q resp_nope "$T/resp" || fail "the 404 does not name the id: $(cat "$T/resp")"
    post /v1/responses '{"input": "Hi", "max_output_tokens": 2, "some_new_field": {"x": 1}, "include": [], "truncation": "disabled"}' \
        "${A[@]}"; expect_ok "unknown and neutral fields"
    post /v1/responses '{"input": "Hi", "stream": "yes"}' "${A[@]}"; refused 400 stream
    # the stream's framing: each event's line names its data's type; no [DONE]
    post /v1/responses '{"input": "Hi", "max_output_tokens": 4, "stream": true}' "${A[@]}"; expect_ok "a stream"
    grep -q '^data: \[DONE\]' "$T/resp" && fail "a Responses stream ends without [DONE]"
    paste -d' ' <(grep '^event: ' "$T/resp" | cut -d' ' -f2) <(grep '^data: ' "$T/resp" | cut -c7- | jq -r .type) |
        awk 'NF != 2 || $1 != $2 { bad = 1 } END { exit bad }' || fail "an event: line and its data differ: $(head -c 600 "$T/resp")"
    echo "ok the stream's event lines name their data's types"
    stop_server
    ;;
anthropic)
    # Anthropic's Messages API with Anthropic's client; its refusals in
    # Anthropic's error shape
    [ -f "$NODE_DIR/unreachable" ] && skip "$(cat "$NODE_DIR/unreachable")"
    [ -d "$NODE_DIR/node_modules/@anthropic-ai/sdk" ] || fail "no @anthropic-ai/sdk package in $NODE_DIR (serve_setup)"
    qrun_chat Hi 8 "$T/chat.txt"
    "$QRUN" -m "$M" --backend emu --temp 0 --chat --system "Be brief." -p Hi -n 8 >"$T/system.txt" 2>"$T/qrun.err" ||
        fail "qrun --chat --system: $(cat "$T/qrun.err")"
    start_server emu --backend emu --api-key k
    cp "$SRC/tests/serve/anthropic_client.mjs" "$NODE_DIR/" || fail "copying the client"
    timeout 120 node "$NODE_DIR/anthropic_client.mjs" "$URL" M k "$T" || fail "Anthropic's client"
    # expect_anthropic_error STATUS TYPE WORD: Anthropic's error object,
    # its message naming WORD
    expect_anthropic_error() {
        [ "$code" = "$1" ] || fail "status $code, expected $1: $(head -c 300 "$T/resp")"
        jq -e --arg t "$2" --arg w "$3" '.type == "error" and .error.type == $t and
            (.error.message | type == "string" and contains($w))' "$T/resp" >/dev/null ||
            fail "not Anthropic's $2 naming '$3': $(head -c 300 "$T/resp")"
        echo "ok $1 $(jq -r .error.message "$T/resp")"
    }
    K='x-api-key: k'
    hi='"messages": [{"role": "user", "content": "Hi"}]'
    post /v1/messages "{$hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error max_tokens
    post /v1/messages "{\"max_tokens\": 0, $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error max_tokens
    post /v1/messages "{\"max_tokens\": \"8\", $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error max_tokens
    post /v1/messages '{"max_tokens": 8, "messages": [{"role": "system", "content": "Hi"}]}' -H "$K"
    expect_anthropic_error 400 invalid_request_error 'messages[0].role'
    post /v1/messages '{"max_tokens": 8, "messages": [{"role": "user", "content": 7}]}' -H "$K"
    expect_anthropic_error 400 invalid_request_error 'messages[0].content'
    post /v1/messages '{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}' -H "$K"
    expect_anthropic_error 400 invalid_request_error image
    post /v1/messages "{\"max_tokens\": 8, \"temperature\": 1.5, $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error temperature
    post /v1/messages "{\"max_tokens\": 8, \"top_k\": 1.5, $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error top_k
    post /v1/messages "{\"max_tokens\": 8, \"stop_sequences\": \"x\", $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error stop_sequences
    post /v1/messages "{\"max_tokens\": 8, \"system\": 1, $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error system
    post /v1/messages "{\"max_tokens\": 8, \"stream\": \"yes\", $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error stream
    post /v1/messages "{\"max_tokens\": 8, \"tools\": [{\"name\": \"f\"}], $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error input_schema
    post /v1/messages "{\"max_tokens\": 8, \"tool_choice\": {\"type\": \"required\"}, $hi}" -H "$K"; expect_anthropic_error 400 invalid_request_error tool_choice
    post /v1/messages "{\"max_tokens\": 8, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 2000}, $hi}" -H "$K"
    expect_anthropic_error 400 invalid_request_error budget_tokens
    post /v1/messages '{"max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}' -H "$K"
    expect_anthropic_error 400 invalid_request_error prefill
    post /v1/messages '{"max_tokens": 8, "messages": [' -H "$K"; expect_anthropic_error 400 invalid_request_error JSON
    post /v1/messages "{\"max_tokens\": 8, $hi}"; expect_anthropic_error 401 authentication_error 'API key'
    get /v1/messages -H "$K"; expect_anthropic_error 405 invalid_request_error POST
    post /v1/messages/count_tokens "{\"max_tokens\": \"ignored\"}" -H "$K"; expect_anthropic_error 400 invalid_request_error messages
    # unknown fields are ignored, in the body and in a block
    post /v1/messages "{\"max_tokens\": 2, \"temperature\": 0, \"container\": 1, \"metadata\": {\"user_id\": \"u\"},
        \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\", \"citations\": 5}]}]}" -H "$K"
    expect_ok "unknown fields"
    stop_server
    ;;

choices)
    # a prompt another session holds is copied, not fed again: B's prompt
    # is A's, while A still runs on the other session; B's reply is qrun's
    start_server emu --backend emu --parallel 2
    text="The tiny model reads this line of words many times over: $(for i in $(seq 40); do printf 'words and more words %d, ' $i; done)"
    n=$(count_tokens "$text")
    curl -sSN --max-time 60 -H "$J" -d "$(jq -nc --arg p "$text" '{prompt: $p, max_tokens: 2000, temperature: 0, stream: true}')" \
        "$URL/v1/completions" >"$T/a" 2>/dev/null &
    a=$!
    for i in $(seq 100); do grep -q '"text":"[^"]' "$T/a" 2>/dev/null && break; sleep 0.1; done
    grep -q '"text":"[^"]' "$T/a" || fail "A sent no text"
    qrun_text "$text" 8 "$T/want"
    post /v1/completions "$(jq -nc --arg p "$text" '{prompt: $p, max_tokens: 8, temperature: 0}')"; expect_ok "B"
    kill $a; wait $a 2>/dev/null
    [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(cat "$T/want")" ] || fail "B's reply: $(jq -r '.choices[0].text' "$T/resp")"
    [ "$(jq -r .usage.prompt_tokens_details.cached_tokens "$T/resp")" = $((n - 1)) ] ||
        fail "B's cached tokens: $(jq -c .usage "$T/resp"), prompt $n"
    [ "$(METRIC=qpack_prompt_copied_tokens_total metric)" = $((n - 1)) ] ||
        fail "copied tokens: $(METRIC=qpack_prompt_copied_tokens_total metric)"
    echo "ok a $n-token prompt another session held was copied ($((n - 1)) positions), the reply qrun's"

    # n choices: the prompt fed once and copied; greedy, each is qrun's;
    # sampled, choice k is the single reply with seed + k
    copied=$(METRIC=qpack_prompt_copied_tokens_total metric) cached=$(METRIC=qpack_prompt_cached_tokens_total metric)
    p3="Three replies to one prompt that is fed once and copied twice"
    m=$(count_tokens "$p3")
    post /v1/completions "$(jq -nc --arg p "$p3" '{prompt: $p, max_tokens: 8, temperature: 0, n: 3}')"; expect_ok "n 3"
    qrun_text "$p3" 8 "$T/want"
    for k in 0 1 2; do
        [ "$(jq -r ".choices[$k] | [.index, .text] | @tsv" "$T/resp")" = "$k	$(cat "$T/want")" ] ||
            fail "choice $k: $(jq -c ".choices[$k]" "$T/resp")"
    done
    [ "$(jq -r '[(.choices | length), .usage.prompt_tokens, .usage.completion_tokens] | join(" ")' "$T/resp")" = "3 $m 24" ] ||
        fail "n 3 usage: $(jq -c '[(.choices | length), .usage]' "$T/resp")"
    # on 2 sessions: the second choice copies the first's prompt, the third
    # finds it in the session the first has left
    [ "$m" -ge 8 ] && [ "$(METRIC=qpack_prompt_copied_tokens_total metric)" = $((copied + m - 1)) ] &&
        [ "$(METRIC=qpack_prompt_cached_tokens_total metric)" = $((cached + 2 * (m - 1))) ] ||
        fail "the choices fed their prompt again: $(METRIC=qpack_prompt_copied_tokens_total metric) copied," \
             "$(METRIC=qpack_prompt_cached_tokens_total metric) cached, from $copied and $cached, $m tokens"
    sampled='"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "temperature": 1, "top_p": 1, "top_k": 0, "min_p": 0'
    post /v1/chat/completions "{$sampled, \"seed\": 7, \"n\": 3}"; expect_ok "chat n 3"
    cp "$T/resp" "$T/three"
    for k in 0 1 2; do
        post /v1/chat/completions "{$sampled, \"seed\": $((7 + k))}"; expect_ok "seed $((7 + k))"
        [ "$(jq -r ".choices[$k].message.content" "$T/three")" = "$(jq -r '.choices[0].message.content' "$T/resp")" ] ||
            fail "chat choice $k is not seed $((7 + k))'s reply"
    done
    [ "$(jq -r '[.choices[].message.content] | unique | length' "$T/three")" -ge 2 ] ||
        fail "three sampled choices are all alike: the test shows nothing"
    # streamed: each choice's deltas by their index, a finish for each, the usage of all
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
                                "n": 2, "stream": true, "stream_options": {"include_usage": true}}'
    expect_ok "chat n 2 streamed"
    qrun_chat Hi 6 "$T/want"
    for k in 0 1; do
        got=$(grep '^data: {' "$T/resp" | sed 's/^data: //' |
              jq -rj --argjson k $k '.choices[] | select(.index == $k) | .delta.content // empty')
        [ "$got" = "$(cat "$T/want")" ] || fail "streamed choice $k: '$got'"
    done
    [ "$(grep '^data: {' "$T/resp" | sed 's/^data: //' | jq -r '.choices[] | select(.finish_reason) | .index' | sort | tr '\n' ' ')" = "0 1 " ] ||
        fail "streamed: not one finish per choice"
    [ "$(grep '^data: {' "$T/resp" | tail -n 1 | sed 's/^data: //' | jq -r .usage.completion_tokens)" = 12 ] ||
        fail "streamed usage: $(grep '^data: {' "$T/resp" | tail -n 1)"
    echo "ok n 3: greedy choices are qrun's, the prompt copied; sampled choices are seeds 7, 8, 9; n 2 streamed"
    stop_server
    ;;

reasoning)
    # thinking on: a chat reply's <think> block comes apart as
    # reasoning_content, whole and streamed, as an independent split
    # (python) of the same sampled reply from /v1/completions says; the
    # biases make a random model write the tags
    command -v python3 >/dev/null || skip "needs python3"
    start_server emu --backend emu
    sampling='"temperature": 1, "top_p": 1, "top_k": 0, "min_p": 0, "repeat_penalty": 1, "max_tokens": 30,
              "logit_bias": {"151667": 10, "151668": 10}'
    prompt='<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'
    seen=0
    for seed in 1 2 3 4 5 6; do
        post /v1/completions "{\"prompt\": \"$prompt\", \"seed\": $seed, $sampling}"; expect_ok "completion $seed"
        jq -j '.choices[0].text' "$T/resp" >"$T/text"
        chat="{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"seed\": $seed, $sampling,
               \"chat_template_kwargs\": {\"enable_thinking\": true}"
        post /v1/chat/completions "$chat}"; expect_ok "chat $seed"
        jq -j '.choices[0].message.reasoning_content // ""' "$T/resp" >"$T/reason"
        jq -j '.choices[0].message.content' "$T/resp" >"$T/answer"
        post /v1/chat/completions "$chat, \"stream\": true}"; expect_ok "chat stream $seed"
        grep '^data: {' "$T/resp" | sed 's/^data: //' |
            jq -j '.choices[0] | select(.) | .delta.reasoning_content // empty' >"$T/sreason"
        grep '^data: {' "$T/resp" | sed 's/^data: //' |
            jq -j '.choices[0] | select(.) | .delta.content // empty' >"$T/sanswer"
        python3 - "$T/text" "$T/reason" "$T/answer" "$T/sreason" "$T/sanswer" <<'PY' || fail "seed $seed: the split differs"
import sys
text, reason, answer, sreason, sanswer = (open(f, encoding="utf-8").read() for f in sys.argv[1:])
blank = " \n\r\t"
t = text.lstrip(blank)
if t.startswith("<think>"):
    want_reason, _, want_answer = t[len("<think>"):].partition("</think>")
    want_reason, want_answer = want_reason.strip(blank), want_answer.lstrip(blank)
else:
    want_reason, want_answer = "", text
assert (reason, answer) == (want_reason, want_answer), ("whole", reason, answer, text)
assert (sreason, sanswer) == (want_reason, want_answer), ("streamed", sreason, sanswer, text)
PY
        [ -s "$T/reason" ] && seen=$((seen + 1))
    done
    [ "$seen" -ge 1 ] || fail "no reply of 6 had reasoning: the test shows nothing"
    stop_server
    echo "ok 6 chat replies split as python splits them, $seen with reasoning"
    ;;

tools)
    # tools through Qwen3's chat template: /apply-template against the
    # template of the tokenizer_config.json rendered by jinja2 as
    # transformers renders it (tests/serve/chat_template_ref.py); requests
    # with tools answered, streamed too; forced calls; what is not a tool
    # refused by name
    py=
    for p in python3 /usr/bin/python3; do
        command -v "$p" >/dev/null && "$p" -c 'import jinja2' 2>/dev/null && { py=$p; break; }
    done
    [ -n "$py" ] || fail "no python3 with jinja2 (scripts/install_deps.sh installs python3-jinja2)"
    start_server emu --backend emu
    "$py" "$SRC/tests/serve/chat_template_ref.py" "$URL" "$TOKDIR/tokenizer_config.json" ||
        fail "the server's template differs from Qwen3's"
    tools='[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]'
    for stream in false true; do
        post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": $tools,
                                    \"max_tokens\": 4, \"stream\": $stream}"
        expect_ok "tools, stream $stream"
    done
    post /apply-template "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": $tools, \"tool_choice\": \"none\"}"
    expect_ok "tool_choice none"
    [ "$(jq -r .prompt "$T/resp")" = "$(printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n')" ] ||
        fail "tool_choice none still offers the tools: $(cat "$T/resp")"
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function"}]}'
    expect_error 400
    [ "$(jq -r .error.param "$T/resp")" = tools ] || fail "a tool without a function: $(cat "$T/resp")"
    # a forced call: the random model's reply is a call of a tool offered
    # (of the one named), its arguments holding the tool's parameters
    weather='{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
              "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}, "days": {"type": "integer"}},
              "required": ["city"]}}}'
    for choice in '"required"' '{"type": "function", "function": {"name": "get_weather"}}'; do
        for stream in false true; do
            post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], \"max_tokens\": 600,
                                        \"tools\": [$weather], \"tool_choice\": $choice, \"stream\": $stream}"
            expect_ok "tool_choice $choice, stream $stream"
            if [ $stream = true ]; then
                grep '^data: {' "$T/resp" | sed 's/^data: //' | jq -s '{choices: [{finish_reason: (map(.choices[0].finish_reason
                    // empty) | last), message: {tool_calls: [{function: {name: (map(.choices[0].delta.tool_calls[0].function.name
                    // empty) | join("")), arguments: (map(.choices[0].delta.tool_calls[0].function.arguments // empty)
                    | join(""))}}]}}]}' >"$T/call" || fail "streamed call: $(head -c 300 "$T/resp")"
            else
                cp "$T/resp" "$T/call"
            fi
            jq -e '.choices[0] | .finish_reason == "tool_calls" and (.message.tool_calls | length == 1) and
                   .message.tool_calls[0].function.name == "get_weather" and
                   (.message.tool_calls[0].function.arguments | fromjson | (.city | IN("Paris", "Oslo")) and
                    ((.days // 0) | type == "number" and . == floor) and (keys - ["city", "days"] == []))' "$T/call" \
                >/dev/null || fail "tool_choice $choice, stream $stream: $(head -c 400 "$T/call")"
        done
        echo "ok tool_choice $choice: $(jq -c '.choices[0].message.tool_calls[0].function' "$T/call")"
    done
    post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": $tools,
                                \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}"
    expect_error 400
    [ "$(jq -r .error.param "$T/resp")" = tool_choice ] || fail "a tool not offered: $(cat "$T/resp")"
    post /v1/chat/completions '{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": 1}}]}]}'
    expect_error 400
    stop_server
    ;;

formats)
    # response_format on the random model: the reply held to a schema parses
    # and holds it (checked by jq), greedy, sampled, streamed and from
    # /v1/completions; json_object gives an object or runs to the length;
    # a schema the machine cannot hold is a 400 naming response_format
    start_server emu --backend emu
    schema='{"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
             "ok": {"type": "boolean"}, "n": {"type": "integer"},
             "tags": {"type": "array", "items": {"enum": ["a", "b"]}}}, "required": ["color", "ok", "n"]}'
    rf="{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"pick\", \"strict\": true, \"schema\": $schema}}"
    holds='(.color | IN("red", "green", "blue")) and (.ok | type == "boolean") and (.n | type == "number" and . == floor)
           and ((.tags // []) | all(IN("a", "b"))) and (keys - ["color", "ok", "n", "tags"] == [])'
    for t in 0 1; do
        post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Pick one\"}], \"max_tokens\": 1500,
                                    \"temperature\": $t, \"seed\": 3, \"response_format\": $rf}"
        expect_ok "json_schema, temperature $t"
        [ "$(jq -r '.choices[0].finish_reason' "$T/resp")" = stop ] || fail "json_schema ran to the length: $(head -c 300 "$T/resp")"
        jq -r '.choices[0].message.content' "$T/resp" >"$T/content"
        jq -e "$holds" "$T/content" >/dev/null || fail "temperature $t: the reply does not hold the schema: $(cat "$T/content")"
        echo "ok json_schema, temperature $t: $(jq -c . "$T/content")"
    done
    post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Pick\"}], \"max_tokens\": 1500,
                                \"temperature\": 1, \"seed\": 9, \"stream\": true, \"response_format\": $rf}"
    expect_ok "json_schema streamed"
    stream_text >"$T/content"
    jq -e "$holds" "$T/content" >/dev/null || fail "streamed: the reply does not hold the schema: $(cat "$T/content")"
    post /v1/completions "{\"prompt\": \"Answer: \", \"max_tokens\": 1500, \"response_format\": $rf}"
    expect_ok "json_schema, completions"
    jq -r '.choices[0].text' "$T/resp" | jq -e "$holds" >/dev/null || fail "completions: $(head -c 300 "$T/resp")"
    echo "ok json_schema from /v1/completions"
    # the random model's strings would run on: the budget closes the value
    # in time, the end token included (3 tokens: "{", "}" and the end);
    # stop strings that would cut it inside are ignored
    stops='["}", "\"", " ", "\n"]'
    for case in "200 []" "40 $stops" "3 []" "3 $stops"; do
        mt=${case%% *} stop=${case#* }
        post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": $mt,
                                    \"temperature\": 1, \"seed\": $mt, \"stop\": $stop,
                                    \"response_format\": {\"type\": \"json_object\"}}"
        expect_ok "json_object, max_tokens $mt, stop $stop"
        [ "$(jq -r '.choices[0].finish_reason' "$T/resp")" = stop ] &&
            [ "$(jq -r .usage.completion_tokens "$T/resp")" -le $mt ] &&
            jq -r '.choices[0].message.content' "$T/resp" | jq -e 'type == "object"' >/dev/null ||
            fail "json_object, max_tokens $mt, stop $stop: $(head -c 400 "$T/resp")"
    done
    echo "ok json_object closes within max_tokens, whatever its stop strings"
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}],
                                "response_format": {"type": "json_schema", "json_schema": {"schema": {"anyOf": [{}]}}}}'
    expect_error 400
    [ "$(jq -r .error.param "$T/resp")" = response_format ] || fail "anyOf: $(cat "$T/resp")"
    stop_server
    ;;

embeddings)
    # /v1/embeddings on an embedding checkpoint (1_Pooling: last token; the
    # vector's accuracy against the float reference is test_lib's): a unit
    # vector of the hidden size; text and its token ids alike; a list of
    # inputs gives each input's vector as alone; dimensions cuts and
    # rescales; base64 holds the same floats; the clients agree; a
    # generator's server refuses
    "$QP_GEN" "$T/emb" --preset tiny --vocab 151936 --seed 4 --pooling last --tokenizer-dir "$TOKDIR" >/dev/null ||
        fail "generating the embedding checkpoint"
    "$QPACK" pack "$T/emb" -o "$T/emb.qpk" --quiet || fail "packing the embedding checkpoint"
    M_GEN=$M M=$T/emb.qpk
    start_server emb --backend emu
    M=$M_GEN
    post /v1/embeddings '{"input": "Hello, world!", "model": "text-embedding-3-small"}'
    expect_ok "embeddings"
    jq -e '.object == "list" and (.data | length == 1) and .data[0].object == "embedding" and .data[0].index == 0 and
           (.data[0].embedding | length == 64) and (([.data[0].embedding[] | . * .] | add) - 1 | fabs < 1e-6) and
           .usage.prompt_tokens == 5 and .usage.total_tokens == 5' "$T/resp" >/dev/null ||
        fail "not a unit vector of 64 values for 5 tokens (4 and <|endoftext|>): $(head -c 300 "$T/resp")"
    jq -c '.data[0].embedding' "$T/resp" >"$T/hello.json"
    post /v1/embeddings '{"input": [[9707, 11, 1879, 0, 151643], "Another text", "Hello, world!"]}'
    expect_ok "embeddings of a list"
    jq -e --slurpfile h "$T/hello.json" '(.data | length == 3) and .data[0].embedding == $h[0] and
           .data[2].embedding == $h[0] and .data[1].embedding != $h[0] and ([.data[].index] == [0, 1, 2])' "$T/resp" \
        >/dev/null || fail "a list's vectors are not each input's: $(head -c 300 "$T/resp")"
    post /v1/embeddings '{"input": "Hello, world!", "dimensions": 16}'
    expect_ok "dimensions"
    jq -e --slurpfile h "$T/hello.json" '.data[0].embedding as $v | ($h[0][:16] | (map(. * .) | add | sqrt) as $n |
           map(. / $n)) as $w | ($v | length == 16) and ([range(16)] | all(($v[.] - $w[.]) | fabs < 1e-6))' "$T/resp" \
        >/dev/null || fail "dimensions 16 is not the first 16 values at unit length: $(head -c 300 "$T/resp")"
    for bad in '{"input": ""}' '{"input": []}' '{"input": [1.5]}' '{"input": [[151936]]}' '{"input": {"a": 1}}' \
               '{"input": "x", "dimensions": 65}' '{"input": "x", "encoding_format": "hex"}' '{}'; do
        post /v1/embeddings "$bad"
        expect_error 400
    done
    if [ -d "$NODE_DIR/node_modules/openai" ] && [ ! -f "$NODE_DIR/unreachable" ]; then
        cp "$SRC/tests/serve/embeddings_client.mjs" "$NODE_DIR/" || fail "copying the embeddings client"
        timeout 120 node "$NODE_DIR/embeddings_client.mjs" "$URL" emb "$T/hello.json" || fail "the embeddings clients"
    fi
    stop_server
    start_server gen --backend emu
    post /v1/embeddings '{"input": "Hello"}'
    expect_error 400 model_not_embedding
    stop_server
    ;;

rerank)
    # /v1/rerank on a reranker: a checkpoint whose folder names
    # Qwen3-Reranker packs as one (qpack info says so; --task overrides the
    # name either way). Each score must be P(yes) over {yes, no} of the
    # model card's prompt, written out here whole and tokenized by qrun in
    # one piece: within 1e-6 of the same engine's logits (qrun --backend
    # emu --dump-logits, the server's backend) and within 1e-5 of the
    # float64 reference's (qrun --backend ref on the checkpoint folder:
    # what the engine's fixed point costs, about 1.5e-6 here). Then the
    # order, top_n, return_documents, the index mapping, /rerank, usage,
    # the malformed requests (400 with one line, naming the field) and a
    # generator's server refusing
    R=$T/Qwen3-Reranker-tiny
    "$QP_GEN" "$R" --preset tiny --vocab 151936 --seed 5 --tokenizer-dir "$TOKDIR" >/dev/null ||
        fail "generating the reranker checkpoint"
    "$QPACK" pack "$R" -o "$T/rr.qpk" --quiet || fail "packing the reranker checkpoint"
    [ "$("$QPACK" info --json "$T/rr.qpk" | jq -r .task)" = rerank ] || fail "Qwen3-Reranker-tiny did not pack as a reranker"
    "$QPACK" pack "$R" -o "$T/gen.qpk" --task generate --quiet || fail "packing with --task generate"
    [ "$("$QPACK" info --json "$T/gen.qpk" | jq -r .task)" = none ] || fail "--task generate recorded a task"
    "$QPACK" pack "$WORK/ck" -o "$T/task.qpk" --task rerank --quiet || fail "packing with --task rerank"
    "$QPACK" info "$T/task.qpk" | grep -q '^task *rerank' || fail "--task rerank: $("$QPACK" info "$T/task.qpk")"
    "$QPACK" verify "$T/task.qpk" >/dev/null || fail "qpack verify refuses the task section"
    echo "ok the task is recorded: by the name, by --task"
    query='What is the capital of France?'
    docs=('Paris is the capital and largest city of France.' 'Bananas are yellow "and" sweet.'
          'Berlin — die Hauptstadt Deutschlands.' '')
    instr='Given a web search query, retrieve relevant passages that answer the query'
    # expect INSTRUCTION: each document's score from emu's and the
    # reference's logits, and its prompt's tokens, in $T/want.json
    expect() {
        local i
        for i in "${!docs[@]}"; do
            printf '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n<Instruct>: %s\n<Query>: %s\n<Document>: %s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' \
                "$1" "$query" "${docs[$i]}" >"$T/prompt$i"
            "$QRUN" tokenize -m "$T/rr.qpk" <"$T/prompt$i" >"$T/ids$i" || fail "tokenizing prompt $i"
            "$QRUN" -m "$T/rr.qpk" --backend emu --ids "$(cat "$T/ids$i")" -n 0 --dump-logits "$T/emu$i" 2>"$T/qrun.err" &&
                "$QRUN" -m "$R" --backend ref --ids "$(cat "$T/ids$i")" -n 0 --dump-logits "$T/ref$i" 2>"$T/qrun.err" ||
                fail "qrun --dump-logits: $(cat "$T/qrun.err")"
        done
        yes=$(printf yes | "$QRUN" tokenize -m "$T/rr.qpk") no=$(printf no | "$QRUN" tokenize -m "$T/rr.qpk")
        python3 - "$T" ${#docs[@]} "$yes" "$no" >"$T/want.json" <<'PY' || fail "reading the logits"
import json, math, struct, sys
t, n, yes, no = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def p_yes(path):
    d = open(path, 'rb').read()
    l = struct.unpack('<%df' % (len(d) // 4), d)
    return 1 / (1 + math.exp(l[no] - l[yes]))
print(json.dumps({'emu': [p_yes(f'{t}/emu{i}') for i in range(n)], 'ref': [p_yes(f'{t}/ref{i}') for i in range(n)],
                  'tokens': sum(len(open(f'{t}/ids{i}').read().split()) for i in range(n))}))
PY
    }
    # check_scores: every result's score is its document's, sorted best first
    check_scores() {
        jq -e --slurpfile w "$T/want.json" '$w[0] as $w | .results as $r | ([$r[].index] | sort) == [range($w.emu | length)] and
               all($r[]; ((.relevance_score - $w.emu[.index]) | fabs) < 1e-6 and ((.relevance_score - $w.ref[.index]) | fabs) < 1e-5) and
               ([$r[].relevance_score] == ([$r[].relevance_score] | sort | reverse)) and .usage.prompt_tokens == $w.tokens' \
            "$T/resp" >/dev/null || fail "$1: $(head -c 600 "$T/resp") want $(cat "$T/want.json")"
    }
    body=$(jq -nc --arg q "$query" '{query: $q, documents: $ARGS.positional}' --args "${docs[@]}")
    M_GEN=$M M=$T/rr.qpk
    start_server rr --backend emu
    M=$M_GEN
    expect "$instr"
    post /v1/rerank "$body"
    expect_ok "rerank"
    check_scores "the scores are not P(yes) of the model card's prompt"
    cp "$T/want.json" "$T/want_default.json"
    jq -e '.object == "list" and .model == "rr" and (.results | length == 4) and all(.results[]; has("document") | not) and
           .usage.total_tokens == .usage.prompt_tokens' "$T/resp" >/dev/null || fail "the response's shape: $(cat "$T/resp")"
    jq -c '[.results[].index]' "$T/resp" >"$T/order"
    echo "ok scores within 1e-6 of P(yes) from emu's logits, 1e-5 of the reference's: $(jq -c '[.results[] | [.index, .relevance_score]]' "$T/resp")"
    post /rerank "$(jq -c '. + {top_n: 2, return_documents: true, model: "anything"}' <<<"$body")"
    expect_ok "/rerank, top_n 2"
    jq -e --slurpfile o "$T/order" --argjson d "$(jq -c .documents <<<"$body")" '(.results | length == 2) and
           [.results[].index] == $o[0][:2] and all(.results[]; .document.text == $d[.index])' "$T/resp" >/dev/null ||
        fail "top_n 2 with documents: $(cat "$T/resp")"
    # Jina's and Cohere's documents as objects: the same scores, the text
    # returned as given, the object's other fields ignored
    post /v1/rerank "$(jq -c '. + {return_documents: true, documents: [.documents[] | {text: ., id: 7}]}' <<<"$body")"
    expect_ok "documents as objects"
    check_scores "documents as objects"
    jq -e --argjson d "$(jq -c .documents <<<"$body")" 'all(.results[]; .document.text == $d[.index])' "$T/resp" \
        >/dev/null || fail "documents as objects: the text returned: $(cat "$T/resp")"
    echo "ok documents as {\"text\": ...} objects"
    post /v1/rerank "$(jq -c '. + {top_n: 99}' <<<"$body")"
    [ "$code" = 200 ] && [ "$(jq '.results | length' "$T/resp")" = 4 ] || fail "top_n past the documents: $(cat "$T/resp")"
    echo "ok top_n, return_documents, the index mapping, /rerank"
    instr='Judge the passage by the year it names'
    expect "$instr"
    post /v1/rerank "$(jq -c --arg i "$instr" '. + {instruction: $i}' <<<"$body")"
    expect_ok "instruction"
    check_scores "instruction's scores"
    echo "ok instruction"
    long=$(head -c 20000 /dev/zero | tr '\0' 'a' | sed 's/a\{5\}/word /g')
    many=$(jq -nc '{query: "q", documents: [range(1001) | "d"]}')
    heavy=$(jq -nc --arg q "$(head -c 5000 /dev/zero | tr '\0' 'a' | sed 's/a\{5\}/word /g')" '{query: $q, documents: [range(1000) | "d"]}')
    for bad in '{"documents": ["a"]}' '{"query": 1, "documents": ["a"]}' '{"query": "q"}' '{"query": "q", "documents": "a"}' \
               '{"query": "q", "documents": []}' '{"query": "q", "documents": ["a", 1]}' '{"query": "q", "documents": [["a"]]}' \
               '{"query": "q", "documents": ["a"], "top_n": 0}' '{"query": "q", "documents": ["a"], "top_n": 1.5}' \
               '{"query": "q", "documents": ["a"], "top_n": "2"}' '{"query": "q", "documents": ["a"], "return_documents": "yes"}' \
               '{"query": "q", "documents": ["a"], "instruction": 3}' '[1]' '{"query": "q", "documents": ["a"]' \
               '{"query": "q", "documents": [{"image": "a.png"}]}' '{"query": "q", "documents": [{"text": 1}]}' \
               "$many" "$heavy" "{\"query\": \"q\", \"documents\": [\"a\", \"$long\"]}"; do
        post /v1/rerank "$bad"
        expect_error 400
        [ "$(wc -l <"$T/resp")" -le 1 ] || fail "the error is not one line: $(cat "$T/resp")"
    done
    [ "$(jq -r .error.code "$T/resp")" = context_length_exceeded ] || fail "a long document: $(cat "$T/resp")"
    head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$T/big"
    post /v1/rerank "@$T/big"
    expect_error 413
    post /v1/rerank "$body"
    expect_ok "after the malformed requests"
    cp "$T/want_default.json" "$T/want.json"
    check_scores "the scores after the malformed requests"
    [ "$(METRIC='qpack_requests_total{endpoint="/v1/rerank",code="400"}' metric)" = 19 ] ||
        fail "/metrics does not count the rerank 400s: $(curl -sS "$URL/metrics" | grep rerank)"
    stop_server
    start_server gen --backend emu
    post /v1/rerank "$body"
    expect_error 400 model_not_reranker
    stop_server
    ;;

browser)
    [ -f "$NODE_DIR/unreachable" ] && skip "$(cat "$NODE_DIR/unreachable")"
    [ -d "$NODE_DIR/node_modules/playwright-core" ] || fail "no playwright-core in $NODE_DIR (serve_setup)"
    export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
    [ -x "$CHROMIUM" ] || skip "no $CHROMIUM (Debian's chromium; scripts/install_deps.sh)"
    # the page in Chromium (browser.mjs says what it checks), on a server
    # with the default context and one with 192 positions, for trimming;
    # the screenshots stay in $T
    qrun_chat Hi 24 "$T/want"
    "$QRUN" -m "$M" --temp 0 --backend emu --chat --system "Be brief." -p Hi -n 24 >"$T/want_system" 2>"$T/qrun.err" ||
        fail "qrun --chat --system: $(cat "$T/qrun.err")"
    start_server small --backend emu -c 192
    small_url=$URL PID2=$PID
    start_server emu --backend emu
    cp "$SRC/tests/serve/browser.mjs" "$NODE_DIR/" || fail "copying the script"
    timeout 240 node "$NODE_DIR/browser.mjs" "$URL" "$small_url" "$T/want" "$T/want_system" "$T" ||
        fail "the page in Chromium"
    stop_server
    PID=$PID2 PID2= SERVER=small
    stop_server
    ls "$T"/*.png
    ;;

signals)
    # SIGINT and SIGTERM with work running and waiting: every client gets a
    # whole answer or an error, the server exits 0, and every BPF program
    # and map it held is gone
    need_root
    command -v bpftool >/dev/null || skip "needs bpftool"
    for sig in INT TERM; do
        start_server $sig --parallel 2 --queue 4
        ids=$(bpf_ids_of $PID)
        [ "$(echo "$ids" | grep -c prog_id)" -ge 8 ] || fail "the server holds $(echo "$ids" | grep -c prog_id) programs"
        for i in 1 2 3; do
            curl -sSN --max-time 60 -H "$J" -d '{"prompt": "Hello", "max_tokens": 100000, "stream": true}' \
                "$URL/v1/completions" >"$T/s$i" 2>/dev/null &
        done
        curl -sS --max-time 60 -o "$T/w" -w '%{http_code}' -H "$J" -d '{"prompt": "Hello", "max_tokens": 100000}' \
            "$URL/v1/completions" >"$T/w.code" 2>/dev/null &
        # two sessions taken, two requests waiting
        for i in $(seq 100); do
            [ "$(METRIC=qpack_sessions_busy metric)" = 2 ] && [ "$(METRIC=qpack_queue_waiting metric)" = 2 ] && break
            sleep 0.1
        done
        [ "$(METRIC=qpack_queue_waiting metric)" = 2 ] || fail "SIG$sig: the requests did not arrive"
        stop_server $sig
        wait
        for i in 1 2 3; do
            [ "$(tail -n 2 "$T/s$i" | head -n 1)" = "data: [DONE]" ] || fail "SIG$sig: stream $i did not end with [DONE]"
            grep '^data: {' "$T/s$i" | tail -n 1 | sed 's/^data: //' |
                jq -e '.error.code == "server_shutting_down"' >/dev/null || fail "SIG$sig: stream $i: no error event"
        done
        [ "$(cat "$T/w.code")" = 503 ] && jq -e '.error.code == "server_shutting_down"' "$T/w" >/dev/null ||
            fail "SIG$sig: the waiting request got $(cat "$T/w.code") $(cat "$T/w")"
        bpf_gone "$ids"
        echo "ok SIG$sig: exit 0, every client answered, $(echo "$ids" | wc -l) BPF programs and maps released"
    done
    ;;

queue_zero)
    # --queue 0: no request waits, but one is taken whenever a session is
    # free; a second one while the only session runs gets 503
    start_server queue0 --backend emu --parallel 1 --queue 0 --quiet
    body='{"prompt": "Hello", "max_tokens": 4, "temperature": 0}'
    for r in 1 2 3; do
        code=$(curl -sS --max-time 60 -o "$T/q0.$r" -w '%{http_code}' -H "$J" -d "$body" "$URL/v1/completions")
        [ "$code" = 200 ] || fail "request $r with the session free: status $code: $(head -c 200 "$T/q0.$r")"
    done
    # two replies where the server never holds more than one: no retry
    # serves them, so a 400 naming n rather than a 503
    post /v1/completions '{"prompt": "Hello", "max_tokens": 4, "n": 2}'
    expect_error 400
    [ "$(jq -r .error.param "$T/resp")" = n ] || fail "n above --parallel + --queue: $(cat "$T/resp")"
    long='{"prompt": "Hello", "max_tokens": 200, "temperature": 0, "stream": true}'
    curl -sS -N --max-time 60 -H "$J" -d "$long" "$URL/v1/completions" >"$T/q0.long" 2>/dev/null &
    lpid=$!
    for i in $(seq 100); do
        [ "$(METRIC=qpack_sessions_busy metric)" = 1 ] && break
        sleep 0.05
    done
    code=$(curl -sS --max-time 60 -o "$T/resp" -w '%{http_code}' -H "$J" -d "$body" "$URL/v1/completions")
    [ "$code" = 503 ] && expect_error 503 server_busy >/dev/null ||
        fail "a request while the only session runs: status $code, not 503"
    wait $lpid
    grep -q 'data: \[DONE\]' "$T/q0.long" || fail "the running request did not finish"
    stop_server
    echo "ok queue_zero: requests taken while the session is free, 503 while it runs"
    ;;
hostile)
    # slow and idle clients: 1000 connections held from loopback addresses
    # of their own while others are answered, a per-address limit, and a
    # deadline for the whole request that a trickle cannot extend
    # (tests/serve/hostile.mjs)
    ulimit -n 4096 2>/dev/null || [ "$(ulimit -n)" -ge 4096 ] || skip "ulimit -n 4096 is not allowed here"
    start_server hostile --backend emu --timeout 6 --max-per-ip 150 --quiet
    cp "$SRC/tests/serve/hostile.mjs" "$NODE_DIR/" || fail "copying the script"
    timeout 60 node "$NODE_DIR/hostile.mjs" "$URL" || fail "hostile clients"
    stop_server
    echo "ok hostile"
    ;;
crowded)
    # a crowd past --max-connections: 500 idle and 500 trickling connections
    # that come back when closed, against 200 places, while another
    # client's requests are all answered (tests/serve/crowded.mjs)
    ulimit -n 4096 2>/dev/null || [ "$(ulimit -n)" -ge 4096 ] || skip "ulimit -n 4096 is not allowed here"
    start_server crowded --backend emu --timeout 60 --max-connections 200 --quiet
    cp "$SRC/tests/serve/crowded.mjs" "$NODE_DIR/" || fail "copying the script"
    timeout 60 node "$NODE_DIR/crowded.mjs" "$URL" 200 || fail "a crowd denied service"
    stop_server
    echo "ok crowded"
    ;;
load)
    # 8 clients x 20 requests on --parallel 4 --queue 2 (bpf): every request
    # gets qrun's greedy answer or a clean 503, within a time bound, while
    # the running sessions share their steps (batches of more than one)
    need_root
    command -v bpftool >/dev/null || skip "needs bpftool"
    prompts=("Hi" "Hello there" "What is a dragon?" "Count to ten")
    for k in 0 1 2 3; do
        "$QRUN" -m "$M" --temp 0 --chat -p "${prompts[$k]}" -n 8 >"$T/want$k" 2>"$T/qrun.err" || fail "qrun: $(cat "$T/qrun.err")"
    done
    start_server load --parallel 4 --queue 2 --quiet
    ids=$(bpf_ids_of $PID)
    deadline=$(( $(date +%s) + 240 ))
    client() {
        local c=$1 r k body stream
        for r in $(seq 0 19); do
            [ "$(date +%s)" -lt $deadline ] || { echo timeout >"$T/c$c.r$r.code"; continue; }
            k=$(( (c + r) % 4 ))
            stream=$([ $(( r % 2 )) = 0 ] && echo true || echo false)
            body=$(jq -nc --arg p "${prompts[$k]}" --argjson s $stream \
                '{messages: [{role: "user", content: $p}], max_tokens: 8, temperature: 0, stream: $s}')
            curl -sS --max-time 120 -o "$T/c$c.r$r" -w '%{http_code}' -H "$J" -d "$body" \
                "$URL/v1/chat/completions" >"$T/c$c.r$r.code" 2>/dev/null
            echo "$k $stream" >"$T/c$c.r$r.what"
        done
    }
    start=$(date +%s%N)
    clients=()
    for c in $(seq 0 7); do client $c & clients+=($!); done
    wait "${clients[@]}"    # not the server, also a child of this shell
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    ok=0 busy=0
    for c in $(seq 0 7); do
        for r in $(seq 0 19); do
            f=$T/c$c.r$r
            code=$(cat "$f.code")
            read -r k stream <"$f.what"
            if [ "$code" = 503 ]; then
                cp "$f" "$T/resp"
                expect_error 503 server_busy >/dev/null
                busy=$((busy + 1))
                continue
            fi
            [ "$code" = 200 ] || fail "client $c request $r: status $code: $(head -c 200 "$f")"
            if [ "$stream" = true ]; then
                cp "$f" "$T/resp"
                stream_text >"$f.text"
                [ "$(tail -n 2 "$f" | head -n 1)" = "data: [DONE]" ] || fail "client $c request $r: stream unfinished"
            else
                jq -r '.choices[0].message.content' "$f" >"$f.text"
            fi
            cmp -s "$f.text" "$T/want$k" ||
                fail "client $c request $r ('${prompts[$k]}'): '$(cat "$f.text")', qrun: '$(cat "$T/want$k")'"
            ok=$((ok + 1))
        done
    done
    [ $ok -ge 40 ] || fail "only $ok of 160 requests were answered ($busy got 503)"
    [ "$(METRIC=qpack_requests_rejected_total metric)" = $busy ] || fail "metrics: rejected != $busy"
    [ "$(METRIC=qpack_sessions_busy metric)" = 0 ] || fail "metrics: sessions still busy"
    steps=$(METRIC=qpack_steps_total metric) in_steps=$(METRIC=qpack_step_sessions_total metric)
    awk -v s="$steps" -v n="$in_steps" 'BEGIN { exit !(s > 0 && n / s > 1.2) }' ||
        fail "metrics: $in_steps sessions in $steps steps: the sessions did not share steps"
    stop_server
    bpf_gone "$ids"
    echo "ok load: $ok answered as qrun does, $busy clean 503s, in $ms ms, $in_steps sessions in $steps steps;" \
         "$(echo "$ids" | wc -l) BPF objects released"
    ;;

lookup)
    # --lookup 7 on --parallel 3: six clients at once, greedy, streamed and
    # whole, each reply qrun's without lookup token for token, while the
    # drafts of some are kept in steps shared with the others; a request
    # with log probabilities or a temperature decodes step by step beside
    # them (the same reply as a server without --lookup gives it)
    backend=emu
    [ "$(id -u)" = 0 ] && backend=bpf
    prompts=("the cat sat on the mat and the cat sat on the mat and the cat" "one two three four one two three four one"
             "Hello")
    for k in 0 1 2; do
        "$QRUN" -m "$M" --temp 0 --backend $backend -p "${prompts[$k]}" -n 40 >"$T/want$k" 2>"$T/qrun.err" ||
            fail "qrun: $(cat "$T/qrun.err")"
    done
    body() { jq -nc --arg p "${prompts[$1]}" --argjson s "$2" '{prompt: $p, max_tokens: 40, temperature: 0, stream: $s}'; }
    sampled='{"prompt": "Hello", "max_tokens": 12, "temperature": 0.9, "seed": 5, "logprobs": 2}'
    start_server plain --backend $backend --quiet
    post /v1/completions "$sampled"; expect_ok "sampled, no lookup"
    jq -c '[.choices[0].text, .choices[0].logprobs.tokens]' "$T/resp" >"$T/sampled_want"
    stop_server
    start_server lookup --backend $backend --parallel 3 --lookup 7 --quiet
    pids=()
    for c in 0 1 2 3 4 5; do
        k=$(( c % 3 )) stream=$([ $(( c / 3 )) = 0 ] && echo true || echo false)
        curl -sS --max-time 120 -o "$T/c$c" -H "$J" -d "$(body $k $stream)" "$URL/v1/completions" &
        pids+=($!)
    done
    post /v1/completions "$sampled"; expect_ok "sampled beside lookups"
    jq -c '[.choices[0].text, .choices[0].logprobs.tokens]' "$T/resp" >"$T/sampled_got"
    wait "${pids[@]}"
    for c in 0 1 2 3 4 5; do
        k=$(( c % 3 ))
        cp "$T/c$c" "$T/resp"
        if [ $c -lt 3 ]; then stream_text >"$T/got"; else jq -r '.choices[0].text' "$T/resp" >"$T/got"; fi
        cmp -s "$T/got" "$T/want$k" || fail "client $c ('${prompts[$k]}'): '$(cat "$T/got")', qrun: '$(cat "$T/want$k")'"
    done
    cmp -s "$T/sampled_got" "$T/sampled_want" ||
        fail "a sampled request beside lookups: $(cat "$T/sampled_got"), alone: $(cat "$T/sampled_want")"
    drafted=$(METRIC=qpack_lookup_drafted_tokens_total metric) kept=$(METRIC=qpack_lookup_kept_tokens_total metric)
    steps=$(METRIC=qpack_steps_total metric) tokens=$(METRIC=qpack_completion_tokens_total metric)
    awk -v d="$drafted" -v k="$kept" 'BEGIN { exit !(k > 0 && d >= k) }' ||
        fail "metrics: $kept of $drafted drafted tokens kept: no draft was kept"
    stop_server
    echo "ok lookup: six greedy replies are qrun's, $kept of $drafted drafted tokens kept," \
         "$tokens tokens in $steps steps; a sampled reply beside them unchanged"
    ;;

slots)
    # llama-server's POST /slots/ID?action=save|restore|erase: without
    # --slot-save-path 501; with it a session saved, erased and restored
    # answers the same prompt again with the same text, its prompt but the
    # last token reused (cached_tokens), as it was before the erase; names,
    # actions, ids, damaged files, another cache type's file and a busy
    # session refused, the session unchanged
    backend=emu
    [ "$(id -u)" = 0 ] && backend=bpf
    start_server nosave --backend $backend --quiet
    post '/slots/0?action=save' '{"filename": "a.bin"}'; expect_error 501
    stop_server
    mkdir -p "$T/saves"
    start_server slots --backend $backend --parallel 2 --quiet --slot-save-path "$T/saves"
    body='{"prompt": "the cat sat on the mat and then", "max_tokens": 8, "temperature": 0}'
    post /v1/completions "$body"; expect_ok first
    cp "$T/resp" "$T/first"
    n_prompt=$(jq .usage.prompt_tokens "$T/first")
    get /slots; held=$(jq '.[0].n_past' "$T/resp")
    [ "$held" -gt "$n_prompt" ] || fail "slot 0 holds $held positions after a prompt of $n_prompt"
    post '/slots/0?action=save' '{"filename": "a.bin"}'; expect_ok save
    jq -e --argjson n "$held" --argjson size "$(stat -c %s "$T/saves/a.bin")" \
        '.id_slot == 0 and .filename == "a.bin" and .n_saved == $n and .n_written == $size and
         (.timings.save_ms | type == "number")' "$T/resp" >/dev/null || fail "save: $(cat "$T/resp")"
    post '/slots/0?action=erase' '{}'; expect_ok erase
    jq -e --argjson n "$held" '. == {"id_slot": 0, "n_erased": $n}' "$T/resp" >/dev/null || fail "erase: $(cat "$T/resp")"
    get /slots; [ "$(jq '.[0].n_past' "$T/resp")" = 0 ] || fail "erased slot: $(cat "$T/resp")"
    post '/slots/0?action=restore' '{"filename": "a.bin"}'; expect_ok restore
    jq -e --argjson n "$held" --argjson size "$(stat -c %s "$T/saves/a.bin")" \
        '.id_slot == 0 and .filename == "a.bin" and .n_restored == $n and .n_read == $size and
         (.timings.restore_ms | type == "number")' "$T/resp" >/dev/null || fail "restore: $(cat "$T/resp")"
    get /slots; [ "$(jq '.[0].n_past' "$T/resp")" = "$held" ] || fail "restored slot: $(cat "$T/resp")"
    # refusals, slot 0 left holding what it holds
    for bad in '../x' '.hidden' 'a/b' 'x..y' '' 'a:b' 'trail.' ' lead' 'a|b' $'a\\b' $'x\uff0ey' $'a\u2215b' \
               "$(printf 'n%.0s' $(seq 256))"; do
        post '/slots/0?action=save' "$(jq -nc --arg f "$bad" '{filename: $f}')"; expect_error 400
        grep -q 'Invalid filename' "$T/resp" || fail "'$bad': $(cat "$T/resp")"
    done
    [ -z "$(ls -A "$T/saves" | grep -v '^a.bin$')" ] && [ ! -e "$T/x" ] || fail "a refused name wrote: $(ls -A "$T/saves" "$T")"
    post '/slots/0?action=save' '{"filename": "café 1.bin"}'; expect_ok "a name of UTF-8"
    [ -s "$T/saves/café 1.bin" ] || fail "café 1.bin: $(ls -A "$T/saves")"
    post '/slots/0?action=save' '{}'; expect_error 400
    post '/slots/0?action=save' 'not json'; expect_error 400
    post '/slots/0?action=swap' '{"filename": "a.bin"}'; expect_error 400
    grep -q 'Invalid action' "$T/resp" || fail "action: $(cat "$T/resp")"
    post '/slots/0' '{"filename": "a.bin"}'; expect_error 400
    for id in 2 x -1 99999999999; do
        post "/slots/$id?action=erase" '{}'; expect_error 400
        grep -q 'Invalid slot ID' "$T/resp" || fail "slot $id: $(cat "$T/resp")"
    done
    get '/slots/0?action=erase'; [ "$code" = 405 ] || fail "GET /slots/0: $code"
    post '/slots/1?action=restore' '{"filename": "none.bin"}'; expect_error 400
    ! grep -q "$T" "$T/resp" || fail "the reply names the server's folder: $(cat "$T/resp")"
    cp "$T/saves/a.bin" "$T/saves/flip.bin"
    printf '\xff' | dd of="$T/saves/flip.bin" bs=1 seek=200 conv=notrunc status=none
    post '/slots/0?action=restore' '{"filename": "flip.bin"}'; expect_error 400
    grep -q 'checksum' "$T/resp" || fail "flip: $(cat "$T/resp")"
    head -c 1000 "$T/saves/a.bin" >"$T/saves/cut.bin"
    post '/slots/0?action=restore' '{"filename": "cut.bin"}'; expect_error 400
    "$QRUN" -m "$M" --backend $backend --kv-cache int8 --ids '1 2 3' -n 1 --prompt-cache "$T/saves/kv8.bin" \
        >/dev/null 2>"$T/qrun.err" || fail "qrun --kv-cache int8: $(cat "$T/qrun.err")"
    post '/slots/0?action=restore' '{"filename": "kv8.bin"}'; expect_error 400
    grep -q 'int8 KV cache' "$T/resp" || fail "kv8: $(cat "$T/resp")"
    get /slots; [ "$(jq '.[0].n_past' "$T/resp")" = "$held" ] || fail "a refused restore changed slot 0: $(cat "$T/resp")"
    # the restored session serves the prompt again: the same text, its start reused
    post /v1/completions "$body"; expect_ok again
    [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(jq -r '.choices[0].text' "$T/first")" ] ||
        fail "after the restore: $(jq -r '.choices[0].text' "$T/resp"), before: $(jq -r '.choices[0].text' "$T/first")"
    [ "$(jq .usage.prompt_tokens_details.cached_tokens "$T/resp")" = $((n_prompt - 1)) ] ||
        fail "after the restore, cached_tokens $(jq .usage.prompt_tokens_details.cached_tokens "$T/resp") of $n_prompt"
    stop_server
    # a session running a request: 409, and it goes on
    start_server busy --backend $backend --quiet --slot-save-path "$T/saves"
    curl -sS --max-time 120 -o "$T/long" -H "$J" -d '{"prompt": "Hello", "max_tokens": 400, "temperature": 0}' \
        "$URL/v1/completions" &
    long=$!
    for i in $(seq 100); do
        get /slots; [ "$(jq '.[0].is_processing' "$T/resp")" = true ] && break
        sleep 0.05
    done
    post '/slots/0?action=save' '{"filename": "busy.bin"}'; expect_error 409 slot_busy
    wait $long
    jq -e '.usage.completion_tokens > 0' "$T/long" >/dev/null || fail "the busy session's request: $(cat "$T/long")"
    [ ! -e "$T/saves/busy.bin" ] || fail "a busy session was saved"
    stop_server
    echo "ok slots: saved, erased and restored $held positions; the prompt again reused $((n_prompt - 1))"
    ;;

models)
    # several models in one server: --models-dir (a link to M and a second
    # generated model of another seed; a hidden file and a text file
    # beside them ignored) and -m, --max-loaded 1 so that every switch
    # unloads the other. Concurrent mixed requests to both, completions
    # and chats, whole and streamed, each answer what qrun gives for its
    # model alone (greedy); a model's new requests wait while the other's
    # run, none is refused. An unknown model is 404 model_not_found (in
    # OpenAI's and Anthropic's shapes), none named 400; /v1/models lists
    # both with their state; /metrics labels each model's series; --name
    # with several is bad usage; a single model serves any name as before
    "$QP_GEN" "$T/ckb" --preset tiny --vocab 151936 --seed 7 --tokenizer-dir "$TOKDIR" >/dev/null ||
        fail "generating the second checkpoint"
    mkdir -p "$T/dir"
    "$QPACK" pack "$T/ckb" -o "$T/dir/beta.qpk" --quiet || fail "packing the second model"
    ln -s "$M" "$T/dir/alpha.qpk"
    : >"$T/dir/.hidden.qpk"
    : >"$T/dir/notes.txt"
    prompts=('Hello' 'the cat sat on the mat' 'Once upon a time')
    for m in alpha beta; do
        for i in "${!prompts[@]}"; do
            "$QRUN" -m "$T/dir/$m.qpk" --temp 0 --backend emu -p "${prompts[$i]}" -n 10 >"$T/want.$m.text.$i" 2>"$T/qrun.err" &&
                "$QRUN" -m "$T/dir/$m.qpk" --temp 0 --backend emu --chat -p "${prompts[$i]}" -n 10 >"$T/want.$m.chat.$i" \
                    2>"$T/qrun.err" || fail "qrun on $m: $(cat "$T/qrun.err")"
        done
    done
    cmp -s "$T/want.alpha.text.0" "$T/want.beta.text.0" && fail "the two models answer alike: the test could not tell them apart"
    # start_models NAME ARGS...: qrun serve ARGS on emu on a free port
    start_models() {
        local name=$1
        shift
        serve_on_free_port "$name" --backend emu "$@"
    }
    start_models dir --models-dir "$T/dir" --max-loaded 1 --parallel 2 --quiet
    grep -q '2 models, at most 1 loaded at once (alpha, beta)' "$T/dir.err" || fail "the start line: $(cat "$T/dir.err")"
    get /v1/models; expect_ok "/v1/models"
    jq -e '[.data[] | [.id, .status.value]] == [["alpha", "unloaded"], ["beta", "unloaded"]]' "$T/resp" >/dev/null ||
        fail "/v1/models before any request: $(cat "$T/resp")"
    # 24 requests at once, alternating models, kinds and streaming
    pids=()
    for round in 0 1; do
        for m in alpha beta; do
            for i in "${!prompts[@]}"; do
                for kind in text chat; do
                    k=$m.$kind.$i.$round
                    if [ $kind = text ]; then
                        body=$(jq -nc --arg m $m --arg p "${prompts[$i]}" --argjson s $round \
                               '{model: $m, prompt: $p, max_tokens: 10, temperature: 0, stream: ($s == 1)}')
                        path=/v1/completions
                    else
                        body=$(jq -nc --arg m $m --arg p "${prompts[$i]}" --argjson s $round \
                               '{model: $m, messages: [{role: "user", content: $p}], max_tokens: 10, temperature: 0, stream: ($s == 1)}')
                        path=/v1/chat/completions
                    fi
                    curl -sS -o "$T/got.$k" -w '%{http_code}' --max-time 120 -H "$J" -d "$body" "$URL$path" \
                        >"$T/code.$k" 2>&1 &
                    pids+=($!)
                done
            done
        done
    done
    wait "${pids[@]}"
    for round in 0 1; do
        for m in alpha beta; do
            for i in "${!prompts[@]}"; do
                for kind in text chat; do
                    k=$m.$kind.$i.$round
                    [ "$(cat "$T/code.$k")" = 200 ] || fail "$k: status $(cat "$T/code.$k"): $(head -c 300 "$T/got.$k")"
                    if [ $round = 1 ]; then
                        cp "$T/got.$k" "$T/resp"
                        stream_text >"$T/text.$k"
                        grep '^data: {' "$T/got.$k" | sed 's/^data: //' | jq -r .model | sort -u >"$T/model.$k"
                    else
                        jq -r '.choices[0] | (.text // .message.content)' "$T/got.$k" >"$T/text.$k"
                        jq -r .model "$T/got.$k" >"$T/model.$k"
                    fi
                    cmp -s "$T/text.$k" "$T/want.$m.$kind.$i" ||
                        fail "$k: '$(cat "$T/text.$k")', qrun on $m alone: '$(cat "$T/want.$m.$kind.$i")'"
                    [ "$(cat "$T/model.$k")" = $m ] || fail "$k names the model $(cat "$T/model.$k")"
                done
            done
        done
    done
    echo "ok 24 concurrent requests to two models, one loaded at a time, each its own model's reply"
    curl -sS --max-time 30 "$URL/metrics" >"$T/metrics"
    for m in alpha beta; do
        grep -q "^qpack_model_requests_total{model=\"$m\"} 12$" "$T/metrics" &&
            grep -q "^qpack_model_completion_tokens_total{model=\"$m\"} 120$" "$T/metrics" &&
            grep -Eq "^qpack_model_loads_total\{model=\"$m\"\} [1-9]" "$T/metrics" ||
            fail "/metrics of $m: $(grep "model=\"$m\"" "$T/metrics")"
    done
    [ "$(grep -c '^qpack_model_loaded{model="[a-z]*"} 1$' "$T/metrics")" = 1 ] &&
        [ "$(grep -c '^qpack_context_positions{model="[a-z]*"} [0-9]*$' "$T/metrics")" = 1 ] ||
        fail "more than --max-loaded 1 loaded: $(grep -E 'loaded|context_positions' "$T/metrics")"
    unloads=$(awk '/^qpack_model_unloads_total/ { n += $2 } END { print n }' "$T/metrics")
    [ "$unloads" -ge 1 ] || fail "no model was unloaded: $(grep unloads "$T/metrics")"
    echo "ok /metrics: each model's requests, tokens and loads; one loaded; $unloads unloads"
    get /v1/models
    jq -e '[.data[].id] == ["alpha", "beta"] and ([.data[] | select(.status.value == "loaded")] | length == 1) and
           all(.data[] | select(.status.value == "loaded"); .meta.n_vocab == 151936)' "$T/resp" >/dev/null ||
        fail "/v1/models: $(cat "$T/resp")"
    get /v1/models/beta; expect_ok "/v1/models/beta"
    [ "$(jq -r .id "$T/resp")" = beta ] || fail "/v1/models/beta: $(cat "$T/resp")"
    get /v1/models/gamma; expect_error 404
    post /v1/completions '{"model": "gamma", "prompt": "Hello", "max_tokens": 1}'; expect_error 404 model_not_found
    post /v1/chat/completions '{"model": "../alpha", "messages": [{"role": "user", "content": "hi"}]}'
    expect_error 404 model_not_found
    post /v1/completions '{"prompt": "Hello", "max_tokens": 1}'; expect_error 400
    [ "$(jq -r .error.param "$T/resp")" = model ] || fail "no model: $(cat "$T/resp")"
    post /v1/completions '{"model": 3, "prompt": "Hello", "max_tokens": 1}'; expect_error 400
    post /v1/messages '{"model": "gamma", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}'
    [ "$code" = 404 ] && jq -e '.type == "error" and .error.type == "not_found_error"' "$T/resp" >/dev/null ||
        fail "Anthropic's unknown model: $code $(cat "$T/resp")"
    get '/props?model=beta'; expect_ok "/props?model=beta"
    get /props; expect_error 400
    post /tokenize '{"model": "alpha", "content": "Hello"}'; expect_ok "/tokenize of alpha"
    echo "ok unknown models 404, none named 400, ?model= for /props"
    stop_server
    # -m twice, and a name taken twice; --name with several
    start_models two -m "$T/dir/beta.qpk" -m "$M" --max-loaded 2 --quiet
    post /v1/completions "$(jq -nc --arg p "${prompts[0]}" '{model: "beta", prompt: $p, max_tokens: 10, temperature: 0}')"
    expect_ok "-m beta"
    [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(cat "$T/want.beta.text.0")" ] || fail "-m beta: $(cat "$T/resp")"
    post /v1/completions "$(jq -nc --arg p "${prompts[0]}" '{model: "M", prompt: $p, max_tokens: 10, temperature: 0}')"
    expect_ok "-m M"
    [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(cat "$T/want.alpha.text.0")" ] || fail "-m M: $(cat "$T/resp")"
    [ "$(METRIC='qpack_model_loaded{model="beta"}' metric)" = 1 ] || fail "--max-loaded 2 unloaded beta"
    stop_server
    timeout 30 "$QRUN" serve -m "$T/dir/alpha.qpk" --models-dir "$T/dir" --port 0 2>"$T/dup.err" && fail "a name twice was served"
    grep -q "already named 'alpha'" "$T/dup.err" || fail "a name twice: $(cat "$T/dup.err")"
    timeout 30 "$QRUN" serve -m "$M" -m "$T/dir/beta.qpk" --name x --port 0 2>"$T/name.err"
    [ $? = 2 ] && grep -q -- '--name' "$T/name.err" || fail "--name with several: $(cat "$T/name.err")"
    mkdir -p "$T/empty"
    timeout 30 "$QRUN" serve --models-dir "$T/empty" --port 0 2>"$T/empty.err" && fail "an empty folder was served"
    grep -q 'holds no NAME.qpk' "$T/empty.err" || fail "an empty folder: $(cat "$T/empty.err")"
    echo "ok -m twice; a name twice, --name with several, an empty folder refused"
    # one model (here the folder's only file): any name served, as before
    mkdir -p "$T/one" && ln -s "$T/dir/beta.qpk" "$T/one/solo.qpk"
    start_models one --models-dir "$T/one" --quiet
    post /v1/completions "$(jq -nc --arg p "${prompts[0]}" '{model: "anything", prompt: $p, max_tokens: 10, temperature: 0}')"
    expect_ok "one model, another name"
    [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(cat "$T/want.beta.text.0")" ] && [ "$(jq -r .model "$T/resp")" = solo ] ||
        fail "one model: $(cat "$T/resp")"
    get /metrics
    grep -q '^qpack_context_positions [0-9]*$' "$T/resp" && ! grep -q 'model=' "$T/resp" ||
        fail "one model's /metrics: $(grep -E 'model=|context_positions' "$T/resp")"
    stop_server
    echo "ok a single model serves any name, its /metrics unlabelled"
    # a model qpack load keeps in the kernel attaches instead of loading,
    # and detaches when it gives its place: on bpf, each reply is its
    # file's on emu; once the other model is loaded, the pinned one's
    # sessions are all free again (qpack ps)
    if [ "$(id -u)" != 0 ]; then
        echo "skip pin:NAME on bpf (loading BPF programs needs root)"
        exit 0
    fi
    PIN=qpserve$$
    "$QPACK" load "$T/dir/beta.qpk" --name $PIN --sessions 2 >/dev/null 2>"$T/load.err" ||
        fail "qpack load: $(cat "$T/load.err")"
    start_models pin -m pin:$PIN -m "$M" --backend bpf --max-loaded 1 --quiet
    for m in pin:$PIN M pin:$PIN M; do
        want=$T/want.beta.text.0
        [ $m = M ] && want=$T/want.alpha.text.0
        post /v1/completions "$(jq -nc --arg m $m --arg p "${prompts[0]}" '{model: $m, prompt: $p, max_tokens: 10, temperature: 0}')"
        expect_ok "$m on bpf"
        [ "$(jq -r '.choices[0].text' "$T/resp")" = "$(cat "$want")" ] || fail "$m on bpf: $(cat "$T/resp")"
    done
    "$QPACK" ps >"$T/ps.out" || fail "qpack ps"
    grep -q "^$PIN .* sessions 0/2 " "$T/ps.out" || fail "pin:$PIN is still attached once unloaded: $(cat "$T/ps.out")"
    [ "$(METRIC="qpack_model_unloads_total{model=\"pin:$PIN\"}" metric)" = 2 ] ||
        fail "pin:$PIN's unloads: $(curl -sS "$URL/metrics" | grep unloads)"
    stop_server
    "$QPACK" unload $PIN || fail "qpack unload $PIN"
    PIN=
    echo "ok pin:NAME attaches on bpf, its replies its file's, and detaches when it gives its place"
    ;;

kv8)
    # --kv-cache int8 on --parallel 2: two concurrent greedy replies, streamed
    # and whole, are qrun's with the same cache token for token; /metrics
    # names the cache and its bytes per position (one byte per K and V
    # entry, and 8 bytes of shift per head vector)
    backend=emu
    [ "$(id -u)" = 0 ] && backend=bpf
    prompts=("Hello" "the cat sat on the mat")
    for k in 0 1; do
        "$QRUN" -m "$M" --temp 0 --backend $backend --kv-cache int8 -p "${prompts[$k]}" -n 24 >"$T/want$k" 2>"$T/qrun.err" ||
            fail "qrun --kv-cache int8: $(cat "$T/qrun.err")"
    done
    start_server kv8 --backend $backend --parallel 2 --kv-cache int8 --quiet
    grep -q 'KV cache int8' "$T/kv8.err" || fail "the start line does not name the cache: $(cat "$T/kv8.err")"
    pids=()
    for k in 0 1; do
        curl -sS --max-time 120 -o "$T/c$k" -H "$J" \
            -d "$(jq -nc --arg p "${prompts[$k]}" --argjson s $([ $k = 0 ] && echo true || echo false) \
                  '{prompt: $p, max_tokens: 24, temperature: 0, stream: $s}')" "$URL/v1/completions" &
        pids+=($!)
    done
    wait "${pids[@]}"
    cp "$T/c0" "$T/resp"; stream_text >"$T/got0"
    jq -r '.choices[0].text' "$T/c1" >"$T/got1"
    for k in 0 1; do
        cmp -s "$T/got$k" "$T/want$k" || fail "'${prompts[$k]}': '$(cat "$T/got$k")', qrun: '$(cat "$T/want$k")'"
    done
    c=$WORK/ck/config.json
    want=$(( 2 * $(jq .num_hidden_layers "$c") * $(jq .num_key_value_heads "$c") * ($(jq .head_dim "$c") + 8) ))
    got=$(curl -sS --max-time 30 "$URL/metrics" |
          awk '$1 == "qpack_kv_cache_bytes_per_position{type=\"int8\"}" { print $2 }')
    [ "$got" = "$want" ] || fail "metrics: int8 KV cache bytes per position '$got', expected $want"
    stop_server
    echo "ok kv8: two replies are qrun's with the 8-bit cache; $got bytes per position"
    ;;

*)
    fail "unknown case $CASE"
    ;;
esac
