/* qrun_options.c - qrun's command line: the help text, the options and
 * their values (each mistake one line, exit status 2), and a prompt read
 * from a file or stdin. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cli_call.h"
#include "cli_kv.h"
#include "cli_num.h"
#include "cli_sampling.h"
#include "cli_suggest.h"
#include "stdout_policy.h"
#include "fsafe.h"
#include "qrun.h"

void qrun_usage(FILE *out)
{
    fprintf(out,
            "usage: qrun -m MODEL.qpk [-p TEXT | -p - | -f FILE | --ids \"ID ...\"] [options]\n"
            "       qrun -m MODEL.qpk --chat [options]       interactive chat on stdin\n"
            "       qrun tokenize|detokenize (--tokenizer FILE | -m MODEL.qpk) [--jsonl]\n"
            "       qrun serve -m MODEL.qpk [--port N] ...   OpenAI-compatible HTTP server (serve --help)\n"
            "       qrun listen -m pin:NAME --udp PORT       answers UDP token requests in the kernel\n"
            "       qrun ask --udp HOST:PORT --ids \"ID ...\"  its client (listen --help, ask --help)\n"
            "\n"
            "  -m, --model PATH       the .qpk container (a Hugging Face folder or a GGUF file\n"
            "                         with --backend ref), or pin:NAME, a model qpack load\n"
            "                         pinned: opened in milliseconds, without root if its group\n"
            "                         allows, with the context and KV cache it was loaded with\n"
            "  -p, --prompt TEXT      prompt text (needs the tokenizer the container carries);\n"
            "                         must be well-formed UTF-8. An argument cannot hold a NUL\n"
            "                         byte: the text ends at the first one. -p - reads the\n"
            "                         prompt from stdin, whole\n"
            "  -f, --file FILE        the prompt is the text of FILE (as with -p -, one newline\n"
            "                         at its end is dropped, as llama.cpp does)\n"
            "      --ids \"ID ...\"     prompt as token ids (separated by spaces or commas)\n"
            "  -n, --new N            tokens to generate (default 32; 0: run the prompt only);\n"
            "                         with --chat, per reply, by default until the end of the\n"
            "                         turn or of the context, or at most %d tokens when the\n"
            "                         model carries no generation_config.json (it may be one\n"
            "                         that never ends a turn); a reply cut by -n or the\n"
            "                         context, or empty (the model ended its turn at once),\n"
            "                         says so on stderr after its line. The prompt and N must\n"
            "                         fit the context, checked before the model loads\n"
            "  -c, --ctx N            context length in positions, at most the model's maximum\n"
            "                         (default min(4096, model's), lowered in steps of 256\n"
            "                         until the maps fit MemAvailable less 512 MiB); checked\n"
            "                         before the load. Maps that do not fit are refused before\n"
            "                         any is created, with the figures and what would fit\n"
            "      --chat             wrap the prompt in Qwen3's chat template; stop at <|im_end|>\n"
            "                         or <|endoftext|>. Without a prompt: interactive, one user\n"
            "                         turn per line of stdin, each reply streamed and ended with\n"
            "                         a newline, the KV cache kept across turns. A line ending\n"
            "                         in \\ goes on on the next line; /help lists the commands:\n"
            "                         /clear forgets the conversation (and its cache), /system\n"
            "                         TEXT starts it again under a new system prompt, /think\n"
            "                         on|off, /bye ends the chat (// sends a line starting with\n"
            "                         /); empty lines are skipped; a line with invalid UTF-8 or a NUL byte\n"
            "                         is refused with a message, the chat goes on, and the exit\n"
            "                         status is then 1. When a turn and its reply (-n) do not\n"
            "                         fit the context, the oldest turns are dropped (the system\n"
            "                         prompt stays), with a note on stderr. On a terminal, lines\n"
            "                         are edited with libedit (arrows, this chat's history,\n"
            "                         ~/.editrc); Ctrl-C stops the reply and returns to the\n"
            "                         prompt; at the prompt it ends qrun\n"
            "      --system TEXT      with --chat: the system prompt\n"
            "      --think            with --chat: leave thinking on (no empty think block); the\n"
            "                         reasoning goes to stderr (faint on a terminal), the answer\n"
            "                         to stdout\n"
            "      --backend B        bpf (default), emu (the host twin, bit-identical), or ref\n"
            "                         (float64 reference from a Hugging Face folder or a GGUF\n"
            "                         file given as -m);\n"
            "                         bpf needs root or CAP_BPF + CAP_PERFMON, emu and ref none\n"
            "      --threads N        1 or 2 (default 2)\n"
            "      --no-verify        skip the container's tensor checksums and value-range checks\n"
            "                         at start-up (for containers you made yourself: a forged\n"
            "                         one can then compute wrong tokens)\n"
            "      --resident         all weights copied into BPF maps once at start-up (default)\n"
            "      --stream           the weights stay out of BPF maps: matrices are read from\n"
            "                         the container, unconverted, into a 64 MiB work map per\n"
            "                         batch of rows. Saves the weights' map memory (2.4 GB for\n"
            "                         q24 Qwen3-0.6B), not process memory (the file's pages are\n"
            "                         read through the page cache); slower. If the file is\n"
            "                         truncated meanwhile qrun stops with an error\n"
            CLI_KV_CACHE_HELP
            CLI_CALL_US_HELP
            CLI_SCHEDULE_HELP
            "      --session-wait S   -m pin:NAME whose sessions are all held by other processes:\n"
            "                         wait up to S seconds for one to be freed (default 0: refuse)\n"
            "      --temp T           sampling temperature, 0 to 100 (0: greedy). When none of\n"
            "                         --temp, --top-k, --top-p, --min-p and --repeat-penalty\n"
            "                         is given, the sampling is the one the model's authors\n"
            "                         give in its generation_config.json (Qwen3's: temp 0.6,\n"
            "                         top-k 20, top-p 0.95; in a chat without --think 0.7, 20,\n"
            "                         0.8), and without one, as qrun serve's, " CLI_SAMPLING_DEFAULT ";\n"
            "                         the options given change that default's fields; --temp 0\n"
            "                         for greedy (--lookup without --temp is greedy)\n"
            "      --top-k K          keep the K most likely tokens (0: all; default 40)\n"
            "      --top-p P          keep the smallest set with probability >= P, in (0, 1]\n"
            "                         (default 0.95)\n"
            "      --min-p P          drop tokens less likely than P times the most likely, in\n"
            "                         [0, 1] (0: none; default 0.05; llama.cpp's, applied\n"
            "                         before the temperature)\n"
            "      --repeat-penalty R divide the logit of each token among the last\n"
            "                         --repeat-last-n by R when positive, multiply it when\n"
            "                         negative (llama.cpp's), in (0, 100] (default 1: none)\n"
            "      --repeat-last-n N  the tokens --repeat-penalty looks at: the last N of the\n"
            "                         conversation, prompt included (default 64; 0: none; -1:\n"
            "                         the whole context)\n"
            "      --seed S           sampling seed, 0 to 2^64-1 (default 1)\n"
            "      --logit-bias ID=B  add B (-100 to 100) to token ID's logit before sampling,\n"
            "                         greedy too (repeatable, up to %d; llama.cpp's ID+B and\n"
            "                         ID-B too); -100 all but bans the token\n"
            "      --stop STRING      end the reply where its text first contains STRING, which\n"
            "                         is not printed (repeatable, up to %d)\n"
            "      --lookup N         lookup decoding, greedy only: draft up to N next tokens\n"
            "                         (1 to %d) by matching the latest 4..1 tokens against the\n"
            "                         earlier text (prompt and output), check the draft in one\n"
            "                         block pass and keep what the model itself would choose:\n"
            "                         the same tokens as without it, faster when text repeats.\n"
            "                         The draft's length adapts: doubled after a draft kept\n"
            "                         whole, cut to the part kept after one refused\n"
            "      --print-ids        print generated token ids instead of text\n"
            "      --dump-logits FILE write the last prompt position's logits (float32 LE;\n"
            "                         with interactive --chat: of the latest turn), whole or\n"
            "                         not at all; FILE must not be the model, the tokenizer or\n"
            "                         an existing non-regular file, and its folder must be\n"
            "                         writable (checked before the model loads)\n"
            "      --dump-logits-all FILE  every prompt position's logits, [positions x vocab]\n"
            "                         float32 LE (with interactive --chat: the latest turn's),\n"
            "                         on the same terms\n"
            "      --prompt-cache FILE  keep the session after the prompt in FILE (bpf, emu; as\n"
            "                         llama.cpp's): when FILE exists it is restored first and\n"
            "                         the longest prefix of the prompt it holds is reused, only\n"
            "                         the rest is fed (the same bits as feeding it all); then\n"
            "                         the session after the prompt is saved there (not when\n"
            "                         FILE held the whole prompt already). A file of another model\n"
            "                         or cache type, with more tokens than the context, or\n"
            "                         damaged, stops qrun with one line (status 1). --stats\n"
            "                         says how many tokens were restored and reused\n"
            "      --tokenizer FILE   use this tokenizer.json instead of the container's\n"
            "      --stats            start-up, prompt and decode timings, kernel calls and time\n"
            "                         per kernel, memory, on stderr (decode ms per token made\n"
            "                         by decode steps; with --lookup also ms per step, passes,\n"
            "                         drafted and kept tokens). Sizes in SI units, 1 MB = 10^6\n"
            "                         bytes, but for the KV cache's KiB a position (1024 bytes,\n"
            "                         as the docs give it)\n"
            "  -q, --quiet            no progress line (on a terminal, stderr shows one while\n"
            "                         the model loads and a long prompt is read)\n"
            "      --version          the version and the git commit qrun was built from\n"
            "  -h, --help             this text\n"
            "\n"
            "Generated ids without a token in the tokenizer (a model's padding ids) print no\n"
            "text. A container without a tokenizer runs --ids and prints ids (with a note); one\n"
            "whose tokenizer is damaged is refused. SIGINT or SIGTERM stops qrun within a\n"
            "kernel call (while the model loads, at once): the text printed so far ends with\n"
            "whole characters, an output file is left as it was, and the exit status is 130 or\n"
            "143. Standard output that cannot be written stops the generation at once: exit\n"
            "status 1 with one line, or 141 without a word when its reader went away\n"
            "(qrun ... | head).\n"
            "Environment: QP_BPF_STATS=1 prints the verifier's processed instructions per\n"
            "kernel at load; QP_MEM_AVAILABLE=BYTES stands in for MemAvailable (tests).\n"
            "Exit status: 0 done; 1 a runtime failure (a file, the model, BPF privilege, input\n"
            "text, output); 2 bad usage (an option or its value, -c past the model's maximum,\n"
            "a prompt and -n past the context); 130/143 interrupted; 141 closed pipe.\n",
            QRUN_CHAT_NEW, QRUN_BIAS_MAX, QRUN_STOPS_MAX, QRUN_LOOKUP_MAX);
}

/* --help: the text goes out in one checked write, so a failure names its
 * real cause however long the text grows past stdio's buffer */
