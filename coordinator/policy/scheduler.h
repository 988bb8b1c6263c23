/* scheduler.h - placement: pending jobs, in the order fairshare.h gives (priority,
 * the owner's fair share, age; the owners' limits), each onto
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
 * A job that fits nowhere stays pending with a reason that says why, and is not
 * looked at again until some node may have more room or it changed (see
 * br_sched_plan: incremental passes). A gang
 * restarted because a rank failed waits for each node to be heard from again (at
 * most one heartbeat) before it goes there: that rank's failure may be the first
 * sign of a peer's node dying. */
#ifndef BRAMBLE_SCHEDULER_H
#define BRAMBLE_SCHEDULER_H

#include <jansson.h>

#include "coord.h"
#include "fairshare.h"
#include "job.h"
#include "usage.h"
#include "netmap.h"

#define BR_SCHED_GANG_CANDIDATES 64
#define BR_SCHED_RESERVE_MAX 64 /* the largest gang a reservation is made for */

/* A rank that runs, and when it will have ended by its job's time_limit. */
typedef struct {
    br_node_t *node;
    json_t *share; /* borrowed: what it holds there */
    int64_t end_ms;
} br_sched_end_t;

/* The scheduler's own state: whether a pass is due, and the planner's memory of
 * the last pass (br_sched_memory_t), so that a pass looks again only at the jobs
 * whose inputs changed. It learns that a pass is due from the hooks (hooks.h) it
 * registers: something changed, a node is back, a job left, a node was heard
 * while a gang waits for fresh heartbeats; and from a backoff's end. NULL when
 * out of memory. */
typedef struct br_sched br_sched_t;
br_sched_t *br_sched_new(br_coord_t *c);
void br_sched_destroy(br_sched_t **s);
/* At the end of a wake: a pass when one is due, and not sooner than
 * BR_SCHED_PACE times the last pass's own time after its end. A pass looks at
 * every pending job, so with a long queue and a stream of submissions a pass per
 * wake would take most of the coordinator; paced, passes take at most
 * 1 / (1 + BR_SCHED_PACE) of it, and a change waits at most that many times one
 * pass: tens of microseconds with a short queue; with 10,000 jobs over 1,000
 * nodes, 50-70 ms after a pass that reconsidered only new jobs (16-22 ms), and
 * about 2 s after one that looked at every job because some node's room grew
 * (0.69 s: docs/benchmarks.md), which unpaced held the loop, heartbeats and all,
 * almost without a break. */
#define BR_SCHED_PACE 3
void br_sched_wake(br_coord_t *c);
/* Milliseconds until a pass held back by pacing is due (0: now); -1 when none
 * waits. The loop polls no longer than that. */
int64_t br_sched_wait_ms(const br_coord_t *c);

/* One pass: the pending jobs in memory, br_sched_plan, then each decision
 * carried out (br_jobs_place, the reason stored, the backoff's end remembered). */
void br_sched_run(br_coord_t *c);

/* What the planner keeps from one pass to the next, so that a pass decides again
 * only the jobs whose inputs changed (br_sched_plan): each node's room as the last
 * pass left it, a capacity version that grows when some node may have more room
 * than that, and the last reservation. One memory per set of nodes and jobs.
 * NULL when out of memory. */
typedef struct br_sched_memory br_sched_memory_t;
br_sched_memory_t *br_sched_memory_new(void);
void br_sched_memory_destroy(br_sched_memory_t **m);
/* Of the last pass with m: the jobs it decided by looking at the nodes (or at
 * their backoff or the jobs they wait for), and those it kept waiting unlooked. */
void br_sched_memory_counts(const br_sched_memory_t *m, size_t *considered, size_t *kept);

/* What the planner sees. */
typedef struct {
    br_nodes_t *nodes;   /* their state, route, last contact and what is held */
    br_netmap_t *netmap; /* round trips, for a gang's nearest set */
    br_netmap_relayed_fn relayed; /* pairs that talk through an overlay relay (NULL:
                                     none); relayed_ctx is passed to it */
    void *relayed_ctx;
    int64_t now_ms;      /* wall clock: restart backoffs */
    json_t *replicas;    /* {"service id": {"node": n}} of running replicas, kept up to
                            date as replicas are placed; NULL when no pending job is a
                            replica */
    br_usage_t *usage;   /* the users' standing (br_usage_standing done): fair share
                            and limits; NULL: priority, then age */
    int backfill;               /* make a reservation (below) */
    int64_t preempt_after_ms;   /* preemption (below); 0: none */
    br_job_t *const *victims;   /* running jobs that may be asked to make room */
    size_t nvictims;
    const br_sched_end_t *ends; /* the running ranks whose jobs have a time_limit,
                                   any order */
    size_t nends;
    struct br_arrays_pass *arrays; /* running tasks of arrays with a "%N" limit
                                      (arrays.h), kept up to date as tasks are
                                      placed; NULL when no pending task has one */
    br_sched_memory_t *memory; /* the last passes (above): skip the jobs nothing could
                                  have made fit since; NULL: decide every job */
    const struct br_stages *stages; /* code being fetched while it is uploaded: a job
                                       whose code is staged on a node prefers it, among
                                       nodes otherwise equal (stages.h); or NULL */
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
    br_score_t score;     /* what put it where it is in the order */
    int64_t start_at;     /* WAIT of the job the pass reserved nodes for: when it will
                             start at the latest, by the running jobs' time limits
                             (wall ms); else 0 */
    br_job_t **victims;   /* WAIT of a job that preempts: the running jobs (of
                             in->victims) to ask to make room for it; else NULL */
    int nvictims;
    int64_t preempt_at;   /* WAIT of the job that may preempt, not yet: when it may
                             (wall ms), so that a pass comes then; else 0 */
    int kept;             /* WAIT not looked at again (in->memory): it fit nowhere the
                             last time and nothing since can have made it fit; its
                             reason stands as it was (reason NULL) */
} br_sched_decision_t;

