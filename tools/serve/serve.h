/* serve.h - `qrun serve`: an OpenAI-compatible HTTP server over
 * include/qpack.h. The parts, one file each:
 *
 *   serve.c          options, start-up, signals, shutdown
 *   serve_http.c     libmicrohttpd: routes, bodies, auth, origin, error replies
 *   serve_reply.c    generation: jobs submitted, replies whole or as SSE, text split
 *   serve_http.h     what those two share (private to them)
 *   serve_conn.c     request deadlines; requests parked while their job runs
 *   serve_openai.c   request bodies parsed strictly
 *   serve_openai_reply.c  response bodies built: whole, stream chunks, errors
 *   serve_responses.c  POST /v1/responses: read into a chat request; its
 *                    response object, stream events and bounded store
 *   serve_anthropic.c Anthropic's Messages API: its requests, replies, events and errors
 *   serve_llama.c    llama-server's endpoints: /tokenize, /detokenize, /props, /slots
 *   serve_tools.c    tools and the history's tool_calls, written as Qwen3's template writes them
 *   serve_format.c   response_format: a schema compiled for the machine
 *   serve_machine.c  the byte machine that holds a reply's tokens to its format
 *   serve_format_int.h  the compiled format the two share (private to them)
 *   serve_embed.c    /v1/embeddings
 *   serve_logprobs.c a token's log probability and the top alternatives
 *   serve_sched.c    the sessions, batched by one scheduler thread: the queue, the steps
 *   serve_job.c      a reply's state: its job's text for the reader, its run on a session
 *   serve_sched_int.h  what those two share (private to them)
 *   serve_models.c   the models served: loaded on first use, the least recently used unloaded
 *   serve_metrics.c  counters and their Prometheus text
 *   serve_page.html  the chat page (compiled in as serve_page_html)
 */
#ifndef QP_SERVE_H
#define QP_SERVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qpack.h"
#include "serve_format.h"
#include "stop_text.h"

/* `qrun serve ARGS`: argv[0] is "serve". Returns the exit status. */
int serve_main(int argc, char **argv);

/* ---- stop strings (stop_text.c) ------------------------------------------
 * OpenAI's and llama.cpp's semantics: the first token whose text completes
 * a stop string ends the reply, just before the earliest stop string in
 * it; the stop string is not part of the reply. While streaming, text that
 * may be the start of a stop string is held back until it is known not to
 * be one. The matcher is stop_text.h's, which qrun's --stop uses too. */

#define SERVE_MAX_STOPS 4       /* OpenAI's limit */
#define SERVE_MAX_STOP_LEN 256  /* bytes of one stop string */

struct serve_stops {
    char *s[SERVE_MAX_STOPS];   /* non-empty, well-formed UTF-8 */
    size_t len[SERVE_MAX_STOPS];
    unsigned n;
};


/* ---- requests and responses (serve_openai.c) ---------------------------- */

enum serve_kind { SERVE_CHAT, SERVE_COMPLETION };

#define SERVE_MAX_MESSAGES 4096
#define SERVE_MAX_PROMPT_IDS 65536

struct serve_request {
    enum serve_kind kind;
    qpack_chat_message *msgs;   /* chat: content, reasoning and tool calls malloc'd */
    size_t n_msgs;
    char **tools;               /* chat: each tool as the template writes it (serve_tools.c) */
    size_t n_tools;
    bool no_tools;              /* tool_choice "none": the tools are not offered */
    bool tool_required;         /* tool_choice "required": the reply is a call of one of them */
    char *tool_name;            /* tool_choice naming a function: a call of that one (malloc'd) */
    char *prompt;               /* completion as text (malloc'd), or */
    int32_t *prompt_ids;        /* as token ids */
    size_t n_prompt_ids;
    bool has_max_tokens;
    uint32_t max_tokens;
    qpack_sampler_params sampling;
    bool has_seed;
    struct serve_stops stops;
    bool stream, include_usage;
    bool think;                 /* chat_template_kwargs.enable_thinking */
    bool echo;                  /* completions: the reply starts with the prompt's text */
    unsigned n_choices;         /* n: replies to the prompt (0: 1) */
    bool logprobs;              /* log probabilities of the tokens generated, */
    unsigned top_logprobs;      /* with this many alternatives each */
    qpack_logit_bias *bias;     /* logit_bias (sampling points at it), n_bias of them */
    size_t n_bias;
    struct serve_format *format;    /* response_format's constraint (a reference); NULL: text */
    unsigned given;             /* SERVE_GIVEN_*: the sampling fields the request set */
};

enum {
    SERVE_GIVEN_TEMPERATURE = 1, SERVE_GIVEN_TOP_K = 2, SERVE_GIVEN_TOP_P = 4, SERVE_GIVEN_MIN_P = 8,
    SERVE_GIVEN_REPEAT_PENALTY = 16,
};

