/* pack.c - `qpack pack`: streams a Hugging Face Qwen3 checkpoint, tensor by
 * tensor, into a .qpk. Matrices become Q24, I8G or I4G (precision.h decides
 * which), norm scales I32S; every value is converted exactly once, here, and
 * a value that does not fit is an error naming the tensor and index. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bf16.h"
#include "calibrate.h"
#include "fsafe.h"
#include "hf_config.h"
#include "json_strict.h"
#include "pack.h"
#include "q24.h"
#include "qpk_write.h"
#include "qwen3_names.h"
#include "int4.h"
#include "int8.h"
#include "precision.h"
#include "progress.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "clock.h"

struct pack_opts {
    const char *src, *out;
    bool quiet;
    struct precision prec;    /* --format and --keep */
    uint32_t group;           /* --group: columns per group of the format's main encoding */
    qnt_method quant;         /* --quant: QNT_SEARCH, QNT_ABSMAX (rtn) or QNT_RTN (minmax) */
    const char *calib_text;   /* --calibrate FILE, or NULL */
    uint64_t calib_tokens;    /* --calibrate-tokens */
};

/* one tensor of the container with its source and what conversion cost */
struct planned {
    struct qpk_tensor t;
    const struct st_tensor *src;
    double max_abs;           /* largest source magnitude */
    double max_err, sum_sq_err;
};

struct packer {
    struct pack_opts opt;
    struct qwen3_config hf;
    struct qpk_config cfg;
    struct st_model model;
    struct planned *plan;
    uint32_t n_plan;
    char *tokenizer, *tokenizer_config, *chat_template;
    size_t tokenizer_len, tokenizer_config_len;
    bool deduped_lm_head;
    bool calibrated;          /* calib holds --calibrate's statistics */
    struct calib calib;
    bool progress;
    struct progress prog;     /* the progress line while the tensors are written */
    int32_t *chunk;
    uint32_t i8_group;        /* the group of every i8g matrix */
    /* the source files' provenance, hashed on a second thread while the
     * tensors are converted (reading them does not change the output) */
    pthread_t hasher;
    bool hasher_running;
    struct source_hash *hashes;
    int hash_rc;
    qp_err hash_err;
};

#define STR_(x) #x
#define STR(x) STR_(x)

/* How much of a source the converter reads before handing it back. */
#define RELEASE_BYTES (8u << 20)

