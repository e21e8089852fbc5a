/* qeval_report.c - qeval's results as a table, one JSON object, or CSV.
 * Sizes in SI units (1 MB = 10^6 bytes), as every qpack tool prints them. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stdout_policy.h"
#include "qeval.h"

static void fmt_bytes(char *out, size_t n, double b)
{
    if (b < 1e3)
        snprintf(out, n, "%.0f B", b);
    else if (b < 1e6)
        snprintf(out, n, "%.1f kB", b / 1e3);
    else if (b < 1e9)
        snprintf(out, n, "%.1f MB", b / 1e6);
    else
        snprintf(out, n, "%.2f GB", b / 1e9);
}

static double per(double a, uint64_t n) { return n ? a / (double)n : 0; }

static bool timed(const struct result *r) { return !r->cached; }

#define N_ROWS 24
#define CELL 48

struct table {
    const char *rows[N_ROWS];
    char (*cell)[N_ROWS][CELL];     /* [column][row] */
    int n_rows, cols;
};

/* a row whose cells come from fill(result, column, cell) */
static void add_row(struct table *t, const struct ctx *x, const char *label,
                    void (*fill)(const struct ctx *, const struct result *, int, char *))
{
    t->rows[t->n_rows] = label;
    for (int c = 0; c < t->cols; c++)
        fill(x, &x->res[c], c, t->cell[c][t->n_rows]);
    t->n_rows++;
}

#define CELL_FN(name, body)                                                                                         \
    static void name(const struct ctx *x, const struct result *r, int c, char *out)                                \
    {                                                                                                               \
        (void)x;                                                                                                    \
        (void)c;                                                                                                    \
        body;                                                                                                       \
    }
/* a cell of the models only: the reference's is "-" */
#define MODEL_CELL_FN(name, body) CELL_FN(name, if (c == 0) { snprintf(out, CELL, "-"); return; } body)
/* a measured cell: "cached" for a reference from --ref-cache */
#define TIMED_CELL_FN(name, body) CELL_FN(name, if (!timed(r)) { snprintf(out, CELL, "cached"); return; } body)
/* a cell of what runs: a logits file's is "-" */
#define RUN_CELL_FN(name, body) CELL_FN(name, if (r->logits_file) { snprintf(out, CELL, "-"); return; } body)
#define RUN_TIMED_CELL_FN(name, body) RUN_CELL_FN(name, if (!timed(r)) { snprintf(out, CELL, "cached"); return; } body)
#define RUN_MODEL_CELL_FN(name, body) RUN_CELL_FN(name, if (c == 0) { snprintf(out, CELL, "-"); return; } body)

CELL_FN(c_backend, snprintf(out, CELL, "%s", r->backend))
RUN_CELL_FN(c_file, fmt_bytes(out, CELL, (double)r->info.file_bytes))
CELL_FN(c_maps, if (strcmp(r->backend, "bpf")) snprintf(out, CELL, "-"); else fmt_bytes(out, CELL, (double)r->map_bytes))
RUN_CELL_FN(c_bits, snprintf(out, CELL, "%.2f", r->info.bits_per_weight))
RUN_CELL_FN(c_kv, char b[24]; fmt_bytes(b, sizeof b, (double)r->info.kv_bytes_per_position);
        snprintf(out, CELL, "%s %s", r->info.kv_cache ? r->info.kv_cache : "?", b))
RUN_TIMED_CELL_FN(c_rss, fmt_bytes(out, CELL, (double)r->peak_rss))
RUN_TIMED_CELL_FN(c_load, snprintf(out, CELL, "%.1f", r->load_ms))
RUN_TIMED_CELL_FN(c_prompt_ms, snprintf(out, CELL, "%.3f", per(r->prompt_ms, r->prompt_tokens)))
RUN_TIMED_CELL_FN(c_decode_ms, snprintf(out, CELL, "%.3f", per(r->decode_ms, r->decode_steps)))
RUN_MODEL_CELL_FN(c_calls, snprintf(out, CELL, "%.1f", per((double)r->prompt_calls, r->prompt_tokens)))
CELL_FN(c_positions, snprintf(out, CELL, "%" PRIu64, r->prompt_tokens))
MODEL_CELL_FN(c_max_err, snprintf(out, CELL, "%.3g", r->acc.max_err))
MODEL_CELL_FN(c_rms, snprintf(out, CELL, "%.3g", qe_acc_rms(&r->acc)))
MODEL_CELL_FN(c_mae, snprintf(out, CELL, "%.3g", qe_acc_mae(&r->acc)))
MODEL_CELL_FN(c_kl_mean, snprintf(out, CELL, "%.3g", qe_acc_kl_mean(&r->acc)))
MODEL_CELL_FN(c_kl_max, snprintf(out, CELL, "%.3g", r->acc.max_kl))
MODEL_CELL_FN(c_top1, snprintf(out, CELL, "%" PRIu64 "/%" PRIu64 " (%.2f%%)", r->acc.top1, r->acc.positions,
                               qe_acc_top1_pct(&r->acc)))