/* what a request is checked against: the served model's name (a request
 * naming another is refused with 404 only when strict) and vocabulary */
struct serve_model_ref {
    const char *id;
    bool strict;
    uint32_t vocab;
    /* the model's sampling (qpack_model_sampling) without and with
     * thinking, for the fields a request leaves out; NULL: none */
    const qpack_sampler_params *sampling[2];
    /* the replies the server can ever hold at once (--parallel + --queue):
     * an n above it is refused; 0: no bound */
    unsigned max_choices;
};

/* An error as OpenAI shapes it: {"error": {"message", "type", "param", "code"}}. */
struct serve_error {
    int http;                   /* 400, 401, 404, ... */
    const char *type;           /* "invalid_request_error", "server_error", ... */
    const char *code;           /* NULL or "context_length_exceeded", "model_not_found", ... */
    char param[64];             /* "" or the request field at fault */
    char message[512];
};

void serve_error_set(struct serve_error *e, int http, const char *type, const char *code, const char *param,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Parses a request body of the kind's endpoint: strict JSON (no key twice,
 * no escaped NUL), every known field of the right type and range, neutral
 * values of the unsupported ones accepted, unknown fields ignored
 * (serve_openai.c says which is which). Returns 0, or -1 with *err
 * filled. */
int serve_parse_request(enum serve_kind kind, const char *body, size_t len, const struct serve_model_ref *model,
                        struct serve_request *req, struct serve_error *err);
void serve_request_free(struct serve_request *req);

/* After a request's fields are read: what they imply together (a forced
 * call's format, the model's sampling for the fields left out, a seed);
 * -1 with *err filled. */
int serve_request_settle(const struct serve_model_ref *model, struct serve_request *req, struct serve_error *err);

/* What a request leaves out: temperature 1, repeat_last_n 64, the rest
 * neutral. */
qpack_sampler_params serve_default_sampling(void);

/* Any request body: one strict JSON value (no key twice, no escaped NUL,
 * UTF-8), *root to cJSON_Delete; or -1 with *err filled. */
typedef struct cJSON cJSON;
int serve_json_parse(const char *body, size_t len, cJSON **root, struct serve_error *err);

/* A JSON string of text[0..len), which may hold NUL bytes, as a raw cJSON
 * item; NULL when out of memory. */
cJSON *serve_json_text(const char *text, size_t len);

/* Prints root unformatted and frees it; NULL when !ok or out of memory. */
char *serve_json_print(cJSON *root, bool ok);

/* ---- tools (serve_tools.c) ---------------------------------------------- */

#define SERVE_MAX_TOOLS 128
#define SERVE_MAX_CHOICES 8    /* n: the replies one request asks for */
#define SERVE_MAX_INPUTS 2048  /* input: the texts one /v1/embeddings request embeds (OpenAI's limit) */

/* ---- POST /v1/embeddings (serve_embed.c) ---- */

struct serve_embed_request {
    int32_t *ids;               /* every input's tokens, one after the other (malloc'd) */
    uint32_t *ends;             /* input i is ids[ends[i - 1] .. ends[i]) (ends[-1]: 0) */
    uint32_t n_inputs;
    uint32_t dimensions;        /* the vectors' first N values, at unit length; 0: all */
    bool base64;                /* encoding_format "base64" */
};

/* OpenAI's embeddings request: input (a string, token ids, or a list of up
 * to SERVE_MAX_INPUTS of either) tokenized, each input ended with end_id
 * (-1: none) unless it ends with it, at most ctx tokens each; model as for
 * the other endpoints; dimensions 1..hidden; encoding_format float or
 * base64. Returns 0, or -1 with a 400 naming the field. */
int serve_parse_embeddings(const char *body, size_t len, const struct serve_model_ref *model,
                           const qpack_tokenizer *tok, int32_t end_id, uint32_t ctx, uint32_t hidden,
                           struct serve_embed_request *req, struct serve_error *err);
void serve_embed_request_free(struct serve_embed_request *req);
/* The response: emb holds n vectors of dim values; malloc'd, NULL when out of memory. */
char *serve_embeddings_json(const float *emb, uint32_t n, uint32_t dim, const struct serve_embed_request *req,
                            const char *model, uint32_t prompt_tokens);
/* ---- POST /v1/rerank (serve_rerank.c) ---- */

#define SERVE_MAX_DOCUMENTS 1000    /* documents: the texts one rerank request scores (Cohere's limit) */
#define SERVE_MAX_RERANK_TOKENS (1u << 20)  /* the tokens of one rerank request's prompts together */

