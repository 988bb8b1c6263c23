/* ckptdir.h - a job's checkpoint dir as its runs see it: ${BRAMBLE_JOB_ID} (or
 * $BRAMBLE_JOB_ID) in checkpoint.dir becomes the job's id, so that runs of one spec
 * keep their checkpoints apart; and a word in the job's events when a fresh job's
 * dir already holds checkpoints another job reported. */
#ifndef BRAMBLE_CKPTDIR_H
#define BRAMBLE_CKPTDIR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "coord.h"

/* dir with every ${BRAMBLE_JOB_ID} and $BRAMBLE_JOB_ID replaced by id, into out.
 * Returns 0, or -1 (EOVERFLOW) when it does not fit (out then holds dir as is). */
int br_ckptdir_expand(const char *dir, int64_t id, char *out, size_t len);

/* The spec's checkpoint section (an object, else NULL) with its dir expanded for
 * job id: a new reference, or NULL when the spec has none. */
json_t *br_ckptdir_section(json_t *spec, int64_t id);

/* At a job's first placement (job id, its spec): when its checkpoint dir already
 * holds checkpoints that another job reported, say so in the job's events. */
void br_ckptdir_check_shared(br_coord_t *c, int64_t id, json_t *spec);

#endif
