/* test_routes.c - the gateways' routing table (coordinator/policy/routes.c) on a
 * coordinator made here (coord_fixture.h: nodes a and b of 4 CPUs), its services
 * submitted and cancelled through the real handlers (br_api_dispatch, as user
 * ann): a running service is listed only when it names a model, with its names,
 * cap, public flag and healthy replicas; gateway.watch's answer, renewed rather
 * than added per route; flush sends each watching route the table once per change
 * (not more often than BR_ROUTES_EVERY_MS), drops watches not renewed within
 * BR_ROUTES_TTL_MS, and those whose send fails; forget ends a gateway's watches;
 * at most BR_ROUTES_MAX watch; the API keys sent with the table when they change.
 * Routes are fake ROUTER ids ("\x00gw1"); the clock is
 * passed in (now_ms). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "api.h"
#include "coord_fixture.h"
#include "routes.h"
#include "jobtab.h"
#include "outbox.h"
#include "token.h"

#define KEY_ANN "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"

#define GW1 "\x00gw1"
#define GW2 "\x00gw2"
#define ROUTE(s) (s), sizeof(s) - 1

/* A service behind the gateway, and one that is not (no service.model). */
#define SPEC_CHAT                                                                 \
    "name: chat\nkind: service\ncommand: serve\nresources: {cpus: 1}\nservice:\n" \
    "  replicas: 1\n  model: m\n  aliases: [a]\n  adapters: [m-lora]\n"           \
    "  max_inflight: 4\n  public: true\n"
#define SPEC_PLAIN                                                                 \
    "name: plain\nkind: service\ncommand: serve\nresources: {cpus: 1}\nservice:\n" \
    "  replicas: 1\n"
#define SPEC_OTHER                                                                 \
    "name: other\nkind: service\ncommand: serve\nresources: {cpus: 1}\nservice:\n" \
    "  replicas: 1\n  model: m2\n"

static int setup(void **state)
{
    return fixture_two_with_ann(state, "test_routes", KEY_ANN);
}

static int teardown(void **state)
{
    return fixture_two_teardown(state);
}

/* type with body (JSON text) from ann, dispatched as the loop does: the answer's
 * body (new reference); the test fails when it is refused. */
static json_t *call_ok(br_coord_t *c, const char *type, const char *body)
{
    json_t *a = fixture_call(c, KEY_ANN, type, body);
    if (json_object_get(a, "error"))
        fail_msg("%s %s: refused: %s", type, body,
                 json_string_value(json_object_get(a, "error")));
    return a;
}

/* job.submit of spec (YAML) as ann: the new job's id. */
static int64_t submit(br_coord_t *c, const char *yaml)
{
    json_t *body = json_pack("{s:s, s:[]}", "spec", yaml, "sets");
    char *text = json_dumps(body, 0);
    json_decref(body);
    json_t *a = call_ok(c, "job.submit", text);
    free(text);
    int64_t id = json_integer_value(json_object_get(a, "id"));
    json_decref(a);
    assert_true(id > 0);
    return id;
}

static void cancel(br_coord_t *c, int64_t id)
{
    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)id);
    json_decref(call_ok(c, "job.cancel", body));
}

