/* tok_internal.h - the loaded tokenizer, shared by the tokenizer's sources
 * (tok_load.c, tok_config.c, tok_regex.c, tok_nfc.c, bpe.c, tokenizer.c)
 * and its tests. Not part of the API. */
#ifndef QP_TOK_INTERNAL_H
#define QP_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tok_buf.h"
#include "tok_mem.h"
#include "tokenizer.h"

/* Ids are below this: entries[] is reserved for every id, so a file saying
 * "id": 4000000000 must not make us reserve gigabytes. 4 Mi is 16x the
 * largest vocabularies in use (~262k). */
#define QP_TOK_MAX_ID (1 << 22)

/* Pre-tokenizer steps (Split, or ByteLevel with use_regex) we can chain. */
#define QP_TOK_MAX_SPLITS 8

/* Words at most this long go through the word cache (Hugging Face caches
 * words shorter than 256 bytes too); longer ones are rare and merged afresh. */
#define QP_TOK_CACHE_MAX_WORD 256

/* Word cache limits: 64 Ki slots at most half full, and 4 MiB of keys and
 * ids; when either fills up the cache is emptied and starts again. */
#define QP_TOK_CACHE_SLOTS (1u << 16)
#define QP_TOK_CACHE_BYTES (4u << 20)

enum {
    TOK_PRESENT = 1, /* the id has a token */
    TOK_ADDED = 2,   /* from "added_tokens" */
    TOK_SPECIAL = 4, /* added token with "special": true */
};

typedef struct tok_entry {
    uint32_t str_off, str_len;     /* token string as tokenizer.json spells it, in strings */
    uint32_t bytes_off, bytes_len; /* the bytes decoding yields, in strings */
    uint32_t flags;
} tok_entry;

/* Self-contained so that a lookup touches the slot and the string only. */
typedef struct vocab_slot {
    uint32_t hash;
    uint32_t id_plus1; /* 0: empty */
    uint32_t str_off, str_len;
} vocab_slot;

typedef struct merge_slot {
    uint64_t pair;          /* left id << 32 | right id */
    uint32_t rank;          /* position in "merges": lower merges first */
    uint32_t new_id_plus1;  /* 0: empty */
} merge_slot;

typedef struct added_token {
    uint32_t off, len; /* the text matched in the input (content, NFC'd when normalized) */
    int32_t id;
    uint8_t single_word, lstrip, rstrip, normalized, special;
} added_token;

/* Added tokens of one kind (normalized or not), for leftmost-longest search:
 * order[] lists token indices grouped by first byte, longest first. */
typedef struct added_set {
    uint32_t *order;
    uint32_t first[256], count[256];
    uint32_t n;
} added_set;

/* A bump arena in one tok_map reservation: never moves, never grows. */
typedef struct tok_arena {
    char *s;
    size_t len, cap;
} tok_arena;

typedef struct word_cache {
    struct cache_slot {
        uint64_t hash;
        uint32_t key_off, key_len; /* in data */
        uint32_t ids_off, n_ids;   /* in data, 4-aligned */
    } *slots;                      /* QP_TOK_CACHE_SLOTS, hash 0 = empty */
    uint32_t used;
    tok_arena data;                /* QP_TOK_CACHE_BYTES */
} word_cache;

typedef struct bpe_symbol {
    int32_t id;
    int32_t prev, next; /* neighbours in the word, -1 at the ends */
    uint32_t len;       /* 0 once merged into its left neighbour */
} bpe_symbol;

typedef struct bpe_merge {
    uint32_t rank, pos;
    int32_t new_id;
} bpe_merge;

struct qp_tok {
    const char *name;    /* for messages: a copy of the load name */
    tok_arena strings;   /* all token strings and decoded bytes, NUL-terminated */

    tok_entry *entries;  /* [n_ids], reserved for QP_TOK_MAX_ID (tok_map) */
    int32_t n_ids;       /* largest id + 1 */

    vocab_slot *vocab;   /* model vocabulary, keyed by token string */
    uint32_t vocab_mask;
    uint32_t n_vocab;

