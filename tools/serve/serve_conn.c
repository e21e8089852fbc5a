/* serve_conn.c - what no libmicrohttpd thread may wait for: each
 * request's deadline, and the requests parked while their job generates.
 *
 * libmicrohttpd runs every connection on a few epoll threads, so an idle
 * or slow connection costs a socket and a buffer, not a thread. Its own
 * timeout restarts with every byte received, so a client sending a byte a
 * second would keep its connection for ever: here a request must arrive
 * whole, head and body, within --timeout of its connection's start or of
 * the previous response, or the watcher thread shuts its socket.
 *
 * Past --max-connections, a new connection closes the one that has waited
 * longest for its request (nginx frees its idle keep-alive connections
 * the same way): idle and slow clients cannot keep the server full and
 * new clients out. Connections are listed by when their wait for a
 * request began, the newest first, so that one is the last waiting in the
 * list. Closing is shutting the socket (libmicrohttpd then closes it), so
 * libmicrohttpd's own limit is SERVE_SPARE_CONNECTIONS higher, for the
 * moment until it does.
 *
 * A request whose job has nothing to send yet is suspended
 * (MHD_suspend_connection) and parked here. The watcher sleeps in poll()
 * on an eventfd, which the scheduler writes when a job releases text or
 * ends, and on the parked sockets: it resumes a request when its job has
 * something, and cancels the job of a client that hung up. */
#include <microhttpd.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "serve.h"

#define SWEEP_MS 250            /* how often deadlines are checked */
#define PARKED_MAX 2048         /* sockets one poll() watches; more wait their turn */

struct serve_conn {
    struct serve_conn *prev, *next;     /* next: waiting since earlier */
    int fd;
    double deadline;            /* qp_now_s() by which the request must be in; 0: being answered or closed */
    struct MHD_Connection *parked;  /* suspended, waiting for job */
    struct serve_job *job;
    bool gone;                  /* the client hung up while parked */
};

struct serve_conns {
    pthread_mutex_t mu;
    struct serve_conn *head, *tail;
    unsigned open, max;
    double timeout_s;
    int wake;                   /* eventfd */
    bool stopping;
    pthread_t thread;
};

void serve_conns_wake(void *cls)
{
    struct serve_conns *cs = cls;
    uint64_t one = 1;
    ssize_t w = write(cs->wake, &one, sizeof one);
    (void)w;                    /* EAGAIN: the counter is already set */
}

/* under cs->mu */
static void unlink_conn(struct serve_conns *cs, struct serve_conn *cn)
{
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        cs->head = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    else
        cs->tail = cn->prev;
    cn->prev = cn->next = NULL;
}

/* under cs->mu: first in the list, its wait the newest */
static void push_conn(struct serve_conns *cs, struct serve_conn *cn)
{
    cn->next = cs->head;
    if (cs->head)
        cs->head->prev = cn;
    else
        cs->tail = cn;
    cs->head = cn;
}

/* under cs->mu: the connection that has waited longest for its request
 * (not cn) is closed; none when every other one is being answered */
static void crowd_out(struct serve_conns *cs, const struct serve_conn *cn)
{
    for (struct serve_conn *o = cs->tail; o; o = o->prev)
        if (o != cn && o->deadline) {
            o->deadline = 0;
            shutdown(o->fd, SHUT_RDWR);
            atomic_fetch_add(&serve_metrics.crowded_out, 1);
            return;
        }
}

struct serve_conn *serve_conn_open(struct serve_conns *cs, int fd)
{
    struct serve_conn *cn = calloc(1, sizeof *cn);
    if (!cn)
        return NULL;
    cn->fd = fd;
    cn->deadline = qp_now_s() + cs->timeout_s;
    pthread_mutex_lock(&cs->mu);
    push_conn(cs, cn);
    cs->open++;
    if (cs->open > cs->max)
        crowd_out(cs, cn);
    atomic_store(&serve_metrics.connections, cs->open);
    pthread_mutex_unlock(&cs->mu);
    return cn;
}

/* libmicrohttpd calls this before it closes the socket: once the entry is
 * gone under the lock, the watcher can no longer shut a reused fd. */
void serve_conn_close(struct serve_conns *cs, struct serve_conn *cn)
{
    if (!cn)
        return;
    pthread_mutex_lock(&cs->mu);
    unlink_conn(cs, cn);
    cs->open--;
    atomic_store(&serve_metrics.connections, cs->open);
    pthread_mutex_unlock(&cs->mu);
    free(cn);
}

void serve_conn_answering(struct serve_conns *cs, struct serve_conn *cn)
{
    if (!cn)
        return;
    pthread_mutex_lock(&cs->mu);
    cn->deadline = 0;
    pthread_mutex_unlock(&cs->mu);
}

void serve_conn_answered(struct serve_conns *cs, struct serve_conn *cn)
{
    if (!cn)
        return;
    pthread_mutex_lock(&cs->mu);
    cn->deadline = qp_now_s() + cs->timeout_s;
    unlink_conn(cs, cn);        /* its wait is now the newest */
    push_conn(cs, cn);
    pthread_mutex_unlock(&cs->mu);
}

