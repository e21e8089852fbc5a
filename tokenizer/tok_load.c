/* tok_load.c - reads tokenizer.json into a qp_tok.
 *
 * The document is walked with the in-place scanner of tok_json.h. The two
 * big tables, model.vocab (151k entries) and model.merges (151k pairs), are
 * streamed into one string arena and two open-addressing hash tables; every
 * other value is small and handed to cJSON, then checked field by field.
 * tok_config.c checks those small values and reads the added tokens.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsafe.h"
#include "tok_internal.h"
#include "tok_json.h"
#include "utf8_stream.h"

/* Largest tokenizer.json we accept: 16x the Qwen3 one. */
#define MAX_JSON_BYTES (192u << 20)

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t p = 16;
    while (p < n)
        p *= 2;
    return p;
}

/* ---- byte-level alphabet -------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes get U+0100.. in byte order. This is ByteLevel's fixed
 * table (tokenizer.json does not carry it). */
static void byte_level_table(uint16_t byte_char[256])
{
    uint16_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_char[b] = printable ? (uint16_t)b : next++;
    }
}

/* Inverse: code point (< 324) -> byte, or -1. */
static void byte_level_inverse(const uint16_t byte_char[256], int16_t char_byte[324])
{
    for (int c = 0; c < 324; c++)
        char_byte[c] = -1;
    for (int b = 0; b < 256; b++)
        char_byte[byte_char[b]] = (int16_t)b;
}

/* ---- vocabulary ---------------------------------------------------------- */

static const char *entry_str(const qp_tok *tok, const tok_entry *e)
{
    return tok->strings.s + e->str_off;
}

static uint32_t vocab_hash(const char *s, size_t n)
{
    return (uint32_t)tok_hash64(s, n);
}

int32_t tok_vocab_find(const qp_tok *tok, const char *s, size_t n)
{
    if (!tok->vocab)
        return -1;
    uint32_t h = vocab_hash(s, n);
    for (uint32_t i = h & tok->vocab_mask;; i = (i + 1) & tok->vocab_mask) {
        const vocab_slot *slot = &tok->vocab[i];
        if (!slot->id_plus1)
            return -1;
        if (slot->hash == h && slot->str_len == n && memcmp(tok->strings.s + slot->str_off, s, n) == 0)
            return (int32_t)slot->id_plus1 - 1;
    }
}

/* entries[] is reserved for every possible id: using one only moves n_ids. */
void tok_use_id(qp_tok *tok, int32_t id)
{
    if (id >= tok->n_ids)
        tok->n_ids = id + 1;
}

/* Copies s[0..n) into the arena, NUL-terminated (for qp_tok_token_string). */
int tok_store_string(qp_tok *tok, const char *s, size_t n, uint32_t *off)
{
    tok_arena *a = &tok->strings;
    if (n + 1 > a->cap - a->len || a->len + n + 1 > UINT32_MAX)
        return -1;
    *off = (uint32_t)a->len;
    memcpy(a->s + a->len, s, n);
    a->s[a->len + n] = '\0';
    a->len += n + 1;
    return 0;
}

/* Reads "vocab": {"token": id, ...} into entries[]. */
static int read_vocab(qp_tok *tok, qp_json *j)
{
    if (qp_json_expect(j, '{', "for model.vocab (an object of token: id)"))
        return -1;
    qp_tok_text key = {0};
    int first = 1, r;
    while ((r = qp_json_next_member(j, &first, &key, "in model.vocab")) == 1) {
        int64_t id;
        if (qp_json_int(j, 0, QP_TOK_MAX_ID - 1, &id, "model.vocab id"))
            break;
        tok_use_id(tok, (int32_t)id);
        tok_entry *e = &tok->entries[id];
        if (e->flags & TOK_PRESENT) {
            r = qp_fail(j->err, "%s: model.vocab: id %lld is given to both \"%s\" and \"%.*s\"",
                        j->name, (long long)id, entry_str(tok, e), (int)key.len, key.s);
            break;
        }
        if (tok_store_string(tok, key.s, key.len, &e->str_off)) {
            r = qp_fail(j->err, "%s: out of memory", j->name);
            break;
        }
        e->str_len = (uint32_t)key.len;
        e->flags = TOK_PRESENT;
        tok->n_vocab++;
    }
    qp_tok_text_free(&key);
    return r == 0 ? 0 : -1;
}

