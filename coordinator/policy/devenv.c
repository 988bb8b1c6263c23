/* devenv.c - dev environments stopped after idle_stop unused (devenv.h). */
#include "devenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "jobs.h"
#include "jobtab.h"
#include "relay.h"
#include "spec.h"
#include "util.h"

typedef struct {
    int64_t id;
    int64_t used;      /* monotonic ms it was last seen in use */
    int64_t idle_stop; /* ms, from its spec */
} watched_t;

struct br_devenv {
    watched_t *v;
    size_t n, cap;
};

static int is_dev(const br_job_t *job)
{
    return strcmp(job->kind, "dev") == 0;
}

static watched_t *find(br_devenv_t *d, int64_t id)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i].id == id)
            return &d->v[i];
    return NULL;
}

static void forget(br_devenv_t *d, int64_t id)
{
    watched_t *w = find(d, id);
    if (w)
        *w = d->v[--d->n];
}

/* Watch job from now on (again, from now, when it was). */
static void watch(br_devenv_t *d, const br_job_t *job, int64_t now)
{
    watched_t *w = find(d, job->id);
    if (!w) {
        if (d->n == d->cap) {
            size_t cap = d->cap ? 2 * d->cap : 8;
            watched_t *v = realloc(d->v, cap * sizeof(*v));
            if (!v)
                return; /* (out of memory: this one is not stopped when idle) */
            d->v = v;
            d->cap = cap;
        }
        w = &d->v[d->n++];
    }
    w->id = job->id;
    w->used = now;
    w->idle_stop = json_integer_value(json_object_get(job->spec, "idle_stop"));
    if (w->idle_stop <= 0) /* (a spec from before idle_stop was kept) */
        w->idle_stop = BR_SPEC_IDLE_STOP_MS;
}

static int streams_of(br_coord_t *c, int64_t id)
{
    return c->relay ? br_relay_job_streams(c->relay, id) : 0;
}

void br_devenv_touch(br_coord_t *c, int64_t job)
{
    watched_t *w = c->devenv ? find(c->devenv, job) : NULL;
    if (w)
        w->used = br_mono_ms();
}

void br_devenv_run(br_coord_t *c, int64_t now_ms)
{
    br_devenv_t *d = c->devenv;
    for (size_t i = 0; d && i < d->n;) {
        watched_t *w = &d->v[i];
        br_job_t *job = br_jobtab_find(c->jobs, w->id);
        if (!job || job->state != BR_JOB_RUNNING) {
            *w = d->v[--d->n];
            continue;
        }
        int64_t closed = c->relay ? br_relay_job_closed(c->relay, w->id) : 0;
        if (streams_of(c, w->id) > 0)
            w->used = now_ms;
        else if (closed > w->used)
            w->used = closed; /* (its last stream's end, not this look's time) */
        if (now_ms - w->used >= w->idle_stop && !job->stop.at_mono) {
            char span[32], why[160];
            snprintf(why, sizeof(why), "idle for %s (idle_stop): no shell, no forward "
                                       "connection and no output",
                     br_format_duration(w->idle_stop, span, sizeof(span)));
            br_jobs_stop_for(c, job, why);
        }
        i++;
    }
}

json_t *br_devenv_show(br_coord_t *c, int64_t job)
{
    watched_t *w = c->devenv ? find(c->devenv, job) : NULL;
    if (!w)
        return NULL;
    int streams = streams_of(c, job);
    int64_t idle = streams > 0 ? 0 : br_mono_ms() - w->used;
    return json_pack("{s:I, s:I, s:i}", "idle_stop", (json_int_t)w->idle_stop, "idle",
                     (json_int_t)(idle > 0 ? idle : 0), "streams", streams);
}

static void on_running(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    if (is_dev(a->job))
        watch(ctx, a->job, br_mono_ms());
}

static void on_left(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    forget(ctx, a->job->id);
}

/* After a start or a rollback: every running dev environment, idle from now. */
static void on_loaded(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_devenv_t *d = ctx;
    d->n = 0;
    int64_t now = br_mono_ms();
    for (br_job_t *job = br_jobtab_first(c->jobs); job; job = job->next)
        if (job->state == BR_JOB_RUNNING && is_dev(job))
            watch(d, job, now);
}

static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    (void)ctx;
    br_devenv_run(c, br_mono_ms());
}

br_devenv_t *br_devenv_new(br_coord_t *c)
{
    br_devenv_t *d = calloc(1, sizeof(*d));
    if (d && (br_hooks_add(c->hooks, BR_HOOK_JOB_RUNNING, on_running, d) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_left, d) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_LOADED, on_loaded, d) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, d) < 0)) {
        free(d);
        d = NULL;
    }
    return d;
}

void br_devenv_destroy(br_devenv_t **dp)
{
    br_devenv_t *d = dp ? *dp : NULL;
    if (!d)
        return;
    free(d->v);
    free(d);
    *dp = NULL;
}