void serve_conn_park(struct serve_conns *cs, struct serve_conn *cn, struct MHD_Connection *c, struct serve_job *j)
{
    pthread_mutex_lock(&cs->mu);
    cn->parked = c;
    cn->job = j;
    pthread_mutex_unlock(&cs->mu);
    serve_conns_wake(cs);       /* the job may have moved before it was parked */
}

bool serve_conn_gone(struct serve_conns *cs, struct serve_conn *cn)
{
    pthread_mutex_lock(&cs->mu);
    bool gone = cn && cn->gone;
    pthread_mutex_unlock(&cs->mu);
    return gone;
}

/* under cs->mu */
static void resume(struct serve_conn *cn)
{
    struct MHD_Connection *c = cn->parked;
    cn->parked = NULL;
    cn->job = NULL;
    MHD_resume_connection(c);
}

/* under cs->mu: resumes the parked requests whose job has something or
 * whose client hung up (revents of their socket in p, matched by fd) */
static void wake_parked(struct serve_conns *cs, const struct pollfd *p, unsigned n)
{
    for (struct serve_conn *cn = cs->head; cn; cn = cn->next) {
        if (!cn->parked)
            continue;
        for (unsigned i = 0; i < n; i++)
            if (p[i].fd == cn->fd && (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
                cn->gone = true;
        if (cn->gone)
            serve_job_cancel(cn->job);
        if (cn->gone || serve_job_ready(cn->job))
            resume(cn);
    }
}

/* under cs->mu: a request not in by its deadline loses its connection
 * (libmicrohttpd sees the socket end and closes it) */
static void enforce_deadlines(struct serve_conns *cs, double now)
{
    for (struct serve_conn *cn = cs->head; cn; cn = cn->next)
        if (cn->deadline && now > cn->deadline) {
            cn->deadline = 0;
            shutdown(cn->fd, SHUT_RDWR);
            atomic_fetch_add(&serve_metrics.deadline_closed, 1);
        }
}

static void *watch(void *arg)
{
    struct serve_conns *cs = arg;
    struct pollfd *p = calloc(PARKED_MAX + 1, sizeof *p);
    double next_sweep = 0;
    for (;;) {
        unsigned n = 1;
        p[0] = (struct pollfd){.fd = cs->wake, .events = POLLIN};
        pthread_mutex_lock(&cs->mu);
        bool stopping = cs->stopping;
        for (struct serve_conn *cn = cs->head; cn && n <= PARKED_MAX; cn = cn->next)
            if (cn->parked)
                p[n++] = (struct pollfd){.fd = cn->fd, .events = POLLRDHUP};
        pthread_mutex_unlock(&cs->mu);
        if (stopping)
            break;
        if (poll(p, n, SWEEP_MS) < 0 && errno != EINTR)
            break;
        if (p[0].revents & POLLIN) {
            uint64_t count;
            ssize_t r = read(cs->wake, &count, sizeof count);
            (void)r;
        }
        double now = qp_now_s();
        pthread_mutex_lock(&cs->mu);
        wake_parked(cs, p + 1, n - 1);
        if (now >= next_sweep) {
            enforce_deadlines(cs, now);
            next_sweep = now + SWEEP_MS / 1000.0;
        }
        pthread_mutex_unlock(&cs->mu);
    }
    free(p);
    return NULL;
}

int serve_conns_start(struct serve_conns **out, unsigned timeout_s, unsigned max_connections, char *msg,
                      size_t msg_len)
{
    *out = NULL;
    struct serve_conns *cs = calloc(1, sizeof *cs);
    if (!cs) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    cs->timeout_s = timeout_s;
    cs->max = max_connections;
    if ((cs->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        snprintf(msg, msg_len, "eventfd: %s", strerror(errno));
        free(cs);
        return -1;
    }
    pthread_mutex_init(&cs->mu, NULL);
    if (pthread_create(&cs->thread, NULL, watch, cs)) {
        snprintf(msg, msg_len, "cannot start a thread");
        close(cs->wake);
        pthread_mutex_destroy(&cs->mu);
        free(cs);
        return -1;
    }
    *out = cs;
    return 0;
}

void serve_conns_resume_all(struct serve_conns *cs)
{
    pthread_mutex_lock(&cs->mu);
    for (struct serve_conn *cn = cs->head; cn; cn = cn->next)
        if (cn->parked) {
            cn->gone = true;
            serve_job_cancel(cn->job);
            resume(cn);
        }
    pthread_mutex_unlock(&cs->mu);
}

void serve_conns_stop(struct serve_conns *cs)
{
    if (!cs)
        return;
    pthread_mutex_lock(&cs->mu);
    cs->stopping = true;
    pthread_mutex_unlock(&cs->mu);
    serve_conns_wake(cs);
    pthread_join(cs->thread, NULL);
    while (cs->head) {          /* none once the daemon has stopped; a backstop */
        struct serve_conn *cn = cs->head;
        cs->head = cn->next;
        free(cn);
    }
    close(cs->wake);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}
