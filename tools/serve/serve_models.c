/* serve_models.c - the models one `qrun serve` serves (serve.h): each
 * named by an alias, loaded on first use, at most --max-loaded at once.
 *
 * A request takes a reference to its model's loaded state for its whole
 * life. A request for a model that is not loaded waits (its connection
 * suspended, no thread held) while the loader thread, the only one that
 * loads or unloads, makes room and loads it: loading takes seconds (the
 * BPF programs are verified), and no libmicrohttpd thread waits for it.
 * The loader serves the oldest waiting request's model first. Room is
 * made by unloading the least recently used model no request holds; when
 * every loaded one is busy, the least recently used is marked: its new
 * requests wait behind the others (so a busy model cannot keep another
 * out for ever), and it is unloaded once its running requests end. A
 * load that fails for memory with another model idle unloads that one
 * and tries again. A pinned model (pin:NAME) attaches and detaches
 * instead, its maps staying in the kernel. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "buf.h"
#include "serve.h"

#define MAX_ALIAS 255

enum { LOADS, UNLOADS, LOAD_FAILURES, REQUESTS, PROMPT_TOKENS, COMPLETION_TOKENS, N_COUNTS };

struct entry {
    char alias[MAX_ALIAS + 1];
    char *path;
    struct serve_model m;       /* m.model NULL: not loaded */
    unsigned refs;              /* requests holding m */
    unsigned long long used;    /* the table's tick when last acquired or released */
    bool evicting;              /* to be unloaded once refs is 0: new requests wait */
    bool loading;
    struct serve_model_wait *waiting, **tail;
    atomic_ullong count[N_COUNTS];  /* for /metrics */
};

struct serve_models {
    struct serve_models_config cfg;
    struct entry *e[SERVE_MAX_MODELS];
    unsigned n, loaded;
    unsigned long long tick, seq;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* a request waits or ends, or stopping */
    pthread_t thread;
    bool started, stopping;
};

int serve_models_new(struct serve_models **out, const struct serve_models_config *cfg)
{
    struct serve_models *t = calloc(1, sizeof *t);
    if (!(*out = t))
        return -1;
    t->cfg = *cfg;
    if (!t->cfg.max_loaded)
        t->cfg.max_loaded = 1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    return 0;
}

/* a name a request can give: no control character, no '/' (it is a
 * path's last part in GET /v1/models/ID), no '"' or '\\' (it is a label's
 * value in /metrics as it is), at most MAX_ALIAS bytes */
static bool alias_ok(const char *a)
{
    size_t n = strlen(a);
    if (!n || n > MAX_ALIAS)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)a[i] < 0x20 || a[i] == 0x7f || strchr("/\"\\", a[i]))
            return false;
    return true;
}

