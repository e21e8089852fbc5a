#!/bin/bash
# test_layout.sh CASE SOURCE_DIR - the folders are the architecture
# (common -> formats -> packer | kernels -> engine -> api -> tools), and
# these checks keep it so:
#   includes  each folder includes only what it may: kernels/ its own
#             headers (they compile for BPF too), formats/ its own and
#             common/'s, the tools include/qpack.h, common/ and tools/cli/
#             and their own folder's headers (qrun also the server's, which
#             it runs as `qrun serve`; the tokenizer's command line,
#             tools/qrun/tok_cli*, also the tokenizer's), nothing of the
#             engine;
#   quiet     the engine and the library (engine/, api/) print nothing:
#             errors go back to the caller (a line tagged QP_BPF_LOG, the
#             developer's switch for libbpf's log, is the one exception);
#   readme    README.md is a guide: at most 250 lines, no dated runs, and
#             no reference to a file outside the repository;
#   docs      the documents name only files the repository has (with or
#             without their folder) and, as
#             `struct.field`, only fields the project's structs have, as
#             `name()` or a name of the project's prefixes (qp_, qpack_,
#             qk_, ...), only what some source has, and formats/QPK.md's
#             title the version formats/qpk.h writes.
set -u
CASE=$1 SRC=$2
bad=0
fail() { echo "FAIL ($CASE): $*" >&2; bad=1; }

# quoted includes of file f
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"; }

# headers of the folders given, by file name
headers_of() { for d in "$@"; do (cd "$SRC/$d" && ls -- *.h 2>/dev/null); done; }

# the lines of struct NAME's definition, from its opening brace to "};"
struct_body() {
    local f
    for f in $(grep -rlE --include='*.[ch]' "^(typedef )?struct $1 \{" "$SRC"/common "$SRC"/formats "$SRC"/kernels \
               "$SRC"/engine "$SRC"/api "$SRC"/include "$SRC"/packer "$SRC"/tokenizer "$SRC"/tools 2>/dev/null); do
        sed -nE "/^(typedef )?struct $1 \{/,/^\}/p" "$f"
    done
}

# check FILES... against the allowed header names in $allowed
check_includes() {
    for f in "$@"; do
        [ -f "$f" ] || continue
        while read -r inc; do
            case " $allowed " in
            *" $inc "*) ;;
            *) fail "${f#"$SRC"/} includes \"$inc\"" ;;
            esac
        done < <(includes "$f")
    done
}

