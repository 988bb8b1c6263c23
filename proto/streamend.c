/* streamend.c - one end of a stream: its sources, sinks and credit (streamend.h). */
#include "streamend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct chunk {
    struct chunk *next;
    size_t len, off;
    int64_t cost;
    unsigned char data[];
} chunk_t;

typedef struct {
    int fd;        /* -1: none, or closed */
    int eof_sent;  /* a source: its EOF went */
} source_t;

typedef struct {
    int fd;
    int is_socket;
    int eof;       /* the other end sent EOF on this channel */
    int failed;    /* writing failed: what comes is dropped */
    int closed;    /* done: closed or shut down */
    chunk_t *head, *tail;
    size_t queued;
} sink_t;

struct br_streamend {
    void *sock;
    uint32_t stream;
    br_streamseal_t seal; /* what it sends is sealed, what comes opened */
    int attached;
    br_credit_t credit; /* what this end may send */
    br_owed_t owed;     /* what it took and has not granted back yet */
    int64_t held;       /* what its sinks hold, as the sender counted it */
    source_t src[BR_STREAMEND_CHANNELS];
    sink_t snk[BR_STREAMEND_CHANNELS];
};

br_streamend_t *br_streamend_new(void *sock, uint32_t stream, const char *key,
                                 br_stream_side_t side, br_err_t *err)
{
    br_streamend_t *e = calloc(1, sizeof(*e));
    if (!e)
        return br_errp(err, ENOMEM, "out of memory");
    if (br_streamseal_init(&e->seal, key, side, err) < 0) {
        free(e);
        return NULL;
    }
    e->sock = sock;
    e->stream = stream;
    br_credit_init(&e->credit);
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        e->src[i].fd = e->snk[i].fd = -1;
    return e;
}

/* Close fd unless another slot of e still holds it. */
static void release(br_streamend_t *e, int *fd)
{
    int f = *fd;
    *fd = -1;
    if (f < 0)
        return;
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        if (e->src[i].fd == f || e->snk[i].fd == f)
            return;
    close(f);
}

static void drop_chunks(sink_t *s)
{
    while (s->head) {
        chunk_t *c = s->head;
        s->head = c->next;
        free(c);
    }
    s->tail = NULL;
    s->queued = 0;
}

void br_streamend_destroy(br_streamend_t **ep)
{
    br_streamend_t *e = ep ? *ep : NULL;
    if (!e)
        return;
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++) {
        drop_chunks(&e->snk[i]);
        release(e, &e->src[i].fd);
        release(e, &e->snk[i].fd);
    }
    br_streamseal_fini(&e->seal);
    free(e);
    *ep = NULL;
}

static void nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void br_streamend_source(br_streamend_t *e, int ch, int fd)
{
    if (ch < 0 || ch >= BR_STREAMEND_CHANNELS)
        return;
    e->src[ch].fd = fd;
    e->src[ch].eof_sent = fd < 0;
    if (fd >= 0)
        nonblock(fd);
}

void br_streamend_sink(br_streamend_t *e, int ch, int fd, int is_socket)
{
    if (ch < 0 || ch >= BR_STREAMEND_CHANNELS)
        return;
    e->snk[ch].fd = fd;
    e->snk[ch].is_socket = is_socket;
    if (fd >= 0)
        nonblock(fd);
}

int br_streamend_poll(const br_streamend_t *e, zmq_pollitem_t *items, int max)
{
    int n = 0;
    int room = e->attached && br_credit_room(&e->credit) >= BR_STREAM_FRAME_COST;
    for (int i = 0; i < BR_STREAMEND_CHANNELS && n < max; i++) {
        if (room && e->src[i].fd >= 0 && !e->src[i].eof_sent)
            items[n++] = (zmq_pollitem_t){NULL, e->src[i].fd, ZMQ_POLLIN, 0};
        if (n < max && e->snk[i].fd >= 0 && e->snk[i].head && !e->snk[i].closed)
            items[n++] = (zmq_pollitem_t){NULL, e->snk[i].fd, ZMQ_POLLOUT, 0};
    }
    return n;
}

static int send_frame(br_streamend_t *e, uint8_t type, uint8_t ch, uint64_t arg,
                      const void *payload, size_t len)
{
    return br_streamseal_send(&e->seal, e->sock, type, ch, e->stream, arg, payload, len);
}

int br_streamend_send(br_streamend_t *e, uint8_t type, uint8_t channel, uint64_t arg,
                      const void *payload, size_t len)
{
    return send_frame(e, type, channel, arg, payload, len);
}

int br_streamend_open(br_streamend_t *e, const br_stream_hdr_t *h, void *buf, size_t *len,
                      br_err_t *err)
{
    return br_streamseal_open(&e->seal, h, buf, len, err);
}

/* Grant back what was taken, a quarter window at a time. */
static int grant(br_streamend_t *e, int64_t cost)
{
    int64_t give = br_owed_take(&e->owed, cost);
    return give > 0 ? send_frame(e, BR_STREAM_CREDIT, 0, (uint64_t)give, NULL, 0) : 0;
}

