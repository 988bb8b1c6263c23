/* jobs.h - job life on the coordinator (ARCHITECTURE.md, "Job life"): placing an
 * attempt on its nodes (one, or a gang of several in rank order), its start and
 * exit, cancel, and what a lost or removed node means for the jobs it ran (requeue
 * per restart policy, else failed). A gang lives and dies whole: it runs when every
 * rank runs, completes when every rank exited 0, and a rank that fails or whose
 * node is lost stops all the others. Each step is stored with an event; resources
 * held on nodes follow the running ranks.
 *
 * The current jobs live in memory (jobtab.h, job.h): every change is made there
 * and written through to the store inside the wake's transaction, so a heartbeat
 * or a report reads no job from the store. The job core calls no module by
 * name: it tells them through hooks (hooks.h) when an attempt ended (a service
 * may take it over), a task was reported, a job left, or a placement may change. */
#ifndef BRAMBLE_JOBS_H
#define BRAMBLE_JOBS_H

#include <jansson.h>
#include <stdint.h>

#include "coord.h"
#include "job.h"

/* The one path of a job's state changes (in the manner of flux-core's
 * event_job_post_pack): the new state, its start time when it first runs and its
 * end time when it ends, the whole job written back to the store, and the event
 * with this text. A job that leaves starting/running gives back what its ranks
 * still hold (and drops them when it goes back to pending; an ended job keeps them
 * as where it ran); one that ends leaves memory (jobtab.h). Anything but running
 * asks for a scheduling pass. A move br_job_state_move_ok refuses is not made: -1,
 * and brambled's log names both states (a fault of the caller's); else 0. */
