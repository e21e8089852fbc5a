/* tok_cli.c - `tokenize` / `detokenize` (see tok_cli.h). */
#include "tok_cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stdout_policy.h"
#include "tok_json.h"
#include "utf8_stream.h"

enum { EXIT_OK = 0, EXIT_BAD_INPUT = 1, EXIT_USAGE = 2 };

static tok_cli_model_loader model_loader; /* filled by qrun: the .qpk reader */

void tok_cli_set_model_loader(tok_cli_model_loader loader)
{
    model_loader = loader;
}

typedef struct cli {
    const char *prog, *cmd;
    const char *tokenizer_path, *model_path;
    int jsonl, skip_special, decode;
    FILE *in, *out, *err;
    int out_errno;        /* errno of the first long write to out that failed */
    qp_tok *tok;
    uint32_t model_vocab; /* with -m: the model's vocabulary, maybe past the tokenizer's */
} cli;

static void usage(const cli *c, FILE *f)
{
    fprintf(f,
        "usage: %s tokenize   (--tokenizer FILE | -m MODEL.qpk) [--jsonl]\n"
        "       %s detokenize (--tokenizer FILE | -m MODEL.qpk) [--jsonl] [--skip-special]\n"
        "\n"
        "tokenize: all of stdin is one UTF-8 text; prints its token ids on one line,\n"
        "  separated by spaces. Special tokens written in the text (<|im_start|>...)\n"
        "  become their ids. U+0000 is an ordinary character; ill-formed UTF-8 is an\n"
        "  error that names its byte offset (exit status 1).\n"
        "detokenize: reads token ids separated by spaces or newlines; prints their\n"
        "  text with nothing added. Text that is not well-formed UTF-8 (ids cut inside\n"
        "  a character) gets U+FFFD, as Hugging Face's decode does. With -m, ids past\n"
        "  the tokenizer's but inside the model's vocabulary (a model's padding ids)\n"
        "  print no text, as in qrun's generation; with --tokenizer no model tells\n"
        "  padding from a mistake, and an id the tokenizer lacks is an error.\n"
        "\n"
        "  --tokenizer FILE  Hugging Face tokenizer.json\n"
        "  -m MODEL.qpk      the tokenizer stored in a qpack container\n"
        "  --jsonl           line by line: tokenize reads one JSON string per line and\n"
        "                    prints one JSON array of ids per line; detokenize the reverse\n"
        "  --skip-special    detokenize: leave out special tokens (<|im_end|>...)\n"
        "  --version         the version of %s\n"
        "  -h, --help        this help\n"
        "\n"
        "Exit status: 0 done, 1 bad input or tokenizer, or standard output could not be\n"
        "written, 2 bad usage, 141 when the reader of standard output went away (| head).\n",
        c->prog, c->prog, c->prog);
}

/* Prints "PROG CMD: message" and returns status. */
static int fail(const cli *c, int status, const char *msg)
{
    fprintf(c->err, "%s %s: %s\n", c->prog, c->cmd, msg);
    return status;
}

static int parse_args(cli *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **value = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(c, c->out);
            return -1;
        } else if (strcmp(a, "--version") == 0) {
            fprintf(c->out, "%s %s\n", c->prog, qp_version());
            return -1;
        } else if (strcmp(a, "--jsonl") == 0) {
            c->jsonl = 1;
        } else if (strcmp(a, "--skip-special") == 0 && c->decode) {
            c->skip_special = 1;
        } else if (strcmp(a, "--tokenizer") == 0) {
            value = &c->tokenizer_path;
        } else if (strncmp(a, "--tokenizer=", 12) == 0) {
            c->tokenizer_path = a + 12;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            value = &c->model_path;
        } else if (strncmp(a, "--model=", 8) == 0) {
            c->model_path = a + 8;
        } else {
            fprintf(c->err, "%s %s: unknown argument '%s'\n", c->prog, c->cmd, a);
            usage(c, c->err);
            return EXIT_USAGE;
        }
        if (value) {
            if (++i == argc) {
                fprintf(c->err, "%s %s: %s needs a value\n", c->prog, c->cmd, a);
                return EXIT_USAGE;
            }
            *value = argv[i];
        }
    }
    if (!c->tokenizer_path == !c->model_path) {
        fprintf(c->err, "%s %s: give one of --tokenizer FILE or -m MODEL.qpk\n", c->prog, c->cmd);
        usage(c, c->err);
        return EXIT_USAGE;
    }
    return 0;
}

static int load(cli *c)
{
    qp_err e = {{0}};
    if (c->tokenizer_path) {
        if (qp_tok_load_file(&c->tok, c->tokenizer_path, &e))
            return fail(c, EXIT_BAD_INPUT, e.msg);
        return 0;
    }
    if (!model_loader) /* hook: qrun sets the .qpk reader here */
        return fail(c, EXIT_USAGE, "-m: reading the tokenizer from a .qpk container is not "
                                   "available in this build; use --tokenizer FILE");
    if (model_loader(c->model_path, &c->tok, &c->model_vocab, &e))
        return fail(c, EXIT_BAD_INPUT, e.msg);
    return 0;
}