/* Hashes every vocabulary entry; a token spelled twice is an error. */
static int index_vocab(qp_tok *tok, qp_err *err)
{
    uint32_t size = pow2_at_least((uint64_t)tok->n_vocab * 2);
    tok->vocab = tok_map((size_t)size * sizeof(*tok->vocab));
    if (!tok->vocab)
        return qp_fail(err, "%s: out of memory", tok->name);
    tok->vocab_mask = size - 1;
    for (int32_t id = 0; id < tok->n_ids; id++) {
        const tok_entry *e = &tok->entries[id];
        if (!(e->flags & TOK_PRESENT))
            continue;
        const char *s = entry_str(tok, e);
        uint32_t h = vocab_hash(s, e->str_len);
        uint32_t i = h & tok->vocab_mask;
        for (; tok->vocab[i].id_plus1; i = (i + 1) & tok->vocab_mask) {
            const vocab_slot *o = &tok->vocab[i];
            if (o->hash == h && o->str_len == e->str_len && memcmp(tok->strings.s + o->str_off, s, e->str_len) == 0)
                return qp_fail(err, "%s: model.vocab: \"%s\" appears twice (ids %u and %d)",
                               tok->name, s, o->id_plus1 - 1, id);
        }
        tok->vocab[i] = (vocab_slot){h, (uint32_t)id + 1, e->str_off, e->str_len};
    }
    return 0;
}

/* ---- merges --------------------------------------------------------------- */

static uint32_t merge_hash(uint64_t pair)
{
    pair ^= pair >> 29;
    pair *= 0xBF58476D1CE4E5B9ull;
    pair ^= pair >> 32;
    return (uint32_t)pair;
}

static int merges_grow(qp_tok *tok)
{
    uint32_t size = tok->merges ? (tok->merge_mask + 1) * 2 : pow2_at_least((uint64_t)tok->n_vocab * 2);
    merge_slot *t = tok_map((size_t)size * sizeof(*t));
    if (!t)
        return -1;
    for (uint32_t i = 0; tok->merges && i <= tok->merge_mask; i++) {
        merge_slot *m = &tok->merges[i];
        if (!m->new_id_plus1)
            continue;
        uint32_t k = merge_hash(m->pair) & (size - 1);
        while (t[k].new_id_plus1)
            k = (k + 1) & (size - 1);
        t[k] = *m;
    }
    if (tok->merges)
        tok_unmap(tok->merges, (size_t)(tok->merge_mask + 1) * sizeof(*t));
    tok->merges = t;
    tok->merge_mask = size - 1;
    return 0;
}

static int merges_put(qp_tok *tok, int32_t a, int32_t b, uint32_t rank, int32_t new_id)
{
    if (!tok->merges || (uint64_t)(tok->n_merges + 1) * 4 > (uint64_t)(tok->merge_mask + 1) * 3)
        if (merges_grow(tok))
            return -1;
    uint64_t pair = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t k = merge_hash(pair) & tok->merge_mask;
    while (tok->merges[k].new_id_plus1 && tok->merges[k].pair != pair)
        k = (k + 1) & tok->merge_mask;
    if (!tok->merges[k].new_id_plus1)
        tok->n_merges++;
    tok->merges[k] = (merge_slot){pair, rank, (uint32_t)new_id + 1};
    return 0;
}

/* Merges are read in batches so the ~450k vocabulary lookups they need can
 * overlap their cache misses: hash and prefetch the slots of a whole batch,
 * then prefetch the strings those slots point to, then resolve, then insert
 * in file order. Lookups one at a time spent 90% of their time waiting. */
#define MERGE_BATCH 64

typedef struct merge_job {
    uint32_t off, len_a, len_b; /* a then b, back to back in the batch text */
    uint32_t hash[3];           /* of a, b, and a+b */
    int32_t id[3];
    size_t rank;
} merge_job;

typedef struct merge_batch {
    merge_job job[MERGE_BATCH];
    int n;
    qp_tok_text text;
} merge_batch;

static const vocab_slot *first_slot(const qp_tok *tok, uint32_t h)
{
    return &tok->vocab[h & tok->vocab_mask];
}