struct serve_rerank_request {
    cJSON *body;                /* the request, parsed: its documents' text for return_documents */
    int32_t *ids;               /* every document's prompt, one after the other (malloc'd) */
    uint32_t *ends;             /* prompt i is ids[ends[i - 1] .. ends[i]) (ends[-1]: 0) */
    uint32_t n_docs;
    uint32_t top_n;             /* the results sent: the best top_n (n_docs when absent) */
    bool return_documents;      /* each result with its document's text */
};

/* llama-server's and Jina's rerank request: query (a string), documents (1
 * to SERVE_MAX_DOCUMENTS strings or objects {"text": ...}), instruction (default: the model card's
 * web search one), top_n (a positive integer), return_documents (a bool),
 * model as for the other endpoints; each document's prompt is
 * Qwen3-Reranker's, tokenized, at most ctx tokens, and all of them at most
 * SERVE_MAX_RERANK_TOKENS. Returns 0, or -1 with a 400 naming the field. */
int serve_parse_rerank(const char *body, size_t len, const struct serve_model_ref *model, const qpack_tokenizer *tok,
                       uint32_t ctx, struct serve_rerank_request *req, struct serve_error *err);
void serve_rerank_request_free(struct serve_rerank_request *req);
/* The ids of "yes" and "no", each a single token; -1 when the tokenizer
 * (NULL: none) has not both. */
int serve_rerank_tokens(const qpack_tokenizer *tok, int32_t *yes, int32_t *no);
/* *score = P(yes) over {yes, no} after tokens[0..n) (the softmax of the
 * last position's two logits); the session keeps what it holds of the
 * tokens' start and then holds them all. */
int serve_rerank_score(qpack_session *s, const int32_t *tokens, size_t n, int32_t yes, int32_t no, float *score,
                       qpack_error *err);
/* The response: scores[i] document i's; the best top_n first (equal
 * scores in the documents' order); malloc'd, NULL when out of memory. */
char *serve_rerank_json(const float *scores, const struct serve_rerank_request *req, const char *model,
                        uint32_t prompt_tokens);

/* With several models, the one a body names, read before its endpoint's
 * parser (which then checks it as it checks any model): 0 with *name, in
 * *root (the body parsed, to cJSON_Delete), NULL when there is no model or
 * it is null; or -1 with a 400 (not JSON, a model that is not a string). */
int serve_body_model(const char *body, size_t len, cJSON **root, const char **name, struct serve_error *err);
/* 'model' checked as every endpoint checks it (404 only when strict). */
int serve_read_model(const struct cJSON *v, const struct serve_model_ref *model, struct serve_error *err);
/* The "text" strings of parts (an array whose every item has one: the
 * caller checked) joined; malloc'd, NULL when out of memory. */
char *serve_join_texts(const struct cJSON *parts);
/* A field's value of the type asked, into *out: a finite number from lo
 * to hi; an integer (one a double holds exactly) from lo to hi; true or
 * false. -1 with a 400 naming the field `name`. */
int serve_want_number(const struct cJSON *v, const char *name, double lo, double hi, double *out,
                      struct serve_error *err);
int serve_want_integer(const struct cJSON *v, const char *name, double lo, double hi, double *out,
                       struct serve_error *err);
int serve_want_bool(const struct cJSON *v, const char *name, bool *out, struct serve_error *err);

/* v as transformers' tojson writes it (Python's json.dumps, non-ASCII
 * kept); malloc'd, NULL when out of memory. */
char *serve_python_json(const cJSON *v);
/* The request's `tools` into r->tools; -1 with a 400 naming the tool. */
int serve_read_tools(const cJSON *v, struct serve_request *r, struct serve_error *e);
/* messages[i].tool_calls into m; -1 with a 400 naming the call. */
int serve_read_tool_calls(const cJSON *v, size_t i, qpack_chat_message *m, struct serve_error *e);
void serve_tool_calls_free(qpack_chat_message *m);

/* The calls in a reply to a request that offered tools: each <tool_call>
 * block that holds {"name": ..., "arguments": {...}} (Qwen3's form) is a
 * call, with an id and its arguments as JSON text; the text around them
 * is the content (without its blank edges when there are calls). A block
 * that is not a call stays in the content. */
struct serve_tool_call {
    char id[40];
    char *name, *arguments;
};

struct serve_tool_calls {
    struct serve_tool_call *v;
    size_t n;
    char *content;
    size_t content_len;
};

int serve_take_tool_calls(const char *text, size_t len, struct serve_tool_calls *out);
/* prefix and 24 random hex digits into out[cap]: a reply's or a call's id */
void serve_random_id(const char *prefix, char *out, size_t cap);
void serve_tool_calls_clear(struct serve_tool_calls *c);

/* As a reply streams: the content that comes before any <tool_call> goes
 * out as it comes (*emit, malloc'd, NULL for none); from the block on,
 * the text is held, and serve_tool_text_finish reads the calls from it. */
