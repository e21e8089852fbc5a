/* gguf_tokenizer.c - a GGUF's tokenizer as the tokenizer.json it was
 * converted from (gguf_model.h): llama.cpp's converter writes the
 * vocabulary as one token list with types, the merges as "a b" strings and
 * names the pre-tokenizer; the Hugging Face file spells the same BPE model
 * as a vocab object, merge pairs, added tokens and the pre-tokenizer's
 * regex, which for "qwen2" is this one. */
#include "gguf_model.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's token types */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5,
       TOKEN_BYTE = 6 };

/* the "qwen2" pre-tokenizer: Qwen2's split regex, then byte-level */
static const char qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static cJSON *byte_level(void)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", 0);
    cJSON_AddBoolToObject(b, "trim_offsets", 0);
    cJSON_AddBoolToObject(b, "use_regex", 0);
    return b;
}

static cJSON *pre_tokenizer(void)
{
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray(), *split = cJSON_CreateObject();
    cJSON *pattern = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(pattern, "Regex", qwen2_regex);
    cJSON_AddItemToObject(split, "pattern", pattern);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", 0);
    cJSON_AddItemToArray(list, split);
    cJSON_AddItemToArray(list, byte_level());
    cJSON_AddItemToObject(seq, "pretokenizers", list);
    return seq;
}

static int expect_str(const struct gguf *g, const char *key, const char *want, const char *what, qp_err *err)
{
    const char *s;
    size_t n;
    if (gguf_get_name(g, key, false, &s, &n, err))
        return -1;
    if (n != strlen(want) || memcmp(s, want, n))
        return qp_fail(err, "%s: %s is \"%.*s\"; qpack reads %s \"%s\"", g->name, key, (int)(n > 64 ? 64 : n), s,
                       what, want);
    return 0;
}

/* a NUL-terminated copy of a token that must be valid UTF-8 */
static char *token_text(const struct gguf *g, const char *key, uint64_t i, const char *s, size_t n, qp_err *err)
{
    if (!n || !st_name_valid(s, n)) {
        qp_fail(err, "%s: %s[%" PRIu64 "] is %s", g->name, key, i, n ? "not valid UTF-8 (or holds a NUL)" : "empty");
        return NULL;
    }
    char *t = malloc(n + 1);
    if (!t) {
        qp_fail(err, "out of memory");
        return NULL;
    }
    memcpy(t, s, n);
    t[n] = 0;
    return t;
}

static cJSON *added_token(int64_t id, const char *text, bool special)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", (double)id);
    cJSON_AddStringToObject(a, "content", text);
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", 0);
    cJSON_AddBoolToObject(a, "rstrip", 0);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddBoolToObject(a, "special", special);
    return a;
}

/* a token's text and its row, to find two rows of one text */
struct row {
    const char *s;
    size_t n;
    uint64_t i;
};

static int cmp_row(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    if (c)
        return c;
    return x->n != y->n ? (x->n < y->n ? -1 : 1) : (x->i > y->i) - (x->i < y->i);
}

/* One text, one id: a control token spelled as a normal token would make
 * the text's id ambiguous (Hugging Face's vocabulary cannot hold both). */
static int check_unique_tokens(const struct gguf *g, struct row *rows, uint64_t n, qp_err *err)
{
    qsort(rows, n, sizeof *rows, cmp_row);
    for (uint64_t k = 1; k < n; k++)
        if (rows[k].n == rows[k - 1].n && !memcmp(rows[k].s, rows[k - 1].s, rows[k].n))
            return qp_fail(err, "%s: tokenizer.ggml.tokens[%" PRIu64 "] and [%" PRIu64 "] are both \"%.*s\"",
                           g->name, rows[k - 1].i, rows[k].i, (int)(rows[k].n > 64 ? 64 : rows[k].n), rows[k].s);
    return 0;
}

/* the tokens into the vocab object and the added-token list, each with its
 * row as id (UNUSED rows stay holes) */
static int add_tokens(const struct gguf *g, cJSON *vocab, cJSON *added, qp_err *err)
{
    const struct gguf_kv *tokens, *types;
    if (gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_V_STRING, false, &tokens, err) ||
        gguf_get_array(g, "tokenizer.ggml.token_type", GGUF_V_I32, false, &types, err))
        return -1;
    if (types->count != tokens->count)
        return qp_fail(err, "%s: tokenizer.ggml.token_type has %" PRIu64 " entries for %" PRIu64 " tokens", g->name,
                       types->count, tokens->count);
    if (tokens->count > (1u << 20))
        return qp_fail(err, "%s: %" PRIu64 " tokens (at most 2^20)", g->name, tokens->count);
    struct row *rows = malloc((tokens->count + 1) * sizeof *rows);
    if (!rows)
        return qp_fail(err, "out of memory");
    uint64_t at = 0, used = 0;
    int rc = 0;
    for (uint64_t i = 0; i < tokens->count && !rc; i++) {
        const char *s;
        size_t n;
        gguf_next_str(tokens, &at, &s, &n);
        int64_t type = gguf_array_int(types, i);
        if (type < TOKEN_NORMAL || type > TOKEN_BYTE) {
            rc = qp_fail(err, "%s: tokenizer.ggml.token_type[%" PRIu64 "] is %" PRId64 " (1..6)", g->name, i, type);
            break;
        }
        if (type == TOKEN_UNUSED)
            continue;
        char *text = token_text(g, "tokenizer.ggml.tokens", i, s, n, err);
        if (!text) {
            rc = -1;
            break;
        }
        rows[used++] = (struct row){s, n, i};
        if (type == TOKEN_CONTROL || type == TOKEN_USER_DEFINED)
            cJSON_AddItemToArray(added, added_token((int64_t)i, text, type == TOKEN_CONTROL));
        else
            cJSON_AddNumberToObject(vocab, text, (double)i);
        free(text);
    }
    if (!rc)
        rc = check_unique_tokens(g, rows, used, err);
    free(rows);
    return rc;
}

