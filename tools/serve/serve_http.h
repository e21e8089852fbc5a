/* serve_http.h - what the transport (serve_http.c) and the reply module
 * (serve_reply.c) share: the server, one request, and the calls between
 * them. Private to those two files. */
#ifndef QP_SERVE_HTTP_H
#define QP_SERVE_HTTP_H

#include <microhttpd.h>

#include "buf.h"
#include "serve.h"

#define CLIENT_GONE 499         /* nginx's status for a client that closed its connection */


struct serve_http {
    struct serve_http_config cfg;
    struct MHD_Daemon *d;
    struct serve_conns *conns;
    char log_line[512];         /* libmicrohttpd's last message, for a failed start */
    atomic_bool running;        /* started: messages go to stderr */
    atomic_uint active;         /* requests between their first call and their end */
};

struct stream;

/* one request (MHD's con_cls) */
/* one of a request's n replies: its job and the text taken from it */
struct choice {
    struct serve_job *job;
    struct qp_buf text;         /* with echo, the prompt's first */
};

struct request {
    enum serve_endpoint ep;
    struct serve_model *m;      /* its model, held until the request ends */
    struct serve_model_wait wait;   /* while its model loads */
    struct MHD_Connection *c;   /* suspended while its model loads */
    bool waited;                /* resumed after waiting for its model */
    int one_model;              /* GET /v1/models/ID: the model's index; -1: not that route */
    size_t echo_len;            /* the prompt's text at each reply's start (echo) */
    char method[16], url[128];  /* for the log line */
    int status;
    bool responded;             /* a response is queued: discard the rest of the body */
    bool too_large;             /* the body passed SERVE_MAX_BODY: dropped */
    size_t dropped;
    char *body;
    size_t len, cap;
    double t0;
    struct serve_usage usage;
    struct serve_conn *conn;    /* its connection's deadline and parking */
    struct choice ch[SERVE_MAX_CHOICES];    /* a whole reply's (n of them), until it is sent */
    unsigned n_ch;
    struct serve_reply_meta meta;
    char id[48];
    struct stream *stream;      /* an SSE response still open */
    struct serve_embed_request embed;   /* /v1/embeddings: its inputs, until it is answered */
    struct serve_rerank_request rerank; /* /v1/rerank: its documents, until it is answered */
    struct serve_resp *resp;    /* /v1/responses: the response, until the reply or its stream takes it */
};

/* serve_http.c */
enum MHD_Result http_send_json(struct MHD_Connection *c, struct request *r, int status, char *body);
enum MHD_Result http_send_error(struct MHD_Connection *c, struct request *r, const struct serve_error *e);
enum MHD_Result http_fail(struct MHD_Connection *c, struct request *r, int http, const char *type, const char *code,
                          const char *param, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
int http_prompt_ids(const struct serve_model *m, const struct serve_request *q, int32_t **ids, size_t *n,
                    struct serve_error *e);
/* what a request's body is checked against: its model */
struct serve_model_ref http_model_ref(const struct serve_model *m);

/* A whole-prompt job's inputs: ids (taken by the job) ending at ends[0..n),
 * each answered with a vector of dim values, or with P(yes) over the tokens
 * yes and no when yes >= 0 (rerank). */
struct http_inputs {
    int32_t **ids;
    const uint32_t *ends;
    uint32_t n, dim;
    int32_t yes, no;
};
typedef enum MHD_Result (*http_reply_fn)(struct serve_http *h, struct MHD_Connection *c, struct request *r);
/* Queues the inputs' job (500 out of memory, 503 when the queue is full)
 * and answers with reply once it has run. */
enum MHD_Result http_submit_inputs(struct serve_http *h, struct MHD_Connection *c, struct request *r,
                                   const struct http_inputs *in, http_reply_fn reply);

/* serve_slots.c: POST /slots/ID?action=save|restore|erase */
enum MHD_Result serve_slot_action(struct serve_http *h, struct MHD_Connection *c, struct request *r);

/* serve_reply.c */
void reply_job_failure(const qpack_error *err, struct serve_error *e);
enum MHD_Result reply_await_jobs(struct serve_http *h, struct MHD_Connection *c, struct request *r, bool *done);
enum MHD_Result reply_whole(struct serve_http *h, struct MHD_Connection *c, struct request *r);
enum MHD_Result serve_generate(struct serve_http *h, struct MHD_Connection *c, struct request *r);
/* the stream no longer points at its request (which is freed) */
void stream_forget_request(struct stream *st);

/* serve_rerank.c: POST /v1/rerank, and its answer once its job ends */
enum MHD_Result serve_rerank(struct serve_http *h, struct MHD_Connection *c, struct request *r);
enum MHD_Result reply_rerank(struct serve_http *h, struct MHD_Connection *c, struct request *r);

#endif
