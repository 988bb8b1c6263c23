/* gwload.c - the gateways' last load reports, checked and summed. */
#include "gwload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[64];
    int64_t at_ms;     /* monotonic ms the report came */
    int64_t version;   /* the routing table's version the gateway had (0: unknown) */
    json_t *services;  /* as reported, checked */
} report_t;

struct br_gwload {
    report_t v[BR_GWLOAD_MAX];
    int n;
    int64_t table_version; /* the routing table's as last made */
};

br_gwload_t *br_gwload_new(void)
{
    return calloc(1, sizeof(br_gwload_t));
}

void br_gwload_destroy(br_gwload_t **lp)
{
    br_gwload_t *l = lp ? *lp : NULL;
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        json_decref(l->v[i].services);
    free(l);
    *lp = NULL;
}

/* A count in a report: an integer from 0 to 10^9, else -1. */
static json_int_t count_of(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : -1;
    return n >= 0 && n <= 1000000000 ? n : -1;
}

/* An optional figure of a report: absent, or a number from 0 to 10^9. */
static int figure_ok(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return !v || (json_is_number(v) && json_number_value(v) >= 0 &&
                  json_number_value(v) <= 1e9);
}

static int check(const json_t *services, br_err_t *err)
{
    if (!json_is_array(services) || json_array_size(services) > BR_GWLOAD_SERVICES_MAX)
        return br_errf(err, EPROTO, "gateway.load: services must be an array of at most %d",
                       BR_GWLOAD_SERVICES_MAX);
    size_t i, k;
    json_t *s, *r;
    json_array_foreach(services, i, s) {
        json_t *reps = json_object_get(s, "replicas");
        if (count_of(s, "id") <= 0 || count_of(s, "inflight") < 0 ||
            count_of(s, "waiting") < 0 || !json_is_array(reps) ||
            json_array_size(reps) > BR_GWLOAD_REPLICAS_MAX || !figure_ok(s, "rate") ||
            !figure_ok(s, "errors") || !figure_ok(s, "latency_ms"))
            return br_errf(err, EPROTO,
                           "gateway.load: services[%zu] must be {id, inflight, waiting, "
                           "rate?, errors?, latency_ms?, replicas: [...]} with counts of 0 "
                           "or more",
                           i);
        json_array_foreach(reps, k, r)
            if (count_of(r, "id") <= 0 || count_of(r, "inflight") < 0 ||
                !json_is_boolean(json_object_get(r, "routed")))
                return br_errf(err, EPROTO,
                               "gateway.load: services[%zu].replicas[%zu] must be {id, "
                               "inflight, routed}",
                               i, k);
    }
    return 0;
}

static report_t *find(const br_gwload_t *l, const char *gateway)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, gateway) == 0)
            return (report_t *)&l->v[i];
    return NULL;
}

int br_gwload_take(br_gwload_t *l, const char *gateway, const json_t *services,
                   int64_t version, int64_t now_ms, br_err_t *err)
{
    if (check(services, err) < 0)
        return -1;
    report_t *r = find(l, gateway);
    if (!r) {
        for (int i = 0; i < l->n && l->n == BR_GWLOAD_MAX; i++) /* one long silent goes */
            if (now_ms - l->v[i].at_ms >= BR_GWLOAD_FRESH_MS) {
                json_decref(l->v[i].services);
                l->v[i] = l->v[--l->n];
            }
        if (l->n == BR_GWLOAD_MAX)
            return br_errf(err, EBUSY, "gateway.load: %d gateways report already",
                           BR_GWLOAD_MAX);
        r = &l->v[l->n++];
        memset(r, 0, sizeof(*r));
        snprintf(r->name, sizeof(r->name), "%s", gateway);
    }
    json_decref(r->services);
    r->services = json_incref((json_t *)services);
    r->at_ms = now_ms;
    r->version = version > 0 ? version : 0;
    return 0;
}

void br_gwload_table_made(br_gwload_t *l, int64_t version)
{
    l->table_version = version;
}

int64_t br_gwload_table_version(const br_gwload_t *l)
{
    return l->table_version;
}

void br_gwload_forget(br_gwload_t *l, const char *gateway)
{
    report_t *r = find(l, gateway);
    if (!r)
        return;
    json_decref(r->services);
    *r = l->v[--l->n];
}

static int fresh(const report_t *r, int64_t now_ms)
{
    return now_ms - r->at_ms < BR_GWLOAD_FRESH_MS;
}

int br_gwload_fresh(const br_gwload_t *l, int64_t now_ms)
{
    int n = 0;
    for (int i = 0; i < l->n; i++)
        n += fresh(&l->v[i], now_ms);
    return n;
}

/* The entry of service id in a report's services, or NULL. */
static json_t *entry(const json_t *list, int64_t id)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
        if (json_integer_value(json_object_get(e, "id")) == id)
            return e;
    return NULL;
}

void br_gwload_service(const br_gwload_t *l, int64_t service, int64_t now_ms, int *inflight,
                       int *waiting)
{
    int64_t in = 0, wait = 0; /* (64 gateways of up to 10^9 each) */
    for (int i = 0; i < l->n; i++) {
        json_t *s = fresh(&l->v[i], now_ms) ? entry(l->v[i].services, service) : NULL;
        if (s) {
            in += json_integer_value(json_object_get(s, "inflight"));
            wait += json_integer_value(json_object_get(s, "waiting"));
        }
    }
    *inflight = in > 1000000000 ? 1000000000 : (int)in;
    *waiting = wait > 1000000000 ? 1000000000 : (int)wait;
}

void br_gwload_service_rates(const br_gwload_t *l, int64_t service, int64_t now_ms,
                             double *rate, double *errors, double *latency_ms)
{
    double weighted = 0;
    *rate = *errors = *latency_ms = 0;
    for (int i = 0; i < l->n; i++) {
        json_t *s = fresh(&l->v[i], now_ms) ? entry(l->v[i].services, service) : NULL;
        if (!s)
            continue;
        double r = json_number_value(json_object_get(s, "rate"));
        *rate += r;
        *errors += json_number_value(json_object_get(s, "errors"));
        weighted += r * json_number_value(json_object_get(s, "latency_ms"));
    }
    if (*rate > 0)
        *latency_ms = weighted / *rate;
}

int br_gwload_replica_idle(const br_gwload_t *l, int64_t replica, int64_t since_ms,
                           int64_t version, int64_t now_ms, int *inflight)
{
    int idle = 1, held = 0, heard = 0;
    for (int i = 0; i < l->n; i++) {
        const report_t *r = &l->v[i];
        if (!fresh(r, now_ms))
            continue;
        if (r->at_ms <= since_ms || r->version <= version)
            idle = 0; /* it may not have heard yet */
        else
            heard++;
        size_t k, q;
        json_t *s, *e;
        json_array_foreach(r->services, k, s) /* (one job may be there twice: two
                                                 attempts, on two ports) */
            json_array_foreach(json_object_get(s, "replicas"), q, e) {
                if (json_integer_value(json_object_get(e, "id")) != replica)
                    continue;
                int n = (int)json_integer_value(json_object_get(e, "inflight"));
                held += n;
                if (n > 0 || json_is_true(json_object_get(e, "routed")))
                    idle = 0;
            }
    }
    if (inflight)
        *inflight = held;
    return idle && heard > 0;
}
