/* streams.c - the node's shells and forwards, on their own thread (streams.h). */
#include "streams.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "sock.h"
#include "streamend.h"
#include "task.h"
#include "util.h"
#include "worker.h"

#define POLL_MS 250
#define TTY_QUIET_MS 500 /* a terminal its command left, held open by a process it
                          * started: read on until it has been quiet this long */

typedef struct {
    uint32_t stream;
    char ticket[BR_STREAM_TICKET + 1];
    char key[BR_STREAM_KEY_HEX + 1]; /* what seals its frames */
    int64_t job;
    int attempt, rank;
    pid_t pid;
    int tty_fd;      /* the terminal's master (WINCH), or -1 */
    int exited;      /* the process was reaped: status */
    int64_t quiet_since; /* exited, its terminal held by another: since when it has had
                            nothing to read (0: it had) */
    int status;
    char *error;     /* told at ATTACHED, then closed */
    int ended;       /* the job ended: closed and killed at the next turn */
    int stopping;    /* the job is being stopped: closed and hung up at the next turn */
    int64_t since, seen; /* monotonic ms: handed over; last heard of at the relay */
    int fds[3], tty, is_socket; /* what was handed over, until the thread attaches it */
    int port, family; /* a forward's port, and the loopback it is connecting to in
                       * fds[0] (not attached yet) */
    char target[96];  /* "port P of node N" */
    br_streamend_t *end; /* NULL: not attached yet (the thread alone uses the socket) */
} session_t;

struct br_streams {
    br_worker_t w; /* its mutex guards what follows */
    void *ctx, *sock;
    char endpoint[300];      /* what sock is connected to */
    char want_endpoint[300]; /* ... and what the sessions handed over need */
    session_t *s;
    size_t n, cap;
    /* hang-ups owed to what shells started (their marks), made by the thread once
     * it let go of w.mu: a look through /proc at every process may be slow, and the
     * agent's loop takes w.mu for each process it reaps */
    struct hangup {
        uint32_t stream;
        int sig;
    } *owed;
    size_t nowed, capowed;
    int64_t pinged;
};

/* --- sessions (under w.mu) --------------------------------------------------------- */

void br_streams_mark(uint32_t stream, char *out, size_t len)
{
    snprintf(out, len, "%s=%u", BR_STREAMS_MARK, (unsigned)stream);
}

/* sig to the shell's process group now, and owed (signal_owed) to what it started
 * wherever that went: a process group of its own (an interactive shell's jobs), the
 * container (podman exec's processes are conmon's children), or on after the shell
 * itself exited. */
static void hang_up(br_streams_t *st, session_t *ss, int sig)
{
    if (!sig || ss->pid <= 0)
        return;
    if (!ss->exited)
        kill(-ss->pid, sig);
    if (st->nowed == st->capowed) {
        size_t cap = st->capowed ? 2 * st->capowed : 8;
        struct hangup *v = realloc(st->owed, cap * sizeof(*v));
        if (!v)
            return; /* (its group had it; the job's end takes the rest) */
        st->owed = v;
        st->capowed = cap;
    }
    st->owed[st->nowed++] = (struct hangup){ss->stream, sig};
}

/* The hang-ups owed, taken under w.mu: made once it is let go (signal_owed). */
static struct hangup *take_owed(br_streams_t *st, size_t *n)
{
    struct hangup *v = st->owed;
    *n = st->nowed;
    st->owed = NULL;
    st->nowed = st->capowed = 0;
    return v;
}

static void signal_owed(struct hangup *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char mark[64];
        br_streams_mark(v[i].stream, mark, sizeof(mark));
        br_task_signal_marked(mark, v[i].sig);
    }
    free(v);
}

static void close_fds(const int fds[3])
{
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0 && (i == 0 || fds[i] != fds[0]))
            close(fds[i]);
}

static void drop(br_streams_t *st, size_t i, int sig)
{
    session_t *ss = &st->s[i];
    hang_up(st, ss, sig);
    if (!ss->end)
        close_fds(ss->fds);
    br_streamend_destroy(&ss->end);
    free(ss->error);
    st->s[i] = st->s[--st->n];
    sodium_memzero(&st->s[st->n], sizeof(st->s[st->n])); /* (its key with it) */
}

