/* serve_format.c - response_format as constrained decoding (serve_format.h).
 *
 * A reply is held to JSON: any object (json_object) or a value of a schema
 * (json_schema). A byte-level pushdown machine follows the reply; the
 * sampler asks it about every token of the vocabulary, and a token is
 * allowed when its bytes keep the reply the start of such a value, an end
 * token when the value is complete. So the reply always parses, whatever
 * the model would rather have written, and it ends where the value does.
 * This file compiles the format; serve_machine.c follows the reply. */
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "serve_format_int.h"

#define BAD(e, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, "response_format", __VA_ARGS__), -1)

/* ---- the schema, compiled ------------------------------------------------ */

/* nodes from `first` on, gone */
static void drop_nodes(struct serve_format *f, uint32_t first)
{
    for (uint32_t i = first; i < f->n_nodes; i++) {
        for (uint32_t k = 0; k < f->nodes[i].n; k++)
            free(f->nodes[i].text[k]);
        free(f->nodes[i].text);
        free(f->nodes[i].child);
        free(f->nodes[i].rest);
    }
    f->n_nodes = first;
}

void serve_format_unref(struct serve_format *f)
{
    if (!f || atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    drop_nodes(f, 0);
    free(f->nodes);
    free(f);
}

uint32_t serve_format_shortest(const struct serve_format *f)
{
    return f->nodes[f->root].min;
}

struct serve_format *serve_format_ref(struct serve_format *f)
{
    if (f)
        atomic_fetch_add(&f->refs, 1);
    return f;
}

static int new_node(struct serve_format *f, enum kind kind, struct serve_error *e)
{
    if (f->n_nodes - f->base == MAX_NODES)
        return BAD(e, "response_format: the schema has more than %d parts", MAX_NODES);
    if (f->n_nodes == f->cap) {
        uint32_t cap = f->cap ? 2 * f->cap : 16;
        struct node *nodes = realloc(f->nodes, cap * sizeof *nodes);
        if (!nodes)
            return BAD(e, "response_format: out of memory");
        f->nodes = nodes;
        f->cap = cap;
    }
    f->nodes[f->n_nodes] = (struct node){.kind = kind};
    return (int)f->n_nodes++;
}

static int compile(struct serve_format *f, const cJSON *s, int depth, struct serve_error *e);

const char format_call_close[] = "</tool_call>";

/* v as the JSON text a reply writes for it; in a tool call "</" as "<\/"
 * (the same string to a JSON reader), so that no value the machine writes
 * ends the call's block early. Outside strings JSON has no '<'. */
static char *json_text(const struct serve_format *f, const cJSON *v)
{
    char *text = cJSON_PrintUnformatted(v);
    if (!text || !f->call)
        return text;
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, "</")); p++)
        n++;
    char *out = n ? malloc(strlen(text) + n + 1) : NULL;
    if (!out)
        return n ? (free(text), NULL) : text;
    char *o = out;
    for (const char *p = text; *p; p++) {
        *o++ = *p;
        if (p[0] == '<' && p[1] == '/')
            *o++ = '\\';
    }
    *o = 0;
    free(text);
    return out;
}

static const struct {
    const char *name;
    enum kind kind;
} types[] = {{"object", K_OBJECT}, {"array", K_ARRAY},   {"string", K_STRING}, {"number", K_NUMBER},
             {"integer", K_INTEGER}, {"boolean", K_BOOLEAN}, {"null", K_NULL}};

/* an enum's (or a const's) values, each as the JSON text the reply must hold */
static int compile_enum(struct serve_format *f, const cJSON *values, struct serve_error *e)
{
    int n = cJSON_GetArraySize(values);
    if (!cJSON_IsArray(values) || n < 1 || n > MAX_ALTS)
        return BAD(e, "response_format: 'enum' must be an array of 1 to %d values", MAX_ALTS);
    int id = new_node(f, K_ENUM, e);
    if (id < 0)
        return -1;
    struct node *nd = &f->nodes[id];
    if (!(nd->text = calloc((size_t)n, sizeof *nd->text)))
        return BAD(e, "response_format: out of memory");
    for (const cJSON *v = values->child; v; v = v->next)
        if (!(nd->text[nd->n++] = json_text(f, v)))
            return BAD(e, "response_format: out of memory");
    return id;
}

/* key as the JSON text a reply writes for it ("\"name\"") */
static char *key_text(const struct serve_format *f, const char *key)
{
    cJSON *name = cJSON_CreateString(key);
    char *text = name ? json_text(f, name) : NULL;
    cJSON_Delete(name);
    return text;
}

/* An object that names no properties but requires some: written with
 * exactly those, of any value (the machine writes keys it knows, so it
 * holds the requirement by leaving the other keys out). */
