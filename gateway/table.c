/* table.c - the gateway's routing table (see table.h). */
#include "table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gw_table_t *gw_table_new(void)
{
    return calloc(1, sizeof(gw_table_t));
}

static void service_free(gw_service_t *s)
{
    for (size_t i = 0; i < s->nreplicas; i++)
        free(s->replicas[i]);
    free(s->replicas);
    json_decref(s->names);
    json_decref(s->aliases);
    free(s);
}

void gw_table_destroy(gw_table_t **tp)
{
    gw_table_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    for (size_t i = 0; i < t->nservices; i++)
        service_free(t->services[i]);
    free(t->services);
    free(t);
    *tp = NULL;
}

static gw_service_t *find_service(gw_table_t *t, int64_t id)
{
    for (size_t i = 0; i < t->nservices; i++)
        if (t->services[i]->id == id)
            return t->services[i];
    return NULL;
}

static gw_replica_t *find_replica(gw_service_t *s, int64_t id, const char *host, int port)
{
    for (size_t i = 0; i < s->nreplicas; i++) {
        gw_replica_t *r = s->replicas[i];
        if (r->id == id && r->port == port && strcmp(r->host, host) == 0)
            return r;
    }
    return NULL;
}

static int push(void *arrp, size_t *n, void *item)
{
    void ***arr = arrp;
    void **v = realloc(*arr, (*n + 1) * sizeof(**arr));
    if (!v)
        return -1;
    v[(*n)++] = item;
    *arr = v;
    return 0;
}

static void take_names(gw_service_t *s, const json_t *e)
{
    json_t *names = json_array();
    json_array_append_new(names, json_string(s->model));
    const char *lists[] = {"aliases", "adapters"};
    for (int k = 0; k < 2; k++) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(e, lists[k]), i, v)
            if (json_is_string(v))
                json_array_append(names, v);
    }
    json_decref(s->names);
    s->names = names;
    json_t *aliases = json_object_get(e, "aliases");
    json_decref(s->aliases);
    s->aliases = json_is_array(aliases) ? json_incref(aliases) : json_array();
}

static int take_replicas(gw_service_t *s, const json_t *list)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_int_t id = 0, replica = 0, port = 0;
        const char *host = NULL, *node = "";
        if (json_unpack(e, "{s:I, s:I, s:s, s:I, s?s}", "id", &id, "replica", &replica,
                        "host", &host, "port", &port, "node", &node) < 0 ||
            port < 1 || port > 65535 || strlen(host) >= 256)
            continue;
        gw_replica_t *r = find_replica(s, id, host, (int)port);
        if (!r) {
            if (!(r = calloc(1, sizeof(*r))) || push(&s->replicas, &s->nreplicas, r) < 0) {
                free(r);
                return -1;
            }
            r->id = id;
            r->port = (int)port;
            snprintf(r->host, sizeof(r->host), "%s", host);
            /* an IPv6 address goes in brackets in a URL */
            snprintf(r->base, sizeof(r->base), strchr(host, ':') ? "http://[%s]:%d"
                                                                 : "http://%s:%d",
                     host, r->port);
            r->svc = s;
            /* new to this gateway: on trial until it answers once (gw_replica_answered),
             * so that a burst routed to a replica whose server is not there (dead, or
             * not listening yet) tries it with one connection, not each with its own */
            r->trial = 1;
        }
        r->replica = (int)replica;
        snprintf(r->node, sizeof(r->node), "%s", node);
        r->present = 1;
    }
    return 0;
}

