/* routes.c - the gateways' routing table, and the gateways told when it changes. */
#include "routes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwload.h"
#include "jobtab.h"
#include "services.h"
#include "usage.h"
#include "util.h"

typedef struct {
    unsigned char route[BR_ROUTES_ROUTE_MAX];
    size_t route_len;
    char name[64];
    int64_t expires_ms; /* monotonic */
    int64_t seen;       /* wall ms of the last renewal */
    int64_t told;       /* the version it was last sent */
    int64_t keys_told;  /* ... and the version of the keys it was last sent */
} watch_t;

struct br_routes {
    watch_t v[BR_ROUTES_MAX];
    size_t n;
    char *text;      /* the table as last made (compact, sorted keys) */
    json_t *table;   /* ... and as JSON */
    int64_t version; /* grows by one with each change */
    int64_t made_ms; /* monotonic ms it was last made */
    json_t *keys;    /* the API keys as last read: [{"hash","user","user_id","models",
                        "rpm"}] */
    char *keys_text; /* ... as text */
    int keys_stale;  /* read them again at the next make */
    int64_t keys_version; /* the table's version when they last changed */
    char reports[BR_ROUTES_REPORTS][33]; /* the ids of the reports taken lately */
    size_t nreports;                     /* ... how many ever (the next slot, mod) */
};

br_routes_t *br_routes_new(void)
{
    br_routes_t *r = calloc(1, sizeof(br_routes_t));
    if (r) {
        r->keys_stale = 1;
        /* versions grow across restarts too: a gateway's report of a table it had
         * from before a restart never passes for a newer one (gwload.h) */
        r->version = br_now_ms();
    }
    return r;
}

void br_routes_keys_changed(br_routes_t *r)
{
    r->keys_stale = 1;
}

void br_routes_destroy(br_routes_t **rp)
{
    if (!rp || !*rp)
        return;
    free((*rp)->text);
    json_decref((*rp)->table);
    free((*rp)->keys_text);
    json_decref((*rp)->keys);
    free(*rp);
    *rp = NULL;
}

static json_t *service_route(br_coord_t *c, const br_job_t *j)
{
    json_t *sv = json_object_get(j->spec, "service");
    json_t *model = json_object_get(sv, "model");
    if (!json_is_string(model))
        return NULL; /* not behind the gateway */
    json_t *max = json_object_get(sv, "max_inflight");
    json_t *aliases = json_object_get(sv, "aliases"), *adapters = json_object_get(sv, "adapters");
    json_t *cold = json_object_get(json_object_get(sv, "autoscale"), "cold_start_timeout");
    return json_pack("{s:I, s:s, s:s, s:I, s:O, s:o, s:o, s:I, s:b, s:I, s:o}", "id",
                     (json_int_t)j->id, "name", j->name, "owner", j->owner ? j->owner : "",
                     "owner_id", (json_int_t)j->owner_id, "model", model, "aliases",
                     aliases ? json_incref(aliases) : json_array(), "adapters",
                     adapters ? json_incref(adapters) : json_array(), "max_inflight",
                     (json_int_t)(json_is_integer(max) ? json_integer_value(max) : 0),
                     "public", json_is_true(json_object_get(sv, "public")), "cold_start_ms",
                     (json_int_t)(json_is_integer(cold) ? json_integer_value(cold) : 0),
                     "replicas", br_services_endpoints_of(c, j->id));
}

static int by_id(const void *a, const void *b)
{
    int64_t x = json_integer_value(json_object_get(*(json_t *const *)a, "id"));
    int64_t y = json_integer_value(json_object_get(*(json_t *const *)b, "id"));
    return (x > y) - (x < y);
}

json_t *br_routes_table(br_coord_t *c)
{
    size_t n = 0, cap = 16;
    json_t **v = malloc(cap * sizeof(*v));
    for (br_job_t *j = br_jobtab_first(c->jobs); v && j; j = j->next) {
        if (j->replicas < 0 || j->state != BR_JOB_RUNNING)
            continue; /* not a service job, or one that ends */
        json_t *s = service_route(c, j);
        if (!s)
            continue;
        if (n == cap) {
            json_t **w = realloc(v, (cap *= 2) * sizeof(*v));
            if (!w) {
                json_decref(s);
                break;
            }
            v = w;
        }
        v[n++] = s;
    }
    if (!v)
        return NULL;
    qsort(v, n, sizeof(*v), by_id); /* the same table makes the same text */
    json_t *services = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(services, v[i]);
    free(v);
    return json_pack("{s:o}", "services", services);
}

/* The keys as the gateways need them: the store's live keys, each with its
 * user's limit of requests a minute (0: none). NULL on a store error. */
static json_t *keys_now(br_coord_t *c)
{
    br_err_t err;
    json_t *keys = br_store_apikey_live(c->store, &err);
    if (!keys)
        return NULL;
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k) {
        const br_user_use_t *u =
            br_usage_user(c->usage, json_integer_value(json_object_get(k, "user_id")));
        json_object_set_new(k, "rpm", json_integer(u && u->lim.rpm > 0 ? u->lim.rpm : 0));
    }
    return keys;
}

/* Read the keys again when they may have changed: 1 when they did. */
static int keys_remake(br_coord_t *c)
{
    br_routes_t *r = c->routes;
    if (!r->keys_stale)
        return 0;
    json_t *keys = keys_now(c);
    char *text = keys ? json_dumps(keys, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!text) {
        json_decref(keys);
        return 0; /* the last keys stand; read again at the next make */
    }
    r->keys_stale = 0;
    if (r->keys_text && strcmp(text, r->keys_text) == 0) {
        free(text);
        json_decref(keys);
        return 0;
    }
    free(r->keys_text);
    json_decref(r->keys);
    r->keys_text = text;
    r->keys = keys;
    return 1;
}

