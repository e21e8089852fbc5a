/* listen.c - qpack_listen_*: a model that answers UDP token requests in
 * the kernel (docs/LISTEN.md). The host records the step templates and
 * attaches the XDP program; it touches no request. */
#include <bpf/bpf.h>
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define CLOSE_WAIT_MS 30000     /* a running request: 31 steps at most */

struct qpack_listen {
    qpack_model *m;
    int link_fd;
};

/* Two templates per attention chunk count, with the logits and without
 * (the ids before a request's last), recorded at the chunk's last
 * position: its attention jobs then hold the fewest tasks each, and any
 * position of that chunk count runs the same jobs with its own max_pos
 * (the tasks' results do not depend on how they are grouped). */
static int record_templates(struct qp_engine *e, qpack_error *err)
{
    const struct qk_config *c = &e->plan.cfg;
    struct qp_backend *b = e->b;
    if (c->max_chunks > QK_LISTEN_MAX_CHUNKS ||
        b->tmpl_entries < QK_LISTEN_TMPL(c->max_chunks, 0) * QK_LISTEN_TMPL_JOBS)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "listen: a context of %u positions is past listen's %u",
                           c->ctx, QK_LISTEN_MAX_CHUNKS * QK_ATTN_CHUNK);
    for (uint32_t t = 0; t < QK_LISTEN_TMPL(c->max_chunks, 0); t++) {
        uint32_t pos = (t / 2 + 1) * QK_ATTN_CHUNK - 1, n = 0;
        struct qp_entry entry = {.token = 0, .kv_slot = 0, .pos = pos < c->ctx ? pos : c->ctx - 1};
        qp_err in = {0};
        if (qp_forward_record(e->fw, &entry, t % 2, &n, &in))
            return qp_lib_error(err, &in, QPACK_ERR_INTERNAL);
        if (n > QK_LISTEN_TMPL_JOBS)
            return qp_lib_fail(err, QPACK_ERR_INTERNAL, "listen: a step of %u jobs, past a template's %u", n,
                               QK_LISTEN_TMPL_JOBS);
        memcpy(b->tmpl + (size_t)t * QK_LISTEN_TMPL_JOBS, b->jobs, (size_t)n * sizeof *b->jobs);
        b->listen->tmpl_jobs[t] = n;
    }
    return 0;
}

static int clear_sessions(const struct qp_engine *e, qpack_error *err)
{
    struct qk_session none = {0};
    for (uint32_t slot = 0; slot < e->plan.cfg.kv_slots; slot++)
        if (bpf_map_update_elem(e->b->sessions_fd, &slot, &none, BPF_ANY))
            return qp_lib_fail(err, QPACK_ERR_IO, "listen: cannot clear session %u: %s", slot, strerror(errno));
    return 0;
}

/* every session of the model: the in-process table and a loaded model's
 * owner table. A process steps a loaded model only through a session of
 * its own, so holding every slot keeps the others off the shared state
 * maps; the step lock is not held (a claim takes the same flock, and
 * would wait on it instead of being refused). */
static int take_sessions(qpack_listen *l, qpack_error *err)
{
    qpack_model *m = l->m;
    struct qp_engine *e = &m->engine;
    pthread_mutex_lock(&m->sessions_mu);
    bool free_all = m->n_sessions == 0;
    if (free_all) {
        for (uint32_t i = 0; i < m->params.max_sessions; i++)
            m->slot_taken[i] = true;
        m->n_sessions = m->params.max_sessions;
    }
    pthread_mutex_unlock(&m->sessions_mu);
    if (!free_all)
        return qp_lib_fail(err, QPACK_ERR_BUSY, "listen: the model has sessions open");
    if (!e->pin)
        return 0;
    qp_err in = {0};
    for (uint32_t i = 0; i < e->plan.cfg.kv_slots; i++) {
        uint32_t slot;
        if (qp_pin_claim(e->pin, &slot, &in))
            return qp_lib_error(err, &in, QPACK_ERR_BUSY);
    }
    return 0;
}

static void give_sessions(qpack_listen *l)
{
    qpack_model *m = l->m;
    struct qp_engine *e = &m->engine;
    /* whichever slots the claims took (a release frees only this
     * process's, and the model has no session of its own open) */
    for (uint32_t i = 0; e->pin && i < e->plan.cfg.kv_slots; i++)
        qp_pin_release(e->pin, i);
    pthread_mutex_lock(&m->sessions_mu);
    if (m->n_sessions == m->params.max_sessions) {
        for (uint32_t i = 0; i < m->params.max_sessions; i++)
            m->slot_taken[i] = false;
        m->n_sessions = 0;
    }
    pthread_mutex_unlock(&m->sessions_mu);
}

