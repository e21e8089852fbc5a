/* tokenizer.c - encode and decode with a loaded qp_tok (see tokenizer.h).
 *
 * encode, in tokenizers' order:
 *   1. find the added tokens that match the raw text (normalized: false);
 *   2. NFC-normalize each stretch of text between them, and find the
 *      added tokens that match normalized text (normalized: true) there;
 *   3. split each remaining stretch with the pre-tokenizer's regexes;
 *   4. BPE-merge each piece (bpe.c).
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"
#include "utf8_stream.h"

/* ---- added tokens: tokenizers' AddedVocabulary::find_matches ---------------- */

/* Unicode White_Space, what the Rust regex \s that tokenizers uses for
 * lstrip/rstrip means. */
static int is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Rust regex \w (single_word): Alphabetic, Mark, Decimal_Number,
 * Connector_Punctuation, Join_Control. Alphabetic is approximated by
 * letters, letter numbers and the circled/squared Latin letters. */
static int is_word_char(uint32_t c)
{
    if (c == '_' || c == 0x200C || c == 0x200D)
        return 1;
    if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
        (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
        return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* The character ending at s[end) (s[0..end) is well-formed). */
static uint32_t char_before(const char *s, size_t end, size_t *start)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp;
    size_t len;
    qp_utf8_decode((const uint8_t *)s + i, end - i, &cp, &len);
    *start = i;
    return cp;
}

static uint32_t char_at(const char *s, size_t n, size_t i, size_t *len)
{
    uint32_t cp;
    qp_utf8_decode((const uint8_t *)s + i, n - i, &cp, len);
    return cp;
}

/* Leftmost, then longest, added token of set in s[from..n). */
static int find_added(const qp_tok *tok, const added_set *set, const char *s, size_t n, size_t from,
                      size_t *at, const added_token **hit)
{
    if (!set->n)
        return 0;
    for (size_t i = from; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        const uint32_t *cand = set->order + set->first[b];
        for (uint32_t k = 0; k < set->count[b]; k++) {
            const added_token *t = &tok->added[cand[k]];
            if (t->len <= n - i && memcmp(tok->strings.s + t->off, s + i, t->len) == 0) {
                *at = i;
                *hit = t;
                return 1;
            }
        }
    }
    return 0;
}

typedef int (*text_fn)(qp_tok *tok, const char *s, size_t n, qp_tok_ids *out, qp_err *err);

/* Splits s[0..n) around the added tokens of set: their ids go to out, the
 * text between them to on_text. */
static int split_added(qp_tok *tok, const added_set *set, const char *s, size_t n, text_fn on_text,
                       qp_tok_ids *out, qp_err *err)
{
    size_t done = 0, search = 0, at;
    const added_token *t;
    while (search < n && find_added(tok, set, s, n, search, &at, &t)) {
        size_t start = at, stop = at + t->len;
        search = stop; /* the matcher moves on even past a rejected match */
        if (t->single_word) {
            size_t i, len;
            int word_before = start > 0 && is_word_char(char_before(s, start, &i));
            int word_after = stop < n && is_word_char(char_at(s, n, stop, &len));
            if (word_before || word_after)
                continue;
        }
        if (t->lstrip) {
            size_t i = start, k;
            while (i > 0 && is_space(char_before(s, i, &k)))
                i = k;
            start = i > done ? i : done; /* spaces already taken stay taken */
        }
        if (t->rstrip) {
            size_t len;
            while (stop < n && is_space(char_at(s, n, stop, &len)))
                stop += len;
        }
        if (done < start && on_text(tok, s + done, start - done, out, err))
            return -1;
        if (qp_tok_ids_push(out, t->id))
            return qp_fail(err, "out of memory");
        done = stop;
    }
    if (done < n && on_text(tok, s + done, n - done, out, err))
        return -1;
    return 0;
}

/* ---- pre-tokenizer: regex splits (behavior Isolated) ------------------------- */

static int push_span(struct span **v, size_t *n, size_t *cap, size_t off, size_t len)
{
    if (tok_grow((void **)v, cap, *n + 1, sizeof(**v)))
        return -1;
    (*v)[(*n)++] = (struct span){off, len};
    return 0;
}

/* The pieces of s[0..n) by re, as tokenizers gets them from Oniguruma's
 * find_iter: each match and each gap between matches, empty ones dropped.
 * After an empty match the search moves one character on, and an empty
 * match right after a non-empty one is skipped (onig's FindMatches). */
static int split_regex(qp_tok *tok, pcre2_code *re, const char *s, size_t base, size_t n,
                       struct span **out, size_t *n_out, size_t *cap, qp_err *err)
{
    const char *subject = s + base;
    size_t last_end = 0, prev = 0;
    int skip_next_empty = 0;
    while (last_end <= n) {
        int rc = pcre2_jit_match(re, (PCRE2_SPTR)subject, n, last_end, PCRE2_NO_UTF_CHECK, tok->match,
                                 tok->match_ctx);
        if (rc == PCRE2_ERROR_JIT_BADOPTION) /* JIT compile failed: interpret */
            rc = pcre2_match(re, (PCRE2_SPTR)subject, n, last_end, PCRE2_NO_UTF_CHECK, tok->match,
                             tok->match_ctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return qp_fail(err, "pre-tokenizer regex failed at byte %zu of a %zu-byte piece: %s",
                           last_end, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(tok->match);
        size_t ms = ov[0], me = ov[1];
        last_end = me;
        if (ms == me) {
            size_t len = 1;
            if (me < n)
                char_at(subject, n, me, &len);
            last_end += len;
            if (skip_next_empty) {
                skip_next_empty = 0;
                continue;
            }
        } else {
            skip_next_empty = 1;
        }
        if (ms > prev && push_span(out, n_out, cap, base + prev, ms - prev))
            return qp_fail(err, "out of memory");
        if (me > ms && push_span(out, n_out, cap, base + ms, me - ms))
            return qp_fail(err, "out of memory");
        prev = me;
    }
    if (prev < n && push_span(out, n_out, cap, base + prev, n - prev))
        return qp_fail(err, "out of memory");
    return 0;
}

int tok_pretokenize(qp_tok *tok, const char *s, size_t n, size_t *n_spans, qp_err *err)
{
    *n_spans = 0;
    if (push_span(&tok->spans, n_spans, &tok->spans_cap, 0, n))
        return qp_fail(err, "out of memory");
    for (int k = 0; k < tok->n_splits; k++) {
        size_t n2 = 0;
        for (size_t i = 0; i < *n_spans; i++)
            if (split_regex(tok, tok->split_re[k], s, tok->spans[i].off, tok->spans[i].len,
                            &tok->spans2, &n2, &tok->spans2_cap, err))
                return -1;
        struct span *t = tok->spans;
        size_t tc = tok->spans_cap;
        tok->spans = tok->spans2;
        tok->spans_cap = tok->spans2_cap;
        tok->spans2 = t;
        tok->spans2_cap = tc;
        *n_spans = n2;
    }
    return 0;
}

/* Pre-tokenizes and BPE-merges one stretch of normalized text. */
static int encode_plain(qp_tok *tok, const char *s, size_t n, qp_tok_ids *out, qp_err *err)
{
    size_t n_spans;
    if (tok_pretokenize(tok, s, n, &n_spans, err))
        return -1;
    for (size_t i = 0; i < n_spans; i++)
        if (tok_bpe_word(tok, (const uint8_t *)s + tok->spans[i].off, tok->spans[i].len, out))
            return qp_fail(err, "out of memory");
    return 0;
}

/* ---- normalizer ------------------------------------------------------------------ */

/* True when every character of s is unchanged by NFC whatever surrounds it:
 * below U+0300 (Latin, Greek basics...), kana without the combining voicing
 * marks, CJK unified ideographs, Hangul syllables. Such text skips utf8proc. */
static int nfc_inert(const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0xCC) { /* ASCII, continuation, or a lead byte below U+0300 */
            i++;
            continue;
        }
        size_t len;
        uint32_t c = char_at(s, n, i, &len);
        if (!((c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA) ||
              (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3)))
            return 0;
        i += len;
    }
    return 1;
}

/* Text between raw added tokens: normalize, then look for normalized ones. */
static int encode_segment(qp_tok *tok, const char *s, size_t n, qp_tok_ids *out, qp_err *err)
{
    if (!tok->nfc || nfc_inert(s, n))
        return split_added(tok, &tok->norm_set, s, n, encode_plain, out, err);
    tok->normalized.len = 0;
    if (tok_nfc(s, n, &tok->normalized, err))
        return -1;
    return split_added(tok, &tok->norm_set, tok->normalized.s ? tok->normalized.s : "",
                       tok->normalized.len, encode_plain, out, err);
}

int qp_tok_encode(qp_tok *tok, const char *text, size_t len, qp_tok_ids *out, qp_err *err)
{
    const char *why = NULL;
    size_t bad = qp_utf8_check(text, len, &why);
    if (bad < len)
        return qp_fail(err, "invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)", bad,
                       (unsigned char)text[bad], why);
    size_t start = out->len;
    if (split_added(tok, &tok->raw_set, text, len, encode_segment, out, err)) {
        out->len = start;
        return -1;
    }
    return 0;
}

/* ---- decoding ----------------------------------------------------------------------- */

static const tok_entry *entry_of(const qp_tok *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_ids || !(tok->entries[id].flags & TOK_PRESENT))
        return NULL;
    return &tok->entries[id];
}

