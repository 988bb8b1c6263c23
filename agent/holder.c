/* holder.c - serves checkpoint files to the peers that grants name (holder.h). */
#include "holder.h"
#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "ckpt.h"
#include "cred.h"
#include "fsid.h"
#include "manifest.h"
#include "msg.h"
#include "sock.h"
#include "util.h"
#include "worker.h"
#include "zap.h"

/*
 * One thread owns the sockets; the agent's loop only adds and withdraws grants,
 * under the mutex, which the ZAP check (on this thread) reads too. A request waits
 * in a FIFO until the token bucket holds enough for its answer, so answers leave in
 * the order asked and the cap never makes anyone wait but the peers themselves.
 * The last file opened stays open, so a file read chunk by chunk is opened once.
 */

typedef struct {
    char *id, *peer_name, *dir, *path;
    char *listing; /* the whole listing's file, or NULL */
    char listing_hash[2 * BR_MANIFEST_HASH_LEN + 1];
    int64_t listing_size;
    char key[BR_KEY_LEN + 1];
    json_t *manifest;
    br_fsid_t *fsid;
    int64_t expires; /* monotonic ms */
} grant_t;

typedef struct {
    br_msg_t *q[BR_HOLDER_QUEUE];
    int head, n;
} fifo_t;

struct br_holder {
    void *ctx, *router;
    br_zap_t *zap;
    int port;
    br_worker_t w; /* its mu guards the grants and stats; its efd wakes the thread */
    grant_t *grants[BR_HOLDER_GRANTS];
    int ngrants;
    unsigned gen; /* grows at every change of the grants */
    br_holder_stats_t st;
    /* the thread's own */
    fifo_t fifo;
    uint64_t rate;
    double tokens;
    int64_t refilled_us;
    unsigned char *buf;
    int fd; /* the file open for the last read, or -1 */
    char fd_grant[128], fd_path[PATH_MAX];
    unsigned fd_gen; /* gen when fd was opened: a changed grant opens afresh */
};

static void grant_free(grant_t *g)
{
    if (g) {
        free(g->id);
        free(g->peer_name);
        free(g->dir);
        free(g->path);
        free(g->listing);
        json_decref(g->manifest);
        br_fsid_destroy(&g->fsid);
        free(g);
    }
}

/* Under mu. */
static int find_grant(br_holder_t *h, const char *id)
{
    for (int i = 0; i < h->ngrants; i++)
        if (strcmp(h->grants[i]->id, id) == 0)
            return i;
    return -1;
}

static void drop_grant(br_holder_t *h, int i)
{
    grant_free(h->grants[i]);
    h->grants[i] = h->grants[--h->ngrants];
    h->gen++;
}

/* --- ZAP: only keys some live grant names may connect ---------------------------- */

static int zap_check(void *arg, const char *key)
{
    br_holder_t *h = arg;
    int64_t now = br_mono_ms();
    pthread_mutex_lock(&h->w.mu);
    int ok = 0;
    for (int i = 0; i < h->ngrants && !ok; i++)
        ok = h->grants[i]->expires > now && strcmp(h->grants[i]->key, key) == 0;
    if (!ok)
        h->st.zap_refused++;
    pthread_mutex_unlock(&h->w.mu);
    if (!ok)
        fprintf(stderr,
                "bramble-agent: replica: refused a connection from key %.8s...: "
                "no grant names it\n",
                key);
    return ok ? 0 : -1;
}

/* --- opening a file of a checkpoint --------------------------------------------- */

/* Open the file rel of grant g as its user, and check it is the manifest's size. */
static int open_file(const grant_t *g, const char *rel, json_int_t size, br_err_t *err)
{
    if (br_fsid_enter(g->fsid, err) < 0)
        return -1;
    int dir =
        strcmp(json_string_value(json_object_get(g->manifest, "root")), "dir") == 0;
    int fd =
        br_ckpt_open(g->dir, g->path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY, err);
    if (fd >= 0 && dir)
        fd = br_open_beneath(fd, rel, err);
    br_fsid_leave(g->fsid);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != size) {
        close(fd);
        return br_errf(err, ESTALE, "%s is no longer what the manifest says", rel);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* The whole listing of grant g's manifest (as the agent: it is the agent's own
 * file), checked to be its size. */
