/* generate.c - the smallest program on libqpack: greedy text from a prompt.
 *
 *   cc generate.c $(pkg-config --cflags --libs qpack) -o generate
 *   ./generate model.qpk "Once upon a time" 32 [emu]
 */
#include <qpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const qpack_error *e)
{
    fprintf(stderr, "generate: %s\n", e->message);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: generate MODEL.qpk PROMPT [N] [emu]\n");
        return 2;
    }
    int n_new = argc > 3 ? atoi(argv[3]) : 32;
    qpack_model_params mp = qpack_model_default_params();
    if (argc > 4 && !strcmp(argv[4], "emu"))
        mp.backend = QPACK_BACKEND_EMU;        /* the host twin: no privilege needed */
    qpack_error e;
    qpack_model *m;
    qpack_session *s;
    qpack_decoder *d;
    int32_t *ids;
    size_t n, len;
    if (qpack_model_open(&m, argv[1], &mp, &e) || qpack_session_new(&s, m, &e) ||
        qpack_tokenize(qpack_model_tokenizer(m), argv[2], strlen(argv[2]), &ids, &n, &e) ||
        qpack_decoder_new(&d, qpack_model_tokenizer(m), true, &e) || qpack_feed(s, ids, n, &e))
        return fail(&e);
    for (int i = 0; i < n_new; i++) {
        int32_t next = qpack_argmax(s);
        if (qpack_token_is_end(m, next))
            break;
        const char *text = qpack_decoder_push(d, next, &len);
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        if (qpack_feed(s, &next, 1, &e))
            return fail(&e);
    }
    const char *tail = qpack_decoder_finish(d, true, &len);
    fwrite(tail, 1, len, stdout);
    putchar('\n');
    free(ids);
    qpack_decoder_free(d);
    qpack_session_free(s);
    qpack_model_free(m);
    return 0;
}
