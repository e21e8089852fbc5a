/* serve.c - `qrun serve`: options, start-up, signals and shutdown.
 *
 * A single model is loaded once, at start; several load on first use
 * (serve_models.c). `--parallel` sessions share a model's weight maps
 * (serve_sched.c); libmicrohttpd answers on threads of its own
 * (serve_http.c, serve_conn.c). The main thread only waits for SIGINT or SIGTERM, which
 * every thread blocks, and then shuts down in order: stop accepting, end
 * what waits and interrupt what runs (each client gets its answer or its
 * error), close the connections, free the sessions and the models (every
 * BPF object with them), exit 0. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "cli_call.h"
#include "cli_kv.h"
#include "cli_sampling.h"
#include "cli_suggest.h"
#include "stdout_policy.h"
#include "serve.h"

#define DRAIN_MS 5000           /* at shutdown, for the last answers to go out */
#define FD_RESERVE 1024         /* descriptors kept for the model's BPF objects and files */

struct serve_opts {
    const char *models[SERVE_MAX_MODELS];   /* -m, in order */
    unsigned n_models;
    const char *models_dir;     /* --models-dir DIR */
    unsigned max_loaded;
    const char *host, *api_key, *name;
    const char *slot_save_path; /* --slot-save-path DIR */
    unsigned port, parallel, queue, timeout_s, threads, max_connections, max_per_ip, lookup;
    uint32_t ctx;
    qpack_backend backend;
    qpack_kv_cache kv_cache;
    uint32_t call_us;
    qpack_schedule schedule;
    bool no_verify, quiet, strict_model;
};

