/* hang.c - hang detection for one attempt on this node (hang.h). */
#include "hang.h"

#include <stdio.h>
#include <stdlib.h>

#include "util.h"

struct br_hang {
    int64_t timeout;
    int64_t last;      /* monotonic ms of the last activity (or start, or thaw) */
    int frozen;
    int fired;
    int64_t step;      /* the last step `bramble progress` gave, -1 none */
    int64_t step_at;   /* when */
};

br_hang_t *br_hang_new(int64_t timeout_ms, int64_t now)
{
    if (timeout_ms <= 0)
        return NULL;
    br_hang_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->timeout = timeout_ms;
    h->last = now;
    h->step = -1;
    return h;
}

void br_hang_destroy(br_hang_t **h)
{
    if (!h || !*h)
        return;
    free(*h);
    *h = NULL;
}

int64_t br_hang_timeout(const br_hang_t *h)
{
    return h->timeout;
}

void br_hang_activity(br_hang_t *h, br_hang_what_t what, int64_t step, int64_t now)
{
    if (!h)
        return;
    if (now > h->last)
        h->last = now;
    if (what == BR_HANG_PROGRESS && step >= 0) {
        h->step = step;
        h->step_at = now;
    }
}

void br_hang_frozen(br_hang_t *h, int frozen, int64_t now)
{
    if (!h || !!frozen == h->frozen)
        return;
    h->frozen = !!frozen;
    if (!frozen) /* a whole timeout again from the thaw */
        h->last = now;
}

int br_hang_check(br_hang_t *h, int64_t now)
{
    if (!h || h->fired || h->frozen || now - h->last < h->timeout)
        return 0;
    h->fired = 1;
    return 1;
}

int br_hang_fired(const br_hang_t *h)
{
    return h && h->fired;
}

int64_t br_hang_idle(const br_hang_t *h, int64_t now)
{
    return h->frozen || now < h->last ? 0 : now - h->last;
}

char *br_hang_reason(const br_hang_t *h, int64_t now, char *buf, size_t len)
{
    char t[32], ago[32];
    int n = snprintf(buf, len, "hung: no output, checkpoint or progress for %s",
                     br_format_duration(h->timeout, t, sizeof(t)));
    if (h->step >= 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " (last progress: step %lld, %s ago)",
                 (long long)h->step,
                 br_format_duration((now - h->step_at) / 1000 * 1000, ago, sizeof(ago)));
    return buf;
}
