/* fairshare.c - a pass's order: each owner's pending jobs in a queue of their
 * own, the owners in a heap by the score of their next job (fairshare.h). */
#include "fairshare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One owner's pending jobs and standing for this pass. */
typedef struct {
    br_user_use_t *use; /* NULL: an owner the ledger does not know, or no ledger */
    int64_t owner;
    br_job_t **jobs;    /* priority, then id */
    size_t n, next;
    double gpu_now, cpu_now, fairshare;
    int jobs_live, gpus_held;
} owner_t;

struct br_fairshare {
    owner_t *owners;
    size_t nowners;
    size_t *heap; /* owners with jobs left, by their next job's score */
    size_t nheap;
    br_job_t **order; /* every job, grouped by owner */
    double gpu_total, cpu_total, share_total;
    int64_t now_ms;
    int fair;        /* a ledger was given */
    size_t given;    /* owners[given] gave the last job (nowners: none) */
};

static double job_age(const br_fairshare_t *f, const br_job_t *job)
{
    double age = (double)(f->now_ms - job->submitted) / BR_FAIRSHARE_AGE_STEP_MS;
    return age < 0 ? 0 : age > BR_FAIRSHARE_AGE_MAX ? BR_FAIRSHARE_AGE_MAX : age;
}

static int job_priority(const owner_t *o, const br_job_t *job)
{
    int cap = o->use && !o->use->admin ? o->use->lim.max_priority : BR_NO_CAP;
    return job->priority > cap ? cap : job->priority;
}

static void work_out_share(const br_fairshare_t *f, owner_t *o)
{
    if (!f->fair) {
        o->fairshare = 1;
        return;
    }
    double use = 0;
    if (f->gpu_total > 0)
        use = o->gpu_now / f->gpu_total;
    if (f->cpu_total > 0 && o->cpu_now / f->cpu_total > use)
        use = o->cpu_now / f->cpu_total;
    double share = (o->use ? o->use->lim.share : 1) / f->share_total;
    o->fairshare = exp2(-use / share);
}

static br_score_t score_of(const br_fairshare_t *f, const owner_t *o, const br_job_t *job)
{
    br_score_t s = {.priority = 1000.0 * job_priority(o, job),
                    .fairshare = 1000.0 * o->fairshare,
                    .age = job_age(f, job)};
    s.total = s.priority + s.fairshare + s.age;
    return s;
}

/* Is owner a's next job before owner b's? */
static int before(const br_fairshare_t *f, size_t a, size_t b)
{
    const owner_t *x = &f->owners[a], *y = &f->owners[b];
    const br_job_t *jx = x->jobs[x->next], *jy = y->jobs[y->next];
    double sx = score_of(f, x, jx).total, sy = score_of(f, y, jy).total;
    if (sx != sy)
        return sx > sy;
    if (x->jobs_live != y->jobs_live)
        return x->jobs_live < y->jobs_live;
    return jx->id < jy->id;
}

static void heap_push(br_fairshare_t *f, size_t owner)
{
    size_t i = f->nheap++;
    f->heap[i] = owner;
    while (i > 0 && before(f, f->heap[i], f->heap[(i - 1) / 2])) {
        size_t p = (i - 1) / 2, t = f->heap[p];
        f->heap[p] = f->heap[i];
        f->heap[i] = t;
        i = p;
    }
}

static size_t heap_pop(br_fairshare_t *f)
{
    size_t top = f->heap[0];
    f->heap[0] = f->heap[--f->nheap];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < f->nheap && before(f, f->heap[l], f->heap[m]))
            m = l;
        if (r < f->nheap && before(f, f->heap[r], f->heap[m]))
            m = r;
        if (m == i)
            break;
        size_t t = f->heap[m];
        f->heap[m] = f->heap[i];
        f->heap[i] = t;
        i = m;
    }
    return top;
}