struct serve_tool_text {
    char *buf;
    size_t len, cap;
    bool in_call;
};

int serve_tool_text_push(struct serve_tool_text *t, const char *text, size_t n, char **emit, size_t *emit_len);
int serve_tool_text_finish(struct serve_tool_text *t, struct serve_tool_calls *calls);
void serve_tool_text_free(struct serve_tool_text *t);

/* Response bodies, malloc'd NUL-terminated JSON (NULL when out of memory). */
char *serve_error_json(const struct serve_error *e);

struct serve_usage {
    uint32_t prompt_tokens, completion_tokens;
    uint32_t cached_tokens;     /* of the prompt, already in the session */
    double prompt_ms;           /* admitted to the first token */
    double predicted_ms;        /* the first token to the last */
};

struct serve_reply_meta {
    enum serve_kind kind;
    bool tools;                 /* the request offered tools: replies may call them */
    bool logprobs;              /* choices carry logprobs (else null) */
    const qpack_tokenizer *tok; /* for the tokens' text in them */
    const char *id;             /* "chatcmpl-..." or "cmpl-..." */
    long long created;          /* unix seconds */
    const char *model;
    bool anthropic;             /* Anthropic's Messages API: its bodies and events */
    uint32_t prompt_tokens;     /* the prompt's, known before the reply */
};

/* A reply's text: a chat's answer and the reasoning told apart from it
 * (think_text.h; none: reasoning NULL), or a completion's text. */
struct serve_reply_text {
    const char *content;        /* NULL with calls: content null */
    size_t content_len;
    const struct serve_tool_call *calls;
    size_t n_calls;
    const char *reasoning;      /* llama-server's and DeepSeek's reasoning_content */
    size_t reasoning_len;
    const struct serve_logprob *lps;    /* with meta->logprobs: the tokens' log probabilities */
    size_t n_lps;
    size_t offset;              /* completions: the reply text's offset of the first */
    unsigned index;             /* a streamed chunk's: which of the request's replies */
};

char *serve_completion_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, const char *finish,
                            const struct serve_usage *u);
/* The same with n choices, t[k] ending with finish[k]; u the usage of all. */
char *serve_choices_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, const char *const *finish,
                         unsigned n, const struct serve_usage *u);

/* One streamed chunk: the first of a chat carries the role (role_chunk);
 * finish is NULL until the last; usage_chunk: the chunk after the last
 * with the usage and no choice (stream_options.include_usage). t NULL: a
 * chat's chunk without text, a completion's with an empty one. */
char *serve_chunk_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, bool role_chunk,
                       const char *finish);
char *serve_usage_chunk_json(const struct serve_reply_meta *r, const struct serve_usage *u);
/* The chunk with the finish reason, and llama-server's timings. */
char *serve_final_chunk_json(const struct serve_reply_meta *r, unsigned index, const char *finish,
                             const struct serve_usage *u);

/* /v1/models (one: /v1/models/ID): the context as vLLM (max_model_len)
 * and llama-server (meta.n_ctx, n_ctx_train, n_vocab) give it */
char *serve_models_json(const char *model_id, long long created, bool one, uint32_t ctx, uint32_t ctx_train,
                        uint32_t vocab);

/* ---- POST /v1/responses (serve_responses.c) ----------------------------- */

/* One Responses request's reply: its id, the fields the response repeats,
 * its conversation (kept for previous_response_id unless store is false)
 * and, streaming, the events sent so far. */
struct serve_resp;

/* The body read into *req, a chat request of the same conversation (the
 * previous response's first when it names one), and *resp; or -1 with
 * *err filled: a 400 naming the field, a 404 for a previous_response_id
 * not kept. */
int serve_parse_responses(const char *body, size_t len, const struct serve_model_ref *model,
                          struct serve_request *req, struct serve_resp **resp, struct serve_error *err);
void serve_resp_free(struct serve_resp *r);
const char *serve_resp_id(const struct serve_resp *r);
/* The response object of the whole reply t (its content and calls), kept
 * in the store; malloc'd, NULL when out of memory. */
char *serve_resp_json(struct serve_resp *r, const struct serve_reply_text *t, const char *finish,
                      const struct serve_usage *u);
/* Streaming: the events (SSE text, malloc'd; NULL when out of memory) of
 * the start, of text and calls as they come, of the end (the response
 * kept), and of a failure. */
char *serve_resp_stream_start(struct serve_resp *r);
char *serve_resp_stream_text(struct serve_resp *r, const struct serve_reply_text *t);
char *serve_resp_stream_end(struct serve_resp *r, const char *finish, const struct serve_usage *u);
char *serve_resp_stream_failed(struct serve_resp *r, const struct serve_error *e);

/* ---- Anthropic's Messages API (serve_anthropic.c) ------------------------ */

