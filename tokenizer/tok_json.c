#include "tok_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "utf8_stream.h"

void qp_json_init(qp_json *j, const char *text, size_t len, const char *name, qp_err *err)
{
    j->start = j->p = text;
    j->end = text + len;
    j->name = name;
    j->err = err;
}

int qp_json_fail(qp_json *j, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return qp_fail(j->err, "%s: byte %zu: %s", j->name, (size_t)(j->p - j->start), what);
}

int qp_json_peek(qp_json *j)
{
    while (j->p < j->end) {
        char c = *j->p;
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            return (unsigned char)c;
        j->p++;
    }
    return -1;
}

/* Names the byte c (or the end, c < 0) for a message, in buf. */
typedef struct { char s[16]; } what_buf;
static const char *describe_in(what_buf *buf, int c)
{
    if (c < 0)
        return "end of input";
    if (c >= 0x20 && c < 0x7F)
        snprintf(buf->s, sizeof(buf->s), "'%c'", c);
    else
        snprintf(buf->s, sizeof(buf->s), "byte 0x%02X", c);
    return buf->s;
}
#define describe(c) describe_in(&(what_buf){{0}}, (c))

int qp_json_expect(qp_json *j, char c, const char *ctx)
{
    int got = qp_json_peek(j);
    if (got != (unsigned char)c)
        return qp_json_fail(j, "expected '%c' %s, found %s", c, ctx, describe(got));
    j->p++;
    return 0;
}

static int hex4(qp_json *j, uint32_t *v)
{
    if (j->end - j->p < 4)
        return qp_json_fail(j, "truncated \\u escape");
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char c = j->p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return qp_json_fail(j, "bad hex digit in \\u escape");
        x = x * 16 + (uint32_t)d;
    }
    j->p += 4;
    *v = x;
    return 0;
}

/* Cursor after "\u": reads one escaped code point, pairing surrogates. */
static int unicode_escape(qp_json *j, uint32_t *cp)
{
    uint32_t hi = 0;
    if (hex4(j, &hi))
        return -1;
    if (hi >= 0xDC00 && hi <= 0xDFFF)
        return qp_json_fail(j, "lone low surrogate \\u%04X", hi);
    if (hi < 0xD800 || hi > 0xDBFF) {
        *cp = hi;
        return 0;
    }
    uint32_t lo = 0;
    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
        return qp_json_fail(j, "lone high surrogate \\u%04X", hi);
    j->p += 2;
    if (hex4(j, &lo))
        return -1;
    if (lo < 0xDC00 || lo > 0xDFFF)
        return qp_json_fail(j, "high surrogate \\u%04X not followed by a low one", hi);
    *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    return 0;
}

static int oom(qp_json *j)
{
    return qp_json_fail(j, "out of memory");
}

int qp_json_string(qp_json *j, qp_tok_text *out)
{
    if (qp_json_expect(j, '"', "to start a string"))
        return -1;
    for (;;) {
        /* copy a run of plain bytes at once */
        const char *run = j->p;
        while (j->p < j->end) {
            unsigned char c = (unsigned char)*j->p;
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
                break;
            j->p++;
        }
        if (out && j->p > run && qp_tok_text_append(out, run, (size_t)(j->p - run)))
            return oom(j);
        if (j->p >= j->end)
            return qp_json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            /* even "" leaves out a valid, NUL-terminated buffer */
            return out && qp_tok_text_append(out, "", 0) ? oom(j) : 0;
        }
        if (c < 0x20)
            return qp_json_fail(j, "raw control character 0x%02X in string", c);
        if (c >= 0x80) {
            uint32_t cp;
            size_t len;
            if (qp_utf8_decode((const uint8_t *)j->p, (size_t)(j->end - j->p), &cp, &len) != QP_UTF8_OK)
                return qp_json_fail(j, "invalid UTF-8 in string");
            if (out && qp_tok_text_append(out, j->p, len))
                return oom(j);
            j->p += len;
            continue;
        }
        /* backslash */
        j->p++;
        if (j->p >= j->end)
            return qp_json_fail(j, "unterminated string");
        char e = *j->p++;
        const char *simple = NULL;
        switch (e) {
        case '"': simple = "\""; break;
        case '\\': simple = "\\"; break;
        case '/': simple = "/"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'n': simple = "\n"; break;
        case 'r': simple = "\r"; break;
        case 't': simple = "\t"; break;
        case 'u': {
            uint32_t cp = 0;
            if (unicode_escape(j, &cp))
                return -1;
            if (out && qp_utf8_append_cp(out, cp))
                return oom(j);
            continue;
        }
        default:
            j->p--;
            return qp_json_fail(j, "bad escape \\%c", e);
        }
        if (out && qp_tok_text_append(out, simple, 1))
            return oom(j);
    }
}