/* A listener killed while a request ran leaves its steps running on the
 * model's maps (the XDP program detaches, the work items go on): the job
 * list and the sessions are rewritten only once they end. */
static int wait_stale_request(const struct qk_listen *L, qpack_error *err)
{
    for (int ms = 0; ms < CLOSE_WAIT_MS && __atomic_load_n(&L->busy, __ATOMIC_ACQUIRE); ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    if (__atomic_load_n(&L->busy, __ATOMIC_ACQUIRE))
        return qp_lib_fail(err, QPACK_ERR_BUSY, "listen: a request an earlier listener accepted still runs after "
                           "%d s (unload and load the model to stop it)", CLOSE_WAIT_MS / 1000);
    return 0;
}

static int attach(qpack_listen *l, const char *dev, qpack_error *err)
{
    unsigned ifindex = if_nametoindex(dev);
    if (!ifindex)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "listen: no interface named %s", dev);
    /* loopback has no driver XDP: the generic mode; a veth's driver has it */
    LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = !strcmp(dev, "lo") ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE);
    l->link_fd = bpf_link_create(l->m->engine.b->listen_xdp_fd, (int)ifindex, BPF_XDP, &opts);
    if (l->link_fd < 0)
        return qp_lib_fail(err, errno == EPERM ? QPACK_ERR_PRIVILEGE : QPACK_ERR_IO,
                           "listen: cannot attach the XDP program to %s: %s%s", dev, strerror(errno),
                           errno == EBUSY || errno == EEXIST ? " (another XDP program is attached there)" : "");
    return 0;
}

int qpack_listen_open(qpack_listen **out, qpack_model *m, const qpack_listen_params *p, qpack_error *err)
{
    *out = NULL;
    if (!m->engine_open || !m->engine.b || !m->engine.b->listen || m->engine.b->listen_xdp_fd < 0)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "listen: the model must be opened with the kernel schedule "
                           "(--schedule kernel; a loaded model: qpack load --schedule kernel)");
    if (!p->port)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "listen: a UDP port of 1 to 65535");
    qpack_listen *l = calloc(1, sizeof *l);
    if (!l)
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    *l = (qpack_listen){.m = m, .link_fd = -1};
    struct qk_listen *L = m->engine.b->listen;
    /* holding every session, no other listener runs: an open flag left
     * by one that was killed is stale */
    int rc = take_sessions(l, err);
    if (!rc)
        rc = wait_stale_request(L, err) || record_templates(&m->engine, err) || clear_sessions(&m->engine, err);
    if (!rc) {
        L->busy = 0;
        L->stepping = 0;
        L->requests = L->answered = L->joined = 0;
        L->kick = 0;
        L->parked[0] = L->parked[1] = 0;
        /* a second lane only when the CPU map starts it (lane_kicked) */
        struct qp_backend *b = m->engine.b;
        L->lanes = b->lane_start && !strcmp(b->lane_start, "xdp") ? 2 : 1;
        L->cpu[0] = (uint32_t)b->lane_cpu[0];
        L->cpu[1] = (uint32_t)b->lane_cpu[1];
        L->port = htons(p->port);
        rc = attach(l, p->dev ? p->dev : "lo", err);
    }
    if (rc) {
        give_sessions(l);
        free(l);
        return -1;
    }
    __atomic_store_n(&L->open, 1, __ATOMIC_RELEASE);
    *out = l;
    return 0;
}

void qpack_listen_get_stats(const qpack_listen *l, qpack_listen_stats *out)
{
    const struct qk_listen *L = l->m->engine.b->listen;
    *out = (qpack_listen_stats){__atomic_load_n(&L->requests, __ATOMIC_ACQUIRE),
                                __atomic_load_n(&L->answered, __ATOMIC_ACQUIRE), L->lanes,
                                __atomic_load_n(&L->joined, __ATOMIC_ACQUIRE)};
}

void qpack_listen_close(qpack_listen *l)
{
    if (!l)
        return;
    struct qk_listen *L = l->m->engine.b->listen;
    __atomic_store_n(&L->open, 0, __ATOMIC_RELEASE);
    close(l->link_fd);
    /* the steps of a request accepted before the close, and its parked
     * lanes, run on the model's maps: they end before the sessions and the
     * lock go */
    for (int ms = 0; ms < CLOSE_WAIT_MS && (__atomic_load_n(&L->busy, __ATOMIC_ACQUIRE) ||
                                            __atomic_load_n(&L->parked[0], __ATOMIC_ACQUIRE) ||
                                            __atomic_load_n(&L->parked[1], __ATOMIC_ACQUIRE)); ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    give_sessions(l);
    free(l);
}
