/* logbuf.h - an attempt's output on its way to the coordinator: a bounded queue of
 * chunks, one open chunk per (task, stream) at a time. When what waits exceeds the
 * bound, the OLDEST bytes are dropped and counted, so a job that prints faster than
 * the coordinator takes its output never blocks the agent nor grows it without
 * limit; the count goes to the coordinator as the attempt's "log_dropped". */
#ifndef BRAMBLE_LOGBUF_H
#define BRAMBLE_LOGBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct br_logbuf br_logbuf_t;

/* The oldest chunk, as br_logbuf_peek shows it (valid until the next call). */
typedef struct {
    int task;   /* the caller's task index */
    int stream; /* 1 stdout, 2 stderr */
    const void *data;
    size_t len;
} br_logchunk_t;

/* cap: most bytes kept; chunk: most bytes per chunk. NULL when out of memory. */
br_logbuf_t *br_logbuf_new(size_t cap, size_t chunk);
void br_logbuf_destroy(br_logbuf_t **b);

/* Append output of (task, stream) read at now_ms; drops the oldest bytes beyond the
 * bound. -1 (ENOMEM) when out of memory: the bytes are then counted as dropped. */
int br_logbuf_put(br_logbuf_t *b, int task, int stream, const void *data, size_t len,
                  int64_t now_ms);

/* 1 and the oldest chunk when it is ready to ship: full, or its first byte older
 * than delay_ms, or force; else 0. */
int br_logbuf_peek(const br_logbuf_t *b, int64_t now_ms, int64_t delay_ms, int force,
                   br_logchunk_t *out);
/* Remove the chunk peek showed (once it was shipped). */
void br_logbuf_pop(br_logbuf_t *b);

size_t br_logbuf_bytes(const br_logbuf_t *b);  /* waiting */
int64_t br_logbuf_dropped(const br_logbuf_t *b); /* dropped so far, in bytes */

#endif
