/* health.h - a service replica's health check, run by its agent: an HTTP GET of a
 * path (healthy: status 200-399) or a TCP connect, to the replica's PORT on
 * 127.0.0.1. Checks never block the agent's loop: each is a small non-blocking
 * state machine advanced by br_health_poll, with a deadline.
 *
 * A replica is "starting" until a check succeeds; failures during its start-up
 * grace do not count. After that, BR_HEALTH_FAILURES checks failing in a row make
 * it "unhealthy" (the agent then stops it and the coordinator restarts it); one
 * success makes it "healthy" again. While starting it is checked every
 * BR_HEALTH_STARTING_MS within its grace (so a replica that comes up is known
 * soon: a cold start waits on it), every second after its grace (or every interval
 * when shorter), and once healthy every interval. */
#ifndef BRAMBLE_HEALTH_H
#define BRAMBLE_HEALTH_H

#include <stdint.h>

#include "err.h"

#define BR_HEALTH_FAILURES 3
#define BR_HEALTH_TIMEOUT_MS 2000 /* one check's limit (or the interval, if shorter) */
#define BR_HEALTH_STARTING_MS 250

typedef enum {
    BR_HEALTH_STARTING,
    BR_HEALTH_HEALTHY,
    BR_HEALTH_UNHEALTHY,
} br_health_state_t;

typedef struct br_health br_health_t;

/* http_path: "/health" for HTTP, NULL for a TCP connect. now: monotonic ms at the
 * replica's start. */
br_health_t *br_health_new(int port, const char *http_path, int64_t interval_ms,
                           int64_t grace_ms, int64_t now, br_err_t *err);
void br_health_destroy(br_health_t **h);

/* Start a check when one is due, advance the one in flight; the state after. */
br_health_state_t br_health_poll(br_health_t *h, int64_t now);
br_health_state_t br_health_state(const br_health_t *h);
const char *br_health_state_name(br_health_state_t s);
/* Someone could not use the replica (a gateway, through the coordinator's
 * job.check): check it now, and the next BR_HEALTH_FAILURES checks after each
 * other (BR_HEALTH_QUICK_MS apart), so one that fails them is unhealthy within
 * seconds rather than intervals. A healthy answer ends the haste. */
#define BR_HEALTH_QUICK_MS 250
void br_health_suspect(br_health_t *h, int64_t now);
/* Why the last check failed ("HTTP 500", "connect: Connection refused"), or "". */
const char *br_health_why(const br_health_t *h);

#endif
