/* serve_format.h - response_format as constrained decoding: a reply held to
 * JSON, any object or a value of a JSON schema (serve_format.c compiles it,
 * serve_machine.c follows a reply). */
#ifndef QP_SERVE_FORMAT_H
#define QP_SERVE_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qpack.h"

struct cJSON;
struct serve_error;

/* A request's format, compiled: immutable, shared by its choices. */
struct serve_format;

/* response_format: {"type": "text"} gives *format NULL (no constraint);
 * "json_object" any object (or llama-server's {"type": "json_object",
 * "schema": {...}}); "json_schema" with {"json_schema": {"schema": ...}}
 * the schema's values: type (one name), properties (written in the
 * schema's order), required (without properties: exactly those keys;
 * with them: one of them, or refused), items, enum, const; annotations
 * and bounds are not enforced, combining keywords ($ref, anyOf, ...)
 * refused. Returns 0, or -1 with a 400 naming response_format. */
int serve_format_read(const struct cJSON *response_format, struct serve_format **format, struct serve_error *err);
/* tool_choice "required" (only NULL) or naming a function (only its name):
 * the reply is one call, as Qwen3's template writes it, of one of
 * tools[0..n) (the request's, as serve_tools.c keeps them) with arguments
 * that hold its parameters' schema (any object where the machine cannot
 * hold it), "</tool_call>" inside it written "<\/tool_call>". -1 with a
 * 400 naming tool_choice when no tool fits. */
int serve_format_tool_call(char *const *tools, size_t n, const char *only, struct serve_format **format,
                           struct serve_error *err);
/* The fewest bytes of a value of the format (at most 2^24). */
uint32_t serve_format_shortest(const struct serve_format *format);
struct serve_format *serve_format_ref(struct serve_format *format);
void serve_format_unref(struct serve_format *format);

/* The vocabulary as the machine sees it: each token's bytes, the end
 * tokens, and the tokens a reply's text leaves out (never allowed). One
 * per model, made at start. NULL when out of memory or without a tokenizer. */
struct serve_vocab;
struct serve_vocab *serve_vocab_new(const qpack_model *model);
/* A vocabulary of NUL-terminated tokens (held, not copied), token end
 * the end: for the tests. */
struct serve_vocab *serve_vocab_of(const char *const *tokens, uint32_t n, int32_t end);
void serve_vocab_free(struct serve_vocab *vocab);

/* One reply's place in its format; with think, the format begins after
 * the reply's </think> token. */
struct serve_format_state;
struct serve_format_state *serve_format_start(struct serve_format *format, const struct serve_vocab *vocab,
                                              bool think);
void serve_format_end(struct serve_format_state *state);

/* The reply may have at most `tokens` tokens (its thinking and the end
 * token included): from then on a token is allowed only when the value
 * can still close, and the end token come, within them (assuming, as in
 * byte-level vocabularies, a token for every single byte); where it
 * cannot, only tokens that bring the value nearer its end. */
void serve_format_budget(struct serve_format_state *state, uint32_t tokens);

/* qpack_sampler_params.allow: whether token keeps the reply the start of a
 * value of the format (an end token: whether the value is complete). */
bool serve_format_allows(void *state, int32_t token);

/* The token the reply took; -1 if it was not allowed. */
int serve_format_take(struct serve_format_state *state, int32_t token);

/* Text fed as if the reply had written it (the tests' way in); -1 where it
 * leaves the format. */
int serve_format_feed_text(struct serve_format_state *state, const char *text, size_t len);

/* The value is complete: only an end token may follow. */
bool serve_format_complete(const struct serve_format_state *state);

#endif
