/* replkeep.h - how long replicas of an ended job's checkpoints are kept: until the
 * job ended longer ago than --replica-retention (looked for on this module's own
 * tick, once the nodes had their start-up grace to come back), or until `bramble
 * job purge` (job.purge, in api.h). Each copy is dropped from its node
 * (ckpt.drop), or forgotten when the node is not connected, with an event of the
 * job (br_replicas_drop). It sits above the replicas module (replicas.h). */
#ifndef BRAMBLE_REPLKEEP_H
#define BRAMBLE_REPLKEEP_H

#include <stdint.h>

#include "coord.h"

struct br_coord;
typedef struct br_replkeep br_replkeep_t;

br_replkeep_t *br_replkeep_new(void);
void br_replkeep_destroy(br_replkeep_t **k);
/* Register its tick on c (c->replkeep must be set). 0, or -1. */
int br_replkeep_init(struct br_coord *c);

/* Drop at most bite replicas of jobs that ended more than retention_ms ago. How
 * many were dropped (bite: there may be more), or -1 when the store failed. */
int br_replkeep_expire(struct br_coord *c, int64_t retention_ms, int bite);

/* job.purge {"id"}: drop the replicas of a job that has ended, now; in the handler
 * table (api.c). */
void br_api_job_purge(struct br_coord *c, br_msg_t *m, const br_caller_t *who);

#endif
