/* arrays.c - job arrays: one submit, many tasks; cancel them all; "%N" at once. */
#include "arrays.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "util.h"

#define REASON_MAX 160

int64_t br_arrays_submit(br_coord_t *c, json_t *job, const br_array_t *a,
                         const char *who, int64_t *last, br_err_t *err)
{
    const char *name = json_string_value(json_object_get(job, "name"));
    char task[96], range[BR_ARRAY_TEXT_MAX];
    int64_t first = 0;
    json_t *row = json_copy(job); /* shallow: only name and the array keys change */
    if (!row || !name)
        return br_errf(err, ENOMEM, "array: out of memory");
    br_array_range_text(a, range, sizeof(range));
    for (int k = 0; k < a->count; k++) {
        int index = br_array_index(a, k);
        snprintf(task, sizeof(task), "%s[%d]", name, index);
        json_object_set_new(row, "name", json_string(task));
        json_object_set_new(row, "array_index", json_integer(index));
        if (first)
            json_object_set_new(row, "array_of", json_integer(first));
        br_job_t *added = br_jobs_add(c, row, err);
        if (!added) {
            json_decref(row);
            return -1;
        }
        if (!first) { /* the array takes its first task's id */
            first = added->id;
            if (br_store_job_set_array(c->store, first, first, index, err) < 0) {
                json_decref(row);
                return -1;
            }
            added->array_of = first;
            added->array_index = index;
        }
        *last = added->id;
        br_coord_event(c, added->id, NULL, "pending",
                       "task %d of array %lld[%s] (%d task%s), submitted by %s", index,
                       (long long)first, range, a->count, a->count == 1 ? "" : "s",
                       who);
    }
    json_decref(row);
    return first;
}

int br_arrays_cancel(br_coord_t *c, int64_t id, int now)
{
    size_t cap = br_jobtab_count(c->jobs), n = 0;
    int64_t *ids = malloc((cap ? cap : 1) * sizeof(*ids));
    if (!ids)
        return 0;
    /* the ids first: cancelling takes a job out of the table */
    for (br_job_t *j = br_jobtab_first(c->jobs); j && n < cap; j = j->next)
        if (j->array_of == id)
            ids[n++] = j->id;
    int done = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *job = br_jobs_cancel(c, ids[i], now, NULL);
        done += job != NULL;
        json_decref(job);
    }
    free(ids);
    return done;
}

int br_arrays_is_array(br_coord_t *c, int64_t id)
{
    br_job_t *j = br_jobtab_find(c->jobs, id);
    if (j)
        return j->array_of == id && j->array_count > 1;
    json_t *row = br_store_job_get(c->store, id, NULL);
    json_t *of = json_object_get(row, "array_of");
    json_t *count = json_object_get(
        json_object_get(json_object_get(row, "spec"), "array"), "count");
    int is = json_is_integer(of) && json_integer_value(of) == id &&
             json_integer_value(count) > 1;
    json_decref(row);
    return is;
}

void br_arrays_annotate(const json_t *row, json_t *public_job)
{
    json_t *of = json_object_get(row, "array_of");
    int in = json_is_integer(of);
    json_object_set_new(public_job, "array_id", in ? json_incref(of) : json_null());
    json_object_set_new(
        public_job, "array_index",
        in ? json_incref(json_object_get(row, "array_index")) : json_null());
    json_object_del(public_job, "array_of");
}

/* ---- the "%N" limit ------------------------------------------------------------ */

typedef struct {
    int64_t id;
    int max;
    int placed; /* starting or running, and placed so far in this pass */
} limit_t;

struct br_arrays_pass {
    limit_t *arrays;
    size_t n;
    size_t seen; /* decisions counted so far */
};

static limit_t *limit_of(br_arrays_pass_t *p, int64_t id)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->arrays[i].id == id)
            return &p->arrays[i];
    return NULL;
}

br_arrays_pass_t *br_arrays_pass_new(br_jobtab_t *jobs, br_job_t *const *pending,
                                     size_t n)
{
    br_arrays_pass_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const br_job_t *j = pending[i];
        if (j->array_of <= 0 || j->array_max <= 0 || limit_of(p, j->array_of))
            continue;
        if (p->n % 8 == 0) {
            limit_t *more = realloc(p->arrays, (p->n + 8) * sizeof(*more));
            if (!more) {
                br_arrays_pass_destroy(&p);
                return NULL;
            }
            p->arrays = more;
        }
        p->arrays[p->n++] = (limit_t){.id = j->array_of, .max = j->array_max};
    }
    if (p->n == 0) {
        br_arrays_pass_destroy(&p);
        return NULL;
    }
    for (br_job_t *j = br_jobtab_first(jobs); j; j = j->next) {
        limit_t *l = j->array_of > 0 && br_job_state_live(j->state)
                         ? limit_of(p, j->array_of)
                         : NULL;
        if (l)
            l->placed++;
    }
    return p;
}

void br_arrays_pass_destroy(br_arrays_pass_t **p)
{
    if (p && *p) {
        free((*p)->arrays);
        free(*p);
        *p = NULL;
    }
}

int br_arrays_hold_back(br_arrays_pass_t *p, br_job_t *job, br_sched_decision_t *d,
                        size_t i)
{
    if (!p)
        return 0;
    for (; p->seen < i; p->seen++) { /* what the pass placed since the last call */
        const br_sched_decision_t *e = &d[p->seen];
        limit_t *l = e->verdict == BR_SCHED_PLACE && e->job && e->job->array_of > 0
                         ? limit_of(p, e->job->array_of)
                         : NULL;
        if (l)
            l->placed++;
    }
    limit_t *l = job->array_of > 0 ? limit_of(p, job->array_of) : NULL;
    if (!l || l->placed < l->max)
        return 0;
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "waiting: array %lld runs %d at once (%%%d)",
             (long long)l->id, l->max, l->max);
    d[i].job = job;
    d[i].verdict = BR_SCHED_WAIT;
    d[i].reason = strdup(reason);
    return 1;
}
