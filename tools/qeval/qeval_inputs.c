/* qeval_inputs.c - what qeval scores: the prompts (--prompts text
 * tokenized, --prompt-ids, or seeded random ids), the text of --text cut
 * into windows, and the context they need. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "qeval.h"

static int load_tokenizer(struct ctx *x, qpack_tokenizer **tok)
{
    qpack_error err;
    if (qpack_tokenizer_load_model(tok, x->o->ref_dir, QPACK_BACKEND_REF, &err))
        return qe_die("%s", err.message);
    for (int i = 0; !*tok && i < x->o->n_models; i++)
        if (qpack_tokenizer_load_model(tok, x->o->models[i], QPACK_BACKEND_EMU, &err))
            return qe_die("%s", err.message);
    if (*tok)
        return 0;
    return qe_die("no tokenizer for --prompts/--text: %s has no tokenizer.json and no container carries one",
               x->o->ref_dir);
}

/* Token ids of text, each checked against the vocabulary. */
static int encode(struct ctx *x, const qpack_tokenizer *tok, const char *what, const char *text, size_t len,
                  int32_t **out, uint32_t *n)
{
    qpack_error err;
    size_t count;
    if (qpack_tokenize(tok, text, len, out, &count, &err))
        return qe_die("%s: %s", what, err.message);
    for (size_t i = 0; i < count; i++)
        if ((uint32_t)(*out)[i] >= x->cfg->vocab) {
            int rc = qe_die("%s: token id %d is outside the model's vocabulary (%u)", what, (*out)[i], x->cfg->vocab);
            free(*out);
            *out = NULL;
            return rc;
        }
    *n = (uint32_t)count;
    return 0;
}

/* --prompts: a line's text, tokenized */
static int encode_line(struct ctx *x, const qpack_tokenizer *tok, const char *what, char *p, size_t n, struct seq *s)
{
    return encode(x, tok, what, p, n, &s->ids, &s->n);
}

/* --prompt-ids: a line's ids (blank-separated decimal numbers, each in
 * the vocabulary) into s */
static int parse_id_line(struct ctx *x, const char *what, char *p, size_t n, struct seq *s)
{
    s->ids = malloc((n / 2 + 1) * sizeof *s->ids);
    if (!s->ids)
        return qe_die("out of memory");
    p[n] = '\0';
    for (char *tok = strtok(p, " \t\r"); tok; tok = strtok(NULL, " \t\r")) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(tok, &end, 10);
        if (*end || errno || tok[0] == '-' || v >= x->cfg->vocab)
            return qe_die("%s: '%s' is not a token id of the model's vocabulary (0 to %u)", what, tok,
                       x->cfg->vocab - 1);
        s->ids[s->n++] = (int32_t)v;
    }
    return 0;
}

static int id_line(struct ctx *x, const qpack_tokenizer *tok, const char *what, char *p, size_t n, struct seq *s)
{
    (void)tok;
    return parse_id_line(x, what, p, n, s);
}

typedef int line_parser(struct ctx *x, const qpack_tokenizer *tok, const char *what, char *p, size_t n,
                        struct seq *s);

/* One prompt per line of file (a trailing CR dropped; a line that gives
 * no ids skipped), each made by parse; none at all is an error that
 * names what a line should hold. */
static int read_prompt_lines(struct ctx *x, const char *file, const qpack_tokenizer *tok, line_parser *parse,
                             const char *a_line)
{
    char *buf;
    size_t len;
    if (qe_read_all(file, &buf, &len))
        return -1;
    uint32_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += buf[i] == '\n';
    x->prompts = calloc(lines, sizeof *x->prompts);
    char *p = buf, *end = buf + len;
    uint32_t line_no = 0;
    int rc = x->prompts ? 0 : qe_die("out of memory");
    while (!rc && p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line_no++;
        if (n && p[n - 1] == '\r')
            n--;
        if (n) {
            char what[4200];
            snprintf(what, sizeof what, "%s line %u", file, line_no);
            struct seq *s = &x->prompts[x->n_prompts];
            rc = parse(x, tok, what, p, n, s);
            if (!rc && s->n)
                x->n_prompts++;
            else {
                free(s->ids);
                *s = (struct seq){0};
            }
        }
        p = nl ? nl + 1 : end;
    }
    free(buf);
    if (!rc && !x->n_prompts)
        rc = qe_die("%s: no prompts (one prompt per line%s)", file, a_line);
    return rc;
}