static void usage_pack(FILE *out)
{
    fprintf(out, "usage: qpack pack SRC -o OUT.qpk [--format q24|int8|int4|int4-pure] [--group N]\n"
                 "                  [--quant search|rtn|minmax] [--keep PATTERN=FMT]...\n"
                 "                  [--calibrate TEXT [--calibrate-tokens N]] [--quiet]\n"
                 "  SRC        Hugging Face Qwen3 folder: config.json, model.safetensors or\n"
                 "             model.safetensors.index.json + shards, tokenizer.json (loaded as\n"
                 "             qrun loads it; without one, a warning: qrun -p will need\n"
                 "             --tokenizer), tokenizer_config.json (chat template). A key twice\n"
                 "             in config.json or tokenizer_config.json is refused, and so is a\n"
                 "             tokenizer with ids past config.json's vocab_size\n"
                 "  -o OUT     destination file, absent or a regular file (not a directory,\n"
                 "             device, FIFO, symbolic link or a file of SRC); replaced\n"
                 "             atomically when the pack succeeds, untouched otherwise (also\n"
                 "             when interrupted: SIGINT, SIGTERM, SIGHUP exit 128 + signal);\n"
                 "             one that cannot be written is refused before any work (exit 2)\n"
                 "  --format   q24: int32 Q24 matrices (the default, exact for BF16);\n"
                 "             int8: every matrix as int8 codes, one scale per group of columns;\n"
                 "             int4: mixed, after llama.cpp's Q4_K_M: int4 codes for every\n"
                 "             matrix (their parameters in super-blocks of 8 groups: i4k),\n"
                 "             except the embedding, int6 (6-bit codes, groups of 64), and\n"
                 "             every v_proj, down_proj of the first and last eighth of the\n"
                 "             layers and an untied lm_head, int8 with groups of 64: the\n"
                 "             matrices whose error costs the most (Qwen3-0.6B: 0.39 GB,\n"
                 "             below Q4_K_M's 0.40 GB);\n"
                 "             int4-pure: every matrix int4, two 16-bit parameters per group\n"
                 "             (i4g, 0.37 GB).\n"
                 "             Norm scales stay exact\n"
                 "  --group N  group size of the int8 (int8) or int4 (int4, int4-pure) matrices:\n"
                 "             32 (default), 64 or 128\n"
                 "  --quant    quantiser: search (default: per group, the parameters with the\n"
                 "             least reconstruction error), rtn (the naive baseline: absmax\n"
                 "             round-to-nearest, symmetric, for int8 and int4) or minmax\n"
                 "             (int4: round-to-nearest over the group's min..max; int8: = rtn)\n"
                 "  --keep PATTERN=FMT   int4 and int4-pure: every matrix whose Hugging Face\n"
                 "             name matches the glob PATTERN is stored as FMT, int8 or int6\n"
                 "             (groups of 64) or int4 (--group); repeatable, later ones win.\n"
                 "             E.g.\n"
                 "             --keep 'model.layers.*.mlp.down_proj.weight=int8'\n"
                 "  --calibrate TEXT   int8, int4, int4-pure with --quant search: run the float64\n"
                 "             reference over the first N tokens of the UTF-8 file TEXT (windows of\n"
                 "             the model's context, at most " STR(CALIB_WINDOW) " positions) and weight each input\n"
                 "             column's squared error by its mean square there (instead of the\n"
                 "             norm's gain); recorded in the provenance\n"
                 "  --calibrate-tokens N   tokens of TEXT run (default " STR(CALIB_DEFAULT_TOKENS) ")\n"
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

static int parse_args(struct pack_opts *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"output", required_argument, 0, 'o'}, {"format", required_argument, 0, 'f'},
        {"group", required_argument, 0, 'g'},  {"quant", required_argument, 0, 'Q'},
        {"keep", required_argument, 0, 'k'},   {"quiet", no_argument, 0, 'q'},
        {"calibrate", required_argument, 0, 'C'}, {"calibrate-tokens", required_argument, 0, 'T'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    *o = (struct pack_opts){.group = 32, .quant = QNT_SEARCH, .calib_tokens = CALIB_DEFAULT_TOKENS};
    const char *group = NULL, *quant = NULL, *format = "q24", *calib_tokens = NULL;
    qp_err err = {{0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "o:f:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'f': format = optarg; break;
        case 'g': group = optarg; break;
        case 'Q': quant = optarg; break;
        case 'C': o->calib_text = optarg; break;
        case 'T': calib_tokens = optarg; break;
        case 'k':
            if (precision_add_keep(&o->prec, optarg, &err)) {
                fprintf(stderr, "qpack pack: %s\n", err.msg);
                return -1;
            }
            break;
        case 'q': o->quiet = true; break;
        case 'h': usage_pack(stdout); exit(0);
        default: usage_pack(stderr); return -1;
        }
    }
    if (optind + 1 != argc || !o->out) {
        fprintf(stderr, "qpack pack: %s\n", optind + 1 < argc ? "one source folder expected"
                                                               : "need SRC and -o OUT.qpk");
        usage_pack(stderr);
        return -1;
    }
    o->src = argv[optind];
    if (precision_parse_format(format, &o->prec.format)) {
        fprintf(stderr, "qpack pack: unknown format '%s' (q24, int8, int4 or int4-pure)\n", format);
        return -1;
    }
    if (check_quant_args(o, group, quant, o->prec.n_keep > 0))
        return -1;
    return check_calib_args(o, calib_tokens);
}

/* The largest tokenizer.json or tokenizer_config.json read (the Qwen3
 * tokenizer.json is 11 MB). */
#define TOKENIZER_FILE_MAX (64u << 20)

/* Reads dir/name whole; a missing optional file leaves *buf NULL. */
static int read_text(const char *dir, const char *name, bool required, char **buf, size_t *len, qp_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *buf = NULL;
    *len = 0;
    if (!required && access(path, F_OK) != 0 && errno == ENOENT)
        return 0;
    return fs_read_input(path, TOKENIZER_FILE_MAX, buf, len, err);
}

/* tokenizer.json must load in qrun's own tokenizer (the message is the
 * loader's); the chat template is lifted out of tokenizer_config.json so the
 * runtime need not parse that file, whose keys must be unique (Hugging Face
 * would read the last of two). */
static int load_tokenizer_files(struct packer *p, qp_err *err)
{
    char path[4096];
    if (read_text(p->opt.src, "tokenizer.json", false, &p->tokenizer, &p->tokenizer_len, err) ||
        read_text(p->opt.src, "tokenizer_config.json", false, &p->tokenizer_config,
                  &p->tokenizer_config_len, err))
        return -1;
    if (p->tokenizer) {
        snprintf(path, sizeof path, "%s/tokenizer.json", p->opt.src);
        qp_tok *tok;
        if (qp_tok_load_buffer(&tok, p->tokenizer, p->tokenizer_len, path, err))
            return -1;
        /* every id the tokenizer can give must be a row of the model's
         * vocabulary, or the container runs only some texts */
        int32_t ids = qp_tok_vocab_size(tok);
        qp_tok_free(tok);
        if ((uint32_t)ids > p->hf.vocab_size)
            return qp_fail(err, "%s has ids up to %d, past the model's vocab_size of %u (config.json): text with "
                           "those tokens could not run", path, ids - 1, p->hf.vocab_size);
    }
    if (p->tokenizer_config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", p->opt.src);
        cJSON *j = cJSON_ParseWithLength(p->tokenizer_config, p->tokenizer_config_len);
        int rc = !cJSON_IsObject(j) ? qp_fail(err, "%s: not a JSON object", path)
                                    : json_refuse_ambiguous(j, p->tokenizer_config, p->tokenizer_config_len, path, err);
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
        if (!rc && cJSON_IsString(tpl) && !(p->chat_template = strdup(tpl->valuestring)))
            rc = qp_fail(err, "out of memory");
        cJSON_Delete(j);
        if (rc)
            return -1;
    }
    return 0;
}

static int check_source(const struct packer *p, const struct st_tensor *s, uint32_t rows, uint32_t cols,
                        bool vector, qp_err *err)
{
    bool ok = vector ? (s->ndim == 1 && s->shape[0] == cols)
                     : (s->ndim == 2 && s->shape[0] == rows && s->shape[1] == cols);
    if (!ok) {
        char shape[128] = "";
        for (uint32_t d = 0; d < s->ndim && d < 4; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRIu64, d ? ", " : "",
                     s->shape[d]);
        if (vector)
            return qp_fail(err, "%s: tensor %s has shape [%s], config.json implies [%u]", p->opt.src, s->name,
                           shape, cols);
        return qp_fail(err, "%s: tensor %s has shape [%s], config.json implies [%u, %u]", p->opt.src,
                       s->name, shape, rows, cols);
    }
    return 0;
}

/* The embedding and lm_head are stored once when they are the same bytes. */
static int resolve_tie(struct packer *p, qp_err *err)
{
    const struct st_tensor *embed = st_find(&p->model, "model.embed_tokens.weight");
    const struct st_tensor *head = st_find(&p->model, "lm_head.weight");
    bool same = embed && head && embed->dtype == head->dtype && embed->nbytes == head->nbytes;
    /* compared in pieces, each released once compared, so the two 300 MB
     * tensors (Qwen3-0.6B) never become resident together */
    for (uint64_t at = 0; same && at < embed->nbytes; at += RELEASE_BYTES) {
        uint64_t n = embed->nbytes - at < RELEASE_BYTES ? embed->nbytes - at : RELEASE_BYTES;
        size_t elem = st_dtype_size(embed->dtype);
        same = memcmp(embed->data + at, head->data + at, n) == 0;
        st_release_part(&p->model, embed, at / elem, n / elem);
        st_release_part(&p->model, head, at / elem, n / elem);
    }
    if (head) {
        st_release(&p->model, head);
        if (embed)
            st_release(&p->model, embed);
    }
    if (p->hf.tie_word_embeddings && head && !same)
        return qp_fail(err, "%s: config.json ties the embeddings but lm_head.weight differs from "
                            "model.embed_tokens.weight", p->opt.src);
    if (!p->hf.tie_word_embeddings && !head)
        return qp_fail(err, "%s: config.json does not tie the embeddings and there is no lm_head.weight",
                       p->opt.src);
    p->deduped_lm_head = head && same;
    if (same || !head)
        p->cfg.flags |= QPK_CONFIG_TIED;
    return 0;
}

static int plan_one(struct packer *p, unsigned role, unsigned layer, qp_err *err)
{
    struct planned *pl = &p->plan[p->n_plan];
    struct qpk_tensor *t = &pl->t;
    memset(pl, 0, sizeof *pl);
    if (!qwen3_tensor_name(t->name, sizeof t->name, role, layer))
        return qp_fail(err, "internal: no name for role %u", role);
    pl->src = st_find(&p->model, t->name);
    if (!pl->src)
        return qp_fail(err, "%s: missing tensor %s", p->opt.src, t->name);
    t->role = (uint16_t)role;
    t->layer = (uint16_t)(qpk_role_is_layer(role) ? layer : QPK_NO_LAYER);
    qpk_role_shape(&p->cfg, role, &t->rows, &t->cols);
    bool norm = qpk_role_is_norm(role);
    if (check_source(p, pl->src, t->rows, t->cols, norm, err))
        return -1;
    /* quantised matrices get their group, stride and exponent in settle_matrices() */
    t->encoding = norm ? QPK_ENC_I32S : precision_encoding(&p->opt.prec, t->name, role, layer, p->cfg.n_layers);
    t->scale_exp = Q24_FRAC_BITS; /* norms: set from their values when written */
    t->rows_per_block = norm ? 1 : QPK_Q24_TILE_ROWS;
    t->row_stride = norm ? ((uint64_t)t->cols * 4 + 7) / 8 * 8 : (uint64_t)t->cols * 4 * QPK_Q24_TILE_ROWS;
    if (!norm && (t->rows % QPK_Q24_TILE_ROWS || t->cols % QPK_Q24_TILE_COLS))
        return qp_fail(err, "%s: tensor %s is [%u, %u]; the kernels' %u-row blocks need rows divisible by %u "
                       "and columns by %u", p->opt.src, t->name, t->rows, t->cols, QPK_Q24_TILE_ROWS,
                       QPK_Q24_TILE_ROWS, QPK_Q24_TILE_COLS);
    p->n_plan++;
    return 0;
}

/* The group of every i8g and i6g matrix: --group for --format int8; in an
 * int4 container PRECISION_INT8_GROUP, halved while it does not divide some
 * such matrix's columns (small test models; every matrix's columns are a
 * multiple of 16, so it stops at QPK_GROUP_MIN at the latest). */
static uint32_t choose_int8_group(const struct packer *p)
{
    if (p->opt.prec.format == PACK_INT8)
        return p->opt.group;
    uint32_t g = PRECISION_INT8_GROUP;
    for (uint32_t i = 0; i < p->n_plan; i++)
        while (qpk_kernel_encoding(p->plan[i].t.encoding) == QPK_ENC_I8G && g > QPK_GROUP_MIN && p->plan[i].t.cols % g)
            g /= 2;
    return g;
}

/* Group, stride and exponent of one quantised matrix (the exponent takes a
 * pass over the source, which is then let go until it is written). The
 * int4 preset's i4g matrices take super-blocks (i4k) where the columns
 * hold whole ones. */
static int settle_quantised(struct packer *p, struct planned *pl, qp_err *err)
{
    struct qpk_tensor *t = &pl->t;
    bool int8 = qpk_kernel_encoding(t->encoding) == QPK_ENC_I8G;
    t->group_size = int8 ? p->i8_group : p->opt.group;
    if (t->cols % t->group_size)
        return qp_fail(err, "%s: tensor %s has %u columns, not a multiple of the %s group %u", p->opt.src, t->name,
                       t->cols, int8 ? "int8" : "int4", t->group_size);
    if (t->encoding == QPK_ENC_I4G && p->opt.prec.format == PACK_INT4 && t->cols % (t->group_size * QPK_I4K_GROUPS) == 0)
        t->encoding = QPK_ENC_I4K;
    t->row_stride = qpk_block_bytes(t->encoding, t->cols, t->group_size);
    t->scale_exp = quant_tensor_exponent(&p->model, pl->src);
    st_release(&p->model, pl->src);
    return 0;
}

/* After planning: every --keep rule matched, and every quantised matrix
 * has its layout. */
static int settle_matrices(struct packer *p, qp_err *err)
{
    const struct keep_rule *unmatched = precision_unmatched(&p->opt.prec);
    if (unmatched)
        return qp_fail(err, "%s: --keep '%s': no matrix matches '%s'", p->opt.src, unmatched->arg,
                       unmatched->pattern);
    p->i8_group = choose_int8_group(p);
    for (uint32_t i = 0; i < p->n_plan; i++) {
        unsigned enc = qpk_kernel_encoding(p->plan[i].t.encoding);
        if ((enc == QPK_ENC_I8G || enc == QPK_ENC_I4G) && settle_quantised(p, &p->plan[i], err))
            return -1;
    }
    return 0;
}

static int plan_tensors(struct packer *p, qp_err *err)
{
    uint32_t max = 3 + 11 * p->cfg.n_layers;
    p->plan = calloc(max, sizeof *p->plan);
    if (!p->plan)
        return qp_fail(err, "out of memory");
    static const unsigned layer_roles[] = {
        QPK_ROLE_ATTN_NORM, QPK_ROLE_Q, QPK_ROLE_K, QPK_ROLE_V, QPK_ROLE_Q_NORM, QPK_ROLE_K_NORM,
        QPK_ROLE_O, QPK_ROLE_MLP_NORM, QPK_ROLE_GATE, QPK_ROLE_UP, QPK_ROLE_DOWN,
    };
    if (plan_one(p, QPK_ROLE_EMBED, QPK_NO_LAYER, err))
        return -1;
    for (uint32_t l = 0; l < p->cfg.n_layers; l++)
        for (size_t r = 0; r < sizeof layer_roles / sizeof *layer_roles; r++)
            if (plan_one(p, layer_roles[r], l, err))
                return -1;
    if (plan_one(p, QPK_ROLE_FINAL_NORM, QPK_NO_LAYER, err))
        return -1;
    if (!(p->cfg.flags & QPK_CONFIG_TIED) && plan_one(p, QPK_ROLE_LM_HEAD, QPK_NO_LAYER, err))
        return -1;
    return 0;
}

/* Tensors in the checkpoint that a Qwen3 forward pass does not use. */
static void warn_unused(const struct packer *p)
{
    uint32_t unused = 0;
    const char *first = NULL;
    for (uint32_t i = 0; i < p->model.n_tensors; i++) {
        unsigned role, layer;
        const char *name = p->model.tensors[i].name;
        if (!qwen3_tensor_role(name, &role, &layer) || (layer != QPK_NO_LAYER && layer >= p->cfg.n_layers)) {
            unused++;
            first = first ? first : name;
        }
    }
    if (unused && !p->opt.quiet)
        fprintf(stderr, "qpack: warning: %u tensor(s) not used by Qwen3 are left out (first: %s)\n", unused, first);
}

static void note_error(struct planned *pl, double v, double back)
{
    double e = fabs(v - back);
    pl->sum_sq_err += e * e;
    if (e > pl->max_err)
        pl->max_err = e;
    if (fabs(v) > pl->max_abs)
        pl->max_abs = fabs(v);
}

static int value_error(const struct packer *p, const struct planned *pl, uint64_t i, double v, const char *why,
                       qp_err *err)
{
    return qp_fail(err, "%s: tensor %s[%" PRIu64 ", %" PRIu64 "] = %g %s", p->opt.src, pl->t.name,
                   i / pl->t.cols, i % pl->t.cols, v, why);
}

/* The checked conversion of one element: fits, and its error noted. */
static int convert_one(const struct packer *p, struct planned *pl, uint64_t i, int32_t *q, qp_err *err)
{
    const struct st_tensor *s = pl->src;
    bool ok;
    if (s->dtype == ST_BF16) {
        uint16_t bits = (uint16_t)(s->data[2 * i] | s->data[2 * i + 1] << 8);
        ok = q24_from_bf16(bits, q);
    } else {
        ok = q24_from_float(st_get_f32(s, i), q);
    }
    double v = st_get_f32(s, i);
    if (!ok)
        return value_error(p, pl, i, v, "does not fit q24 (needs a finite |v| < 128)", err);
    note_error(pl, v, ldexp((double)*q, -Q24_FRAC_BITS));
    return 0;
}

/* BF16 magnitudes (bits & 0x7fff) in [QUIET_MIN, QUIET_END) are exact in
 * Q24 (|v| >= 2^-17) and fit (|v| < 128): such an element needs no error
 * accounting, its |v| ordering is its bits' ordering. Every other pattern
 * (small, too large, inf, NaN) takes convert_one. Skipping exact elements
 * leaves the error sums bit for bit what per-element accounting gives: they
 * would add +0.0, and the rest are still added in index order. */
#define QUIET_MIN 0x3700u
#define QUIET_END 0x4300u

/* Converts one block of 4 rows (elements [first, first + 4 * cols)) to Q24,
 * straight into the block's 4 x 16 tiles in out. Elements are visited in
 * index order, so the error sums match an element-by-element pass. */
static int convert_block(const struct packer *p, struct planned *pl, uint64_t first, int32_t *out, qp_err *err)
{
    const struct st_tensor *s = pl->src;
    uint32_t cols = pl->t.cols;
    if (s->dtype == ST_BF16) {
        const uint8_t *src = s->data + 2 * first;
        uint16_t max_mag = 0;
        for (uint32_t k = 0; k < QPK_Q24_TILE_ROWS; k++)
            for (uint32_t c0 = 0; c0 < cols; c0 += QPK_Q24_TILE_COLS) {
                int32_t *dst = out + (uint64_t)c0 * QPK_Q24_TILE_ROWS + k * QPK_Q24_TILE_COLS;
                uint16_t in[QPK_Q24_TILE_COLS], loud = 0;
                memcpy(in, src + 2 * ((uint64_t)k * cols + c0), sizeof in);
                /* branch-free so it vectorizes: a quiet value times 2^24 is
                 * an integer below 2^31, which the float product holds exactly */
                for (uint32_t j = 0; j < QPK_Q24_TILE_COLS; j++) {
                    uint16_t mag = in[j] & 0x7fff;
                    loud |= (uint16_t)(mag - QUIET_MIN) >= (uint16_t)(QUIET_END - QUIET_MIN);
                    max_mag = mag > max_mag ? mag : max_mag;
                    dst[j] = (int32_t)(qp_bf16_to_f32(mag < QUIET_END ? in[j] : 0) * 0x1p24f);
                }
                if (!loud)
                    continue;
                /* redone one by one, in index order (so the error sums match) */
                for (uint32_t j = 0; j < QPK_Q24_TILE_COLS; j++)
                    if ((uint16_t)((in[j] & 0x7fff) - QUIET_MIN) >= (uint16_t)(QUIET_END - QUIET_MIN) &&
                        convert_one(p, pl, first + (uint64_t)k * cols + c0 + j, &dst[j], err))
                        return -1;
            }
        double m = (double)qp_bf16_to_f32((uint16_t)max_mag);
        if (m > pl->max_abs)
            pl->max_abs = m;
        return 0;
    }
    for (uint32_t k = 0; k < QPK_Q24_TILE_ROWS; k++)
        for (uint32_t c = 0; c < cols; c++) {
            int32_t *dst = out + (uint64_t)(c / QPK_Q24_TILE_COLS) * QPK_Q24_TILE_COLS * QPK_Q24_TILE_ROWS +
                           k * QPK_Q24_TILE_COLS + c % QPK_Q24_TILE_COLS;
            if (convert_one(p, pl, first + (uint64_t)k * cols + c, dst, err))
                return -1;
        }
    return 0;
}

static int write_matrix(struct packer *p, struct qpk_writer *w, struct planned *pl, qp_err *err)
{
    uint32_t cols = pl->t.cols, blocks = pl->t.rows / QPK_Q24_TILE_ROWS;
    uint64_t block_elems = (uint64_t)cols * QPK_Q24_TILE_ROWS;
    uint64_t elem = st_dtype_size(pl->src->dtype), released = 0;
    for (uint32_t b = 0; b < blocks; b++) {
        if (convert_block(p, pl, b * block_elems, p->chunk, err) ||
            qpk_writer_write(w, p->chunk, block_elems * 4, err))
            return -1;
        uint64_t done = (b + 1) * block_elems;
        if ((done - released) * elem >= RELEASE_BYTES || b + 1 == blocks) {
            st_release_part(&p->model, pl->src, released, done - released);
            released = done;
            progress_bytes(&p->prog, done * 4);
        }
    }
    return 0;
}

static int write_norm(struct packer *p, struct qpk_writer *w, struct planned *pl, qp_err *err)
{
    const struct st_tensor *s = pl->src;
    uint32_t n = pl->t.cols;
    double max_abs = 0;
    for (uint32_t i = 0; i < n; i++) {
        double v = st_get_f32(s, i);
        if (!isfinite(v))
            return value_error(p, pl, i, v, "is not finite", err);
        max_abs = fmax(max_abs, fabs(v));
    }
    int e = i32s_exponent(max_abs);
    if (e < 0)
        return value_error(p, pl, 0, max_abs, "is too large for a norm scale (|v| <= 2^30)", err);
    memset(p->chunk, 0, pl->t.row_stride);
    for (uint32_t i = 0; i < n; i++) {
        double v = st_get_f32(s, i);
        p->chunk[i] = i32s_encode(v, e);
        note_error(pl, v, ldexp((double)p->chunk[i], -e));
    }
    return qpk_writer_write(w, p->chunk, pl->t.row_stride, err);
}

/* The exponent of a norm is part of its directory entry, so it is settled
 * before the writer lays the directory out. */
static void settle_norm_exponents(struct packer *p)
{
    for (uint32_t i = 0; i < p->n_plan; i++) {
        struct planned *pl = &p->plan[i];
        if (pl->t.encoding != QPK_ENC_I32S)
            continue;
        double max_abs = 0;
        for (uint32_t k = 0; k < pl->t.cols; k++)
            max_abs = fmax(max_abs, fabs((double)st_get_f32(pl->src, k)));
        pl->t.scale_exp = isfinite(max_abs) ? i32s_exponent(max_abs) : 0;
        st_release(&p->model, pl->src);
    }
}

/* The quantiser of one matrix: int8 is symmetric, so its absmax
 * round-to-nearest is packer/quant.h's QNT_RTN (min/max is the same). */
static qnt_method method_for(qnt_method opt, unsigned encoding)
{
    return qpk_kernel_encoding(encoding) == QPK_ENC_I8G && opt == QNT_ABSMAX ? QNT_RTN : opt;
}

static const char *quantiser_name(qnt_method opt)
{
    return opt == QNT_SEARCH ? "search" : opt == QNT_ABSMAX ? "rtn" : "minmax";
}

/* The RMSNorm whose output a matrix multiplies, if any: its gains scale
 * the matrix's input columns, and so the error of each column. */
static const struct st_tensor *input_norm(const struct packer *p, const struct qpk_tensor *t)
{
    unsigned role = t->role == QPK_ROLE_Q || t->role == QPK_ROLE_K || t->role == QPK_ROLE_V ? QPK_ROLE_ATTN_NORM
                    : t->role == QPK_ROLE_GATE || t->role == QPK_ROLE_UP                  ? QPK_ROLE_MLP_NORM
                    : t->role == QPK_ROLE_LM_HEAD || t->role == QPK_ROLE_EMBED            ? QPK_ROLE_FINAL_NORM
                                                                                          : 0;
    unsigned layer = role == QPK_ROLE_FINAL_NORM ? QPK_NO_LAYER : t->layer;
    if (!role || (t->role == QPK_ROLE_EMBED && !(p->cfg.flags & QPK_CONFIG_TIED)))
        return NULL;
    for (uint32_t i = 0; i < p->n_plan; i++)
        if (p->plan[i].t.role == role && p->plan[i].t.layer == layer)
            return p->plan[i].src;
    return NULL;
}

/* A column no input reaches still gets a little weight: a group of zero
 * weights stays an ordinary least-squares fit. The tied embedding is also
 * looked up, where every column counts alike: 1 + w / mean(w). */
static void finish_importance(float *w, uint32_t cols, bool embed)
{
    double sum = 0;
    for (uint32_t j = 0; j < cols; j++)
        sum += w[j];
    float floor = (float)(1e-4 * sum / cols);
    for (uint32_t j = 0; j < cols; j++)
        w[j] = embed ? 1.0f + (sum > 0 ? (float)(w[j] * cols / sum) : 0.0f)
                     : fmaxf(w[j], floor) + (sum > 0 ? 0.0f : 1.0f);
}

/* The searched quantiser's weight of each input column. Calibrated
 * (--calibrate): the column's mean square on the calibration text, what
 * its error is multiplied by on real inputs. Otherwise the squared gain of
 * the norm feeding the matrix (a column amplified 300x by its norm costs
 * 300x the logit error), so groups spend their precision where it counts;
 * uniform (NULL) for o_proj and down_proj. NULL also for an untied
 * embedding (only looked up) and the round-to-nearest quantisers. */
static float *column_importance(const struct packer *p, const struct planned *pl)
{
    bool search = p->opt.quant == QNT_SEARCH, embed = pl->t.role == QPK_ROLE_EMBED;
    if (!search || (embed && !(p->cfg.flags & QPK_CONFIG_TIED)))
        return NULL;
    const double *calibrated = p->calibrated ? calib_mean_sq(&p->calib, pl->t.role, pl->t.layer) : NULL;
    const struct st_tensor *g = calibrated ? NULL : input_norm(p, &pl->t);
    float *w = calibrated || g ? malloc(sizeof(float) * pl->t.cols) : NULL;
    if (!w)
        return NULL;
    for (uint32_t j = 0; j < pl->t.cols; j++) {
        double v = calibrated ? calibrated[j] : st_get_f32(g, j);
        v = calibrated ? v : v * v;
        w[j] = isfinite(v) ? (float)v : 0.0f;
    }
    if (g)
        st_release(&p->model, g);
    finish_importance(w, pl->t.cols, embed);
    return w;
}

static void quant_progress(void *ctx, uint64_t bytes_done)
{
    progress_bytes(ctx, bytes_done);
}

static int write_quantised(struct packer *p, struct qpk_writer *w, struct planned *pl, qp_err *err)
{
    qnt_damage d = {0};
    float *importance = column_importance(p, pl);
    bool int4 = qpk_kernel_encoding(pl->t.encoding) == QPK_ENC_I4G;
    struct quant_matrix m = {.model = &p->model, .src = pl->src, .rows = pl->t.rows, .cols = pl->t.cols,
                             .group = pl->t.group_size, .E = pl->t.scale_exp,
                             .method = method_for(p->opt.quant, pl->t.encoding), .importance = importance,
                             .format = int4 ? "int4" : "int8", .encoding = pl->t.encoding};
    struct quant_progress progress = {quant_progress, &p->prog};
    int rc = int4 ? i4_write_matrix(w, &m, &progress, &d, err) : i8_write_matrix(w, &m, &progress, &d, err);
    free(importance);
    pl->max_abs = d.max_abs;
    pl->max_err = d.max_err;
    pl->sum_sq_err = d.sum_sq;
    return rc;
}

static uint64_t planned_bytes(const struct planned *pl)
{
    return (uint64_t)(pl->t.rows / pl->t.rows_per_block) * pl->t.row_stride;
}

/* A tensor's work for the progress line's estimate of the time left: its
 * weights times what one costs in its encoding (ns of CPU here; only the
 * ratios matter). */
static double tensor_work(const struct packer *p, const struct planned *pl)
{
    double n = (double)pl->t.rows * pl->t.cols;
    bool search = p->opt.quant == QNT_SEARCH;
    switch (qpk_kernel_encoding(pl->t.encoding)) {
    case QPK_ENC_I4G: return n * (search ? 40 : 10);
    case QPK_ENC_I8G: return n * (search ? 20 : 8);
    default: return n * 2;
    }
}

static int write_tensors(struct packer *p, struct qpk_writer *w, qp_err *err)
{
    uint64_t bytes = 0;
    double work = 0;
    for (uint32_t i = 0; i < p->n_plan; i++) {
        bytes += planned_bytes(&p->plan[i]);
        work += tensor_work(p, &p->plan[i]);
    }
    progress_start(&p->prog, p->progress, p->n_plan, bytes, work);
    for (uint32_t i = 0; i < p->n_plan; i++) {
        struct planned *pl = &p->plan[i];
        progress_tensor(&p->prog, i, planned_bytes(pl), tensor_work(p, pl));
        int rc = qpk_writer_begin_tensor(w, i, err);
        if (!rc)
            rc = pl->t.encoding == QPK_ENC_I32S ? write_norm(p, w, pl, err)
                 : pl->t.encoding == QPK_ENC_Q24 ? write_matrix(p, w, pl, err)
                                                 : write_quantised(p, w, pl, err);
        if (!rc)
            rc = qpk_writer_end_tensor(w, err);
        st_release(&p->model, pl->src);
        if (rc)
            return -1;
    }
    progress_end(&p->prog);
    return 0;
}

/* Every file the checkpoint was read from, with its size and XXH3, in a fixed
 * order: one entry per candidate, present false when an optional one is
 * absent. */
static const char *const extra_sources[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                            "model.safetensors.index.json"};
#define N_EXTRA_SOURCES (sizeof extra_sources / sizeof *extra_sources)

struct source_hash {
    const char *name;
    uint64_t size, hash;
    bool present;
};

static int hash_sources(const struct packer *p, struct source_hash *out, qp_err *err)
{
    for (size_t i = 0; i < N_EXTRA_SOURCES + p->model.n_files; i++) {
        char path[4096];
        struct source_hash *h = &out[i];
        h->name = i < N_EXTRA_SOURCES ? extra_sources[i] : p->model.files[i - N_EXTRA_SOURCES].name;
        snprintf(path, sizeof path, "%s/%s", p->opt.src, h->name);
        if (i < N_EXTRA_SOURCES && access(path, R_OK) != 0)
            continue;
        if (st_file_xxh3(path, &h->hash, &h->size, err))
            return -1;
        h->present = true;
    }
    return 0;
}

static void *hasher_main(void *arg)
{
    struct packer *p = arg;
    p->hash_rc = hash_sources(p, p->hashes, &p->hash_err);
    return NULL;
}

/* Starts hashing the sources beside the conversion (reading the same files
 * the converter maps; the result does not depend on the timing). Without a
 * thread the hashes are taken later, in line. */
static int start_hashing(struct packer *p, qp_err *err)
{
    p->hashes = calloc(N_EXTRA_SOURCES + p->model.n_files, sizeof *p->hashes);
    if (!p->hashes)
        return qp_fail(err, "out of memory");
    p->hasher_running = pthread_create(&p->hasher, NULL, hasher_main, p) == 0;
    return 0;
}

static void join_hashing(struct packer *p)
{
    if (p->hasher_running)
        pthread_join(p->hasher, NULL);
    p->hasher_running = false;
}

static cJSON *source_files_json(struct packer *p, qp_err *err)
{
    if (p->hasher_running)
        join_hashing(p);
    else
        p->hash_rc = hash_sources(p, p->hashes, &p->hash_err);
    if (p->hash_rc) {
        *err = p->hash_err;
        return NULL;
    }
    cJSON *files = cJSON_CreateArray();
    for (size_t i = 0; i < N_EXTRA_SOURCES + p->model.n_files; i++) {
        const struct source_hash *h = &p->hashes[i];
        if (!h->present)
            continue;
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, h->hash);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", h->name);
        cJSON_AddNumberToObject(f, "size", (double)h->size);
        cJSON_AddStringToObject(f, "xxh3", hex);
        cJSON_AddItemToArray(files, f);
    }
    return files;
}

/* The matrix encodings the plan uses, joined by '+' in a fixed order:
 * "q24", "i8g", "i4g+i8g", "i8g+i6g+i4k", ... */
static void matrix_encodings(const struct packer *p, char *out, size_t n)
{
    static const unsigned order[] = {QPK_ENC_Q24, QPK_ENC_I4G, QPK_ENC_I8G, QPK_ENC_I6G, QPK_ENC_I4K};
    size_t len = 0;
    out[0] = 0;
    for (unsigned k = 0; k < sizeof order / sizeof *order; k++) {
        bool used = false;
        for (uint32_t i = 0; i < p->n_plan && !used; i++)
            used = p->plan[i].t.encoding == order[k];
        if (used)
            len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "+" : "", qpk_encoding_name(order[k]));
    }
}