MODEL_CELL_FN(c_top5, snprintf(out, CELL, "%.4f", qe_acc_top5(&r->acc)))
RUN_MODEL_CELL_FN(c_greedy, snprintf(out, CELL, "%.2f of %u", per((double)r->greedy_prefix_sum, r->greedy_prompts),
                                 x->prompts[0].gen))
/* the reference's spread is measured beside the first container's */
static double logit_sd(const struct ctx *x, const struct result *r, bool is_ref)
{
    return is_ref ? (x->o->n_models ? qe_acc_ref_sd(&x->res[1].acc) : 0) : qe_acc_sd(&r->acc);
}
CELL_FN(c_sd, snprintf(out, CELL, "%.3g", logit_sd(x, r, c == 0)))
MODEL_CELL_FN(c_rel_err, snprintf(out, CELL, "%.3g", qe_acc_rel_rms(&r->acc)))
CELL_FN(c_nll, snprintf(out, CELL, "%.4f", per(r->text_nll_sum, r->text_tokens)))
CELL_FN(c_ppl, snprintf(out, CELL, "%.4g", exp(per(r->text_nll_sum, r->text_tokens))))

static void fill_table(struct table *t, const struct ctx *x)
{
    add_row(t, x, "backend", c_backend);
    add_row(t, x, "file size", c_file);
    add_row(t, x, "bytes in BPF maps", c_maps);
    add_row(t, x, "bits per weight", c_bits);
    add_row(t, x, "KV cache per position", c_kv);
    add_row(t, x, "peak RSS", c_rss);
    add_row(t, x, "start-up ms", c_load);
    add_row(t, x, "prompt ms/token", c_prompt_ms);
    add_row(t, x, "decode ms/token", c_decode_ms);
    add_row(t, x, "kernel calls/token", c_calls);
    add_row(t, x, "positions compared", c_positions);
    add_row(t, x, "logit max abs error", c_max_err);
    add_row(t, x, "logit mean abs error", c_mae);
    add_row(t, x, "logit RMS error", c_rms);
    add_row(t, x, "logit SD (spread)", c_sd);
    add_row(t, x, "RMS error / ref SD", c_rel_err);
    add_row(t, x, "KL(ref||model) mean", c_kl_mean);
    add_row(t, x, "KL(ref||model) max", c_kl_max);
    add_row(t, x, "top-1 agreement", c_top1);
    add_row(t, x, "top-5 overlap", c_top5);
    add_row(t, x, "greedy common prefix", c_greedy);
    if (x->n_text) {
        add_row(t, x, "text NLL/token", c_nll);
        add_row(t, x, "text perplexity", c_ppl);
    }
}

static void print_trace(const struct ctx *x)
{
    int cols = x->o->n_models + 1, tw = 21;
    for (int c = 1; c < cols; c++)
        if ((int)strlen(x->res[c].label) > tw)
            tw = (int)strlen(x->res[c].label);
    printf("\nhidden-state error after each layer (max abs / RMS), last prompt's %u positions\n\n%-6s",
           x->prompts[x->n_prompts - 1].n, "layer");
    for (int c = 1; c < cols; c++)
        printf("  %*s", tw, x->res[c].label);
    printf("\n");
    for (uint32_t l = 0; l < x->cfg->n_layers; l++) {
        printf("%-6u", l);
        for (int c = 1; c < cols; c++) {
            const struct result *r = &x->res[c];
            char b[64];
            snprintf(b, sizeof b, "%.3g / %.3g", r->trace_max[l], sqrt(per(r->trace_sq[l], r->trace_n)));
            printf("  %*s", tw, b);
        }
        printf("\n");
    }
}

