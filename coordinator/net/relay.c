/* relay.c - the stream relay's thread and its table of streams (relay.h). */
#include "relay.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <unistd.h>
#include <zmq.h>

#include "sock.h"
#include "util.h"
#include "worker.h"

#define RECV_MAX 256 /* frames taken per turn of the loop before expiring */
#define RELAY_NICE 10 /* where SCHED_IDLE is refused: bulk bytes yield to the loop */
#define REACH_MS 500 /* each end is pinged this often: one whose connection closed is
                      * found so (ROUTER_MANDATORY: its route is gone), within a
                      * heartbeat, not after BR_STREAM_GONE_MS of silence */

enum { CLI, NODE };

typedef struct {
    unsigned char route[256];
    size_t route_len;
    int attached;
    int64_t seen;    /* monotonic ms it last sent anything */
    br_credit_t out; /* what it sent, and what the other end granted it */
} end_t;

typedef struct {
    br_relay_grant_t g;
    int64_t opened;
    end_t e[2];
    char cut[160]; /* the loop cut it (br_relay_cut): why; the relay's thread closes it */
} rstream_t;

struct br_relay {
    br_worker_t w; /* its mutex guards the table */
    void *ctx;     /* its own, whose I/O thread runs as SCHED_IDLE (br_worker_background) */
    void *sock;
    int port;
    int per_user, total;
    uint32_t next_id;
    int busy; /* (its thread's) streams were open at its last look */
    rstream_t *s;
    size_t n, cap;
    struct closed { /* when each job's last stream ended (monotonic ms) */
        int64_t job, at;
    } *closed;
    size_t nclosed, capclosed;
};

static const char *const side_name[2] = {"the client", "the node"};

/* --- the table (under w.mu) ------------------------------------------------------- */

static rstream_t *find(br_relay_t *r, uint32_t id)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->s[i].g.id == id)
            return &r->s[i];
    return NULL;
}

static int count(br_relay_t *r, int64_t user_id)
{
    int n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += user_id < 0 || r->s[i].g.user_id == user_id;
    return n;
}

static void send_close(br_relay_t *r, const end_t *e, uint32_t id, const char *why)
{
    if (e->attached)
        br_stream_send(r->sock, e->route, e->route_len, BR_STREAM_CLOSE, 0, id, 0, why,
                       strlen(why), ZMQ_DONTWAIT);
}

#define CLOSED_MAX 4096 /* jobs whose streams' last end is remembered (the newest) */

/* Forget stream s; its job's streams ended now (under w.mu). */
static void drop_stream(br_relay_t *r, rstream_t *s)
{
    int64_t job = s->g.job, now = br_mono_ms();
    *s = r->s[--r->n];
    size_t i = 0, oldest = 0;
    for (; i < r->nclosed && r->closed[i].job != job; i++)
        if (r->closed[i].at < r->closed[oldest].at)
            oldest = i;
    if (i == r->nclosed) { /* a job not seen before: a new entry, or the oldest's */
        if (r->nclosed == r->capclosed && r->capclosed < CLOSED_MAX) {
            size_t cap = r->capclosed ? 2 * r->capclosed : 16;
            struct closed *v = realloc(r->closed, cap * sizeof(*v));
            if (v)
                r->closed = v, r->capclosed = cap;
        }
        if (r->nclosed < r->capclosed)
            r->nclosed++;
        else if (r->nclosed)
            i = oldest;
        else
            return; /* (out of memory: not remembered) */
    }
    r->closed[i].job = job;
    r->closed[i].at = now;
}

/* Tell both ends (but skip) why, and forget the stream. */
static void close_stream(br_relay_t *r, rstream_t *s, int skip, const char *why)
{
    for (int side = CLI; side <= NODE; side++)
        if (side != skip)
            send_close(r, &s->e[side], s->g.id, why);
    drop_stream(r, s);
}

/* --- frames ---------------------------------------------------------------------- */

static int same_route(const end_t *e, const void *route, size_t len)
{
    return e->attached && e->route_len == len && memcmp(e->route, route, len) == 0;
}