static int open_listing(const grant_t *g, br_err_t *err)
{
    int fd = open(g->listing, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return br_errf(err, errno, "the manifest's whole listing: %s", strerror(errno));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != g->listing_size) {
        close(fd);
        return br_errf(err, ESTALE, "the manifest's whole listing changed");
    }
    return fd;
}

/* --- answering ------------------------------------------------------------------ */

static void close_cached(br_holder_t *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    h->fd_grant[0] = h->fd_path[0] = '\0';
}

static void refuse(br_holder_t *h, const br_msg_t *req, const char *peer, int errnum,
                   const char *text)
{
    if (errnum != EAGAIN) /* busy is no fault of the peer's */
        fprintf(stderr, "bramble-agent: replica: refused %s: %s\n", peer, text);
    br_msg_t *r = br_msg_reply_error(req, errnum, "%s", text);
    if (r)
        br_msg_send(h->router, r, NULL);
    br_msg_destroy(&r);
    pthread_mutex_lock(&h->w.mu);
    h->st.refused++;
    pthread_mutex_unlock(&h->w.mu);
}

/* The chunk req asks for: into h->buf, *len bytes at *off. 0, or -1 with err. Looks
 * the grant up afresh: it may have been withdrawn while the request waited. */
static int read_chunk(br_holder_t *h, const br_msg_t *req, json_int_t *off, size_t *len,
                      char *peer, size_t peer_len, br_err_t *err)
{
    const char *gid, *path, *hash;
    if (br_msg_unpack(req, err, "{s:s, s:s, s:s, s:I}", "grant", &gid, "path", &path,
                      "hash", &hash, "offset", off) < 0)
        return -1;
    pthread_mutex_lock(&h->w.mu);
    int i = find_grant(h, gid);
    grant_t *g = i >= 0 ? h->grants[i] : NULL;
    if (g && g->expires <= br_mono_ms()) {
        drop_grant(h, i);
        g = NULL;
    }
    if (g)
        br_strlcpy(peer, g->peer_name, peer_len);
    int rc = -1, listing = path[0] == '\0'; /* "": the manifest's whole listing */
    json_t *e = g && !listing ? br_manifest_find(g->manifest, path) : NULL;
    json_int_t size = listing && g ? g->listing_size
                      : e          ? json_integer_value(json_object_get(e, "size"))
                                   : 0;
    if (!g || strcmp(g->key, br_msg_user(req)) != 0)
        br_errf(err, EACCES, "no grant %.64s for this key", gid);
    else if (listing ? !g->listing || strcmp(g->listing_hash, hash) != 0
                     : !br_manifest_path_ok(path))
        br_errf(err, listing ? ENOENT : EINVAL,
                listing ? "no whole listing with hash %.16s... in this grant"
                        : "path '%.64s' is not allowed",
                listing ? hash : path);
    else if (!listing && (!e || !json_object_get(e, "hash") ||
                          strcmp(json_string_value(json_object_get(e, "hash")), hash) != 0))
        br_errf(err, ENOENT, "%.64s with hash %.16s... is not in the checkpoint", path,
                hash);
    else if (*off < 0 || *off > size)
        br_errf(err, ERANGE, "offset %lld is beyond %.64s", (long long)*off, path);
    else if (h->fd < 0 || h->fd_gen != h->gen || strcmp(h->fd_grant, gid) != 0 ||
             strcmp(h->fd_path, path) != 0) {
        close_cached(h);
        h->fd_gen = h->gen;
        h->fd = listing ? open_listing(g, err) : open_file(g, path, size, err);
        if (h->fd >= 0) {
            br_strlcpy(h->fd_grant, gid, sizeof(h->fd_grant));
            br_strlcpy(h->fd_path, path, sizeof(h->fd_path));
            rc = 0;
        }
    } else
        rc = 0;
    pthread_mutex_unlock(&h->w.mu);
    if (rc < 0)
        return -1;
    size_t want = size - *off < BR_XFER_CHUNK ? (size_t)(size - *off) : BR_XFER_CHUNK;
    ssize_t k;
    do
        k = pread(h->fd, h->buf, want, *off);
    while (k < 0 && errno == EINTR);
    if (k < 0 || (size_t)k != want) {
        int e2 = k < 0 ? errno : ESTALE;
        close_cached(h);
        return br_errf(err, e2, "%.64s: %s", path,
                       k < 0 ? strerror(e2) : "shorter than the manifest says");
    }
    *len = want;
    return 0;
}