/* The table's entry for service id (borrowed), or NULL. */
static json_t *entry(json_t *table, int64_t id)
{
    size_t i;
    json_t *s;
    json_array_foreach (json_object_get(table, "services"), i, s)
        if (json_integer_value(json_object_get(s, "id")) == id)
            return s;
    return NULL;
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static json_int_t num(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* The sends flush made. */
typedef struct {
    int sends;
    int fail_gw1;       /* the send to GW1 fails (-1) */
    int64_t version;    /* the last body's */
    size_t nservices;   /* ... its table's services */
    int has_keys;       /* ... whether it had the keys */
    json_t *keys;       /* ... the last keys sent (a reference) */
    char routes[8][16]; /* the routes sent to, in order (their text after \0) */
} sent_t;

static int fake_send(void *arg, const void *route, size_t route_len, json_t *body)
{
    sent_t *s = arg;
    assert_true(route_len >= 1 && route_len < sizeof(s->routes[0]));
    assert_int_equal(((const char *)route)[0], 0);
    if (s->sends < 8)
        snprintf(s->routes[s->sends], sizeof(s->routes[0]), "%.*s", (int)route_len - 1,
                 (const char *)route + 1);
    s->sends++;
    s->version = num(body, "version");
    s->nservices =
        json_array_size(json_object_get(json_object_get(body, "table"), "services"));
    json_t *keys = json_object_get(json_object_get(body, "table"), "keys");
    s->has_keys = keys != NULL;
    if (keys) {
        json_decref(s->keys);
        s->keys = json_incref(keys);
    }
    if (s->fail_gw1 && route_len == sizeof(GW1) - 1 &&
        memcmp(route, GW1, route_len) == 0)
        return -1;
    return 0;
}

static size_t watching(br_coord_t *c)
{
    json_t *w = br_routes_watching(c->routes);
    size_t n = json_array_size(w);
    json_decref(w);
    return n;
}

/* Watch route as gateway name at now: the answer's version. */
static int64_t watch(br_coord_t *c, const void *route, size_t len, const char *name,
                     int64_t now)
{
    br_err_t err;
    json_t *a = br_routes_watch(c, route, len, name, now, &err);
    if (!a)
        fail_msg("watch %s: %s", name, err.text);
    int64_t v = num(a, "version");
    json_decref(a);
    return v;
}

/* A running service is listed only when its spec names service.model: its name,
 * owner, model, aliases, adapters, max_inflight, public, and no replicas while none
 * is healthy; one without a model, a plain job and a cancelled service are not. */
static void test_table_lists_model_services(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    json_t *t = br_routes_table(c);
    assert_int_equal(json_array_size(json_object_get(t, "services")), 0);
    json_decref(t);

    int64_t chat = submit(c, SPEC_CHAT);
    int64_t plain = submit(c, SPEC_PLAIN);
    submit(c, "name: job\ncommand: x\nresources: {cpus: 1}\n");
    t = br_routes_table(c);
    assert_int_equal(json_array_size(json_object_get(t, "services")), 1);
    json_t *s = entry(t, chat);
    assert_non_null(s);
    assert_null(entry(t, plain));
    assert_string_equal(str(s, "name"), "chat");
    assert_string_equal(str(s, "owner"), "ann");
    assert_int_equal(num(s, "owner_id"), br_jobtab_find(c->jobs, chat)->owner_id);
    assert_true(num(s, "owner_id") > 0);
    assert_string_equal(str(s, "model"), "m");
    assert_int_equal(json_array_size(json_object_get(s, "aliases")), 1);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(s, "aliases"), 0)), "a");
    assert_int_equal(json_array_size(json_object_get(s, "adapters")), 1);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(s, "adapters"), 0)), "m-lora");
    assert_int_equal(num(s, "max_inflight"), 4);
    assert_true(json_is_true(json_object_get(s, "public")));
    assert_true(json_is_array(json_object_get(s, "replicas")));
    assert_int_equal(json_array_size(json_object_get(s, "replicas")), 0);
    json_decref(t);

    /* defaults: no aliases, no cap, not public; the table is sorted by id */
    int64_t other = submit(c, SPEC_OTHER);
    t = br_routes_table(c);
    json_t *list = json_object_get(t, "services");
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(num(json_array_get(list, 0), "id"), chat);
    assert_int_equal(num(json_array_get(list, 1), "id"), other);
    s = entry(t, other);
    assert_string_equal(str(s, "model"), "m2");
    assert_int_equal(json_array_size(json_object_get(s, "aliases")), 0);
    assert_int_equal(json_array_size(json_object_get(s, "adapters")), 0);
    assert_int_equal(num(s, "max_inflight"), 0);
    assert_true(json_is_false(json_object_get(s, "public")));
    json_decref(t);

    cancel(c, chat);
    t = br_routes_table(c);
    assert_null(entry(t, chat));
    assert_non_null(entry(t, other));
    json_decref(t);
}

