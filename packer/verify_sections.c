/* verify_sections.c - what `qpack verify` checks beyond the checksums:
 * every section decoded and its content read the way its user will read it.
 * A container's checksums only say the bytes are those the writer sealed; a
 * forged container can be sealed too. So: tokenizer.json must load with
 * qrun's own loader, tokenizer_config.json must be a JSON object that means
 * one thing to every JSON reader (json_strict.h), the chat template must be
 * UTF-8 text without NUL bytes, the provenance a JSON object, and the
 * generation config what the packer accepts (gen_config.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_config.h"
#include "pooling.h"
#include "task.h"
#include "json_strict.h"
#include "pack.h"
#include "qpk.h"
#include "tokenizer.h"
#include "utf8_stream.h"

/* "PATH: section NAME" for messages */
static void label(char *out, size_t n, const struct qpk_file *f, unsigned kind)
{
    snprintf(out, n, "%s: section %s", f->path, qpk_section_name(kind));
}

static int check_tokenizer(const struct qpk_file *f, const char *text, size_t len, qp_err *err)
{
    char name[4200];
    label(name, sizeof name, f, QPK_SEC_TOKENIZER);
    qp_tok *tok;
    if (qp_tok_load_buffer(&tok, text, len, name, err))
        return -1;
    qp_tok_free(tok);
    return 0;
}

/* A JSON object without a key twice or an escaped NUL (json_strict.h). */
static int check_json_object(const struct qpk_file *f, unsigned kind, const char *text, size_t len, qp_err *err)
{
    char name[4200];
    label(name, sizeof name, f, kind);
    cJSON *root = cJSON_ParseWithLength(text, len);
    int rc = 0;
    if (!root)
        rc = qp_fail(err, "%s is not valid JSON", name);
    else if (!cJSON_IsObject(root))
        rc = qp_fail(err, "%s is JSON but not an object", name);
    else
        rc = json_refuse_ambiguous(root, text, len, name, err);
    cJSON_Delete(root);
    return rc;
}

static int check_generation_config(const struct qpk_file *f, const char *text, size_t len, qp_err *err)
{
    char name[4200];
    label(name, sizeof name, f, QPK_SEC_GENERATION_CONFIG);
    struct qwen3_gen_config g;
    return gen_config_parse(text, len, name, f->cfg.vocab, &g, err);
}

static int check_pooling(const struct qpk_file *f, const char *text, size_t len, qp_err *err)
{
    char name[4200];
    label(name, sizeof name, f, QPK_SEC_POOLING);
    enum qp_pooling mode;
    return pooling_parse(text, len, name, f->cfg.hidden, &mode, err);
}

static int check_task(const struct qpk_file *f, const char *text, size_t len, qp_err *err)
{
    char name[4200];
    label(name, sizeof name, f, QPK_SEC_TASK);
    enum qp_task task;
    return task_parse(text, len, name, &task, err);
}

static int check_text(const struct qpk_file *f, unsigned kind, const char *text, size_t len, qp_err *err)
{
    char name[4200];
    label(name, sizeof name, f, kind);
    const char *nul = memchr(text, 0, len);
    if (nul)
        return qp_fail(err, "%s holds a NUL byte at offset %zu", name, (size_t)(nul - text));
    const char *why = NULL;
    size_t bad = qp_utf8_check(text, len, &why);
    if (bad < len)
        return qp_fail(err, "%s is not UTF-8 at byte offset %zu (%s)", name, bad, why ? why : "ill-formed");
    return 0;
}

static int check_section(const struct qpk_file *f, unsigned kind, qp_err *err)
{
    char *text;
    size_t len;
    if (qpk_read_section(f, kind, &text, &len, err))
        return -1;
    if (!text)
        return 0;
    int rc = 0;
    switch (kind) {
    case QPK_SEC_TOKENIZER: rc = check_tokenizer(f, text, len, err); break;
    case QPK_SEC_TOKENIZER_CONFIG: rc = check_json_object(f, kind, text, len, err); break;
    case QPK_SEC_CHAT_TEMPLATE: rc = check_text(f, kind, text, len, err); break;
    case QPK_SEC_PROVENANCE: rc = check_json_object(f, kind, text, len, err); break;
    case QPK_SEC_GENERATION_CONFIG: rc = check_generation_config(f, text, len, err); break;
    case QPK_SEC_POOLING: rc = check_pooling(f, text, len, err); break;
    case QPK_SEC_TASK: rc = check_task(f, text, len, err); break;
    default: break;   /* the config: checked field by field at open */
    }
    free(text);
    return rc;
}

int verify_sections(const struct qpk_file *f, qp_err *err)
{
    for (uint32_t i = 0; i < f->n_sections; i++)
        if (check_section(f, f->sections[i].kind, err))
            return -1;
    return 0;
}
