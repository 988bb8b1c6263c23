/* logbuf.c - a bounded queue of output chunks that drops the oldest bytes, and
 * keeps each chunk sent until it is taken. */
#include "logbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    struct chunk *prev, *next; /* prev: older */
    int task, stream;
    int64_t first_ms; /* when its first byte was read */
    size_t off, len, size; /* bytes [off, len) of data are kept; size allocated */
    char *data;
    int64_t seq;     /* the number it was sent under, -1 before; closed once set */
    int sent;        /* sent, and its answer not heard yet */
    uint32_t tag;    /* what the answer carries */
    int64_t sent_ms; /* when it was sent */
    size_t let_go;   /* bytes of a chunk sent whose copy the bound let go: its answer
                        says whether they were stored, else they count as dropped */
} chunk_t;

/* Chunks from head to unsent (excluded) were sent and wait for their answer; from
 * unsent on, none was sent since it was put back in line. */
struct br_logbuf {
    chunk_t *head, *tail, *unsent; /* oldest, newest, oldest not sent */
    chunk_t *limbo; /* chunks let go, sent before a resend: their answers may still
                       come (next: the list) */
    size_t cap, chunk, bytes; /* bytes: kept in memory */
    size_t let_go;            /* sent, not kept, not answered */
    int64_t dropped;
};

br_logbuf_t *br_logbuf_new(size_t cap, size_t chunk)
{
    br_logbuf_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cap = cap > 0 ? cap : 1;
    b->chunk = chunk > 0 ? chunk : 1;
    return b;
}

/* Take c out of the queue (its bytes kept no more). */
static void detach(br_logbuf_t *b, chunk_t *c)
{
    if (b->unsent == c)
        b->unsent = c->next;
    if (c->prev)
        c->prev->next = c->next;
    else
        b->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        b->tail = c->prev;
    b->bytes -= c->len - c->off;
    c->prev = c->next = NULL;
}

static void unlink_chunk(br_logbuf_t *b, chunk_t *c)
{
    detach(b, c);
    b->let_go -= c->let_go;
    free(c->data);
    free(c);
}

