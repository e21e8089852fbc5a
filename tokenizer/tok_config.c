/* tok_config.c - the small parts of tokenizer.json, checked field by field:
 * normalizer, pre_tokenizer, post_processor, decoder, model options, and
 * the added tokens. Whatever this code does not implement is refused with
 * the field's name: better no tokenizer than a subtly different one. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "utf8_stream.h"

static const char *type_of(const cJSON *v)
{
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

/* The "type" string of a component object. */
static int component_type(const qp_tok *tok, const cJSON *v, const char *where, const char **type,
                          qp_err *err)
{
    if (!cJSON_IsObject(v))
        return qp_fail(err, "%s: %s must be an object, not %s", tok->name, where, type_of(v));
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!cJSON_IsString(t))
        return qp_fail(err, "%s: %s has no \"type\" string", tok->name, where);
    *type = t->valuestring;
    return 0;
}

/* A boolean field; missing means dflt (required: dflt < 0). */
static int get_bool(const qp_tok *tok, const cJSON *obj, const char *key, int dflt,
                    const char *where, int *out, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        if (dflt < 0)
            return qp_fail(err, "%s: %s: missing \"%s\"", tok->name, where, key);
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return qp_fail(err, "%s: %s.%s must be a boolean, not %s", tok->name, where, key, type_of(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int check_normalizer(qp_tok *tok, const cJSON *n, const char *where, qp_err *err)
{
    if (!n || cJSON_IsNull(n))
        return 0;
    const char *type;
    if (component_type(tok, n, where, &type, err))
        return -1;
    if (strcmp(type, "NFC") == 0) {
        tok->nfc = 1;
        return 0;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list))
            return qp_fail(err, "%s: %s.normalizers must be an array", tok->name, where);
        const cJSON *item;
        int i = 0;
        cJSON_ArrayForEach(item, list) {
            char w[64];
            snprintf(w, sizeof(w), "%s.normalizers[%d]", where, i++);
            if (check_normalizer(tok, item, w, err))
                return -1;
        }
        return 0;
    }
    return qp_fail(err, "%s: %s: type \"%s\" is not supported (only NFC)", tok->name, where, type);
}

/* GPT-2's split, which ByteLevel applies itself when "use_regex" is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_split(qp_tok *tok, const char *pattern, size_t len, int literal, const char *where,
                     qp_err *err)
{
    if (tok->n_splits == QP_TOK_MAX_SPLITS)
        return qp_fail(err, "%s: %s: more than %d splitting steps", tok->name, where,
                       QP_TOK_MAX_SPLITS);
    return tok_regex_compile(tok, pattern, len, literal, where, &tok->split_re[tok->n_splits++], err);
}

static int check_split(qp_tok *tok, const cJSON *p, const char *where, qp_err *err)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
    int invert;
    if (get_bool(tok, p, "invert", 0, where, &invert, err))
        return -1;
    if (invert)
        return qp_fail(err, "%s: %s.invert = true is not supported", tok->name, where);
    if (!cJSON_IsString(beh))
        return qp_fail(err, "%s: %s.behavior must be a string", tok->name, where);
    if (strcmp(beh->valuestring, "Isolated") != 0)
        return qp_fail(err, "%s: %s.behavior \"%s\" is not supported (only Isolated)", tok->name,
                       where, beh->valuestring);
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
    if (!cJSON_IsObject(pat) || (!cJSON_IsString(re) && !cJSON_IsString(str)))
        return qp_fail(err, "%s: %s.pattern must be {\"Regex\": \"...\"} or {\"String\": \"...\"}",
                       tok->name, where);
    const char *s = cJSON_IsString(re) ? re->valuestring : str->valuestring;
    char w[96];
    snprintf(w, sizeof(w), "%s.pattern", where);
    return add_split(tok, s, strlen(s), !cJSON_IsString(re), w, err);
}

static int check_byte_level(qp_tok *tok, const cJSON *p, const char *where, int *use_regex,
                            qp_err *err)
{
    int prefix, trim;
    if (get_bool(tok, p, "add_prefix_space", -1, where, &prefix, err) ||
        get_bool(tok, p, "trim_offsets", 1, where, &trim, err) ||
        get_bool(tok, p, "use_regex", 1, where, use_regex, err))
        return -1;
    if (prefix)
        return qp_fail(err, "%s: %s.add_prefix_space = true is not supported", tok->name, where);
    return 0;
}

/* Flattens the pre-tokenizer into regex splits; exactly one ByteLevel, last. */
static int check_pre_tokenizer(qp_tok *tok, const cJSON *p, const char *where, int *byte_level,
                               qp_err *err)
{
    const char *type;
    if (component_type(tok, p, where, &type, err))
        return -1;
    if (*byte_level)
        return qp_fail(err, "%s: %s comes after ByteLevel, which must be the last step", tok->name,
                       where);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return qp_fail(err, "%s: %s.pretokenizers must be an array", tok->name, where);
        const cJSON *item;
        int i = 0;
        cJSON_ArrayForEach(item, list) {
            char w[96];
            snprintf(w, sizeof(w), "%s.pretokenizers[%d]", where, i++);
            if (check_pre_tokenizer(tok, item, w, byte_level, err))
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0)
        return check_split(tok, p, where, err);
    if (strcmp(type, "ByteLevel") == 0) {
        int use_regex;
        if (check_byte_level(tok, p, where, &use_regex, err))
            return -1;
        *byte_level = 1;
        return use_regex ? add_split(tok, GPT2_PATTERN, sizeof(GPT2_PATTERN) - 1, 0, where, err) : 0;
    }
    return qp_fail(err, "%s: %s: type \"%s\" is not supported (only Split, ByteLevel, Sequence)",
                   tok->name, where, type);
}

static int check_model(qp_tok *tok, const cJSON *m, qp_err *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0))
        return qp_fail(err, "%s: model.type must be \"BPE\"%s%s", tok->name,
                       cJSON_IsString(type) ? ", not " : "",
                       cJSON_IsString(type) ? type->valuestring : "");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return qp_fail(err, "%s: model.dropout must be null: random BPE dropout is not supported",
                       tok->name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, affixes[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0'))
            return qp_fail(err, "%s: model.%s must be null or \"\"", tok->name, affixes[i]);
    }
    int byte_fallback;
    if (get_bool(tok, m, "byte_fallback", 0, "model", &byte_fallback, err) ||
        get_bool(tok, m, "fuse_unk", 0, "model", &tok->fuse_unk, err) ||
        get_bool(tok, m, "ignore_merges", 0, "model", &tok->ignore_merges, err))
        return -1;
    if (byte_fallback)
        return qp_fail(err, "%s: model.byte_fallback = true is not supported", tok->name);
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
    tok->unk_id = -1;
    if (unk && !cJSON_IsNull(unk)) {
        if (!cJSON_IsString(unk))
            return qp_fail(err, "%s: model.unk_token must be a string or null", tok->name);
        tok->unk_id = tok_vocab_find(tok, unk->valuestring, strlen(unk->valuestring));
        if (tok->unk_id < 0)
            return qp_fail(err, "%s: model.unk_token \"%s\" is not in model.vocab", tok->name,
                           unk->valuestring);
    }
    return 0;
}

