/* ratelimit.c - each user's requests a minute through this gateway (see
 * ratelimit.h). */
#include "ratelimit.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t user;
    double tokens; /* requests it may send now */
    int64_t at;    /* monotonic ms tokens was worked out */
} bucket_t;

struct gw_ratelimit {
    bucket_t *v; /* by user */
    size_t n, cap;
};

gw_ratelimit_t *gw_ratelimit_new(void)
{
    return calloc(1, sizeof(gw_ratelimit_t));
}

void gw_ratelimit_destroy(gw_ratelimit_t **rlp)
{
    if (!rlp || !*rlp)
        return;
    free((*rlp)->v);
    free(*rlp);
    *rlp = NULL;
}

/* The user's bucket, made full when new; NULL when out of memory. */
static bucket_t *bucket_of(gw_ratelimit_t *rl, int64_t user, int rpm, int64_t now_ms)
{
    size_t lo = 0, hi = rl->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rl->v[mid].user < user)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < rl->n && rl->v[lo].user == user)
        return &rl->v[lo];
    if (rl->n == rl->cap) {
        size_t cap = rl->cap ? rl->cap * 2 : 16;
        bucket_t *v = realloc(rl->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        rl->v = v;
        rl->cap = cap;
    }
    memmove(&rl->v[lo + 1], &rl->v[lo], (rl->n - lo) * sizeof(*rl->v));
    rl->n++;
    rl->v[lo] = (bucket_t){.user = user, .tokens = rpm, .at = now_ms};
    return &rl->v[lo];
}

int gw_ratelimit_take(gw_ratelimit_t *rl, int64_t user_id, int rpm, int64_t now_ms,
                      int *retry_after_s)
{
    *retry_after_s = 0;
    if (rpm <= 0)
        return 1;
    bucket_t *b = bucket_of(rl, user_id, rpm, now_ms);
    if (!b)
        return 1; /* out of memory: not the user's fault */
    if (now_ms > b->at) {
        b->tokens += (double)(now_ms - b->at) * rpm / 60000.0;
        b->at = now_ms;
    }
    if (b->tokens > rpm)
        b->tokens = rpm; /* (a limit lowered takes at once) */
    if (b->tokens >= 1) {
        b->tokens -= 1;
        return 1;
    }
    double ms = (1 - b->tokens) * 60000.0 / rpm;
    *retry_after_s = (int)((ms + 999) / 1000); /* (rounded up: never 0) */
    if (*retry_after_s < 1)
        *retry_after_s = 1;
    return 0;
}

size_t gw_ratelimit_users(const gw_ratelimit_t *rl)
{
    return rl->n;
}