static void serve(br_holder_t *h, br_msg_t *req)
{
    br_err_t err = {0};
    json_int_t off = 0;
    size_t len = 0;
    char peer[80];
    snprintf(peer, sizeof(peer), "key %.8s...", br_msg_user(req));
    if (read_chunk(h, req, &off, &len, peer, sizeof(peer), &err) < 0) {
        refuse(h, req, peer, err.errnum, err.text);
        return;
    }
    br_msg_t *r = br_msg_reply(req);
    json_object_set_new(br_msg_body(r), "offset", json_integer(off));
    if (br_msg_set_data(r, h->buf, len) == 0 && br_msg_send(h->router, r, NULL) == 0) {
        pthread_mutex_lock(&h->w.mu);
        h->st.bytes_sent += len;
        h->st.chunks_sent++;
        pthread_mutex_unlock(&h->w.mu);
    } /* else the peer is gone or not reading: it asks again */
    br_msg_destroy(&r);
    h->tokens -= (double)len;
}

/* --- the thread ------------------------------------------------------------------ */

static void refill(br_holder_t *h)
{
    int64_t now = br_mono_us();
    if (h->rate) {
        h->tokens += (double)h->rate * (double)(now - h->refilled_us) / 1e6;
        double burst =
            2.0 * BR_XFER_CHUNK > h->rate / 10.0 ? 2.0 * BR_XFER_CHUNK : h->rate / 10.0;
        if (h->tokens > burst)
            h->tokens = burst;
    }
    h->refilled_us = now;
}

/* Answer what the bucket allows; the ms to wait before the next one, or -1. */
static long drain(br_holder_t *h)
{
    pthread_mutex_lock(&h->w.mu);
    int stale = h->fd >= 0 && h->fd_gen != h->gen;
    pthread_mutex_unlock(&h->w.mu);
    if (stale) /* a grant changed or went: its file is not held open meanwhile */
        close_cached(h);
    for (;;) {
        if (!h->fifo.n)
            return -1;
        refill(h);
        if (h->rate && h->tokens < 0)
            return (long)(-h->tokens * 1000.0 / (double)h->rate) + 1;
        br_msg_t *m = h->fifo.q[h->fifo.head];
        h->fifo.head = (h->fifo.head + 1) % BR_HOLDER_QUEUE;
        h->fifo.n--;
        if (!h->rate)
            h->tokens = 0;
        serve(h, m);
        br_msg_destroy(&m);
    }
}

/* Requests taken in to wait for the bucket: BR_HOLDER_QUEUE, or under a cap no more
 * than it sends in QUEUE_MS; the others wait in ZeroMQ's queues (fair among the
 * peers), unread. */
#define QUEUE_MS 4000
static int queue_limit(const br_holder_t *h)
{
    if (!h->rate)
        return BR_HOLDER_QUEUE;
    double n = (double)h->rate * QUEUE_MS / 1000.0 / BR_XFER_CHUNK;
    return n < BR_XFER_WINDOW    ? BR_XFER_WINDOW
           : n > BR_HOLDER_QUEUE ? BR_HOLDER_QUEUE
                                 : (int)n;
}

