/* serve_metrics.c - the server's counters and GET /metrics, Prometheus's
 * text exposition format (version 0.0.4). Counters are atomics that any
 * thread bumps; the text is a snapshot. */
#include <stdio.h>
#include <stdlib.h>

#include "buf.h"
#include "serve.h"

struct serve_metrics serve_metrics;

static const int status_of_slot[SERVE_STATUS_SLOTS] = {200, 400, 401, 403, 404, 405, 408, 413, 429, 500, 503, 0};

static const char *const endpoint_names[SERVE_EP_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/",
    "/tokenize", "/detokenize", "/props", "/slots", "/apply-template", "/v1/embeddings",
    "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/rerank", "/slots/{id}", "other",
};

void serve_metrics_count(enum serve_endpoint ep, int http_status)
{
    unsigned slot = SERVE_STATUS_SLOTS - 1;     /* any other status */
    for (unsigned i = 0; i + 1 < SERVE_STATUS_SLOTS; i++)
        if (status_of_slot[i] == http_status)
            slot = i;
    atomic_fetch_add(&serve_metrics.requests[ep][slot], 1);
}

static void metric(struct qp_buf *t, const char *name, const char *type, const char *help, double value)
{
    qp_buf_printf(t, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type, name, value);
}

static double seconds(atomic_ullong *us)
{
    return (double)atomic_load(us) / 1e6;
}

static void requests(struct qp_buf *t)
{
    qp_buf_adds(t, "# HELP qpack_requests_total HTTP requests answered, by endpoint and status code.\n"
                   "# TYPE qpack_requests_total counter\n");
    for (int ep = 0; ep < SERVE_EP_COUNT; ep++)
        for (int slot = 0; slot < SERVE_STATUS_SLOTS; slot++) {
            unsigned long long n = atomic_load(&serve_metrics.requests[ep][slot]);
            if (!n)
                continue;
            if (status_of_slot[slot])
                qp_buf_printf(t, "qpack_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", endpoint_names[ep],
                              status_of_slot[slot], n);
            else
                qp_buf_printf(t, "qpack_requests_total{endpoint=\"%s\",code=\"other\"} %llu\n",
                              endpoint_names[ep], n);
        }
}

char *serve_metrics_text(struct serve_models *models)
{
    struct serve_metrics *m = &serve_metrics;
    struct qp_buf t = {0};
    requests(&t);
    metric(&t, "qpack_prompt_tokens_total", "counter", "Prompt tokens of finished prompt feeds.",
           (double)atomic_load(&m->prompt_tokens));
    metric(&t, "qpack_prompt_cached_tokens_total", "counter",
           "Prompt tokens not computed again: held from a session's previous request, or copied.",
           (double)atomic_load(&m->cached_tokens));
    metric(&t, "qpack_prompt_copied_tokens_total", "counter",
           "Prompt tokens copied from another session's KV cache instead of fed.",
           (double)atomic_load(&m->copied_tokens));
    metric(&t, "qpack_completion_tokens_total", "counter", "Tokens generated.",
           (double)atomic_load(&m->completion_tokens));
    metric(&t, "qpack_lookup_drafted_tokens_total", "counter",
           "Draft tokens of greedy replies computed beside their next token (--lookup).",
           (double)atomic_load(&m->lookup_drafted));
    metric(&t, "qpack_lookup_kept_tokens_total", "counter",
           "Draft tokens that were the model's own greedy choice, kept without a step of their own.",
           (double)atomic_load(&m->lookup_kept));
    metric(&t, "qpack_queue_seconds_total", "counter",
           "Seconds requests waited for a free session (the first part of their time to first token).",
           seconds(&m->queue_us));
    metric(&t, "qpack_prompt_seconds_total", "counter",
           "Seconds from a request's session to its first token: its prompt read, in steps shared with others.",
           seconds(&m->prompt_us));
    metric(&t, "qpack_decode_seconds_total", "counter", "Seconds from requests' first tokens to their last.",
           seconds(&m->decode_us));
    metric(&t, "qpack_steps_total", "counter", "Batched steps: each feeds the next positions of every running session.",
           (double)atomic_load(&m->steps));
    metric(&t, "qpack_step_sessions_total", "counter",
           "Sessions in the steps, summed (divided by qpack_steps_total: the mean batch).",
           (double)atomic_load(&m->step_sessions));
    metric(&t, "qpack_step_positions_total", "counter",
           "Positions computed in the steps, summed (divided by qpack_steps_total: positions per step).",
           (double)atomic_load(&m->step_positions));
    metric(&t, "qpack_time_to_first_token_seconds_sum", "counter",
           "Seconds from a request's arrival in the queue to its first token, summed.",
           seconds(&m->first_token_us));
    metric(&t, "qpack_time_to_first_token_seconds_count", "counter", "Requests that got a first token.",
           (double)atomic_load(&m->first_tokens));
    metric(&t, "qpack_requests_cancelled_total", "counter",
           "Generations stopped because the client went away (or the server stopped).",
           (double)atomic_load(&m->cancelled));
    metric(&t, "qpack_requests_rejected_total", "counter", "Requests refused with 503 because the queue was full.",
           (double)atomic_load(&m->rejected));
    metric(&t, "qpack_http_deadline_closed_total", "counter",
           "Connections closed because a request's head and body did not arrive within --timeout.",
           (double)atomic_load(&m->deadline_closed));
    metric(&t, "qpack_http_crowded_out_total", "counter",
           "Connections waiting for a request closed to make room for a new one past --max-connections.",
           (double)atomic_load(&m->crowded_out));
    metric(&t, "qpack_http_connections", "gauge", "Open HTTP connections.", atomic_load(&m->connections));
    metric(&t, "qpack_sessions_busy", "gauge", "Sessions running a request.", atomic_load(&m->busy));
    metric(&t, "qpack_sessions", "gauge", "Sessions (--parallel).", m->parallel);
    metric(&t, "qpack_queue_waiting", "gauge", "Requests waiting for a session.", atomic_load(&m->waiting));
    metric(&t, "qpack_queue_capacity", "gauge", "Requests that may wait (--queue).", m->queue_max);
    serve_models_metrics(models, &t);
    if (t.oom) {
        qp_buf_free(&t);
        return NULL;
    }
    return t.s;
}
