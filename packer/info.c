/* info.c - `qpack info` and `qpack verify`: what a container holds (its
 * config, the generation defaults and pooling it carries, its sections
 * and tensors), and whether every byte of it is still what the packer
 * wrote. Text from the container (its provenance, tensor names, messages
 * quoting them) goes out through show.h: escaped for a terminal, valid in
 * JSON. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_config.h"
#include "pack.h"
#include "pooling.h"
#include "task.h"
#include "qpk.h"
#include "show.h"
#include "stdout_policy.h"

/* One error line; the message may quote the container. */
static void report(const char *msg)
{
    fputs("qpack: ", stderr);
    show_text(stderr, msg, 0);
    fputc('\n', stderr);
}

static int open_or_report(struct qpk_file *f, const char *path, unsigned flags)
{
    qp_err err = {{0}};
    if (qpk_open(f, path, flags, &err)) {
        report(err.msg);
        return -1;
    }
    return 0;
}

/* provenance["tensors"][i] by name, for the per-tensor error columns */
static const cJSON *provenance_of(const cJSON *prov, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(prov, "tensors")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return t;
    }
    return NULL;
}

static double number_of(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *string_of(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

static cJSON *config_json(const struct qpk_config *c)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(j, "intermediate_size", c->intermediate);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_positions);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_eps);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->flags & QPK_CONFIG_TIED);
    /* -1 in the container: the model names none (config.json's null) */
    if (c->bos_id >= 0)
        cJSON_AddNumberToObject(j, "bos_token_id", c->bos_id);
    else
        cJSON_AddNullToObject(j, "bos_token_id");
    if (c->eos_id >= 0)
        cJSON_AddNumberToObject(j, "eos_token_id", c->eos_id);
    else
        cJSON_AddNullToObject(j, "eos_token_id");
    return j;
}

/* What the container carries beside the weights for running them: the
 * sampling its authors recommend, an embedding model's pooling and a
 * reranker's task. */
struct carried {
    bool has_gen;
    struct qwen3_gen_config gen;
    enum qp_pooling pooling;
    enum qp_task task;
};

static cJSON *gen_config_json(const struct qwen3_gen_config *g)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "do_sample", g->do_sample);
    cJSON_AddNumberToObject(j, "temperature", g->temperature);
    cJSON_AddNumberToObject(j, "top_k", g->top_k);
    cJSON_AddNumberToObject(j, "top_p", g->top_p);
    cJSON_AddNumberToObject(j, "min_p", g->min_p);
    cJSON_AddNumberToObject(j, "repetition_penalty", g->repetition_penalty);
    cJSON *eos = cJSON_AddArrayToObject(j, "eos_token_id");
    for (unsigned i = 0; i < g->n_eos; i++)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(g->eos[i]));
    return j;
}

static void hex64(char out[17], uint64_t v) { snprintf(out, 17, "%016" PRIx64, v); }

static int print_json(const struct qpk_file *f, const struct carried *c, cJSON *prov)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", f->path);
    cJSON_AddNumberToObject(root, "size", (double)f->size);
    char ver[32], hex[17];
    snprintf(ver, sizeof ver, "%u.%u", f->version_major, f->version_minor);
    cJSON_AddStringToObject(root, "format_version", ver);
    cJSON_AddStringToObject(root, "weight_format", qpk_format_name(f->cfg.weight_format));
    cJSON_AddItemToObject(root, "config", config_json(&f->cfg));
    if (c->has_gen)
        cJSON_AddItemToObject(root, "generation_config", gen_config_json(&c->gen));
    else
        cJSON_AddNullToObject(root, "generation_config");
    cJSON_AddStringToObject(root, "pooling", pooling_name(c->pooling));
    cJSON_AddStringToObject(root, "task", task_name(c->task));
    cJSON *secs = cJSON_AddArrayToObject(root, "sections");
    for (uint32_t i = 0; i < f->n_sections; i++) {
        const struct qpk_section *s = &f->sections[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "name", qpk_section_name(s->kind));
        cJSON_AddStringToObject(j, "codec", s->codec == QPK_CODEC_ZSTD ? "zstd" : "raw");
        cJSON_AddNumberToObject(j, "offset", (double)s->offset);
        cJSON_AddNumberToObject(j, "stored_size", (double)s->stored_size);
        cJSON_AddNumberToObject(j, "raw_size", (double)s->raw_size);
        hex64(hex, s->xxh3);
        cJSON_AddStringToObject(j, "xxh3", hex);
        cJSON_AddItemToArray(secs, j);
    }
    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "name", t->name);
        cJSON_AddStringToObject(j, "role", qpk_role_name(t->role));
        if (t->layer != QPK_NO_LAYER)
            cJSON_AddNumberToObject(j, "layer", t->layer);
        cJSON_AddStringToObject(j, "encoding", qpk_encoding_name(t->encoding));
        cJSON_AddNumberToObject(j, "group", t->group_size);
        cJSON *shape = cJSON_AddArrayToObject(j, "shape");
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->rows));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->cols));
        cJSON_AddNumberToObject(j, "scale_exp", t->scale_exp);
        cJSON_AddNumberToObject(j, "row_stride", (double)t->row_stride);
        cJSON_AddNumberToObject(j, "offset", (double)t->offset);
        cJSON_AddNumberToObject(j, "nbytes", (double)t->nbytes);
        hex64(hex, t->xxh3);
        cJSON_AddStringToObject(j, "xxh3", hex);
        const cJSON *p = provenance_of(prov, t->name);
        if (p) {
            cJSON_AddNumberToObject(j, "max_error", number_of(p, "max_error"));
            cJSON_AddNumberToObject(j, "rms_error", number_of(p, "rms_error"));
        }
        cJSON_AddItemToArray(ts, j);
    }
    if (prov)
        cJSON_AddItemReferenceToObject(root, "provenance", prov);
    char *text = cJSON_Print(root);
    char *safe = text ? show_json(text) : NULL;
    if (safe) {
        qp_stdout_write(safe, strlen(safe));
        putchar('\n');
    } else
        fprintf(stderr, "qpack: out of memory\n");
    free(safe);
    free(text);
    cJSON_Delete(root);
    return safe ? 0 : 1;
}

