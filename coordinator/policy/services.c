/* services.c - service jobs and their replicas: submit, scale, health, endpoints. */
#include "services.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwload.h"
#include "jobs.h"
#include "util.h"
#include "hooks.h"
#include "jobtab.h"

struct br_services {
    json_t *health; /* replicas' health as their agents last said: {"job id": ...} */
    json_t *suspected; /* {"job id": monotonic ms a gateway's report was last taken} */
    json_t *draining;  /* {"job id": {"since": monotonic ms it began to drain,
                          "version": the routing table's then}} */
};

/* A replica's key in the services' own maps: its job id as text. */
static void id_key(int64_t id, char key[24])
{
    snprintf(key, 24, "%lld", (long long)id);
}

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
    json_object_set_new(service, "state", json_string("pending"));
    json_object_set_new(service, "reason", json_sprintf("a service of %d replica%s", replicas,
                                                        replicas == 1 ? "" : "s"));
    json_object_set_new(service, "replicas", json_integer(replicas));
    br_job_t *added = br_jobs_add(c, service, err);
    int64_t id = added ? added->id : -1;
    /* it runs no process: it runs once its replicas are asked for */
    if (id > 0 &&
        br_job_post(c, added, BR_JOB_RUNNING, NULL, "service of %d replica%s submitted by %s",
                    replicas, replicas == 1 ? "" : "s",
                    json_string_value(json_object_get(job, "owner"))) < 0)
        id = br_errf(err, EINVAL, "service %lld could not be started", (long long)id);
    if (id > 0) {
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
    const br_job_t *a = *(br_job_t *const *)x, *b = *(br_job_t *const *)y;
    return a->replica - b->replica;
}

/* The service's replicas that are not over (all current jobs, so in memory), by
 * replica number: a new array (free it) of *n; NULL when out of memory. */
static br_job_t **replicas_of(br_coord_t *c, int64_t service_id, size_t *n)
{
    size_t cap = br_jobtab_count(c->jobs);
    br_job_t **list = malloc((cap ? cap : 1) * sizeof(*list));
    *n = 0;
    for (br_job_t *j = br_jobtab_first(c->jobs); list && j; j = j->next)
        if (j->service == service_id && !br_job_state_ended(j->state))
            list[(*n)++] = j;
    if (list)
        qsort(list, *n, sizeof(*list), by_replica);
    return list;
}

/* Whether replica id drains (it gets no new requests, and stops once the ones it
 * holds end). */
static int is_draining(br_coord_t *c, int64_t id)
{
    char key[24];
    id_key(id, key);
    return json_object_get(c->services->draining, key) != NULL;
}

/* Whether the replica answers requests now: running, and healthy as its agent
 * last said. */
static int serving(br_coord_t *c, const br_job_t *r)
{
    const char *h = br_services_health_of(c, r->id);
    return r->state == BR_JOB_RUNNING && h && strcmp(h, "healthy") == 0;
}

/* Whether the service's replicas drain before they stop: it is behind the
 * gateway (it names a model), and a gateway reports what it holds. */
static int drains(br_coord_t *c, const br_job_t *service)
{
    json_t *sv = json_object_get(service->spec, "service");
    return json_is_string(json_object_get(sv, "model")) &&
           br_gwload_fresh(c->gwload, br_mono_ms()) > 0;
}

/* When a drain began: {"since": monotonic ms, "version": the routes' then}. */
static json_t *drain_mark(br_coord_t *c, int64_t now)
{
    return json_pack("{s:I, s:I}", "since", (json_int_t)now, "version",
                     (json_int_t)br_gwload_table_version(c->gwload));
}

/* A replica no longer wanted: drained when gateways may hold requests on it,
 * else stopped now. */
