/* deps.c - waits on other jobs: worked out at submit, on each job's start and
 * end, and after a load. */
#include "deps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrays.h"
#include "jobs.h"
#include "spec.h"
#include "hooks.h"
#include "jobtab.h"

/* How far job id has got: its state, and whether it ever ran. -1: no such job. */
static int status_of(br_coord_t *c, int64_t id, int *ran, int64_t *owner)
{
    br_job_t *j = br_jobtab_find(c->jobs, id);
    if (j) {
        *ran = j->state == BR_JOB_RUNNING || j->started > 0;
        *owner = j->owner_id;
        return (int)j->state;
    }
    json_t *row = br_store_job_get(c->store, id, NULL);
    if (!row)
        return -1;
    int state = br_job_state_parse(json_string_value(json_object_get(row, "state")));
    *ran = json_integer_value(json_object_get(row, "started")) > 0;
    *owner = json_integer_value(json_object_get(row, "owner_id"));
    json_decref(row);
    return state;
}

/* Where a wait stands for a job in state (ran: it ever ran). */
static int judge(int on, int state, int ran)
{
    int ended = state >= 0 && br_job_state_ended((br_job_state_t)state);
    switch (on) {
    case BR_AFTER_OK:
        return !ended ? BR_AFTER_WAITING : state == BR_JOB_COMPLETED ? BR_AFTER_MET
                                                                    : BR_AFTER_NEVER;
    case BR_AFTER_FAILED:
        return !ended ? BR_AFTER_WAITING : state != BR_JOB_COMPLETED ? BR_AFTER_MET
                                                                    : BR_AFTER_NEVER;
    case BR_AFTER_ENDED:
        return ended ? BR_AFTER_MET : BR_AFTER_WAITING;
    default: /* started */
        return ran ? BR_AFTER_MET : ended ? BR_AFTER_NEVER : BR_AFTER_WAITING;
    }
}

/* What this module keeps of a job that others wait for, in its slot on the job
 * (job.h): the ids of the jobs that wait for it (some may have left since). */
typedef struct {
    int64_t *ids;
    int n, cap;
} waiters_t;

static int slot = -1; /* this module's slot on each job */

static void waiters_free(void *data)
{
    waiters_t *w = data;
    free(w->ids);
    free(w);
}

/* Note on the job it waits for that waiter waits (on_progress finds it there). */
static void note_waiter(br_coord_t *c, br_job_t *waiter, int64_t awaited)
{
    br_job_t *a = br_jobtab_find(c->jobs, awaited);
    waiters_t *w = a ? br_job_aux_get(a, slot) : NULL;
    if (a && !w && (w = calloc(1, sizeof(*w))))
        br_job_aux_set(a, slot, w, waiters_free);
    if (!w || (w->n && w->ids[w->n - 1] == waiter->id))
        return; /* (out of memory: it is told at the next load) */
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 4;
        int64_t *more = realloc(w->ids, (size_t)cap * sizeof(*more));
        if (!more)
            return;
        w->ids = more;
        w->cap = cap;
    }
    w->ids[w->n++] = waiter->id;
}

/* Work out every wait of job again (after a load, or when it is new). */
static void settle(br_coord_t *c, br_job_t *job)
{
    for (int i = 0; i < job->nafter; i++) {
        int ran = 0;
        int64_t owner;
        int state = status_of(c, job->after[i].job, &ran, &owner);
        job->after[i].state = state < 0 ? BR_AFTER_NEVER : judge(job->after[i].on, state, ran);
        if (job->after[i].state == BR_AFTER_WAITING)
            note_waiter(c, job, job->after[i].job);
    }
}

/* How an ended job (state; ran: it ever ran) ended, in words; "is gone" for none. */
static const char *outcome(int state, int ran)
{
    return state < 0                    ? "is gone"
           : state == BR_JOB_COMPLETED ? "completed"
           : !ran                      ? "ended without running"
                                       : "ended failed or cancelled";
}

/* The waiting job can never start: it fails, saying which wait and why. */
static void give_up(br_coord_t *c, br_job_t *job, const br_after_t *a)
{
    int ran = 0;
    int64_t owner;
    int state = status_of(c, a->job, &ran, &owner);
    char why[256];
    snprintf(why, sizeof(why), "after: job %lld %s, so it can never %s", (long long)a->job,
             outcome(state, ran), br_after_goal((br_after_on_t)a->on));
    br_job_set_reason(job, why);
    br_job_post(c, job, BR_JOB_FAILED, NULL, "%s", why);
}

