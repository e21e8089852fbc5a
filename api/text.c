/* text.c - tokens and text for include/qpack.h: the tokenizer, the
 * streaming decoder, over tokenizer/ (the chat template: chat_template.c). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "utf8_stream.h"

struct qpack_tokenizer *qp_lib_tokenizer_wrap(qp_tok *tok)
{
    struct qpack_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        qp_tok_free(tok);
        return NULL;
    }
    t->tok = tok;
    pthread_mutex_init(&t->encode_mu, NULL);
    return t;
}

size_t qpack_utf8_check(const char *text, size_t len, const char **why)
{
    return qp_utf8_check(text, len, why);
}

int qpack_tokenizer_load(qpack_tokenizer **out, const char *path, qpack_error *err)
{
    *out = NULL;
    qp_tok *tok;
    qp_err e = {{0}};
    if (qp_tok_load_file(&tok, path, &e))
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    *out = qp_lib_tokenizer_wrap(tok);
    return *out ? QPACK_OK : qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
}

void qpack_tokenizer_free(qpack_tokenizer *t)
{
    if (!t)
        return;
    qp_tok_free(t->tok);
    pthread_mutex_destroy(&t->encode_mu);
    free(t);
}

int qpack_tokenize(const qpack_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                   qpack_error *err)
{
    *ids = NULL;
    *n = 0;
    if (!t)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no tokenizer (the container carries none)");
    qp_tok_ids out = {0};
    qp_err e = {{0}};
    struct qpack_tokenizer *w = (struct qpack_tokenizer *)t;   /* the lock is not part of its value */
    pthread_mutex_lock(&w->encode_mu);
    int rc = qp_tok_encode(w->tok, text, len, &out, &e);
    pthread_mutex_unlock(&w->encode_mu);
    if (rc) {
        qp_tok_ids_free(&out);
        return qp_lib_error(err, &e, QPACK_ERR_ARGUMENT);
    }
    *ids = out.v;
    *n = out.len;
    return QPACK_OK;
}

const char *qpack_token_bytes(const qpack_tokenizer *t, int32_t id, size_t *len)
{
    *len = 0;
    return t ? qp_tok_token_bytes(t->tok, id, len) : NULL;
}

int qpack_detokenize(const qpack_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text,
                     size_t *len, qpack_error *err)
{
    *text = NULL;
    *len = 0;
    if (!t)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no tokenizer (the container carries none)");
    qp_tok_text out = {0};
    qp_tok_stream st;
    qp_tok_stream_init(&st, t->tok, skip_special ? QP_TOK_SKIP_SPECIAL : 0);
    qp_err e = {{0}};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (qp_tok_token_string(t->tok, ids[i], NULL))   /* padding ids have no text */
            rc = qp_tok_stream_push(&st, ids[i], &out, &e);
    rc = rc || qp_tok_stream_finish(&st, &out, &e) || qp_tok_text_append(&out, "", 0);
    if (rc) {
        qp_tok_text_free(&out);
        return qp_lib_error(err, &e, QPACK_ERR_MEMORY);
    }
    *text = out.s;
    *len = out.len;
    return QPACK_OK;
}

struct qpack_decoder {
    qp_tok_stream st;
    const qp_tok *tok;
    int flags;
    qp_tok_text out;
};

int qpack_decoder_new(qpack_decoder **out, const qpack_tokenizer *t, bool skip_special, qpack_error *err)
{
    *out = NULL;
    if (!t)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no tokenizer (the container carries none)");
    qpack_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    d->tok = t->tok;
    d->flags = skip_special ? QP_TOK_SKIP_SPECIAL : 0;
    qp_tok_stream_init(&d->st, d->tok, d->flags);
    *out = d;
    return QPACK_OK;
}

void qpack_decoder_free(qpack_decoder *d)
{
    if (!d)
        return;
    qp_tok_text_free(&d->out);
    free(d);
}

const char *qpack_decoder_push(qpack_decoder *d, int32_t id, size_t *len)
{
    d->out.len = 0;
    qp_err ignore;
    if (qp_tok_token_string(d->tok, id, NULL) && qp_tok_stream_push(&d->st, id, &d->out, &ignore))
        d->out.len = 0;
    if (qp_tok_text_append(&d->out, "", 0))
        d->out.len = 0;
    *len = d->out.len;
    return d->out.s ? d->out.s : "";
}

const char *qpack_decoder_finish(qpack_decoder *d, bool replace, size_t *len)
{
    d->out.len = 0;
    qp_err ignore;
    if (replace && qp_tok_stream_finish(&d->st, &d->out, &ignore))
        d->out.len = 0;
    qp_tok_stream_init(&d->st, d->tok, d->flags);
    if (qp_tok_text_append(&d->out, "", 0))
        d->out.len = 0;
    *len = d->out.len;
    return d->out.s ? d->out.s : "";
}