/* settings.calibration: what --calibrate ran */
static void calibration_json(const struct packer *p, cJSON *settings)
{
    const struct calib *c = &p->calib;
    char hex[17], *path = strdup(p->opt.calib_text);
    snprintf(hex, sizeof hex, "%016" PRIx64, c->text_xxh3);
    cJSON *j = cJSON_AddObjectToObject(settings, "calibration");
    cJSON_AddStringToObject(j, "text", path ? basename(path) : "");
    free(path);
    cJSON_AddNumberToObject(j, "text_size", (double)c->text_bytes);
    cJSON_AddStringToObject(j, "text_xxh3", hex);
    cJSON_AddNumberToObject(j, "tokens", (double)c->tokens);
    cJSON_AddNumberToObject(j, "window", c->window);
    cJSON_AddStringToObject(j, "by", "float64 reference");
    cJSON_AddStringToObject(j, "weights", "mean square of each input column");
}

/* The settings a quantised format was packed with: groups, quantiser, and
 * for int4 the preset and the --keep rules in order. */
static void quant_settings_json(const struct packer *p, cJSON *settings)
{
    enum pack_format f = p->opt.prec.format;
    if (f == PACK_INT4 || f == PACK_INT4_PURE)
        cJSON_AddStringToObject(settings, "preset", precision_format_name(f));
    cJSON_AddNumberToObject(settings, "group", p->opt.group);
    if (f != PACK_INT8)
        cJSON_AddNumberToObject(settings, "int8_group", p->i8_group);
    cJSON_AddStringToObject(settings, "quantiser", quantiser_name(p->opt.quant));
    if (p->calibrated)
        calibration_json(p, settings);
    if (f == PACK_INT8)
        return;
    cJSON *keep = cJSON_AddArrayToObject(settings, "keep");
    for (unsigned i = 0; i < p->opt.prec.n_keep; i++)
        cJSON_AddItemToArray(keep, cJSON_CreateString(p->opt.prec.keep[i].arg));
}

