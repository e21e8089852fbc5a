/* tok_cli_qpk.c - the tokenizer a .qpk container carries, for `qrun
 * tokenize|detokenize -m MODEL.qpk` (tok_cli.h's model loader). */
#include <stdio.h>
#include <stdlib.h>

#include "qpk.h"
#include "tok_cli.h"

int tok_cli_container_loader(const char *path, qp_tok **out, uint32_t *model_vocab, qp_err *err)
{
    struct qpk_file f;
    if (qpk_open(&f, path, 0, err))
        return -1;
    char *json;
    size_t len;
    int rc = qpk_read_section(&f, QPK_SEC_TOKENIZER, &json, &len, err);
    if (!rc && !json)
        rc = qp_fail(err, "%s: the container carries no tokenizer (pack with a tokenizer.json, or use --tokenizer)",
                     path);
    char name[4200];
    snprintf(name, sizeof name, "%s: tokenizer section", path);
    if (!rc)
        rc = qp_tok_load_buffer(out, json, len, name, err);
    if (!rc && model_vocab)
        *model_vocab = f.cfg.vocab;
    free(json);
    qpk_close(&f);
    return rc;
}
