#!/bin/sh
# help2man.sh OUT.1.gz DESCRIPTION INCLUDE PROGRAM [SUBCOMMAND] - the man page
# of PROGRAM (or of `PROGRAM SUBCOMMAND`, as PROGRAM-SUBCOMMAND(1)) from its
# --help and --version, gzipped as Debian ships man pages. The package build
# runs it (packaging/CMakeLists.txt); help2man takes its date from
# SOURCE_DATE_EPOCH when set, so the pages are reproducible.
set -eu
out=$1 desc=$2 include=$3 prog=$4 sub=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$sub" ]; then
    # help2man names the page after the first word of --version: a wrapper
    # whose --version says PROGRAM-SUBCOMMAND and the program's version
    name=$(basename "$prog")-$sub
    wrapper=$tmp/$name
    # shellcheck disable=SC2016
    printf '#!/bin/sh\nif [ "${1:-}" = --version ]; then "%s" --version | sed "1s/^[^ ]*/%s/"; exit; fi\nexec "%s" %s "$@"\n' \
        "$prog" "$name" "$prog" "$sub" >"$wrapper"
    chmod +x "$wrapper"
    prog=$wrapper
fi
help2man --no-info --name="$desc" --include="$include" --output="$tmp/page" "$prog"
gzip -9n <"$tmp/page" >"$out"