static char *provenance_json(struct packer *p, qp_err *err)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "packer", "qpack " QPACK_VERSION);
    cJSON_AddStringToObject(root, "format", precision_format_name(p->opt.prec.format));
    cJSON *settings = cJSON_AddObjectToObject(root, "settings");
    char matrices[64];
    matrix_encodings(p, matrices, sizeof matrices);
    cJSON_AddStringToObject(settings, "matrices", matrices);
    if (precision_quantised(p->opt.prec.format))
        quant_settings_json(p, settings);
    cJSON_AddStringToObject(settings, "norms", "i32s");
    cJSON_AddBoolToObject(settings, "lm_head_deduplicated", p->deduped_lm_head);
    char *dir = strdup(p->opt.src);
    cJSON_AddStringToObject(root, "source", dir ? basename(dir) : "");
    free(dir);
    cJSON *files = source_files_json(p, err);
    if (!files) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddItemToObject(root, "source_files", files);
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct planned *pl = &p->plan[i];
        cJSON *t = cJSON_CreateObject();
        uint64_t n = (uint64_t)pl->t.rows * pl->t.cols;
        cJSON_AddStringToObject(t, "name", pl->t.name);
        cJSON_AddStringToObject(t, "source_dtype", st_dtype_name(pl->src->dtype));
        cJSON_AddStringToObject(t, "encoding", qpk_encoding_name(pl->t.encoding));
        if (pl->t.group_size)
            cJSON_AddNumberToObject(t, "group", pl->t.group_size);
        cJSON_AddNumberToObject(t, "max_abs", pl->max_abs);
        cJSON_AddNumberToObject(t, "max_error", pl->max_err);
        cJSON_AddNumberToObject(t, "rms_error", sqrt(pl->sum_sq_err / (double)n));
        cJSON_AddItemToArray(tensors, t);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        qp_fail(err, "out of memory");
    return text;
}