static int print_usage(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem) {
        qrun_usage(mem);
        fclose(mem);
        qp_stdout_write(text, len);
    }
    free(text);
    return qp_stdout_finish("qrun", 0);
}

static int bad(const char *msg)
{
    fprintf(stderr, "qrun: %s\n", msg);
    return -1;
}

static int set_backend(struct options *o, const char *arg)
{
    if (!strcmp(arg, "bpf"))
        o->mp.backend = QPACK_BACKEND_BPF;
    else if (!strcmp(arg, "emu"))
        o->mp.backend = QPACK_BACKEND_EMU;
    else if (!strcmp(arg, "ref"))
        o->mp.backend = QPACK_BACKEND_REF;
    else {
        fprintf(stderr, "qrun: unknown backend '%s' (bpf, emu, ref)\n", arg);
        return -1;
    }
    return 0;
}

/* --repeat-last-n: a whole number, or -1 for the whole context */
static int set_repeat_last_n(struct options *o, const char *arg)
{
    uint64_t v;
    if (!strcmp(arg, "-1")) {
        o->repeat_last_n_ctx = true;
        return 0;
    }
    if (cli_uint("qrun", "--repeat-last-n", arg, 0, UINT32_MAX, &v))
        return -1;
    o->sp.repeat_last_n = (uint32_t)v;
    o->repeat_last_n_ctx = false;
    return 0;
}

