/* textbuf.c - a growing text buffer (textbuf.h). */
#include "textbuf.h"

#include <stdlib.h>

int br_textbuf_grow(br_textbuf_t *b, size_t more)
{
    if (b->failed)
        return -1;
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void br_textbuf_reset(br_textbuf_t *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->p)
        b->p[0] = '\0';
}

void br_textbuf_free(br_textbuf_t *b)
{
    free(b->p);
    *b = (br_textbuf_t){0};
}