/* POST /v1/messages (count: /v1/messages/count_tokens, without max_tokens
 * and the sampling) as a chat request; the field policy is
 * serve_parse_request's. Returns 0, or -1 with *err filled. */
int serve_parse_messages(const char *body, size_t len, bool count, const struct serve_model_ref *model,
                         struct serve_request *req, struct serve_error *err);

/* {"type": "error", "error": {"type", "message"}}, the type from the HTTP status */
char *serve_anthropic_error_json(const struct serve_error *e);

/* The whole reply: a message of content blocks (thinking, text, tool_use);
 * stop_string: the stop sequence that ended it (NULL: none) */
char *serve_message_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, const char *finish,
                         const char *stop_string, const struct serve_usage *u);

/* {"input_tokens": n} */
char *serve_count_tokens_json(size_t n);

/* A streamed reply's events (each "event: TYPE\ndata: JSON\n\n"), as
 * malloc'd text (NULL when out of memory): message_start, the blocks'
 * starts, deltas and stops as the text comes, then message_delta and
 * message_stop. */
struct serve_message_events {
    int open;                   /* the block open: 0 none, 1 thinking, 2 text */
    unsigned index;             /* the open block's, or the next one's */
};

char *serve_message_start_events(const struct serve_reply_meta *r);
char *serve_message_delta_events(struct serve_message_events *ev, const struct serve_reply_text *t);
char *serve_message_end_events(struct serve_message_events *ev, const char *finish, const char *stop_string,
                               const struct serve_usage *u);
char *serve_message_error_event(const struct serve_error *e);

/* ---- log probabilities (serve_logprobs.c) ------------------------------- */

#define SERVE_MAX_TOP_LOGPROBS 20   /* OpenAI's limit */

/* A generated token's log probability and the most likely tokens at its
 * place, the most likely first. */
struct serve_logprob {
    int32_t id;
    double logprob;
    unsigned n_top;
    int32_t top_id[SERVE_MAX_TOP_LOGPROBS];
    double top_logprob[SERVE_MAX_TOP_LOGPROBS];
};

/* From the model's logits[0..vocab): id's log softmax and the top (at most
 * SERVE_MAX_TOP_LOGPROBS) ids with theirs. */
void serve_logprob_of(const double *logits, uint32_t vocab, int32_t id, unsigned top, struct serve_logprob *out);

/* ---- the sessions (serve_sched.c) ---------------------------------------- */

struct serve_sched;
struct serve_job;
struct qp_buf;

/* parallel sessions run by one scheduler thread, every step of theirs one
 * batch (qpack_step_batch), and a queue of at most queue_max jobs waiting
 * beyond the free sessions. lookup > 0: a greedy reply (no penalty, bias,
 * format or log probabilities) decodes by lookup steps with drafts of up
 * to lookup tokens, the same tokens in fewer steps. */
int serve_sched_new(struct serve_sched **out, qpack_model *model, unsigned parallel, unsigned queue_max,
                    uint32_t lookup, qpack_error *err);

/* Stops (serve_sched_stop) and frees every session. */
void serve_sched_free(struct serve_sched *s);

/* A job of generating up to max_new tokens after prompt[0..n) (the job
 * takes the array). stops may be NULL. The caller holds one reference. */
struct serve_job *serve_job_new(int32_t *prompt, uint32_t n, uint32_t max_new, const qpack_sampler_params *sp,
                                const struct serve_stops *stops);
void serve_job_ref(struct serve_job *j);
void serve_job_unref(struct serve_job *j);

/* Queues jobs[0..n) (a request's choices) together: 0, or -1 when the
 * queue has no room for all of them or the server stops (they are then
 * untouched). */
int serve_sched_submit(struct serve_sched *s, struct serve_job *const *jobs, unsigned n);

/* Ends the job: removed from the queue, or out of the batch before the
 * next step. */
void serve_job_cancel(struct serve_job *j);

enum serve_job_state { SERVE_JOB_WAITING, SERVE_JOB_RUNNING, SERVE_JOB_DONE };

/* Waits up to timeout_ms for text or the end; appends the text released
 * since the last call to buf. Returns the state, -1 when out of memory
 * (buf's oom set). */
int serve_job_take(struct serve_job *j, int timeout_ms, struct qp_buf *buf);

/* Log probabilities for each token generated (the end token not), with top
 * alternatives each; set before the job is submitted. */
void serve_job_want_logprobs(struct serve_job *j, unsigned top);
/* The reply is held to format (serve_format.h), from its first token, or
 * after its thinking with think; set before the job is submitted. */
void serve_job_want_format(struct serve_job *j, struct serve_format *format, bool think);
/* The job embeds its prompt's n_inputs inputs (ends as in struct
 * serve_embed_request) with qpack_embed instead of generating, one input
 * between two steps of the other sessions; set before submitting. -1 when
 * out of memory. */
