/* services.c - service jobs and their replicas: submit, scale, health, endpoints. */
#include "services.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "util.h"

static const char *const live_states[] = {"pending", "starting", "running", NULL};

/* A bookkeeping column of a job's store row, or -1 when it has none. */
static json_int_t row_int(json_t *job, const char *key)
{
    json_t *v = json_object_get(job, key);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

int br_services_is_replica(json_t *job)
{
    return row_int(job, "service") > 0;
}

int br_services_is_service(json_t *job)
{
    return row_int(job, "replicas") >= 0;
}

int64_t br_services_backoff_ms(int64_t restarts)
{
    int64_t ms = BR_SERVICE_BACKOFF_MS;
    for (int64_t i = 1; i < restarts && ms < BR_SERVICE_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < BR_SERVICE_BACKOFF_MAX_MS ? ms : BR_SERVICE_BACKOFF_MAX_MS;
}

/* Add replica k of service (the stored service job). */
static int64_t add_replica(br_coord_t *c, json_t *service, int64_t service_id, int k,
                           br_err_t *err)
{
    char name[96];
    snprintf(name, sizeof(name), "%s.%d", json_string_value(json_object_get(service, "name")),
             k);
    json_t *job = json_pack("{s:s, s:s, s:O, s:O, s:O, s:O, s:I, s:s, s:i, s:I, s:i}",
                            "name", name, "kind", "service", "owner",
                            json_object_get(service, "owner"), "owner_id",
                            json_object_get(service, "owner_id"), "spec",
                            json_object_get(service, "spec"), "spec_yaml",
                            json_object_get(service, "spec_yaml"), "submitted",
                            (json_int_t)br_now_ms(), "state", "pending", "attempt", 1,
                            "service", (json_int_t)service_id, "replica", k);
    br_job_t *added = job ? br_jobs_add(c, job, err) : NULL;
    int64_t id = added ? added->id
             : job   ? -1
                     : br_errf(err, EINVAL, "service %lld: incomplete job object",
                               (long long)service_id);
    json_decref(job);
    if (id > 0)
        br_coord_event(c, id, NULL, "pending", "replica %d of service %lld", k,
                       (long long)service_id);
    return id;
}

int64_t br_services_submit(br_coord_t *c, json_t *job, int replicas, br_err_t *err)
{
    json_t *service = json_deep_copy(job);
    json_object_set_new(service, "state", json_string("running"));
    json_object_set_new(service, "reason", json_sprintf("a service of %d replica%s", replicas,
                                                        replicas == 1 ? "" : "s"));
    json_object_set_new(service, "replicas", json_integer(replicas));
    br_job_t *added = br_jobs_add(c, service, err);
    int64_t id = added ? added->id : -1;
    if (id > 0) {
        br_coord_event(c, id, NULL, "running", "service of %d replica%s submitted by %s",
                       replicas, replicas == 1 ? "" : "s",
                       json_string_value(json_object_get(job, "owner")));
        for (int k = 0; k < replicas && id > 0; k++)
            if (add_replica(c, service, id, k, err) < 0)
                id = -1;
    }
    json_decref(service);
    return id;
}

json_t *br_services_find(br_coord_t *c, const char *name, int64_t owner_id,
                         br_err_t *err)
{
    json_t *found = NULL;
    for (br_job_t *j = br_jobtab_first(c->jobs); j && !found; j = j->next)
        if (j->replicas >= 0 && j->state == BR_JOB_RUNNING && strcmp(j->name, name) == 0)
            found = br_store_job_get(c->store, j->id, err); /* whole: the spec as written */
    if (!found)
        return br_errp(err, ENOENT, "no running service named '%s'", name);
    if (owner_id &&
        json_integer_value(json_object_get(found, "owner_id")) != (json_int_t)owner_id) {
        json_decref(found);
        return br_errp(err, EACCES, "service '%s' is not yours", name);
    }
    return found;
}

static int by_replica(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    return (int)(row_int(a, "replica") - row_int(b, "replica"));
}

json_t *br_services_replicas(br_coord_t *c, int64_t service_id)
{
    json_t *jobs = br_store_job_list(c->store, live_states, 0, NULL);
    json_t *mine = json_array();
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job) {
        if (row_int(job, "service") == service_id)
            json_array_append(mine, job);
    }
    json_decref(jobs);
    size_t n = json_array_size(mine);
    json_t **order = n ? malloc(n * sizeof(*order)) : NULL;
    for (i = 0; order && i < n; i++)
        order[i] = json_incref(json_array_get(mine, i));
    if (order) {
        qsort(order, n, sizeof(*order), by_replica);
        json_array_clear(mine);
        for (i = 0; i < n; i++)
            json_array_append_new(mine, order[i]);
        free(order);
    }
    return mine;
}

int br_services_scale(br_coord_t *c, json_t *service, int replicas, br_err_t *err)
{
    int64_t id = json_integer_value(json_object_get(service, "id"));
    json_t *have = br_services_replicas(c, id);
    int count = (int)json_array_size(have), next = 0;
    size_t i;
    json_t *r;
    json_array_foreach(have, i, r) {
        if (row_int(r, "replica") >= next)
            next = (int)row_int(r, "replica") + 1;
    }
    for (int k = count; k > replicas; k--) { /* the highest numbered go first */
        json_t *gone = json_array_get(have, (size_t)k - 1);
        json_t *done = br_jobs_cancel(c, json_integer_value(json_object_get(gone, "id")), err);
        json_decref(done);
    }
    for (int k = count; k < replicas; k++)
        if (add_replica(c, service, id, next++, err) < 0) {
            json_decref(have);
            return -1;
        }
    json_decref(have);
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (!job)
        return br_errf(err, ENOENT, "service %lld has ended", (long long)id);
    char reason[64];
    snprintf(reason, sizeof(reason), "a service of %d replica%s", replicas,
             replicas == 1 ? "" : "s");
    job->replicas = replicas;
    br_job_set_reason(job, reason);
    br_job_save(c, job);
    br_coord_event(c, id, NULL, "running", "scaled from %d to %d replica%s", count, replicas,
                   replicas == 1 ? "" : "s");
    return replicas;
}

void br_services_cancel(br_coord_t *c, json_t *service)
{
    json_t *have = br_services_replicas(c, json_integer_value(json_object_get(service, "id")));
    size_t i;
    json_t *r;
    json_array_foreach(have, i, r) {
        br_err_t err;
        json_decref(br_jobs_cancel(c, json_integer_value(json_object_get(r, "id")), &err));
    }
    json_decref(have);
}

struct br_services {
    json_t *health; /* replicas' health as their agents last said: {"job id": ...} */
};

const char *br_services_health_of(br_coord_t *c, int64_t id)
{
    char key[24];
    snprintf(key, sizeof(key), "%lld", (long long)id);
    return json_string_value(json_object_get(c->services->health, key));
}

/* The replica's attempt ended: its health is unknown until its next one says. */
static void forget(br_coord_t *c, int64_t id)
{
    char key[24];
    snprintf(key, sizeof(key), "%lld", (long long)id);
    json_object_del(c->services->health, key);
}

/* Where a replica answers: its node's address and the port its agent gave it. */
static json_t *endpoint_of(br_coord_t *c, json_t *job)
{
    const char *node = json_string_value(json_array_get(json_object_get(job, "nodes"), 0));
    br_node_t *n = node ? br_nodes_find(c->nodes, node) : NULL;
    json_int_t port = json_integer_value(json_object_get(json_object_get(job, "assign"), "port"));
    const char *host = n ? json_string_value(json_object_get(n->info, "address")) : NULL;
    if (!host || port <= 0)
        return NULL;
    return json_pack("{s:s, s:I, s:s, s:I, s:I}", "host", host, "port", port, "node", node,
                     "replica", row_int(job, "replica"), "id",
                     json_integer_value(json_object_get(job, "id")));
}

json_t *br_services_endpoints(br_coord_t *c, json_t *service)
{
    json_t *have = br_services_replicas(c, json_integer_value(json_object_get(service, "id")));
    json_t *out = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(have, i, r) {
        const char *h = br_services_health_of(c, json_integer_value(json_object_get(r, "id")));
        const char *st = json_string_value(json_object_get(r, "state"));
        json_t *e = strcmp(st, "running") == 0 && h && strcmp(h, "healthy") == 0
                        ? endpoint_of(c, r)
                        : NULL;
        if (e)
            json_array_append_new(out, e);
    }
    json_decref(have);
    return out;
}

static void set_health(br_coord_t *c, br_job_t *job, br_node_t *n, const char *health)
{
    int64_t id = job->id;
    const char *was = br_services_health_of(c, id);
    if (!health || (was && strcmp(was, health) == 0))
        return;
    char key[24];
    snprintf(key, sizeof(key), "%lld", (long long)id);
    json_object_set_new(c->services->health, key, json_string(health));
    br_coord_event(c, id, n->name, br_job_state_name(job->state),
                   "replica %d %s on %s (port %d)", job->replica, health, n->name, job->port);
    if (strcmp(health, "healthy") == 0 && job->restarts > 0) {
        job->restarts = 0; /* backoff over */
        br_job_save(c, job);
    }
}

/* A replica's port and health while it runs (its attempt's), else nulls. */
static void set_port_health(br_coord_t *c, json_t *job, json_t *out)
{
    const char *h = br_services_health_of(c, json_integer_value(json_object_get(job, "id")));
    const char *st = json_string_value(json_object_get(job, "state"));
    json_int_t port = json_integer_value(json_object_get(json_object_get(job, "assign"), "port"));
    int live = st && (strcmp(st, "starting") == 0 || strcmp(st, "running") == 0);
    json_object_set_new(out, "port", live && port > 0 ? json_integer(port) : json_null());
    json_object_set_new(out, "health", live && h ? json_string(h) : json_null());
}

void br_services_annotate(br_coord_t *c, json_t *job, json_t *out)
{
    if (br_services_is_replica(job)) {
        json_object_set_new(out, "service", json_integer(row_int(job, "service")));
        json_object_set_new(out, "replica", json_integer(row_int(job, "replica")));
        set_port_health(c, job, out);
    } else if (br_services_is_service(job)) {
        json_t *have = br_services_replicas(c, json_integer_value(json_object_get(job, "id")));
        json_t *list = json_array();
        size_t i;
        json_t *r;
        json_array_foreach(have, i, r) {
            json_t *node = json_array_get(json_object_get(r, "nodes"), 0);
            json_t *one = json_pack("{s:I, s:O, s:O, s:O, s:O}", "replica",
                                    row_int(r, "replica"), "id", json_object_get(r, "id"),
                                    "state", json_object_get(r, "state"), "reason",
                                    json_object_get(r, "reason"), "node",
                                    node ? node : json_null());
            set_port_health(c, r, one);
            json_array_append_new(list, one);
        }
        json_decref(have);
        json_object_set_new(out, "replicas", list);
        json_object_set_new(out, "replicas_wanted", json_integer(row_int(job, "replicas")));
    }
}

/* A replica's attempt ended: a service runs until it is cancelled, so it starts
 * again, after a backoff unless its node was lost. */
static void on_attempt_ended(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    if (a->job->service <= 0)
        return;
    int lost = a->cause && strcmp(a->cause, "node_lost") == 0;
    forget(c, a->job->id);
    a->restart = 1;
    a->delay_ms = lost ? 0 : br_services_backoff_ms(a->job->restarts + 1);
    snprintf(a->text, sizeof(a->text), "%s",
             a->cause ? a->reason : "exited 0 (a service runs until cancelled)");
}

/* Its agent's word on a running replica (no health check: running is healthy). */
static void on_task(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    if (a->job->service <= 0 || !br_job_state_live(a->job->state))
        return;
    const char *h = json_string_value(json_object_get(a->task, "health"));
    set_health(c, a->job, a->node, h ? h : "healthy");
}

static void on_left(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    forget(c, a->job->id);
}

br_services_t *br_services_new(br_coord_t *c)
{
    br_services_t *s = calloc(1, sizeof(*s));
    if (!s || !(s->health = json_object()) ||
        br_hooks_add(c->hooks, BR_HOOK_ATTEMPT_ENDED, on_attempt_ended, s) < 0 ||
        br_hooks_add(c->hooks, BR_HOOK_TASK_REPORTED, on_task, s) < 0 ||
        br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_left, s) < 0) {
        if (s)
            json_decref(s->health);
        free(s);
        return NULL;
    }
    return s;
}

void br_services_destroy(br_services_t **sp)
{
    br_services_t *s = sp ? *sp : NULL;
    if (!s)
        return;
    json_decref(s->health);
    free(s);
    *sp = NULL;
}