/* A long write to out; the reason of a failure is kept for the end. */
static void put(cli *c, const char *s, size_t n)
{
    errno = 0;
    if (fwrite(s, 1, n, c->out) != n && !c->out_errno)
        c->out_errno = errno;
}

static int read_all(FILE *f, qp_tok_text *t)
{
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        if (qp_tok_text_append(t, buf, n))
            return -1;
    return ferror(f) ? -1 : 0;
}

static int write_ids_plain(FILE *f, const qp_tok_ids *ids)
{
    for (size_t i = 0; i < ids->len; i++)
        fprintf(f, i ? " %d" : "%d", ids->v[i]);
    fputc('\n', f);
    return 0;
}

static void write_ids_json(FILE *f, const qp_tok_ids *ids)
{
    fputc('[', f);
    for (size_t i = 0; i < ids->len; i++)
        fprintf(f, i ? ",%d" : "%d", ids->v[i]);
    fputs("]\n", f);
}

/* ---- tokenize ---------------------------------------------------------- */

static int tokenize_plain(cli *c, const qp_tok_text *in)
{
    qp_tok_ids ids = {0};
    qp_err e = {{0}};
    char msg[600];
    if (qp_tok_encode(c->tok, in->s ? in->s : "", in->len, &ids, &e)) {
        snprintf(msg, sizeof(msg), "stdin: %s", e.msg);
        qp_tok_ids_free(&ids);
        return fail(c, EXIT_BAD_INPUT, msg);
    }
    write_ids_plain(c->out, &ids);
    qp_tok_ids_free(&ids);
    return EXIT_OK;
}

/* Calls fn on each line of in (without its '\n'); a last line without '\n'
 * counts, the empty "line" after a final '\n' does not. */
typedef int (*line_fn)(cli *c, const char *line, size_t len, size_t number, size_t offset);

static int each_line(cli *c, const qp_tok_text *in, line_fn fn)
{
    size_t pos = 0, number = 1;
    while (pos < in->len) {
        const char *nl = memchr(in->s + pos, '\n', in->len - pos);
        size_t len = nl ? (size_t)(nl - (in->s + pos)) : in->len - pos;
        int status = fn(c, in->s + pos, len, number, pos);
        if (status != EXIT_OK || ferror(c->out)) /* output lost: the end reports it */
            return status;
        pos += len + 1;
        number++;
    }
    return EXIT_OK;
}

static int line_error(cli *c, size_t number, size_t offset, const char *what)
{
    char msg[700];
    snprintf(msg, sizeof(msg), "stdin line %zu (starting at byte offset %zu): %s", number, offset,
             what);
    return fail(c, EXIT_BAD_INPUT, msg);
}

static int tokenize_line(cli *c, const char *line, size_t len, size_t number, size_t offset)
{
    qp_err e = {{0}};
    qp_json j;
    qp_tok_text text = {0};
    qp_tok_ids ids = {0};
    int status = EXIT_OK;
    qp_json_init(&j, line, len, "JSON", &e);
    if (qp_json_peek(&j) != '"')
        status = line_error(c, number, offset, "expected a JSON string");
    else if (qp_json_string(&j, &text) || qp_json_end(&j))
        status = line_error(c, number, offset, e.msg);
    else if (qp_tok_encode(c->tok, text.s ? text.s : "", text.len, &ids, &e))
        status = line_error(c, number, offset, e.msg);
    else
        write_ids_json(c->out, &ids);
    qp_tok_text_free(&text);
    qp_tok_ids_free(&ids);
    return status;
}

/* ---- detokenize -------------------------------------------------------- */

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static int parse_id(const char *s, size_t n, int32_t *id)
{
    if (n == 0 || n > 9)
        return -1;
    int32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *id = v;
    return 0;
}

/* Ids that the model has and the tokenizer lacks (a model's padding ids)
 * have no text, as in qrun's generation and Hugging Face's decode: dropped.
 * Without a model (--tokenizer) nothing tells padding from a mistake, and
 * qp_tok_decode names the first id it lacks. */
static int drop_padding(const cli *c, qp_tok_ids *ids, qp_err *e)
{
    size_t kept = 0;
    for (size_t i = 0; i < ids->len; i++) {
        int32_t id = ids->v[i];
        if (c->model_vocab && !qp_tok_token_string(c->tok, id, NULL)) {
            if ((uint32_t)id >= c->model_vocab)
                return qp_fail(e, "token id %d is neither in the tokenizer (ids 0 to %d) nor in the model's "
                                  "vocabulary of %u", id, qp_tok_vocab_size(c->tok) - 1, c->model_vocab);
            continue;
        }
        ids->v[kept++] = id;
    }
    ids->len = kept;
    return 0;
}

