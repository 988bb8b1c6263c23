/* scheduler.h - placement: pending jobs, highest priority then oldest first, each onto
 * the first ready node whose free CPUs, memory, GPUs and VRAM fit and that matches
 * the spec's arch, gpu_model and labels; a gang (resources.nodes > 1) onto that many
 * distinct such nodes at once, or nowhere: it holds nothing while it waits, and
 * smaller jobs behind it are placed meanwhile; the nearest set of nodes when
 * several fit (netmap.h).
 *
 * GPUs: a job without a VRAM need gets whole GPUs no other job holds. A job that
 * declares one (resources.vram, or sized from model:) may share GPUs with other
 * such jobs while their needs sum within each GPU's free VRAM; it is packed best
 * fit, onto the GPUs and the node left with the least VRAM to spare, so that
 * later big jobs still find whole GPUs.
 *
 * A job that fits nowhere stays pending with a reason that says why. A gang
 * restarted because a rank failed waits for each node to be heard from again (at
 * most one heartbeat) before it goes there: that rank's failure may be the first
 * sign of a peer's node dying. */
#ifndef BRAMBLE_SCHEDULER_H
#define BRAMBLE_SCHEDULER_H

#include <jansson.h>

#include "coord.h"

void br_sched_run(br_coord_t *c);

/* Does job spec fit node n now? On success returns 1, *assign (new reference)
 * holds {"cpus","memory","gpus":[...]} plus "vram" (reserved per GPU) when the
 * job declared a VRAM need and so shares its GPUs, and *left (when not NULL) the
 * VRAM its GPUs have to spare afterwards; else 0 with why filled. */
int br_sched_fit(const br_node_t *n, json_t *spec, json_t **assign, int64_t *left,
                 char *why, size_t whylen);

#endif