/* Scans the JSON number grammar; *is_int tells whether it had no fraction/exponent. */
static int scan_number(qp_json *j, int *is_int)
{
    const char *p = j->p;
    *is_int = 1;
    if (p < j->end && *p == '-')
        p++;
    if (p >= j->end || *p < '0' || *p > '9')
        return qp_json_fail(j, "expected a number");
    if (*p == '0')
        p++;
    else
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    if (p < j->end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= j->end || *p < '0' || *p > '9')
            return qp_json_fail(j, "expected digits after '.'");
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < j->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= j->end || *p < '0' || *p > '9')
            return qp_json_fail(j, "expected digits in exponent");
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    }
    j->p = p;
    return 0;
}

int qp_json_int(qp_json *j, int64_t lo, int64_t hi, int64_t *v, const char *ctx)
{
    int c = qp_json_peek(j);
    if (c != '-' && (c < '0' || c > '9'))
        return qp_json_fail(j, "%s: expected an integer, found %s", ctx, describe(c));
    const char *start = j->p;
    int is_int;
    if (scan_number(j, &is_int))
        return -1;
    if (!is_int) {
        j->p = start;
        return qp_json_fail(j, "%s: expected an integer, found a fraction or exponent", ctx);
    }
    int neg = *start == '-';
    int64_t x = 0;
    for (const char *p = start + neg; p < j->p; p++) {
        if (x > (INT64_MAX - 9) / 10) {
            j->p = start;
            return qp_json_fail(j, "%s: integer out of range", ctx);
        }
        x = x * 10 + (*p - '0');
    }
    if (neg)
        x = -x;
    if (x < lo || x > hi) {
        j->p = start;
        return qp_json_fail(j, "%s: %lld is outside [%lld, %lld]", ctx, (long long)x,
                            (long long)lo, (long long)hi);
    }
    *v = x;
    return 0;
}

static int literal(qp_json *j, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
        return qp_json_fail(j, "expected a value");
    j->p += n;
    return 0;
}

static int skip_depth(qp_json *j, int depth)
{
    if (depth > QP_JSON_MAX_DEPTH)
        return qp_json_fail(j, "nesting deeper than %d", QP_JSON_MAX_DEPTH);
    int c = qp_json_peek(j);
    int first = 1, r, is_int;
    switch (c) {
    case '{': {
        j->p++;
        qp_tok_text key = {0};
        while ((r = qp_json_next_member(j, &first, &key, "in object")) == 1)
            if (skip_depth(j, depth + 1)) {
                r = -1;
                break;
            }
        qp_tok_text_free(&key);
        return r < 0 ? -1 : 0;
    }
    case '[':
        j->p++;
        while ((r = qp_json_next_element(j, &first, "in array")) == 1)
            if (skip_depth(j, depth + 1))
                return -1;
        return r < 0 ? -1 : 0;
    case '"':
        return qp_json_string(j, NULL); /* checks it, keeps nothing */
    case 't':
        return literal(j, "true");
    case 'f':
        return literal(j, "false");
    case 'n':
        return literal(j, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return scan_number(j, &is_int);
        return qp_json_fail(j, "expected a value, found %s", describe(c));
    }
}

int qp_json_skip(qp_json *j)
{
    return skip_depth(j, 0);
}

int qp_json_next_member(qp_json *j, int *first, qp_tok_text *key, const char *ctx)
{
    int c = qp_json_peek(j);
    if (c == '}') {
        j->p++;
        return 0;
    }
    if (!*first) {
        if (c != ',')
            return qp_json_fail(j, "expected ',' or '}' %s, found %s", ctx, describe(c));
        j->p++;
        c = qp_json_peek(j);
    }
    if (c != '"')
        return qp_json_fail(j, "expected a key string %s, found %s", ctx, describe(c));
    *first = 0;
    key->len = 0;
    if (qp_json_string(j, key))
        return -1;
    if (qp_json_expect(j, ':', "after an object key"))
        return -1;
    return 1;
}

int qp_json_next_element(qp_json *j, int *first, const char *ctx)
{
    int c = qp_json_peek(j);
    if (c == ']' && *first) {
        j->p++;
        return 0;
    }
    if (!*first) {
        if (c == ']') {
            j->p++;
            return 0;
        }
        if (c != ',')
            return qp_json_fail(j, "expected ',' or ']' %s, found %s", ctx, describe(c));
        j->p++;
        c = qp_json_peek(j);
        if (c == ']')
            return qp_json_fail(j, "trailing comma %s", ctx);
    }
    *first = 0;
    return 1;
}

int qp_json_end(qp_json *j)
{
    int c = qp_json_peek(j);
    if (c >= 0)
        return qp_json_fail(j, "unexpected %s after the JSON value", describe(c));
    return 0;
}

int qp_json_append_string(qp_tok_text *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (qp_tok_text_append(out, "\"", 1))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (qp_tok_text_append(out, s + run, i - run))
            return -1;
        char esc[7] = {'\\', 0};
        size_t len = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            len = 6;
        }
        if (qp_tok_text_append(out, esc, len))
            return -1;
        run = i + 1;
    }
    if (qp_tok_text_append(out, s + run, n - run))
        return -1;
    return qp_tok_text_append(out, "\"", 1);
}