/* One line per tensor, for the quantised formats: where the error is. */
static void print_tensor_errors(const struct packer *p)
{
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct planned *pl = &p->plan[i];
        double n = (double)pl->t.rows * pl->t.cols;
        char enc[16];
        snprintf(enc, sizeof enc, pl->t.group_size ? "%s g%u" : "%s", qpk_encoding_name(pl->t.encoding),
                 pl->t.group_size);
        fprintf(stderr, "qpack:   %-46s %-8s %6.3f bpw  rms %-9.3g max %.3g\n", pl->t.name, enc,
                8.0 * (double)planned_bytes(pl) / n, sqrt(pl->sum_sq_err / n), pl->max_err);
    }
}

/* The tensors of each encoding in a family, "140 i4k + 12 i4g", or ""
 * when it has none; true when it had some. */
static bool print_family(const struct packer *p, const unsigned enc[2], const char *lead)
{
    uint32_t n[2] = {0, 0};
    for (uint32_t i = 0; i < p->n_plan; i++)
        for (unsigned k = 0; k < 2; k++)
            n[k] += p->plan[i].t.encoding == enc[k];
    for (unsigned k = 0; k < 2; k++)
        if (n[k])
            fprintf(stderr, "%s %u %s", k && n[0] ? " +" : lead, n[k], qpk_encoding_name(enc[k]));
    return n[0] || n[1];
}