/* A replica is listed once it runs and its agent reports it (healthy): its job,
 * number, host (its node's address), port and node; the replica job itself is not
 * listed as a service. */
static void test_table_lists_healthy_replicas(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t chat = submit(c, SPEC_CHAT);
    br_sched_run(c);
    br_job_t *rep = NULL;
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        if (j->service == chat)
            rep = j;
    assert_non_null(rep);
    assert_true(rep->nranks > 0);
    br_node_t *n = br_nodes_find(c->nodes, rep->ranks[0].node);
    assert_non_null(n);
    int64_t rid = rep->id;
    br_jobs_started(c, rid, rep->attempt, n, 8123);
    json_t *t = br_routes_table(c);
    assert_int_equal(json_array_size(json_object_get(entry(t, chat), "replicas")), 0);
    json_decref(t);

    json_t *tasks = json_pack("[{s:I, s:i, s:i}]", "job", (json_int_t)rid, "attempt",
                              rep->attempt, "port", 8123);
    br_jobs_reconcile(c, n, tasks, 0);
    json_decref(tasks);
    assert_string_equal(br_services_health_of(c, rid), "healthy");
    t = br_routes_table(c);
    assert_int_equal(json_array_size(json_object_get(t, "services")), 1);
    json_t *reps = json_object_get(entry(t, chat), "replicas");
    assert_int_equal(json_array_size(reps), 1);
    json_t *r = json_array_get(reps, 0);
    assert_int_equal(num(r, "id"), rid);
    assert_int_equal(num(r, "replica"), 0);
    assert_string_equal(str(r, "host"), "10.0.0.1");
    assert_int_equal(num(r, "port"), 8123);
    assert_string_equal(str(r, "node"), n->name);
    json_decref(t);
}

/* gateway.watch answers {ttl_ms, version, table}; the same route again renews
 * (one watch, the same version while nothing changed), another route adds one; a
 * bad route is refused. */