int qe_print_table(const struct ctx *x)
{
    struct table t = {.cols = x->o->n_models + 1};
    t.cell = calloc((size_t)t.cols, sizeof *t.cell);
    int *w = calloc((size_t)t.cols, sizeof *w);
    if (!t.cell || !w) {
        free(t.cell);
        free(w);
        fprintf(stderr, "qeval: out of memory\n");
        return 1;
    }
    fill_table(&t, x);
    int w0 = 6;
    for (int i = 0; i < t.n_rows; i++)
        if ((int)strlen(t.rows[i]) > w0)
            w0 = (int)strlen(t.rows[i]);
    for (int c = 0; c < t.cols; c++) {
        w[c] = (int)strlen(x->res[c].label);
        for (int i = 0; i < t.n_rows; i++)
            if ((int)strlen(t.cell[c][i]) > w[c])
                w[c] = (int)strlen(t.cell[c][i]);
    }
    const char *prompts = x->o->prompts_file ? x->o->prompts_file : x->o->prompt_ids_file;
    if (prompts)
        printf("%u prompts from %s, %" PRIu64 " positions", x->n_prompts, prompts, x->res[0].prompt_tokens);
    else
        printf("%u random prompts x %u positions (seed %" PRIu64 ")", x->n_prompts, x->o->positions, x->o->seed);
    if (x->n_text)
        printf("; text %s: %" PRIu64 " tokens scored in %u window%s of %u positions (of %u tokens)", x->o->text_file,
               x->res[0].text_tokens, x->n_text_windows, x->n_text_windows == 1 ? "" : "s", x->text_window,
               x->n_text_file);
    if (x->res[0].cached)
        printf("; the reference's results from %s", x->o->ref_cache);
    printf("\n\n%-*s", w0, "metric");
    for (int c = 0; c < t.cols; c++)
        printf("  %*s", w[c], x->res[c].label);
    printf("\n");
    for (int i = 0; i < t.n_rows; i++) {
        printf("%-*s", w0, t.rows[i]);
        for (int c = 0; c < t.cols; c++)
            printf("  %*s", w[c], t.cell[c][i]);
        printf("\n");
    }
    if (x->o->trace)
        print_trace(x);
    free(w);
    free(t.cell);
    return 0;
}

/* ---- JSON and CSV: the same keys ----------------------------------------------------- */

static void add_accuracy(const struct result *r, cJSON *j)
{
    cJSON_AddNumberToObject(j, "logit_max_abs_err", r->acc.max_err);
    cJSON_AddNumberToObject(j, "logit_mae", qe_acc_mae(&r->acc));
    cJSON_AddNumberToObject(j, "logit_rms_err", qe_acc_rms(&r->acc));
    cJSON_AddNumberToObject(j, "kl_mean", qe_acc_kl_mean(&r->acc));
    cJSON_AddNumberToObject(j, "kl_max", r->acc.max_kl);
    cJSON_AddNumberToObject(j, "top1_agree", (double)r->acc.top1);
    cJSON_AddNumberToObject(j, "top1_percent", qe_acc_top1_pct(&r->acc));
    cJSON_AddNumberToObject(j, "top5_overlap", qe_acc_top5(&r->acc));
}

/* logits:FILE: what its logits tell, no sizes, timings or continuation */
static cJSON *logits_file_json(const struct result *r, cJSON *j)
{
    cJSON_AddNumberToObject(j, "positions", (double)r->prompt_tokens);
    add_accuracy(r, j);
    cJSON_AddNumberToObject(j, "logit_sd", qe_acc_sd(&r->acc));
    cJSON_AddNumberToObject(j, "rms_err_per_ref_sd", qe_acc_rel_rms(&r->acc));
    return j;
}

/* One model's numbers as a JSON object (also the CSV's columns). */
static cJSON *result_json(const struct ctx *x, const struct result *r, bool is_ref)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "path", r->path);
    cJSON_AddStringToObject(j, "backend", r->backend);
    if (r->logits_file)
        return logits_file_json(r, j);
    cJSON_AddNumberToObject(j, "file_bytes", (double)r->info.file_bytes);
    if (!is_ref)
        cJSON_AddNumberToObject(j, "map_bytes", (double)r->map_bytes);
    cJSON_AddNumberToObject(j, "bits_per_weight", r->info.bits_per_weight);
    cJSON_AddStringToObject(j, "kv_cache", r->info.kv_cache ? r->info.kv_cache : "");
    cJSON_AddNumberToObject(j, "kv_bytes_per_pos", (double)r->info.kv_bytes_per_position);
    if (is_ref)
        cJSON_AddBoolToObject(j, "cached", r->cached);
    if (!r->cached) {
        cJSON_AddNumberToObject(j, "peak_rss_bytes", (double)r->peak_rss);
        cJSON_AddNumberToObject(j, "load_ms", r->load_ms);
        cJSON_AddNumberToObject(j, "prompt_ms_per_token", per(r->prompt_ms, r->prompt_tokens));
        cJSON_AddNumberToObject(j, "decode_ms_per_token", per(r->decode_ms, r->decode_steps));
    }
    if (!is_ref)
        cJSON_AddNumberToObject(j, "calls_per_token", per((double)r->prompt_calls, r->prompt_tokens));
    cJSON_AddNumberToObject(j, "positions", (double)r->prompt_tokens);
    if (!is_ref) {
        add_accuracy(r, j);
        cJSON_AddNumberToObject(j, "greedy_prefix_mean", per((double)r->greedy_prefix_sum, r->greedy_prompts));
    }
    cJSON_AddNumberToObject(j, "logit_sd", logit_sd(x, r, is_ref));
    if (!is_ref)
        cJSON_AddNumberToObject(j, "rms_err_per_ref_sd", qe_acc_rel_rms(&r->acc));
    if (x->n_text) {
        double nll = per(r->text_nll_sum, r->text_tokens);
        cJSON_AddNumberToObject(j, "text_tokens", (double)r->text_tokens);
        cJSON_AddNumberToObject(j, "text_nll", nll);
        cJSON_AddNumberToObject(j, "text_ppl", exp(nll));
    }
    return j;
}

