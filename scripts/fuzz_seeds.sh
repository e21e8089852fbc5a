#!/bin/sh
# fuzz_seeds.sh [BUILD_DIR] - regenerates the committed seed corpora of the
# fuzz targets (tests/fuzz/corpus/<target>/) from our own tools
# (qp-gen-checkpoint, qpack in BUILD_DIR, default build/) plus hand-made
# edge cases. Run it after a format change; commit what it writes.
# The trimmed tokenizer (corpus/fuzz_tokenizer_load/trimmed.json: the 256
# byte-level tokens, 60 merges and 6 added tokens of the official file) is
# remade with python3 when it is installed, else the committed copy is kept.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
gen=$build/bin/qp-gen-checkpoint
qpack=$build/bin/qpack
corpus=$root/tests/fuzz/corpus
official=$root/assets/qwen3-tokenizer/tokenizer.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for t in fuzz_qpk fuzz_safetensors fuzz_safetensors_index fuzz_tokenizer_load \
         fuzz_tokenizer_encode fuzz_config; do
  mkdir -p "$corpus/$t"
done

# ---- tokenizer.json ---------------------------------------------------------
tl=$corpus/fuzz_tokenizer_load
if command -v python3 >/dev/null 2>&1 && [ -f "$official" ]; then
  python3 - "$official" "$tl/trimmed.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
items = sorted(t["model"]["vocab"].items(), key=lambda kv: kv[1])
keep = {k: i for k, i in items[:256]}
merges = []
for a, b in t["model"]["merges"][:400]:
    if a in keep and b in keep:
        merges.append([a, b]); keep[a + b] = len(keep)
    if len(merges) >= 60:
        break
t["model"]["vocab"], t["model"]["merges"] = keep, merges
adds = []
for i, a in enumerate(t["added_tokens"][:6]):
    a = dict(a); a["id"] = len(keep) + i; adds.append(a)
t["added_tokens"] = adds
open(sys.argv[2], "w", encoding="utf-8").write(
    json.dumps(t, ensure_ascii=False, separators=(",", ":")))
PY
fi
trimmed=$tl/trimmed.json
# Variants: no added tokens, no normalizer, unknown model type, truncated.
sed 's/"added_tokens":\[[^]]*\]/"added_tokens":[]/' "$trimmed" > "$tl/no_added.json"
sed 's/"normalizer":{"type":"NFC"}/"normalizer":null/' "$trimmed" > "$tl/no_normalizer.json"
sed 's/"type":"BPE"/"type":"WordPiece"/' "$trimmed" > "$tl/wordpiece.json"
head -c 1500 "$trimmed" > "$tl/truncated.json"
printf '{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"added_tokens":[{"id":3,"content":"<s>","special":true}]}' > "$tl/minimal.json"
printf '{}' > "$tl/empty_object.json"

# ---- checkpoints and containers ----------------------------------------------
mkdir -p "$tmp/tok"
cp "$trimmed" "$tmp/tok/tokenizer.json"
"$gen" "$tmp/small" --hidden 16 --intermediate 32 --layers 1 --heads 2 --kv-heads 1 \
    --head-dim 8 --vocab 336 --max-pos 64 --tokenizer-dir "$tmp/tok" >/dev/null
"$gen" "$tmp/mini" --hidden 16 --intermediate 16 --layers 1 --heads 1 --kv-heads 1 \
    --head-dim 16 --vocab 16 --max-pos 16 --untied --dtype f32 --seed 7 --shards 2 >/dev/null
"$qpack" pack "$tmp/small" -o "$corpus/fuzz_qpk/small_tokenizer.qpk" --quiet
# an int4 container: i4g matrices (groups of 32) and the preset's i8g ones
"$gen" "$tmp/int4" --hidden 32 --intermediate 64 --layers 1 --heads 2 --kv-heads 1 \
    --head-dim 16 --vocab 32 --max-pos 16 --seed 9 >/dev/null
"$qpack" pack "$tmp/int4" -o "$corpus/fuzz_qpk/int4_mixed.qpk" --format int4 --quiet
# the packed encodings: an i6g embedding and i4k matrices (hidden 256: 8
# groups of 32)
"$gen" "$tmp/packed" --hidden 256 --intermediate 32 --layers 1 --heads 1 --kv-heads 1 \
    --head-dim 32 --vocab 32 --max-pos 16 --seed 10 >/dev/null
"$qpack" pack "$tmp/packed" -o "$corpus/fuzz_qpk/int4_packed.qpk" --format int4 --quiet
# the same with a 7-bit embedding (i7g)
"$qpack" pack "$tmp/packed" -o "$corpus/fuzz_qpk/int4_i7g.qpk" --format int4 --quiet \
    --keep 'model.embed_tokens.weight=int7'
"$qpack" pack "$tmp/mini" -o "$tmp/mini.qpk" --quiet
cp "$tmp/mini.qpk" "$corpus/fuzz_qpk/mini_untied.qpk"
head -c 128 "$tmp/mini.qpk" > "$corpus/fuzz_qpk/header_only.qpk"
head -c 4096 "$tmp/mini.qpk" > "$corpus/fuzz_qpk/truncated_4k.qpk"
printf 'QPACK\r\n\032' > "$corpus/fuzz_qpk/magic_only.qpk"
# a file of format 1.0: tensors on page boundaries, as before 1.6
cp "$root/tests/data/format-1.0-int4.qpk" "$corpus/fuzz_qpk/format_1_0_int4.qpk"