enum {
    O_IDS = 256, O_BACKEND, O_THREADS, O_NO_VERIFY, O_STREAM, O_RESIDENT, O_TEMP, O_TOPK, O_TOPP, O_MINP,
    O_REPEAT_PENALTY, O_REPEAT_LAST_N, O_SEED, O_STOP, O_PRINT_IDS, O_DUMP, O_TOKENIZER, O_STATS, O_CHAT,
    O_SYSTEM, O_THINK, O_LOOKUP, O_DUMP_ALL, O_LOGIT_BIAS, O_VERSION, O_KV_CACHE, O_CALL_US,
    O_SESSION_WAIT, O_PROMPT_CACHE, O_SCHEDULE,
};

static const struct option longs[] = {
    {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
    {"file", required_argument, 0, 'f'}, {"new", required_argument, 0, 'n'},
    {"ctx", required_argument, 0, 'c'}, {"ids", required_argument, 0, O_IDS},
    {"backend", required_argument, 0, O_BACKEND}, {"threads", required_argument, 0, O_THREADS},
    {"no-verify", no_argument, 0, O_NO_VERIFY}, {"stream", no_argument, 0, O_STREAM},
    {"resident", no_argument, 0, O_RESIDENT}, {"temp", required_argument, 0, O_TEMP},
    {"top-k", required_argument, 0, O_TOPK}, {"top-p", required_argument, 0, O_TOPP},
    {"min-p", required_argument, 0, O_MINP}, {"repeat-penalty", required_argument, 0, O_REPEAT_PENALTY},
    {"repeat-last-n", required_argument, 0, O_REPEAT_LAST_N}, {"seed", required_argument, 0, O_SEED},
    {"stop", required_argument, 0, O_STOP}, {"print-ids", no_argument, 0, O_PRINT_IDS},
    {"dump-logits", required_argument, 0, O_DUMP}, {"tokenizer", required_argument, 0, O_TOKENIZER},
    {"stats", no_argument, 0, O_STATS}, {"chat", no_argument, 0, O_CHAT},
    {"system", required_argument, 0, O_SYSTEM}, {"think", no_argument, 0, O_THINK},
    {"lookup", required_argument, 0, O_LOOKUP}, {"dump-logits-all", required_argument, 0, O_DUMP_ALL},
    {"logit-bias", required_argument, 0, O_LOGIT_BIAS}, {"kv-cache", required_argument, 0, O_KV_CACHE},
    {"call-us", required_argument, 0, O_CALL_US}, {"session-wait", required_argument, 0, O_SESSION_WAIT},
    {"prompt-cache", required_argument, 0, O_PROMPT_CACHE}, {"schedule", required_argument, 0, O_SCHEDULE},
    {"quiet", no_argument, 0, 'q'}, {"version", no_argument, 0, O_VERSION}, {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* --logit-bias ID=BIAS, or llama.cpp's ID+BIAS / ID-BIAS */
static int add_logit_bias(struct options *o, const char *arg)
{
    if (o->sp.n_logit_bias == QRUN_BIAS_MAX) {
        fprintf(stderr, "qrun: at most %d --logit-bias options\n", QRUN_BIAS_MAX);
        return -1;
    }
    size_t n = strspn(arg, "0123456789");
    char id[16];
    if (!n || n >= sizeof id || !strchr("=+-", arg[n]) || !arg[n]) {
        fprintf(stderr, "qrun: --logit-bias takes ID=BIAS (as 151668=-100 or 151668+2), not '%s'\n", arg);
        return -1;
    }
    memcpy(id, arg, n);
    id[n] = 0;
    uint64_t v;
    double b;
    if (cli_uint("qrun", "--logit-bias's token id", id, 0, INT32_MAX, &v) ||
        cli_real("qrun", "--logit-bias's bias", arg + n + (arg[n] == '=' || arg[n] == '+'), -100, false, 100, &b))
        return -1;
    o->bias[o->sp.n_logit_bias++] = (qpack_logit_bias){(int32_t)v, b};
    o->sp.logit_bias = o->bias;
    return 0;
}

/* One option; -1 after its one line. */
static int take(struct options *o, int c, const char *arg)
{
    uint64_t v;
    switch (c) {
    case 'm': o->model = arg; return 0;
    case 'p': o->prompt = arg; return 0;
    case 'f': o->prompt_file = arg; return 0;
    case 'n':
        if (cli_uint("qrun", "-n", arg, 0, INT32_MAX, &v))
            return -1;
        o->n_new = (int32_t)v;
        return 0;
    case 'c':
        if (cli_uint("qrun", "-c", arg, 1, INT32_MAX, &v))
            return -1;
        o->ctx = (uint32_t)v;
        return 0;
    case 'q': o->quiet = true; return 0;
    case O_IDS: o->ids = arg; return 0;
    case O_BACKEND: return set_backend(o, arg);
    case O_THREADS:
        if (cli_uint("qrun", "--threads", arg, 1, 2, &v))
            return -1;
        o->mp.threads = (unsigned)v;
        return 0;
    case O_NO_VERIFY: o->mp.no_verify = true; return 0;
    case O_STREAM: o->mp.stream = true; return 0;
    case O_RESIDENT: o->mp.stream = false; return 0;
    case O_KV_CACHE: return cli_kv_cache("qrun", arg, &o->mp.kv_cache);
    case O_CALL_US: return cli_call_us("qrun", arg, &o->mp.call_us);
    case O_SCHEDULE: return cli_schedule("qrun", arg, &o->mp.schedule);
    case O_SESSION_WAIT:
        if (cli_uint("qrun", "--session-wait", arg, 0, 3600, &v))
            return -1;
        o->mp.session_wait_ms = (uint32_t)v * 1000;
        return 0;
    case O_TEMP:
        o->sampling_given = o->temp_given = true;
        return cli_real("qrun", "--temp", arg, 0, false, 100, &o->sp.temperature);
    case O_TOPK:
        o->sampling_given = true;
        if (cli_uint("qrun", "--top-k", arg, 0, UINT32_MAX, &v))
            return -1;
        o->sp.top_k = (uint32_t)v;
        return 0;
    case O_TOPP: o->sampling_given = true; return cli_real("qrun", "--top-p", arg, 0, true, 1, &o->sp.top_p);
    case O_MINP: o->sampling_given = true; return cli_real("qrun", "--min-p", arg, 0, false, 1, &o->sp.min_p);
    case O_REPEAT_PENALTY:
        o->sampling_given = true;
        return cli_real("qrun", "--repeat-penalty", arg, 0, true, 100, &o->sp.repeat_penalty);
    case O_REPEAT_LAST_N: return set_repeat_last_n(o, arg);
    case O_SEED: return cli_uint("qrun", "--seed", arg, 0, UINT64_MAX, &o->sp.seed);
    case O_STOP:
        if (!arg[0])
            return bad("--stop needs a non-empty string");
        if (o->n_stops == QRUN_STOPS_MAX) {
            fprintf(stderr, "qrun: at most %d --stop strings\n", QRUN_STOPS_MAX);
            return -1;
        }
        o->stops[o->n_stops++] = arg;
        return 0;
    case O_PRINT_IDS: o->print_ids = true; return 0;
    case O_DUMP: o->dump_logits = arg; return 0;
    case O_DUMP_ALL: o->dump_logits_all = arg; return 0;
    case O_PROMPT_CACHE: o->prompt_cache = arg; return 0;
    case O_TOKENIZER: o->tokenizer = arg; return 0;
    case O_STATS: o->stats = true; return 0;
    case O_CHAT: o->chat = true; return 0;
    case O_SYSTEM: o->system = arg; return 0;
    case O_THINK: o->think = true; return 0;
    case O_LOOKUP:
        if (cli_uint("qrun", "--lookup", arg, 1, QRUN_LOOKUP_MAX, &v))
            return -1;
        o->lookup = (uint32_t)v;
        return 0;
    case O_LOGIT_BIAS: return add_logit_bias(o, arg);
    case O_VERSION: exit(qp_print_version("qrun"));
    case 'h': exit(print_usage());
    }
    return bad("internal: unhandled option");
}

/* The options that only make sense together, and the prompt's UTF-8. */
static int check_combinations(struct options *o)
{
    int sources = !!o->prompt + !!o->prompt_file + !!o->ids;
    if (!o->model)
        return bad("no model: give -m MODEL.qpk (try qrun --help)");
    if (sources > 1)
        return bad("give the prompt one way: -p TEXT, -p -, -f FILE or --ids \"ID ...\"");
    if (!sources && !o->chat)
        return bad("give a prompt with -p TEXT, -p -, -f FILE or --ids \"ID ...\" (or --chat for a chat on stdin)");
    if (o->think && !o->chat)
        return bad("--think works with --chat only");
    if (o->system && !o->chat)
        return bad("--system works with --chat only");
    if (o->lookup && !o->temp_given)
        o->sp.temperature = 0;
    if (o->lookup && o->sp.temperature > 0)
        return bad("--lookup needs greedy decoding (--temp 0): a draft is checked against the model's own "
                   "greedy choice");
    if (o->lookup && o->sp.repeat_penalty != 1)
        return bad("--lookup needs the model's own greedy choice: not with --repeat-penalty");
    if (o->n_stops && o->print_ids)
        return bad("--stop looks for text: not with --print-ids");
    o->interactive = o->chat && !sources;
    o->until_end = o->chat && o->n_new < 0;   /* a chat reply: until the end of the turn */
    if (o->n_new < 0)
        o->n_new = o->chat ? INT32_MAX : QRUN_DEFAULT_NEW;
    if (o->prompt_cache && o->interactive)
        return bad("--prompt-cache saves a one-shot prompt's session: not with an interactive --chat");
    if (o->prompt_cache && o->mp.backend == QPACK_BACKEND_REF)
        return bad("--prompt-cache needs --backend bpf or emu: the reference keeps no KV cache maps");
    if (o->prompt_cache && o->dump_logits_all)
        return bad("--prompt-cache with --dump-logits-all: the positions restored have no logits to write");
    if (o->interactive && o->prompt && !strcmp(o->prompt, "-"))
        return bad("-p - reads the prompt from stdin, where an interactive chat reads its turns");
    if (o->system && !qrun_text_ok("--system", o->system, strlen(o->system), ""))
        return -1;
    if (o->prompt && strcmp(o->prompt, "-") && !qrun_text_ok("-p", o->prompt, strlen(o->prompt), ""))
        return -1;
    return 0;
}

int qrun_parse_options(struct options *o, int argc, char **argv)
{
    *o = (struct options){.mp = qpack_model_default_params(), .sp = qpack_sampler_default_params(), .n_new = -1};
    o->sp.repeat_last_n = 64;
    cli_default_sampling(&o->sp);
    int c;
    opterr = 0; /* one line of our own per mistake, not getopt's plus the usage */
    while ((c = getopt_long(argc, argv, ":m:p:f:n:c:qh", longs, NULL)) != -1) {
        if (c == ':') {
            fprintf(stderr, "qrun: option '%s' needs a value (try qrun --help)\n", argv[optind - 1]);
            return -1;
        }
        if (c == '?') {
            qp_cli_unknown_option("qrun", "qrun", argv[optind - 1], optopt, longs);
            return -1;
        }
        if (take(o, c, optarg))
            return -1;
    }
    if (optind < argc) {
        static const char *const commands[] = {"serve", "listen", "ask", "tokenize", "detokenize"};
        size_t n = strlen(argv[optind]);
        const char *guess = qp_cli_closest(argv[optind], commands, sizeof commands / sizeof *commands);
        if (guess)
            fprintf(stderr, "qrun: unknown command '%s': did you mean %s? (see qrun --help)\n", argv[optind], guess);
        else if (!o->model && n > 4 && !strcmp(argv[optind] + n - 4, ".qpk"))
            fprintf(stderr, "qrun: unexpected argument '%s': did you mean -m %s? (see qrun --help)\n", argv[optind],
                    argv[optind]);
        else
            fprintf(stderr, "qrun: unexpected argument '%s' (see qrun --help)\n", argv[optind]);
        return -1;
    }
    return check_combinations(o);
}

/* Reads all of stdin (-p -), refusing more than QRUN_INPUT_MAX bytes. */
static int read_stdin(char **text, size_t *len, qpack_error *err)
{
    struct qp_buf b = {0};
    char chunk[1 << 16];
    size_t got;
    while (!b.oom && (got = fread(chunk, 1, sizeof chunk, stdin)) > 0) {
        if (b.len + got > QRUN_INPUT_MAX) {
            qp_buf_free(&b);
            snprintf(err->message, sizeof err->message, "-p -: the prompt on stdin is longer than %u MB",
                     QRUN_INPUT_MAX >> 20);
            return -1;
        }
        qp_buf_add(&b, chunk, got);
    }
    if (qp_buf_add(&b, "", 0) || ferror(stdin)) {  /* an empty stdin is an empty prompt */
        snprintf(err->message, sizeof err->message, "-p -: reading stdin: %s",
                 b.oom ? "out of memory" : strerror(errno));
        qp_buf_free(&b);
        return -1;
    }
    *text = b.s;
    *len = b.len;
    return 0;
}

int qrun_read_prompt(struct options *o)
{
    qpack_error err = {0};
    char *text = NULL;
    size_t len = 0;
    const char *what = o->prompt_file;
    if (o->prompt_file) {
        qp_err e = {{0}};
        if (fs_read_input(o->prompt_file, QRUN_INPUT_MAX, &text, &len, &e)) {
            fprintf(stderr, "qrun: -f: %s\n", e.msg);
            return -1;
        }
    } else if (o->prompt && !strcmp(o->prompt, "-")) {
        what = "-p - (stdin)";
        if (read_stdin(&text, &len, &err)) {
            fprintf(stderr, "qrun: %s\n", err.message);
            return -1;
        }
    } else {
        return 0;
    }
    if (!qrun_text_ok(what, text, len, "")) {
        free(text);
        return -1;
    }
    if (len && text[len - 1] == '\n')     /* as llama.cpp reads -f: the file's last newline is no text */
        text[--len] = 0;
    o->prompt_text = text;
    o->prompt = text;
    return 0;
}

bool qrun_text_ok(const char *what, const char *text, size_t len, const char *then)
{
    const char *nul = memchr(text, 0, len);
    if (nul) {
        fprintf(stderr, "qrun: %s holds a NUL byte at offset %zu%s\n", what, (size_t)(nul - text), then);
        return false;
    }
    const char *why = NULL;
    size_t bad_at = qpack_utf8_check(text, len, &why);
    if (bad_at < len) {
        fprintf(stderr, "qrun: %s: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)%s\n", what, bad_at,
                (unsigned char)text[bad_at], why ? why : "ill-formed", then);
        return false;
    }
    return true;
}
