/* autoscale.c - the replica count of autoscaled services, set from their load. */
#include "autoscale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwload.h"
#include "hooks.h"
#include "jobtab.h"
#include "services.h"
#include "util.h"

typedef struct {
    int64_t id;
    br_autoscale_track_t t;
} tracked_t;

struct br_autoscale {
    tracked_t *v;
    size_t n, cap;
};

int br_autoscale_spec_of(const json_t *spec, br_autoscale_spec_t *as)
{
    json_t *a = json_object_get(json_object_get(spec, "service"), "autoscale");
    memset(as, 0, sizeof(*as));
    if (!json_is_object(a))
        return 0;
    as->on = 1;
    as->min = (int)json_integer_value(json_object_get(a, "min"));
    as->max = (int)json_integer_value(json_object_get(a, "max"));
    as->target_inflight = (int)json_integer_value(json_object_get(a, "target_inflight"));
    as->up_after_ms = json_integer_value(json_object_get(a, "up_after"));
    as->down_after_ms = json_integer_value(json_object_get(a, "down_after"));
    as->cold_start_ms = json_integer_value(json_object_get(a, "cold_start_timeout"));
    if (as->target_inflight < 1)
        as->target_inflight = 1;
    return 1;
}

static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

int br_autoscale_wants(const br_autoscale_spec_t *as, int load)
{
    int want = (load + as->target_inflight - 1) / as->target_inflight;
    return want < as->min ? as->min : want > as->max ? as->max : want;
}

/* One side asked for now (more: up), at want for load: 1 once it has been asked for
 * after_ms, and its wait starts again. */
static int lasted(br_autoscale_side_t *s, int more, int want, int load, int64_t now_ms,
                  int64_t after_ms)
{
    if (!s->since) {
        s->since = now_ms;
        s->count = want;
        s->load = load;
    }
    if (more ? want < s->count : want > s->count)
        s->count = want;
    if (more ? load < s->load : load > s->load)
        s->load = load;
    if (now_ms - s->since < after_ms)
        return 0;
    s->since = 0;
    return 1;
}

/* Why a side that lasted set the count ("at least" or "at most" its load). */
static void say(char *why, size_t len, const char *bound, int load, int64_t after_ms,
                int target)
{
    char span[32];
    snprintf(why, len,
             "autoscale: %s %d request%s in flight or waiting for %s (target %d a replica)",
             bound, load, plural(load), br_format_duration(after_ms, span, sizeof(span)),
             target);
}

int br_autoscale_decide(const br_autoscale_spec_t *as, br_autoscale_track_t *t, int have,
                        int load, int pending, int64_t now_ms, char *why, size_t why_len)
{
    int want = br_autoscale_wants(as, load);
    if (want > have) {
        t->down.since = 0;
        if (have == 0) { /* a cold start: a request waits for it now */
            t->up.since = 0;
            if (load > 0)
                snprintf(why, why_len, "autoscale: %d request%s wait%s for a replica of a "
                                       "service at 0 (a cold start)",
                         load, plural(load), load == 1 ? "s" : "");
            else
                snprintf(why, why_len, "autoscale: at least %d", as->min);
            return want;
        }
        if (pending) { /* the last ones are not placed yet: more would wait too */
            t->up.since = 0;
            return -1;
        }
        if (!lasted(&t->up, 1, want, load, now_ms, as->up_after_ms))
            return -1;
        say(why, why_len, "at least", t->up.load, as->up_after_ms, as->target_inflight);
        return t->up.count;
    }
    if (want < have) {
        t->up.since = 0;
        if (!lasted(&t->down, 0, want, load, now_ms, as->down_after_ms))
            return -1;
        say(why, why_len, "at most", t->down.load, as->down_after_ms, as->target_inflight);
        return t->down.count;
    }
    t->up.since = t->down.since = 0;
    return -1;
}

static br_autoscale_track_t *track_of(br_autoscale_t *a, int64_t id)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].id == id)
            return &a->v[i].t;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        tracked_t *v = realloc(a->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        a->v = v;
        a->cap = cap;
    }
    memset(&a->v[a->n], 0, sizeof(a->v[0]));
    a->v[a->n].id = id;
    return &a->v[a->n++].t;
}