int tok_check_config(qp_tok *tok, const cJSON *root, const cJSON *model, qp_err *err)
{
    static const char *const must_be_null[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, must_be_null[i]);
        if (v && !cJSON_IsNull(v))
            return qp_fail(err, "%s: \"%s\" must be null (not supported)", tok->name, must_be_null[i]);
    }
    if (check_model(tok, model, err) ||
        check_normalizer(tok, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer", err))
        return -1;

    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int byte_level = 0;
    if (pre && !cJSON_IsNull(pre) && check_pre_tokenizer(tok, pre, "pre_tokenizer", &byte_level, err))
        return -1;
    if (!byte_level)
        return qp_fail(err, "%s: pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)",
                       tok->name);

    const char *type;
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (post && !cJSON_IsNull(post)) {
        if (component_type(tok, post, "post_processor", &type, err))
            return -1;
        if (strcmp(type, "ByteLevel") != 0) /* ByteLevel only adjusts offsets */
            return qp_fail(err, "%s: post_processor: type \"%s\" is not supported (only ByteLevel or null)",
                           tok->name, type);
    }
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!dec || cJSON_IsNull(dec))
        return qp_fail(err, "%s: no \"decoder\" (a ByteLevel decoder is required)", tok->name);
    if (component_type(tok, dec, "decoder", &type, err))
        return -1;
    if (strcmp(type, "ByteLevel") != 0)
        return qp_fail(err, "%s: decoder: type \"%s\" is not supported (only ByteLevel)", tok->name, type);
    return 0;
}

/* ---- added tokens ------------------------------------------------------------ */

/* The content an added token matches: NFC'd when it is "normalized". */
static int added_pattern(qp_tok *tok, added_token *t, const char *content, qp_err *err)
{
    size_t n = strlen(content);
    if (!t->normalized || !tok->nfc) {
        if (tok_store_string(tok, content, n, &t->off))
            return qp_fail(err, "%s: out of memory", tok->name);
        t->len = (uint32_t)n;
        return 0;
    }
    qp_tok_text nfc = {0};
    if (tok_nfc(content, n, &nfc, err)) {
        qp_tok_text_free(&nfc);
        return -1;
    }
    int r = tok_store_string(tok, nfc.s ? nfc.s : "", nfc.len, &t->off);
    t->len = (uint32_t)nfc.len;
    qp_tok_text_free(&nfc);
    return r ? qp_fail(err, "%s: out of memory", tok->name) : 0;
}

/* The id an added token's content takes: its own "id", which may be the
 * model token of the same content but never another token's. tokenizers
 * instead numbers a new token after the vocabulary's count and the added
 * tokens so far, and warns ("was expected to have ID") when that is not
 * the file's id: where it does not warn the two agree; where it does, the
 * file's id is the row the model was trained with (a GGUF's row, which
 * llama.cpp uses), so that one is kept. */
