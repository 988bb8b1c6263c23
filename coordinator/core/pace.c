/* pace.c - letting messages gather before a wake while the loop is busy (pace.h). */
#include "pace.h"

#include <stdlib.h>

#define WINDOW_US 1000000

struct br_pace {
    int64_t window_at; /* when the current second began (monotonic us) */
    int64_t n;         /* messages read in it */
    int busy;          /* the last whole second had more than BR_PACE_BUSY */
    int64_t last_wake; /* messages the last wake read */
};

br_pace_t *br_pace_new(void)
{
    return calloc(1, sizeof(br_pace_t));
}

void br_pace_destroy(br_pace_t **p)
{
    if (p) {
        free(*p);
        *p = NULL;
    }
}

/* Close the seconds that are over by now_us: the last one decides busy. */
static void roll(br_pace_t *p, int64_t now_us)
{
    if (now_us - p->window_at < WINDOW_US)
        return;
    /* a gap of more than a second since the window began: the second before now
     * brought nothing */
    p->busy = now_us - p->window_at < 2 * WINDOW_US && p->n > BR_PACE_BUSY;
    p->window_at = now_us;
    p->n = 0;
}

void br_pace_count(br_pace_t *p, int64_t now_us, int64_t n)
{
    roll(p, now_us);
    p->n += n;
}

void br_pace_woke(br_pace_t *p, int64_t n)
{
    p->last_wake = n;
}

int64_t br_pace_gather_us(br_pace_t *p, int64_t now_us)
{
    roll(p, now_us);
    return p->busy && p->last_wake < BR_PACE_BACKLOG ? BR_PACE_GATHER_US : 0;
}