int serve_job_want_embeddings(struct serve_job *j, const uint32_t *ends, uint32_t n_inputs, uint32_t dim);
/* The same with one score per input instead of a vector: a rerank job
 * (serve_rerank_score with the tokens yes and no). */
int serve_job_want_scores(struct serve_job *j, const uint32_t *ends, uint32_t n_inputs, int32_t yes, int32_t no);
/* After the end: the n_inputs vectors of dim values (NULL before). */
const float *serve_job_embeddings(struct serve_job *j);
/* j is another choice of leader's request: it waits for leader's prompt to
 * be fed and copies it (set before submitting). */
void serve_job_follow(struct serve_job *j, struct serve_job *leader);
/* Appends the log probabilities released since the last call to *buf
 * (malloc'd, grown; *len of them); -1 when out of memory. */
int serve_job_take_logprobs(struct serve_job *j, struct serve_logprob **buf, size_t *len, size_t *cap);

/* fn(arg) is called whenever the job releases text or ends, on the
 * scheduler's thread with the job locked: it must only signal. */
void serve_job_watch(struct serve_job *j, void (*fn)(void *arg), void *arg);

/* true when serve_job_take would return at once: text to take, or the end */
bool serve_job_ready(struct serve_job *j);

/* After SERVE_JOB_DONE with "stop": the stop string that ended the
 * reply, NULL when an end token or the format did. */
const char *serve_job_stop_string(struct serve_job *j);

/* After SERVE_JOB_DONE: why it ended ("stop" or "length"; NULL for an
 * error, then *err holds it), and the token counts. */
const char *serve_job_result(struct serve_job *j, struct serve_usage *u, qpack_error *err);

/* What /slots shows of each session: running a job, positions held (a
 * free session keeps its last sequence for the next prompt that shares
 * its start), the last job's prompt and generated tokens. */
struct serve_slot_info {
    bool busy;
    uint32_t held, prompt, decoded;
};

/* Fills out[0..) with at most max sessions' info; returns how many. */
unsigned serve_sched_slots(struct serve_sched *s, struct serve_slot_info *out, unsigned max);

/* Runs act(arg, session) on session id while it runs no job, under the
 * scheduler's lock: no job starts there, and no other session copies its
 * tokens, meanwhile. Returns act's result, or SERVE_SLOT_NONE (no such
 * session) or SERVE_SLOT_BUSY (it runs a job) without calling it. */
enum { SERVE_SLOT_NONE = -2, SERVE_SLOT_BUSY = -3 };
int serve_sched_slot_act(struct serve_sched *s, unsigned id, int (*act)(void *arg, qpack_session *ses), void *arg);

/* fs_validate_filename of llama.cpp (common.cpp), which --slot-save-path
 * names go through, and no leading dot: a name in the folder, no path */
bool serve_slot_filename_ok(const char *name, size_t len);

/* Stops: waiting jobs end as cancelled, running ones are interrupted, the
 * workers are joined; later submits fail. The sessions stay until
 * serve_sched_free (they must go before the model). */
void serve_sched_stop(struct serve_sched *s);

/* ---- the models (serve_models.c) ----------------------------------------- */

#define SERVE_MAX_MODELS 256    /* -m and --models-dir's files together */

/* A loaded model as its requests use it: valid while a request holds it
 * (serve_models_acquire to serve_models_release). */
struct serve_model {
    const char *id;             /* its alias: the name requests and /v1/models give */
    bool strict;                /* a request naming another model gets 404 (several models: always) */
    qpack_model *model;
    struct serve_sched *sched;
    uint32_t vocab, ctx;
    int32_t end_of_text;        /* <|endoftext|>, which ends an embedding's input; -1: none */
    bool has_sampling;
    qpack_sampler_params sampling[2];   /* the model's, without and with thinking */
    long long created;          /* unix seconds it was loaded: /v1/models' "created" */
};

/* How every model is opened and scheduled. */
struct serve_models_config {
    qpack_model_params params;  /* max_sessions is parallel */
    unsigned parallel, queue;   /* each loaded model's sessions and queue */
    uint32_t lookup;
    unsigned max_loaded;        /* models loaded at once (several models) */
    bool strict;                /* one model: --strict-model */
};

struct serve_models;

int serve_models_new(struct serve_models **out, const struct serve_models_config *cfg);
/* Adds the model at path (a .qpk or pin:NAME) named alias: -1 with a line
 * in msg for a name taken, a bad name, or more than SERVE_MAX_MODELS. */
int serve_models_add(struct serve_models *t, const char *alias, const char *path, char *msg, size_t msg_len);
/* Adds every DIR/NAME.qpk, a regular file or a link to one (no hidden
 * one), named NAME, in name order; -1 with a line in msg. */