static void let_go(br_coord_t *c, br_job_t *r, int drain)
{
    if (!drain || !serving(c, r)) {
        br_err_t err;
        json_decref(br_jobs_cancel(c, r->id, 1, &err));
        return;
    }
    char key[24];
    id_key(r->id, key);
    if (json_object_get(c->services->draining, key))
        return;
    json_object_set_new(c->services->draining, key, drain_mark(c, br_mono_ms()));
    br_coord_event(c, r->id, r->nranks ? r->ranks[0].node : NULL,
                   br_job_state_name(r->state),
                   "replica %d draining: the gateways send it no new requests, and it stops "
                   "once the requests it holds end (at most %ds)",
                   r->replica, BR_SERVICES_DRAIN_MS / 1000);
}

int br_services_scale(br_coord_t *c, json_t *service, int replicas, const char *why,
                      br_err_t *err)
{
    int64_t id = json_integer_value(json_object_get(service, "id"));
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (!job)
        return br_errf(err, ENOENT, "service %lld has ended", (long long)id);
    int was = job->replicas, drain = drains(c, job);
    size_t count;
    br_job_t **have = replicas_of(c, id, &count);
    if (!have)
        return br_errf(err, ENOMEM, "service %lld: out of memory", (long long)id);
    int next = count ? have[count - 1]->replica + 1 : 0;
    for (size_t k = 0; k < count; k++) {
        br_job_t *r = have[k];
        char key[24];
        id_key(r->id, key);
        if (k >= (size_t)replicas) /* the highest numbered go first */
            let_go(c, r, drain);
        else if (json_object_get(c->services->draining, key)) {
            json_object_del(c->services->draining, key);
            br_coord_event(c, r->id, r->nranks ? r->ranks[0].node : NULL,
                           br_job_state_name(r->state),
                           "replica %d is wanted again: it takes new requests, no longer "
                           "draining",
                           r->replica);
        }
    }
    free(have); /* (the cancelled ones are freed only at the end of the wake) */
    for (size_t k = count; k < (size_t)replicas; k++)
        if (add_replica(c, service, id, next++, err) < 0)
            return -1;
    job = br_jobtab_find(c->jobs, id);
    if (!job)
        return br_errf(err, ENOENT, "service %lld has ended", (long long)id);
    char reason[64];
    snprintf(reason, sizeof(reason), "a service of %d replica%s", replicas,
             replicas == 1 ? "" : "s");
    job->replicas = replicas;
    br_job_set_reason(job, reason);
    br_job_save(c, job);
    br_coord_event(c, id, NULL, "running", "scaled from %d to %d replica%s%s%s", was, replicas,
                   replicas == 1 ? "" : "s", why ? ": " : "", why ? why : "");
    return replicas;
}

void br_services_cancel(br_coord_t *c, json_t *service)
{
    size_t n;
    br_job_t **have = replicas_of(c, json_integer_value(json_object_get(service, "id")), &n);
    for (size_t i = 0; i < n; i++) {
        br_err_t err;
        json_decref(br_jobs_cancel(c, have[i]->id, 1, &err));
    }
    free(have);
}

const char *br_services_health_of(br_coord_t *c, int64_t id)
{
    char key[24];
    id_key(id, key);
    return json_string_value(json_object_get(c->services->health, key));
}

/* The replica's attempt ended: its health is unknown until its next one says. */
static void forget(br_coord_t *c, int64_t id)
{
    char key[24];
    id_key(id, key);
    json_object_del(c->services->health, key);
    json_object_del(c->services->suspected, key);
}

/* Where a running replica answers: its node's address and the port its agent gave
 * it; NULL when either is not known. */
static json_t *endpoint_of(br_coord_t *c, const br_job_t *job)
{
    const char *node = job->nranks ? job->ranks[0].node : NULL;
    br_node_t *n = node ? br_nodes_find(c->nodes, node) : NULL;
    const char *host = n ? json_string_value(json_object_get(n->info, "address")) : NULL;
    if (!host || job->port <= 0)
        return NULL;
    return json_pack("{s:s, s:i, s:s, s:i, s:I}", "host", host, "port", job->port, "node",
                     node, "replica", job->replica, "id", (json_int_t)job->id);
}

json_t *br_services_endpoints(br_coord_t *c, json_t *service)
{
    return br_services_endpoints_of(c, json_integer_value(json_object_get(service, "id")));
}