static int unknown_id(const qp_tok *tok, int32_t id, qp_err *err)
{
    return qp_fail(err, "token id %d is not in the vocabulary (ids run from 0 to %d)", id,
                   tok->n_ids - 1);
}

int qp_tok_decode(const qp_tok *tok, const int32_t *ids, size_t n, int flags, qp_tok_text *out,
                  qp_err *err)
{
    size_t start = out->len;
    qp_tok_stream st;
    qp_tok_stream_init(&st, tok, flags);
    for (size_t i = 0; i < n; i++)
        if (qp_tok_stream_push(&st, ids[i], out, err)) {
            out->len = start;
            if (out->s)
                out->s[start] = '\0';
            return -1;
        }
    return qp_tok_stream_finish(&st, out, err);
}

void qp_tok_stream_init(qp_tok_stream *s, const qp_tok *tok, int flags)
{
    s->tok = tok;
    s->flags = flags;
    qp_utf8_stream_init(&s->utf8);
}

int qp_tok_stream_push(qp_tok_stream *s, int32_t id, qp_tok_text *out, qp_err *err)
{
    const tok_entry *e = entry_of(s->tok, id);
    if (!e)
        return unknown_id(s->tok, id, err);
    if ((s->flags & QP_TOK_SKIP_SPECIAL) && (e->flags & TOK_SPECIAL))
        return 0;
    if (qp_utf8_stream_feed(&s->utf8, s->tok->strings.s + e->bytes_off, e->bytes_len, out))
        return qp_fail(err, "out of memory");
    return 0;
}