static const char usage_text[] =
    "usage: qrun serve -m MODEL.qpk [-m MODEL.qpk ...] [--models-dir DIR] [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server: the model is loaded once (several: --max-loaded)\n"
    "and answers\n"
    "  POST /v1/chat/completions   messages through Qwen3's chat template\n"
    "  POST /v1/completions        a prompt as text or as token ids\n"
    "       (max_tokens, temperature, top_p, top_k, min_p, repeat_penalty,\n"
    "       repeat_last_n, presence_penalty, frequency_penalty, logit_bias, seed,\n"
    "       stop, n, echo (completions), logprobs, top_logprobs (chat),\n"
    "       stream: server-sent events ending in \"data: [DONE]\",\n"
    "       stream_options.include_usage; chat: chat_template_kwargs.enable_thinking,\n"
    "       default false: a reply's <think> block comes as reasoning_content;\n"
    "       tools, tool messages: a reply's <tool_call> blocks come as tool_calls;\n"
    "       tool_choice none, auto, required or a function's name: a forced call\n"
    "       held to the tool's parameters; response_format json_object or\n"
    "       json_schema: the reply held to it by constrained decoding; a sampling field\n"
    "       left out takes the model's generation_config.json value, or without one\n"
    "       " CLI_SAMPLING_DEFAULT ", as qrun)\n"
    "  POST /v1/responses          OpenAI's Responses API: input items, instructions,\n"
    "                              function tools and calls, text.format, its stream events,\n"
    "                              previous_response_id (the last 256 responses or 64 MiB kept)\n"
    "  POST /v1/messages           Anthropic's Messages API: system, text, tool_use, tool_result\n"
    "                              and thinking blocks, max_tokens, stop_sequences, temperature,\n"
    "                              top_p, top_k, tools, tool_choice, thinking, stream (its events)\n"
    "  POST /v1/messages/count_tokens  {\"input_tokens\": N} of a Messages request's prompt\n"
    "  POST /v1/embeddings         an embedding model's vectors (1_Pooling in its checkpoint):\n"
    "                              input, dimensions, encoding_format float or base64\n"
    "  POST /v1/rerank, /rerank    a reranker's scores (task rerank in its container):\n"
    "                              query, documents, top_n, return_documents,\n"
    "                              instruction; P(\"yes\") of each document's prompt\n"
    "                              (Qwen3-Reranker's), best first\n"
    "  GET  /v1/models             the model, named by --name, with its context; several:\n"
    "                              each, with status.value loaded, loading or unloaded\n"
    "  GET  /health                {\"status\":\"ok\"}\n"
    "  GET  /metrics               Prometheus text: requests, tokens, seconds, sessions, BPF map bytes\n"
    "  GET  /                      a chat page that streams replies\n"
    "  POST /tokenize              llama-server's: {\"content\": TEXT} to {\"tokens\": [...]}\n"
    "                              (\"with_pieces\": true: each id with its text)\n"
    "  POST /detokenize            {\"tokens\": [...]} to {\"content\": TEXT}\n"
    "  GET  /props, /slots         llama-server's: the settings; each session, busy or free\n"
    "  POST /apply-template        llama-server's: a chat request's prompt, as text\n"
    "  POST /slots/ID?action=save|restore|erase  llama-server's: session ID's tokens and KV\n"
    "                              cache to or from {\"filename\": NAME} in --slot-save-path\n"
    "                              (checksummed; a file of another model or cache type, or\n"
    "                              with more tokens than the context, is refused, 400), or\n"
    "                              emptied; 409 while the session runs a request, 501\n"
    "                              without --slot-save-path\n"
    "\n"
    "  -m, --model PATH       the .qpk container, or pin:NAME, a model qpack load pinned\n"
    "                         (--parallel N claims N of its sessions); again for another\n"
    "      --models-dir DIR   every DIR/NAME.qpk too (a file or a link to one, not hidden)\n"
    "      --max-loaded N     several models: each is named by its file (NAME.qpk: NAME;\n"
    "                         pin:NAME as given) and a request's model picks one (none:\n"
    "                         400; unknown: 404 model_not_found; GET /props, /slots and\n"
    "                         POST /slots/ID take ?model=NAME); a model loads on its first\n"
    "                         request, which waits meanwhile, N at most at once (1 to 256,\n"
    "                         default 1), each with its own --parallel sessions and --queue;\n"
    "                         for another, the least recently used no request holds is\n"
    "                         unloaded, or the least recently used once its requests end\n"
    "      --host ADDR        address to listen on (default 127.0.0.1: this machine only)\n"
    "      --port N           TCP port (default 8080; 0: any free port, printed at start)\n"
    "      --parallel N       sessions generating at once, each with its own sequence, all\n"
    "                         sharing the weights and run together, a step of all in one\n"
            "                         batch (1 to 64, default 1)\n"
    "      --lookup N         greedy replies (temperature 0, no penalty, bias, format or\n"
    "                         log probabilities) decode by exact lookup: each step drafts up\n"
    "                         to N tokens from the text so far and keeps those the model\n"
    "                         itself chooses, the same reply in fewer steps (1 to 15;\n"
    "                         default 0: off)\n"
    "      --queue N          requests that may wait for a session (0 to 1024, default 16);\n"
    "                         beyond them a request gets 503 with a JSON error\n"
    "      --api-key KEY      requests need the header Authorization: Bearer KEY or\n"
    "                         x-api-key: KEY (401 otherwise); / and /health stay open\n"
    "      --name NAME        the model's id in /v1/models and in replies (default: the\n"
    "                         file's name without .qpk); a request naming another model\n"
    "                         is served by this one (as llama-server does), unless\n"
    "      --strict-model     a request naming another model gets 404\n"
    "  -c, --ctx N            positions per session (default min(4096, model's)); a longer\n"
    "                         prompt gets 400 context_length_exceeded, a reply stops there\n"
    CLI_KV_CACHE_HELP
    CLI_CALL_US_HELP
    CLI_SCHEDULE_HELP
    "      --backend B        bpf (default; needs root or CAP_BPF + CAP_PERFMON) or emu\n"
    "      --threads N        1 or 2 threads computing each step (default 2)\n"
    "      --no-verify        skip the container's checksums at start-up (your own files only)\n"
    "      --timeout S        a request must arrive whole, head and body, within S seconds of\n"
    "                         its connection's start or of the previous reply, or the\n"
    "                         connection is closed (1 to 3600, default 60)\n"
    "      --max-connections N  open connections at most (16 to 65536, default 4096; the\n"
    "                         open-file limit is raised to fit); idle ones cost no thread;\n"
    "                         past N, a new one closes the one waiting longest for its request\n"
    "      --max-per-ip N     open connections from one address at most (1 to 65536,\n"
    "                         default 256)\n"
    "      --slot-save-path DIR  the folder of POST /slots/ID's files (names: no '/', no\n"
    "                         '..', no leading dot, 255 bytes at most); without it those\n"
    "                         actions get 501\n"
    "      --quiet            no line per request on stderr\n"
    "      --version          the version and the git commit\n"
    "  -h, --help             this text\n"
    "\n"
    "Request bodies must be JSON of at most 1 MiB, whatever their Content-Type; a\n"
    "malformed or oversized one, a known field of the wrong type or range, a field asking\n"
    "for what is not supported yet (best_of above 1, a completion's suffix or tools, the\n"
    "legacy functions and function_call), or a\n"
    "prompt longer than the context gets a 4xx status with OpenAI's error object\n"
    "(Anthropic's on /v1/messages); unknown fields are ignored. A request a browser\n"
    "sends from another site's page (an Origin header naming another host) gets 403. A\n"
    "client that disconnects stops its generation. SIGINT or SIGTERM: stop accepting,\n"
    "cancel what waits or runs, release every BPF object, exit 0.\n"
    "Exit status: 0 stopped by a signal, 1 error, 2 bad usage.\n";

