#include "tok_test_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_json.h"

char *tok_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    qp_tok_text t = {0};
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        ck_assert(qp_tok_text_append(&t, buf, n) == 0);
    fclose(f);
    *len = t.len;
    return t.s;
}

static void parse_case(const char *line, size_t len, tok_case *c, size_t number)
{
    qp_err err = {{0}};
    qp_json j;
    qp_tok_text key = {0};
    qp_json_init(&j, line, len, "case", &err);
    int first = 1, r;
    memset(c, 0, sizeof(*c));
    ck_assert_msg(qp_json_expect(&j, '{', "") == 0, "line %zu: %s", number, err.msg);
    while ((r = qp_json_next_member(&j, &first, &key, "")) == 1) {
        qp_tok_text *dst = NULL;
        if (strcmp(key.s, "name") == 0) {
            qp_tok_text name = {0};
            ck_assert(qp_json_string(&j, &name) == 0);
            snprintf(c->name, sizeof(c->name), "%s", name.s);
            qp_tok_text_free(&name);
            continue;
        }
        if (strcmp(key.s, "text") == 0)
            dst = &c->text;
        else if (strcmp(key.s, "decoded") == 0)
            dst = &c->decoded;
        if (dst) {
            ck_assert_msg(qp_json_string(&j, dst) == 0, "line %zu: %s", number, err.msg);
            ck_assert(qp_tok_text_append(dst, "", 0) == 0); /* non-NULL even when empty */
        } else if (strcmp(key.s, "ids") == 0) {
            ck_assert(qp_json_expect(&j, '[', "") == 0);
            int f2 = 1;
            while ((r = qp_json_next_element(&j, &f2, "")) == 1) {
                int64_t id;
                ck_assert(qp_json_int(&j, 0, INT32_MAX, &id, "id") == 0);
                ck_assert(qp_tok_ids_push(&c->ids, (int32_t)id) == 0);
            }
            ck_assert(r == 0);
        } else if (strcmp(key.s, "skip_special") == 0) {
            c->skip_special = qp_json_peek(&j) == 't';
            ck_assert(qp_json_skip(&j) == 0);
        } else {
            ck_assert(qp_json_skip(&j) == 0);
        }
    }
    ck_assert_msg(r == 0, "line %zu: %s", number, err.msg);
    qp_tok_text_free(&key);
}

tok_case *tok_cases_load(const char *path, size_t *n)
{
    size_t len;
    char *data = tok_read_file(path, &len);
    size_t cap = 64, count = 0, number = 0;
    tok_case *cases = malloc(cap * sizeof(*cases));
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t line_len = nl ? (size_t)(nl - (data + pos)) : len - pos;
        number++;
        if (line_len) {
            if (count == cap)
                cases = realloc(cases, (cap *= 2) * sizeof(*cases));
            parse_case(data + pos, line_len, &cases[count++], number);
        }
        pos += line_len + 1;
    }
    free(data);
    *n = count;
    return cases;
}

void tok_cases_free(tok_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        qp_tok_text_free(&cases[i].text);
        qp_tok_text_free(&cases[i].decoded);
        qp_tok_ids_free(&cases[i].ids);
    }
    free(cases);
}

qp_tok *tok_official(void)
{
    static qp_tok *tok;
    if (!tok) {
        qp_err err = {{0}};
        ck_assert_msg(qp_tok_load_file(&tok, TOK_ASSET, &err) == 0, "%s", err.msg);
    }
    return tok;
}
