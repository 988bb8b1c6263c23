/* replkeep.h - how long replicas of an ended job's checkpoints are kept: until the
 * job ended longer ago than --replica-retention (the replicas module's tick calls
 * br_replkeep_expire), or until `bramble job purge` (job.purge, in api.h). Each
 * copy is dropped from its node (ckpt.drop), or forgotten when the node is not
 * connected, with an event of the job (br_replicas_drop). */
#ifndef BRAMBLE_REPLKEEP_H
#define BRAMBLE_REPLKEEP_H

#include <stdint.h>

struct br_coord;

/* Drop at most bite replicas of jobs that ended more than retention_ms ago. How
 * many were dropped (bite: there may be more), or -1 when the store failed. */
int br_replkeep_expire(struct br_coord *c, int64_t retention_ms, int bite);

#endif