static int32_t vocab_find_hashed(const qp_tok *tok, const char *s, size_t n, uint32_t h)
{
    for (uint32_t i = h & tok->vocab_mask;; i = (i + 1) & tok->vocab_mask) {
        const vocab_slot *slot = &tok->vocab[i];
        if (!slot->id_plus1)
            return -1;
        if (slot->hash == h && slot->str_len == n && memcmp(tok->strings.s + slot->str_off, s, n) == 0)
            return (int32_t)slot->id_plus1 - 1;
    }
}

static void job_part(const merge_batch *b, const merge_job *m, int k, const char **s, size_t *n)
{
    *s = b->text.s + m->off + (k == 1 ? m->len_a : 0);
    *n = k == 0 ? m->len_a : k == 1 ? m->len_b : (size_t)m->len_a + m->len_b;
}

static int run_batch(qp_tok *tok, merge_batch *b, qp_json *j)
{
    const char *s;
    size_t n;
    for (int i = 0; i < b->n; i++)
        for (int k = 0; k < 3; k++) {
            job_part(b, &b->job[i], k, &s, &n);
            b->job[i].hash[k] = vocab_hash(s, n);
            __builtin_prefetch(first_slot(tok, b->job[i].hash[k]));
        }
    for (int i = 0; i < b->n; i++)
        for (int k = 0; k < 3; k++) {
            const vocab_slot *slot = first_slot(tok, b->job[i].hash[k]);
            if (slot->id_plus1)
                __builtin_prefetch(tok->strings.s + slot->str_off);
        }
    for (int i = 0; i < b->n; i++) {
        merge_job *m = &b->job[i];
        for (int k = 0; k < 3; k++) {
            job_part(b, m, k, &s, &n);
            m->id[k] = vocab_find_hashed(tok, s, n, m->hash[k]);
            if (m->id[k] < 0)
                return qp_fail(j->err, "%s: model.merges[%zu]: %s\"%.*s\" is not in model.vocab",
                               j->name, m->rank, k == 2 ? "the merged token " : "", (int)n, s);
        }
    }
    /* A pair listed twice keeps its last rank, as Hugging Face's HashMap does. */
    for (int i = 0; i < b->n; i++)
        if (merges_put(tok, b->job[i].id[0], b->job[i].id[1], (uint32_t)b->job[i].rank, b->job[i].id[2]))
            return qp_fail(j->err, "%s: out of memory", j->name);
    b->n = 0;
    b->text.len = 0;
    return 0;
}

static int queue_merge(qp_tok *tok, merge_batch *b, qp_json *j, size_t rank, size_t off,
                       size_t len_a, size_t len_b)
{
    b->job[b->n++] = (merge_job){.off = (uint32_t)off, .len_a = (uint32_t)len_a,
                                 .len_b = (uint32_t)len_b, .rank = rank};
    return b->n == MERGE_BATCH ? run_batch(tok, b, j) : 0;
}

/* Reads one merge written as ["a", "b"] into the batch text. */
static int read_pair(qp_json *j, size_t rank, qp_tok_text *text, size_t *len_a, size_t *len_b)
{
    j->p++; /* '[' */
    int first = 1;
    size_t *len[2] = {len_a, len_b};
    for (int i = 0; i < 2; i++) {
        int r = qp_json_next_element(j, &first, "in a merge");
        if (r < 0)
            return -1;
        if (r == 0 || qp_json_peek(j) != '"')
            return qp_json_fail(j, "model.merges[%zu] must be a pair of strings", rank);
        size_t before = text->len;
        if (qp_json_string(j, text))
            return -1;
        *len[i] = text->len - before;
    }
    int r = qp_json_next_element(j, &first, "in a merge");
    if (r != 0)
        return r < 0 ? -1 : qp_json_fail(j, "model.merges[%zu] has more than two strings", rank);
    return 0;
}

/* Reads one merge written the old way, "a b", into the batch text (as a
 * then b, without the space). Returns 1 for a "#version" line to skip. */