/* Remove c from limbo (its bytes counted as dropped when lost), and free it. */
static void leave_limbo(br_logbuf_t *b, chunk_t *c, int lost)
{
    for (chunk_t **p = &b->limbo; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    b->let_go -= c->let_go;
    if (lost)
        b->dropped += (int64_t)c->let_go;
    free(c);
}

static chunk_t *in_limbo(const br_logbuf_t *b, uint32_t tag)
{
    for (chunk_t *c = b->limbo; c; c = c->next)
        if (c->tag == tag)
            return c;
    return NULL;
}

void br_logbuf_destroy(br_logbuf_t **bp)
{
    br_logbuf_t *b = bp ? *bp : NULL;
    if (!b)
        return;
    while (b->head)
        unlink_chunk(b, b->head);
    while (b->limbo)
        leave_limbo(b, b->limbo, 0);
    free(b);
    *bp = NULL;
}

/* Let the oldest bytes go until at most cap are kept. A chunk sent is already on
 * its way: its copy goes whole, and whether its bytes count as dropped waits for its
 * answer (taken: stored; sent again: dropped). Bytes never sent are dropped. */
static void trim(br_logbuf_t *b)
{
    for (chunk_t *c = b->head, *next; c && b->bytes > b->cap; c = next) {
        next = c->next;
        size_t held = c->len - c->off;
        if (held == 0)
            continue; /* (its copy went before) */
        if (c->sent) {
            c->let_go = held;
            b->let_go += held;
            c->off = c->len;
            b->bytes -= held;
            free(c->data);
            c->data = NULL;
            c->size = 0;
            continue;
        }
        size_t excess = b->bytes - b->cap, n = excess < held ? excess : held;
        c->off += n;
        b->bytes -= n;
        b->dropped += (int64_t)n;
        if (c->off == c->len)
            unlink_chunk(b, c);
    }
}

/* The open (newest, never sent, not full) chunk of (task, stream), or NULL. */
static chunk_t *open_chunk(br_logbuf_t *b, int task, int stream)
{
    for (chunk_t *c = b->tail; c; c = c->prev)
        if (c->task == task && c->stream == stream)
            return c->len < b->chunk && c->seq < 0 ? c : NULL;
    return NULL;
}

static int grow(chunk_t *c, size_t want, size_t max)
{
    if (want <= c->size)
        return 0;
    size_t size = c->size ? c->size : 4096;
    while (size < want)
        size *= 2;
    if (size > max)
        size = max;
    char *d = realloc(c->data, size);
    if (!d)
        return -1;
    c->data = d;
    c->size = size;
    return 0;
}

static chunk_t *append_chunk(br_logbuf_t *b, int task, int stream, int64_t now_ms)
{
    chunk_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->task = task;
    c->stream = stream;
    c->first_ms = now_ms;
    c->seq = -1;
    c->prev = b->tail;
    if (b->tail)
        b->tail->next = c;
    else
        b->head = c;
    b->tail = c;
    if (!b->unsent)
        b->unsent = c;
    return c;
}

int br_logbuf_put(br_logbuf_t *b, int task, int stream, const void *data, size_t len,
                  int64_t now_ms)
{
    const char *p = data;
    while (len > 0) {
        chunk_t *c = open_chunk(b, task, stream);
        if (!c && !(c = append_chunk(b, task, stream, now_ms)))
            goto nomem;
        size_t n = b->chunk - c->len < len ? b->chunk - c->len : len;
        if (grow(c, c->len + n, b->chunk) < 0)
            goto nomem;
        memcpy(c->data + c->len, p, n);
        c->len += n;
        b->bytes += n;
        p += n;
        len -= n;
        trim(b);
    }
    return 0;
nomem:
    b->dropped += (int64_t)len;
    errno = ENOMEM;
    return -1;
}

int br_logbuf_peek(const br_logbuf_t *b, int64_t now_ms, int64_t delay_ms, int force,
                   br_logchunk_t *out)
{
    const chunk_t *c = b->unsent;
    if (!c || c->len == c->off)
        return 0;
    if (!force && c->seq < 0 && c->len < b->chunk && now_ms - c->first_ms < delay_ms)
        return 0;
    *out = (br_logchunk_t){c->task, c->stream, c->data + c->off, c->len - c->off, c->seq};
    return 1;
}

void br_logbuf_sent(br_logbuf_t *b, int64_t seq, uint32_t tag, int64_t now_ms)
{
    chunk_t *c = b->unsent;
    if (!c)
        return;
    c->seq = seq;
    c->sent = 1;
    c->tag = tag;
    c->sent_ms = now_ms;
    b->unsent = c->next;
}

static chunk_t *find_sent(const br_logbuf_t *b, uint32_t tag)
{
    for (chunk_t *c = b->head; c && c != b->unsent; c = c->next)
        if (c->sent && c->tag == tag)
            return c;
    return NULL;
}

int br_logbuf_taken(br_logbuf_t *b, uint32_t tag)
{
    chunk_t *c = find_sent(b, tag);
    if (c) {
        unlink_chunk(b, c);
        return 1;
    }
    if ((c = in_limbo(b, tag))) { /* stored after all */
        leave_limbo(b, c, 0);
        return 1;
    }
    return 0;
}

int br_logbuf_refused(br_logbuf_t *b, uint32_t tag)
{
    chunk_t *c = in_limbo(b, tag);
    if (!c)
        return 0;
    leave_limbo(b, c, 1); /* its copy went: lost */
    return 1;
}

int br_logbuf_holds(const br_logbuf_t *b, uint32_t tag)
{
    return find_sent(b, tag) != NULL || in_limbo(b, tag) != NULL;
}

void br_logbuf_resend(br_logbuf_t *b)
{
    while (b->limbo) /* put there by the resend before: no answer came since, lost */
        leave_limbo(b, b->limbo, 1);
    for (chunk_t *c = b->head, *next; c && c != b->unsent; c = next) {
        next = c->next;
        c->sent = 0;
        if (c->let_go) { /* nothing left to send again; its answer may still say it
                          * was stored (it went before what was refused): in limbo */
            detach(b, c);
            free(c->data);
            c->data = NULL;
            c->next = b->limbo;
            b->limbo = c;
        }
    }
    b->unsent = b->head;
}

int64_t br_logbuf_oldest_sent(const br_logbuf_t *b)
{
    int64_t oldest = -1;
    for (chunk_t *c = b->head; c && c != b->unsent; c = c->next)
        if (c->sent && (oldest < 0 || c->sent_ms < oldest))
            oldest = c->sent_ms;
    for (chunk_t *c = b->limbo; c; c = c->next) /* (its answer awaited too) */
        if (oldest < 0 || c->sent_ms < oldest)
            oldest = c->sent_ms;
    return oldest;
}

void br_logbuf_pop(br_logbuf_t *b)
{
    if (b->unsent)
        unlink_chunk(b, b->unsent);
}

void br_logbuf_drop_all(br_logbuf_t *b)
{
    while (b->limbo)
        leave_limbo(b, b->limbo, 1);
    while (b->head) {
        b->dropped += (int64_t)(b->head->len - b->head->off + b->head->let_go);
        unlink_chunk(b, b->head);
    }
}

size_t br_logbuf_bytes(const br_logbuf_t *b)
{
    return b->bytes;
}

size_t br_logbuf_let_go(const br_logbuf_t *b)
{
    return b->let_go;
}

int64_t br_logbuf_dropped(const br_logbuf_t *b)
{
    return b->dropped;
}