/* "140 i4k + 12 i4g (groups of 32), 1 i6g + 3 i8g (groups of 64)": a
 * quantised pack's matrices */
static void print_matrix_mix(const struct packer *p)
{
    static const unsigned int4[2] = {QPK_ENC_I4K, QPK_ENC_I4G}, int8[2] = {QPK_ENC_I6G, QPK_ENC_I8G};
    fprintf(stderr, "qpack: matrices:");
    bool any4 = print_family(p, int4, "");
    if (any4)
        fprintf(stderr, " (groups of %u)", p->opt.group);
    if (print_family(p, int8, any4 ? "," : ""))
        fprintf(stderr, " (groups of %u%s)", p->i8_group,
                p->opt.prec.format != PACK_INT8 && p->i8_group != PRECISION_INT8_GROUP
                    ? ": " STR(PRECISION_INT8_GROUP) " does not divide their columns" : "");
    fprintf(stderr, "\n");
}

/* "123.4 kB", "45.6 MB", "0.45 GB" */
static void format_size(char *out, size_t n, double bytes)
{
    if (bytes < 1e6)
        snprintf(out, n, "%.1f kB", bytes / 1e3);
    else if (bytes < 1e9)
        snprintf(out, n, "%.1f MB", bytes / 1e6);
    else
        snprintf(out, n, "%.2f GB", bytes / 1e9);
}