static int print_usage(void)
{
    qp_stdout_write(usage_text, sizeof usage_text - 1);
    return qp_stdout_finish("qrun serve", 0);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "qrun serve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (try qrun serve --help)\n");
    return 2;
}

/* a whole decimal number in [lo, hi] */
static bool parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < lo || v > hi)
        return false;
    *out = (unsigned)v;
    return true;
}

enum { O_HOST = 256, O_PORT, O_PARALLEL, O_QUEUE, O_API_KEY, O_NAME, O_BACKEND, O_THREADS, O_NO_VERIFY, O_TIMEOUT,
       O_QUIET, O_VERSION, O_STRICT_MODEL, O_MAX_CONNECTIONS, O_MAX_PER_IP, O_LOOKUP, O_KV_CACHE, O_CALL_US,
       O_SLOT_SAVE_PATH, O_MODELS_DIR, O_MAX_LOADED, O_SCHEDULE };

/* returns -1 to go on, else an exit status */
static int parse_number_option(int opt, const char *arg, struct serve_opts *o)
{
    unsigned v;
    switch (opt) {
    case O_PORT:
        if (!parse_uint(arg, 0, 65535, &o->port))
            return bad_usage("--port must be 0 to 65535, not '%s'", arg);
        return -1;
    case O_PARALLEL:
        if (!parse_uint(arg, 1, 64, &o->parallel))
            return bad_usage("--parallel must be 1 to 64, not '%s'", arg);
        return -1;
    case O_LOOKUP:
        if (!parse_uint(arg, 1, 15, &o->lookup))
            return bad_usage("--lookup must be 1 to 15, not '%s'", arg);
        return -1;
    case O_QUEUE:
        if (!parse_uint(arg, 0, 1024, &o->queue))
            return bad_usage("--queue must be 0 to 1024, not '%s'", arg);
        return -1;
    case O_THREADS:
        if (!parse_uint(arg, 1, 2, &o->threads))
            return bad_usage("--threads must be 1 or 2, not '%s'", arg);
        return -1;
    case O_TIMEOUT:
        if (!parse_uint(arg, 1, 3600, &o->timeout_s))
            return bad_usage("--timeout must be 1 to 3600 seconds, not '%s'", arg);
        return -1;
    case O_MAX_CONNECTIONS:
        if (!parse_uint(arg, 16, 65536, &o->max_connections))
            return bad_usage("--max-connections must be 16 to 65536, not '%s'", arg);
        return -1;
    case O_MAX_PER_IP:
        if (!parse_uint(arg, 1, 65536, &o->max_per_ip))
            return bad_usage("--max-per-ip must be 1 to 65536, not '%s'", arg);
        return -1;
    case O_MAX_LOADED:
        if (!parse_uint(arg, 1, SERVE_MAX_MODELS, &o->max_loaded))
            return bad_usage("--max-loaded must be 1 to 256, not '%s'", arg);
        return -1;
    case 'c':
        if (!parse_uint(arg, 1, UINT32_MAX, &v))
            return bad_usage("--ctx must be a positive number, not '%s'", arg);
        o->ctx = v;
        return -1;
    }
    return bad_usage("%s", "internal error: unknown option");
}

