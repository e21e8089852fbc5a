/* pack_options.c - `qpack pack`'s command line: --help, the options and
 * their checks (packer.h). */
#include "packer.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "cli_suggest.h"

static void usage_pack(FILE *out)
{
    fprintf(out, "usage: qpack pack SRC -o OUT.qpk [--format q24|int8|int4|int4-pure] [--group N]\n"
                 "                  [--quant search|rtn|minmax] [--keep PATTERN=FMT]...\n"
                 "                  [--calibrate TEXT [--calibrate-tokens N]]\n"
                 "                  [--task rerank|generate] [--quiet]\n"
                 "  SRC        Hugging Face Qwen3 folder: config.json, model.safetensors or\n"
                 "             model.safetensors.index.json + shards, tokenizer.json (loaded as\n"
                 "             qrun loads it; without one, a warning: qrun -p will need\n"
                 "             --tokenizer), tokenizer_config.json (chat template), and when\n"
                 "             present generation_config.json and an embedding checkpoint's\n"
                 "             1_Pooling/config.json, kept and checked. A key twice\n"
                 "             in config.json or tokenizer_config.json is refused, and so is a\n"
                 "             tokenizer with ids past config.json's vocab_size. Or a Qwen3 GGUF\n"
                 "             file (one, or the first of NAME-00001-of-0000N.gguf): config,\n"
                 "             tokenizer and chat template from its metadata, each matrix in\n"
                 "             the encoding its type asks for unless --format (README)\n"
                 "  -o OUT     destination file, absent or a regular file (not a directory,\n"
                 "             device, FIFO, symbolic link or a file of SRC); replaced\n"
                 "             atomically when the pack succeeds, untouched otherwise (also\n"
                 "             when interrupted: SIGINT, SIGTERM, SIGHUP exit 128 + signal);\n"
                 "             one that cannot be written is refused before any work (exit 2)\n"
                 "  --format   q24: int32 Q24 matrices (the default, exact for BF16);\n"
                 "             int8: every matrix as int8 codes, one scale per group of columns;\n"
                 "             int4: mixed, after llama.cpp's Q4_K_M: int4 codes for every\n"
                 "             matrix (their parameters in super-blocks of 8 groups, i4k,\n"
                 "             where a matrix's columns hold whole super-blocks, else i4g),\n"
                 "             except the embedding, int6 (6-bit codes, groups of 64; int7\n"
                 "             for a tied one that holds most of the weights or whose\n"
                 "             seventh bit keeps the matrices within Q4_K_M's bytes), and\n"
                 "             every v_proj, down_proj of the first and last eighth of the\n"
                 "             layers and an untied lm_head, int8 with groups of 64: the\n"
                 "             matrices whose error costs the most (Qwen3-0.6B: 0.39 GB,\n"
                 "             below Q4_K_M's 0.40 GB);\n"
                 "             int4-pure: every matrix int4, two 16-bit parameters per group\n"
                 "             (i4g, 0.37 GB).\n"
                 "             Norm scales stay exact\n"
                 "  --group N  group size of the int8 (int8) or int4 (int4, int4-pure) matrices:\n"
                 "             32, 64 or 128 (default: 64 for int8, 32 for int4)\n"
                 "  --quant    quantiser: search (default: per group, the parameters with the\n"
                 "             least reconstruction error), rtn (the naive baseline: absmax\n"
                 "             round-to-nearest, symmetric, for int8 and int4) or minmax\n"
                 "             (int4: round-to-nearest over the group's min..max; int8: = rtn)\n"
                 "  --keep PATTERN=FMT   int4 and int4-pure: every matrix whose Hugging Face\n"
                 "             name matches the glob PATTERN is stored as FMT, int8, int7 or\n"
                 "             int6 (groups of 64; int7 has half int6's error for one more\n"
                 "             bit per weight) or int4 (--group); repeatable, later ones win.\n"
                 "             E.g.\n"
                 "             --keep 'model.layers.*.mlp.down_proj.weight=int8'\n"
                 "  --calibrate TEXT   int8, int4, int4-pure with --quant search: run the float64\n"
                 "             reference over the first N tokens of the UTF-8 file TEXT (windows of\n"
                 "             the model's context, at most " STR(CALIB_WINDOW) " positions) and weight each input\n"
                 "             column's squared error by its mean square there (instead of the\n"
                 "             norm's gain); recorded in the provenance\n"
                 "  --calibrate-tokens N   tokens of TEXT run (default " STR(CALIB_DEFAULT_TOKENS) ")\n"
                 "  --task T   what the checkpoint is for beyond generating, recorded in the\n"
                 "             container: rerank (a reranker: qrun serve's /v1/rerank scores\n"
                 "             P(\"yes\") after Qwen3-Reranker's prompt) or generate (nothing\n"
                 "             recorded). Default: rerank when SRC's path names a\n"
                 "             Qwen3-Reranker checkpoint (Qwen3-Reranker-0.6B, any case),\n"
                 "             else generate\n"
                 "  --quiet    no progress line, no warnings, no per-tensor errors, no summary\n"
                 "The matrices are quantised on every core (QPACK_THREADS=N in the environment:\n"
                 "on N threads); the output is the same bytes whatever N. On a terminal a\n"
                 "progress line shows tensors, megabytes written and the time left.\n"
                 "Exit status: 0 packed, 1 failure (SRC, the pack, the write), 2 bad usage (an\n"
                 "option, its value, or an -o that cannot be written), 128 + N on signal N\n");
}

