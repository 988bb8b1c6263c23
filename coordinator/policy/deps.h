/* deps.h - jobs that wait for other jobs (the spec's after: [{job, on}]): a job
 * is placed only once every job it lists has got where it asked (ended ok,
 * ended failed or cancelled, ended at all, or started running). A wait that can
 * no longer come true (the job it waits for ended the other way, or ended
 * without ever running) ends the waiting job as failed, with that reason: it
 * never waits in silence. The state of each wait lives beside the job in memory
 * (job.h) and is worked out again from the store after a load. */
#ifndef BRAMBLE_DEPS_H
#define BRAMBLE_DEPS_H

#include <jansson.h>
#include <stdint.h>

#include "coord.h"

/* Register the hooks (hooks.h). 0, or -1 when out of memory. */
int br_deps_init(br_coord_t *c);

/* At submit: every job after: names (in spec, the normalised spec's JSON) must
 * exist and be the caller's to see (owner_id; 0: the admin, who sees all), and
 * its wait must still be able to come true. 0, or -1 with err naming the entry. */
int br_deps_check(br_coord_t *c, const json_t *spec, int64_t owner_id, br_err_t *err);

#endif