/* Read what a source has, within credit, and send it. */
static int read_source(br_streamend_t *e, int ch)
{
    source_t *s = &e->src[ch];
    for (int rounds = 0; rounds < 16 && s->fd >= 0 && !s->eof_sent; rounds++) {
        int64_t room = br_credit_room(&e->credit);
        if (room < BR_STREAM_FRAME_COST)
            return 0;
        room -= BR_STREAM_SEAL; /* (what a frame costs counts its seal) */
        size_t want = room < (int64_t)BR_STREAM_CHUNK - BR_STREAM_SEAL
                          ? (size_t)room
                          : BR_STREAM_CHUNK - BR_STREAM_SEAL;
        unsigned char *buf = malloc(want + BR_STREAM_SEAL); /* (sealed in place, and
                                                              * given to ZeroMQ) */
        if (!buf)
            return -1;
        ssize_t n = read(s->fd, buf, want);
        int read_errno = errno;
        if (n <= 0)
            free(buf);
        errno = read_errno;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) { /* its end (EIO: a terminal whose other side all closed) */
            s->eof_sent = 1;
            release(e, &s->fd);
            return send_frame(e, BR_STREAM_EOF, (uint8_t)ch, 0, NULL, 0);
        }
        e->credit.sent += br_stream_cost((size_t)n + BR_STREAM_SEAL);
        if (br_streamseal_send_owned(&e->seal, e->sock, BR_STREAM_DATA, (uint8_t)ch,
                                     e->stream, 0, buf, (size_t)n) < 0)
            return -1;
    }
    return 0;
}

/* Once a sink has its EOF and is written out: closed, or shut down for writing. */
static void finish_sink(br_streamend_t *e, sink_t *s)
{
    if (!s->eof || s->head || s->closed)
        return;
    s->closed = 1;
    if (s->fd < 0)
        return;
    if (s->is_socket) {
        shutdown(s->fd, SHUT_WR);
        return;
    }
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        if (e->src[i].fd == s->fd)
            return; /* a terminal: it goes on carrying output */
    release(e, &s->fd);
}

static int write_sink(br_streamend_t *e, sink_t *s)
{
    while (s->head) {
        chunk_t *c = s->head;
        if (!s->failed && s->fd >= 0) {
            ssize_t n = write(s->fd, c->data + c->off, c->len - c->off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                break;
            if (n < 0)
                s->failed = 1; /* (EPIPE: nobody reads it any more) */
            else
                c->off += (size_t)n;
            if (n >= 0 && c->off < c->len)
                continue;
        }
        s->head = c->next;
        if (!s->head)
            s->tail = NULL;
        s->queued -= c->len;
        int64_t cost = c->cost;
        e->held -= cost;
        free(c);
        if (grant(e, cost) < 0)
            return -1;
    }
    finish_sink(e, s);
    return 0;
}

int br_streamend_turn(br_streamend_t *e)
{
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        if (write_sink(e, &e->snk[i]) < 0)
            return -1;
    if (!e->attached)
        return 0;
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        if (read_source(e, i) < 0)
            return -1;
    return 0;
}

int br_streamend_frame(br_streamend_t *e, const br_stream_hdr_t *h, const void *payload,
                       size_t len, br_err_t *err)
{
    sink_t *s = &e->snk[h->channel];
    switch (h->type) {
    case BR_STREAM_ATTACHED:
        e->attached = 1;
        return 0;
    case BR_STREAM_CREDIT:
        e->credit.granted += (int64_t)h->arg;
        return 0;
    case BR_STREAM_EOF:
        s->eof = 1;
        finish_sink(e, s);
        return 0;
    case BR_STREAM_DATA:
        break;
    default:
        return 0;
    }
    if (s->fd < 0 && !s->closed)
        return br_errf(err, EPROTO, "data on channel %d, which goes nowhere here",
                       h->channel);
    int64_t cost = br_stream_cost(len + BR_STREAM_SEAL); /* (as its sender counted it) */
    if (e->held + e->owed.taken + cost > BR_STREAM_WINDOW) /* (what it was sent and has
                                                            * not granted back) */
        return br_errf(err, EPROTO, "data beyond the window");
    size_t off = 0;
    while (!s->head && !s->closed && !s->failed && s->fd >= 0 && off < len) {
        ssize_t n = write(s->fd, (const unsigned char *)payload + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            s->failed = 1; /* (EPIPE: nobody reads it any more) */
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    if (off == len && (!s->failed || !len)) { /* written through: nothing to hold */
        if (grant(e, cost) < 0)
            return br_errf(err, errno, "the relay: %s", strerror(errno));
        return 0;
    }
    chunk_t *c = malloc(sizeof(*c) + len - off);
    if (!c)
        return br_errf(err, ENOMEM, "out of memory");
    c->next = NULL;
    c->len = len - off;
    c->off = 0;
    c->cost = cost;
    memcpy(c->data, (const unsigned char *)payload + off, len - off);
    e->held += cost;
    if (s->tail)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    s->queued += c->len;
    if (s->closed || s->failed)
        s->failed = 1; /* (dropped at the next write, credit given back) */
    return 0;
}

int br_streamend_attached(const br_streamend_t *e)
{
    return e->attached;
}

int br_streamend_sources_done(const br_streamend_t *e)
{
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        if (e->src[i].fd >= 0 && !e->src[i].eof_sent)
            return 0;
    return 1;
}

int br_streamend_sinks_done(const br_streamend_t *e)
{
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        if (e->snk[i].head || (e->snk[i].fd >= 0 && !e->snk[i].closed))
            return 0;
    return 1;
}

size_t br_streamend_queued(const br_streamend_t *e)
{
    size_t n = 0;
    for (int i = 0; i < BR_STREAMEND_CHANNELS; i++)
        n += e->snk[i].queued;
    return n;
}