static int place_added(qp_tok *tok, const char *where, int32_t id, const char *s, size_t n, qp_err *err)
{
    int32_t in_vocab = tok_vocab_find(tok, s, n);
    if (in_vocab >= 0 && in_vocab != id)
        return qp_fail(err, "%s: %s.id is %d, but \"%s\" is model.vocab's token %d", tok->name, where, id, s,
                       in_vocab);
    tok_use_id(tok, id);
    tok_entry *e = &tok->entries[id];
    if (e->flags & TOK_PRESENT) {
        if (in_vocab == id)
            return 0;
        return qp_fail(err, "%s: %s.id %d is already %s \"%s\"", tok->name, where, id,
                       e->flags & TOK_ADDED ? "the added token" : "model.vocab's", tok->strings.s + e->str_off);
    }
    if (tok_store_string(tok, s, n, &e->str_off))
        return qp_fail(err, "%s: out of memory", tok->name);
    e->str_len = (uint32_t)n;
    return 0;
}

static int read_added(qp_tok *tok, const cJSON *item, int index, qp_err *err)
{
    char where[48];
    snprintf(where, sizeof(where), "added_tokens[%d]", index);
    if (!cJSON_IsObject(item))
        return qp_fail(err, "%s: %s must be an object", tok->name, where);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
    const cJSON *idv = cJSON_GetObjectItemCaseSensitive(item, "id");
    if (!cJSON_IsString(content))
        return qp_fail(err, "%s: %s.content must be a string", tok->name, where);
    if (!cJSON_IsNumber(idv) || idv->valuedouble < 0 || idv->valuedouble >= QP_TOK_MAX_ID ||
        idv->valuedouble != (double)(int32_t)idv->valuedouble)
        return qp_fail(err, "%s: %s.id must be an integer in [0, %d)", tok->name, where, QP_TOK_MAX_ID);
    added_token t = {0};
    int sw, ls, rs, norm, special;
    if (get_bool(tok, item, "single_word", 0, where, &sw, err) ||
        get_bool(tok, item, "lstrip", 0, where, &ls, err) ||
        get_bool(tok, item, "rstrip", 0, where, &rs, err) ||
        get_bool(tok, item, "normalized", 1, where, &norm, err) ||
        get_bool(tok, item, "special", 0, where, &special, err))
        return -1;
    const char *s = content->valuestring;
    size_t n = strlen(s);
    if (n == 0)
        return 0; /* tokenizers ignores empty added tokens */
    if (qp_utf8_check(s, n, NULL) != n)
        return qp_fail(err, "%s: %s.content is not valid UTF-8", tok->name, where);
    t = (added_token){.single_word = (uint8_t)sw, .lstrip = (uint8_t)ls, .rstrip = (uint8_t)rs,
                      .normalized = (uint8_t)norm, .special = (uint8_t)special};
    for (uint32_t i = 0; i < tok->n_added; i++) {
        const tok_entry *e = &tok->entries[tok->added[i].id];
        if (e->str_len == n && memcmp(tok->strings.s + e->str_off, s, n) == 0)
            return qp_fail(err, "%s: %s: \"%s\" is already an added token", tok->name, where, s);
    }
    int32_t id = (int32_t)idv->valuedouble;
    if (place_added(tok, where, id, s, n, err))
        return -1;
    tok->entries[id].flags |= TOK_PRESENT | TOK_ADDED | (special ? TOK_SPECIAL : 0);
    t.id = id;
    if (added_pattern(tok, &t, s, err))
        return -1;
    tok->added[tok->n_added++] = t;
    return 0;
}

int tok_read_added_tokens(qp_tok *tok, const cJSON *list, qp_err *err)
{
    if (!list || cJSON_IsNull(list))
        return 0;
    if (!cJSON_IsArray(list))
        return qp_fail(err, "%s: added_tokens must be an array, not %s", tok->name, type_of(list));
    int n = cJSON_GetArraySize(list);
    tok->added = calloc((size_t)n + 1, sizeof(*tok->added));
    if (!tok->added)
        return qp_fail(err, "%s: out of memory", tok->name);
    const cJSON *item;
    int i = 0;
    cJSON_ArrayForEach(item, list)
        if (read_added(tok, item, i++, err))
            return -1;
    return 0;
}

/* Groups added tokens (normalized or not) by first byte, longest first,
 * for the leftmost-longest search. */
int tok_build_added_set(qp_tok *tok, added_set *set, int normalized)
{
    set->order = calloc((size_t)tok->n_added + 1, sizeof(uint32_t));
    if (!set->order)
        return -1;
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) {
        set->first[b] = n;
        for (uint32_t i = 0; i < tok->n_added; i++) {
            const added_token *t = &tok->added[i];
            if (t->normalized != normalized || !t->len || (uint8_t)tok->strings.s[t->off] != b)
                continue;
            uint32_t k = n++; /* insertion sort by length, longest first */
            while (k > set->first[b] && tok->added[set->order[k - 1]].len < t->len) {
                set->order[k] = set->order[k - 1];
                k--;
            }
            set->order[k] = i;
        }
        set->count[b] = n - set->first[b];
    }
    set->n = n;
    return 0;
}