static void attach(br_relay_t *r, rstream_t *s, const void *route, size_t rlen,
                   const void *ticket, size_t tlen)
{
    int side = -1;
    if (tlen == BR_STREAM_TICKET && sodium_memcmp(ticket, s->g.cli_ticket, tlen) == 0)
        side = CLI;
    else if (tlen == BR_STREAM_TICKET && sodium_memcmp(ticket, s->g.node_ticket, tlen) == 0)
        side = NODE;
    const char *refused = side < 0                 ? "wrong ticket"
                          : s->e[side].attached ? "that end is attached already"
                                                : NULL;
    if (refused) {
        br_stream_send(r->sock, route, rlen, BR_STREAM_CLOSE, 0, s->g.id, 0, refused,
                       strlen(refused), ZMQ_DONTWAIT);
        return;
    }
    end_t *e = &s->e[side];
    memcpy(e->route, route, rlen);
    e->route_len = rlen;
    e->attached = 1;
    e->seen = br_mono_ms();
    if (s->e[CLI].attached && s->e[NODE].attached)
        for (int i = CLI; i <= NODE; i++)
            br_stream_send(r->sock, s->e[i].route, s->e[i].route_len, BR_STREAM_ATTACHED,
                           0, s->g.id, 0, NULL, 0, ZMQ_DONTWAIT);
}

/* A frame from an attached end (side) of s: passed to the other, within credit. */
/* Send h with the payload message itself (its bytes move, not copied) to end e. */
static int forward(br_relay_t *r, const end_t *e, const br_stream_hdr_t *h, uint32_t id,
                   zmq_msg_t *payload)
{
    unsigned char hdr[BR_STREAM_HEADER];
    br_stream_hdr_t out = *h;
    out.stream = id;
    br_stream_hdr_encode(&out, hdr);
    if (zmq_send(r->sock, e->route, e->route_len, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
        zmq_send(r->sock, hdr, sizeof(hdr), ZMQ_DONTWAIT | (payload ? ZMQ_SNDMORE : 0)) < 0)
        return -1;
    return payload ? zmq_msg_send(payload, r->sock, ZMQ_DONTWAIT) < 0 ? -1 : 0 : 0;
}

static void pass(br_relay_t *r, rstream_t *s, int side, const br_stream_hdr_t *h,
                 zmq_msg_t *payload)
{
    size_t len = payload ? zmq_msg_size(payload) : 0;
    end_t *from = &s->e[side], *to = &s->e[!side];
    char why[160];
    from->seen = br_mono_ms();
    if (h->type == BR_STREAM_PING)
        return;
    if (h->type == BR_STREAM_ATTACH) {
        close_stream(r, s, -1, "an end attached twice");
        return;
    }
    if (!to->attached) {
        snprintf(why, sizeof(why), "%s sent before the stream was attached",
                 side_name[side]);
        close_stream(r, s, -1, why);
        return;
    }
    if (h->type == BR_STREAM_DATA) {
        from->out.sent += br_stream_cost(len);
        if (from->out.sent > from->out.granted) {
            snprintf(why, sizeof(why), "%s sent beyond its credit (%d bytes in flight)",
                     side_name[side], BR_STREAM_WINDOW);
            close_stream(r, s, -1, why);
            return;
        }
    } else if (h->type == BR_STREAM_CREDIT) {
        /* a receiver grants back what it took, never more than it was sent: credit
         * beyond would let the other end's bytes pile up here without bound */
        if (h->arg > (uint64_t)1 << 40 ||
            to->out.granted + (int64_t)h->arg > to->out.sent + BR_STREAM_WINDOW) {
            snprintf(why, sizeof(why), "%s granted credit beyond what it was sent",
                     side_name[side]);
            close_stream(r, s, -1, why);
            return;
        }
        to->out.granted += (int64_t)h->arg;
    }
    if (forward(r, to, h, s->g.id, payload) < 0) {
        snprintf(why, sizeof(why), "%s went away", side_name[!side]);
        close_stream(r, s, !side, why);
        return;
    }
    if (h->type == BR_STREAM_EXIT || h->type == BR_STREAM_CLOSE)
        drop_stream(r, s); /* (the other end has it: the last frame) */
}

static void on_frame(br_relay_t *r, const void *route, size_t rlen,
                     const br_stream_hdr_t *h, zmq_msg_t *payload)
{
    pthread_mutex_lock(&r->w.mu);
    if (h->type == BR_STREAM_PING && h->stream == 0) { /* the whole connection is there */
        int64_t now = br_mono_ms();
        for (size_t i = 0; i < r->n; i++)
            for (int side = CLI; side <= NODE; side++)
                if (same_route(&r->s[i].e[side], route, rlen))
                    r->s[i].e[side].seen = now;
        pthread_mutex_unlock(&r->w.mu);
        return;
    }
    rstream_t *s = find(r, h->stream);
    if (!s) {
        if (h->type == BR_STREAM_ATTACH) {
            const char *why = "no such stream (it ended, or was never granted)";
            br_stream_send(r->sock, route, rlen, BR_STREAM_CLOSE, 0, h->stream, 0, why,
                           strlen(why), ZMQ_DONTWAIT);
        } /* else: late frames of a stream that ended */
        pthread_mutex_unlock(&r->w.mu);
        return;
    }
    int side = same_route(&s->e[CLI], route, rlen)    ? CLI
               : same_route(&s->e[NODE], route, rlen) ? NODE
                                                       : -1;
    if (side >= 0)
        pass(r, s, side, h, payload);
    else if (h->type == BR_STREAM_ATTACH)
        attach(r, s, route, rlen, payload ? zmq_msg_data(payload) : NULL,
               payload ? zmq_msg_size(payload) : 0);
    pthread_mutex_unlock(&r->w.mu);
}

/* Take one message: [route] [header] [payload]; 0, or -1 when none waits. */
static int recv_one(br_relay_t *r)
{
    zmq_msg_t part[3];
    int n = 0, more = 1;
    for (int i = 0; i < 3; i++)
        zmq_msg_init(&part[i]);
    while (more) {
        zmq_msg_t *m = &part[n < 3 ? n : 2];
        if (n >= 3) { /* too many frames: the extra ones are dropped */
            zmq_msg_close(m);
            zmq_msg_init(m);
        }
        if (zmq_msg_recv(m, r->sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            for (int i = 0; i < 3; i++)
                zmq_msg_close(&part[i]);
            return n == 0 ? -1 : 0;
        }
        more = zmq_msg_more(m);
        n++;
    }
    br_stream_hdr_t h;
    br_err_t err;
    if (n >= 2 && n <= 3 &&
        br_stream_hdr_decode(zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), &h, &err) == 0 &&
        (n == 2 || zmq_msg_size(&part[2]) <= BR_STREAM_CHUNK)) {
        on_frame(r, zmq_msg_data(&part[0]), zmq_msg_size(&part[0]), &h,
                 n == 3 ? &part[2] : NULL);
    }
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&part[i]);
    return 0;
}