/* --group, --quant and --keep against the format; fills o. */
/* --calibrate and --calibrate-tokens against the format and quantiser. */
static int check_calib_args(struct pack_opts *o, const char *tokens)
{
    if (tokens && !o->calib_text) {
        fprintf(stderr, "qpack pack: --calibrate-tokens needs --calibrate\n");
        return -1;
    }
    if (o->calib_text && (!precision_quantised(o->prec.format) || o->quant != QNT_SEARCH)) {
        fprintf(stderr, "qpack pack: --calibrate applies to --format int8, int4 and int4-pure with --quant "
                        "search\n");
        return -1;
    }
    char *end;
    errno = 0;
    if (tokens) {
        unsigned long long n = strtoull(tokens, &end, 10);
        if (errno || *end || end == tokens || tokens[0] == '-' || n < 2 || n > (1u << 24)) {
            fprintf(stderr, "qpack pack: --calibrate-tokens must be a number in 2..16777216, not '%s'\n",
                    tokens);
            return -1;
        }
        o->calib_tokens = n;
    }
    return 0;
}

static int check_quant_args(struct pack_opts *o, const char *group, const char *quant, bool keep)
{
    enum pack_format f = o->prec.format;
    if ((group || quant) && !precision_quantised(f)) {
        fprintf(stderr, "qpack pack: --group and --quant apply to --format int8, int4 and int4-pure\n");
        return -1;
    }
    if (keep && f != PACK_INT4 && f != PACK_INT4_PURE) {
        fprintf(stderr, "qpack pack: --keep applies to --format int4 and int4-pure, not %s\n",
                precision_format_name(f));
        return -1;
    }
    if (group && strcmp(group, "32") && strcmp(group, "64") && strcmp(group, "128")) {
        fprintf(stderr, "qpack pack: --group must be 32, 64 or 128, not '%s'\n", group);
        return -1;
    }
    if (group)
        o->group = (uint32_t)atoi(group);
    else if (f == PACK_INT8)
        o->group = PRECISION_INT8_GROUP;
    if (quant && strcmp(quant, "search") && strcmp(quant, "rtn") && strcmp(quant, "minmax")) {
        fprintf(stderr, "qpack pack: --quant must be search, rtn or minmax, not '%s'\n", quant);
        return -1;
    }
    if (quant && !strcmp(quant, "rtn"))
        o->quant = QNT_ABSMAX;
    if (quant && !strcmp(quant, "minmax"))
        o->quant = QNT_RTN;
    return 0;
}

int pack_parse_args(struct pack_opts *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"output", required_argument, 0, 'o'}, {"format", required_argument, 0, 'f'},
        {"group", required_argument, 0, 'g'},  {"quant", required_argument, 0, 'Q'},
        {"keep", required_argument, 0, 'k'},   {"quiet", no_argument, 0, 'q'},
        {"calibrate", required_argument, 0, 'C'}, {"calibrate-tokens", required_argument, 0, 'T'},
        {"task", required_argument, 0, 'K'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    *o = (struct pack_opts){.group = 32, .quant = QNT_SEARCH, .calib_tokens = CALIB_DEFAULT_TOKENS};
    const char *group = NULL, *quant = NULL, *format = "q24", *calib_tokens = NULL, *task = NULL;
    qp_err err = {{0}};
    optind = 1;
    opterr = 0;                 /* one line of our own per mistake, not getopt's and the usage */
    int c;
    while ((c = getopt_long(argc, argv, ":o:f:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'f': format = optarg; o->format_given = true; break;
        case 'g': group = optarg; break;
        case 'Q': quant = optarg; break;
        case 'C': o->calib_text = optarg; break;
        case 'T': calib_tokens = optarg; break;
        case 'K': task = optarg; break;
        case 'k':
            if (precision_add_keep(&o->prec, optarg, &err)) {
                fprintf(stderr, "qpack pack: %s\n", err.msg);
                return -1;
            }
            break;
        case 'q': o->quiet = true; break;
        case 'h': usage_pack(stdout); exit(0);
        case ':':
            fprintf(stderr, "qpack pack: option '%s' needs a value (see qpack pack --help)\n", argv[optind - 1]);
            return -1;
        default: qp_cli_unknown_option("qpack pack", "qpack pack", argv[optind - 1], optopt, longs); return -1;
        }
    }
    if (optind + 1 != argc || !o->out) {
        fprintf(stderr, "qpack pack: %s (see qpack pack --help)\n",
                optind + 1 < argc ? "one source folder expected" : "need SRC and -o OUT.qpk");
        return -1;
    }
    o->src = argv[optind];
    if (task && strcmp(task, "rerank") && strcmp(task, "generate")) {
        fprintf(stderr, "qpack pack: --task must be rerank or generate, not '%s'\n", task);
        return -1;
    }
    o->task = task ? (!strcmp(task, "rerank") ? QP_TASK_RERANK : QP_TASK_NONE) : task_of_path(o->src);
    if (precision_parse_format(format, &o->prec.format)) {
        fprintf(stderr, "qpack pack: unknown format '%s' (q24, int8, int4 or int4-pure)\n", format);
        return -1;
    }
    if (check_quant_args(o, group, quant, o->prec.n_keep > 0))
        return -1;
    return check_calib_args(o, calib_tokens);
}