case $CASE in
includes)
    allowed=$(headers_of kernels | tr '\n' ' ')
    check_includes "$SRC"/kernels/*.h "$SRC"/kernels/*.bpf.c
    allowed="$(headers_of formats common | tr '\n' ' ') qp_git_version.h"
    check_includes "$SRC"/formats/*.[ch] "$SRC"/common/*.[ch]
    cli="qpack.h $(headers_of common tools/cli | tr '\n' ' ')"
    for tool in qrun serve qeval cli; do
        allowed="$cli $(headers_of "tools/$tool" | tr '\n' ' ')"
        [ "$tool" = qrun ] && allowed="$allowed serve.h"
        files=()
        for f in "$SRC/tools/$tool"/*.[ch]; do
            case $(basename "$f") in tok_cli*) ;; *) files+=("$f") ;; esac
        done
        check_includes "${files[@]}"
    done
    [ $bad = 0 ] && echo "ok: kernels, formats and the tools include only what their layer may"
    ;;
quiet)
    pattern='\b(printf|puts|perror|putchar|vprintf)\(|\b(v?fprintf|fputs|fputc|fwrite)\([^;]*\b(stdout|stderr)\b|STD(OUT|ERR)_FILENO'
    hits=$(grep -nE "$pattern" "$SRC"/engine/*.[ch] "$SRC"/api/*.[ch] | grep -v 'QP_BPF_LOG')
    [ -z "$hits" ] || fail "the engine and the library print; they return errors instead:
$hits"
    [ $bad = 0 ] && echo "ok: engine/ and api/ write nothing to stdout or stderr"
    ;;
readme)
    r=$SRC/README.md
    n=$(wc -l <"$r")
    [ "$n" -le 250 ] || fail "README.md has $n lines (a guide: at most 250; measurements go to docs/)"
    dated=$(grep -nE '20[0-9]{2}-[01][0-9]-[0-3][0-9]' "$r")
    [ -z "$dated" ] || fail "README.md has dated runs (docs/BENCHMARKS.md holds them):
$dated"
    outside=$(grep -nE '\.\./|shared/DESIGN|shared/STYLE' "$r")
    [ -z "$outside" ] || fail "README.md points outside the repository:
$outside"
    # every repository path the README names exists
    for p in $(grep -oE '`[A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+`' "$r" | tr -d '`' | sort -u); do
        case $p in
        */*.*|*/) [ -e "$SRC/$p" ] || case $p in build/*|.local/*|assets/*|Qwen3-*) ;; *) fail "README.md names $p, which is not in the repository" ;; esac ;;
        esac
    done
    [ $bad = 0 ] && echo "ok: README.md is $n lines, undated, and names only files of the repository"
    ;;
docs)
    # every identifier of the sources, for the names the documents give
    idents=$(mktemp)
    trap 'rm -f "$idents"' EXIT
    grep -rhoE '[A-Za-z_][A-Za-z0-9_]*' --include='*.c' --include='*.h' --include='*.sh' --include='*.cmake' \
        --include='*.py' --include='*.mjs' --include='*.in' --include='CMakeLists.txt' --exclude-dir='build*' \
        --exclude-dir=.git "$SRC" | sort -u >"$idents"
    for d in "$SRC"/docs/*.md "$SRC"/formats/QPK.md "$SRC"/kernels/KERNELS.md "$SRC"/tokenizer/TOKENIZER.md \
             "$SRC"/include/qpack.h; do
        # a function (`name()`) or a name of the project's prefixes: some
        # source has it
        for w in $( { grep -oE '`[A-Za-z_][A-Za-z0-9_]*\(\)`' "$d"
                      grep -oE '`(qp|qpack|qk|qpk|qm|serve|http|tok|cli)_[a-z0-9_]+`' "$d"; } | tr -d '`()' | sort -u); do
            grep -Fxq -- "$w" "$idents" || fail "${d#"$SRC"/} names $w, which no source file has"
        done
        for p in $(grep -oE '`(scripts|tools|tests|docs|formats|packer|engine|api|kernels|devtools|common|include|examples|tokenizer)/[A-Za-z0-9_./-]+`' "$d" |
                   tr -d '`' | sort -u); do
            [ -e "$SRC/$p" ] || fail "${d#"$SRC"/} names $p, which is not in the repository"
        done
        # a file named without its folder (`qk_dot.h`): some folder has it
        for f in $(grep -oE '`[A-Za-z0-9_.-]+\.(c|h|md|sh|cmake)`' "$d" | tr -d '`' | sort -u); do
            [ -n "$(find "$SRC" -path "$SRC/build*" -prune -o -name "$f" -print -quit)" ] ||
                fail "${d#"$SRC"/} names $f, which no folder of the repository has"
        done
        # `struct.field` of the project's own structs: the struct exists
        # and has that field
        for sf in $(grep -oE '`(qk|qp|qpk|qpack)_[a-z0-9_]+\.[a-z_][a-z0-9_]*`' "$d" | tr -d '`' | sort -u); do
            s=${sf%%.*} field=${sf#*.}
            case $field in c|h|md|sh|json|qpk|gguf|txt|cmake) continue ;; esac
            body=$(struct_body "$s")
            if [ -z "$body" ]; then
                fail "${d#"$SRC"/} names $sf: no struct $s in the tree"
            elif ! grep -qw -- "$field" <<<"$body"; then
                fail "${d#"$SRC"/} names $sf: struct $s has no field $field"
            fi
        done
    done
    major=$(sed -n 's/^#define QPK_VERSION_MAJOR *\([0-9]*\).*/\1/p' "$SRC/formats/qpk.h")
    minor=$(sed -n 's/^#define QPK_VERSION_MINOR *\([0-9]*\).*/\1/p' "$SRC/formats/qpk.h")
    title=$(head -1 "$SRC/formats/QPK.md")
    case $title in
    *"format $major.$minor") ;;
    *) fail "formats/QPK.md's title is '$title'; formats/qpk.h writes format $major.$minor" ;;
    esac
    [ $bad = 0 ] && echo "ok: the documents name files, struct fields and functions that exist, and QPK.md format $major.$minor as qpk.h"
    ;;
*)
    echo "test_layout.sh: unknown case $CASE" >&2
    exit 2
    ;;
esac
exit $bad
