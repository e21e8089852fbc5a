/* json_strict.c - repeated keys and escaped NULs (see json_strict.h). */
#include "json_strict.h"

#include <stdlib.h>
#include <string.h>

/* Keys from untrusted files are shown cut to this many bytes, control
 * characters replaced, so that a message stays one short line. */
#define KEY_SHOWN 80

static const char *show_key(const char *key, char out[KEY_SHOWN + 4])
{
    size_t n = 0;
    for (; key[n] && n < KEY_SHOWN; n++)
        out[n] = (unsigned char)key[n] < 0x20 || key[n] == 0x7f ? '?' : key[n];
    if (key[n])
        memcpy(out + n, "...", 3), n += 3;
    out[n] = 0;
    return out;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* where: the key of the object (NULL for the top level). Sorted, so that an
 * object of many keys costs n log n. */
static int check_object(const cJSON *obj, const char *where, const char *name, qp_err *err)
{
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        n++;
    if (n < 2)
        return 0;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys)
        return qp_fail(err, "%s: out of memory", name);
    n = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        keys[n++] = c->string ? c->string : "";
    qsort(keys, n, sizeof *keys, cmp_key);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            char k[KEY_SHOWN + 4], w[KEY_SHOWN + 4];
            rc = where ? qp_fail(err, "%s: key \"%s\" appears twice in object \"%s\" (JSON readers disagree "
                                      "on which value counts: Python's json takes the last)", name,
                                 show_key(keys[i], k), show_key(where, w))
                       : qp_fail(err, "%s: key \"%s\" appears twice (JSON readers disagree on which value "
                                      "counts: Python's json takes the last)", name, show_key(keys[i], k));
        }
    free(keys);
    return rc;
}

static int walk(const cJSON *v, const char *where, const char *name, qp_err *err)
{
    if (cJSON_IsObject(v) && check_object(v, where, name, err))
        return -1;
    for (const cJSON *c = v->child; c; c = c->next)
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) &&
            walk(c, cJSON_IsObject(v) ? c->string : where, name, err))
            return -1;
    return 0;
}

int json_refuse_duplicate_keys(const cJSON *root, const char *name, qp_err *err)
{
    return root ? walk(root, root->string, name, err) : 0;
}

bool json_has_escaped_nul(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && n - i >= 6 && memcmp(s + i + 2, "0000", 4) == 0)
            return true;
        i++; /* skip the escaped character */
    }
    return false;
}

/* the length of the well-formed UTF-8 sequence at s (n bytes left), 0 if none */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!k || k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* overlong three- and four-byte forms, surrogates, past U+10FFFF */
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return k;
}

size_t json_find_unreadable(const char *text, size_t len, const char **why)
{
    const unsigned char *s = (const unsigned char *)text;
    bool in_string = false;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_len(s + i, len - i);
        if (!k) {
            if (why)
                *why = "not UTF-8";
            return i;
        }
        if (in_string && s[i] < 0x20) {
            if (why)
                *why = "a control character inside a string (escape it)";
            return i;
        }
        if (s[i] == '"')
            in_string = !in_string;
        else if (s[i] == '\\' && in_string)
            k = 2;      /* the escaped character, never a quote that ends the string */
        i += k;
    }
    return len;
}

int json_refuse_ambiguous(const cJSON *root, const char *text, size_t len, const char *name, qp_err *err)
{
    const char *why;
    size_t at = json_find_unreadable(text, len, &why);
    if (at < len)
        return qp_fail(err, "%s: byte %zu: %s (strict JSON readers, Python's among them, refuse it)", name, at, why);
    if (json_has_escaped_nul(text, len))
        return qp_fail(err, "%s: contains an escaped NUL (\\u0000), which JSON readers take differently "
                       "(cJSON ends the string there)", name);
    return json_refuse_duplicate_keys(root, name, err);
}

cJSON *json_parse_object(const char *text, size_t len, const char *name, qp_err *err)
{
    cJSON *root = cJSON_ParseWithLength(text, len);
    int rc = !cJSON_IsObject(root) ? qp_fail(err, "%s: not a JSON object", name)
                                   : json_refuse_ambiguous(root, text, len, name, err);
    if (!rc)
        return root;
    cJSON_Delete(root);
    return NULL;
}