/* The planner: every pending job (jobs[0..n-1], any order) gets a decision, in
 * the order it was considered (fairshare.h).
 *
 * Backfill: the first job in that order that fits nowhere now (not one that waits
 * for a job, a limit or a backoff) gets a reservation: the nodes it would fit on
 * once enough running ranks have ended by their time limits (in->ends), and that
 * time (its decision's start_at). A later job may then use those nodes only if its
 * own time_limit ends before that time; a job without a time_limit never does.
 * When no number of ended ranks makes it fit (a rank without a time limit is in the
 * way), there is no reservation.
 *
 * Preemption: when that job has waited preempt_after_ms and its reservation (if
 * any) is not due within that long either, the planner picks running jobs of
 * in->victims with a lower priority whose room would let it start: the lowest
 * priority first, then the most recently started (the least work since its last
 * checkpoint, as a rule), then drops those that turn out not to be needed. Its
 * decision names them (victims); nothing is given back yet: they stop first.
 *
 * Incremental passes (in->memory): placing only takes room from nodes, so a job
 * that fit nowhere keeps fitting nowhere until some node may have more room. The
 * pass compares each node with how the last pass left it; when any node has more
 * room in any respect (it is new, or ready and connected again; more CPUs or
 * memory free, fewer attempts, a GPU with fewer jobs or more VRAM to spare) or
 * changed what it is (arch, labels, GPU models or count), the capacity version
 * grows. A job is then kept waiting without being looked at (its decision's kept)
 * only when all of these hold: the last pass that looked at it found that it fit
 * nowhere (not a limit, an array's "%N", a backoff or a job it waits for) at the
 * current capacity version; it is decided on its shape alone (no excluded nodes,
 * no wait for fresh heartbeats, not a service's replica); it is not new to the
 * pass, was not placed since and has no backoff; the reservation is settled
 * (backfill: the first job that fits nowhere is always looked at, as it gets the
 * reservation and may preempt); and either no reservation was in force when it
 * was looked at, or this pass's reservation is the same one (job, time, nodes).
 * Everything else is decided as a full pass would: a new job, a job whose limit,
 * "%N" or backoff no longer holds it, and every job once a node has more room.
 * Limits and "%N" are weighed for every job in every pass, and the order is the
 * full one. The decisions are those of a full pass; only the reasons of the jobs
 * kept are those of the pass that last looked at them.
 *
 * It reads nothing but its arguments and writes nothing but the decisions, the
 * nodes' held counters (each placement is reserved with br_node_hold, so that
 * later jobs see it taken), in->replicas, and with in->memory, that and each
 * job's nowhere note (job.h).
 * *on_heartbeat: a gang waits to hear from a node again. NULL when out of memory. */
br_sched_decision_t *br_sched_plan(const br_sched_in_t *in, br_job_t *const *jobs, size_t n,
                                   int *on_heartbeat);
void br_sched_decisions_free(br_sched_decision_t *d, size_t n);

#define BR_SCHED_ESTIMATE_EVENTS 2000 /* ends an estimate looks at */

/* When each of queue[0..n-1] (pending, in the order of the last pass) would start
 * at the latest if every running job and every job started before it ran to its
 * time_limit and nothing else came: a pass at each time a job ends, placing what
 * then fits in queue order. start[i] in wall ms, 0 when it cannot be told (a job
 * without a time limit is in the way, it waits for another job, or its start lies
 * beyond BR_SCHED_ESTIMATE_EVENTS ends). It leaves the nodes' counters as they
 * were. */
void br_sched_estimate(br_coord_t *c, br_job_t *const *queue, size_t n, int64_t *start);

/* The first node (in the scheduler's order) that is ready and that job spec fits now
 * and may go to (its nodelist), or NULL: where the job would most likely go, were
 * it submitted now. */
br_node_t *br_sched_first_fit(br_coord_t *c, json_t *spec);

/* Does job spec fit node n now? On success returns 1, *assign (new reference)
 * holds {"cpus","memory","gpus":[...]} plus "vram" (reserved per GPU) when the
 * job declared a VRAM need and so shares its GPUs, and *left (when not NULL) the
 * VRAM its GPUs have to spare afterwards; else 0 with why filled. */
int br_sched_fit(const br_node_t *n, json_t *spec, json_t **assign, int64_t *left,
                 char *why, size_t whylen);

/* Where a pending job stood in the last scheduling pass (the planner keeps it in its
 * slot on the job, job.h): its place (1: considered first; 0: not in a pass yet),
 * its score there and the score's parts (fairshare.h), and when its reservation
 * promises it starts (wall ms; 0: none). */
typedef struct {
    int64_t place;
    double priority, fairshare, age, total;
    int64_t start_at;
} br_sched_queue_t;
br_sched_queue_t br_sched_queue_of(const br_job_t *job);

#endif