/* Streams not attached in time, and ends gone silent; each end of the others is
 * pinged (ping: it is time to). */
static void expire(br_relay_t *r, int64_t now, int ping)
{
    pthread_mutex_lock(&r->w.mu);
    for (size_t i = r->n; i-- > 0;) {
        rstream_t *s = &r->s[i];
        char why[160];
        if (s->cut[0]) { /* (its key was revoked: both ends are told why) */
            br_strlcpy(why, s->cut, sizeof(why));
            close_stream(r, s, -1, why);
            continue;
        }
        if (!(s->e[CLI].attached && s->e[NODE].attached)) {
            if (now - s->opened > BR_RELAY_ATTACH_MS) {
                snprintf(why, sizeof(why), "%s did not attach within %d s",
                         side_name[s->e[NODE].attached ? CLI : NODE],
                         BR_RELAY_ATTACH_MS / 1000);
                close_stream(r, s, -1, why);
                continue;
            } /* (an end that waits for the other is pinged: the relay is there) */
        } else {
            for (int side = CLI; side <= NODE; side++)
                if (now - s->e[side].seen > BR_STREAM_GONE_MS) {
                    snprintf(why, sizeof(why), "%s went away (silent for %d ms)",
                             side_name[side], BR_STREAM_GONE_MS);
                    close_stream(r, s, side, why);
                    s = NULL;
                    break;
                }
        }
        for (int side = CLI; s && ping && side <= NODE; side++)
            if (s->e[side].attached &&
                br_stream_send(r->sock, s->e[side].route, s->e[side].route_len,
                               BR_STREAM_PING, 0, s->g.id, 0, NULL, 0, ZMQ_DONTWAIT) < 0 &&
                errno == EHOSTUNREACH) { /* (a new connection has another route) */
                snprintf(why, sizeof(why), "%s went away (its connection closed)",
                         side_name[side]);
                close_stream(r, s, side, why);
                s = NULL;
            }
    }
    pthread_mutex_unlock(&r->w.mu);
}