static void untrack(br_autoscale_t *a, int64_t id)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].id == id) {
            a->v[i] = a->v[--a->n];
            return;
        }
}

/* How many of the service's replicas wait to be placed. */
static int pending_of(br_coord_t *c, int64_t service_id)
{
    int n = 0;
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        n += j->service == service_id && j->state == BR_JOB_PENDING;
    return n;
}

/* Decide for one service; 1 when its count was set. */
static int decide_one(br_coord_t *c, br_job_t *j, int64_t now_ms)
{
    br_autoscale_spec_t as;
    br_autoscale_track_t *t = br_autoscale_spec_of(j->spec, &as)
                                  ? track_of(c->autoscale, j->id)
                                  : NULL;
    if (!t)
        return 0;
    int inflight, waiting;
    br_gwload_service(c->gwload, j->id, now_ms, &inflight, &waiting);
    int load = inflight + waiting;
    /* (whether some wait to be placed matters only to a rise from more than 0) */
    int pending = j->replicas > 0 && br_autoscale_wants(&as, load) > j->replicas
                      ? pending_of(c, j->id)
                      : 0;
    char why[300];
    int n = br_autoscale_decide(&as, t, j->replicas, load, pending, now_ms, why, sizeof(why));
    if (n < 0 || n == j->replicas)
        return 0;
    br_err_t err;
    int64_t id = j->id;
    json_t *row = br_store_job_get(c->store, id, &err);
    if (!row || br_services_scale(c, row, n, why, &err) < 0)
        fprintf(stderr, "brambled: service %lld: autoscale to %d failed: %s\n", (long long)id,
                n, err.text);
    json_decref(row);
    return 1;
}

void br_autoscale_run(br_coord_t *c, int64_t now_ms)
{
    br_autoscale_t *a = c->autoscale;
    if (!br_gwload_fresh(c->gwload, now_ms)) { /* no load to read: nothing is decided */
        for (size_t i = 0; i < a->n; i++)
            memset(&a->v[i].t, 0, sizeof(a->v[i].t));
        return;
    }
    /* the services first: scaling adds jobs to the table walked */
    size_t n = 0, cap = br_jobtab_count(c->jobs);
    int64_t *ids = malloc((cap ? cap : 1) * sizeof(*ids));
    for (br_job_t *j = br_jobtab_first(c->jobs); ids && j; j = j->next)
        if (j->replicas >= 0 && j->state == BR_JOB_RUNNING)
            ids[n++] = j->id;
    for (size_t i = 0; ids && i < n; i++) {
        br_job_t *j = br_jobtab_find(c->jobs, ids[i]);
        if (j && j->state == BR_JOB_RUNNING)
            decide_one(c, j, now_ms);
    }
    free(ids);
}

json_t *br_autoscale_show(br_coord_t *c, int64_t service_id, const json_t *spec)
{
    br_autoscale_spec_t as;
    if (!br_autoscale_spec_of(spec, &as))
        return NULL;
    int64_t now = br_mono_ms();
    int inflight, waiting;
    br_gwload_service(c->gwload, service_id, now, &inflight, &waiting);
    int want = br_autoscale_wants(&as, inflight + waiting);
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "min", as.min, "max", as.max,
                     "target_inflight", as.target_inflight, "inflight", inflight, "waiting",
                     waiting, "gateways", br_gwload_fresh(c->gwload, now), "wants", want);
}

static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    (void)ctx;
    br_autoscale_run(c, br_mono_ms());
}

static void on_left(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    if (a->job->replicas >= 0)
        untrack(ctx, a->job->id);
}

br_autoscale_t *br_autoscale_new(br_coord_t *c)
{
    br_autoscale_t *a = calloc(1, sizeof(*a));
    if (a && (br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, a) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_left, a) < 0)) {
        free(a);
        a = NULL;
    }
    return a;
}

void br_autoscale_destroy(br_autoscale_t **ap)
{
    br_autoscale_t *a = ap ? *ap : NULL;
    if (!a)
        return;
    free(a->v);
    free(a);
    *ap = NULL;
}