int qp_tok_stream_finish(qp_tok_stream *s, qp_tok_text *out, qp_err *err)
{
    if (qp_utf8_stream_finish(&s->utf8, out))
        return qp_fail(err, "out of memory");
    return 0;
}

/* ---- vocabulary --------------------------------------------------------------------- */

int32_t qp_tok_vocab_size(const qp_tok *tok)
{
    return tok->n_ids;
}

int32_t qp_tok_token_id(const qp_tok *tok, const char *s, size_t n)
{
    for (uint32_t i = 0; i < tok->n_added; i++) {
        const tok_entry *e = &tok->entries[tok->added[i].id];
        if (e->str_len == n && memcmp(tok->strings.s + e->str_off, s, n) == 0)
            return tok->added[i].id;
    }
    return tok_vocab_find(tok, s, n);
}

const char *qp_tok_token_bytes(const qp_tok *tok, int32_t id, size_t *len)
{
    const tok_entry *e = entry_of(tok, id);
    if (!e)
        return NULL;
    *len = e->bytes_len;
    return tok->strings.s + e->bytes_off;
}

const char *qp_tok_token_string(const qp_tok *tok, int32_t id, size_t *len)
{
    const tok_entry *e = entry_of(tok, id);
    if (!e)
        return NULL;
    if (len)
        *len = e->str_len;
    return tok->strings.s + e->str_off;
}

int qp_tok_is_special(const qp_tok *tok, int32_t id)
{
    const tok_entry *e = entry_of(tok, id);
    return e && (e->flags & TOK_SPECIAL) ? 1 : 0;
}

int qp_tok_is_added(const qp_tok *tok, int32_t id)
{
    const tok_entry *e = entry_of(tok, id);
    return e && (e->flags & TOK_ADDED) ? 1 : 0;
}