static void close_with(br_streams_t *st, size_t i, const char *why)
{
    br_streamend_send(st->s[i].end, BR_STREAM_CLOSE, 0, 0, why, strlen(why));
}

static session_t *find(br_streams_t *st, uint32_t id, size_t *at)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->s[i].stream == id) {
            *at = i;
            return &st->s[i];
        }
    return NULL;
}

static void on_frame(br_streams_t *st, const br_stream_hdr_t *h, void *p, size_t len)
{
    size_t i;
    session_t *ss = find(st, h->stream, &i);
    if (!ss) {
        br_stream_disown(st->sock, h, "the node's side no longer has this stream",
                         ZMQ_DONTWAIT);
        return;
    }
    if (!ss->end)
        return; /* (a late frame of a session that ended) */
    ss->seen = br_mono_ms();
    br_err_t err;
    if (br_streamend_open(ss->end, h, p, &len, &err) < 0) {
        close_with(st, i, err.text);
        drop(st, i, SIGHUP);
        return;
    }
    switch (h->type) {
    case BR_STREAM_ATTACHED:
        if (ss->error) {
            close_with(st, i, ss->error);
            drop(st, i, SIGHUP);
            return;
        }
        break;
    case BR_STREAM_WINCH: /* (the terminal is open while its end holds it) */
        if (ss->tty_fd >= 0 && !(br_streamend_sources_done(ss->end) &&
                                 br_streamend_sinks_done(ss->end))) {
            struct winsize ws = {.ws_row = (unsigned short)(h->arg >> 16),
                                 .ws_col = (unsigned short)(h->arg & 0xffff)};
            ioctl(ss->tty_fd, TIOCSWINSZ, &ws);
        }
        return;
    case BR_STREAM_CLOSE: /* the client went, or the relay closed it */
    case BR_STREAM_EXIT:
        drop(st, i, SIGHUP);
        return;
    case BR_STREAM_PING:
        return;
    default:
        break;
    }
    if (br_streamend_frame(ss->end, h, p, len, &err) < 0) {
        close_with(st, i, err.text);
        drop(st, i, SIGHUP);
    }
}

/* Whether terminal master fd has output waiting to be read, or its end to be
 * taken (POLLHUP: every process let the terminal go). */
static int tty_pending(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP));
}

/* A session's end, when it came: EXIT with its status, and gone. On a terminal,
 * once its command exited and the terminal's end is read (every process let it go),
 * or, when a process the command started in the background still holds it open,
 * once it has had nothing to read for TTY_QUIET_MS: what is written meanwhile is
 * read on, and a reader short of credit gets the last of it all the same. */
static int finished(br_streams_t *st, size_t i)
{
    session_t *ss = &st->s[i];
    int done = ss->pid > 0 ? ss->exited && br_streamend_sources_done(ss->end)
                           : br_streamend_sources_done(ss->end) &&
                                 br_streamend_sinks_done(ss->end);
    if (ss->pid > 0 && ss->exited && !done && ss->tty_fd >= 0) {
        int64_t now = br_mono_ms();
        if (tty_pending(ss->tty_fd))
            ss->quiet_since = 0;
        else if (!ss->quiet_since)
            ss->quiet_since = now;
        done = ss->quiet_since && now - ss->quiet_since >= TTY_QUIET_MS;
    }
    if (!done || br_streamend_queued(ss->end))
        return 0;
    int code = ss->pid <= 0                ? 0
               : WIFEXITED(ss->status)    ? WEXITSTATUS(ss->status)
               : WIFSIGNALED(ss->status)  ? 128 + WTERMSIG(ss->status)
                                          : 255;
    br_streamend_send(ss->end, BR_STREAM_EXIT, 0, (uint64_t)code, NULL, 0);
    drop(st, i, 0);
    return 1;
}

/* A forward's connect to the node's loopback of family started in fds[0]: 0, or
 * the errno of a refusal at once. */
static int start_connect(session_t *ss, int family)
{
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ss->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)ss->port),
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    int e = (family == AF_INET ? connect(fd, (struct sockaddr *)&a4, sizeof(a4))
                               : connect(fd, (struct sockaddr *)&a6, sizeof(a6))) < 0
                ? errno
                : 0;
    if (e && e != EINPROGRESS) {
        close(fd);
        return e;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ss->fds[0] = fd;
    ss->family = family;
    return 0;
}