static int by_owner(const void *x, const void *y)
{
    const br_job_t *a = *(br_job_t *const *)x, *b = *(br_job_t *const *)y;
    if (a->owner_id != b->owner_id)
        return a->owner_id < b->owner_id ? -1 : 1;
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int by_priority(const void *x, const void *y)
{
    const br_job_t *a = *(br_job_t *const *)x, *b = *(br_job_t *const *)y;
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

br_fairshare_t *br_fairshare_new(br_usage_t *u, br_job_t *const *jobs, size_t n,
                                 int64_t now_ms)
{
    br_fairshare_t *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->now_ms = now_ms;
    f->fair = u != NULL;
    f->order = malloc((n ? n : 1) * sizeof(*f->order));
    f->owners = calloc(n ? n : 1, sizeof(*f->owners));
    f->heap = malloc((n ? n : 1) * sizeof(*f->heap));
    if (!f->order || !f->owners || !f->heap) {
        br_fairshare_destroy(&f);
        return NULL;
    }
    memcpy(f->order, jobs, n * sizeof(*jobs));
    /* no ledger: one queue of every job, by priority then age */
    qsort(f->order, n, sizeof(*jobs), u ? by_owner : by_priority);
    size_t users_n = 0;
    br_user_use_t *users = u ? br_usage_users(u, &users_n) : NULL;
    f->share_total = 0;
    for (size_t i = 0; i < users_n; i++) {
        f->gpu_total += users[i].gpu_now;
        f->cpu_total += users[i].cpu_now;
        f->share_total += users[i].lim.share;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (u && j < n && f->order[j]->owner_id == f->order[i]->owner_id)
            j++;
        if (!u)
            j = n;
        owner_t *o = &f->owners[f->nowners++];
        o->owner = f->order[i]->owner_id;
        o->use = u ? br_usage_user(u, o->owner) : NULL;
        if (!o->use)
            f->share_total += u ? 1 : 0; /* an owner it does not know: one share */
        o->jobs = &f->order[i];
        o->n = j - i;
        if (o->use) {
            o->gpu_now = o->use->gpu_now;
            o->cpu_now = o->use->cpu_now;
            o->jobs_live = o->use->jobs_live;
            o->gpus_held = o->use->gpus_held;
        }
        i = j;
    }
    if (f->share_total <= 0)
        f->share_total = 1;
    for (size_t i = 0; i < f->nowners; i++) {
        work_out_share(f, &f->owners[i]);
        heap_push(f, i);
    }
    f->given = f->nowners;
    return f;
}

void br_fairshare_destroy(br_fairshare_t **f)
{
    if (f && *f) {
        free((*f)->order);
        free((*f)->owners);
        free((*f)->heap);
        free(*f);
        *f = NULL;
    }
}

/* Why o's limits hold job back, into limit; 0 when they do not. */
static int held_back(const owner_t *o, const br_job_t *job, char *limit, size_t len)
{
    const br_user_use_t *x = o->use;
    if (!x || x->admin)
        return 0;
    int gpus = br_job_gpus(job->spec);
    if (x->lim.max_jobs >= 0 && o->jobs_live >= x->lim.max_jobs)
        snprintf(limit, len, "waiting: %s's limit max-jobs %d (%d running)", x->name,
                 x->lim.max_jobs, o->jobs_live);
    else if (gpus > 0 && x->lim.max_gpus >= 0 && o->gpus_held + gpus > x->lim.max_gpus)
        snprintf(limit, len, "waiting: %s's limit max-gpus %d (%d held, this job needs %d)",
                 x->name, x->lim.max_gpus, o->gpus_held, gpus);
    else if (gpus > 0 && x->lim.gpu_hours_week >= 0 &&
             (double)x->week_gpu_ms / BR_USAGE_HOUR_MS >= x->lim.gpu_hours_week)
        snprintf(limit, len, "waiting: %s's limit gpu-hours-week %g (%.2f used in the last "
                             "7 days)", x->name, x->lim.gpu_hours_week,
                 (double)x->week_gpu_ms / BR_USAGE_HOUR_MS);
    else
        return 0;
    return 1;
}

br_job_t *br_fairshare_next(br_fairshare_t *f, br_score_t *score, char *limit, size_t len)
{
    if (f->given < f->nowners && f->owners[f->given].next < f->owners[f->given].n)
        heap_push(f, f->given); /* (with its share as the last placement left it) */
    f->given = f->nowners;
    if (len)
        limit[0] = '\0';
    if (f->nheap == 0)
        return NULL;
    size_t at = heap_pop(f);
    owner_t *o = &f->owners[at];
    br_job_t *job = o->jobs[o->next++];
    *score = score_of(f, o, job);
    f->given = at;
    held_back(o, job, limit, len);
    return job;
}

void br_fairshare_placed(br_fairshare_t *f, int gpus, int cpus)
{
    if (f->given >= f->nowners)
        return;
    owner_t *o = &f->owners[f->given];
    double g = (double)gpus * BR_USAGE_CHARGE_MS, c = (double)cpus * BR_USAGE_CHARGE_MS;
    o->gpu_now += g;
    o->cpu_now += c;
    f->gpu_total += g;
    f->cpu_total += c;
    o->jobs_live++;
    o->gpus_held += gpus;
    work_out_share(f, o);
}
