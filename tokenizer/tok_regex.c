/* tok_regex.c - the pre-tokenizer's regex, from Oniguruma's dialect to PCRE2's.
 *
 * tokenizers compiles Split patterns with Oniguruma (Ruby syntax). PCRE2 reads
 * almost all of it the same way; the differences that change matches are
 * rewritten here:
 *   \s \S   Oniguruma: Unicode White_Space. PCRE2 with UCP adds U+180E, so
 *           both become \p{White_Space} / \P{White_Space}.
 *   \d \D   Decimal_Number: \p{Nd} / \P{Nd} (spelled out, same meaning).
 *   \w      Oniguruma: Letter, Mark, Decimal_Number, Connector_Punctuation;
 *           PCRE2 10.42 UCP: L, N and '_' -> [\p{L}\p{M}\p{Nd}\p{Pc}].
 *   \h \H   Oniguruma: hex digit (PCRE2: horizontal space) -> [0-9a-fA-F].
 *   \uHHHH  -> \x{HHHH}.   \p{^X} -> \P{X}.
 *   (?m)    Ruby's m is PCRE2's s (dot matches newline); Ruby's ^ and $
 *           always work per line, hence PCRE2_MULTILINE.
 * Refused with an error rather than guessed: \W and \H inside a class,
 * nested classes and && intersections.
 *
 *   \p{L} \p{N} (and \pL \pN, \P{L} \P{N} outside classes): PCRE2 10.42's
 *           tables are Unicode 14, tokenizers' Oniguruma's are Unicode 16;
 *           the letters and numbers assigned since (tok_unicode_tables.h,
 *           taken from the oracle) are added to the class.
 * Other properties (\p{Lu}, \p{Han}...) and \d, \w's digits still follow
 * PCRE2's Unicode version.
 */
#include <stdio.h>
#include <string.h>

#include "tok_internal.h"
#include "tok_unicode_tables.h"