static void test_watch_answers_and_renews(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t chat = submit(c, SPEC_CHAT);
    br_err_t err;
    json_t *a = br_routes_watch(c, ROUTE(GW1), "gw1", 1000, &err);
    assert_non_null(a);
    assert_int_equal(json_object_size(a), 3);
    assert_int_equal(num(a, "ttl_ms"), BR_ROUTES_TTL_MS);
    int64_t v = num(a, "version");
    assert_true(v >= 1);
    json_t *table = json_object_get(a, "table");
    assert_int_equal(json_array_size(json_object_get(table, "services")), 1);
    assert_non_null(entry(table, chat));
    json_t *now = br_routes_table(c);
    assert_true(json_equal(json_object_get(table, "services"), json_object_get(now, "services")));
    assert_int_equal(json_array_size(json_object_get(table, "keys")), 0); /* (none made) */
    json_decref(now);
    json_decref(a);

    json_t *list = br_routes_watching(c->routes);
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(str(json_array_get(list, 0), "name"), "gw1");
    double seen = json_real_value(json_object_get(json_array_get(list, 0), "seen"));
    assert_true(seen > 1.6e9); /* unix seconds */
    json_decref(list);

    assert_int_equal(watch(c, ROUTE(GW1), "gw1", 5000), v); /* renewed */
    assert_int_equal(watching(c), 1);
    assert_int_equal(watch(c, ROUTE(GW1), "gw1", 5001), v);
    assert_int_equal(watching(c), 1);
    assert_int_equal(watch(c, ROUTE("\x00gw"), "gw1", 5002), v); /* a prefix: another */
    assert_int_equal(watching(c), 2);
    assert_int_equal(watch(c, ROUTE(GW2), "gw2", 5003), v);
    assert_int_equal(watching(c), 3);

    /* a change is in the next watch's answer */
    submit(c, SPEC_OTHER);
    a = br_routes_watch(c, ROUTE(GW1), "gw1", 5004, &err);
    assert_int_equal(num(a, "version"), v + 1);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(a, "table"), "services")), 2);
    json_decref(a);
    assert_int_equal(watching(c), 3);

    char big[BR_ROUTES_ROUTE_MAX + 1] = {0};
    err.errnum = 0;
    assert_null(br_routes_watch(c, big, sizeof(big), "gw3", 6000, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_null(br_routes_watch(c, big, 0, "gw3", 6000, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_null(br_routes_watch(c, NULL, 4, "gw3", 6000, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(watching(c), 3);
    a = br_routes_watch(c, big, BR_ROUTES_ROUTE_MAX, "gw3", 6000,
                        &err); /* the longest */
    assert_non_null(a);
    json_decref(a);
    assert_int_equal(watching(c), 4);
}

/* Flush sends a watching route the table only when it changed since that route was
 * told (never twice for one change), with a higher version; at most once per
 * BR_ROUTES_EVERY_MS is the table made again; a route that watched after the
 * change was told in its answer and is not sent it again. */
static void test_flush_sends_changes_once(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    sent_t sent = {0};
    int64_t t0 = 100000;
    int64_t chat = submit(c, SPEC_CHAT);
    int64_t v = watch(c, ROUTE(GW1), "gw1", t0);
    br_routes_flush(c, t0 + BR_ROUTES_EVERY_MS + 1, fake_send, &sent);
    assert_int_equal(sent.sends, 0); /* told in its answer */
    br_routes_flush(c, t0 + 2 * BR_ROUTES_EVERY_MS + 2, fake_send, &sent);
    assert_int_equal(sent.sends, 0);

    int64_t now = t0 + 3 * BR_ROUTES_EVERY_MS + 3;
    int64_t other = submit(c, SPEC_OTHER);
    br_routes_flush(c, now, fake_send, &sent);
    assert_int_equal(sent.sends, 1);
    assert_int_equal(sent.version, v + 1);
    assert_int_equal(sent.nservices, 2);
    assert_string_equal(sent.routes[0], "gw1");
    now += BR_ROUTES_EVERY_MS;
    br_routes_flush(c, now, fake_send, &sent); /* (the table made again at now) */
    assert_int_equal(sent.sends, 1);           /* once */

    /* a change within BR_ROUTES_EVERY_MS of the last make waits for the next */
    cancel(c, chat);
    br_routes_flush(c, now + BR_ROUTES_EVERY_MS - 1, fake_send, &sent);
    assert_int_equal(sent.sends, 1);
    now += BR_ROUTES_EVERY_MS;
    br_routes_flush(c, now, fake_send, &sent);
    assert_int_equal(sent.sends, 2);
    assert_int_equal(sent.version, v + 2);
    assert_int_equal(sent.nservices, 1);

    /* two watch: both are sent one change, once each; one that watches after a
     * change knows it already */
    assert_int_equal(watch(c, ROUTE(GW2), "gw2", now), v + 2);
    now += BR_ROUTES_EVERY_MS + 1;
    br_routes_flush(c, now, fake_send, &sent);
    assert_int_equal(sent.sends, 2);
    int64_t third = submit(c, SPEC_CHAT);
    now += BR_ROUTES_EVERY_MS + 1;
    br_routes_flush(c, now, fake_send, &sent);
    assert_int_equal(sent.sends, 4);
    assert_int_equal(sent.version, v + 3);
    assert_int_equal(sent.nservices, 2);
    assert_true(
        (strcmp(sent.routes[2], "gw1") == 0 && strcmp(sent.routes[3], "gw2") == 0) ||
        (strcmp(sent.routes[2], "gw2") == 0 && strcmp(sent.routes[3], "gw1") == 0));
    cancel(c, third);
    assert_int_equal(watch(c, ROUTE(GW2), "gw2", now + 1),
                     v + 4); /* told in the answer */
    now += BR_ROUTES_EVERY_MS + 1;
    br_routes_flush(c, now, fake_send, &sent);
    assert_int_equal(sent.sends, 5);
    assert_string_equal(sent.routes[4], "gw1");
    assert_int_equal(sent.version, v + 4);
    (void)other;
}

/* A watch not renewed for BR_ROUTES_TTL_MS is dropped by flush (and sent nothing
 * more); one renewed in time stays. */
static void test_watch_expires(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    sent_t sent = {0};
    int64_t t0 = 50000;
    watch(c, ROUTE(GW1), "gw1", t0);
    watch(c, ROUTE(GW2), "gw2", t0);
    watch(c, ROUTE(GW2), "gw2", t0 + 10000); /* renewed */
    br_routes_flush(c, t0 + BR_ROUTES_TTL_MS - BR_ROUTES_EVERY_MS, fake_send, &sent);
    assert_int_equal(watching(c), 2);
    submit(c, SPEC_CHAT);
    br_routes_flush(c, t0 + BR_ROUTES_TTL_MS, fake_send, &sent);
    assert_int_equal(watching(c), 1); /* gw1's ran out */
    assert_int_equal(sent.sends, 1);
    assert_string_equal(sent.routes[0], "gw2");
    br_routes_flush(c, t0 + 10000 + BR_ROUTES_TTL_MS - 1, fake_send, &sent);
    assert_int_equal(watching(c), 1);
    br_routes_flush(c, t0 + 10000 + BR_ROUTES_TTL_MS, fake_send, &sent);
    assert_int_equal(watching(c), 0);
    submit(c, SPEC_OTHER);
    br_routes_flush(c, t0 + 20000 + BR_ROUTES_TTL_MS, fake_send, &sent);
    assert_int_equal(sent.sends, 1);
}

/* br_routes_forget ends every watch of that gateway (it may watch from two
 * routes) and no other's; an unknown name changes nothing. */
static void test_forget(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    sent_t sent = {0};
    watch(c, ROUTE("\x00gw1a"), "gw1", 1000);
    watch(c, ROUTE(GW2), "gw2", 1000);
    watch(c, ROUTE("\x00gw1b"), "gw1", 1000);
    assert_int_equal(watching(c), 3);
    br_routes_forget(c->routes, "gw9");
    assert_int_equal(watching(c), 3);
    br_routes_forget(c->routes, "gw1");
    json_t *list = br_routes_watching(c->routes);
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(str(json_array_get(list, 0), "name"), "gw2");
    json_decref(list);
    submit(c, SPEC_CHAT);
    br_routes_flush(c, 1000 + BR_ROUTES_EVERY_MS, fake_send, &sent);
    assert_int_equal(sent.sends, 1);
    assert_string_equal(sent.routes[0], "gw2");
    br_routes_forget(c->routes, "gw2");
    assert_int_equal(watching(c), 0);
}

/* A send that fails (-1: the route is gone) ends that watch; the others are sent
 * and stay. */
static void test_send_failure_drops_watch(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    sent_t sent = {.fail_gw1 = 1};
    watch(c, ROUTE(GW1), "gw1", 1000);
    watch(c, ROUTE(GW2), "gw2", 1000);
    submit(c, SPEC_CHAT);
    br_routes_flush(c, 1000 + BR_ROUTES_EVERY_MS, fake_send, &sent);
    assert_int_equal(sent.sends, 2);
    json_t *list = br_routes_watching(c->routes);
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(str(json_array_get(list, 0), "name"), "gw2");
    json_decref(list);
    submit(c, SPEC_OTHER);
    br_routes_flush(c, 1000 + 2 * BR_ROUTES_EVERY_MS, fake_send, &sent);
    assert_int_equal(sent.sends, 3);
    assert_string_equal(sent.routes[2], "gw2");
}

/* At most BR_ROUTES_MAX routes watch: the next is refused (EBUSY) while those
 * there still renew; one forgotten makes room. */
static void test_watch_limit(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    char route[8];
    char name[16];
    for (int i = 0; i < BR_ROUTES_MAX; i++) {
        int len = snprintf(route, sizeof(route), "%cr%d", 0, i);
        snprintf(name, sizeof(name), "gw%d", i);
        watch(c, route, (size_t)len, name, 1000);
    }
    assert_int_equal(watching(c), BR_ROUTES_MAX);
    br_err_t err = {0};
    assert_null(br_routes_watch(c, ROUTE("\x00more"), "more", 1000, &err));
    assert_int_equal(err.errnum, EBUSY);
    assert_int_equal(watching(c), BR_ROUTES_MAX);
    int len = snprintf(route, sizeof(route), "%cr%d", 0, 7);
    watch(c, route, (size_t)len, "gw7", 2000); /* renewing: fine */
    br_routes_forget(c->routes, "gw7");
    assert_int_equal(watching(c), BR_ROUTES_MAX - 1);
    watch(c, ROUTE("\x00more"), "more", 2000);
    assert_int_equal(watching(c), BR_ROUTES_MAX);
}

/* The users' API keys ride in the table: the watch's answer has them; a key made
 * or revoked through the handlers is sent at the next flush (its hash, never its
 * text, with its user and models), not held back by BR_ROUTES_EVERY_MS; a change
 * of the services alone is sent without them. */
static void test_keys_sent_when_they_change(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    sent_t sent = {0};
    int64_t now = 700000;
    br_err_t err;
    json_t *a = br_routes_watch(c, ROUTE(GW1), "gw1", now, &err);
    assert_non_null(a);
    assert_int_equal(json_array_size(json_object_get(json_object_get(a, "table"), "keys")), 0);
    int64_t v = num(a, "version");
    json_decref(a);

    json_t *made = call_ok(c, "key.create", "{\"name\": \"nb\", \"models\": [\"m\"]}");
    const char *text = str(made, "key");
    assert_true(strncmp(text, "brk-", 4) == 0 && strlen(text) == 4 + 43);
    char hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
    br_token_hash(text, hash, id);
    assert_string_equal(str(made, "id"), id);
    br_routes_flush(c, now + 1, fake_send, &sent); /* (within EVERY_MS of the watch) */
    assert_int_equal(sent.sends, 1);
    assert_int_equal(sent.version, v + 1);
    assert_true(sent.has_keys);
    assert_int_equal(json_array_size(sent.keys), 1);
    json_t *k = json_array_get(sent.keys, 0);
    assert_string_equal(str(k, "hash"), hash);
    assert_string_equal(str(k, "user"), "ann");
    assert_int_equal(num(k, "rpm"), 0);
    assert_string_equal(json_string_value(json_array_get(json_object_get(k, "models"), 0)),
                        "m");
    char *dump = json_dumps(sent.keys, 0);
    assert_null(strstr(dump, text)); /* the key itself never leaves */
    free(dump);

    now += BR_ROUTES_EVERY_MS + 1;
    submit(c, SPEC_CHAT);
    br_routes_flush(c, now, fake_send, &sent);
    assert_int_equal(sent.sends, 2);
    assert_false(sent.has_keys);

    char body[64];
    snprintf(body, sizeof(body), "{\"key\": \"%s\"}", id);
    json_decref(call_ok(c, "key.revoke", body));
    br_routes_flush(c, now + 1, fake_send, &sent);
    assert_int_equal(sent.sends, 3);
    assert_true(sent.has_keys);
    assert_int_equal(json_array_size(sent.keys), 0);
    json_decref(made);
    json_decref(sent.keys);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_table_lists_model_services),
        T(test_table_lists_healthy_replicas),
        T(test_watch_answers_and_renews),
        T(test_flush_sends_changes_once),
        T(test_watch_expires),
        T(test_forget),
        T(test_send_failure_drops_watch),
        T(test_watch_limit),
        T(test_keys_sent_when_they_change),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