/* "int4: 9 i32s, 3 i8g g128, 12 i4g g32, 1 i6g g128": the container's
 * format and its tensors by encoding (each has one group size per
 * container) */
static void print_encodings(const struct qpk_file *f)
{
    printf("encodings   %s:", qpk_format_name(f->cfg.weight_format));
    const char *sep = " ";
    for (unsigned enc = QPK_ENC_Q24; enc <= QPK_ENC_I7G; enc++) {
        uint32_t n = 0, group = 0;
        for (uint32_t i = 0; i < f->n_tensors; i++)
            if (f->tensors[i].encoding == enc) {
                n++;
                group = f->tensors[i].group_size;
            }
        if (!n)
            continue;
        printf(group ? "%s%u %s g%u" : "%s%u %s", sep, n, qpk_encoding_name(enc), group);
        sep = ", ";
    }
    printf("\n");
}

/* "sampling temperature 0.6, top-k 20, top-p 0.95, min-p 0, repetition
 * penalty 1; eos 151645, 151643" */
static void print_generation(const struct carried *c)
{
    const struct qwen3_gen_config *g = &c->gen;
    printf("generation  ");
    if (!c->has_gen) {
        printf("none (no generation_config.json)\n");
        return;
    }
    if (g->do_sample)
        printf("sampling temperature %g, top-k %u, top-p %g, min-p %g, repetition penalty %g", g->temperature,
               g->top_k, g->top_p, g->min_p, g->repetition_penalty);
    else
        printf("greedy (do_sample false)");
    for (unsigned i = 0; i < g->n_eos; i++)
        printf("%s%d", i ? ", " : "; eos ", g->eos[i]);
    printf("\n");
}

static void print_text(const struct qpk_file *f, const struct carried *carried, const cJSON *prov)
{
    const struct qpk_config *c = &f->cfg;
    uint64_t params = 0, tensor_bytes = 0;
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        params += (uint64_t)f->tensors[i].rows * f->tensors[i].cols;
        tensor_bytes += f->tensors[i].nbytes;
    }
    char size[32], data[32];
    show_size(size, sizeof size, (double)f->size);
    show_size(data, sizeof data, (double)tensor_bytes);
    printf("file        ");
    show_text(stdout, f->path, 0);
    printf(": %s, container format %u.%u\n", size, f->version_major, f->version_minor);
    printf("model       Qwen3, %u layers, hidden %u, MLP %u, %u query / %u KV heads of %u, vocab %u\n",
           c->n_layers, c->hidden, c->intermediate, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab);
    char bos[16] = "none", eos[16] = "none";
    if (c->bos_id >= 0)
        snprintf(bos, sizeof bos, "%d", c->bos_id);
    if (c->eos_id >= 0)
        snprintf(eos, sizeof eos, "%d", c->eos_id);
    printf("            rope theta %g, rms eps %g, max positions %u, %s embeddings, bos %s, eos %s\n",
           c->rope_theta, c->rms_eps, c->max_positions, c->flags & QPK_CONFIG_TIED ? "tied" : "untied", bos, eos);
    printf("weights     %.1fM in %u tensors, %s, %.2f bits per weight\n", (double)params / 1e6, f->n_tensors, data,
           8.0 * (double)tensor_bytes / (double)params);
    print_encodings(f);
    print_generation(carried);
    printf("pooling     %s\n", carried->pooling == QP_POOLING_LAST   ? "last token (an embedding model)"
                               : carried->pooling == QP_POOLING_MEAN ? "mean of the tokens (an embedding model)"
                                                                     : "none (a generator)");
    if (carried->task == QP_TASK_RERANK)
        printf("task        rerank (a reranker: P(\"yes\") after Qwen3-Reranker's prompt)\n");
    if (prov) {
        printf("packed by   ");
        show_text(stdout, string_of(prov, "packer"), 0);
        printf(" from ");
        show_text(stdout, string_of(prov, "source"), 0);
        printf(", format ");
        show_text(stdout, string_of(prov, "format"), 0);
        printf("\n");
    }
    const cJSON *src;
    cJSON_ArrayForEach(src, cJSON_GetObjectItemCaseSensitive(prov, "source_files")) {
        printf("source      ");
        show_text(stdout, string_of(src, "name"), 40);
        printf(" %14.0f bytes  xxh3 ", number_of(src, "size"));
        show_text(stdout, string_of(src, "xxh3"), 0);
        printf("\n");
    }
    printf("\nsection              codec  offset        stored       decoded      xxh3\n");
    for (uint32_t i = 0; i < f->n_sections; i++) {
        const struct qpk_section *s = &f->sections[i];
        printf("%-20s %-6s %-13" PRIu64 " %-12" PRIu64 " %-12" PRIu64 " %016" PRIx64 "\n", qpk_section_name(s->kind),
               s->codec == QPK_CODEC_ZSTD ? "zstd" : "raw", s->offset, s->stored_size, s->raw_size, s->xxh3);
    }
    printf("\n%-48s %-10s %-5s %-5s %-5s %-14s %-6s %-12s %-11s %-16s %-10s %s\n", "tensor", "role", "layer",
           "enc", "group", "shape", "stride", "offset", "bytes", "xxh3", "max err", "rms err");
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        char shape[32], layer[8] = "-", group[12] = "-";
        snprintf(shape, sizeof shape, "%ux%u", t->rows, t->cols);
        if (t->layer != QPK_NO_LAYER)
            snprintf(layer, sizeof layer, "%u", t->layer);
        if (t->group_size)
            snprintf(group, sizeof group, "%u", t->group_size);
        const cJSON *p = provenance_of(prov, t->name);
        show_text(stdout, t->name, 48);
        printf(" %-10s %-5s %-5s %-5s %-14s %-6" PRIu64 " %-12" PRIu64 " %-11" PRIu64 " %016" PRIx64
               " %-10.3g %.3g\n",
               qpk_role_name(t->role), layer, qpk_encoding_name(t->encoding), group, shape, t->row_stride,
               t->offset, t->nbytes, t->xxh3, p ? number_of(p, "max_error") : -1,
               p ? number_of(p, "rms_error") : -1);
    }
}