int gw_table_update(gw_table_t *t, int64_t version, const json_t *table)
{
    json_t *list = json_object_get(table, "services");
    if (!json_is_array(list))
        return -1;
    for (size_t i = 0; i < t->nservices; i++) {
        t->services[i]->present = 0;
        for (size_t k = 0; k < t->services[i]->nreplicas; k++)
            t->services[i]->replicas[k]->present = 0;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_int_t id = 0, owner_id = 0, max = 0, cold = 0;
        const char *name = NULL, *owner = "", *model = NULL;
        int pub = 0;
        if (json_unpack(e, "{s:I, s:s, s?s, s?I, s:s, s?I, s?b, s?I}", "id", &id, "name",
                        &name, "owner", &owner, "owner_id", &owner_id, "model", &model,
                        "max_inflight", &max, "public", &pub, "cold_start_ms", &cold) < 0)
            continue;
        gw_service_t *s = find_service(t, id);
        if (!s) {
            if (!(s = calloc(1, sizeof(*s))) || push(&t->services, &t->nservices, s) < 0) {
                free(s);
                return -1;
            }
            s->id = id;
        }
        snprintf(s->name, sizeof(s->name), "%s", name);
        snprintf(s->owner, sizeof(s->owner), "%s", owner);
        snprintf(s->model, sizeof(s->model), "%s", model);
        s->owner_id = owner_id;
        s->max_inflight = max > 0 ? (int)max : 0;
        s->is_public = pub;
        s->cold_start_ms = cold > 0 ? cold : 0;
        s->present = 1;
        take_names(s, e);
        if (take_replicas(s, json_object_get(e, "replicas")) < 0)
            return -1;
    }
    t->version = version;
    gw_table_sweep(t);
    return 0;
}

int gw_service_serves(const gw_service_t *svc, const char *model)
{
    size_t i;
    json_t *v;
    json_array_foreach(svc->names, i, v)
        if (strcmp(json_string_value(v), model) == 0)
            return 1;
    return 0;
}

int gw_service_alias(const gw_service_t *svc, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(svc->aliases, i, v)
        if (json_is_string(v) && strcmp(json_string_value(v), name) == 0)
            return 1;
    return 0;
}

/* A replica whose time out ended but has not answered since, or that closed the
 * connections kept to it, is on trial: it gets one request at a time until one is
 * answered (a burst routed to it by fewest in flight would each find it dead). */
static int usable(const gw_replica_t *r, int64_t now_ms)
{
    return r->present && r->svc->present && now_ms >= r->down_until &&
           !((r->fails > 0 || r->trial) && r->inflight > 0);
}

gw_replica_t *gw_service_pick(gw_service_t *svc, int64_t now_ms)
{
    gw_replica_t *best = NULL;
    size_t n = svc->nreplicas, at = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = (svc->next + k) % n;
        gw_replica_t *r = svc->replicas[i];
        if (!usable(r, now_ms) || (svc->max_inflight && r->inflight >= svc->max_inflight))
            continue;
        if (!best || r->inflight < best->inflight)
            best = r, at = i;
    }
    if (best) /* the next tie goes to the one after this one */
        svc->next = (at + 1) % n;
    return best;
}

int gw_service_has_up(const gw_service_t *svc, int64_t now_ms)
{
    for (size_t k = 0; k < svc->nreplicas; k++)
        if (usable(svc->replicas[k], now_ms))
            return 1;
    return 0;
}

void gw_replica_done(gw_replica_t *r, int ok, int64_t now_ms)
{
    if (r->inflight > 0)
        r->inflight--;
    if (ok) {
        r->fails = 0;
        r->trial = 0;
        r->down_until = 0;
        return;
    }
    int64_t wait = GW_DOWN_MS;
    for (int i = 0; i < r->fails && wait < GW_DOWN_MAX_MS; i++)
        wait *= 2;
    r->fails++;
    r->down_until = now_ms + (wait < GW_DOWN_MAX_MS ? wait : GW_DOWN_MAX_MS);
}

void gw_replica_release(gw_replica_t *r)
{
    if (r->inflight > 0)
        r->inflight--;
}

gw_replica_t *gw_table_replica(const gw_table_t *t, int64_t id, int port)
{
    for (size_t i = 0; i < t->nservices; i++)
        for (size_t k = 0; k < t->services[i]->nreplicas; k++) {
            gw_replica_t *r = t->services[i]->replicas[k];
            if (r->id == id && r->port == port)
                return r;
        }
    return NULL;
}