static int read_legacy(qp_json *j, size_t rank, qp_tok_text *text, size_t *len_a, size_t *len_b)
{
    size_t off = text->len;
    if (qp_json_string(j, text))
        return -1;
    char *line = text->s + off;
    size_t n = text->len - off;
    /* Hugging Face skips "#version" lines of old merges.txt files */
    if (n >= 8 && memcmp(line, "#version", 8) == 0) {
        text->len = off;
        return 1;
    }
    char *space = memchr(line, ' ', n);
    if (!space || memchr(space + 1, ' ', n - (size_t)(space + 1 - line)))
        return qp_fail(j->err, "%s: model.merges[%zu]: \"%.*s\" is not two tokens separated by one space",
                       j->name, rank, (int)n, line);
    *len_a = (size_t)(space - line);
    *len_b = n - *len_a - 1;
    memmove(space, space + 1, *len_b);
    text->len--;
    return 0;
}

/* Reads "merges": [["a", "b"], ...] or the older ["a b", ...]. */
static int read_merges(qp_tok *tok, qp_json *j)
{
    if (qp_json_expect(j, '[', "for model.merges (an array of merges)"))
        return -1;
    merge_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return qp_fail(j->err, "%s: out of memory", j->name);
    int first = 1, r, format = 0;
    size_t rank = 0;
    while ((r = qp_json_next_element(j, &first, "in model.merges")) == 1) {
        size_t off = b->text.len, len_a = 0, len_b = 0;
        int c = qp_json_peek(j), skip = 0;
        /* one format for all, as tokenizers requires */
        if ((c == '[' || c == '"') && format && c != format) {
            r = qp_json_fail(j, "model.merges[%zu]: mixes [\"a\", \"b\"] pairs and \"a b\" strings", rank);
            break;
        }
        format = c;
        if (c == '[')
            r = read_pair(j, rank, &b->text, &len_a, &len_b);
        else if (c == '"')
            r = skip = read_legacy(j, rank, &b->text, &len_a, &len_b);
        else
            r = qp_json_fail(j, "model.merges[%zu] must be a pair of strings", rank);
        if (r < 0 || (!skip && queue_merge(tok, b, j, rank, off, len_a, len_b))) {
            r = -1;
            break;
        }
        if (!skip)
            rank++;
    }
    if (r == 0 && b->n)
        r = run_batch(tok, b, j);
    qp_tok_text_free(&b->text);
    free(b);
    return r == 0 ? 0 : -1;
}

/* ---- small JSON values through cJSON --------------------------------------- */

/* Skips the value at the cursor and parses it with cJSON. */
static cJSON *take_value(qp_json *j)
{
    qp_json_peek(j);
    const char *start = j->p;
    if (qp_json_skip(j))
        return NULL;
    cJSON *v = cJSON_ParseWithLength(start, (size_t)(j->p - start));
    if (!v)
        qp_fail(j->err, "%s: byte %zu: value not understood", j->name, (size_t)(start - j->start));
    return v;
}

static int add_member(cJSON *obj, const char *key, cJSON *v, qp_json *j, const char *where)
{
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
        cJSON_Delete(v);
        return qp_fail(j->err, "%s: %s\"%s\" appears twice", j->name, where, key);
    }
    cJSON_AddItemToObject(obj, key, v);
    return 0;
}

/* a member that may come once: *seen set, or -1 the second time */
static int once(qp_json *j, int *seen, const char *where, const char *key)
{
    if (*seen)
        return qp_fail(j->err, "%s: %s\"%s\" appears twice", j->name, where, key);
    *seen = 1;
    return 0;
}

typedef struct doc {
    cJSON *root;  /* every top-level member but "model" */
    cJSON *model; /* every model member but vocab and merges */
    int have_model, have_vocab, have_merges;
    const char *merges_at; /* merges seen before vocab: read them afterwards */
} doc;

static int read_model(qp_tok *tok, qp_json *j, doc *d)
{
    if (qp_json_expect(j, '{', "for \"model\" (an object)"))
        return -1;
    qp_tok_text key = {0};
    int first = 1, r;
    while ((r = qp_json_next_member(j, &first, &key, "in \"model\"")) == 1) {
        if (strcmp(key.s, "vocab") == 0 && key.len == 5) {
            if (once(j, &d->have_vocab, "model: ", "vocab") || read_vocab(tok, j) || index_vocab(tok, j->err))
                r = -1;
        } else if (strcmp(key.s, "merges") == 0 && key.len == 6) {
            if (once(j, &d->have_merges, "model: ", "merges")) {
                r = -1;
            } else if (d->have_vocab) {
                if (read_merges(tok, j))
                    r = -1;
            } else {
                qp_json_peek(j);
                d->merges_at = j->p;
                if (qp_json_skip(j))
                    r = -1;
            }
        } else {
            cJSON *v = take_value(j);
            if (!v || add_member(d->model, key.s, v, j, "model: "))
                r = -1;
        }
        if (r < 0)
            break;
    }
    qp_tok_text_free(&key);
    return r == 0 ? 0 : -1;
}