int serve_models_add_dir(struct serve_models *t, const char *dir, char *msg, size_t msg_len);
unsigned serve_models_count(const struct serve_models *t);
const char *serve_models_alias(const struct serve_models *t, unsigned i);
const char *serve_models_path(const struct serve_models *t, unsigned i);
/* Model i's index by alias; -1 when none has it. */
int serve_models_find(const struct serve_models *t, const char *alias);
/* Loads model i now, on the caller's thread (a single model, at start):
 * 0 with *model, or -1 with *err filled. It is then never unloaded:
 * nothing else wants its place. */
int serve_models_load(struct serve_models *t, unsigned i, const qpack_model **model, qpack_error *err);
/* Starts the loader thread; -1 with a line in msg. */
int serve_models_start(struct serve_models *t, char *msg, size_t msg_len);

/* A request waiting for its model to load: wake(w) is called once, under
 * the table's lock (it must only signal), when got holds the model (a
 * reference) or error says why not. */
struct serve_model_wait {
    struct serve_model_wait *next;
    unsigned long long seq;
    void (*wake)(struct serve_model_wait *w);
    struct serve_model *got;
    struct serve_error error;
};

/* Model i for a request: 0 with *got (a reference) when it is loaded and
 * not being unloaded; else 1, and the caller, ready for w->wake, calls
 * serve_models_wait. */
int serve_models_acquire(struct serve_models *t, unsigned i, struct serve_model **got);
void serve_models_wait(struct serve_models *t, unsigned i, struct serve_model_wait *w);
/* The request's end: its reference dropped, its usage counted. */
void serve_models_release(struct serve_models *t, struct serve_model *m, const struct serve_usage *u);

/* GET /v1/models: every model, or model one's alone (GET /v1/models/ID;
 * -1: every one); a single model's as serve_models_json; malloc'd */
char *serve_models_list(struct serve_models *t, int one);
/* /metrics' lines of the models: a single model's memory; several, each
 * loaded one's labelled model="ALIAS", and per model its state, loads,
 * unloads, requests and tokens. */
struct qp_buf;
void serve_models_metrics(struct serve_models *t, struct qp_buf *out);

/* Waiting requests get 503, the loader ends, every model's scheduler
 * stops; serve_models_free then frees them. */
void serve_models_stop(struct serve_models *t);
void serve_models_free(struct serve_models *t);

/* ---- HTTP (serve_http.c) ------------------------------------------------- */

#define SERVE_MAX_BODY (1u << 20)   /* bytes of a request body */

struct serve_http_config {
    struct serve_models *models;    /* what requests are answered with */
    const char *api_key;        /* NULL: no authentication */
    const char *host;           /* numeric address or name to bind */
    unsigned port;              /* 0: any free port */
    unsigned timeout_s;         /* a request must arrive whole within it */
    unsigned max_connections, max_per_ip;
    bool log;                   /* a line per request on stderr */
    const char *slot_save_path; /* --slot-save-path: POST /slots/ID's files; NULL: 501 */
};

struct serve_http;

/* Listens and serves on threads of its own. Returns 0, or -1 with a line
 * in msg. */
int serve_http_start(struct serve_http **out, const struct serve_http_config *cfg, char *msg, size_t msg_len);

/* The port it listens on (the one chosen when cfg.port was 0). */
unsigned serve_http_port(const struct serve_http *h);

/* Stops accepting connections; requests in progress go on. */
void serve_http_quiesce(struct serve_http *h);

/* Waits until no request is in progress (their answers sent), at most
 * timeout_ms. */
void serve_http_drain(struct serve_http *h, unsigned timeout_ms);

/* Closes every connection and joins the threads. */
void serve_http_stop(struct serve_http *h);

/* ---- llama-server's endpoints (serve_llama.c) -------------------------- */

/* POST /tokenize and /detokenize: 0 with the reply in *out (NULL when out
 * of memory), or -1 with *err filled (a 400 naming the field). */
int serve_tokenize_reply(const qpack_tokenizer *tok, const char *body, size_t len, char **out,
                         struct serve_error *err);
int serve_detokenize_reply(const qpack_tokenizer *tok, uint32_t vocab, const char *body, size_t len, char **out,
                           struct serve_error *err);
/* POST /apply-template: a chat request's messages through the chat
 * template, {"prompt": TEXT}, nothing generated; as the two above. */
int serve_apply_template_reply(const struct serve_model_ref *model, const char *body, size_t len, char **out,
                               struct serve_error *err);

/* GET /props */
struct serve_props {
    const char *model_id, *model_path, *format, *backend;
    uint32_t ctx, ctx_train, vocab;
    unsigned parallel;
    const qpack_sampler_params *sampling;   /* the model's for a chat; NULL: the server's */
};
char *serve_props_json(const struct serve_props *p);