static int parse_options(int argc, char **argv, struct serve_opts *o)
{
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'}, {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT}, {"parallel", required_argument, 0, O_PARALLEL},
        {"queue", required_argument, 0, O_QUEUE}, {"api-key", required_argument, 0, O_API_KEY},
        {"name", required_argument, 0, O_NAME}, {"ctx", required_argument, 0, 'c'},
        {"backend", required_argument, 0, O_BACKEND}, {"threads", required_argument, 0, O_THREADS},
        {"no-verify", no_argument, 0, O_NO_VERIFY}, {"timeout", required_argument, 0, O_TIMEOUT},
        {"quiet", no_argument, 0, O_QUIET}, {"version", no_argument, 0, O_VERSION},
        {"strict-model", no_argument, 0, O_STRICT_MODEL},
        {"max-connections", required_argument, 0, O_MAX_CONNECTIONS},
        {"max-per-ip", required_argument, 0, O_MAX_PER_IP}, {"lookup", required_argument, 0, O_LOOKUP},
        {"kv-cache", required_argument, 0, O_KV_CACHE},
        {"call-us", required_argument, 0, O_CALL_US},
        {"schedule", required_argument, 0, O_SCHEDULE},
        {"slot-save-path", required_argument, 0, O_SLOT_SAVE_PATH},
        {"models-dir", required_argument, 0, O_MODELS_DIR}, {"max-loaded", required_argument, 0, O_MAX_LOADED},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (struct serve_opts){.host = "127.0.0.1", .port = 8080, .parallel = 1, .queue = 16, .timeout_s = 60,
                             .threads = 2, .max_connections = 4096, .max_per_ip = 256, .max_loaded = 1,
                             .backend = QPACK_BACKEND_BPF};
    opterr = 0;
    optind = 1;
    int opt, rc;
    while ((opt = getopt_long(argc, argv, ":m:c:h", longs, NULL)) != -1) {
        switch (opt) {
        case 'm':
            if (o->n_models == SERVE_MAX_MODELS)
                return bad_usage("more than %s models", "256");
            o->models[o->n_models++] = optarg;
            break;
        case O_MODELS_DIR: o->models_dir = optarg; break;
        case O_HOST: o->host = optarg; break;
        case O_API_KEY: o->api_key = optarg; break;
        case O_NAME: o->name = optarg; break;
        case O_NO_VERIFY: o->no_verify = true; break;
        case O_QUIET: o->quiet = true; break;
        case O_STRICT_MODEL: o->strict_model = true; break;
        case O_SLOT_SAVE_PATH: o->slot_save_path = optarg; break;
        case O_BACKEND:
            if (!strcmp(optarg, "bpf"))
                o->backend = QPACK_BACKEND_BPF;
            else if (!strcmp(optarg, "emu"))
                o->backend = QPACK_BACKEND_EMU;
            else
                return bad_usage("--backend must be bpf or emu, not '%s'", optarg);
            break;
        case O_KV_CACHE:
            if (cli_kv_cache("qrun serve", optarg, &o->kv_cache))
                return 2;
            break;
        case O_CALL_US:
            if (cli_call_us("qrun serve", optarg, &o->call_us))
                return 2;
            break;
        case O_SCHEDULE:
            if (cli_schedule("qrun serve", optarg, &o->schedule))
                return 2;
            break;
        case O_VERSION: exit(qp_print_version("qrun"));
        case 'h': exit(print_usage());
        case ':': return bad_usage("option '%s' needs a value", argv[optind - 1]);
        case '?': qp_cli_unknown_option("qrun serve", "qrun serve", argv[optind - 1], optopt, longs); return 2;
        default:
            if ((rc = parse_number_option(opt, optarg, o)) >= 0)
                return rc;
        }
    }
    if (optind < argc)
        return bad_usage("unexpected argument '%s'", argv[optind]);
    if (!o->n_models && !o->models_dir)
        return bad_usage("%s", "no model: give -m MODEL.qpk or --models-dir DIR");
    if (o->name && (o->n_models != 1 || o->models_dir))
        return bad_usage("%s", "--name names a single -m model; with several, each is named by its file");
    if (o->api_key && !*o->api_key)
        return bad_usage("%s", "--api-key must not be empty");
    struct stat st;
    if (o->slot_save_path && (stat(o->slot_save_path, &st) || !S_ISDIR(st.st_mode)))
        return bad_usage("--slot-save-path %s is not a folder", o->slot_save_path);
    return -1;
}

