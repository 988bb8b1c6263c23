/* ratelimit.h - each user's requests a minute through this gateway (user set
 * --rpm): a token bucket per user that holds at most a minute's requests and
 * fills at rpm / 60 a second, so a user may send rpm at once after a quiet
 * minute, and rpm a minute on end. Each gateway counts for itself. */
#ifndef BRAMBLE_GW_RATELIMIT_H
#define BRAMBLE_GW_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_ratelimit gw_ratelimit_t;

gw_ratelimit_t *gw_ratelimit_new(void);
void gw_ratelimit_destroy(gw_ratelimit_t **rl);

/* One request of user (their limit rpm > 0) at now_ms: 1 when it may go (counted),
 * 0 when it is over the limit, with *retry_after_s (at least 1) until one may. */
int gw_ratelimit_take(gw_ratelimit_t *rl, int64_t user_id, int rpm, int64_t now_ms,
                      int *retry_after_s);

/* The users counted: their buckets. */
size_t gw_ratelimit_users(const gw_ratelimit_t *rl);

#endif