static int read_document(qp_tok *tok, qp_json *j, doc *d)
{
    if (qp_json_expect(j, '{', "at the start (tokenizer.json is one object)"))
        return -1;
    qp_tok_text key = {0};
    int first = 1, r;
    while ((r = qp_json_next_member(j, &first, &key, "in the top-level object")) == 1) {
        if (strcmp(key.s, "model") == 0 && key.len == 5) {
            if (once(j, &d->have_model, "", "model") || read_model(tok, j, d))
                r = -1;
        } else {
            cJSON *v = take_value(j);
            if (!v || add_member(d->root, key.s, v, j, ""))
                r = -1;
        }
        if (r < 0)
            break;
    }
    qp_tok_text_free(&key);
    if (r != 0 || qp_json_end(j))
        return -1;
    if (!d->have_model)
        return qp_fail(j->err, "%s: no \"model\" object", j->name);
    if (!d->have_vocab)
        return qp_fail(j->err, "%s: model: no \"vocab\"", j->name);
    if (!d->have_merges)
        return qp_fail(j->err, "%s: model: no \"merges\"", j->name);
    if (d->merges_at) {
        j->p = d->merges_at;
        if (read_merges(tok, j))
            return -1;
    }
    return 0;
}

/* ---- decode table ------------------------------------------------------------ */

/* What the ByteLevel decoder yields for a token string: the bytes its
 * characters stand for, or, if any character is outside the byte alphabet,
 * the string's own UTF-8 (tokenizers' rule, token by token). */
static int token_bytes(qp_tok *tok, tok_entry *e, const int16_t char_byte[324], qp_tok_text *tmp)
{
    const uint8_t *s = (const uint8_t *)tok->strings.s + e->str_off;
    size_t n = e->str_len;
    tmp->len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len;
        if (qp_utf8_decode(s + i, n - i, &cp, &len) != QP_UTF8_OK || cp >= 324 || char_byte[cp] < 0) {
            e->bytes_off = e->str_off; /* raw fallback: share the string */
            e->bytes_len = e->str_len;
            return 0;
        }
        uint8_t b = (uint8_t)char_byte[cp];
        if (qp_tok_text_append(tmp, &b, 1))
            return -1;
        i += len;
    }
    if (tmp->len == n && memcmp(tmp->s, s, n) == 0) {
        e->bytes_off = e->str_off; /* all printable ASCII: identical */
        e->bytes_len = e->str_len;
        return 0;
    }
    e->bytes_len = (uint32_t)tmp->len;
    return tok_store_string(tok, tmp->s, tmp->len, &e->bytes_off);
}

static int build_decode_table(qp_tok *tok, qp_err *err)
{
    int16_t char_byte[324];
    byte_level_inverse(tok->byte_char, char_byte);
    qp_tok_text tmp = {0};
    for (int32_t id = 0; id < tok->n_ids; id++) {
        tok_entry *e = &tok->entries[id];
        if ((e->flags & TOK_PRESENT) && token_bytes(tok, e, char_byte, &tmp)) {
            qp_tok_text_free(&tmp);
            return qp_fail(err, "%s: out of memory", tok->name);
        }
    }
    qp_tok_text_free(&tmp);
    return 0;
}

/* The token of each single byte; initial BPE symbols. */
static void build_byte_ids(qp_tok *tok)
{
    for (int b = 0; b < 256; b++) {
        char utf8[2];
        uint16_t c = tok->byte_char[b];
        size_t n;
        if (c < 0x80) {
            utf8[0] = (char)c;
            n = 1;
        } else {
            utf8[0] = (char)(0xC0 | (c >> 6));
            utf8[1] = (char)(0x80 | (c & 0x3F));
            n = 2;
        }
        tok->byte_id[b] = tok_vocab_find(tok, utf8, n);
    }
}

/* ---- entry points --------------------------------------------------------------- */