/* A forward's connection, made on this thread so that a listener slow to accept (its
 * queue full, the kernel takes the connect at a SYN retry, 1, 3, 7 s on) holds
 * nothing up: 1 once it is made, or failed (then error says why, told at
 * ATTACHED); 0 while it may still be taken; -1 when out of memory. 127.0.0.1 first,
 * then ::1 where that refuses. */
static int connect_done(session_t *ss, int64_t now)
{
    int e = ss->fds[0] < 0 ? start_connect(ss, AF_INET) : 0;
    if (!e) {
        struct pollfd p = {ss->fds[0], POLLOUT, 0};
        socklen_t len = sizeof(e);
        if (poll(&p, 1, 0) != 1)
            e = now - ss->since < BR_STREAMS_CONNECT_MS ? -1 : ETIMEDOUT;
        else if (getsockopt(ss->fds[0], SOL_SOCKET, SO_ERROR, &e, &len) < 0)
            e = errno;
    }
    if (e == ECONNREFUSED && ss->family != AF_INET6) { /* (refused on 127.0.0.1) */
        if (ss->fds[0] >= 0)
            close(ss->fds[0]);
        ss->fds[0] = -1;
        if (start_connect(ss, AF_INET6) == 0)
            return 0; /* (its answer polled for) */
    }
    if (e < 0)
        return 0;
    if (!e)
        return 1;
    char why[sizeof(ss->target) + 96];
    if (e == ETIMEDOUT)
        snprintf(why, sizeof(why), "%s takes no connection (its listener did not accept "
                                   "within %d s)", ss->target, BR_STREAMS_CONNECT_MS / 1000);
    else
        snprintf(why, sizeof(why), "nothing answers on %s (%s)", ss->target, strerror(e));
    if (ss->fds[0] >= 0)
        close(ss->fds[0]);
    ss->fds[0] = -1;
    return (ss->error = strdup(why)) ? 1 : -1;
}

/* A session handed over: its end made, its descriptors given to it, and ATTACH
 * sent. -1 when out of memory. */
static int attach(br_streams_t *st, session_t *ss)
{
    br_err_t err;
    if (!(ss->end = br_streamend_new(st->sock, ss->stream, ss->key, BR_STREAM_FROM_NODE, &err))) {
        fprintf(stderr, "bramble-agent: stream %u: %s\n", (unsigned)ss->stream, err.text);
        return -1;
    }
    if (!ss->error && ss->fds[0] >= 0) { /* (a forward's connect not made: none, its
                                           * session closed at once, its job ended) */
        if (ss->tty || ss->is_socket) { /* one descriptor both ways */
            br_streamend_sink(ss->end, 0, ss->fds[0], ss->is_socket);
            br_streamend_source(ss->end, 1, ss->fds[0]);
        } else {
            br_streamend_sink(ss->end, 0, ss->fds[0], 0);
            br_streamend_source(ss->end, 1, ss->fds[1]);
            br_streamend_source(ss->end, 2, ss->fds[2]);
        }
    }
    ss->fds[0] = ss->fds[1] = ss->fds[2] = -1;
    br_stream_send(st->sock, NULL, 0, BR_STREAM_ATTACH, 0, ss->stream, 0, ss->ticket,
                   BR_STREAM_TICKET, 0);
    return 0;
}

/* The connection to the relay, made again when the relay moved (the sessions
 * attached on the old one cannot go on). */
static void connect_relay(br_streams_t *st)
{
    if (!st->want_endpoint[0] || (st->sock && strcmp(st->endpoint, st->want_endpoint) == 0))
        return;
    for (size_t i = st->n; i-- > 0;)
        if (st->s[i].end)
            drop(st, i, SIGHUP);
    br_sock_close(&st->sock);
    br_err_t err;
    st->sock = br_sock_stream_client(st->ctx, st->want_endpoint, &err);
    if (!st->sock) {
        fprintf(stderr, "bramble-agent: shells and forwards: %s\n", err.text);
        st->want_endpoint[0] = '\0';
        while (st->n)
            drop(st, st->n - 1, SIGHUP);
        return;
    }
    br_strlcpy(st->endpoint, st->want_endpoint, sizeof(st->endpoint));
}