json_t *br_services_endpoints_of(br_coord_t *c, int64_t service_id)
{
    size_t n;
    br_job_t **have = replicas_of(c, service_id, &n);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *h = br_services_health_of(c, have[i]->id);
        json_t *e = have[i]->state == BR_JOB_RUNNING && h && strcmp(h, "healthy") == 0 &&
                            !is_draining(c, have[i]->id)
                        ? endpoint_of(c, have[i])
                        : NULL;
        if (e)
            json_array_append_new(out, e);
    }
    free(have);
    return out;
}

static void set_health(br_coord_t *c, br_job_t *job, br_node_t *n, const char *health)
{
    int64_t id = job->id;
    const char *was = br_services_health_of(c, id);
    if (!health || (was && strcmp(was, health) == 0))
        return;
    char key[24];
    id_key(id, key);
    json_object_set_new(c->services->health, key, json_string(health));
    br_coord_event(c, id, n->name, br_job_state_name(job->state),
                   "replica %d %s on %s (port %d)", job->replica, health, n->name, job->port);
    if (strcmp(health, "healthy") == 0 && job->restarts > 0) {
        job->restarts = 0; /* backoff over */
        br_job_save(c, job);
    }
}

/* Replica id's port and health while its attempt is on (it is in memory), else
 * nulls. */
static void set_port_health(br_coord_t *c, int64_t id, json_t *out)
{
    const br_job_t *job = br_jobtab_find(c->jobs, id);
    int live = job && br_job_state_live(job->state);
    const char *h = live ? br_services_health_of(c, id) : NULL;
    json_object_set_new(out, "port", live && job->port > 0 ? json_integer(job->port)
                                                           : json_null());
    json_object_set_new(out, "health", h ? json_string(h) : json_null());
}

void br_services_annotate(br_coord_t *c, json_t *job, json_t *out)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    if (br_services_is_replica(job)) {
        json_object_set_new(out, "service", json_integer(row_int(job, "service")));
        json_object_set_new(out, "replica", json_integer(row_int(job, "replica")));
        set_port_health(c, id, out);
        json_object_set_new(out, "draining", json_boolean(is_draining(c, id)));
    } else if (br_services_is_service(job)) {
        size_t n;
        br_job_t **have = replicas_of(c, id, &n);
        json_t *list = json_array();
        for (size_t i = 0; i < n; i++) {
            const br_job_t *r = have[i];
            json_t *one = json_pack(
                "{s:i, s:I, s:s, s:o, s:o}", "replica", r->replica, "id", (json_int_t)r->id,
                "state", br_job_state_name(r->state), "reason",
                r->reason ? json_string(r->reason) : json_null(), "node",
                r->nranks ? json_string(r->ranks[0].node) : json_null());
            set_port_health(c, r->id, one);
            json_object_set_new(one, "draining", json_boolean(is_draining(c, r->id)));
            json_array_append_new(list, one);
        }
        free(have);
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
    if (is_draining(c, a->job->id))
        a->delay_ms = BR_SERVICE_BACKOFF_MAX_MS; /* (the next tick stops it for good) */
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
    char key[24];
    id_key(a->job->id, key);
    forget(c, a->job->id);
    json_object_del(c->services->draining, key);
}

/* Draining replicas stop once no gateway holds a request on them (gwload.h), or
 * when they serve none anyway, or after BR_SERVICES_DRAIN_MS. */