static void add_trace(const struct ctx *x, const struct result *r, cJSON *j)
{
    cJSON *t = cJSON_AddArrayToObject(j, "trace_layers");
    for (uint32_t l = 0; l < x->cfg->n_layers; l++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "layer", l);
        cJSON_AddNumberToObject(e, "max_abs_err", r->trace_max[l]);
        cJSON_AddNumberToObject(e, "rms_err", sqrt(per(r->trace_sq[l], r->trace_n)));
        cJSON_AddItemToArray(t, e);
    }
}

static int put_string(char *s)
{
    if (!s) {
        fprintf(stderr, "qeval: out of memory\n");
        return 1;
    }
    qp_stdout_write(s, strlen(s));
    free(s);
    return 0;
}

int qe_print_json(const struct ctx *x)
{
    cJSON *j = cJSON_CreateObject();
    const char *prompts = x->o->prompts_file ? x->o->prompts_file : x->o->prompt_ids_file;
    cJSON_AddStringToObject(j, "prompts_source", prompts ? prompts : "random");
    cJSON_AddNumberToObject(j, "prompts", x->n_prompts);
    if (!prompts)
        cJSON_AddNumberToObject(j, "seed", (double)x->o->seed);
    cJSON_AddNumberToObject(j, "positions", (double)x->res[0].prompt_tokens);
    cJSON_AddNumberToObject(j, "greedy_tokens", x->prompts[0].gen);
    if (x->n_text) {
        cJSON_AddStringToObject(j, "text", x->o->text_file);
        cJSON_AddNumberToObject(j, "text_file_tokens", x->n_text_file);
        cJSON_AddNumberToObject(j, "text_windows", x->n_text_windows);
        cJSON_AddNumberToObject(j, "text_window_positions", x->text_window);
    }
    cJSON_AddItemToObject(j, "reference", result_json(x, &x->res[0], true));
    cJSON *m = cJSON_AddArrayToObject(j, "models");
    for (int i = 1; i <= x->o->n_models; i++) {
        cJSON *r = result_json(x, &x->res[i], false);
        if (x->o->trace)
            add_trace(x, &x->res[i], r);
        cJSON_AddItemToArray(m, r);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = put_string(s);
    putchar('\n');
    return rc;
}

/* a CSV field: quoted when it holds a comma, a quote or a line break */
static void csv_field(const char *s, bool first)
{
    if (!first)
        putchar(',');
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

/* The keys of every model's JSON object (the reference lacks some of the
 * models', and cached results lack the timings: their cells are empty). */
int qe_print_csv(const struct ctx *x)
{
    cJSON *rows = cJSON_CreateArray(), *keys = cJSON_CreateArray();
    cJSON_AddItemToArray(rows, result_json(x, &x->res[0], true));
    for (int i = 1; i <= x->o->n_models; i++)
        cJSON_AddItemToArray(rows, result_json(x, &x->res[i], false));
    /* the columns: the models' keys in order, then the reference's own */
    const cJSON *row, *item;
    for (int pass = 0; pass < 2; pass++) {
        int at = 0;
        cJSON_ArrayForEach(row, rows) {
            if ((at++ == 0) != (pass == 1))
                continue;
            cJSON_ArrayForEach(item, row) {
                bool known = false;
                const cJSON *k;
                cJSON_ArrayForEach(k, keys) known |= !strcmp(k->valuestring, item->string);
                if (!known)
                    cJSON_AddItemToArray(keys, cJSON_CreateString(item->string));
            }
        }
    }
    const cJSON *k;
    csv_field("model", true);
    cJSON_ArrayForEach(k, keys) csv_field(k->valuestring, false);
    putchar('\n');
    int c = 0;
    cJSON_ArrayForEach(row, rows) {
        csv_field(x->res[c++].label, true);
        cJSON_ArrayForEach(k, keys) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, k->valuestring);
            char num[64] = "";
            if (cJSON_IsString(v))
                csv_field(v->valuestring, false);
            else if (cJSON_IsBool(v))
                csv_field(cJSON_IsTrue(v) ? "true" : "false", false);
            else {
                if (cJSON_IsNumber(v))
                    snprintf(num, sizeof num, "%.10g", v->valuedouble);
                csv_field(num, false);
            }
        }
        putchar('\n');
    }
    cJSON_Delete(rows);
    cJSON_Delete(keys);
    return 0;
}