static int compile_required_only(struct serve_format *f, int id, const cJSON *req, struct serve_error *e)
{
    int n = cJSON_GetArraySize(req);
    if (n > MAX_ALTS)
        return BAD(e, "response_format: 'required' names more than %d properties", MAX_ALTS);
    struct node *nd = &f->nodes[id];
    if (!(nd->text = calloc((size_t)n, sizeof *nd->text)) || !(nd->child = calloc((size_t)n, sizeof *nd->child)))
        return BAD(e, "response_format: out of memory");
    nd->closed = true;
    for (const cJSON *r = req->child; r; r = r->next) {
        char *text = key_text(f, r->valuestring);
        if (!text)
            return BAD(e, "response_format: out of memory");
        uint32_t k = 0;
        while (k < nd->n && strcmp(nd->text[k], text))
            k++;
        if (k < nd->n) {        /* named twice */
            free(text);
            continue;
        }
        nd->text[k] = text;
        nd->child[k] = ANY_NODE;
        nd->required |= 1ull << k;
        nd->n++;
    }
    return id;
}

static int compile_object(struct serve_format *f, const cJSON *s, int depth, struct serve_error *e)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties"),
                *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (props && (!cJSON_IsObject(props) || n > MAX_ALTS))
        return BAD(e, "response_format: 'properties' must be an object of at most %d properties", MAX_ALTS);
    if (req && !cJSON_IsArray(req))
        return BAD(e, "response_format: 'required' must be an array of property names");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r))
            return BAD(e, "response_format: 'required' must be an array of property names");
    const cJSON *more = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    int id = new_node(f, K_OBJECT, e);
    if (id < 0)
        return -1;
    /* no properties: any object; properties, even none: only those, unless
     * additionalProperties allows more (then, with none listed, any) */
    bool open = !props || (n == 0 && more && !cJSON_IsFalse(more));
    if (open && req && req->child)
        return compile_required_only(f, id, req, e);
    f->nodes[id].closed = !open;
    if (n) {
        char **text = calloc((size_t)n, sizeof *text);
        uint32_t *child = calloc((size_t)n, sizeof *child);
        f->nodes[id].text = text;
        f->nodes[id].child = child;
        if (!text || !child)
            return BAD(e, "response_format: out of memory");
    }
    uint32_t k = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, k++) {
        char *text = key_text(f, p->string);
        f->nodes[id].text[k] = text;
        f->nodes[id].n = k + 1;
        if (!text)
            return BAD(e, "response_format: out of memory");
        int c = compile(f, p, depth + 1, e);
        if (c < 0)
            return -1;
        f->nodes[id].child[k] = (uint32_t)c;   /* f->nodes may have moved */
    }
    /* a closed object holds a required property only when it lists it */
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        uint32_t i = 0;
        const cJSON *p = props->child;
        while (p && strcmp(p->string, r->valuestring))
            p = p->next, i++;
        if (!p)
            return BAD(e, "response_format: required property '%.64s' is not among the properties", r->valuestring);
        f->nodes[id].required |= 1ull << i;
    }
    return id;
}

/* One schema as a node: type (one name), properties, required, items,
 * enum and const; keywords that only annotate or bound values (title,
 * description, additionalProperties, minLength, ...) are not enforced,
 * and those that combine schemas are refused rather than ignored. */
static int compile(struct serve_format *f, const cJSON *s, int depth, struct serve_error *e)
{
    static const char *const refused[] = {"$ref", "anyOf", "oneOf", "allOf", "not", "if", "patternProperties"};
    if (depth > MAX_DEPTH)
        return BAD(e, "response_format: the schema nests deeper than %d", MAX_DEPTH);
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !s->child))
        return ANY_NODE;
    if (!cJSON_IsObject(s))
        return BAD(e, "response_format: a schema must be an object");
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, refused[i]))
            return BAD(e, "response_format: '%s' is not supported (type, properties, required, items, enum and const are)",
                       refused[i]);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (en)
        return compile_enum(f, en, e);
    if (cn) {
        cJSON *one = cJSON_CreateArray();
        int id = one && cJSON_AddItemReferenceToArray(one, (cJSON *)cn) ? compile_enum(f, one, e)
                                                                         : BAD(e, "response_format: out of memory");
        cJSON_Delete(one);
        return id;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    enum kind kind = K_ANY;
    if (type && !cJSON_IsString(type))
        return BAD(e, "response_format: 'type' must be one type's name (a list of types is not supported)");
    for (size_t i = 0; type && i < sizeof types / sizeof *types; i++)
        if (!strcmp(type->valuestring, types[i].name))
            kind = types[i].kind;
    if (type && kind == K_ANY)
        return BAD(e, "response_format: unknown type '%.32s'", type->valuestring);
    if (!type && cJSON_GetObjectItemCaseSensitive(s, "properties"))
        kind = K_OBJECT;
    if (!type && cJSON_GetObjectItemCaseSensitive(s, "items"))
        kind = K_ARRAY;
    if (kind == K_OBJECT)
        return compile_object(f, s, depth, e);
    int id = new_node(f, kind, e);
    if (id < 0 || kind != K_ARRAY)
        return id;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int item = items ? compile(f, items, depth + 1, e) : ANY_NODE;
    if (item < 0)
        return -1;
    f->nodes[id].item = (uint32_t)item;
    return id;
}

