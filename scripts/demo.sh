#!/bin/sh
# demo.sh - installs what is missing, builds, then runs two models in eBPF
# (needs root; --backend emu otherwise): the small learned model in
# tests/data/tiny-learned (trained on Debian's documentation, so it writes
# English-like text about packages), sampled from three prompts, and a
# random checkpoint of Qwen3-0.6B's shape packed in int4, for the numbers
# of a real size. The commands are installed into .local/
# (install_local.sh), and run from there. Under a minute after set-up, once
# the first run has packed the 0.6B-shaped container (1-2 minutes).
#
# Its files go to .demo/ of this clone (QP_DEMO_DIR=DIR elsewhere), so two
# clones or two users do not meet; the 0.6B-shaped container (~400 MB) is
# kept there for the next run, packed again only when qpack verify refuses
# it. rm -rf .demo frees it.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$root/build"
on_path=$("$root/scripts/install_local.sh" "$root/build")
b=$root/.local
demo=${QP_DEMO_DIR:-$root/.demo}
backend=bpf
[ "$(id -u)" = 0 ] || { backend=emu; echo "(not root: the BPF kernels' host twin, --backend emu, runs instead)"; }
mkdir -p "$demo"
echo "(the demo's files: $demo, kept for the next run)"

echo "--- a learned 3.7M-parameter Qwen3, packed in int8"
# (the summary lines only: qpack prints each tensor's error too)
"$b/bin/qpack" pack "$root/tests/data/tiny-learned/model" -o "$demo/tiny-learned.qpk" --format int8 2>&1 |
    grep -v '^qpack:   '
for prompt in "The package" "To install the" "Python is"; do
    printf '\n> %s' "$prompt"
    "$b/bin/qrun" -m "$demo/tiny-learned.qpk" --backend $backend -p "$prompt" -n 40 \
        --temp 0.8 --top-p 0.95 --repeat-penalty 1.1 --seed 7 2>/dev/null
    echo
done

echo
echo "--- a random checkpoint of Qwen3-0.6B's shape, int4 (random weights: the text is noise, the numbers are the point)"
# an earlier run's container is used again when this qpack reads it whole
if [ -f "$demo/qwen3-0.6b-int4.qpk" ] && "$b/bin/qpack" verify "$demo/qwen3-0.6b-int4.qpk" 2>/dev/null; then
    echo "(packed in an earlier run: $demo/qwen3-0.6b-int4.qpk)"
else
    rm -rf "$demo/qwen3-0.6b-random"
    "$b/bin/qp-gen-checkpoint" "$demo/qwen3-0.6b-random" --preset 0.6b --seed 1 \
        --tokenizer-dir "$root/assets/qwen3-tokenizer" >/dev/null
    "$b/bin/qpack" pack "$demo/qwen3-0.6b-random" -o "$demo/qwen3-0.6b-int4.qpk" --format int4 2>&1 |
        grep -v '^qpack:   '
    rm -rf "$demo/qwen3-0.6b-random"
    "$b/bin/qpack" verify "$demo/qwen3-0.6b-int4.qpk"
fi
"$b/bin/qrun" -m "$demo/qwen3-0.6b-int4.qpk" --backend $backend -p "Hello, world!" -n 16 --stats
echo "---"
echo "$on_path"