/* the sequences of devtools/accuracy.c */
static int random_prompts(struct ctx *x)
{
    x->n_prompts = N_RANDOM_PROMPTS;
    x->prompts = calloc(N_RANDOM_PROMPTS, sizeof *x->prompts);
    if (!x->prompts)
        return qe_die("out of memory");
    uint64_t rng = x->o->seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t p = 0; p < N_RANDOM_PROMPTS; p++) {
        struct seq *s = &x->prompts[p];
        s->n = x->o->positions;
        s->ids = malloc(s->n * sizeof *s->ids);
        if (!s->ids)
            return qe_die("out of memory");
        for (uint32_t i = 0; i < s->n; i++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            s->ids[i] = (int32_t)(rng % x->cfg->vocab);
        }
    }
    return 0;
}

/* The windows of the text scored: --text-windows of the model's positions
 * (TEXT_MAX at most), a last one that would score nothing left out; a
 * note says what is scored of a text that is not scored whole. */
static void cut_text(struct ctx *x)
{
    uint32_t window = x->cfg->max_positions < TEXT_MAX ? x->cfg->max_positions : TEXT_MAX;
    uint32_t n = x->n_text, in_file = n / window + (n % window >= 2);
    uint32_t windows = x->o->text_windows < in_file ? x->o->text_windows : in_file;
    x->n_text_file = n;
    x->text_window = window;
    x->n_text_windows = windows;
    if ((uint64_t)windows * window < n)
        x->n_text = windows * window;
    if (x->n_text == n)
        return;
    progress_clear();
    fprintf(stderr, "qeval: note: %s has %u tokens in %u windows of %u positions; scoring %u tokens of the first %u "
            "(--text-windows N for more)\n", x->o->text_file, n, in_file, window, x->n_text - windows, windows);
}

static int read_text(struct ctx *x, const qpack_tokenizer *tok)
{
    char *buf;
    size_t len;
    if (qe_read_all(x->o->text_file, &buf, &len))
        return -1;
    int rc = encode(x, tok, x->o->text_file, buf, len, &x->text, &x->n_text);
    free(buf);
    if (!rc && x->n_text < 2)
        rc = qe_die("%s: the text has %u token(s); scoring needs at least 2", x->o->text_file, x->n_text);
    if (!rc)
        cut_text(x);
    return rc;
}

int qe_make_inputs(struct ctx *x)
{
    struct options *o = x->o;
    qpack_tokenizer *tok = NULL;
    if ((o->prompts_file || o->text_file) && load_tokenizer(x, &tok))
        return -1;
    int rc = o->prompts_file      ? read_prompt_lines(x, o->prompts_file, tok, encode_line, "")
             : o->prompt_ids_file ? read_prompt_lines(x, o->prompt_ids_file, tok, id_line,
                                                      ", token ids separated by blanks")
                                  : random_prompts(x);
    if (!rc && o->text_file)
        rc = read_text(x, tok);
    qpack_tokenizer_free(tok);
    if (rc)
        return -1;
    /* context: every prompt with its continuation, and the text */
    uint32_t max_pos = x->cfg->max_positions;
    x->ctx = x->n_text < x->text_window ? x->n_text : x->text_window;
    for (uint32_t p = 0; p < x->n_prompts; p++) {
        struct seq *s = &x->prompts[p];
        if (s->n > max_pos)
            return qe_die("prompt %u has %u tokens, past the model's %u positions", p + 1, s->n, max_pos);
        s->gen = max_pos - s->n + 1 < GEN_MAX ? max_pos - s->n + 1 : GEN_MAX;
        uint32_t need = s->n + s->gen - 1;
        if (need > x->ctx)
            x->ctx = need;
    }
    return 0;
}
