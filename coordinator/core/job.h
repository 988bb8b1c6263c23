/* job.h - one job as the coordinator's core holds it in memory while it is
 * current (pending, starting or running): typed fields read once from its store
 * row, changed in memory and written back whole (br_job_fields) inside the wake's
 * transaction. Ended jobs live only in the store.
 *
 * The store keeps the placement as "assign" ({"ranks": [{"node", "cpus",
 * "memory", "gpus", "vram"?, "state"}...], "port": n}, rank order) and the
 * bookkeeping in columns of the same names as the fields below (restarts,
 * not_before, fresh_after, lost_at, exclude, placement, service, replica,
 * replicas, gpu_ms, cpu_ms, cost_micros, charged); this file is the one place
 * that reads and writes them. */
#ifndef BRAMBLE_JOB_H
#define BRAMBLE_JOB_H

#include <jansson.h>
#include <stdint.h>

#include "aux.h"
#include "err.h"

typedef enum {
    BR_JOB_PENDING,
    BR_JOB_STARTING,
    BR_JOB_RUNNING,
    BR_JOB_COMPLETED,
    BR_JOB_FAILED,
    BR_JOB_CANCELLED,
    BR_JOB_STATES
} br_job_state_t;

/* "pending" ... "cancelled"; the state of a name (-1: none such). */
const char *br_job_state_name(br_job_state_t s);
int br_job_state_parse(const char *name);
/* Starting or running: the job has an attempt on nodes. */
int br_job_state_live(br_job_state_t s);
/* Completed, failed or cancelled: it is over and leaves memory. */
int br_job_state_ended(br_job_state_t s);
/* 1 when a job may go from state from to state to (the one table of allowed moves:
 * pending -> starting -> running -> an end, back to pending from starting or
 * running, cancelled or failed from any state not ended, and nothing from an end).
 * Only a job that runs no process of its own (a service's, runs_nothing) goes from
 * pending to running directly. */
int br_job_state_move_ok(br_job_state_t from, br_job_state_t to, int runs_nothing);

typedef enum { BR_RANK_PLACED, BR_RANK_STARTED, BR_RANK_DONE } br_rank_state_t;

struct br_job;

/* One job this one waits for (the spec's after:), and how far that has got. */
typedef struct {
    int64_t job;
    int on;    /* br_after_on_t (spec.h) */
    int state; /* BR_AFTER_WAITING, _MET, _NEVER (it can no longer be met) */
} br_after_t;
enum { BR_AFTER_WAITING, BR_AFTER_MET, BR_AFTER_NEVER };

/* One rank of the current attempt: the node it was placed on and its share there. */
typedef struct br_rank {
    char node[64];
    br_rank_state_t state;
    int sent;      /* this coordinator sent its job.run (memory only: after a restart
                    * or a rollback, reconcile sends it if the node does not run it) */
    int fetch;     /* a gang with code or data sets: its node was asked to fetch them
                    * (1), and has them (2); memory only (asked again after a restart) */
    int64_t wait_near; /* its job.run waits (since this monotonic ms) for a nearby node
                        * to finish fetching a data set, to read it there (jobs.c); -1:
                        * waited long enough; memory only */
    json_t *share; /* {"cpus","memory","gpus":[index...],"vram"?}: held on the node */
    struct br_job *job;
    int index;
    struct br_rank *node_prev, *node_next; /* the ranks on the same node (jobtab.h) */
    int linked;
} br_rank_t;

/* A module's own data on a job (aux.h), in the manner of flux-core's
 * flux_jobtap_job_aux_set: the module takes a slot once (br_job_aux_slot), then
 * hangs what it keeps of each job there, with the function that frees it when the
 * job goes. The core never looks inside. */
#define BR_JOB_AUX_MAX 8

