#include "utf8_stream.h"

#include <string.h>

/* Allowed range of the second byte for each lead byte (Table 3-7); the
 * third and fourth bytes are always 80..BF. */
static int second_byte_ok(uint8_t lead, uint8_t b)
{
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
    return b >= 0x80 && b <= 0xBF;
}

static size_t seq_len(uint8_t lead)
{
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0; /* 80..C1, F5..FF never start a character */
}

int qp_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp, size_t *len)
{
    uint8_t lead = s[0];
    size_t need = seq_len(lead);
    if (need == 1) {
        *cp = lead;
        *len = 1;
        return QP_UTF8_OK;
    }
    if (need == 0) {
        *len = 1;
        return QP_UTF8_INVALID;
    }
    for (size_t i = 1; i < need; i++) {
        if (i == n) {
            *len = n;
            return QP_UTF8_TRUNCATED;
        }
        int ok = i == 1 ? second_byte_ok(lead, s[1]) : (s[i] & 0xC0) == 0x80;
        if (!ok) {
            *len = i; /* the well-formed prefix so far is the maximal subpart */
            return QP_UTF8_INVALID;
        }
    }
    uint32_t c = lead & (0x7F >> need);
    for (size_t i = 1; i < need; i++)
        c = (c << 6) | (s[i] & 0x3F);
    *cp = c;
    *len = need;
    return QP_UTF8_OK;
}

static const char *why_invalid(const uint8_t *s, size_t n)
{
    uint8_t lead = s[0];
    if (lead >= 0x80 && lead <= 0xBF) return "unexpected continuation byte";
    if (lead == 0xC0 || lead == 0xC1) return "overlong encoding";
    if (lead >= 0xF5) return "byte never used in UTF-8";
    if (n < 2) return "truncated character";
    if (lead == 0xE0 && s[1] < 0xA0 && s[1] >= 0x80) return "overlong encoding";
    if (lead == 0xF0 && s[1] < 0x90 && s[1] >= 0x80) return "overlong encoding";
    if (lead == 0xED && s[1] >= 0xA0 && s[1] <= 0xBF) return "encoded surrogate";
    if (lead == 0xF4 && s[1] >= 0x90 && s[1] <= 0xBF) return "code point above U+10FFFF";
    return "truncated character";
}

size_t qp_utf8_check(const void *data, size_t n, const char **why)
{
    const uint8_t *s = data;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i == n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t len;
        if (qp_utf8_decode(s + i, n - i, &cp, &len) != QP_UTF8_OK) {
            if (why)
                *why = why_invalid(s + i, n - i);
            return i;
        }
        i += len;
    }
    return n;
}

int qp_utf8_append_cp(qp_tok_text *out, uint32_t cp)
{
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | (cp >> 6));
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | (cp >> 12));
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xF0 | (cp >> 18));
        b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return qp_tok_text_append(out, b, n);
}

/* Appends the well-formed characters of s[0..n) with ill-formed subparts
 * replaced; stops before a truncated final character and returns its
 * offset (n when there is none), or -1 out of memory in *fail. */
static size_t append_complete(qp_tok_text *out, const uint8_t *s, size_t n, int *fail)
{
    size_t i = 0, run = 0; /* s[run..i) is well-formed and not yet copied */
    *fail = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t len;
        int r = qp_utf8_decode(s + i, n - i, &cp, &len);
        if (r == QP_UTF8_OK) {
            i += len;
            continue;
        }
        if (qp_tok_text_append(out, s + run, i - run)) {
            *fail = 1;
            return i;
        }
        if (r == QP_UTF8_TRUNCATED)
            return i;
        if (qp_tok_text_append(out, QP_UTF8_REPLACEMENT, 3)) {
            *fail = 1;
            return i;
        }
        i += len;
        run = i;
    }
    if (qp_tok_text_append(out, s + run, i - run))
        *fail = 1;
    return n;
}

int qp_utf8_append_lossy(qp_tok_text *out, const void *s, size_t n)
{
    int fail;
    size_t done = append_complete(out, s, n, &fail);
    if (fail)
        return -1;
    if (done < n && qp_tok_text_append(out, QP_UTF8_REPLACEMENT, 3))
        return -1;
    return 0;
}

void qp_utf8_stream_init(qp_utf8_stream *st)
{
    st->n_held = 0;
}

int qp_utf8_stream_feed(qp_utf8_stream *st, const void *bytes, size_t n, qp_tok_text *out)
{
    const uint8_t *s = bytes;
    /* First settle the held character, one new byte at a time. */
    while (st->n_held && n) {
        st->held[st->n_held++] = *s++;
        n--;
        uint32_t cp;
        size_t len;
        int r = qp_utf8_decode(st->held, st->n_held, &cp, &len);
        if (r == QP_UTF8_TRUNCATED)
            continue;
        if (r == QP_UTF8_OK) {
            if (qp_tok_text_append(out, st->held, len))
                return -1;
            st->n_held = 0;
            break;
        }
        /* The new byte proved the held prefix ill-formed: that prefix is one
         * maximal subpart; the new byte starts afresh. */
        if (qp_tok_text_append(out, QP_UTF8_REPLACEMENT, 3))
            return -1;
        st->n_held = 0;
        s--;
        n++;
    }
    if (!n)
        return 0;
    int fail;
    size_t done = append_complete(out, s, n, &fail);
    if (fail)
        return -1;
    memcpy(st->held, s + done, n - done); /* a truncated tail is at most 3 bytes */
    st->n_held = (unsigned)(n - done);
    return 0;
}

int qp_utf8_stream_finish(qp_utf8_stream *st, qp_tok_text *out)
{
    if (!st->n_held)
        return 0;
    st->n_held = 0;
    return qp_tok_text_append(out, QP_UTF8_REPLACEMENT, 3);
}
