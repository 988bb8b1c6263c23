/* scheduler.h - placement: pending jobs, highest priority then oldest first, each onto
 * the first ready node whose free CPUs, memory, GPUs and VRAM fit and that matches
 * the spec's arch, gpu_model and labels; a gang (resources.nodes > 1) onto that many
 * distinct such nodes at once, or nowhere: it holds nothing while it waits, and
 * smaller jobs behind it are placed meanwhile; the nearest set of nodes when
 * several fit (netmap.h), chosen among the first BR_SCHED_GANG_CANDIDATES (or
 * four times the gang's size) that fit, in name order, so that choosing stays
 * cheap on a cluster of thousands of nodes.
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
#include "job.h"

#define BR_SCHED_GANG_CANDIDATES 64

/* The scheduler's own state: whether a pass is due. It learns so from the hooks
 * (hooks.h) it registers: something changed, a node is back, a job left, a
 * node was heard while a gang waits for fresh heartbeats; and from a backoff's
 * end. NULL when out of memory. */
typedef struct br_sched br_sched_t;
br_sched_t *br_sched_new(br_coord_t *c);
void br_sched_destroy(br_sched_t **s);
/* At the end of a wake: a pass when one is due. */
void br_sched_wake(br_coord_t *c);

/* One pass: the pending jobs in memory, br_sched_plan, then each decision
 * carried out (br_jobs_place, the reason stored, the backoff's end remembered). */
void br_sched_run(br_coord_t *c);

/* What the planner sees. */
typedef struct {
    br_nodes_t *nodes;   /* their state, route, last contact and what is held */
    br_netmap_t *netmap; /* round trips, for a gang's nearest set */
    int64_t now_ms;      /* wall clock: restart backoffs */
    json_t *replicas;    /* {"service id": {"node": n}} of running replicas, kept up to
                            date as replicas are placed; NULL when no pending job is a
                            replica */
    struct br_arrays_pass *arrays; /* running tasks of arrays with a "%N" limit
                                      (arrays.h), kept up to date as tasks are
                                      placed; NULL when no pending task has one */
} br_sched_in_t;

typedef enum { BR_SCHED_PLACE, BR_SCHED_WAIT, BR_SCHED_LATER } br_sched_verdict_t;

typedef struct {
    br_job_t *job; /* borrowed from the jobs given */
    br_sched_verdict_t verdict;
    int count;            /* PLACE: ranks, each on nodes[r] with share assign[r] */
    br_node_t **nodes;
    json_t **assign;
    char *how;            /* PLACE of a gang: why these nodes (else NULL) */
    char *reason;         /* WAIT: "waiting: ..." (else NULL) */
    int64_t not_before;   /* LATER: wall ms when its restart backoff ends */
} br_sched_decision_t;

/* The order in which a pass considers pending jobs: highest priority first, then
 * oldest (lowest id) first. */
void br_sched_order(br_job_t **jobs, size_t n);

/* The planner: every pending job (jobs[0..n-1], any order), highest priority
 * then oldest first, gets a decision. It reads nothing but its arguments and
 * writes nothing but the decisions, the nodes' held counters (each placement is
 * reserved with br_node_hold, so that later jobs see it taken) and in->replicas.
 * *on_heartbeat: a gang waits to hear from a node again. NULL when out of memory. */
br_sched_decision_t *br_sched_plan(const br_sched_in_t *in, br_job_t *const *jobs, size_t n,
                                   int *on_heartbeat);
void br_sched_decisions_free(br_sched_decision_t *d, size_t n);

/* Does job spec fit node n now? On success returns 1, *assign (new reference)
 * holds {"cpus","memory","gpus":[...]} plus "vram" (reserved per GPU) when the
 * job declared a VRAM need and so shares its GPUs, and *left (when not NULL) the
 * VRAM its GPUs have to spare afterwards; else 0 with why filled. */
int br_sched_fit(const br_node_t *n, json_t *spec, json_t **assign, int64_t *left,
                 char *why, size_t whylen);

#endif
