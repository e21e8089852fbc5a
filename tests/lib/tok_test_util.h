/* tok_test_util.h - shared helpers of the tokenizer tests (and of the GGUF
 * reader's, which rebuilds the tokenizer): the conformance cases and files. */
#ifndef QP_TOK_TEST_UTIL_H
#define QP_TOK_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define TOK_ASSET QP_SOURCE_DIR "/assets/qwen3-tokenizer/tokenizer.json"
#define TOK_DATA QP_SOURCE_DIR "/tests/data/tokenizer"

/* One line of encode.jsonl or decode.jsonl. */
typedef struct tok_case {
    char name[128];
    qp_tok_text text;    /* encode: the input; decode: the expected text */
    qp_tok_text decoded; /* encode only: the oracle's decode of ids */
    qp_tok_ids ids;
    int skip_special;    /* decode only */
} tok_case;

/* Reads a JSONL file of cases; aborts the test on any error. */
tok_case *tok_cases_load(const char *path, size_t *n);
void tok_cases_free(tok_case *cases, size_t n);

/* Reads a whole file (aborts on error); *len gets its size. */
char *tok_read_file(const char *path, size_t *len);

/* The loaded official tokenizer (loaded once, aborts on error). */
qp_tok *tok_official(void);

#endif