/* ---- the fewest bytes that close a value -------------------------------- */


uint32_t format_add_sat(uint32_t a, uint32_t b)
{
    return a + b < MIN_CAP ? a + b : MIN_CAP;
}

bool format_schema_object(const struct node *nd)
{
    return nd->kind == K_OBJECT && (nd->n > 0 || nd->closed);
}

const char format_tool_call_end[] = "}\n</tool_call>";

/* each node's min (and an object's rest), children before parents: a
 * node's children come after it, but for node 0 (any value) */
static int measure(struct serve_format *f, struct serve_error *e)
{
    static const uint32_t leaf[] = {[K_ANY] = 1, [K_ARRAY] = 2, [K_STRING] = 2, [K_NUMBER] = 1, [K_INTEGER] = 1,
                                    [K_BOOLEAN] = 4, [K_NULL] = 4};
    uint32_t longest = 0, most = 0;
    f->nodes[ANY_NODE].min = leaf[K_ANY];
    for (uint32_t i = f->n_nodes; i-- > 0;) {
        struct node *nd = &f->nodes[i];
        uint32_t min = MIN_CAP;
        for (uint32_t k = 0; k < nd->n; k++) {
            uint32_t len = (uint32_t)strlen(nd->text[k]);
            longest = len > longest ? len : longest;
            if (nd->kind == K_ENUM)
                min = len < min ? len : min;
            else if (nd->kind == K_TOOL_CALL)
                min = format_add_sat(len, f->nodes[nd->child[k]].min) < min
                          ? format_add_sat(len, f->nodes[nd->child[k]].min)
                          : min;
        }
        if (nd->kind == K_TOOL_CALL)
            min = format_add_sat(min, (uint32_t)strlen(format_tool_call_end));
        else if (nd->kind == K_OBJECT && !format_schema_object(nd))
            min = 2;
        else if (nd->kind == K_OBJECT) {
            free(nd->rest);
            if (!(nd->rest = calloc(nd->n + 1, sizeof *nd->rest)))
                return BAD(e, "out of memory");
            nd->rest[nd->n] = 1;
            for (uint32_t k = nd->n; k-- > 0;)
                nd->rest[k] = nd->required >> k & 1
                                  ? format_add_sat(nd->rest[k + 1], format_add_sat((uint32_t)strlen(nd->text[k]) + 2,
                                                                                   f->nodes[nd->child[k]].min))
                                  : nd->rest[k + 1];
            /* "{" and the required properties, a comma fewer than rest counts */
            min = format_add_sat(1, nd->rest[0] - (nd->rest[0] > 1));
        } else if (nd->kind != K_ENUM)
            min = leaf[nd->kind];
        nd->min = min;
    }
    /* a byte raises the cost by at most a value still to write (a
     * property's, an item's, a tool's arguments') and a text's length */
    for (uint32_t i = 0; i < f->n_nodes; i++) {
        const struct node *nd = &f->nodes[i];
        uint32_t inner = nd->kind == K_ARRAY ? f->nodes[nd->item].min : 0;
        for (uint32_t k = 0; nd->child && k < nd->n; k++)
            inner = f->nodes[nd->child[k]].min > inner ? f->nodes[nd->child[k]].min : inner;
        most = inner > most ? inner : most;
    }
    f->rise = format_add_sat(format_add_sat(2 * most, 2 * longest), 16);
    return 0;
}

