/* task.c - the container's task section, strictly (task.h). */
#include "task.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "json_strict.h"

int task_parse(const char *text, size_t len, const char *name, enum qp_task *out, qp_err *err)
{
    *out = QP_TASK_NONE;
    cJSON *root = cJSON_ParseWithLength(text, len);
    int rc = !cJSON_IsObject(root) ? qp_fail(err, "%s: not a JSON object", name)
                                   : json_refuse_ambiguous(root, text, len, name, err);
    const cJSON *t = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root, "task");
    if (!rc && !cJSON_IsString(t))
        rc = qp_fail(err, "%s: \"task\" must be a string", name);
    else if (!rc && strcmp(t->valuestring, "rerank"))
        rc = qp_fail(err, "%s: task \"%s\" is not known (rerank is)", name, t->valuestring);
    for (const cJSON *k = rc ? NULL : root->child; k && !rc; k = k->next)
        if (strcmp(k->string, "task"))
            rc = qp_fail(err, "%s: unknown key \"%s\"", name, k->string);
    if (!rc)
        *out = QP_TASK_RERANK;
    cJSON_Delete(root);
    return rc;
}

const char *task_json(enum qp_task t)
{
    return t == QP_TASK_RERANK ? "{\"task\": \"rerank\"}\n" : NULL;
}

const char *task_name(enum qp_task t)
{
    return t == QP_TASK_RERANK ? "rerank" : "none";
}

enum qp_task task_of_path(const char *path)
{
    return path && strcasestr(path, "qwen3-reranker") ? QP_TASK_RERANK : QP_TASK_NONE;
}