/* Once the last stream has ended, the memory their bytes took goes back to the
 * system: freed buffers stay in the arena of the thread that freed them (this one's,
 * its I/O thread's, the loop's) until trimmed, a few MiB after a hundred shells. */
static void give_back(br_relay_t *r)
{
    pthread_mutex_lock(&r->w.mu);
    int idle = r->n == 0, was = r->busy;
    r->busy = !idle;
    pthread_mutex_unlock(&r->w.mu);
    if (idle && was)
        malloc_trim(0);
}

static void *run(void *arg)
{
    br_relay_t *r = arg;
    int64_t expired = 0, pinged = 0;
    br_worker_background(RELAY_NICE);
    for (;;) {
        pthread_mutex_lock(&r->w.mu);
        int stop = r->w.stop;
        pthread_mutex_unlock(&r->w.mu);
        if (stop)
            break;
        zmq_pollitem_t it[2] = {{r->sock, 0, ZMQ_POLLIN, 0},
                                {NULL, r->w.efd, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, 250) < 0 && errno != EINTR)
            break;
        int posted = it[1].revents != 0;
        if (posted) /* (the loop cut a stream: closed below, at once) */
            br_worker_clear(&r->w);
        for (int i = 0; i < RECV_MAX && recv_one(r) == 0; i++)
            ;
        int64_t now = br_mono_ms();
        if (posted || now - expired >= 250) {
            expired = now;
            int ping = now - pinged >= REACH_MS;
            if (ping)
                pinged = now;
            expire(r, now, ping);
            give_back(r);
        }
    }
    return NULL;
}

/* --- the object ------------------------------------------------------------------ */

static void *bind_next_to(void *ctx, const char *listen, int *port, br_err_t *err)
{
    const char *colon = strrchr(listen, ':');
    int main_port = colon ? atoi(colon + 1) : 0;
    char ep[300];
    void *s = NULL;
    if (!colon || strncmp(listen, "tcp://", 6) != 0)
        return br_errp(err, EINVAL, "the relay needs a tcp:// listen address, not %s",
                       listen);
    if (main_port > 0 && main_port < 65535 &&
        br_stream_endpoint(listen, main_port + 1, ep, sizeof(ep)) == 0)
        s = br_sock_stream_server(ctx, ep, NULL);
    if (!s) { /* taken (another cluster's on this host), or no port given */
        snprintf(ep, sizeof(ep), "%.*s:*", (int)(colon - listen), listen);
        if (!(s = br_sock_stream_server(ctx, ep, err)))
            return NULL;
    }
    char last[300];
    size_t len = sizeof(last);
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len) < 0 ||
        !(colon = strrchr(last, ':')) || (*port = atoi(colon + 1)) <= 0) {
        br_sock_close(&s);
        return br_errp(err, EIO, "the relay's socket has no port");
    }
    return s;
}

/* The relay's context and socket, made by a thread of their own in the background
 * (br_worker_background: SCHED_IDLE): the context's I/O thread, which moves every frame,
 * starts with the socket and inherits it, so that a forward's bytes yield the CPU
 * to the coordinator's loop (its heartbeats) on a busy machine. */
typedef struct {
    br_relay_t *r;
    const char *listen;
    br_err_t *err;
} opener_t;

static void *open_low(void *arg)
{
    opener_t *o = arg;
    br_worker_background(RELAY_NICE);
    if (!(o->r->ctx = zmq_ctx_new()))
        br_errf(o->err, errno, "the relay's context: %s", zmq_strerror(errno));
    else
        o->r->sock = bind_next_to(o->r->ctx, o->listen, &o->r->port, o->err);
    return NULL;
}