int qp_tok_load_buffer(qp_tok **out, const char *json, size_t len, const char *name, qp_err *err)
{
    *out = NULL;
    if (!name)
        name = "tokenizer.json";
    if (len > MAX_JSON_BYTES)
        return qp_fail(err, "%s: %zu bytes is more than the %u MiB limit", name, len,
                       MAX_JSON_BYTES >> 20);
    qp_tok *tok = calloc(1, sizeof(*tok));
    if (!tok || !(tok->name = strdup(name))) {
        free(tok);
        return qp_fail(err, "%s: out of memory", name);
    }
    tok->unk_id = -1;
    byte_level_table(tok->byte_char);
    /* One arena for all strings, reserved once for the worst case (token
     * strings, their decoded bytes and NFC'd added tokens are each at most
     * the JSON's size), and entries[] for every possible id: only the pages
     * used cost anything. */
    tok->strings.cap = 3 * len + 4096;
    tok->strings.s = tok_map(tok->strings.cap);
    tok->entries = tok_map((size_t)QP_TOK_MAX_ID * sizeof(tok_entry));
    if (!tok->strings.s || !tok->entries) {
        qp_tok_free(tok);
        return qp_fail(err, "%s: out of memory", name);
    }
    doc d = {.root = cJSON_CreateObject(), .model = cJSON_CreateObject()};
    qp_json j;
    qp_json_init(&j, json, len, tok->name, err);
    int r = !d.root || !d.model ? qp_fail(err, "%s: out of memory", name) : 0;
    if (!r)
        r = read_document(tok, &j, &d);
    if (!r)
        r = tok_check_config(tok, d.root, d.model, err);
    if (!r)
        r = tok_read_added_tokens(tok, cJSON_GetObjectItemCaseSensitive(d.root, "added_tokens"), err);
    cJSON_Delete(d.root);
    cJSON_Delete(d.model);
    if (!r && (tok_build_added_set(tok, &tok->raw_set, 0) || tok_build_added_set(tok, &tok->norm_set, 1)))
        r = qp_fail(err, "%s: out of memory", name);
    if (!r)
        r = build_decode_table(tok, err);
    if (r) {
        qp_tok_free(tok);
        return -1;
    }
    build_byte_ids(tok);
    *out = tok;
    return 0;
}

int qp_tok_load_file(qp_tok **out, const char *path, qp_err *err)
{
    *out = NULL;
    struct stat st;
    int fd = fs_open_input(path, &st, err); /* a FIFO or device is refused, not waited on */
    if (fd < 0)
        return -1;
    if ((uint64_t)st.st_size > MAX_JSON_BYTES) {
        close(fd);
        return qp_fail(err, "%s: %lld bytes is more than the %u MiB limit", path,
                       (long long)st.st_size, MAX_JSON_BYTES >> 20);
    }
    size_t len = (size_t)st.st_size;
    if (len == 0) {
        close(fd);
        return qp_fail(err, "%s: empty file", path);
    }
    /* MAP_POPULATE maps the page cache in one go instead of a fault per page */
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return qp_fail(err, "%s: mmap: %s", path, strerror(errno));
    int r = qp_tok_load_buffer(out, map, len, path, err);
    munmap(map, len);
    return r;
}

void qp_tok_free(qp_tok *tok)
{
    if (!tok)
        return;
    for (int i = 0; i < tok->n_splits; i++)
        pcre2_code_free(tok->split_re[i]);
    pcre2_match_data_free(tok->match);
    pcre2_match_context_free(tok->match_ctx);
    pcre2_jit_stack_free(tok->jit_stack);
    free(tok->raw_set.order);
    free(tok->norm_set.order);
    free(tok->added);
    if (tok->merges)
        tok_unmap(tok->merges, (size_t)(tok->merge_mask + 1) * sizeof(merge_slot));
    if (tok->vocab)
        tok_unmap(tok->vocab, (size_t)(tok->vocab_mask + 1) * sizeof(vocab_slot));
    tok_unmap(tok->entries, (size_t)QP_TOK_MAX_ID * sizeof(tok_entry));
    tok_unmap(tok->strings.s, tok->strings.cap);
    tok_cache_free(&tok->cache);
    free(tok->syms);
    free(tok->heap);
    free(tok->spans);
    free(tok->spans2);
    qp_tok_text_free(&tok->mapped);
    qp_tok_text_free(&tok->normalized);
    free((char *)tok->name);
    free(tok);
}