# ---- config.json -------------------------------------------------------------
cf=$corpus/fuzz_config
cp "$tmp/small/config.json" "$cf/small.json"
cp "$tmp/mini/config.json" "$cf/mini_untied.json"
printf '{"hidden_size":64,"intermediate_size":192,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512}' > "$cf/required_only.json"
printf '{"model_type":"qwen3","hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,"max_position_embeddings":40960,"rope_theta":1000000,"rms_norm_eps":1e-06,"tie_word_embeddings":true,"bos_token_id":151643,"eos_token_id":[151645,151643],"rope_scaling":null,"use_sliding_window":false,"attention_bias":false,"hidden_act":"silu"}' > "$cf/qwen3_0.6b.json"
printf '{"hidden_size":64.5,"intermediate_size":1e3,"num_hidden_layers":-2,"num_attention_heads":"4","vocab_size":null,"rope_scaling":{"type":"yarn"},"model_type":"llama"}' > "$cf/bad_types.json"
printf '{"hidden_size":1e300,"intermediate_size":18446744073709551617,"num_hidden_layers":2,"num_attention_heads":3,"num_key_value_heads":2,"vocab_size":512,"eos_token_id":[]}' > "$cf/bad_ranges.json"

# ---- safetensors -------------------------------------------------------------
# st FILE JSON DATA_HEX: an 8-byte little-endian length, the JSON, the data.
st() {
  n=$(printf '%s' "$2" | wc -c)
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o\\000\\000\\000\\000' \
      $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))" > "$1"
  printf '%s' "$2" >> "$1"
  printf "$3" >> "$1"
}
sf=$corpus/fuzz_safetensors
st "$sf/f32_scalar.safetensors" '{"x":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}' '\000\000\200\077'
st "$sf/bf16_f16.safetensors" '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]}}' '\200\077\000\300\000\000\200\177\000\074\000\374'
st "$sf/empty.safetensors" '{}' ''
st "$sf/zero_dim.safetensors" '{"z":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"y":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}' '\000\000'
st "$sf/padded.safetensors" '{"p":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}        ' '\000\074'
st "$sf/utf8_name.safetensors" '{"caf\303\251.\360\237\230\200":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}' '\000\000\000\000'
st "$sf/overlap.safetensors" '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' '\000\000\000\000'
cp "$tmp/mini/model-00002-of-00002.safetensors" "$sf/mini_shard.safetensors"

# ---- sharded folders: 2-byte index length, index, first shard ---------------
si=$corpus/fuzz_safetensors_index
idx() {  # idx OUT INDEX_JSON SHARD_FILE
  n=$(printf '%s' "$2" | wc -c)
  printf "$(printf '\\%03o\\%03o' $((n & 255)) $((n >> 8 & 255)))" > "$1"
  printf '%s' "$2" >> "$1"
  cat "$3" >> "$1"
}
st "$tmp/a.st" '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' '\000\000\200\077'
: > "$tmp/none"
idx "$si/single.bin" '' "$tmp/a.st"
idx "$si/two_shards.bin" '{"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}' "$tmp/a.st"
idx "$si/symlink.bin" '{"weight_map":{"a":"link.safetensors","b":"model-00002-of-00002.safetensors"}}' "$tmp/a.st"
idx "$si/bad_names.bin" '{"weight_map":{"a":"../model.safetensors","b":"dir.safetensors","c":"dangling.safetensors","d":"/etc/passwd"}}' "$tmp/a.st"
idx "$si/missing_tensor.bin" '{"weight_map":{"a":"model-00001-of-00002.safetensors"}}' "$tmp/none"
idx "$si/empty_map.bin" '{"weight_map":{}}' "$tmp/a.st"

# ---- text and ids for the official tokenizer --------------------------------
te=$corpus/fuzz_tokenizer_encode
printf '\000Hello, world!' > "$te/hello.txt"
printf '\000<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>' > "$te/chat.txt"
printf '\000caf\145\314\201 na\303\257ve \344\275\240\345\245\275\344\270\226\347\225\214 \360\237\230\200\360\237\221\215\360\237\217\275 \331\205\330\261\330\255\330\250\330\247' > "$te/unicode.txt"
printf '\000   \t\n\n  x  \r\n12345678901234567890 don'"'"'t I'"'"'LL it'"'"'s  ' > "$te/spaces_digits.txt"
printf '\000ok \377\376 \300\200 \355\240\200 \364\220\200\200 end' > "$te/invalid_utf8.txt"
printf '\001\000\000\000\000\007\046\000\000\013\000\000\000\137\007\000\000\000\000\000\000' > "$te/ids_hello.bin"
printf '\003\377\377\377\377\000\000\000\200\154\117\002\000\155\117\002\000\305\000\000\000' > "$te/ids_raw_special.bin"
printf '\005\154\117\002\000\347\040\000\000\155\117\002\000\232\000\000\000' > "$te/ids_skip_special.bin"
ls -la "$corpus"/* | awk '{s+=$5} END {print "corpus bytes:", s}'