/* Job changed (it runs, or it left): the jobs that wait for it see where they
 * stand; those whose wait can never come true fail. */
static void on_progress(br_coord_t *c, br_hook_arg_t *arg, void *ctx)
{
    (void)ctx;
    int64_t id = arg->job->id;
    int state = (int)arg->job->state;
    int ran = arg->job->state == BR_JOB_RUNNING || arg->job->started > 0;
    size_t n = 0, cap = 0;
    br_job_t **failing = NULL;
    int met = 0;
    const waiters_t *waiting = br_job_aux_get(arg->job, slot);
    for (int w = 0; waiting && w < waiting->n; w++) { /* (only its own, not every job) */
        br_job_t *j = br_jobtab_find(c->jobs, waiting->ids[w]);
        if (!j || j->state != BR_JOB_PENDING)
            continue;
        for (int i = 0; i < j->nafter; i++) {
            if (j->after[i].job != id || j->after[i].state != BR_AFTER_WAITING)
                continue;
            j->after[i].state = judge(j->after[i].on, state, ran);
            met |= j->after[i].state == BR_AFTER_MET;
            if (j->after[i].state == BR_AFTER_NEVER) {
                br_job_t **f = n == cap ? realloc(failing, (cap = cap ? 2 * cap : 8) *
                                                               sizeof(*f))
                                        : failing;
                if (f) {
                    failing = f;
                    failing[n++] = j;
                }
            }
        }
    }
    for (size_t i = 0; i < n; i++) /* (after the walk: each one leaves the table) */
        if (failing[i]->in_table)
            give_up(c, failing[i], br_job_waits_for(failing[i]));
    free(failing);
    if (met)
        br_coord_changed(c);
}

static void on_added(br_coord_t *c, br_hook_arg_t *arg, void *ctx)
{
    (void)ctx;
    settle(c, arg->job);
}

static void on_loaded(br_coord_t *c, br_hook_arg_t *arg, void *ctx)
{
    (void)arg;
    (void)ctx;
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        if (j->state == BR_JOB_PENDING && j->nafter)
            settle(c, j);
}

/* Once a second: a wait found hopeless by a load fails its job (a load may come
 * after a rollback, outside a transaction, where nothing is written). */
static void on_tick(br_coord_t *c, br_hook_arg_t *arg, void *ctx)
{
    (void)arg;
    (void)ctx;
    br_job_t *j, *next;
    for (j = br_jobtab_first(c->jobs); j; j = next) {
        next = j->next;
        const br_after_t *a = j->state == BR_JOB_PENDING ? br_job_waits_for(j) : NULL;
        for (int i = 0; a && i < j->nafter; i++)
            if (j->after[i].state == BR_AFTER_NEVER) {
                give_up(c, j, &j->after[i]);
                break;
            }
    }
}

int br_deps_init(br_coord_t *c)
{
    if ((slot = br_job_aux_slot("deps")) < 0)
        return -1;
    return br_hooks_add(c->hooks, BR_HOOK_JOB_RUNNING, on_progress, NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_progress, NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_JOB_ADDED, on_added, NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_LOADED, on_loaded, NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, NULL) < 0
               ? -1
               : 0;
}

int br_deps_check(br_coord_t *c, const json_t *spec, int64_t owner_id, br_err_t *err)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(spec, "after"), i, e) {
        int64_t id = json_integer_value(json_object_get(e, "job"));
        int on = br_after_on_parse(json_string_value(json_object_get(e, "on")));
        int ran = 0;
        int64_t owner = 0;
        int state = status_of(c, id, &ran, &owner);
        if (state < 0 || (owner_id && owner != owner_id)) /* as if it did not exist */
            return br_errf(err, EINVAL, "after[%zu]: no job %lld (of yours)", i,
                           (long long)id);
        if (br_arrays_is_array(c, id)) /* (what "ok" means for many is not settled) */
            return br_errf(err, ENOTSUP,
                           "after[%zu]: job %lld is a job array: waiting on a whole array "
                           "is not supported yet; wait on its tasks' own ids",
                           i, (long long)id);
        if (judge(on, state, ran) == BR_AFTER_NEVER)
            return br_errf(err, EINVAL,
                           "after[%zu]: job %lld has already %s, so it can never %s", i,
                           (long long)id, outcome(state, ran),
                           br_after_goal((br_after_on_t)on));
    }
    return 0;
}
