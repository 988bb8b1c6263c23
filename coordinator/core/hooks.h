/* hooks.h - what the job core (jobs.c) and node life (nodelife.c) tell the modules
 * above them. A module registers its functions for the points it cares about
 * when the coordinator starts (services: a replica's restart and backoff, its
 * health; the scheduler: when a pass is due; the job core itself: a lost node's
 * jobs, the time-limit sweep), so that the core never calls a module by name and
 * the calls go one way: server -> api -> modules -> job core -> store. Hooks run
 * in the order they were added, inside the wake's transaction. */
#ifndef BRAMBLE_HOOKS_H
#define BRAMBLE_HOOKS_H

#include <jansson.h>
#include <stdint.h>

#include "job.h"
#include "nodes.h"

struct br_coord;

typedef enum {
    BR_HOOK_ATTEMPT_ENDED, /* job's attempt ended (cause NULL: every rank exited 0):
                            * a hook may take it over (restart, delay_ms, text) */
    BR_HOOK_TASK_REPORTED, /* node reports job's rank running (task: its object) */
    BR_HOOK_RELEASING,     /* job's ranks are about to give back what they hold:
                            * its attempt is over (it ended, or goes back to
                            * pending), or one rank exited 0 (node) */
    BR_HOOK_JOB_LEFT,      /* job ended for good (cancelled, completed, failed) */
    BR_HOOK_JOB_ADDED,     /* job was submitted (it is pending; a service's own job
                            * too, until it is posted running) */
    BR_HOOK_JOB_RUNNING,   /* job runs: every rank of its attempt started */
    BR_HOOK_LOADED,        /* the current jobs were read from the store again (at
                            * start, after a rollback): state kept beside them is
                            * to be worked out again; no store writes here */
    BR_HOOK_CHECKPOINT,    /* node (rank 0's) reported a complete checkpoint of job,
                            * now counted: reason its path, step, manifest */
    BR_HOOK_NODE_LOST,     /* node went silent past the node timeout, or was removed
                            * (reason says which): its ranks are over */
    BR_HOOK_NODE_UNHEALTHY, /* a GPU of node failed (reason): its gangs are over */
    BR_HOOK_NODE_BACK,     /* node said hello, or spoke on a new connection */
    BR_HOOK_NODE_HEARD,    /* node's heartbeat arrived */
    BR_HOOK_CHANGED,       /* what nodes hold or what waits changed: place again */
    BR_HOOK_TICK,          /* once a second, after the wake's messages */
    BR_HOOK_RESUMING,      /* job.run for rank 0 of job's attempt is about to go to
                            * node, or (cause "not_here") node refused it, as it
                            * cannot see the checkpoint (reason): a hook may hold
                            * it (hold) until it has brought a checkpoint there,
                            * then call br_jobs_release */
    BR_HOOKS
} br_hook_point_t;

typedef struct {
    br_job_t *job;      /* ATTEMPT_ENDED, TASK_REPORTED, JOB_LEFT */
    br_node_t *node;    /* the node concerned (may be NULL) */
    const char *cause;  /* ATTEMPT_ENDED: NULL, "nonzero_exit", "node_lost", "not_here",
                         * "hung"; RESUMING: NULL, or "not_here" */
    const char *reason; /* ATTEMPT_ENDED, NODE_LOST: in words */
    json_t *task;       /* TASK_REPORTED: the agent's task object (borrowed) */
    int64_t step;       /* CHECKPOINT: its step */
    const json_t *manifest; /* CHECKPOINT: what it holds (agent/manifest.h), or NULL */
    /* ATTEMPT_ENDED: a hook that takes the attempt over sets restart, and the job
     * goes back to pending after delay_ms, with text as its reason ("...; starting
     * it again as attempt N in S s" in its event) */
    int restart;
    int64_t delay_ms;
    int hold; /* RESUMING: a hook holds the order back (the first that sets it is
               * the last to run) */
    char text[700];
} br_hook_arg_t;

typedef void (*br_hook_fn)(struct br_coord *c, br_hook_arg_t *arg, void *ctx);

typedef struct br_hooks br_hooks_t;

br_hooks_t *br_hooks_new(void);
void br_hooks_destroy(br_hooks_t **h);
/* Call fn(c, arg, ctx) at point from now on. 0, or -1 when out of memory. */
int br_hooks_add(br_hooks_t *h, br_hook_point_t point, br_hook_fn fn, void *ctx);
/* Run point's hooks in order; at ATTEMPT_ENDED, the first that sets restart
 * is the last to run. arg may be NULL (a zeroed one is passed). */
void br_hooks_run(struct br_coord *c, br_hooks_t *h, br_hook_point_t point, br_hook_arg_t *arg);

#endif