static void turn(br_streams_t *st, int64_t now)
{
    connect_relay(st);
    for (size_t i = st->n; i-- > 0;) {
        session_t *ss = &st->s[i];
        char why[96];
        int made = ss->port && !ss->end && !ss->error && !ss->ended && !ss->stopping
                       ? connect_done(ss, now)
                       : 1;
        if (made == 0)
            continue; /* (attached once its connection is made, or fails) */
        if (made < 0 || (!ss->end && (!st->sock || attach(st, ss) < 0))) {
            drop(st, i, SIGHUP);
            continue;
        }
        if (ss->ended || ss->stopping) {
            snprintf(why, sizeof(why), "job %lld %s", (long long)ss->job,
                     ss->ended ? "ended" : "is being stopped");
            close_with(st, i, why);
            drop(st, i, ss->ended ? SIGKILL : SIGHUP);
            continue;
        }
        if (!br_streamend_attached(ss->end) && now - ss->since > BR_STREAMS_ATTACH_MS) {
            drop(st, i, SIGHUP);
            continue;
        }
        if (br_streamend_attached(ss->end) && now - ss->seen > BR_STREAM_GONE_MS) {
            drop(st, i, SIGHUP); /* the relay (the coordinator) is gone */
            continue;
        }
        if (br_streamend_turn(ss->end) < 0) {
            drop(st, i, SIGHUP);
            continue;
        }
        if (br_streamend_attached(ss->end))
            finished(st, i);
    }
}

/* --- the thread -------------------------------------------------------------------- */

static void take_frames(br_streams_t *st)
{
    static unsigned char buf[BR_STREAM_CHUNK]; /* (this thread's alone) */
    br_stream_hdr_t h;
    size_t len;
    int has, rc;
    for (int k = 0; k < 256 && (rc = br_stream_recv(st->sock, &h, buf, sizeof(buf), &len,
                                                    &has)) != 0;
         k++)
        if (rc > 0)
            on_frame(st, &h, has ? buf : NULL, len);
}

static void *run(void *arg)
{
    br_streams_t *st = arg;
    zmq_pollitem_t *items = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&st->w.mu);
    while (!st->w.stop) {
        size_t want = 2 + st->n * 2 * BR_STREAMEND_CHANNELS;
        if (want > cap) {
            zmq_pollitem_t *ni = realloc(items, want * sizeof(*ni));
            if (!ni)
                break;
            items = ni;
            cap = want;
        }
        int n = 0;
        items[n++] = (zmq_pollitem_t){NULL, st->w.efd, ZMQ_POLLIN, 0};
        if (st->sock)
            items[n++] = (zmq_pollitem_t){st->sock, 0, ZMQ_POLLIN, 0};
        for (size_t i = 0; i < st->n; i++)
            if (st->s[i].end)
                n += br_streamend_poll(st->s[i].end, items + n, (int)(cap - (size_t)n));
            else if (st->s[i].port && st->s[i].fds[0] >= 0) /* (connecting: writable
                                                              * once made, or failed) */
                items[n++] = (zmq_pollitem_t){NULL, st->s[i].fds[0], ZMQ_POLLOUT, 0};
        size_t nowed;
        struct hangup *owed = take_owed(st, &nowed);
        pthread_mutex_unlock(&st->w.mu);
        signal_owed(owed, nowed);
        int rc = zmq_poll(items, n, POLL_MS);
        pthread_mutex_lock(&st->w.mu);
        if (rc < 0 && errno != EINTR)
            break;
        if (items[0].revents)
            br_worker_clear(&st->w);
        if (st->sock)
            take_frames(st);
        int64_t now = br_mono_ms();
        turn(st, now);
        if (st->sock && st->n && now - st->pinged >= BR_STREAM_PING_MS) {
            st->pinged = now;
            br_stream_send(st->sock, NULL, 0, BR_STREAM_PING, 0, 0, 0, NULL, 0, 0);
        }
    }
    while (st->n)
        drop(st, st->n - 1, SIGHUP);
    size_t nowed;
    struct hangup *owed = take_owed(st, &nowed);
    pthread_mutex_unlock(&st->w.mu);
    signal_owed(owed, nowed);
    free(items);
    return NULL;
}

br_streams_t *br_streams_new(br_err_t *err)
{
    br_streams_t *st = calloc(1, sizeof(*st));
    if (!st)
        return br_errp(err, ENOMEM, "out of memory");
    if (br_worker_init(&st->w, "streams", err) < 0 || !(st->ctx = zmq_ctx_new())) {
        if (!st->ctx)
            br_errf(err, ENOMEM, "no ZeroMQ context");
        br_worker_fini(&st->w);
        free(st);
        return NULL;
    }
    if (br_worker_start(&st->w, run, st, err) < 0) {
        br_streams_destroy(&st);
        return NULL;
    }
    return st;
}

