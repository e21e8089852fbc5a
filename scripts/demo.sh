#!/bin/sh
# demo.sh - installs what is missing, builds, then generates a small random
# Qwen3 checkpoint (with the official tokenizer), packs it, shows what the
# container holds, and runs it in eBPF (needs root). The commands are
# installed into .local/ (install_local.sh), and run from there.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$root/build"
on_path=$("$root/scripts/install_local.sh" "$root/build")
b=$root/.local
demo=${QP_DEMO_DIR:-/tmp/qpack-demo}
rm -rf "$demo"
mkdir -p "$demo"
"$b/bin/qp-gen-checkpoint" "$demo/qwen3-demo" --preset tiny --vocab 151936 --seed 1 \
    --tokenizer-dir "$root/assets/qwen3-tokenizer"
"$b/bin/qpack" pack "$demo/qwen3-demo" -o "$demo/qwen3-demo.qpk"
"$b/bin/qpack" info "$demo/qwen3-demo.qpk" | head -14
"$b/bin/qpack" verify "$demo/qwen3-demo.qpk"
echo "--- qrun (random weights: the text is noise, the numbers are the point)"
"$b/bin/qrun" -m "$demo/qwen3-demo.qpk" -p "Hello, world!" -n 16 --stats
echo "---"
echo "$on_path"
