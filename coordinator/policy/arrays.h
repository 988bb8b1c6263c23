/* arrays.h - job arrays (the spec's array: "0-99%8", docs/spec.md): one submit
 * makes one job per index, each with its own id, attempts, logs, checkpoints and
 * restarts, named NAME[i]. The array's id is its first task's; every task keeps it
 * (job.h's array_of) and its index (array_index). "%N": at most N tasks of the
 * array are placed (starting or running) at once; the rest wait with the reason
 * "waiting: array 12 runs 8 at once (%8)". The functions here are the array's
 * whole logic: the core (jobs.c) and the scheduler know a task only as a job. */
#ifndef BRAMBLE_ARRAYS_H
#define BRAMBLE_ARRAYS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "array.h"
#include "coord.h"
#include "job.h"
#include "scheduler.h"
#include "jobtab.h"

/* Store one task per index of a (job: the usual new-job object, named after the
 * spec), all in the caller's transaction, each with an event. Returns the array's
 * id (its first task's) with *last the last task's id; -1 with err. */
int64_t br_arrays_submit(br_coord_t *c, json_t *job, const br_array_t *a,
                         const char *who, int64_t *last, br_err_t *err);

/* Cancel every task of array id that is pending, starting or running (a running one
 * gracefully unless now, as br_jobs_cancel does); the number cancelled. */
int br_arrays_cancel(br_coord_t *c, int64_t id, int now);

/* 1 when id is the id of an array of more than one task (its first task). */
int br_arrays_is_array(br_coord_t *c, int64_t id);

/* The array fields a job's public object carries: "array_id", "array_index" (null
 * when not a task of an array), from its store row. */
void br_arrays_annotate(const json_t *row, json_t *public_job);

/* ---- the "%N" limit, for one scheduling pass ------------------------------------ */

typedef struct br_arrays_pass br_arrays_pass_t;

/* What a pass needs: the tasks of each limited array among pending[0..n-1] that
 * run now (from the jobs in memory). NULL when no pending task has a limit (or out
 * of memory: then no limit holds in this pass). */
br_arrays_pass_t *br_arrays_pass_new(br_jobtab_t *jobs, br_job_t *const *pending,
                                     size_t n);
void br_arrays_pass_destroy(br_arrays_pass_t **p);

/* May job, the i-th the planner considers, be placed now? Tasks placed earlier in
 * the pass count (the PLACE verdicts in d[0..i-1]). 0: yes, plan it. 1: no, d[i]
 * now says it waits and why. With p NULL always 0. */
int br_arrays_hold_back(br_arrays_pass_t *p, br_job_t *job, br_sched_decision_t *d,
                        size_t i);

#endif
