/* bench_tokenizer.c - tokenizer load time and encode throughput.
 *
 *   qptok-bench load TOKENIZER.json          one load, prints milliseconds
 *   qptok-bench encode TOKENIZER.json [MB] [RUNS] [--dump FILE]
 *
 * encode generates MB megabytes (default 4) of mixed text from a fixed seed
 * (English prose and code, identifiers, numbers, whitespace runs, Chinese,
 * Japanese, Russian, emoji), then encodes all of it in one call, RUNS times
 * (default 5): "cold" runs use a fresh tokenizer each (empty word cache),
 * "warm" runs reuse one. Prints the median and the spread. scripts/
 * bench_tokenizer.sh runs load in fresh processes, as qrun would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer.h"
#include "clock.h"

static uint32_t rng_state = 0x2545F491;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state % n;
}

static const char *const english[] = {
    "the", "of", "and", "to", "in", "is", "was", "that", "for", "on", "with", "as", "by", "at",
    "from", "they", "we", "you", "it", "this", "which", "be", "are", "or", "not", "have", "one",
    "were", "there", "when", "what", "their", "more", "about", "into", "some", "can", "time",
    "could", "other", "than", "only", "like", "over", "also", "after", "first", "very", "just",
    "where", "most", "made", "through", "years", "people", "because", "between", "tokenizer",
    "international", "performance", "Hello", "World", "Qwen", "don't", "we'll", "It's", "I'M",
};
static const char *const code[] = {
    "int main(void) {\n", "    return 0;\n}\n", "for (i = 0; i < n; i++)", "x->next = NULL;",
    "def forward(self, x):\n", "        return self.w @ x\n", "if (a != b && c <= 0x7F) {",
    "{\"key\": [1, 2, 3], \"ok\": true}", "#include <stdio.h>\n", "\t\tbreak;\n", "// TODO: fix\n",
};
static const char *const cyrillic[] = {"привет", "мир", "данные", "быстро", "токенизатор", "и", "в"};
static const char *const emoji[] = {"😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "❤️", "🚀"};

static void put(qp_tok_text *t, const char *s)
{
    if (qp_tok_text_appends(t, s)) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

static void put_cp(qp_tok_text *t, uint32_t cp)
{
    if (qp_utf8_append_cp(t, cp)) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

/* Deterministic mixed text of about `bytes` bytes. */
static void make_text(qp_tok_text *t, size_t bytes)
{
    char buf[32];
    while (t->len < bytes) {
        uint32_t kind = rnd(100);
        if (kind < 50) { /* an English sentence */
            int n = 4 + (int)rnd(20);
            for (int i = 0; i < n; i++) {
                put(t, i ? " " : "");
                put(t, english[rnd(sizeof(english) / sizeof(*english))]);
            }
            put(t, rnd(4) ? ". " : ".\n\n");
        } else if (kind < 62) {
            put(t, code[rnd(sizeof(code) / sizeof(*code))]);
        } else if (kind < 67) { /* identifiers and numbers */
            snprintf(buf, sizeof(buf), " var_%u = %u;", rnd(100000), rnd(1000000000));
            put(t, buf);
        } else if (kind < 70) {
            put(t, "    \t  \n");
        } else if (kind < 80) { /* Chinese */
            for (int i = 0, n = 5 + (int)rnd(30); i < n; i++)
                put_cp(t, 0x4E00 + rnd(0x5000));
            put(t, "。");
        } else if (kind < 85) { /* Japanese kana */
            for (int i = 0, n = 5 + (int)rnd(20); i < n; i++)
                put_cp(t, rnd(2) ? 0x3041 + rnd(0x56) : 0x30A1 + rnd(0x5A));
            put(t, "、");
        } else if (kind < 95) {
            for (int i = 0, n = 3 + (int)rnd(10); i < n; i++) {
                put(t, " ");
                put(t, cyrillic[rnd(sizeof(cyrillic) / sizeof(*cyrillic))]);
            }
        } else {
            put(t, emoji[rnd(sizeof(emoji) / sizeof(*emoji))]);
        }
    }
}

static qp_tok *load(const char *path)
{
    qp_tok *tok;
    qp_err err = {{0}};
    if (qp_tok_load_file(&tok, path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return tok;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Encodes text once; returns milliseconds, *n_ids the token count. */
static double encode_once(qp_tok *tok, const qp_tok_text *text, size_t *n_ids)
{
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    double t0 = qp_now_ms();
    if (qp_tok_encode(tok, text->s, text->len, &ids, &err)) {
        fprintf(stderr, "encode: %s\n", err.msg);
        exit(1);
    }
    double ms = qp_now_ms() - t0;
    *n_ids = ids.len;
    qp_tok_ids_free(&ids);
    return ms;
}

static int bench_encode(const char *path, double mb, int runs, const char *dump)
{
    qp_tok_text text = {0};
    make_text(&text, (size_t)(mb * 1e6));
    if (dump) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(text.s, 1, text.len, f) != text.len || fclose(f)) {
            fprintf(stderr, "%s: cannot write\n", dump);
            return 1;
        }
    }
    double cold[64], warm[64];
    size_t n_ids = 0;
    if (runs > 64)
        runs = 64;
    for (int r = 0; r < runs; r++) {
        qp_tok *tok = load(path);
        cold[r] = encode_once(tok, &text, &n_ids);
        qp_tok_free(tok);
    }
    qp_tok *tok = load(path);
    encode_once(tok, &text, &n_ids); /* fill the word cache */
    for (int r = 0; r < runs; r++)
        warm[r] = encode_once(tok, &text, &n_ids);
    qp_tok_free(tok);
    double mbytes = (double)text.len / 1e6;
    double c = median(cold, runs), w = median(warm, runs);
    printf("text: %.2f MB, %zu tokens (%.2f bytes/token)\n", mbytes, n_ids, (double)text.len / (double)n_ids);
    printf("encode cold: median %.1f ms = %.1f MB/s (runs %d, min %.1f, max %.1f ms)\n", c,
           mbytes / (c / 1e3), runs, cold[0], cold[runs - 1]);
    printf("encode warm: median %.1f ms = %.1f MB/s (runs %d, min %.1f, max %.1f ms)\n", w,
           mbytes / (w / 1e3), runs, warm[0], warm[runs - 1]);
    qp_tok_text_free(&text);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "load") == 0) {
        double t0 = qp_now_ms();
        qp_tok *tok = load(argv[2]);
        printf("%.2f\n", qp_now_ms() - t0);
        qp_tok_free(tok);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "encode") == 0) {
        const char *dump = NULL;
        double mb = 4;
        int runs = 5, pos = 0;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
                dump = argv[++i];
            else if (pos++ == 0)
                mb = atof(argv[i]);
            else
                runs = atoi(argv[i]);
        }
        if (mb <= 0 || runs <= 0) {
            fprintf(stderr, "bad MB or RUNS\n");
            return 2;
        }
        return bench_encode(argv[2], mb, runs, dump);
    }
    fprintf(stderr, "usage: %s load TOKENIZER.json\n"
                    "       %s encode TOKENIZER.json [MB] [RUNS] [--dump FILE]\n", argv[0], argv[0]);
    return 2;
}
