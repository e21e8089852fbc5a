/* qrun.h - what qrun's files share: its options, the state of a run, and
 * the steps the one-shot and interactive modes are made of. qrun is built
 * on include/qpack.h alone. */
#ifndef QP_QRUN_H
#define QP_QRUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qpack.h"
#include "stop_text.h"
#include "think_text.h"

/* Exit statuses (qrun --help) */
enum {
    QRUN_OK = 0,
    QRUN_FAILED = 1,            /* a runtime failure: files, model, privilege, input, output */
    QRUN_USAGE = 2,             /* a command line that cannot work: options, their values, -c past
                                   the model's maximum, a prompt and -n past the context */
};

#define QRUN_STOPS_MAX 16       /* --stop strings */
#define QRUN_BIAS_MAX 64        /* --logit-bias options */
#define QRUN_LOOKUP_MAX 15      /* a draft and its token fill one block of 16 positions */
#define QRUN_INPUT_MAX (256u << 20)   /* bytes of -f FILE or -p - read at most */
#define QRUN_DEFAULT_NEW 32     /* -n without --chat */
#define QRUN_CHAT_NEW 1024      /* a chat reply's tokens without -n when the model has no
                                   generation config: it may be one that never ends a turn */
#define QRUN_CHAT_ROOM 512      /* positions an interactive turn keeps for its reply at least
                                   (a quarter of the context when that is less) */

struct options {
    const char *model, *prompt, *prompt_file, *ids, *tokenizer, *dump_logits, *dump_logits_all, *system;
    const char *prompt_cache;   /* --prompt-cache FILE: the session after the prompt, saved and reused */
    qpack_model_params mp;
    qpack_sampler_params sp;
    bool repeat_last_n_ctx;     /* --repeat-last-n -1: the whole context */
    int32_t n_new;
    bool until_end;             /* --chat without -n: a reply runs until the end of its turn */
    bool sampling_given;        /* --temp, --top-k, --top-p, --min-p or --repeat-penalty */
    bool temp_given;            /* --temp */
    uint32_t ctx;               /* -c; 0: the model's default */
    bool print_ids, stats, chat, think, interactive, quiet;
    uint32_t lookup;            /* --lookup: tokens drafted per pass at most (0: off) */
    const char *stops[QRUN_STOPS_MAX];
    qpack_logit_bias bias[QRUN_BIAS_MAX];   /* --logit-bias, o->sp.logit_bias points here */
    int n_stops;
    char *prompt_text;          /* -f FILE or -p -: the text read (malloc'd) */
};

/* A turn of an interactive chat, kept so that the oldest can be dropped
 * when the context fills. The conversation is the turns' ids and replies
 * in order; the session holds a prefix of it. */
struct turn {
    char *user;                 /* the user's text */
    int32_t *ids;               /* its template text's tokens (as the first turn, with the
                                   system prompt, or as a later one) */
    size_t n_ids;
    int32_t *reply;             /* the reply's tokens as printed */
    size_t n_reply, cap_reply;
};

struct run_state {
    struct options *o;
    qpack_model *m;
    qpack_session *s;
    qpack_sampler *sampler;
    const qpack_model_info *info;
    qpack_tokenizer *own_tok;   /* --tokenizer, or the model's read before the load */
    const qpack_tokenizer *tok; /* the one in use, NULL: ids in, ids out */
    qpack_decoder *decoder;
    int32_t extra_ends[2];      /* --tokenizer: its <|im_end|> and <|endoftext|> */
    int n_extra_ends;
    int32_t *prompt;            /* one-shot: the prompt's tokens */
    size_t n_prompt;
    uint32_t ctx;
    uint32_t in_reply;          /* tokens printed in the current reply */
    bool model_sampling;        /* sampling from the model's generation_config.json */
    bool cut_by_n;              /* --chat: -n ended the reply (said after its line) */
    bool chat_budget;           /* --chat without -n, no generation config: n_new is QRUN_CHAT_NEW */
    bool cut_by_ctx;            /* the context ended the reply (said after its line) */
    bool ended_at_once;         /* --chat: the model ended its turn before any token */
    char *system_text;          /* interactive /system: the prompt o->system points at */
    bool bad_input;             /* an interactive line was refused: exit status 1 at the end */
    struct stop_text stop;
    struct think_text think;    /* --chat --think: the reasoning told apart from the answer */
    bool reasoning_open;        /* reasoning is being shown on stderr */
    bool faint;                 /* stderr is a terminal: the reasoning is shown faint */
    qpack_error *text_err;      /* where show_part reports a lost stdout */
    double load_ms, prompt_ms, gen_ms;
    uint32_t prompt_tokens, generated, decode_steps;
    uint32_t step_tokens;       /* tokens printed that decode steps made (not a prompt's pass) */
    uint64_t prompt_calls, decode_calls;
    struct turn *turns;         /* interactive */
    size_t n_turns;
};

/* The signal state: a handler stops the work in progress. */
extern volatile sig_atomic_t qrun_stop_signal;    /* SIGINT or SIGTERM: the process ends */
extern volatile sig_atomic_t qrun_reply_stopped;  /* interactive: Ctrl-C ended the reply */
extern volatile sig_atomic_t qrun_prompt_shown;   /* interactive: "> " is on a terminal */

/* qrun_options.c */
void qrun_usage(FILE *out);
int qrun_parse_options(struct options *o, int argc, char **argv);
int qrun_read_prompt(struct options *o);

/* qrun.c: feeding and generating, shared by both modes */
int qrun_feed(struct run_state *r, const int32_t *ids, size_t n, qpack_error *err);
int qrun_reply(struct run_state *r, uint32_t room, qpack_error *err);
void qrun_end_reply(struct run_state *r, bool newline_always);
bool qrun_is_end(const struct run_state *r, int32_t id);
int qrun_tokenize(const struct run_state *r, const char *text, size_t len, int32_t **ids, size_t *n,
                  qpack_error *err);

/* Refuses text the tokenizer must not see, invalid UTF-8 or a NUL byte,
 * with one line: "qrun: WHAT ...THEN". */
bool qrun_text_ok(const char *what, const char *text, size_t len, const char *then);

/* The sampler for the options (and the model's generation config); the
 * one before it is freed. */
int qrun_new_sampler(struct run_state *r, qpack_error *err);

/* qrun_chat.c: the interactive chat */
int qrun_interactive(struct run_state *r, qpack_error *err);

/* qrun listen and qrun ask (qrun_listen.c; docs/LISTEN.md): argv[0] is the command */
int listen_main(int argc, char **argv);
int ask_main(int argc, char **argv);
void qrun_turns_free(struct run_state *r);

/* Signal handling per phase (qrun.c) */
enum qrun_phase { QRUN_LOADING, QRUN_WORKING, QRUN_WAITING };
void qrun_set_phase(enum qrun_phase phase);

#endif