static void print_summary(const struct packer *p, double seconds)
{
    if (p->opt.quiet)
        return;
    if (!p->tokenizer)
        fprintf(stderr, "qpack: warning: %s has no tokenizer.json: the container carries no tokenizer "
                        "(qrun -p and --chat will need --tokenizer)\n", p->opt.src);
    double worst = 0, sum_sq = 0, n_all = 0;
    const char *worst_name = "";
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct planned *pl = &p->plan[i];
        sum_sq += pl->sum_sq_err;
        n_all += (double)pl->t.rows * pl->t.cols;
        bytes += planned_bytes(pl);
        if (pl->max_err > worst) {
            worst = pl->max_err;
            worst_name = pl->t.name;
        }
    }
    if (precision_quantised(p->opt.prec.format)) {
        print_tensor_errors(p);
        print_matrix_mix(p);
    }
    struct stat st;
    char file_size[32], data_size[32];
    format_size(file_size, sizeof file_size, stat(p->opt.out, &st) == 0 ? (double)st.st_size : 0);
    format_size(data_size, sizeof data_size, (double)bytes);
    fprintf(stderr, "qpack: %s: %s, %u tensors, %.2fM weights, %s of tensor data, %.3f bits per weight, "
                    "in %.1f s\n",
            p->opt.out, file_size, p->n_plan, n_all / 1e6, data_size, 8.0 * (double)bytes / n_all, seconds);
    fprintf(stderr, "qpack: reconstruction error vs the source: rms %.3g, max %.3g (%s)%s\n",
            sqrt(sum_sq / n_all), worst, worst_name[0] ? worst_name : "all exact",
            p->deduped_lm_head ? "; lm_head stored once (tied)" : "");
}

static void fill_config(struct packer *p)
{
    const struct qwen3_config *h = &p->hf;
    p->cfg = (struct qpk_config){
        .hidden = h->hidden_size, .intermediate = h->intermediate_size, .n_layers = h->num_hidden_layers,
        .n_heads = h->num_attention_heads, .n_kv_heads = h->num_key_value_heads, .head_dim = h->head_dim,
        .vocab = h->vocab_size, .max_positions = h->max_position_embeddings, .rope_theta = h->rope_theta,
        .rms_eps = h->rms_norm_eps, .bos_id = h->bos_token_id, .eos_id = h->eos_token_id,
        .weight_format = precision_weight_format(p->opt.prec.format),
    };
}

