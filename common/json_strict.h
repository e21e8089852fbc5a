/* json_strict.h - JSON read so that it cannot mean one thing to qpack and
 * another to Hugging Face (Python's json module, serde in the tokenizers
 * and safetensors crates):
 *   - a key repeated in one object: cJSON's lookups find the first value,
 *     Python's json keeps the last (and serde refuses a repeated field);
 *   - an escaped NUL (\u0000): cJSON cuts the string there, Python keeps it;
 *   - bytes that are not UTF-8, or a raw control character inside a
 *     string: cJSON takes them, Python's json (and serde) refuse them.
 * Such files are refused with one line naming the file and the key or the
 * byte offset.
 */
#ifndef QP_JSON_STRICT_H
#define QP_JSON_STRICT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Fails, naming the key and the object it is in, when any object in the
 * tree of root (root included; a member of an object is named by its key)
 * has a key twice. name labels the message. */
int json_refuse_duplicate_keys(const cJSON *root, const char *name, qp_err *err);

/* true when the JSON text has an escaped NUL (\u0000) in a string. In valid
 * JSON every backslash starts an escape, so a plain scan is exact. */
bool json_has_escaped_nul(const char *text, size_t len);

/* The offset of the first byte of text[0..len) that makes it unreadable
 * to a strict JSON reader: a byte that is not well-formed UTF-8 (overlong
 * forms and surrogates included), or a control character (below 0x20)
 * inside a string, which RFC 8259 forbids; len when there is none. *why
 * (may be NULL) says which. */
size_t json_find_unreadable(const char *text, size_t len, const char **why);

/* Every check: fails when text (whose parse is root) is not UTF-8, has a
 * raw control character in a string, an escaped NUL or a key twice in any
 * object. */
int json_refuse_ambiguous(const cJSON *root, const char *text, size_t len, const char *name, qp_err *err);

/* text parsed, as one JSON object that passes every check above; NULL
 * with "NAME: not a JSON object" or the check's error. */
cJSON *json_parse_object(const char *text, size_t len, const char *name, qp_err *err);

#endif
