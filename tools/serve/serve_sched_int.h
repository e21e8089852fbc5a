/* serve_sched_int.h - a job, a session's slot and the scheduler, as
 * serve_job.c (a reply's state) and serve_sched.c (the steps) share them
 * (private to them). */
#ifndef QP_SERVE_SCHED_INT_H
#define QP_SERVE_SCHED_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "serve.h"

struct serve_job {
    /* the request, fixed once queued */
    int32_t *prompt;
    uint32_t n_prompt, max_new;
    qpack_sampler_params sp;
    struct serve_stops stops;
    double t_submit;
    struct serve_sched *sched;
    atomic_bool cancel;
    /* the rest under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    enum serve_job_state state;
    bool queued;
    struct qp_buf out;          /* text released and not yet taken */
    const char *finish;         /* "stop", "length"; NULL: err */
    int stop_hit;               /* the stop string that ended the reply; -1: none did */
    qpack_error err;
    struct serve_usage usage;
    void (*watch)(void *);      /* told of new text and of the end */
    void *watch_arg;
    struct serve_job *leader;   /* another choice of the same request, whose prompt this one copies */
    atomic_bool prompt_in;      /* the whole prompt has been fed (or the job ended) */
    int logprobs;               /* alternatives per token, -1: no log probabilities */
    struct serve_logprob *lp;   /* released and not yet taken */
    size_t lp_len, lp_cap;
    struct serve_format *format;    /* response_format's constraint; NULL: none */
    bool format_think;              /* the format begins after the reply's thinking */
    uint32_t *input_ends;           /* an embedding job: its inputs' ends in prompt, */
    uint32_t n_inputs, embedded;    /*   how many, how many done */
    float *embeddings;              /*   [n_inputs][dim] */
    uint32_t dim;
    int32_t yes, no;                /* a rerank job (dim 1): its score's tokens; -1: an embedding job */
};

/* a session and the request it runs */
struct slot {
    qpack_session *session;
    qpack_decoder *decoder;
    struct serve_job *job;      /* NULL: free (under s->mu) */
    uint64_t order;             /* when the job was admitted: the oldest prompt goes first */
    qpack_sampler *sampler;
    struct serve_format_state *format;  /* the reply's place in its job's format */
    struct stop_text stops;
    uint32_t fed;               /* prompt tokens the session holds */
    bool decoding;              /* the prompt is in: `next` is the token to feed */
    bool looked;                /* another session's copy of the prompt's start looked for */
    int32_t next;
    int32_t *looked_up;         /* --lookup: [lookup + 1], a lookup step's tokens */
    double t_start, t_first;    /* seconds: admitted, its first token */
    /* for /slots, read by other threads */
    atomic_uint held;           /* positions in the session */
    atomic_uint prompt, decoded;    /* the job's prompt tokens and tokens generated */
};

struct serve_sched {
    qpack_model *m;
    uint32_t ctx, block;
    uint32_t lookup;            /* a greedy reply's draft, at most (0: no lookup decoding) */
    unsigned n_slots;
    struct slot *slots;
    struct serve_vocab *vocab;  /* for formats: made at the first that needs it */
    pthread_mutex_t mu;         /* the queue, stopping, which slots hold a job */
    pthread_cond_t cv;
    struct serve_job **q;       /* ring of q_max + n_slots: waiting for a free session */
    unsigned q_cap, q_max, q_head, q_len;
    unsigned running;           /* slots holding a job */
    unsigned shown_waiting, shown_busy; /* q_len and running as added to serve_metrics */
    uint64_t admitted;
    bool stopping;
    pthread_t thread;
    bool started;
};

/* under s->mu: serve_metrics' gauges of waiting jobs and busy sessions
 * hold every loaded model's sum */
static inline void sched_show_gauges(struct serve_sched *s)
{
    atomic_fetch_add(&serve_metrics.waiting, s->q_len - s->shown_waiting);
    atomic_fetch_add(&serve_metrics.busy, s->running - s->shown_busy);
    s->shown_waiting = s->q_len;
    s->shown_busy = s->running;
}

void job_done_cancelled(struct serve_job *j, const char *why);
uint32_t job_reusable_prefix(const qpack_session *ses, const struct serve_job *j);
void job_finish(struct serve_sched *s, struct slot *sl, const char *finish, const qpack_error *err);
void job_start(struct serve_sched *s, struct slot *sl);
void job_take_id(struct serve_sched *s, struct slot *sl, int32_t id, uint32_t held);
void job_take_token(struct serve_sched *s, struct slot *sl);
bool job_drafts(const struct serve_sched *s, const struct slot *sl);

#endif
