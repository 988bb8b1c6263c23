/* replkeep.h - how long replicas of an ended job's checkpoints are kept: until the
 * job ended longer ago than --replica-retention (looked for on this module's own
 * tick, once the nodes had their start-up grace to come back), or until `bramble
 * job purge` (br_replkeep_purge). Each copy is dropped from its node
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

/* Drop the replicas of job (a store row, br_store_job_get's) now, as `bramble job
 * purge` asks: copies on connected nodes are dropped from them (*dropped), the others
 * only forgotten (*forgotten), and copies still under way are dropped as they
 * arrive. 0, or -1 with err (EBUSY: the job has not ended). Whether the caller may
 * see the job is the caller's to check. */
int br_replkeep_purge(struct br_coord *c, const json_t *job, int *dropped, int *forgotten,
                      br_err_t *err);

#endif
