#!/bin/sh
# install_deps.sh - installs the Debian packages qpack needs (as root), only
# those missing, and fetches the tokenizer asset. Idempotent.
set -eu
packages="build-essential cmake pkg-config clang clang-19 llvm bpftool libbpf-dev libelf-dev
          libzstd-dev libxxhash-dev libcjson-dev libpcre2-dev check libsubunit-dev
          libutf8proc-dev libclang-rt-14-dev libmicrohttpd-dev libedit-dev curl jq chromium tmux bsdutils
          python3 python3-jinja2"
missing=""
# node/npm may come from elsewhere than Debian: only ask apt when absent
command -v npm >/dev/null 2>&1 || missing=" npm"
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
"$(dirname "$0")/fetch_tokenizer.sh"
