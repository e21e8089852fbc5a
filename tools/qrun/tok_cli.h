/* tok_cli.h - the `tokenize` and `detokenize` subcommands (for qrun's main).
 *
 *   PROG tokenize   (--tokenizer FILE | -m MODEL.qpk) [--jsonl]
 *   PROG detokenize (--tokenizer FILE | -m MODEL.qpk) [--jsonl] [--skip-special]
 *
 * tokenize reads all of stdin as one text and prints its ids, separated by
 * spaces, on one line. detokenize reads ids separated by spaces/newlines and
 * prints the text, nothing added. With --jsonl both work line by line: one
 * JSON string per line in, one JSON array of ids per line out, and back.
 *
 * Input policy: text must be well-formed UTF-8, else the command fails with
 * the byte offset (and line, with --jsonl) and exit status 1; nothing is
 * replaced. U+0000 is an ordinary character: raw NUL bytes in plain text,
 * "\u0000" in JSON. Decoded text that is not well-formed UTF-8 (token
 * sequences cut inside a character) gets U+FFFD, as Hugging Face's decode.
 *
 * detokenize -m: ids past the tokenizer's but inside the model's vocabulary
 * (padding ids) print no text, as in generation; with --tokenizer alone an
 * id the tokenizer lacks is an error.
 *
 * Output that cannot be written is an error (stdout_policy.h): exit status 1 with
 * one line, or 141 quietly when the reader went away.
 *
 * Exit status: 0 done, 1 bad input or tokenizer or lost output, 2 bad
 * usage, 141 closed pipe.
 */
#ifndef QP_TOK_CLI_H
#define QP_TOK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "tokenizer.h"

/* Loads the tokenizer stored in a .qpk container, and sets *model_vocab to
 * the model's vocabulary size (which may exceed the tokenizer's: padding
 * ids). qrun installs one with tok_cli_set_model_loader() before
 * dispatching; until then -m reports that containers are not supported and
 * --tokenizer is the way. */
typedef int (*tok_cli_model_loader)(const char *model_path, qp_tok **out, uint32_t *model_vocab, qp_err *err);

void tok_cli_set_model_loader(tok_cli_model_loader loader);

/* The loader for .qpk containers (tok_cli_qpk.c, linked into qrun). */
int tok_cli_container_loader(const char *path, qp_tok **out, uint32_t *model_vocab, qp_err *err);

/* argv[0] is the subcommand ("tokenize" or "detokenize"); progname prefixes
 * messages ("qrun"). Uses stdin, stdout and stderr; returns the exit status. */
int tok_cli_main(int argc, char **argv, const char *progname);

/* The same with explicit streams (for tests). */
int tok_cli_run(int argc, char **argv, const char *progname, FILE *in, FILE *out, FILE *err);

#endif