void br_streams_destroy(br_streams_t **sp)
{
    br_streams_t *st = sp ? *sp : NULL;
    if (!st)
        return;
    br_worker_stop(&st->w);
    while (st->n)
        drop(st, st->n - 1, SIGHUP);
    size_t nowed;
    struct hangup *owed = take_owed(st, &nowed);
    signal_owed(owed, nowed);
    br_sock_close(&st->sock);
    if (st->ctx)
        zmq_ctx_term(st->ctx);
    br_worker_fini(&st->w);
    free(st->s);
    free(st);
    *sp = NULL;
}

int br_streams_add(br_streams_t *st, const br_streams_session_t *ss, br_err_t *err)
{
    pthread_mutex_lock(&st->w.mu);
    int rc = -1;
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 8;
        session_t *ns = realloc(st->s, cap * sizeof(*ns));
        if (!ns) {
            br_errf(err, ENOMEM, "out of memory");
            goto out;
        }
        st->s = ns;
        st->cap = cap;
    }
    session_t *x = &st->s[st->n];
    memset(x, 0, sizeof(*x));
    x->stream = ss->stream;
    br_strlcpy(x->ticket, ss->ticket, sizeof(x->ticket));
    br_strlcpy(x->key, ss->key, sizeof(x->key));
    x->job = ss->job;
    x->attempt = ss->attempt;
    x->rank = ss->rank;
    x->pid = ss->pid;
    x->tty = ss->tty;
    x->is_socket = ss->is_socket;
    x->port = ss->error ? 0 : ss->port;
    br_strlcpy(x->target, ss->target, sizeof(x->target));
    x->tty_fd = ss->tty ? ss->fds[0] : -1;
    memcpy(x->fds, ss->fds, sizeof(x->fds));
    x->since = x->seen = br_mono_ms();
    if (ss->error && !(x->error = strdup(ss->error))) {
        br_errf(err, ENOMEM, "out of memory");
        goto out;
    }
    if (ss->error)
        x->fds[0] = x->fds[1] = x->fds[2] = -1;
    st->n++;
    br_strlcpy(st->want_endpoint, ss->endpoint, sizeof(st->want_endpoint));
    rc = 0;
    br_worker_post(&st->w);
out:
    if (rc < 0) {
        close_fds(ss->fds);
        if (ss->pid > 0)
            kill(-ss->pid, SIGHUP);
    }
    pthread_mutex_unlock(&st->w.mu);
    return rc;
}

int br_streams_reaped(br_streams_t *st, pid_t pid, int status)
{
    int ours = 0;
    pthread_mutex_lock(&st->w.mu);
    for (size_t i = 0; i < st->n; i++)
        if (st->s[i].pid == pid && !st->s[i].exited) {
            st->s[i].exited = 1;
            st->s[i].status = status;
            ours = 1;
        }
    pthread_mutex_unlock(&st->w.mu);
    if (ours)
        br_worker_post(&st->w);
    return ours;
}

/* The sessions of the job's attempt (of rank rank; -1: any) ended, or are stopping. */
static void mark(br_streams_t *st, int64_t job, int attempt, int rank, int ended)
{
    int any = 0;
    pthread_mutex_lock(&st->w.mu);
    for (size_t i = 0; i < st->n; i++)
        if (st->s[i].job == job && st->s[i].attempt == attempt &&
            (rank < 0 || st->s[i].rank == rank)) {
            any = 1;
            *(ended ? &st->s[i].ended : &st->s[i].stopping) = 1;
        }
    pthread_mutex_unlock(&st->w.mu);
    if (any)
        br_worker_post(&st->w);
}

void br_streams_job_ended(br_streams_t *st, int64_t job, int attempt)
{
    mark(st, job, attempt, -1, 1);
}

void br_streams_rank_ended(br_streams_t *st, int64_t job, int attempt, int rank)
{
    mark(st, job, attempt, rank, 1);
}

void br_streams_job_stopping(br_streams_t *st, int64_t job, int attempt)
{
    mark(st, job, attempt, -1, 0);
}