/* GET /slots: n sessions of ctx positions */
char *serve_slots_json(const struct serve_slot_info *s, unsigned n, uint32_t ctx);

/* ---- connections (serve_conn.c) ----------------------------------------- */

struct MHD_Connection;
struct serve_conns;
struct serve_conn;

/* Beyond max_connections open, a new connection closes the one that has
 * waited longest for its request: libmicrohttpd's limit is this many
 * higher, for connections so closed until it has closed them. */
#define SERVE_SPARE_CONNECTIONS 64

/* The watcher thread: requests must arrive whole within timeout_s of
 * their connection's start or of its previous response; past
 * max_connections, the longest waiting is closed for a new one. */
int serve_conns_start(struct serve_conns **out, unsigned timeout_s, unsigned max_connections, char *msg,
                      size_t msg_len);

/* After the daemon has stopped: joins the watcher. */
void serve_conns_stop(struct serve_conns *cs);

/* A connection accepted (its socket fd; past the limit, another is
 * closed for it), and closed: NULL when out of memory, and every call
 * below takes NULL. */
struct serve_conn *serve_conn_open(struct serve_conns *cs, int fd);
void serve_conn_close(struct serve_conns *cs, struct serve_conn *cn);

/* The request is in, head and body: no deadline while it is answered. */
void serve_conn_answering(struct serve_conns *cs, struct serve_conn *cn);

/* Its response has gone: the next request's deadline starts. */
void serve_conn_answered(struct serve_conns *cs, struct serve_conn *cn);

/* The caller has just suspended c, whose request waits for job j: c is
 * resumed when j has text or has ended, or when the client hangs up (j is
 * then cancelled and serve_conn_gone says so). */
void serve_conn_park(struct serve_conns *cs, struct serve_conn *cn, struct MHD_Connection *c, struct serve_job *j);
bool serve_conn_gone(struct serve_conns *cs, struct serve_conn *cn);

/* A serve_job_watch callback: wakes the watcher (cls: the serve_conns). */
void serve_conns_wake(void *cls);

/* At shutdown, before the daemon stops: resumes every parked request,
 * its job cancelled. */
void serve_conns_resume_all(struct serve_conns *cs);

/* ---- counters (serve_metrics.c) ----------------------------------------- */

enum serve_endpoint {
    SERVE_EP_CHAT, SERVE_EP_COMPLETIONS, SERVE_EP_MODELS, SERVE_EP_HEALTH, SERVE_EP_METRICS, SERVE_EP_PAGE,
    SERVE_EP_TOKENIZE, SERVE_EP_DETOKENIZE, SERVE_EP_PROPS, SERVE_EP_SLOTS, SERVE_EP_APPLY_TEMPLATE, SERVE_EP_EMBEDDINGS,
    SERVE_EP_RESPONSES, SERVE_EP_MESSAGES, SERVE_EP_COUNT_TOKENS, SERVE_EP_RERANK, SERVE_EP_SLOT_ACTION,
    SERVE_EP_OTHER,
    SERVE_EP_COUNT
};

#define SERVE_STATUS_SLOTS 12   /* 200 400 401 403 404 405 408 413 429 500 503, other */

struct serve_metrics {
    atomic_ullong requests[SERVE_EP_COUNT][SERVE_STATUS_SLOTS];
    atomic_ullong prompt_tokens, completion_tokens, cached_tokens, copied_tokens;
    atomic_ullong queue_us;                     /* microseconds requests waited for a session */
    atomic_ullong prompt_us, decode_us;         /* ... from a session to the first token, then to the last */
    atomic_ullong steps, step_sessions, step_positions;   /* batched steps: sessions and positions in them */
    atomic_ullong lookup_drafted, lookup_kept;  /* --lookup: draft tokens computed, and kept */
    atomic_ullong first_token_us, first_tokens; /* time to first token: sum and count */
    atomic_ullong cancelled, rejected;          /* clients gone; 503s for a full queue */
    atomic_ullong deadline_closed;              /* connections whose request missed --timeout */
    atomic_ullong crowded_out;                  /* ... closed past --max-connections for a new one */
    atomic_uint connections;                    /* open HTTP connections */
    atomic_uint busy, waiting;                  /* sessions generating, jobs queued */
    unsigned parallel, queue_max;
};

extern struct serve_metrics serve_metrics;

void serve_metrics_count(enum serve_endpoint ep, int http_status);

/* The Prometheus text exposition of the counters and the models' memory;
 * malloc'd. */
char *serve_metrics_text(struct serve_models *models);

/* ---- the chat page (generated from serve_page.html) ---------------------- */

extern const char serve_page_html[];
extern const size_t serve_page_html_len;

#endif