void gw_replica_suspect(gw_replica_t *r)
{
    r->trial = 1;
}

void gw_replica_refused(gw_replica_t *r, int64_t now_ms)
{
    if (r->down_until < now_ms + GW_DOWN_MS)
        r->down_until = now_ms + GW_DOWN_MS;
}

int gw_replica_may_open(gw_replica_t *r, int *opened, int64_t now_ms)
{
    if (now_ms < r->down_until)
        return 0;
    if (*opened || !(r->trial || r->fails > 0))
        return 1;
    if (r->opening)
        return 0;
    r->opening = *opened = 1;
    return 1;
}

void gw_replica_opened_done(gw_replica_t *r, int *opened)
{
    if (*opened && r)
        r->opening = 0;
    *opened = 0;
}

void gw_replica_answered(gw_replica_t *r, int *opened)
{
    r->fails = 0;
    r->trial = 0;
    r->down_until = 0;
    gw_replica_opened_done(r, opened);
}

void gw_table_sweep(gw_table_t *t)
{
    for (size_t i = 0; i < t->nservices;) {
        gw_service_t *s = t->services[i];
        for (size_t k = 0; k < s->nreplicas;) {
            gw_replica_t *r = s->replicas[k];
            if (!r->present && r->inflight == 0) {
                free(r);
                s->replicas[k] = s->replicas[--s->nreplicas];
            } else {
                k++;
            }
        }
        if (!s->present && s->nreplicas == 0 && s->waiting == 0) {
            service_free(s);
            t->services[i] = t->services[--t->nservices];
        } else {
            i++;
        }
    }
}

int gw_service_has_present(const gw_service_t *svc)
{
    for (size_t i = 0; i < svc->nreplicas; i++)
        if (svc->replicas[i]->present)
            return 1;
    return 0;
}

void gw_table_answered(gw_table_t *t, int64_t id, int status, double ms, int64_t now_ms)
{
    gw_service_t *s = find_service(t, id);
    if (!s)
        return;
    int64_t sec = now_ms / 1000;
    gw_second_t *w = &s->win[sec % GW_WINDOW_S];
    if (w->sec != sec)
        memset(w, 0, sizeof(*w));
    w->sec = sec;
    w->count++;
    w->errors += status >= 500 || status == 499;
    w->ms += ms;
}

json_t *gw_table_load(const gw_table_t *t, int64_t now_ms)
{
    json_t *out = json_array();
    int64_t sec = now_ms / 1000;
    for (size_t i = 0; out && i < t->nservices; i++) {
        const gw_service_t *s = t->services[i];
        int count = 0, errors = 0;
        double ms = 0;
        for (int k = 0; k < GW_WINDOW_S; k++)
            if (s->win[k].sec > sec - GW_WINDOW_S) {
                count += s->win[k].count;
                errors += s->win[k].errors;
                ms += s->win[k].ms;
            }
        json_t *reps = json_array();
        int inflight = 0;
        for (size_t k = 0; k < s->nreplicas; k++) {
            const gw_replica_t *r = s->replicas[k];
            inflight += r->inflight;
            json_array_append_new(reps, json_pack("{s:I, s:i, s:b}", "id", (json_int_t)r->id,
                                                  "inflight", r->inflight, "routed",
                                                  r->present && s->present));
        }
        json_array_append_new(
            out, json_pack("{s:I, s:i, s:i, s:f, s:f, s:f, s:o}", "id", (json_int_t)s->id,
                           "inflight", inflight, "waiting", s->waiting, "rate",
                           (double)count / GW_WINDOW_S, "errors",
                           (double)errors / GW_WINDOW_S, "latency_ms",
                           count ? ms / count : 0.0, "replicas", reps));
    }
    return out;
}
