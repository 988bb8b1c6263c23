/* logbuf.c - a bounded queue of output chunks that drops the oldest bytes. */
#include "logbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    struct chunk *prev, *next; /* prev: older */
    int task, stream;
    int64_t first_ms; /* when its first byte was read */
    size_t off, len, size; /* bytes [off, len) of data wait; size allocated */
    char *data;
} chunk_t;

struct br_logbuf {
    chunk_t *head, *tail; /* oldest, newest */
    size_t cap, chunk, bytes;
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

static void free_head(br_logbuf_t *b)
{
    chunk_t *c = b->head;
    b->head = c->next;
    if (b->head)
        b->head->prev = NULL;
    else
        b->tail = NULL;
    b->bytes -= c->len - c->off;
    free(c->data);
    free(c);
}

void br_logbuf_destroy(br_logbuf_t **bp)
{
    br_logbuf_t *b = bp ? *bp : NULL;
    if (!b)
        return;
    while (b->head)
        free_head(b);
    free(b);
    *bp = NULL;
}

/* Drop the oldest bytes until at most cap wait. */
static void trim(br_logbuf_t *b)
{
    while (b->bytes > b->cap && b->head) {
        chunk_t *c = b->head;
        size_t excess = b->bytes - b->cap, held = c->len - c->off;
        size_t n = excess < held ? excess : held;
        c->off += n;
        b->bytes -= n;
        b->dropped += (int64_t)n;
        if (c->off == c->len)
            free_head(b);
    }
}

/* The open (newest, not full) chunk of (task, stream), or NULL. */
static chunk_t *open_chunk(br_logbuf_t *b, int task, int stream)
{
    for (chunk_t *c = b->tail; c; c = c->prev)
        if (c->task == task && c->stream == stream)
            return c->len < b->chunk ? c : NULL;
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

int br_logbuf_put(br_logbuf_t *b, int task, int stream, const void *data, size_t len,
                  int64_t now_ms)
{
    const char *p = data;
    while (len > 0) {
        chunk_t *c = open_chunk(b, task, stream);
        if (!c) {
            c = calloc(1, sizeof(*c));
            if (!c)
                goto nomem;
            c->task = task;
            c->stream = stream;
            c->first_ms = now_ms;
            c->prev = b->tail;
            if (b->tail)
                b->tail->next = c;
            else
                b->head = c;
            b->tail = c;
        }
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
    const chunk_t *c = b->head;
    if (!c || c->len == c->off)
        return 0;
    if (!force && c->len < b->chunk && now_ms - c->first_ms < delay_ms)
        return 0;
    *out = (br_logchunk_t){c->task, c->stream, c->data + c->off, c->len - c->off};
    return 1;
}

void br_logbuf_pop(br_logbuf_t *b)
{
    if (b->head)
        free_head(b);
}

size_t br_logbuf_bytes(const br_logbuf_t *b)
{
    return b->bytes;
}

int64_t br_logbuf_dropped(const br_logbuf_t *b)
{
    return b->dropped;
}