static int write_container(struct packer *p, qp_err *err)
{
    struct qpk_blob blobs[3];
    unsigned nb = 0;
    if (p->tokenizer)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_TOKENIZER, p->tokenizer, p->tokenizer_len};
    if (p->tokenizer_config)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_TOKENIZER_CONFIG, p->tokenizer_config, p->tokenizer_config_len};
    if (p->chat_template)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_CHAT_TEMPLATE, p->chat_template, strlen(p->chat_template)};
    struct qpk_tensor *list = calloc(p->n_plan, sizeof *list);
    if (!list)
        return qp_fail(err, "out of memory");
    for (uint32_t i = 0; i < p->n_plan; i++)
        list[i] = p->plan[i].t;
    struct qpk_writer *w;
    int rc = qpk_writer_open(&w, p->opt.out, &p->cfg, blobs, nb, list, p->n_plan, err);
    free(list);
    if (rc)
        return -1;
    char *prov = NULL;
    rc = write_tensors(p, w, err);
    if (!rc)
        rc = (prov = provenance_json(p, err)) ? 0 : -1;
    if (!rc)
        rc = qpk_writer_finish(w, prov, err); /* frees w either way */
    else
        qpk_writer_abort(w);
    free(prov);
    return rc;
}

/* --calibrate: the reference over the text, before any tensor is written. */
static int calibrate(struct packer *p, qp_err *err)
{
    if (!p->opt.calib_text)
        return 0;
    if (!p->tokenizer)
        return qp_fail(err, "%s: --calibrate needs the checkpoint's tokenizer.json to read %s", p->opt.src,
                       p->opt.calib_text);
    /* the reference takes minutes on big shapes: say so on a terminal */
    if (!p->opt.quiet && isatty(STDERR_FILENO))
        fprintf(stderr, "qpack: calibrating on up to %" PRIu64 " tokens of %s (float64 reference)\n",
                p->opt.calib_tokens, p->opt.calib_text);
    double t0 = qp_now_s();
    if (calib_run(&p->calib, p->opt.src, p->tokenizer, p->tokenizer_len, p->opt.calib_text, p->opt.calib_tokens,
                  err))
        return -1;
    p->calibrated = true;
    if (!p->opt.quiet)
        fprintf(stderr, "qpack: calibrated on %" PRIu64 " tokens of %s in %u window(s), %.1f s\n",
                p->calib.tokens, p->opt.calib_text, p->calib.windows, qp_now_s() - t0);
    return 0;
}

static void packer_free(struct packer *p)
{
    join_hashing(p); /* before the model it reads goes away */
    free(p->hashes);
    st_close(&p->model);
    free(p->plan);
    free(p->tokenizer);
    free(p->tokenizer_config);
    free(p->chat_template);
    free(p->chunk);
    calib_free(&p->calib);
}

/* A pack ends at once on a signal that ends a process, in well under 0.5 s
 * even in the middle of an fsync or of a long quantiser search: the unnamed
 * output (O_TMPFILE) vanishes with the process and a named one (file
 * systems without O_TMPFILE) is unlinked here; nothing else needs undoing,
 * so there is no flag for the loops to poll. SIGXFSZ is ignored instead: a
 * write past the file size limit then fails with one line. */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
                                   SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU};
static volatile sig_atomic_t progress_line; /* a progress line is on stderr */

static void on_stop_signal(int sig)
{
    fs_out_remove_temps();
    static const char msg[] = "\r\033[Kqpack: interrupted\n"; /* "\r\033[K" clears a progress line */
    const char *m = progress_line ? msg : msg + 4;
    ssize_t n = write(STDERR_FILENO, m, strlen(m));
    (void)n;
    _exit(128 + sig);
}

/* Signals ignored when qpack starts (nohup) stay ignored. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal}, old;
    sigfillset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(stop_signals[i], &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
}

int cmd_pack(int argc, char **argv)
{
    struct packer p = {0};
    if (parse_args(&p.opt, argc, argv))
        return 2;
    catch_stop_signals();
    double t0 = qp_now_s();
    qp_err err = {{0}};
    char config_path[4096];
    snprintf(config_path, sizeof config_path, "%s/config.json", p.opt.src);
    struct stat st;
    /* the destination before any work: not a device, FIFO, directory,
     * link or one of the checkpoint's files, in a writable folder */
    const char *inputs[] = {p.opt.src, p.opt.calib_text, NULL};
    int rc = 0;
    if (stat(p.opt.src, &st) != 0)
        rc = qp_fail(&err, "%s: %s", p.opt.src, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        rc = qp_fail(&err, "%s: not a folder (expected a Hugging Face model folder)", p.opt.src);
    /* a destination that cannot be written is bad usage (-o's value) */
    bool bad_out = !rc && fs_out_check(p.opt.out, inputs, &err) != 0;
    rc |= bad_out;
    if (!rc)
        rc = hf_config_load(config_path, &p.hf, &err);
    if (!rc) {
        fill_config(&p);
        /* one 4-row block of the widest matrix, or a norm vector */
        uint64_t widest = p.hf.intermediate_size > p.hf.hidden_size ? p.hf.intermediate_size : p.hf.hidden_size;
        uint64_t qd = (uint64_t)p.hf.num_attention_heads * p.hf.head_dim;
        widest = qd > widest ? qd : widest;
        p.chunk = malloc(widest * QPK_Q24_TILE_ROWS * 4 + 64);
        rc = p.chunk ? 0 : qp_fail(&err, "out of memory");
    }
    if (!rc)
        rc = st_open_dir(&p.model, p.opt.src, &err) || start_hashing(&p, &err) ||
             load_tokenizer_files(&p, &err) || resolve_tie(&p, &err) || plan_tensors(&p, &err) ||
             settle_matrices(&p, &err) || calibrate(&p, &err);
    if (!rc) {
        warn_unused(&p);
        settle_norm_exponents(&p);
        p.progress = !p.opt.quiet && isatty(STDERR_FILENO);
        progress_line = p.progress;
        rc = write_container(&p, &err);
    }
    if (rc) {
        if (p.progress)
            fprintf(stderr, "\r\033[K");
        fprintf(stderr, "qpack: %s\n", err.msg);
    } else {
        print_summary(&p, qp_now_s() - t0);
    }
    packer_free(&p);
    return bad_out ? 2 : rc ? 1 : 0;
}