br_relay_t *br_relay_new(const char *listen, int per_user, int total, br_err_t *err)
{
    br_relay_t *r = calloc(1, sizeof(*r));
    if (!r)
        return br_errp(err, ENOMEM, "out of memory");
    r->per_user = per_user;
    r->total = total;
    r->next_id = 1 + (uint32_t)(br_now_ms() % 0x7fffffff); /* not one a coordinator
                                                       * before this one gave */
    if (br_worker_init(&r->w, "relay", err) < 0) {
        br_worker_fini(&r->w);
        free(r);
        return NULL;
    }
    opener_t o = {r, listen, err};
    pthread_t t;
    if (pthread_create(&t, NULL, open_low, &o) != 0) {
        br_errf(err, EAGAIN, "the relay: no thread");
        br_relay_destroy(&r);
        return NULL;
    }
    pthread_join(t, NULL); /* (the socket is handed over: join orders it) */
    if (!r->sock || br_worker_start(&r->w, run, r, err) < 0) {
        br_relay_destroy(&r);
        return NULL;
    }
    return r;
}

void br_relay_destroy(br_relay_t **rp)
{
    br_relay_t *r = rp ? *rp : NULL;
    if (!r)
        return;
    br_worker_stop(&r->w);
    br_sock_close(&r->sock);
    if (r->ctx)
        zmq_ctx_term(r->ctx);
    br_worker_fini(&r->w);
    free(r->s);
    free(r->closed);
    free(r);
    *rp = NULL;
}

int br_relay_port(const br_relay_t *r)
{
    return r->port;
}

int br_relay_job_streams(br_relay_t *r, int64_t job)
{
    int n = 0;
    pthread_mutex_lock(&r->w.mu);
    for (size_t i = 0; i < r->n; i++)
        n += r->s[i].g.job == job;
    pthread_mutex_unlock(&r->w.mu);
    return n;
}

int64_t br_relay_job_closed(br_relay_t *r, int64_t job)
{
    int64_t at = 0;
    pthread_mutex_lock(&r->w.mu);
    for (size_t i = 0; i < r->nclosed; i++)
        if (r->closed[i].job == job)
            at = r->closed[i].at;
    pthread_mutex_unlock(&r->w.mu);
    return at;
}

int br_relay_cut(br_relay_t *r, int64_t user_id, const char *key, const char *why)
{
    int n = 0;
    pthread_mutex_lock(&r->w.mu);
    for (size_t i = 0; i < r->n; i++) {
        rstream_t *s = &r->s[i];
        if (s->cut[0] || !((user_id > 0 && s->g.user_id == user_id) ||
                           (key && (strcmp(s->g.cli_key, key) == 0 ||
                                    strcmp(s->g.node_key, key) == 0))))
            continue;
        br_strlcpy(s->cut, why, sizeof(s->cut));
        n++;
    }
    pthread_mutex_unlock(&r->w.mu);
    if (n)
        br_worker_post(&r->w); /* (its thread closes them, on its own socket) */
    return n;
}

int br_relay_open(br_relay_t *r, br_relay_grant_t *g, br_err_t *err)
{
    pthread_mutex_lock(&r->w.mu);
    int rc = 0;
    if (count(r, g->user_id) >= r->per_user)
        rc = br_errf(err, EBUSY, "%d shells and forwards are open for this user, the most "
                                 "one user may have at once; close one first",
                     r->per_user);
    else if ((int)r->n >= r->total)
        rc = br_errf(err, EBUSY, "%d shells and forwards are open, the most the "
                                 "coordinator carries at once; try again later",
                     r->total);
    else if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        rstream_t *ns = realloc(r->s, cap * sizeof(*ns));
        if (!ns)
            rc = br_errf(err, ENOMEM, "out of memory");
        else {
            r->s = ns;
            r->cap = cap;
        }
    }
    if (rc == 0) {
        g->id = r->next_id++;
        if (r->next_id == 0)
            r->next_id = 1 + (uint32_t)(br_now_ms() % 0x7fffffff); /* not one a coordinator
                                                       * before this one gave */ /* (0 names the whole connection) */
        br_stream_ticket(g->cli_ticket);
        br_stream_ticket(g->node_ticket);
        rstream_t *s = &r->s[r->n++];
        memset(s, 0, sizeof(*s));
        s->g = *g;
        s->opened = br_mono_ms();
        br_credit_init(&s->e[CLI].out);
        br_credit_init(&s->e[NODE].out);
    }
    pthread_mutex_unlock(&r->w.mu);
    return rc;
}