static void take_requests(br_holder_t *h)
{
    while (h->fifo.n < queue_limit(h)) { /* the rest wait in ZeroMQ's queues */
        br_msg_t *m = NULL;
        br_err_t err;
        int rc = br_msg_recv(h->router, 1, ZMQ_DONTWAIT, &m, &err);
        if (rc < 0 && !m)
            return;
        if (rc < 0)
            refuse(h, m, "a peer", EPROTO, err.text);
        else if (br_msg_kind(m) != BR_MSG_REQUEST ||
                 strcmp(br_msg_type(m), "ckpt.read"))
            refuse(h, m, "a peer", EPROTO, "only ckpt.read requests are served here");
        else if (h->fifo.n == BR_HOLDER_QUEUE)
            refuse(h, m, "a peer", EAGAIN, "busy: too many requests waiting");
        else {
            h->fifo.q[(h->fifo.head + h->fifo.n++) % BR_HOLDER_QUEUE] = m;
            m = NULL;
        }
        br_msg_destroy(&m);
    }
}

static void *run(void *arg)
{
    br_holder_t *h = arg;
    h->refilled_us = br_mono_us();
    for (;;) {
        pthread_mutex_lock(&h->w.mu);
        int stop = h->w.stop;
        pthread_mutex_unlock(&h->w.mu);
        if (stop)
            break;
        long wait = drain(h);
        zmq_pollitem_t items[3] = {{h->router, 0, ZMQ_POLLIN, 0},
                                   {br_zap_socket(h->zap), 0, ZMQ_POLLIN, 0},
                                   {NULL, h->w.efd, ZMQ_POLLIN, 0}};
        /* a full queue takes no more until the bucket lets some go */
        int full = h->fifo.n >= queue_limit(h);
        if (zmq_poll(full ? items + 1 : items, full ? 2 : 3, wait) < 0 &&
            errno != EINTR)
            break;
        if (items[2].revents & ZMQ_POLLIN)
            br_worker_clear(&h->w);
        br_zap_handle(h->zap);
        take_requests(h);
    }
    return NULL;
}

static int bound_port(void *s)
{
    char ep[256];
    size_t n = sizeof(ep);
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &n) < 0)
        return -1;
    const char *colon = strrchr(ep, ':');
    return colon ? atoi(colon + 1) : -1;
}

br_holder_t *br_holder_new(const char *endpoint, const char *secret_key, uint64_t rate,
                           br_err_t *err)
{
    br_holder_t *h = calloc(1, sizeof(*h));
    if (!h)
        return br_errp(err, ENOMEM, "out of memory");
    h->fd = -1;
    h->rate = rate;
    if (br_worker_init(&h->w, "replica", err) < 0) {
        br_holder_destroy(&h);
        return NULL;
    }
    if (!(h->buf = malloc(BR_XFER_CHUNK)) || !(h->ctx = zmq_ctx_new())) {
        br_holder_destroy(&h);
        return br_errp(err, ENOMEM, "out of memory");
    }
    if (!(h->zap = br_zap_new(h->ctx, zap_check, h, err)) ||
        !(h->router = br_sock_server(h->ctx, endpoint, secret_key, err))) {
        br_holder_destroy(&h);
        return NULL;
    }
    int one = 1; /* a reconnecting puller takes over its old routing id's place */
    zmq_setsockopt(h->router, ZMQ_ROUTER_HANDOVER, &one, sizeof(one));
    h->port = bound_port(h->router);
    if (br_worker_start(&h->w, run, h, err) < 0) {
        br_holder_destroy(&h);
        return NULL;
    }
    return h;
}

