/* serve_machine.c - response_format's machine: a reply's bytes followed
 * against a compiled format (serve_format.c), tokens allowed or refused.
 *
 * The machine is a stack of frames, one per value being written: a value
 * not yet begun, an object, an array, a string, a number, or a literal
 * (true, false, null, an enum's values, a schema object's keys: texts
 * matched byte by byte, all alternatives at once). A schema object's keys
 * come in the schema's order, a property left out only when it is not
 * required, as llama.cpp's schema grammars do. Whitespace runs and numbers
 * are bounded (as llama.cpp's JSON grammar bounds them) so that a reply
 * cannot run on inside them.
 *
 * Each node knows its shortest value, so the machine knows from any state
 * the fewest bytes that complete the value (cost()); with a budget of
 * tokens, a token is allowed only when the value can still close, and the
 * end token come, within the tokens left. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "serve_format_int.h"

/* ---- the machine --------------------------------------------------------- */

static const char *const lit_bool[] = {"true", "false"}, *const lit_null[] = {"null"},
                         *const lit_any[] = {"true", "false", "null"};

static const char *const tool_call_ends[] = {format_tool_call_end};

enum frame_kind { F_VALUE, F_OBJECT, F_ARRAY, F_STRING, F_NUMBER, F_LITERAL, F_TOOL_CALL };

enum {
    /* object */ O_OPEN, O_KEY, O_COLON, O_AFTER,
    /* array */ A_OPEN, A_ITEM, A_AFTER,
    /* string */ S_CHARS, S_ESCAPE, S_HEX, S_LOW_ESCAPE, S_LOW_U,
    /* number */ N_SIGN, N_ZERO, N_INT, N_POINT, N_FRAC, N_EXP, N_EXP_SIGN, N_EXP_DIGITS,
    /* tool call */ T_START, T_ARGUMENTS, T_END,
};

struct frame {
    uint8_t kind, phase;
    uint16_t ws;                /* whitespace bytes in a row */
    uint32_t node;
    uint32_t pos;               /* literal: bytes matched; number: bytes; string: hex digits left */
    uint8_t close;              /* string in a tool call: bytes of "</tool_call>" it ends with */
    uint32_t next;              /* schema object: the first property not yet passed; string: in the
                                   low half of a surrogate pair */
    uint32_t cur;               /* schema object: the property being written; tool call: the tool;
                                   string: the \u escape's value so far */
    uint32_t n_alts;            /* literal: alternatives */
    uint64_t live;              /* literal: those still matching */
    const char *const *alts;
    bool is_key;                /* literal: a schema object's key or a tool call's start (the frame
                                   below records which) */
    bool integer;               /* number: no fraction or exponent */
};

struct machine {
    const struct serve_format *f;
    uint32_t depth;
    bool done;                  /* the root value is complete and closed */
    struct frame st[MAX_DEPTH + 2];
};

#define MACHINE_BYTES(m) (offsetof(struct machine, st) + ((m)->depth + 1) * sizeof(struct frame))

static bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }

static struct frame *top(struct machine *m) { return &m->st[m->depth - 1]; }

static bool push(struct machine *m, struct frame fr)
{
    if (m->depth > MAX_DEPTH)
        return false;
    m->st[m->depth++] = fr;
    return true;
}

static bool step(struct machine *m, unsigned c);

/* the top frame's value is complete: off the stack */
static void pop(struct machine *m)
{
    m->depth--;
    m->done = m->depth == 0;
}

/* whitespace where a frame allows it, bounded as llama.cpp's JSON grammar
 * bounds it: a newline first or none, then at most MAX_WS spaces or tabs */
static bool space(struct frame *t, unsigned c)
{
    if (c == '\n')
        return t->ws++ == 0;
    if (c != ' ' && c != '\t')
        return false;
    return ++t->ws <= MAX_WS + 1;
}

/* the keys a schema object may write next: any from `next` on, up to and
 * including the first required one */