int serve_format_read(const cJSON *rf, struct serve_format **out, struct serve_error *e)
{
    *out = NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
        return BAD(e, "'response_format' must be an object with a 'type'");
    const char *t = type->valuestring;
    const cJSON *schema = NULL;
    if (!strcmp(t, "text"))
        return 0;
    if (!strcmp(t, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!cJSON_IsObject(js) || !schema)
            return BAD(e, "response_format: json_schema needs {\"json_schema\": {\"schema\": {...}}}");
    } else if (!strcmp(t, "json_object")) {
        schema = cJSON_GetObjectItemCaseSensitive(rf, "schema");    /* llama-server's */
    } else {
        return BAD(e, "response_format: type must be text, json_object or json_schema, not '%.32s'", t);
    }
    struct serve_format *f = calloc(1, sizeof *f);
    if (!f)
        return BAD(e, "response_format: out of memory");
    atomic_init(&f->refs, 1);
    int any = new_node(f, K_ANY, e);
    int root = any < 0 ? -1 : schema ? compile(f, schema, 0, e) : new_node(f, K_OBJECT, e);
    if (root < 0 || measure(f, e)) {
        serve_format_unref(f);
        return -1;
    }
    f->root = (uint32_t)root;
    *out = f;
    return 0;
}

/* whether every value of node is an object (arguments must be one) */
static bool object_node(const struct serve_format *f, uint32_t node)
{
    const struct node *nd = &f->nodes[node];
    if (nd->kind == K_ENUM) {
        for (uint32_t i = 0; i < nd->n; i++)
            if (nd->text[i][0] != '{')
                return false;
        return true;
    }
    return nd->kind == K_OBJECT;
}

/* Qwen3's call of one of the tools, as its chat template asks for it:
 * <tool_call>\n{"name": NAME, "arguments": ARGUMENTS}\n</tool_call>, the
 * arguments a value of that tool's parameters (an object of any keys
 * where they are not a schema the machine holds). */

#define BAD_TOOLS(e, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, "tools", __VA_ARGS__), -1)

int serve_format_tool_call(char *const *tools, size_t n, const char *only, struct serve_format **out,
                           struct serve_error *e)
{
    *out = NULL;
    struct serve_format *f = calloc(1, sizeof *f);
    if (!f)
        return BAD_TOOLS(e, "out of memory");
    atomic_init(&f->refs, 1);
    f->call = true;
    struct serve_error ignored;
    int rc = new_node(f, K_ANY, &ignored) < 0 || new_node(f, K_TOOL_CALL, &ignored) < 0 ? BAD_TOOLS(e, "out of memory")
                                                                                          : 0;
    if (!rc && !only && n > MAX_ALTS)
        rc = (serve_error_set(e, 400, "invalid_request_error", NULL, "tool_choice",
                              "tool_choice \"required\" holds at most %d tools (name one instead)", MAX_ALTS),
              -1);
    struct node *call = rc ? NULL : &f->nodes[1];
    if (call && (!(call->text = calloc(n ? n : 1, sizeof *call->text)) ||
                 !(call->child = calloc(n ? n : 1, sizeof *call->child))))
        rc = BAD_TOOLS(e, "out of memory");
    for (size_t i = 0; !rc && i < n && f->nodes[1].n < MAX_ALTS; i++) {
        cJSON *tool = cJSON_Parse(tools[i]);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function"),
                    *name = cJSON_GetObjectItemCaseSensitive(fn, "name"),
                    *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char *name_json = cJSON_IsString(name) ? json_text(f, name) : NULL;
        if (name_json && (!only || !strcmp(only, name->valuestring))) {
            size_t len = strlen(name_json) + 48;
            char *prefix = malloc(len);
            if (prefix)
                snprintf(prefix, len, "<tool_call>\n{\"name\": %s, \"arguments\": ", name_json);
            /* each tool's schema within the bound, not all of them together */
            uint32_t first = f->base = f->n_nodes;
            int args = params && !cJSON_IsNull(params) ? compile(f, params, 1, &ignored) : -1;
            if (args >= 0 && !object_node(f, (uint32_t)args))
                args = -1;
            if (args < 0) {                 /* not an object's schema held here: any object */
                drop_nodes(f, first);
                args = new_node(f, K_OBJECT, &ignored);
            }
            call = &f->nodes[1];
            call->text[call->n] = prefix;
            call->child[call->n] = (uint32_t)args;
            rc = !prefix || args < 0 ? BAD_TOOLS(e, "out of memory") : 0;
            call->n += prefix != NULL;
        }
        free(name_json);
        cJSON_Delete(tool);
    }
    if (!rc && f->nodes[1].n && measure(f, &ignored))
        rc = BAD_TOOLS(e, "out of memory");
    if (!rc && f->nodes[1].n == 0)
        rc = only ? (serve_error_set(e, 400, "invalid_request_error", NULL, "tool_choice",
                                     "tool_choice names '%.64s', which is not among the tools", only), -1)
                  : (serve_error_set(e, 400, "invalid_request_error", NULL, "tool_choice",
                                     "tool_choice \"required\" needs tools"), -1);
    if (rc) {
        serve_format_unref(f);
        return -1;
    }
    f->root = 1;
    *out = f;
    return 0;
}
