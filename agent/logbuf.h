/* logbuf.h - an attempt's output on its way to the coordinator: a bounded queue of
 * chunks, one open chunk per (task, stream) at a time. A chunk stays queued after it
 * was sent, until the coordinator says it stored it (br_logbuf_taken); a refusal (its
 * disk was full) or no answer puts every chunk not taken back in line, to be sent
 * again under the same numbers. When what is kept exceeds the bound, the OLDEST bytes
 * are let go: bytes not sent are dropped and counted at once; a chunk sent and not
 * answered yet loses its copy, and its bytes count as dropped only when its answer
 * refuses them or none comes (so stored + dropped is what the job wrote, also when
 * a chunk sent after a refused one is stored). So a job that prints faster than the coordinator takes
 * its output never blocks the agent nor grows it without limit; the count goes to
 * the coordinator as the attempt's "log_dropped". */
#ifndef BRAMBLE_LOGBUF_H
#define BRAMBLE_LOGBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct br_logbuf br_logbuf_t;

/* The oldest chunk waiting to be sent, as br_logbuf_peek shows it (valid until the
 * next call). */
typedef struct {
    int task;   /* the caller's task index */
    int stream; /* 1 stdout, 2 stderr */
    const void *data;
    size_t len;
    int64_t seq; /* the number it was sent under before, or -1: never sent */
} br_logchunk_t;

/* cap: most bytes kept; chunk: most bytes per chunk. NULL when out of memory. */
br_logbuf_t *br_logbuf_new(size_t cap, size_t chunk);
void br_logbuf_destroy(br_logbuf_t **b);

/* Append output of (task, stream) read at now_ms; drops the oldest bytes beyond the
 * bound. -1 (ENOMEM) when out of memory: the bytes are then counted as dropped. */
int br_logbuf_put(br_logbuf_t *b, int task, int stream, const void *data, size_t len,
                  int64_t now_ms);

/* 1 and the oldest chunk not sent when it is ready to ship: full, or its first byte
 * older than delay_ms, or force, or sent before; else 0. */
int br_logbuf_peek(const br_logbuf_t *b, int64_t now_ms, int64_t delay_ms, int force,
                   br_logchunk_t *out);
/* The chunk peek showed was sent as number seq at now_ms; its answer will carry tag.
 * Nothing more joins it. */
void br_logbuf_sent(br_logbuf_t *b, int64_t seq, uint32_t tag, int64_t now_ms);
/* The chunk sent with tag was taken (stored, or not wanted): removed. 1 when one
 * such chunk was kept, else 0. */
int br_logbuf_taken(br_logbuf_t *b, uint32_t tag);
/* The chunk sent with tag was refused: when its copy was let go (it waits in
 * limbo, below), its bytes count as dropped now. 1 when it was such a one. (Any
 * other chunk refused is sent again: br_logbuf_resend.) */
int br_logbuf_refused(br_logbuf_t *b, uint32_t tag);
/* 1 when a chunk sent with tag is kept, or waits in limbo. */
int br_logbuf_holds(const br_logbuf_t *b, uint32_t tag);
/* Every chunk sent and not taken waits to be sent again, oldest first. One whose
 * copy was let go cannot go again: it waits in limbo for its own answer (taken:
 * stored; refused: dropped), and counts as dropped at the resend after this one
 * when none came. */
void br_logbuf_resend(br_logbuf_t *b);
/* When the oldest chunk not taken was sent (monotonic ms; one in limbo too), or -1
 * when none waits for its answer. */
int64_t br_logbuf_oldest_sent(const br_logbuf_t *b);
/* Remove the chunk peek showed, with no answer to wait for (it went out as an
 * event). */
void br_logbuf_pop(br_logbuf_t *b);
/* Drop everything kept, counted as dropped. */
void br_logbuf_drop_all(br_logbuf_t *b);

size_t br_logbuf_bytes(const br_logbuf_t *b);  /* kept: waiting or not taken yet */
size_t br_logbuf_let_go(const br_logbuf_t *b); /* sent, not kept, answer not heard */
int64_t br_logbuf_dropped(const br_logbuf_t *b); /* dropped so far, in bytes */

#endif
