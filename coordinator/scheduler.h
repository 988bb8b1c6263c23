/* scheduler.h - placement: pending jobs, highest priority then oldest first, each onto
 * the first ready node whose free CPUs, memory, GPUs and VRAM fit and that matches
 * the spec's arch, gpu_model and labels; a gang (resources.nodes > 1) onto that many
 * distinct such nodes at once, or nowhere: it holds nothing while it waits, and
 * smaller jobs behind it are placed meanwhile. A job that fits nowhere stays
 * pending with a reason that says why. A gang restarted because a rank failed
 * waits for each node to be heard from again (at most one heartbeat) before it
 * goes there: that rank's failure may be the first sign of a peer's node dying. */
#ifndef BRAMBLE_SCHEDULER_H
#define BRAMBLE_SCHEDULER_H

#include <jansson.h>

#include "coord.h"

void br_sched_run(br_coord_t *c);

/* Does job spec fit node n now? On success returns 1 and *assign (new reference)
 * holds {"cpus","memory","gpus":[...]}; else 0 with why filled. */
int br_sched_fit(const br_node_t *n, json_t *spec, json_t **assign, char *why,
                 size_t whylen);

#endif