/* the file's name without its directory and ".qpk" */
static void model_name(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t n = strlen(base);
    if (n > 4 && !strcmp(base + n - 4, ".qpk"))
        n -= 4;
    snprintf(out, cap, "%.*s", (int)n, base);
}

/* blocks the stop signals in this thread and in every thread it starts */
static void block_stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Each connection holds a descriptor: the soft open-file limit is raised,
 * up to the hard one, to fit `want` of them and the spare ones (closing)
 * beside FD_RESERVE; returns how many fit. */
static unsigned fit_connections(unsigned want)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r))
        return want;
    const rlim_t reserve = FD_RESERVE + SERVE_SPARE_CONNECTIONS;
    rlim_t need = (rlim_t)want + reserve;
    if (r.rlim_cur < need) {
        r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max >= need ? need : r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
        getrlimit(RLIMIT_NOFILE, &r);
    }
    if (r.rlim_cur >= need)
        return want;
    unsigned fit = r.rlim_cur > reserve + 16 ? (unsigned)(r.rlim_cur - reserve) : 16;
    fprintf(stderr, "qrun serve: the open-file limit (ulimit -n %llu) fits %u connections, not %u\n",
            (unsigned long long)r.rlim_cur, fit, want);
    return fit;
}

/* Several models: each must be a container (its header read, nothing
 * loaded), or pin:NAME, before the server starts; -1 with a line in msg. */
static int check_models(const struct serve_opts *o, const struct serve_models *t, char *msg, size_t msg_len)
{
    for (unsigned i = 0; i < serve_models_count(t); i++) {
        const char *path = serve_models_path(t, i);
        qpack_model_info info;
        qpack_error e;
        if (strncmp(path, "pin:", 4) && qpack_model_inspect(path, o->backend, &info, &e)) {
            snprintf(msg, msg_len, "%s", e.message);
            return -1;
        }
    }
    return 0;
}

/* The table of -m's models in order, then --models-dir's (names checked,
 * none twice); a single model is loaded now, its errors at start. */