/* "a b" merges into ["a", "b"] pairs */
static int add_merges(const struct gguf *g, cJSON *merges, qp_err *err)
{
    const struct gguf_kv *kv;
    if (gguf_get_array(g, "tokenizer.ggml.merges", GGUF_V_STRING, false, &kv, err))
        return -1;
    uint64_t at = 0;
    for (uint64_t i = 0; i < kv->count; i++) {
        const char *s;
        size_t n;
        gguf_next_str(kv, &at, &s, &n);
        const char *space = memchr(s, ' ', n);
        if (!space || space == s || space == s + n - 1 || memchr(space + 1, ' ', (size_t)(s + n - space - 1)))
            return qp_fail(err, "%s: tokenizer.ggml.merges[%" PRIu64 "] is not two tokens joined by one space",
                           g->name, i);
        char *text = token_text(g, "tokenizer.ggml.merges", i, s, n, err);
        if (!text)
            return -1;
        text[space - s] = 0;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(text));
        cJSON_AddItemToArray(pair, cJSON_CreateString(text + (space - s) + 1));
        cJSON_AddItemToArray(merges, pair);
        free(text);
    }
    return 0;
}

static cJSON *bpe_model(cJSON *vocab, cJSON *merges)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddNullToObject(m, "dropout");
    cJSON_AddNullToObject(m, "unk_token");
    cJSON_AddStringToObject(m, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(m, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(m, "fuse_unk", 0);
    cJSON_AddBoolToObject(m, "byte_fallback", 0);
    cJSON_AddBoolToObject(m, "ignore_merges", 0);
    cJSON_AddItemToObject(m, "vocab", vocab);
    cJSON_AddItemToObject(m, "merges", merges);
    return m;
}

/* tokenizer.ggml.add_bos_token / add_eos_token: llama.cpp then adds the
 * token to every text; Qwen3's tokenizer.json adds none, and neither does
 * qpack's tokenizer */
static int refuse_added_ends(const struct gguf *g, qp_err *err)
{
    static const char *const keys[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"};
    for (int k = 0; k < 2; k++) {
        bool add = false;
        if (gguf_get_bool(g, keys[k], true, &add, err) < 0)
            return -1;
        if (add)
            return qp_fail(err, "%s: %s is true: qpack's tokenizer adds no token to a text (Qwen3's adds none)",
                           g->name, keys[k]);
    }
    return 0;
}

int gguf_tokenizer_json(const struct gguf *g, char **json, size_t *len, qp_err *err)
{
    *json = NULL;
    if (expect_str(g, "tokenizer.ggml.model", "gpt2", "the byte-level BPE tokenizer", err) ||
        expect_str(g, "tokenizer.ggml.pre", "qwen2", "the pre-tokenizer", err) || refuse_added_ends(g, err))
        return -1;
    cJSON *root = cJSON_CreateObject(), *vocab = cJSON_CreateObject(), *added = cJSON_CreateArray();
    cJSON *merges = cJSON_CreateArray(), *norm = cJSON_CreateObject();
    int rc = add_tokens(g, vocab, added, err) || add_merges(g, merges, err) ? -1 : 0;
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddStringToObject(norm, "type", "NFC");
    cJSON_AddItemToObject(root, "normalizer", norm);
    cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer());
    cJSON_AddItemToObject(root, "post_processor", byte_level());
    cJSON_AddItemToObject(root, "decoder", byte_level());
    cJSON_AddItemToObject(root, "model", bpe_model(vocab, merges));
    if (!rc && !(*json = cJSON_PrintUnformatted(root)))
        rc = qp_fail(err, "out of memory");
    cJSON_Delete(root);
    *len = *json ? strlen(*json) : 0;
    return rc;
}

int gguf_chat_template(const struct gguf *g, char **tpl, qp_err *err)
{
    const char *s;
    size_t n;
    *tpl = NULL;
    int rc = gguf_get_str(g, "tokenizer.chat_template", true, &s, &n, err);
    if (rc)
        return rc < 0 ? -1 : 0;
    if (!(*tpl = token_text(g, "tokenizer.chat_template", 0, s, n, err)))
        return -1;
    return 0;
}