/* The generation_config, pooling and task sections read as the runtime reads
 * them; a section that does not parse is reported (qpack verify says the
 * same) and shown as absent. */
static void read_carried(const struct qpk_file *f, struct carried *c)
{
    *c = (struct carried){0};
    char *text = NULL;
    size_t len;
    qp_err err = {{0}};
    if (qpk_read_section(f, QPK_SEC_GENERATION_CONFIG, &text, &len, &err))
        report(err.msg);
    else if (text && gen_config_parse(text, len, "generation_config", f->cfg.vocab, &c->gen, &err))
        report(err.msg);
    else
        c->has_gen = text != NULL;
    free(text);
    text = NULL;
    if (qpk_read_section(f, QPK_SEC_POOLING, &text, &len, &err))
        report(err.msg);
    else if (text && pooling_parse(text, len, "pooling", f->cfg.hidden, &c->pooling, &err))
        report(err.msg), c->pooling = QP_POOLING_NONE;
    free(text);
    text = NULL;
    if (qpk_read_section(f, QPK_SEC_TASK, &text, &len, &err))
        report(err.msg);
    else if (text && task_parse(text, len, "task", &c->task, &err))
        report(err.msg);
    free(text);
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: qpack info FILE [--json]\n");
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "qpack info: unexpected argument '%s' (usage: qpack info FILE [--json])\n", argv[i]);
            return 2;
        } else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: qpack info FILE [--json]\n");
        return 2;
    }
    struct qpk_file f;
    if (open_or_report(&f, path, 0))
        return 1;
    qp_err err = {{0}};
    char *text = NULL;
    size_t len;
    cJSON *prov = NULL;
    if (qpk_read_section(&f, QPK_SEC_PROVENANCE, &text, &len, &err)) {
        report(err.msg);
        qpk_close(&f);
        return 1;
    }
    if (text && !(prov = cJSON_ParseWithLength(text, len))) {
        fputs("qpack: warning: ", stderr);
        show_text(stderr, path, 0);
        fputs(": provenance is not valid JSON\n", stderr);
    }
    struct carried carried;
    read_carried(&f, &carried);
    int rc = 0;
    if (json)
        rc = print_json(&f, &carried, prov);
    else
        print_text(&f, &carried, prov);
    cJSON_Delete(prov);
    free(text);
    qpk_close(&f);
    return rc;
}

int cmd_verify(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: qpack verify FILE\n");
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: qpack verify FILE\n");
        return 2;
    }
    struct qpk_file f;
    if (open_or_report(&f, argv[1], QPK_VERIFY))
        return 1;
    qp_err err = {{0}};
    if (verify_sections(&f, &err)) {
        report(err.msg);
        qpk_close(&f);
        return 1;
    }
    char size[32];
    show_size(size, sizeof size, (double)f.size);
    printf("%s: ok (%u sections decoded and read, %u tensors, %s verified)\n", argv[1], f.n_sections, f.n_tensors,
           size);
    qpk_close(&f);
    return 0;
}