int br_job_post(br_coord_t *c, br_job_t *job, br_job_state_t state, const char *node,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Write the job back to the store with no change of state. */
void br_job_save(br_coord_t *c, br_job_t *job);
/* Write job's reason alone (a waiting job's reason changes at many passes). */
void br_job_save_reason(br_coord_t *c, br_job_t *job);

/* Load the current jobs from the store and count what their ranks hold on nodes
 * again (at start, and after a rollback undid what a wake had changed). */
int br_jobs_restore(br_coord_t *c, br_err_t *err);

/* Store a new job (the object br_store_job_add takes) and take it into memory. */
br_job_t *br_jobs_add(br_coord_t *c, json_t *row, br_err_t *err);
/* Hand a job to another owner, in the store and in memory. */
int br_jobs_set_owner(br_coord_t *c, int64_t id, const char *owner, int64_t owner_id,
                      br_err_t *err);

/* pending -> starting on nodes[0..count-1] (rank order), each with its share
 * assign[r] = {"cpus","memory","gpus":[...]}, which the scheduler has already
 * reserved on the node (br_node_hold): store, event, job.run to rank 0 (the
 * other ranks get theirs when rank 0 has started and chosen the port). how: why
 * these nodes (a gang's placement), kept with the job, or NULL. */
int br_jobs_place(br_coord_t *c, br_job_t *job, br_node_t *const *nodes,
                  json_t *const *assign, int count, const char *how);

/* Node n has the trees (code, data sets) of its rank of a gang's attempt in its cache
 * (job.fetched): once rank 0's node has them the others are asked for theirs (read
 * from it when nearest), and once every rank's node has them rank 0 starts. */
void br_jobs_fetched(br_coord_t *c, int64_t id, int attempt, br_node_t *n);
/* Whether rank r of job was asked to fetch its trees before its start (a gang's). */
int br_jobs_prefetched(const br_job_t *job, int r);
/* Node n started its rank of the attempt (port: the rendezvous port, rank 0 only). */
void br_jobs_started(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int port);
/* An attempt ended on node n. exit_code/signal < 0 when not applicable; reason
 * non-empty when the agent could not start it or lost it. */
void br_jobs_exited(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int exit_code,
                    int signal, const char *reason);
/* The node's agent ended the attempt as hung (no output, checkpoint or progress for
 * the spec's progress.timeout; it killed the tree): restart it per restart.on's
 * "hung", from its newest checkpoint, or fail it. */
void br_jobs_hung(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int exit_code,
                  int signal, const char *reason);
/* The node cannot run this attempt (it cannot see the checkpoint to resume from):
 * requeue it elsewhere, excluding the node, without counting a restart. */
void br_jobs_not_here(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                      const char *reason);

/* Send rank 0's job.run for this attempt that a BR_HOOK_RESUMING hook held back
 * (replicas.c, once the checkpoint is restored on its node); no-op when the
 * attempt is no longer current and starting, or the order went already. */
void br_jobs_release(br_coord_t *c, int64_t id, int attempt);

/* The variant of job's loaded image that node n fetches (its architecture's; a spec's
 * image_archive's variants entry, borrowed), or NULL. */
json_t *br_jobs_image_variant(const br_job_t *job, const br_node_t *n);

/* The job's image could not be had on node n (podman's pull from its registry, or
 * the load of its archive, failed: reason says how, the registry's answer in it):
 * the job goes back to pending with no restart counted and no node excluded (a
 * registry may answer later), the reason kept as why it waits, and is placed again
 * after BR_IMAGE_RETRY_MS. */
#define BR_IMAGE_RETRY_MS 30000
void br_jobs_image_failed(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                          const char *reason);

/* The node was too busy to start this attempt (it runs BR_NODE_MAX_ATTEMPTS): the
 * job goes back to pending with no restart counted and no node excluded, and
 * waits a second before it is placed again. */
void br_jobs_node_full(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *reason);

/* Record a complete checkpoint reported by node n, with its manifest (checked; may
 * be NULL); refused (ESTALE) unless attempt is the job's current attempt there and
 * n runs its rank 0. With refused (why the agent did not count it: a special file
 * in it), an event says so, once, and nothing is recorded. */
int br_jobs_checkpoint(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *path, int64_t step, int64_t size, int64_t time_ms,
                       const json_t *manifest, const char *refused, br_err_t *err);

/* How long an agent may go without word from us before it freezes its jobs: well
 * inside node_timeout, so it is frozen before we could start them elsewhere. */
int64_t br_jobs_fence_ms(const br_coord_t *c);

/* Cancel: pending or starting -> cancelled (+ job.kill); running -> SIGTERM to every
 * process, SIGKILL after --kill-grace, and cancelled once its exit is reported (or
 * with now: cancelled + job.kill at once, as for a job stopping in its grace).
 * Returns the job's row as it is now. */
json_t *br_jobs_cancel(br_coord_t *c, int64_t id, int now, br_err_t *err);

/* Stop job as a cancel does, for why (a module's reason: "idle for 2h ..."), which
 * heads its events; it ends cancelled. -1 when it is not running, or is being
 * stopped already. */
int br_jobs_stop_for(br_coord_t *c, br_job_t *job, const char *why);

/* Every current attempt on node n ends with cause node_lost and this reason. */
void br_jobs_node_gone(br_coord_t *c, br_node_t *n, const char *reason);

/* A running attempt past its spec's time_limit gets SIGTERM on every rank, then
 * SIGKILL from its agent --kill-grace (config.h) later; however it then ends, the
 * job fails with "time limit ... reached" (no restart). An agent that reports no
 * exit within the grace plus node_timeout gets a plain kill. */
void br_jobs_check_limits(br_coord_t *c);

/* Make room for job by preemption (scheduler.h): each of victims[0..n-1] gets its
 * spec's preempt.signal and preempt.grace to write a checkpoint; once one is
 * counted, or the grace is over, it is stopped and goes back to pending as its
 * next attempt (no restart counted), to resume from its newest checkpoint. Events
 * on both sides say who made room for whom. Returns the wall ms until which job
 * waits for them (their longest grace and a node timeout to report): the planner
 * lets it preempt no more until then. */
int64_t br_jobs_preempt(br_coord_t *c, br_job_t *job, br_job_t *const *victims, int n);

/* Register the job core's own hooks (hooks.h): a lost or removed node's ranks
 * are over (br_jobs_node_gone); the time-limit sweep, once a second. */
int br_jobs_init(br_coord_t *c);

/* Reconcile a node's report of its tasks (hello and heartbeat): current attempts it
 * no longer runs end; attempts it runs that are not current are killed. full: the
 * report is from a fresh connection (hello), so starting attempts count too. */
void br_jobs_reconcile(br_coord_t *c, br_node_t *n, json_t *tasks, int full);

/* 1 when a log chunk of attempt may come from node: the current attempt's from its
 * own nodes, a superseded attempt's from any (its output arrives after a partition). */
int br_jobs_log_allowed(br_coord_t *c, int64_t id, int attempt, const char *node);
/* bytes of attempt's output dropped on node so far, as its agent counts them: kept
 * (the largest count wins), with an event when the first are. */
void br_jobs_log_lost(br_coord_t *c, int64_t id, int attempt, const char *node,
                      int64_t bytes);

/* The job object as the CLI shows it: times in seconds, internals dropped. It
 * shares its values with job: change its top-level keys only. */
json_t *br_jobs_public(json_t *job);

#endif
