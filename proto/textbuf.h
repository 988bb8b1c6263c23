/* textbuf.h - a growing text buffer that remembers running out of memory, so
 * that a writer appends without checking each step and looks once at the end
 * (the JSON writer, the metrics page). Always NUL-terminated once anything was
 * appended. Zeroed ({0}) it is empty; br_textbuf_free gives its memory back. */
#ifndef BRAMBLE_TEXTBUF_H
#define BRAMBLE_TEXTBUF_H

#include <stddef.h>
#include <string.h>

typedef struct {
    char *p;
    size_t len, cap;
    int failed; /* out of memory (or given up by its writer): what it holds is void */
} br_textbuf_t;

/* Room for more bytes and a NUL (the slow path of the two below); -1 once
 * failed. */
int br_textbuf_grow(br_textbuf_t *b, size_t more);

static inline void br_textbuf_put(br_textbuf_t *b, const char *s, size_t n)
{
    if ((b->len + n + 1 <= b->cap && !b->failed) || br_textbuf_grow(b, n) == 0) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = '\0';
    }
}

static inline void br_textbuf_putc(br_textbuf_t *b, char c)
{
    if ((b->len + 2 <= b->cap && !b->failed) || br_textbuf_grow(b, 1) == 0) {
        b->p[b->len++] = c;
        b->p[b->len] = '\0';
    }
}

/* Empty again (its memory kept), not failed. */
void br_textbuf_reset(br_textbuf_t *b);
/* Its memory given back; empty again. */
void br_textbuf_free(br_textbuf_t *b);

#endif
