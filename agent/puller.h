/* puller.h - pulls (pull.h) run one at a time, oldest first (a restore ahead of
 * replicas, an older checkpoint's left out once a newer one of its job waits), on
 * a thread of their own with their own ZeroMQ context, so the agent's loop never
 * waits for one: it polls br_puller_fd and takes what is
 * finished. A restore stops a replica's pull in progress (which may be stuck on
 * a holder that died), and that pull waits again, first of the replicas. */
#ifndef BRAMBLE_PULLER_H
#define BRAMBLE_PULLER_H

#include <jansson.h>

#include "err.h"
#include "pull.h"

#define BR_PULL_QUEUE 64 /* pulls waiting at once */

typedef struct br_puller br_puller_t;

/* Start the pulling thread. */
br_puller_t *br_puller_new(br_err_t *err);
/* Stop a pull in progress (within one chunk or one stall check) and drop the rest. */
void br_puller_destroy(br_puller_t **p);

/* Readable (an eventfd) when a result can be taken. */
int br_puller_fd(const br_puller_t *p);
/* Queue a pull (everything in r is copied). -1 with err when BR_PULL_QUEUE wait.
 * The waiting pulls it supersedes (r->group, r->order: an older checkpoint of the
 * same job, whose copy is no use once a newer one is counted) end at once, with
 * ECANCELED and "superseded" in their error. */
int br_puller_submit(br_puller_t *p, const br_pull_req_t *r, br_err_t *err);
/* A job waits for the pull into dest now (one that was queued behind others, not
 * urgent): it goes before the pulls that are not urgent, stopping the one in
 * progress as br_puller_submit does for an urgent pull. */
void br_puller_hurry(br_puller_t *p, const char *dest);
/* Take one finished pull, oldest first: 1 with *tag and *result (the caller's), or
 * *result NULL and err saying why it failed; 0 when none is finished. */
int br_puller_take(br_puller_t *p, json_t **tag, json_t **result, br_err_t *err);
void br_puller_stats(br_puller_t *p, br_pull_stats_t *st);
/* The pull in progress: its tag (a new reference) with *done the bytes of it in
 * place so far; NULL when none runs. */
json_t *br_puller_progress(br_puller_t *p, long long *done);

#endif