static uint64_t keys_open(const struct node *nd, uint32_t next)
{
    uint64_t mask = 0;
    for (uint32_t i = next; i < nd->n; i++) {
        mask |= 1ull << i;
        if (nd->required >> i & 1)
            break;
    }
    return mask;
}

static bool may_close(const struct node *nd, uint32_t next)
{
    return next >= 64 || !(nd->required >> next);
}

static uint64_t all_alts(uint32_t n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

static struct frame literal(const char *const *alts, uint32_t n, uint64_t live)
{
    return (struct frame){.kind = F_LITERAL, .alts = alts, .n_alts = n, .live = live};
}

/* the first byte of a value of node: the frame that writes it */
static bool begin_value(struct machine *m, uint32_t node, unsigned c)
{
    const struct node *nd = &m->f->nodes[node];
    enum kind k = nd->kind;
    struct frame fr = {.node = node};
    if (c == '{' && (k == K_ANY || k == K_OBJECT))
        fr.kind = F_OBJECT, fr.phase = O_OPEN;
    else if (c == '[' && (k == K_ANY || k == K_ARRAY))
        fr.kind = F_ARRAY, fr.phase = A_OPEN;
    else if (c == '"' && (k == K_ANY || k == K_STRING))
        fr.kind = F_STRING, fr.phase = S_CHARS;
    else if ((c == '-' || is_digit(c)) && (k == K_ANY || k == K_NUMBER || k == K_INTEGER))
        fr.kind = F_NUMBER, fr.phase = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT, fr.pos = 1,
        fr.integer = k == K_INTEGER;
    else if (k == K_TOOL_CALL)
        return push(m, (struct frame){.kind = F_TOOL_CALL, .phase = T_START, .node = node}) && step(m, c);
    else if (k == K_ENUM)
        fr = literal((const char *const *)nd->text, nd->n, all_alts(nd->n));
    else if (k == K_BOOLEAN)
        fr = literal(lit_bool, 2, 3);
    else if (k == K_NULL)
        fr = literal(lit_null, 1, 1);
    else if (k == K_ANY)
        fr = literal(lit_any, 3, 7);
    else
        return false;
    if (fr.kind != F_LITERAL)
        return push(m, fr);
    /* a literal takes its first byte like the others */
    uint64_t live = 0;
    for (uint32_t i = 0; i < fr.n_alts; i++)
        if (fr.live >> i & 1 && (unsigned char)fr.alts[i][0] == c)
            live |= 1ull << i;
    fr.live = live;
    fr.pos = 1;
    return live && push(m, fr);
}

/* the live alternative the literal's bytes so far complete; -1: none */
static int completed_alt(const struct frame *t)
{
    for (uint32_t i = 0; i < t->n_alts; i++)
        if (t->live >> i & 1 && !t->alts[i][t->pos])
            return (int)i;
    return -1;
}

static bool literal_complete(const struct frame *t)
{
    return completed_alt(t) >= 0;
}

static bool number_complete(const struct frame *t)
{
    return t->phase == N_ZERO || t->phase == N_INT || t->phase == N_FRAC || t->phase == N_EXP_DIGITS;
}

/* a literal whose alternative `pos` bytes long matched: off the stack; a
 * key tells the object below which property it is */
static void finish_literal(struct machine *m, struct frame *t)
{
    uint32_t chosen = (uint32_t)completed_alt(t);
    bool key = t->is_key;
    pop(m);
    if (key) {
        top(m)->cur = chosen;
        top(m)->next = chosen + 1;
    }
}

/* a byte after a complete number or literal that cannot go on: the value
 * ends before it, and the byte goes to the frame below */
static bool end_then(struct machine *m, unsigned c, bool complete)
{
    if (!complete)
        return false;
    struct frame *t = top(m);
    if (t->kind == F_LITERAL)
        finish_literal(m, t);
    else
        pop(m);
    return m->depth > 0 && step(m, c);
}

static bool step_literal(struct machine *m, struct frame *t, unsigned c)
{
    uint64_t live = 0;
    for (uint32_t i = 0; i < t->n_alts; i++)
        if (t->live >> i & 1 && t->alts[i][t->pos] && (unsigned char)t->alts[i][t->pos] == c)
            live |= 1ull << i;
    if (!live)
        return end_then(m, c, literal_complete(t));
    t->live = live;
    t->pos++;
    bool longer = false;        /* an alternative that goes on: wait for the next byte */
    for (uint32_t i = 0; i < t->n_alts; i++)
        longer |= (live >> i & 1) && t->alts[i][t->pos];
    if (!longer)
        finish_literal(m, t);
    return true;
}

static bool step_number(struct machine *m, struct frame *t, unsigned c)
{
    uint8_t p = t->phase, next = 0xff;
    bool d = is_digit(c);
    switch (p) {
    case N_SIGN: next = c == '0' ? N_ZERO : d ? N_INT : 0xff; break;
    case N_ZERO: next = c == '.' ? N_POINT : c == 'e' || c == 'E' ? N_EXP : 0xff; break;
    case N_INT: next = d ? N_INT : c == '.' ? N_POINT : c == 'e' || c == 'E' ? N_EXP : 0xff; break;
    case N_POINT: next = d ? N_FRAC : 0xff; break;
    case N_FRAC: next = d ? N_FRAC : c == 'e' || c == 'E' ? N_EXP : 0xff; break;
    case N_EXP: next = d ? N_EXP_DIGITS : c == '+' || c == '-' ? N_EXP_SIGN : 0xff; break;
    case N_EXP_SIGN: next = d ? N_EXP_DIGITS : 0xff; break;
    case N_EXP_DIGITS: next = d ? N_EXP_DIGITS : 0xff; break;
    }
    if (next != 0xff && t->integer && (next == N_POINT || next == N_EXP))
        next = 0xff;
    if (next == 0xff)
        return end_then(m, c, number_complete(t));
    /* within the bound, with room left to complete: an exponent's sign and digit */
    struct frame after = {.phase = next};
    if (t->pos + (number_complete(&after) ? 1 : next == N_EXP ? 3 : 2) > MAX_NUMBER)
        return false;
    t->phase = next;
    t->pos++;
    return true;
}

static int hex_value(unsigned c)
{
    return is_digit(c) ? (int)c - '0' : c >= 'a' && c <= 'f' ? (int)c - 'a' + 10 : c >= 'A' && c <= 'F' ? (int)c - 'A' + 10 : -1;
}

/* a \u escape's digits (cur: their value so far; next: the low half of a
 * pair): a surrogate only in pairs, high then low, as JSON readers such as
 * cJSON and serde_json require */
static bool step_hex(struct frame *t, unsigned c)
{
    int v = hex_value(c);
    if (v < 0)
        return false;
    t->cur = t->cur * 16 + (uint32_t)v;
    uint32_t digits = 5 - t->pos--;
    if (t->next && ((digits == 1 && v != 0xd) || (digits == 2 && v < 0xc)))
        return false;           /* the low half: DC00 to DFFF */
    if (!t->next && digits == 2 && t->cur >= 0xdc && t->cur <= 0xdf)
        return false;           /* a low half alone */
    if (t->pos == 0)
        t->phase = !t->next && t->cur >= 0xd800 && t->cur <= 0xdbff ? S_LOW_ESCAPE : S_CHARS;
    return true;
}

/* a string's closing bytes: the escape under way (its low half to come,
 * after a high one), then the quote */
static uint32_t string_cost(const struct frame *t)
{
    switch (t->phase) {
    case S_ESCAPE: return 2;
    case S_LOW_ESCAPE: return 7;
    case S_LOW_U: return 6;
    case S_HEX: {
        uint32_t top = t->pos <= 2 ? t->cur >> (4 * (2 - t->pos)) : 0;    /* the first two digits */
        bool high = !t->next && top >= 0xd8 && top <= 0xdb;
        return t->pos + 1 + (high ? 6 : 0);
    }
    default: return 1;
    }
}

static bool step_string(struct machine *m, struct frame *t, unsigned c)
{
    switch (t->phase) {
    case S_ESCAPE:
        if (c == 'u') {
            t->phase = S_HEX;
            t->pos = 4;
            t->cur = 0;
            t->next = 0;
            return true;
        }
        return strchr("\"\\/bfnrt", (int)c) && c ? (t->phase = S_CHARS, true) : false;
    case S_LOW_ESCAPE:
        return c == '\\' ? (t->phase = S_LOW_U, true) : false;
    case S_LOW_U:
        return c == 'u' ? (t->phase = S_HEX, t->pos = 4, t->cur = 0, t->next = 1, true) : false;
    case S_HEX:
        return step_hex(t, c);
    default:
        if (c == '"') {
            pop(m);
            return true;
        }
        if (c == '\\') {
            t->phase = S_ESCAPE;
            t->close = 0;
            return true;
        }
        if (m->f->call) {       /* "</tool_call>" only as "<\/tool_call>" */
            t->close = c == (unsigned char)format_call_close[t->close] ? t->close + 1 : c == '<';
            if (!format_call_close[t->close])
                return false;
        }
        return c >= 0x20;
    }
}

static bool step_object(struct machine *m, struct frame *t, unsigned c)
{
    const struct node *nd = &m->f->nodes[t->node];
    bool schema = nd->n > 0 || nd->closed;
    if (space(t, c))
        return true;
    t->ws = 0;
    switch (t->phase) {
    case O_OPEN:
    case O_KEY:
        if (c == '}' && t->phase == O_OPEN && (!schema || may_close(nd, t->next))) {
            pop(m);
            return true;
        }
        if (c != '"' || (schema && !keys_open(nd, t->next)))
            return false;
        t->phase = O_COLON;
        if (!schema)
            return push(m, (struct frame){.kind = F_STRING, .phase = S_CHARS});
        {
            struct frame key = literal((const char *const *)nd->text, nd->n, keys_open(nd, t->next));
            key.is_key = true;
            key.pos = 1;        /* the opening quote, every key's first byte */
            return push(m, key);
        }
    case O_COLON:
        if (c != ':')
            return false;
        t->phase = O_AFTER;
        return push(m, (struct frame){.kind = F_VALUE, .node = schema ? nd->child[t->cur] : ANY_NODE});
    case O_AFTER:
        if (c == '}' && (!schema || may_close(nd, t->next))) {
            pop(m);
            return true;
        }
        if (c != ',' || (schema && !keys_open(nd, t->next)))
            return false;
        t->phase = O_KEY;
        return true;
    }
    return false;
}

static bool step_array(struct machine *m, struct frame *t, unsigned c)
{
    if (space(t, c))
        return true;
    t->ws = 0;
    if (t->phase != A_ITEM && c == ']') {
        pop(m);
        return true;
    }
    if (t->phase == A_AFTER) {
        if (c != ',')
            return false;
        t->phase = A_ITEM;
        return true;
    }
    t->phase = A_AFTER;
    struct frame value = {.kind = F_VALUE, .node = m->f->nodes[t->node].item};
    return push(m, value) && step(m, c);
}

/* a tool call: its start (which names the tool), the tool's arguments,
 * then its end, each taking the bytes in turn */
static bool step_tool_call(struct machine *m, struct frame *t, unsigned c)
{
    const struct node *nd = &m->f->nodes[t->node];
    struct frame next;
    switch (t->phase) {
    case T_START:
        t->phase = T_ARGUMENTS;
        next = literal((const char *const *)nd->text, nd->n, all_alts(nd->n));
        next.is_key = true;
        break;
    case T_ARGUMENTS:
        t->phase = T_END;
        next = (struct frame){.kind = F_VALUE, .node = nd->child[t->cur]};
        break;
    default:                    /* the end replaces the call's frame: nothing follows it */
        m->depth--;
        next = literal(tool_call_ends, 1, 1);
        break;
    }
    return push(m, next) && step(m, c);
}

static bool step(struct machine *m, unsigned c)
{
    if (m->depth == 0)
        return false;              /* the value is over: nothing may follow */
    struct frame *t = top(m);
    switch (t->kind) {
    case F_VALUE: {
        if (m->f->nodes[t->node].kind != K_TOOL_CALL && space(t, c))
            return true;
        uint32_t node = t->node;
        m->depth--;                /* the value's own frame takes this one's place */
        return begin_value(m, node, c);
    }
    case F_OBJECT: return step_object(m, t, c);
    case F_ARRAY: return step_array(m, t, c);
    case F_STRING: return step_string(m, t, c);
    case F_NUMBER: return step_number(m, t, c);
    case F_TOOL_CALL: return step_tool_call(m, t, c);
    default: return step_literal(m, t, c);
    }
}

static bool complete(const struct machine *m)
{
    if (m->depth == 0)
        return m->done;
    const struct frame *t = &m->st[0];
    return m->depth == 1 && ((t->kind == F_NUMBER && number_complete(t)) || (t->kind == F_LITERAL && literal_complete(t)));
}

/* the fewest bytes that close the object t writes, in its phase (for
 * O_COLON: with its key written) */
static uint32_t object_cost(const struct serve_format *f, const struct frame *t)
{
    const struct node *nd = &f->nodes[t->node];
    if (!format_schema_object(nd))  /* "}"; "\"\":0}"; ":0}"; "}" */
        return t->phase == O_KEY ? 5 : t->phase == O_COLON ? 3 : 1;
    uint32_t next = t->next < nd->n ? t->next : nd->n, rest = nd->rest[next];
    switch (t->phase) {
    case O_OPEN: return rest - (rest > 1);
    case O_COLON: return format_add_sat(format_add_sat(1, f->nodes[nd->child[t->cur]].min), rest);
    case O_AFTER: return rest;
    default:                    /* after a comma: a key must come */
        if (rest > 1)
            return rest - 1;
        uint32_t best = MIN_CAP;
        uint64_t open = keys_open(nd, next);
        for (uint32_t k = next; k < nd->n; k++)
            if (open >> k & 1) {
                uint32_t c = format_add_sat((uint32_t)strlen(nd->text[k]) + 2, f->nodes[nd->child[k]].min);
                best = c < best ? c : best;
            }
        return best;            /* its "}" is the 1 that rest counts */
    }
}

/* a key's literal with the frame that chose it below: the fewest bytes
 * over the keys still live */
static uint32_t key_cost(const struct serve_format *f, const struct frame *key, const struct frame *below)
{
    const struct node *nd = &f->nodes[below->node];
    uint32_t best = MIN_CAP;
    for (uint32_t a = 0; a < key->n_alts; a++) {
        if (!(key->live >> a & 1))
            continue;
        uint32_t c = format_add_sat((uint32_t)strlen(key->alts[a]) - key->pos, f->nodes[nd->child[a]].min);
        c = below->kind == F_TOOL_CALL ? format_add_sat(c, (uint32_t)strlen(format_tool_call_end))
                                       : format_add_sat(c, format_add_sat(1, nd->rest[a + 1]));
        best = c < best ? c : best;
    }
    return best;
}

static uint32_t frame_cost(const struct serve_format *f, const struct frame *t)
{
    switch (t->kind) {
    case F_VALUE: return f->nodes[t->node].min;
    case F_OBJECT: return object_cost(f, t);
    case F_ARRAY: return t->phase == A_ITEM ? format_add_sat(f->nodes[f->nodes[t->node].item].min, 1) : 1;
    case F_STRING: return string_cost(t);
    case F_NUMBER: return !number_complete(t);
    case F_TOOL_CALL:           /* the arguments to come, or under way (T_END) */
        return format_add_sat(t->phase == T_ARGUMENTS ? f->nodes[f->nodes[t->node].child[t->cur]].min : 0,
                              (uint32_t)strlen(format_tool_call_end));
    default: {
        uint32_t best = MIN_CAP;
        for (uint32_t a = 0; a < t->n_alts; a++)
            if (t->live >> a & 1 && (uint32_t)strlen(t->alts[a]) - t->pos < best)
                best = (uint32_t)strlen(t->alts[a]) - t->pos;
        return best;
    }
    }
}

/* The fewest bytes that complete the value from here: each frame's, a
 * key with the frame that chose it. There is always a byte that brings
 * it down by one, so with single-byte tokens it is also the fewest tokens. */
static uint32_t cost(const struct machine *m)
{
    uint32_t c = 0;
    for (uint32_t i = m->depth; i-- > 0;) {
        const struct frame *t = &m->st[i];
        if (t->kind == F_LITERAL && t->is_key && i > 0) {
            c = format_add_sat(c, key_cost(m->f, t, &m->st[i - 1]));
            i--;
        } else {
            c = format_add_sat(c, frame_cost(m->f, t));
        }
    }
    return c;
}

/* ---- the vocabulary, and one reply's state ------------------------------- */

enum { TOKEN_TEXT, TOKEN_END, TOKEN_NEVER };

struct serve_vocab {
    uint32_t n;
    const char **bytes;
    uint32_t *len;
    uint8_t *kind;              /* TOKEN_*: an end token, or one whose text the reply leaves out */
};

struct serve_vocab *serve_vocab_new(const qpack_model *model)
{
    const qpack_tokenizer *tok = qpack_model_tokenizer(model);
    uint32_t n = qpack_model_get_info(model)->vocab;
    struct serve_vocab *v = calloc(1, sizeof *v);
    if (!v || !tok || !(v->bytes = calloc(n, sizeof *v->bytes)) || !(v->len = calloc(n, sizeof *v->len)) ||
        !(v->kind = calloc(n, 1))) {
        serve_vocab_free(v);
        return NULL;
    }
    v->n = n;
    for (uint32_t id = 0; id < n; id++) {
        size_t len = 0;
        v->bytes[id] = qpack_token_bytes(tok, (int32_t)id, &len);
        v->len[id] = (uint32_t)len;
        char *text = NULL;
        size_t shown = 0;
        qpack_error err;
        /* a token the replies' decoder skips (a special one) never enters a format */
        bool skipped = qpack_detokenize(tok, &(int32_t){(int32_t)id}, 1, true, &text, &shown, &err) == QPACK_OK &&
                       shown == 0;
        free(text);
        v->kind[id] = qpack_token_is_end(model, (int32_t)id) ? TOKEN_END
                      : !v->bytes[id] || !len || skipped      ? TOKEN_NEVER
                                                              : TOKEN_TEXT;
    }
    return v;
}

struct serve_vocab *serve_vocab_of(const char *const *tokens, uint32_t n, int32_t end)
{
    struct serve_vocab *v = calloc(1, sizeof *v);
    if (!v || !(v->bytes = calloc(n, sizeof *v->bytes)) || !(v->len = calloc(n, sizeof *v->len)) ||
        !(v->kind = calloc(n, 1))) {
        serve_vocab_free(v);
        return NULL;
    }
    v->n = n;
    for (uint32_t id = 0; id < n; id++) {
        v->bytes[id] = tokens[id];
        v->len[id] = (uint32_t)strlen(tokens[id]);
        v->kind[id] = (int32_t)id == end ? TOKEN_END : v->len[id] ? TOKEN_TEXT : TOKEN_NEVER;
    }
    return v;
}

void serve_vocab_free(struct serve_vocab *v)
{
    if (!v)
        return;
    free(v->bytes);
    free(v->len);
    free(v->kind);
    free(v);
}

struct serve_format_state {
    struct serve_format *f;
    const struct serve_vocab *v;
    bool waiting;               /* thinking first: the format begins after </think> */
    bool fresh;                 /* first[] and cost are for the machine as it is */
    bool first[256];            /* bytes the machine takes next */
    uint32_t cost;              /* bytes that complete the value from here */
    uint32_t budget, taken;     /* tokens the reply may have (0: no bound), and has */
    struct machine m, scratch;
};

struct serve_format_state *serve_format_start(struct serve_format *f, const struct serve_vocab *v, bool think)
{
    struct serve_format_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->f = serve_format_ref(f);
    st->v = v;
    st->waiting = think;
    st->m.f = f;
    push(&st->m, (struct frame){.kind = F_VALUE, .node = f->root});
    return st;
}

void serve_format_end(struct serve_format_state *st)
{
    if (!st)
        return;
    serve_format_unref(st->f);
    free(st);
}

static bool feed(struct machine *m, const char *bytes, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        if (!step(m, (unsigned char)bytes[i]))
            return false;
    return true;
}

/* Whether the reply, with the token just fed to scratch, can still close
 * and take the end token within its budget: the value's cost after it at
 * most the tokens then left but one. Where even the cheapest way cannot
 * (the budget smaller than the value's shortest completion), only tokens
 * that bring the cost down, so the reply ends as near to complete as it can. */
static bool within_budget(struct serve_format_state *st, uint32_t len)
{
    if (!st->budget)
        return true;
    int64_t left = (int64_t)st->budget - st->taken, limit = left - 2;
    if (limit < (int64_t)st->cost - 1)
        limit = (int64_t)st->cost - 1;
    if (limit >= (int64_t)st->cost + (int64_t)len * st->f->rise)   /* no token's bytes can rise that far */
        return true;
    return (int64_t)cost(&st->scratch) <= limit;
}

void serve_format_budget(struct serve_format_state *st, uint32_t tokens)
{
    st->budget = tokens;
}

bool serve_format_allows(void *state, int32_t token)
{
    struct serve_format_state *st = state;
    if (st->waiting)
        return true;
    if (token < 0 || (uint32_t)token >= st->v->n || st->v->kind[token] == TOKEN_NEVER)
        return false;
    if (st->v->kind[token] == TOKEN_END)
        return complete(&st->m);
    if (!st->fresh) {
        for (unsigned c = 0; c < 256; c++) {
            memcpy(&st->scratch, &st->m, MACHINE_BYTES(&st->m));
            st->first[c] = step(&st->scratch, c);
        }
        st->cost = cost(&st->m);
        st->fresh = true;
    }
    const char *b = st->v->bytes[token];
    if (!st->first[(unsigned char)b[0]])
        return false;
    memcpy(&st->scratch, &st->m, MACHINE_BYTES(&st->m));
    return feed(&st->scratch, b, st->v->len[token]) && within_budget(st, st->v->len[token]);
}

int serve_format_take(struct serve_format_state *st, int32_t token)
{
    if (token < 0 || (uint32_t)token >= st->v->n)
        return -1;
    const char *b = st->v->bytes[token];
    uint32_t len = st->v->len[token];
    st->taken++;
    if (st->waiting) {
        st->waiting = !(len == 8 && !memcmp(b, "</think>", 8));
        return 0;
    }
    st->fresh = false;
    if (st->v->kind[token] == TOKEN_END)
        return complete(&st->m) ? 0 : -1;
    return st->v->kind[token] == TOKEN_TEXT && feed(&st->m, b, len) ? 0 : -1;
}

bool serve_format_complete(const struct serve_format_state *st)
{
    return !st->waiting && complete(&st->m);
}

int serve_format_feed_text(struct serve_format_state *st, const char *text, size_t len)
{
    st->fresh = false;
    return feed(&st->m, text, (uint32_t)len) ? 0 : -1;
}