static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_services_t *s = ctx;
    int64_t now = br_mono_ms();
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(s->draining, tmp, k, v) {
        char key[24];
        snprintf(key, sizeof(key), "%s", k);
        int64_t since = json_integer_value(json_object_get(v, "since"));
        int64_t version = json_integer_value(json_object_get(v, "version"));
        br_job_t *r = br_jobtab_find(c->jobs, strtoll(key, NULL, 10));
        if (!r || br_job_state_ended(r->state)) {
            json_object_del(s->draining, key);
            continue;
        }
        int held = 0;
        char text[160];
        const char *h = br_services_health_of(c, r->id);
        if (r->state != BR_JOB_RUNNING || (h && strcmp(h, "healthy") != 0))
            snprintf(text, sizeof(text), "it serves no requests now");
        else if (br_gwload_replica_idle(c->gwload, r->id, since, version, now, &held))
            snprintf(text, sizeof(text), "drained: no gateway holds a request on it");
        else if (now - since >= BR_SERVICES_DRAIN_MS)
            snprintf(text, sizeof(text), "%d request%s still in flight after %ds of draining",
                     held, held == 1 ? "" : "s", BR_SERVICES_DRAIN_MS / 1000);
        else
            continue;
        json_object_del(s->draining, key);
        br_coord_event(c, r->id, r->nranks ? r->ranks[0].node : NULL,
                       br_job_state_name(r->state), "replica %d stops: %s", r->replica, text);
        br_err_t err;
        json_decref(br_jobs_cancel(c, r->id, 1, &err));
    }
}

/* The jobs were read again: the replicas beyond their service's count drain (from
 * now: when they began is not kept). */
static void on_loaded(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_services_t *s = ctx;
    json_t *was = s->draining;
    s->draining = json_object();
    int64_t now = br_mono_ms();
    for (br_job_t *j = br_jobtab_first(c->jobs); j && s->draining; j = j->next) {
        if (j->replicas < 0 || j->state != BR_JOB_RUNNING)
            continue;
        size_t n;
        br_job_t **have = replicas_of(c, j->id, &n);
        for (size_t k = (size_t)j->replicas; have && k < n; k++) {
            char key[24];
            id_key(have[k]->id, key);
            json_t *since = json_object_get(was, key);
            json_object_set_new(s->draining, key,
                                since ? json_incref(since) : drain_mark(c, now));
        }
        free(have);
    }
    if (!s->draining)
        s->draining = json_incref(was);
    json_decref(was);
}

br_services_t *br_services_new(br_coord_t *c)
{
    br_services_t *s = calloc(1, sizeof(*s));
    if (!s || !(s->health = json_object()) || !(s->suspected = json_object()) ||
        !(s->draining = json_object()) ||
        br_hooks_add(c->hooks, BR_HOOK_ATTEMPT_ENDED, on_attempt_ended, s) < 0 ||
        br_hooks_add(c->hooks, BR_HOOK_TASK_REPORTED, on_task, s) < 0 ||
        br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_left, s) < 0 ||
        br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, s) < 0 ||
        br_hooks_add(c->hooks, BR_HOOK_LOADED, on_loaded, s) < 0) {
        if (s) {
            json_decref(s->health);
            json_decref(s->suspected);
            json_decref(s->draining);
        }
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
    json_decref(s->suspected);
    json_decref(s->draining);
    free(s);
    *sp = NULL;
}

int br_services_suspect(br_coord_t *c, int64_t id, int port, const char *gateway,
                        const char *why, int64_t now_ms, br_err_t *err)
{
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (!job || job->replicas >= 0 || job->replica < 0)
        return br_errf(err, ENOENT, "job %lld is no replica of a service", (long long)id);
    const char *h = br_services_health_of(c, id);
    const char *node = job->nranks ? job->ranks[0].node : NULL;
    br_node_t *n = node ? br_nodes_find(c->nodes, node) : NULL;
    if (job->state != BR_JOB_RUNNING || job->port != port || !n || !h ||
        strcmp(h, "healthy") != 0)
        return 0; /* another attempt by now, or out of the table already */
    char key[24];
    id_key(id, key);
    json_t *last = json_object_get(c->services->suspected, key);
    if (last && now_ms - json_integer_value(last) < BR_SERVICES_SUSPECT_MS)
        return 0; /* its agent checks it already */
    json_object_set_new(c->services->suspected, key, json_integer(now_ms));
    br_coord_send_node(c, n, "job.check",
                       json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", job->attempt));
    br_coord_event(c, id, n->name, br_job_state_name(job->state),
                   "replica %d on %s (port %d): gateway %s could not use it (%s); its agent "
                   "checks it now",
                   job->replica, n->name, port, gateway, why);
    return 0;
}