int serve_models_add(struct serve_models *t, const char *alias, const char *path, char *msg, size_t msg_len)
{
    if (!alias_ok(alias)) {
        snprintf(msg, msg_len, "%s: the model's name '%.300s' is empty, too long or holds a control character, '/', '\"' or '\\'",
                 path, alias);
        return -1;
    }
    if (serve_models_find(t, alias) >= 0) {
        snprintf(msg, msg_len, "%s: another model is already named '%s' (names come from the files' names)", path,
                 alias);
        return -1;
    }
    if (t->n == SERVE_MAX_MODELS) {
        snprintf(msg, msg_len, "%s: more than %d models", path, SERVE_MAX_MODELS);
        return -1;
    }
    struct entry *e = calloc(1, sizeof *e);
    if (!e || !(e->path = strdup(path))) {
        free(e);
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    snprintf(e->alias, sizeof e->alias, "%s", alias);
    e->m.id = e->alias;
    e->m.strict = true;
    e->m.created = (long long)time(NULL);
    e->tail = &e->waiting;
    t->e[t->n++] = e;
    return 0;
}

static int has_qpk_suffix(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return d->d_name[0] != '.' && n > 4 && !strcmp(d->d_name + n - 4, ".qpk");
}

int serve_models_add_dir(struct serve_models *t, const char *dir, char *msg, size_t msg_len)
{
    struct dirent **names;
    int n = scandir(dir, &names, has_qpk_suffix, alphasort);
    if (n < 0) {
        snprintf(msg, msg_len, "--models-dir %s: cannot read the folder", dir);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096], alias[MAX_ALIAS + 1];
        struct stat st;
        const char *name = names[i]->d_name;
        snprintf(alias, sizeof alias, "%.*s", (int)(strlen(name) - 4), name);
        if (!rc && (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
            snprintf(msg, msg_len, "--models-dir %s: the path of %s is too long", dir, name);
            rc = -1;
        }
        /* stat follows a link: a folder of links to the files is served */
        if (!rc && !stat(path, &st) && S_ISREG(st.st_mode))
            rc = serve_models_add(t, alias, path, msg, msg_len);
        free(names[i]);
    }
    free(names);
    return rc;
}

unsigned serve_models_count(const struct serve_models *t)
{
    return t->n;
}

const char *serve_models_alias(const struct serve_models *t, unsigned i)
{
    return t->e[i]->alias;
}

const char *serve_models_path(const struct serve_models *t, unsigned i)
{
    return t->e[i]->path;
}

int serve_models_find(const struct serve_models *t, const char *alias)
{
    for (unsigned i = 0; i < t->n; i++)
        if (!strcmp(t->e[i]->alias, alias))
            return (int)i;
    return -1;
}

/* ---- loading and unloading ------------------------------------------------ */

/* the id of <|endoftext|> in the model's tokenizer, -1 without one */
static int32_t end_of_text_id(const qpack_tokenizer *tok)
{
    int32_t *ids = NULL, id = -1;
    size_t n = 0;
    qpack_error err;
    if (tok && !qpack_tokenize(tok, "<|endoftext|>", 13, &ids, &n, &err) && n == 1)
        id = ids[0];
    free(ids);
    return id;
}

/* the model and its scheduler into *m (its id and strict kept); not under
 * the lock: it takes seconds */
static int open_model(const struct serve_models *t, const char *path, struct serve_model *m, qpack_error *err)
{
    qpack_model_params p = t->cfg.params;
    p.max_sessions = t->cfg.parallel;
    if (qpack_model_open(&m->model, path, &p, err))
        return -1;
    if (serve_sched_new(&m->sched, m->model, t->cfg.parallel, t->cfg.queue, t->cfg.lookup, err)) {
        qpack_model_free(m->model);
        m->model = NULL;
        return -1;
    }
    const qpack_model_info *i = qpack_model_get_info(m->model);
    m->vocab = i->vocab;
    m->ctx = i->ctx;
    m->end_of_text = end_of_text_id(qpack_model_tokenizer(m->model));
    m->created = (long long)time(NULL);
    for (int think = 0; think < 2; think++) {
        m->sampling[think] = serve_default_sampling();
        m->has_sampling = qpack_model_sampling(m->model, think, &m->sampling[think]);
    }
    return 0;
}

int serve_models_load(struct serve_models *t, unsigned i, const qpack_model **model, qpack_error *err)
{
    struct entry *e = t->e[i];
    e->m.strict = t->n > 1 || t->cfg.strict;
    if (open_model(t, e->path, &e->m, err))
        return -1;
    *model = e->m.model;
    t->loaded++;
    atomic_fetch_add(&e->count[LOADS], 1);
    return 0;
}

/* under t->mu: w gets e's model, or the error */
static void grant(struct entry *e, struct serve_model_wait *w, unsigned long long tick)
{
    if (!w->error.http) {
        e->refs++;
        e->used = tick;
        w->got = &e->m;
    }
    w->wake(w);
}

/* under t->mu: every request waiting for e gets it, or the error
 * (http 0: the model) */
static void grant_all(struct serve_models *t, struct entry *e, const struct serve_error *error)
{
    while (e->waiting) {
        struct serve_model_wait *w = e->waiting;
        e->waiting = w->next;
        if (error)
            w->error = *error;
        grant(e, w, ++t->tick);
    }
    e->tail = &e->waiting;
}

/* under t->mu, which it lets go meanwhile: e's scheduler and model freed */
static void unload(struct serve_models *t, struct entry *e)
{
    struct serve_model m = e->m;
    e->m.model = NULL;
    e->m.sched = NULL;
    e->evicting = false;
    t->loaded--;
    atomic_fetch_add(&e->count[UNLOADS], 1);
    pthread_mutex_unlock(&t->mu);
    serve_sched_free(m.sched);
    qpack_model_free(m.model);
    pthread_mutex_lock(&t->mu);
}

/* under t->mu: the entry whose waiting request came first; NULL: none waits */
static struct entry *oldest_wanted(const struct serve_models *t)
{
    struct entry *best = NULL;
    for (unsigned i = 0; i < t->n; i++)
        if (t->e[i]->waiting && (!best || t->e[i]->waiting->seq < best->waiting->seq))
            best = t->e[i];
    return best;
}

/* under t->mu: the loaded model to give its place, when none is free: one
 * already marked, else the least recently used idle one, else the least
 * recently used (then marked); NULL when there is room */
static struct entry *victim(struct serve_models *t, const struct entry *want)
{
    if (t->loaded < t->cfg.max_loaded)
        return NULL;
    struct entry *idle = NULL, *any = NULL;
    for (unsigned i = 0; i < t->n; i++) {
        struct entry *e = t->e[i];
        if (!e->m.model || e == want)
            continue;
        if (e->evicting)
            return e;
        if (!e->refs && (!idle || e->used < idle->used))
            idle = e;
        if (!any || e->used < any->used)
            any = e;
    }
    struct entry *v = idle ? idle : any;
    if (v)
        v->evicting = true;
    return v;
}

/* under t->mu, which it lets go meanwhile: loads e for its waiting
 * requests; a failure for memory with an idle model loaded unloads that
 * one and leaves them waiting (the loader tries again) */
static void load(struct serve_models *t, struct entry *e)
{
    struct serve_model m = e->m;
    qpack_error err;
    e->loading = true;
    pthread_mutex_unlock(&t->mu);
    int rc = open_model(t, e->path, &m, &err);
    pthread_mutex_lock(&t->mu);
    e->loading = false;
    if (!rc) {
        e->m = m;
        t->loaded++;
        atomic_fetch_add(&e->count[LOADS], 1);
        grant_all(t, e, NULL);
        return;
    }
    atomic_fetch_add(&e->count[LOAD_FAILURES], 1);
    if (err.code == QPACK_ERR_MEMORY)
        for (unsigned i = 0; i < t->n; i++)
            if (t->e[i]->m.model && !t->e[i]->refs) {
                unload(t, t->e[i]);
                return;
            }
    struct serve_error error;
    serve_error_set(&error, err.code == QPACK_ERR_MEMORY ? 503 : 500, "server_error", "model_load_failed", "model",
                    "The model '%s' could not be loaded: %s", e->alias, err.message);
    grant_all(t, e, &error);
}

/* under t->mu: one move toward the oldest waiting request's model; false
 * when there is nothing to do but wait */
static bool step(struct serve_models *t)
{
    struct entry *e = oldest_wanted(t);
    if (!e)
        return false;
    if (e->m.model && !e->evicting) {
        grant_all(t, e, NULL);
        return true;
    }
    struct entry *v = e->m.model ? e : victim(t, e);
    if (v) {
        if (v->refs)
            return false;       /* its requests' ends signal */
        unload(t, v);
        return true;
    }
    load(t, e);
    return true;
}

static void *loader(void *arg)
{
    struct serve_models *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping)
        if (!step(t) && !t->stopping)
            pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int serve_models_start(struct serve_models *t, char *msg, size_t msg_len)
{
    if (pthread_create(&t->thread, NULL, loader, t)) {
        snprintf(msg, msg_len, "cannot start a thread");
        return -1;
    }
    t->started = true;
    return 0;
}

/* ---- requests --------------------------------------------------------------- */

int serve_models_acquire(struct serve_models *t, unsigned i, struct serve_model **got)
{
    struct entry *e = t->e[i];
    pthread_mutex_lock(&t->mu);
    bool ready = e->m.model && !e->evicting && !t->stopping;
    if (ready) {
        e->refs++;
        e->used = ++t->tick;
        *got = &e->m;
    }
    pthread_mutex_unlock(&t->mu);
    return ready ? 0 : 1;
}

void serve_models_wait(struct serve_models *t, unsigned i, struct serve_model_wait *w)
{
    struct entry *e = t->e[i];
    w->next = NULL;
    w->got = NULL;
    w->error.http = 0;
    pthread_mutex_lock(&t->mu);
    if (t->stopping) {
        serve_error_set(&w->error, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down");
        w->wake(w);
    } else if (e->m.model && !e->evicting) {
        grant(e, w, ++t->tick);  /* loaded since serve_models_acquire */
    } else {
        w->seq = ++t->seq;
        *e->tail = w;
        e->tail = &w->next;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
}

void serve_models_release(struct serve_models *t, struct serve_model *m, const struct serve_usage *u)
{
    if (!m)
        return;
    for (unsigned i = 0; i < t->n; i++) {
        struct entry *e = t->e[i];
        if (&e->m != m)
            continue;
        atomic_fetch_add(&e->count[REQUESTS], 1);
        atomic_fetch_add(&e->count[PROMPT_TOKENS], u->prompt_tokens);
        atomic_fetch_add(&e->count[COMPLETION_TOKENS], u->completion_tokens);
        pthread_mutex_lock(&t->mu);
        e->refs--;
        e->used = ++t->tick;
        if (!e->refs)
            pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        return;
    }
}

/* ---- /v1/models and /metrics ------------------------------------------------ */

/* under t->mu: one model's object; status says whether it is loaded */
static cJSON *model_object(const struct entry *e)
{
    cJSON *m = cJSON_CreateObject(), *status, *meta;
    const char *state = e->m.model ? "loaded" : e->loading ? "loading" : "unloaded";
    bool ok = m && cJSON_AddStringToObject(m, "id", e->alias) && cJSON_AddStringToObject(m, "object", "model") &&
              cJSON_AddNumberToObject(m, "created", (double)e->m.created) &&
              cJSON_AddStringToObject(m, "owned_by", "qpack") && (status = cJSON_AddObjectToObject(m, "status")) &&
              cJSON_AddStringToObject(status, "value", state);
    if (ok && e->m.model)
        ok = cJSON_AddNumberToObject(m, "max_model_len", e->m.ctx) && (meta = cJSON_AddObjectToObject(m, "meta")) &&
             cJSON_AddNumberToObject(meta, "n_ctx", e->m.ctx) &&
             cJSON_AddNumberToObject(meta, "n_ctx_train", qpack_model_get_info(e->m.model)->max_positions) &&
             cJSON_AddNumberToObject(meta, "n_vocab", e->m.vocab);
    if (!ok) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

char *serve_models_list(struct serve_models *t, int one)
{
    if (t->n == 1) {
        const struct serve_model *m = &t->e[0]->m;
        return serve_models_json(m->id, m->created, one >= 0, m->ctx,
                                 qpack_model_get_info(m->model)->max_positions, m->vocab);
    }
    pthread_mutex_lock(&t->mu);
    cJSON *root = NULL, *data = NULL;
    bool ok;
    if (one >= 0) {
        ok = (root = model_object(t->e[one])) != NULL;
    } else {
        ok = (root = cJSON_CreateObject()) && cJSON_AddStringToObject(root, "object", "list") &&
             (data = cJSON_AddArrayToObject(root, "data"));
        for (unsigned i = 0; ok && i < t->n; i++) {
            cJSON *m = model_object(t->e[i]);
            ok = m && cJSON_AddItemToArray(data, m);
            if (!ok)
                cJSON_Delete(m);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return serve_json_print(root, ok);
}

/* a loaded model's memory gauge: its value and the label of its type (the
 * KV cache's entries) or none */
static double memory_gauge(const qpack_model *model, unsigned k, const char **type)
{
    const qpack_model_info *i = qpack_model_get_info(model);
    *type = NULL;
    switch (k) {
    case 0: return (double)i->map_bytes;
    case 1: return (double)i->weight_bytes;
    case 2: return (double)i->ctx * (double)i->kv_bytes_per_position * qpack_model_kv_caches(model);
    case 3: return i->ctx;
    default: *type = i->kv_cache; return (double)i->kv_bytes_per_position;
    }
}

/* under t->mu: each memory gauge's lines, a loaded model's each (labelled
 * model="ALIAS" when there are several) */
static void memory(struct qp_buf *b, const struct serve_models *t)
{
    static const char *const gauges[][2] = {
        {"qpack_bpf_map_bytes", "Bytes of every BPF map of the model (0 for emu)."},
        {"qpack_weight_bytes", "Bytes of the weights in BPF maps, shared by every session."},
        {"qpack_kv_cache_bytes", "Bytes of the KV caches (context x bytes per position x caches)."},
        {"qpack_context_positions", "Positions per session."},
        {"qpack_kv_cache_bytes_per_position",
         "Bytes of K and V of one position, all layers, one session; type: the cache's entries (--kv-cache)."},
    };
    for (unsigned k = 0; k < sizeof gauges / sizeof *gauges; k++) {
        qp_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", gauges[k][0], gauges[k][1], gauges[k][0]);
        for (unsigned i = 0; i < t->n; i++) {
            const struct entry *e = t->e[i];
            const char *type;
            if (!e->m.model)
                continue;
            double v = memory_gauge(e->m.model, k, &type);
            char label[MAX_ALIAS + 64] = "";
            if (t->n > 1 && type)
                snprintf(label, sizeof label, "{model=\"%s\",type=\"%s\"}", e->alias, type);
            else if (t->n > 1 || type)
                snprintf(label, sizeof label, "{%s=\"%s\"}", type ? "type" : "model", type ? type : e->alias);
            qp_buf_printf(b, "%s%s %.15g\n", gauges[k][0], label, v);
        }
    }
}

/* under t->mu: the per-model series, a line per model */
static void per_model(struct qp_buf *b, const struct serve_models *t)
{
    static const char *const series[N_COUNTS][3] = {
        [LOADS] = {"qpack_model_loads_total", "counter", "Times the model was loaded."},
        [UNLOADS] = {"qpack_model_unloads_total", "counter", "Times the model was unloaded to make room for another."},
        [LOAD_FAILURES] = {"qpack_model_load_failures_total", "counter", "Loads of the model that failed."},
        [REQUESTS] = {"qpack_model_requests_total", "counter", "Requests that named the model, answered (any status)."},
        [PROMPT_TOKENS] = {"qpack_model_prompt_tokens_total", "counter", "Prompt tokens of the model's requests."},
        [COMPLETION_TOKENS] = {"qpack_model_completion_tokens_total", "counter", "Tokens the model generated."},
    };
    qp_buf_adds(b, "# HELP qpack_model_loaded 1 while the model is loaded (at most --max-loaded at once).\n"
                   "# TYPE qpack_model_loaded gauge\n");
    for (unsigned i = 0; i < t->n; i++)
        qp_buf_printf(b, "qpack_model_loaded{model=\"%s\"} %d\n", t->e[i]->alias, t->e[i]->m.model != NULL);
    for (unsigned k = 0; k < N_COUNTS; k++) {
        qp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", series[k][0], series[k][2], series[k][0], series[k][1]);
        for (unsigned i = 0; i < t->n; i++)
            qp_buf_printf(b, "%s{model=\"%s\"} %llu\n", series[k][0], t->e[i]->alias,
                          atomic_load(&t->e[i]->count[k]));
    }
}

void serve_models_metrics(struct serve_models *t, struct qp_buf *out)
{
    pthread_mutex_lock(&t->mu);
    memory(out, t);
    if (t->n > 1)
        per_model(out, t);
    pthread_mutex_unlock(&t->mu);
}

/* ---- the end ------------------------------------------------------------------ */

void serve_models_stop(struct serve_models *t)
{
    struct serve_error error;
    serve_error_set(&error, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down");
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    for (unsigned i = 0; i < t->n; i++)
        grant_all(t, t->e[i], &error);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started)
        pthread_join(t->thread, NULL);
    t->started = false;
    for (unsigned i = 0; i < t->n; i++)
        if (t->e[i]->m.sched)
            serve_sched_stop(t->e[i]->m.sched);
}

void serve_models_free(struct serve_models *t)
{
    if (!t)
        return;
    serve_models_stop(t);
    for (unsigned i = 0; i < t->n; i++) {
        serve_sched_free(t->e[i]->m.sched);
        qpack_model_free(t->e[i]->m.model);
        free(t->e[i]->path);
        free(t->e[i]);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}
