/* tok_nfc.c - NFC the way Hugging Face tokenizers computes it.
 *
 * utf8proc knows Unicode 15.0; tokenizers' normalizer knows 9.0. For text
 * assigned by 9.0 the two agree (Unicode's normalization stability), so the
 * only difference is the characters added since that NFC would touch: to
 * tokenizers they are plain starters, opaque to reordering and composition.
 * A starter that composes with nothing cuts NFC in two, so normalizing the
 * text between those characters separately and copying them as they are
 * gives exactly tokenizers' result.
 */
#include <stdlib.h>
#include <utf8proc.h>

#include "tok_internal.h"
#include "tok_unicode_tables.h"
#include "utf8_stream.h"

static int is_barrier(uint32_t c)
{
    size_t lo = 0, hi = sizeof(TOK_NFC_BARRIERS) / sizeof(TOK_NFC_BARRIERS[0]);
    if (c < TOK_NFC_BARRIERS[0][0])
        return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < TOK_NFC_BARRIERS[mid][0])
            hi = mid;
        else if (c > TOK_NFC_BARRIERS[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static int nfc_piece(const char *s, size_t n, qp_tok_text *out, qp_err *err)
{
    if (n == 0)
        return 0;
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0)
        return qp_fail(err, "NFC normalization failed: %s", utf8proc_errmsg(m));
    int r = qp_tok_text_append(out, nfc, (size_t)m);
    free(nfc);
    return r ? qp_fail(err, "out of memory") : 0;
}

int tok_nfc(const char *s, size_t n, qp_tok_text *out, qp_err *err)
{
    size_t done = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len;
        if (qp_utf8_decode((const uint8_t *)s + i, n - i, &cp, &len) != QP_UTF8_OK)
            return qp_fail(err, "NFC: invalid UTF-8 at byte %zu", i);
        if (cp >= 0x300 && is_barrier(cp)) {
            if (nfc_piece(s + done, i - done, out, err) || qp_tok_text_append(out, s + i, len))
                return -1;
            done = i + len;
        }
        i += len;
    }
    return nfc_piece(s + done, n - done, out, err);
}
