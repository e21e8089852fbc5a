#!/bin/bash
# test_tools_api.sh SOURCE_DIR - qrun and qeval are users of include/qpack.h
# and qrun serve (issue 19: the public header is the one door between the tools
# and the engine): their files include qpack.h and the command-line helpers only,
# never the engine's or the tokenizer's headers. tok_cli*.c, the tokenizer's
# own command line, is the one exception.
set -u
SRC=$1
allowed='qpack.h clock.h cli_out.h fsafe.h json_strict.h tok_cli.h cli_num.h progress.h stop_text.h qrun.h qeval.h qeval_plot.h serve.h'
bad=0
for f in "$SRC"/tools/qrun/qrun*.[ch] "$SRC"/tools/qeval/*.[ch] "$SRC"/tools/serve/*.[ch] "$SRC"/tools/cli/*.[ch]; do
    while read -r inc; do
        case " $allowed " in
        *" $inc "*) ;;
        *) echo "FAIL: $(basename "$f") includes \"$inc\"" >&2; bad=1 ;;
        esac
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
[ $bad = 0 ] || exit 1
echo "ok: qrun, qeval and serve include qpack.h and the CLI helpers only"