static int detokenize_plain(cli *c, const qp_tok_text *in)
{
    qp_tok_ids ids = {0};
    qp_tok_text text = {0};
    qp_err e = {{0}};
    char msg[700];
    int status = EXIT_OK;
    for (size_t i = 0; i < in->len && status == EXIT_OK;) {
        if (is_space(in->s[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < in->len && !is_space(in->s[i]))
            i++;
        int32_t id;
        if (parse_id(in->s + start, i - start, &id)) {
            snprintf(msg, sizeof(msg), "stdin: byte offset %zu: \"%.*s\" is not a token id", start,
                     (int)(i - start > 40 ? 40 : i - start), in->s + start);
            status = fail(c, EXIT_BAD_INPUT, msg);
        } else if (qp_tok_ids_push(&ids, id)) {
            status = fail(c, EXIT_BAD_INPUT, "out of memory");
        }
    }
    if (status == EXIT_OK) {
        if (drop_padding(c, &ids, &e) ||
            qp_tok_decode(c->tok, ids.v, ids.len, c->skip_special ? QP_TOK_SKIP_SPECIAL : 0, &text, &e)) {
            snprintf(msg, sizeof(msg), "stdin: %s", e.msg);
            status = fail(c, EXIT_BAD_INPUT, msg);
        } else {
            put(c, text.s ? text.s : "", text.len);
        }
    }
    qp_tok_ids_free(&ids);
    qp_tok_text_free(&text);
    return status;
}

static int detokenize_line(cli *c, const char *line, size_t len, size_t number, size_t offset)
{
    qp_err e = {{0}};
    qp_json j;
    qp_tok_ids ids = {0};
    qp_tok_text text = {0}, json = {0};
    int status = EXIT_OK, first = 1, r;
    qp_json_init(&j, line, len, "JSON", &e);
    if (qp_json_expect(&j, '[', "(a JSON array of token ids)"))
        return line_error(c, number, offset, e.msg);
    while ((r = qp_json_next_element(&j, &first, "in the array")) == 1) {
        int64_t id;
        if (qp_json_int(&j, 0, INT32_MAX, &id, "token id") || qp_tok_ids_push(&ids, (int32_t)id)) {
            r = -1;
            break;
        }
    }
    if (r < 0 || qp_json_end(&j) || drop_padding(c, &ids, &e))
        status = line_error(c, number, offset, e.msg);
    else if (qp_tok_decode(c->tok, ids.v, ids.len, c->skip_special ? QP_TOK_SKIP_SPECIAL : 0, &text, &e))
        status = line_error(c, number, offset, e.msg);
    else if (qp_json_append_string(&json, text.s ? text.s : "", text.len) ||
             qp_tok_text_append(&json, "\n", 1))
        status = fail(c, EXIT_BAD_INPUT, "out of memory");
    else
        put(c, json.s, json.len);
    qp_tok_ids_free(&ids);
    qp_tok_text_free(&text);
    qp_tok_text_free(&json);
    return status;
}

/* ---- entry ----------------------------------------------------------------- */

int tok_cli_run(int argc, char **argv, const char *progname, FILE *in, FILE *out, FILE *err)
{
    cli c = {.prog = progname ? progname : "qrun", .cmd = argc > 0 ? argv[0] : "",
             .in = in, .out = out, .err = err};
    if (strcmp(c.cmd, "tokenize") == 0) {
        c.decode = 0;
    } else if (strcmp(c.cmd, "detokenize") == 0) {
        c.decode = 1;
    } else {
        fprintf(err, "%s: unknown command '%s' (tokenize or detokenize)\n", c.prog, c.cmd);
        return EXIT_USAGE;
    }
    char who[64]; /* "qrun tokenize" */
    snprintf(who, sizeof who, "%s %s", c.prog, c.cmd);
    int status = parse_args(&c, argc, argv);
    if (status) /* -1: --help or --version printed */
        return status < 0 ? qp_output_finish(out, 0, err, who, EXIT_OK) : status;
    if ((status = load(&c)))
        return status;
    qp_tok_text input = {0};
    if (read_all(in, &input)) {
        status = fail(&c, EXIT_BAD_INPUT, "stdin: read failed (or out of memory)");
    } else if (c.jsonl) {
        status = each_line(&c, &input, c.decode ? detokenize_line : tokenize_line);
    } else {
        status = c.decode ? detokenize_plain(&c, &input) : tokenize_plain(&c, &input);
    }
    qp_tok_text_free(&input);
    qp_tok_free(c.tok);
    return qp_output_finish(out, c.out_errno, err, who, status);
}

int tok_cli_main(int argc, char **argv, const char *progname)
{
    return tok_cli_run(argc, argv, progname, stdin, stdout, stderr);
}