typedef struct br_job {
    int64_t id;
    char *name;
    char *owner;
    int64_t owner_id; /* 0: none (a job stored before owners had ids) */
    char kind[16];
    br_job_state_t state;
    int attempt;
    json_t *spec; /* as parsed at submit; never changed */
    int64_t submitted, started, ended; /* wall ms; 0: not yet */
    int exit_code, signal;             /* of the last attempt; -1: none */
    char *reason;                      /* NULL: none */
    br_rank_t *ranks;                  /* the current attempt's, rank order */
    int nranks;
    int port; /* the rendezvous port rank 0 chose; 0 until it says */
    /* bookkeeping */
    int restarts;        /* restarts used (a service replica's: in a row) */
    int64_t not_before;  /* wall ms: not placed before (a backoff); 0: none */
    int64_t fresh_after; /* wall ms: only on nodes heard from after it; 0: any */
    int64_t lost_at;     /* wall ms its node was lost, until it runs again; 0 */
    char **exclude;      /* nodes an earlier attempt could not run on */
    int nexclude;
    char *placement;     /* why a gang went where it went; NULL */
    int64_t service;     /* a replica's service job id; 0: not a replica */
    int replica;         /* its number */
    int replicas;        /* a service job's replica count; -1: not a service job */
    /* what it used, over every attempt (usage.h): what its ranks held, in GPU and
     * CPU milliseconds, and its cost in millionths, charged up to wall ms charged
     * (0: it holds nothing) */
    int64_t gpu_ms, cpu_ms, cost_micros, charged;
    int64_t array_of;    /* a job array's task: the array's id (its first task's); 0:
                          * not in an array (arrays.h) */
    int array_index;     /* its index; -1: not in an array */
    /* in memory only: attempt resume_attempt resumes from this checkpoint, not the
     * newest counted (br_job_set_resume); NULL: the newest */
    char *resume_from;
    int64_t resume_step;
    int resume_attempt;
    /* from the spec, read once */
    int priority;
    int64_t time_limit; /* ms; 0: none */
    int preemptible;      /* may be asked to make room for a higher job */
    int preempt_signal;   /* ... with this signal first */
    int64_t preempt_grace; /* ms it then has to write a checkpoint */
    char *shape;        /* its resources as canonical JSON text: jobs alike to place */
    int array_count;    /* the array's tasks in all (spec's array.count); 0: none */
    int array_max;      /* at most so many of them placed at once; 0: no limit */
    br_after_t *after;  /* the jobs it waits for (deps.c keeps their state) */
    int nafter;
    /* a gang rank's failure held until every other rank's node has spoken since
     * (jobs.c): it may be a peer's death the coordinator does not know yet; in
     * memory only */
    struct {
        int rank;         /* -1: none held */
        int exit_code, signal;
        int64_t at_mono;  /* when it came */
        char why[300];
    } held;
    /* in memory only: the attempt is being stopped on purpose, its time limit
     * reached (it then fails), preempted (it then waits to resume) or cancelled (it
     * then is cancelled): since at_mono (0: not), SIGKILL after grace_ms; why says
     * why (and for whom) */
    struct {
        int64_t at_mono, grace_ms;
        int preempt;
        int cancel;
        char why[200];
    } stop;
    br_aux_t aux[BR_JOB_AUX_MAX]; /* the modules' own data (br_job_aux_slot) */
    /* jobtab.h's links */
    struct br_job *id_next, *name_next;
    struct br_job *prev, *next;
    int in_table;
} br_job_t;

/* The slot of the module named owner (the same one each time it asks; -1 when all
 * BR_JOB_AUX_MAX are taken). */
int br_job_aux_slot(const char *owner);
/* What the module of slot keeps of job (NULL: nothing yet); set it, freeing what
 * was there (free may be NULL). */
void *br_job_aux_get(const br_job_t *job, int slot);
void br_job_aux_set(br_job_t *job, int slot, void *data, void (*free)(void *data));

/* A job from its store row (br_store_job_get/list's object). */
br_job_t *br_job_from_row(const json_t *row, br_err_t *err);
/* The same for a row without its id (as br_store_job_add takes it), stored
 * under id. */
br_job_t *br_job_from_row_id(const json_t *row, int64_t id, br_err_t *err);
void br_job_destroy(br_job_t **job);

/* The store update that writes back every field the core changes (state,
 * attempt, nodes, assign, times, exit, reason, the bookkeeping). New reference. */
json_t *br_job_fields(const br_job_t *job);
/* The placement as the store keeps it ("assign"; null with no ranks). */
json_t *br_job_assign(const br_job_t *job);

/* Replace the ranks with count new ones, placed on nodes[r] with share
 * shares[r] (copied); count 0 clears them. The caller keeps the table's links
 * (jobtab.h: unlink before, link after). 0, or -1 when out of memory. */
int br_job_set_ranks(br_job_t *job, const char *const *nodes, json_t *const *shares,
                     int count);

/* The rank on node (that has not finished when live_only), or -1. */
int br_job_rank_on(const br_job_t *job, const char *node, int live_only);
/* Ranks not done. */
int br_job_ranks_left(const br_job_t *job);

/* Set or clear (NULL) the reason; 1 when it changed. */
int br_job_set_reason(br_job_t *job, const char *reason);
/* Job's current attempt resumes from the checkpoint at path (step), not from the
 * newest counted: an older one (the newest had no good copy) or a newer one (its
 * previous attempt wrote it after its last report). 0, or -1 out of memory (then
 * nothing changed). */
int br_job_set_resume(br_job_t *job, const char *path, int64_t step);
/* Never again on node (no-op when it is already excluded). */
void br_job_exclude(br_job_t *job, const char *node);
int br_job_excluded(const br_job_t *job, const char *node);

/* The first job it still waits for, or NULL. */
const br_after_t *br_job_waits_for(const br_job_t *job);

/* Processes per node (tasks_per_node; "gpus": one per GPU), and in all. */
int br_job_tasks_per_node(const json_t *spec);
int br_job_world_size(const json_t *spec);
/* The GPUs it asks for in all: per node, times its nodes. */
int br_job_gpus(const json_t *spec);

#endif