/* Make the table again when it may have changed (at most every BR_ROUTES_EVERY_MS
 * unless forced, or the keys changed); the version grows when its text differs. */
static void remake(br_coord_t *c, int64_t now_ms, int force)
{
    br_routes_t *r = c->routes;
    if (!force && !r->keys_stale && r->table && now_ms - r->made_ms < BR_ROUTES_EVERY_MS)
        return;
    int keys_changed = keys_remake(c);
    if (keys_changed) {
        r->version++;
        r->keys_version = r->version;
        br_gwload_table_made(c->gwload, r->version);
    }
    json_t *t = br_routes_table(c);
    char *text = t ? json_dumps(t, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!text) {
        json_decref(t);
        return; /* out of memory: the last table stands */
    }
    r->made_ms = now_ms;
    if (r->text && strcmp(text, r->text) == 0) {
        free(text);
        json_decref(t);
        return;
    }
    free(r->text);
    json_decref(r->table);
    r->text = text;
    r->table = t;
    if (!keys_changed)
        r->version++;
    br_gwload_table_made(c->gwload, r->version);
}

/* The table as sent: the services, and the keys when with_keys. New reference. */
static json_t *sent_table(br_routes_t *r, int with_keys)
{
    json_t *t = json_copy(r->table);
    if (t && with_keys)
        json_object_set(t, "keys", r->keys ? r->keys : json_array());
    return t;
}

json_t *br_routes_watch(br_coord_t *c, const void *route, size_t route_len,
                        const char *name, int64_t now_ms, br_err_t *err)
{
    br_routes_t *r = c->routes;
    if (!route || route_len == 0 || route_len > BR_ROUTES_ROUTE_MAX)
        return br_errf(err, EINVAL, "gateway.watch: bad route"), NULL;
    watch_t *w = NULL;
    for (size_t i = 0; i < r->n && !w; i++)
        if (r->v[i].route_len == route_len && memcmp(r->v[i].route, route, route_len) == 0)
            w = &r->v[i];
    if (!w) {
        if (r->n == BR_ROUTES_MAX)
            return br_errf(err, EBUSY, "gateway.watch: %d gateways watch already",
                           BR_ROUTES_MAX),
                   NULL;
        w = &r->v[r->n++];
        memset(w, 0, sizeof(*w));
        memcpy(w->route, route, route_len);
        w->route_len = route_len;
    }
    snprintf(w->name, sizeof(w->name), "%s", name);
    w->expires_ms = now_ms + BR_ROUTES_TTL_MS;
    w->seen = br_now_ms();
    remake(c, now_ms, 1);
    if (!r->table)
        return br_errf(err, ENOMEM, "gateway.watch: out of memory"), NULL;
    w->told = r->version;
    w->keys_told = r->version;
    return json_pack("{s:I, s:I, s:o}", "ttl_ms", (json_int_t)BR_ROUTES_TTL_MS, "version",
                     (json_int_t)r->version, "table", sent_table(r, 1));
}

void br_routes_forget(br_routes_t *r, const char *name)
{
    for (size_t i = 0; i < r->n;)
        if (strcmp(r->v[i].name, name) == 0)
            r->v[i] = r->v[--r->n];
        else
            i++;
}

int br_routes_report_seen(const br_routes_t *r, const char *id)
{
    for (size_t i = 0; i < BR_ROUTES_REPORTS && i < r->nreports; i++)
        if (strcmp(r->reports[i], id) == 0)
            return 1;
    return 0;
}

void br_routes_report_took(br_routes_t *r, const char *id)
{
    snprintf(r->reports[r->nreports++ % BR_ROUTES_REPORTS], sizeof(r->reports[0]), "%s",
             id);
}

json_t *br_routes_watching(br_routes_t *r)
{
    json_t *out = json_array();
    for (size_t i = 0; i < r->n; i++)
        json_array_append_new(out, json_pack("{s:s, s:f}", "name", r->v[i].name, "seen",
                                             (double)r->v[i].seen / 1000.0));
    return out;
}

void br_routes_flush(br_coord_t *c, int64_t now_ms, br_routes_send_fn fn, void *arg)
{
    br_routes_t *r = c->routes;
    for (size_t i = 0; i < r->n;) /* watches not renewed end */
        if (now_ms >= r->v[i].expires_ms)
            r->v[i] = r->v[--r->n];
        else
            i++;
    if (!r->n)
        return;
    remake(c, now_ms, 0);
    json_t *bodies[2] = {NULL, NULL}; /* without the keys, and with them */
    for (size_t i = 0; i < r->n;) {
        watch_t *w = &r->v[i];
        if (w->told == r->version || !r->table) {
            i++;
            continue;
        }
        int with_keys = w->keys_told < r->keys_version;
        json_t **body = &bodies[with_keys];
        if (!*body)
            *body = json_pack("{s:I, s:o}", "version", (json_int_t)r->version, "table",
                              sent_table(r, with_keys));
        w->told = r->version;
        if (with_keys)
            w->keys_told = r->version;
        if (*body && fn(arg, w->route, w->route_len, *body) < 0)
            r->v[i] = r->v[--r->n];
        else
            i++;
    }
    json_decref(bodies[0]);
    json_decref(bodies[1]);
}
