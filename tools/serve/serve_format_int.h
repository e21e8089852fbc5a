/* serve_format_int.h - the compiled format that serve_format.c makes and
 * serve_machine.c follows (private to them). */
#ifndef QP_SERVE_FORMAT_INT_H
#define QP_SERVE_FORMAT_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MAX_DEPTH 24            /* nesting of the reply, and of a schema */
#define MAX_NODES 1024          /* schema nodes */
#define MAX_ALTS 64             /* an enum's values, an object's properties: bits of a mask */
#define MAX_WS 20               /* spaces and tabs in a row */
#define ANY_NODE 0              /* every format's node 0: any JSON value */
#define MAX_NUMBER 24           /* a number's bytes */
#define MIN_CAP (1u << 24)      /* beyond it a value does not close in any reply */

enum kind { K_ANY, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_INTEGER, K_BOOLEAN, K_NULL, K_ENUM, K_TOOL_CALL };

struct node {
    enum kind kind;
    uint32_t n;                 /* object: properties; enum: values; tool call: tools */
    char **text;                /* object: each key as JSON ("\"name\""); enum: each value as JSON;
                                   tool call: each tool's call up to its arguments */
    uint32_t *child;            /* object: each property's node; tool call: each tool's arguments' */
    uint64_t required;          /* object: a bit per required property */
    uint32_t item;              /* array: its items' node */
    bool closed;                /* object: only its properties (none when n is 0) */
    /* the fewest bytes that write a value of the node, and for a schema
     * object rest[k]: those that close it once its properties before k
     * are passed (", KEY: VALUE" per required one left, then "}") */
    uint32_t min;
    uint32_t *rest;
};

struct serve_format {
    atomic_int refs;
    bool call;                  /* a tool call: no string holds "</tool_call>" as it is */
    struct node *nodes;
    uint32_t n_nodes, cap;
    uint32_t base;              /* the first node of the schema being compiled */
    uint32_t rise;              /* at most this much more to close after each byte the reply writes */
    uint32_t root;
};

extern const char format_call_close[];
extern const char format_tool_call_end[];
uint32_t format_add_sat(uint32_t a, uint32_t b);
bool format_schema_object(const struct node *nd);

#endif