    merge_slot *merges;
    uint32_t merge_mask;
    uint32_t n_merges;

    int32_t byte_id[256];     /* the single-byte token of each byte, -1 if none */
    uint16_t byte_char[256];  /* ByteLevel: byte -> code point of its stand-in character */

    /* model options */
    int32_t unk_id;           /* -1: characters outside the vocabulary are dropped */
    int fuse_unk;
    int ignore_merges;

    /* normalizer */
    int nfc;

    /* pre-tokenizer: regex splits, applied in order, each on the pieces of
     * the one before (Split with behavior Isolated) */
    pcre2_code *split_re[QP_TOK_MAX_SPLITS];
    int n_splits;
    pcre2_match_data *match;
    pcre2_match_context *match_ctx;
    pcre2_jit_stack *jit_stack;

    added_token *added;
    uint32_t n_added;
    added_set raw_set, norm_set;

    /* encode state (why a qp_tok is one-thread for encoding) */
    word_cache cache;
    bpe_symbol *syms;
    size_t syms_cap;
    bpe_merge *heap;
    size_t heap_cap;
    qp_tok_text mapped;      /* a word in byte-level characters (ignore_merges) */
    qp_tok_text normalized;  /* NFC of the segment being encoded */
    struct span { size_t off, len; } *spans, *spans2;
    size_t spans_cap, spans2_cap;
};

/* A fast hash of a short string (tokens are mostly under 16 bytes):
 * 64x64->128 multiply-fold per 8 bytes. */
static inline uint64_t tok_mix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t tok_hash64(const void *data, size_t n)
{
    const uint8_t *p = (const uint8_t *)data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        __builtin_memcpy(&w, p, 8);
        h = tok_mix(h ^ w, 0xBF58476D1CE4E5B9ull);
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return tok_mix(h ^ w, 0x94D049BB133111EBull);
}

/* tok_load.c */
int32_t tok_vocab_find(const qp_tok *tok, const char *s, size_t n);
/* copies s[0..n) into tok->strings, NUL-terminated; -1 when the arena is full */
int tok_store_string(qp_tok *tok, const char *s, size_t n, uint32_t *off);
/* entries[id] becomes part of the table (n_ids covers it) */
void tok_use_id(qp_tok *tok, int32_t id);

/* tok_config.c: root and model hold every value but model.vocab/merges */
int tok_check_config(qp_tok *tok, const cJSON *root, const cJSON *model, qp_err *err);
int tok_read_added_tokens(qp_tok *tok, const cJSON *list, qp_err *err);
/* groups the added tokens with this normalized flag for find_added */
int tok_build_added_set(qp_tok *tok, added_set *set, int normalized);

/* tok_nfc.c: appends NFC(s[0..n)) as tokenizers computes it (s must be
 * well-formed UTF-8). */
int tok_nfc(const char *s, size_t n, qp_tok_text *out, qp_err *err);

/* tok_regex.c: translates an Oniguruma pattern (what tokenizers runs) to
 * PCRE2 syntax and compiles it with JIT; literal = 1 for a plain string. */
int tok_regex_compile(qp_tok *tok, const char *pattern, size_t len, int literal,
                      const char *where, pcre2_code **out, qp_err *err);
int tok_regex_translate(const char *pattern, size_t len, qp_tok_text *out, const char *where,
                        qp_err *err);

/* tok_buf.c: grows *cap to at least need (doubling), reallocating *p of
 * elements of size elem; -1 when out of memory (*p then unchanged). */
int tok_grow(void **p, size_t *cap, size_t need, size_t elem);

/* tokenizer.c: splits normalized text s[0..n) with the pre-tokenizer's
 * regexes into tok->spans[0 .. *n_spans) (empty pieces dropped). */
int tok_pretokenize(qp_tok *tok, const char *s, size_t n, size_t *n_spans, qp_err *err);

/* bpe.c: appends the ids of one pre-tokenized word (raw bytes) */
int tok_bpe_word(qp_tok *tok, const uint8_t *word, size_t len, qp_tok_ids *out);
void tok_cache_free(word_cache *c);

#endif