static const char WORD_SET[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
static const char HEX_SET[] = "0-9a-fA-F";

static int put(qp_tok_text *out, const char *s)
{
    return qp_tok_text_append(out, s, strlen(s));
}

/* \p{L} or \p{N} with tokenizers' newer letters/numbers, as class items. */
static int put_property_items(qp_tok_text *out, char which)
{
    const uint32_t(*extra)[2] = which == 'L' ? TOK_EXTRA_LETTERS : TOK_EXTRA_NUMBERS;
    size_t n = which == 'L' ? sizeof(TOK_EXTRA_LETTERS) / sizeof(TOK_EXTRA_LETTERS[0])
                            : sizeof(TOK_EXTRA_NUMBERS) / sizeof(TOK_EXTRA_NUMBERS[0]);
    char buf[40];
    snprintf(buf, sizeof(buf), "\\p{%c}", which);
    if (put(out, buf))
        return -1;
    for (size_t i = 0; i < n; i++) {
        snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", extra[i][0], extra[i][1]);
        if (put(out, buf))
            return -1;
    }
    return 0;
}

/* Writes \p{L} / \p{N} (negate: \P), extended, in or out of a class.
 * Returns 1 when a negated property inside a class has to stay as it is. */
static int put_property(qp_tok_text *out, char which, int negate, int in_class)
{
    if (in_class)
        return negate ? 1 : put_property_items(out, which);
    return put(out, negate ? "[^" : "[") || put_property_items(out, which) || put(out, "]") ? -1 : 0;
}

/* Length of a \p{L}, \pL, \p{N} or \pN at p (p[0] == '\\'), else 0. */
static size_t letter_or_number(const char *p, const char *end, char *which)
{
    if (end - p >= 5 && p[2] == '{' && (p[3] == 'L' || p[3] == 'N') && p[4] == '}') {
        *which = p[3];
        return 5;
    }
    if (end - p >= 3 && (p[2] == 'L' || p[2] == 'N')) {
        *which = p[2];
        return 3;
    }
    return 0;
}

/* Writes set (class contents) as a class outside brackets, as-is inside. */
static int put_set(qp_tok_text *out, const char *set, int negate, int in_class)
{
    if (in_class)
        return put(out, set);
    return put(out, negate ? "[^" : "[") || put(out, set) || put(out, "]");
}

/* Length of the UTF-8 character starting at s[0] (the pattern was decoded
 * from JSON, so it is well-formed). */
static size_t char_len(const char *s)
{
    unsigned char c = (unsigned char)*s;
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Translates the escape at p[0] == '\\'; returns bytes consumed, or 0 on error. */
static size_t escape(const char *p, const char *end, int in_class, qp_tok_text *out,
                     const char *where, qp_err *err)
{
    if (p + 1 >= end) {
        qp_fail(err, "%s: the pattern ends with a backslash", where);
        return 0;
    }
    char c = p[1];
    int r = 0;
    switch (c) {
    case 's': r = put(out, "\\p{White_Space}"); break;
    case 'S': r = put(out, "\\P{White_Space}"); break;
    case 'd': r = put(out, "\\p{Nd}"); break;
    case 'D': r = put(out, "\\P{Nd}"); break;
    case 'w':
        /* letters extended like \p{L} */
        r = (!in_class && put(out, "[")) || put_property_items(out, 'L') ||
            put(out, WORD_SET + 5) || (!in_class && put(out, "]"));
        break;
    case 'h': r = put_set(out, HEX_SET, 0, in_class); break;
    case 'W':
    case 'H':
        if (in_class) {
            qp_fail(err, "%s: \\%c inside a character class is not supported", where, c);
            return 0;
        }
        r = put_set(out, c == 'W' ? WORD_SET : HEX_SET, 1, 0);
        break;
    case 'u': {
        for (int i = 2; i < 6; i++)
            if (p + i >= end || !strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) {
                qp_fail(err, "%s: \\u needs four hex digits", where);
                return 0;
            }
        char buf[16] = "\\x{";
        memcpy(buf + 3, p + 2, 4);
        memcpy(buf + 7, "}", 2);
        r = put(out, buf);
        if (r)
            break;
        return 6;
    }
    case 'p':
    case 'P': {
        char which;
        size_t n = letter_or_number(p, end, &which);
        if (n) {
            int k = put_property(out, which, c == 'P', in_class);
            if (k < 0) {
                r = -1;
                break;
            }
            if (k == 0)
                return n;
        }
        if (p + 3 < end && p[2] == '{' && p[3] == '^') { /* \p{^X} is \P{X} */
            r = put(out, c == 'p' ? "\\P{" : "\\p{");
            if (r)
                break;
            return 4;
        }
        r = qp_tok_text_append(out, p, 2);
        break;
    }
    default:
        r = qp_tok_text_append(out, p, 1 + char_len(p + 1));
        if (r)
            break;
        return 1 + char_len(p + 1);
    }
    if (r) {
        qp_fail(err, "out of memory");
        return 0;
    }
    return 2;
}

int tok_regex_translate(const char *pattern, size_t len, qp_tok_text *out, const char *where,
                        qp_err *err)
{
    const char *p = pattern, *end = pattern + len;
    int in_class = 0;
    while (p < end) {
        if (*p == '\\') {
            size_t n = escape(p, end, in_class, out, where, err);
            if (!n)
                return -1;
            p += n;
            continue;
        }
        size_t n = char_len(p);
        if (in_class) {
            if (*p == '[') {
                /* POSIX [:name:] is the same in both; any other [ nests */
                const char *close = p[1] == ':' ? strstr(p + 2, ":]") : NULL;
                if (!close || close >= end)
                    return qp_fail(err, "%s: nested character classes are not supported", where);
                n = (size_t)(close + 2 - p);
            } else if (*p == '&' && p + 1 < end && p[1] == '&') {
                return qp_fail(err, "%s: class intersection && is not supported", where);
            } else if (*p == ']') {
                in_class = 0;
            }
        } else if (*p == '[') {
            in_class = 1;
            /* a ']' first in the class (after an optional '^') is literal */
            size_t k = 1;
            if (p + k < end && p[k] == '^')
                k++;
            if (p + k < end && p[k] == ']')
                k++;
            n = k;
        } else if (*p == '(' && p + 2 < end && p[1] == '?') {
            /* inline options: (?imx-imx) or (?imx-imx:...) with Ruby's m */
            const char *q = p + 2;
            while (q < end && strchr("imx-", *q) && *q)
                q++;
            if (q > p + 2 && q < end && (*q == ':' || *q == ')')) {
                for (const char *f = p; f <= q; f++)
                    if (qp_tok_text_append(out, *f == 'm' && f > p + 1 ? "s" : f, 1))
                        return qp_fail(err, "out of memory");
                p = q + 1;
                continue;
            }
        }
        if (qp_tok_text_append(out, p, n))
            return qp_fail(err, "out of memory");
        p += n;
    }
    if (in_class)
        return qp_fail(err, "%s: unterminated character class", where);
    return 0;
}

int tok_regex_compile(qp_tok *tok, const char *pattern, size_t len, int literal,
                      const char *where, pcre2_code **out, qp_err *err)
{
    char place[160];
    snprintf(place, sizeof(place), "%s: %s", tok->name, where);
    qp_tok_text pcre = {0};
    uint32_t options = PCRE2_UTF;
    if (literal) {
        options |= PCRE2_LITERAL;
        if (qp_tok_text_append(&pcre, pattern, len))
            return qp_fail(err, "%s: out of memory", place);
    } else {
        options |= PCRE2_UCP | PCRE2_MULTILINE;
        if (tok_regex_translate(pattern, len, &pcre, place, err)) {
            qp_tok_text_free(&pcre);
            return -1;
        }
    }
    int code;
    PCRE2_SIZE at;
    *out = pcre2_compile((PCRE2_SPTR)pcre.s, pcre.len, options, &code, &at, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        int r = qp_fail(err, "%s: bad regex /%.*s/ (as PCRE2: %s, at offset %zu)", place,
                        (int)(len > 120 ? 120 : len), pattern, (const char *)msg, (size_t)at);
        qp_tok_text_free(&pcre);
        return r;
    }
    qp_tok_text_free(&pcre);
    /* JIT is ~10x faster on this pattern; the interpreter still works without it */
    (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    if (!tok->match && !(tok->match = pcre2_match_data_create(1, NULL)))
        return qp_fail(err, "%s: out of memory", place);
    if (!tok->match_ctx) {
        /* Long runs of one class backtrack through the JIT stack: give it
         * room to grow (address space only; pages are touched as used). */
        tok->match_ctx = pcre2_match_context_create(NULL);
        tok->jit_stack = pcre2_jit_stack_create(32 << 10, 16 << 20, NULL);
        if (!tok->match_ctx || !tok->jit_stack)
            return qp_fail(err, "%s: out of memory", place);
        pcre2_jit_stack_assign(tok->match_ctx, NULL, tok->jit_stack);
    }
    return 0;
}