static int open_models(const struct serve_opts *o, struct serve_models **out, const qpack_model **single)
{
    struct serve_models_config cfg = {.params = qpack_model_default_params(), .parallel = o->parallel,
                                      .queue = o->queue, .lookup = o->lookup, .max_loaded = o->max_loaded,
                                      .strict = o->strict_model};
    cfg.params.backend = o->backend;
    cfg.params.ctx = o->ctx;
    cfg.params.threads = o->threads;
    cfg.params.no_verify = o->no_verify;
    cfg.params.kv_cache = o->kv_cache;
    cfg.params.call_us = o->call_us;
    cfg.params.schedule = o->schedule;
    struct serve_models *t;
    if (serve_models_new(&t, &cfg)) {
        fprintf(stderr, "qrun serve: out of memory\n");
        return 1;
    }
    *out = t;
    char msg[768] = "";
    int rc = 0;
    for (unsigned i = 0; i < o->n_models && !rc; i++) {
        char name[256];
        if (o->name)
            snprintf(name, sizeof name, "%s", o->name);
        else
            model_name(o->models[i], name, sizeof name);
        rc = serve_models_add(t, name, o->models[i], msg, sizeof msg);
    }
    if (!rc && o->models_dir)
        rc = serve_models_add_dir(t, o->models_dir, msg, sizeof msg);
    unsigned n = serve_models_count(t);
    if (!rc && !n) {
        snprintf(msg, sizeof msg, "--models-dir %s holds no NAME.qpk", o->models_dir);
        rc = -1;
    }
    if (!rc && n > 1)
        rc = check_models(o, t, msg, sizeof msg) || serve_models_start(t, msg, sizeof msg);
    qpack_error e;
    if (!rc && n == 1 && serve_models_load(t, 0, single, &e)) {
        snprintf(msg, sizeof msg, "%s", e.message);
        rc = -1;
    }
    if (rc) {
        fprintf(stderr, "qrun serve: %s\n", msg);
        return 1;
    }
    return 0;
}

/* the line that says the server listens (the tests read its port) */
static void print_start(const struct serve_opts *o, const struct serve_models *t, const qpack_model *single,
                        unsigned port)
{
    bool v6 = strchr(o->host, ':') != NULL;
    char what[600];
    if (single) {
        const qpack_model_info *i = qpack_model_get_info(single);
        snprintf(what, sizeof what, "%s (%s, %s, context %u, KV cache %s)", serve_models_alias(t, 0), i->format,
                 i->backend, i->ctx, i->kv_cache);
    } else {
        int at = snprintf(what, sizeof what, "%u models, at most %u loaded at once (", serve_models_count(t),
                          o->max_loaded);
        for (unsigned i = 0; i < serve_models_count(t) && at > 0 && (size_t)at < sizeof what; i++)
            at += snprintf(what + at, sizeof what - (size_t)at, "%s%s", i ? ", " : "", serve_models_alias(t, i));
        if (at > 0 && (size_t)at + 1 < sizeof what)
            snprintf(what + at, sizeof what - (size_t)at, ")");
        else
            snprintf(what + sizeof what - 5, 5, "...)");
    }
    fprintf(stderr, "qrun serve: %s on http://%s%s%s:%u/ with %u session%s and a queue of %u%s\n", what,
            v6 ? "[" : "", o->host, v6 ? "]" : "", port, o->parallel, o->parallel == 1 ? "" : "s", o->queue,
            single ? "" : " per loaded model");
}

static int run(const struct serve_opts *o, struct serve_models *t, const qpack_model *single, const sigset_t *stop)
{
    struct serve_http_config cfg = {
        .models = t, .api_key = o->api_key, .host = o->host, .port = o->port,
        .timeout_s = o->timeout_s, .max_connections = fit_connections(o->max_connections),
        .max_per_ip = o->max_per_ip, .log = !o->quiet, .slot_save_path = o->slot_save_path,
    };
    struct serve_http *http;
    char msg[600];
    if (serve_http_start(&http, &cfg, msg, sizeof msg)) {
        fprintf(stderr, "qrun serve: %s\n", msg);
        return 1;
    }
    print_start(o, t, single, serve_http_port(http));
    int sig = 0;
    sigwait(stop, &sig);
    fprintf(stderr, "qrun serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    serve_http_quiesce(http);
    serve_models_stop(t);
    serve_http_drain(http, DRAIN_MS);
    serve_http_stop(http);
    return 0;
}

int serve_main(int argc, char **argv)
{
    struct serve_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    sigset_t stop;
    block_stop_signals(&stop);
    struct serve_models *t = NULL;
    const qpack_model *single = NULL;
    rc = open_models(&o, &t, &single);
    if (!rc)
        rc = run(&o, t, single, &stop);
    serve_models_free(t);
    if (!rc)
        fprintf(stderr, "qrun serve: stopped\n");
    return rc;
}