void br_holder_destroy(br_holder_t **hp)
{
    br_holder_t *h = hp ? *hp : NULL;
    if (!h)
        return;
    int saved = errno;
    br_worker_stop(&h->w);
    while (h->fifo.n) {
        br_msg_destroy(&h->fifo.q[h->fifo.head]);
        h->fifo.head = (h->fifo.head + 1) % BR_HOLDER_QUEUE;
        h->fifo.n--;
    }
    close_cached(h);
    br_sock_close(&h->router);
    br_zap_destroy(&h->zap);
    if (h->ctx)
        zmq_ctx_term(h->ctx);
    while (h->ngrants)
        drop_grant(h, 0);
    br_worker_fini(&h->w);
    free(h->buf);
    free(h);
    *hp = NULL;
    errno = saved;
}

int br_holder_port(const br_holder_t *h)
{
    return h->port;
}

int br_holder_grant(br_holder_t *h, const br_grant_t *g, br_err_t *err)
{
    if (!g->id || !*g->id || strlen(g->id) >= sizeof(h->fd_grant) || !g->path ||
        !g->peer_key || !br_key_valid(g->peer_key))
        return br_errf(err, EINVAL, "grant: an id, a path and a peer key are needed");
    if (br_manifest_verify(g->manifest, err) < 0)
        return -1;
    grant_t *n = calloc(1, sizeof(*n));
    int bad = !n;
    if (n) {
        n->id = strdup(g->id);
        n->peer_name = strdup(g->peer_name ? g->peer_name : "a peer");
        n->dir = g->dir ? strdup(g->dir) : NULL;
        n->path = strdup(g->path);
        n->manifest = json_deep_copy(g->manifest);
        n->listing = g->listing ? strdup(g->listing) : NULL;
        br_strlcpy(n->listing_hash, g->listing_hash ? g->listing_hash : "",
                   sizeof(n->listing_hash));
        n->listing_size = g->listing_size;
        br_strlcpy(n->key, g->peer_key, sizeof(n->key));
        n->expires = br_mono_ms() + g->ttl_ms;
        bad = !n->id || !n->peer_name || (g->dir && !n->dir) || !n->path ||
              !n->manifest || (g->listing && !n->listing);
    }
    if (!bad && g->as_user && !(n->fsid = br_fsid_new(g->uid, g->gid, err))) {
        grant_free(n);
        return -1;
    }
    if (bad) {
        grant_free(n);
        return br_errf(err, ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&h->w.mu);
    int i = find_grant(h, g->id), rc = 0;
    if (i >= 0) {
        grant_free(h->grants[i]);
        h->grants[i] = n;
        h->gen++;
    } else if (h->ngrants == BR_HOLDER_GRANTS)
        rc = br_errf(err, ENOSPC, "%d grants are held already", BR_HOLDER_GRANTS);
    else
        h->grants[h->ngrants++] = n;
    pthread_mutex_unlock(&h->w.mu);
    if (rc < 0)
        grant_free(n);
    return rc;
}

int br_holder_renew(br_holder_t *h, const char *id, const char *peer_key,
                    const char *mhash, int64_t ttl_ms)
{
    pthread_mutex_lock(&h->w.mu);
    int i = find_grant(h, id);
    grant_t *g = i >= 0 ? h->grants[i] : NULL;
    int held = g && g->expires > br_mono_ms() && strcmp(g->key, peer_key) == 0 &&
               strcmp(json_string_value(json_object_get(g->manifest, "hash")), mhash) == 0;
    if (held)
        g->expires = br_mono_ms() + ttl_ms;
    pthread_mutex_unlock(&h->w.mu);
    return held;
}

void br_holder_revoke(br_holder_t *h, const char *id)
{
    pthread_mutex_lock(&h->w.mu);
    int i = find_grant(h, id);
    if (i >= 0)
        drop_grant(h, i);
    pthread_mutex_unlock(&h->w.mu);
    if (i >= 0)
        br_worker_post(&h->w); /* it closes the file it may hold open for that grant */
}

void br_holder_stats(br_holder_t *h, br_holder_stats_t *st)
{
    pthread_mutex_lock(&h->w.mu);
    *st = h->st;
    pthread_mutex_unlock(&h->w.mu);
}
