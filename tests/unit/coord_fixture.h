/* coord_fixture.h - a coordinator made in a unit test, for the tests of job and
 * node life and of what reads the coordinator (test_jobs.c, test_nodelife.c,
 * test_replica_life.c, test_api_cli.c...): a real store in a temporary
 * directory, nodes in memory with a one-byte route (so orders to them are queued
 * in the outbox, never sent), every module wired as brambled wires them.
 * Include after cmocka.h. */
#ifndef BRAMBLE_TEST_COORD_FIXTURE_H
#define BRAMBLE_TEST_COORD_FIXTURE_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "api.h"
#include "ckptpull.h"
#include "deps.h"
#include "pace.h"
#include "listcache.h"
#include "stages.h"
#include "uploads.h"
#include "usage.h"
#include "jobs.h"
#include "replicas.h"
#include "replkeep.h"
#include "routes.h"
#include "autoscale.h"
#include "devenv.h"
#include "gwload.h"
#include "scheduler.h"
#include "services.h"
#include "util.h"
#include "hooks.h"
#include "jobtab.h"
#include "outbox.h"
#include "netmap.h"
#include "overlaylog.h"
#include "probeset.h"
#include "stats.h"

typedef struct {
    char dir[64];
    br_coord_t c;
} coord_fixture_t;

/* A ready node: cpus, and replica_port (0: it reports none). */
static inline br_node_t *fixture_node(br_coord_t *c, const char *name, int cpus,
                                      int replica_port)
{
    json_t *info = json_pack("{s:s, s:s, s:s, s:i, s:I, s:[], s:s, s:s}", "name", name,
                             "pubkey", "0123456789012345678901234567890123456789", "state",
                             "ready", "cpus", cpus, "memory", (json_int_t)1 << 34, "gpus",
                             "arch", "x86_64", "address", "10.0.0.1");
    if (replica_port)
        json_object_set_new(info, "replica_port", json_integer(replica_port));
    br_node_t *n = br_nodes_add(c->nodes, info);
    json_decref(info);
    assert_non_null(n);
    n->route[0] = (unsigned char)name[0]; /* connected: orders to it are queued */
    n->route_len = 1;
    n->last_seen_ms = br_now_ms();
    return n;
}

/* Open f's coordinator in a new directory named after test, with every module
 * wired as brambled wires them (br_coord_wire); with_replicas is no longer read.
 * 0, or -1. */
static inline int fixture_open(coord_fixture_t *f, const char *test, int with_replicas)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/%s.XXXXXX", test);
    if (!mkdtemp(f->dir))
        return -1;
    char path[96];
    snprintf(path, sizeof(path), "%s/bramble.db", f->dir);
    br_err_t err;
    br_coord_t *c = &f->c;
    c->cfg.node_timeout_ms = 5000;
    c->cfg.kill_grace_ms = 30000;
    c->store = br_store_open(path, &err);
    c->nodes = br_nodes_new();
    c->jobs = br_jobtab_new();
    c->netmap = br_netmap_new();
    c->stats = br_stats_new();
    c->hooks = br_hooks_new();
    c->probeset = br_probeset_new("a test's probe secret");
    c->out = br_outbox_new();
    c->ctx = zmq_ctx_new(); /* for the links a checkpoint pull makes, as brambled's */
    (void)with_replicas; /* every module is wired, as brambled wires them */
    if (!c->out || !c->ctx || !c->store || !c->nodes || !c->jobs || !c->stats || !c->hooks ||
        !c->probeset || br_coord_wire(c) < 0 || br_store_begin(c->store, &err) < 0)
        return -1;
    return 0;
}

/* Whether m is an order of type to node n (its one-byte route, fixture_node). */
static inline int fixture_is_order(const br_msg_t *m, const char *type,
                                   const br_node_t *n)
{
    size_t len;
    const unsigned char *route = br_msg_route(m, &len);
    return strcmp(br_msg_type(m), type) == 0 && len == 1 &&
           route[0] == (unsigned char)n->name[0];
}

/* The body of the last order of type queued for node n (borrowed), or NULL. */
static inline json_t *fixture_order(br_coord_t *c, const char *type, const br_node_t *n)
{
    json_t *found = NULL;
    for (size_t i = 0; i < br_outbox_count(c->out); i++)
        if (fixture_is_order(br_outbox_msg(c->out, i), type, n))
            found = br_msg_body(br_outbox_msg(c->out, i));
    return found;
}

/* Forget the orders queued so far. */
static inline void fixture_drop_orders(br_coord_t *c)
{
    br_outbox_undo(c->out, (br_outbox_mark_t){0, 0});
}

/* Free everything fixture_open made, and remove its directory. */
/* Whether job id has an event whose reason holds text. */
static inline int fixture_has_event(br_coord_t *c, int64_t id, const char *text)
{
    json_t *ev = br_store_event_list(c->store, id, 0, 0, NULL);
    size_t i;
    json_t *e;
    int found = 0;
    json_array_foreach(ev, i, e) {
        const char *r = json_string_value(json_object_get(e, "reason"));
        found |= r && strstr(r, text) != NULL;
    }
    json_decref(ev);
    return found;
}

/* type with body (JSON text) from the principal with key, dispatched as the loop
 * does (the orders queued before are dropped first): the answer's body, refusals
 * included (new reference); the test fails when there is no answer. */
static inline json_t *fixture_call(br_coord_t *c, const char *key, const char *type,
                                   const char *body)
{
    static uint32_t seq = 1;
    fixture_drop_orders(c);
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, seq++);
    assert_non_null(m);
    json_error_t je;
    json_t *b = json_loads(body, 0, &je);
    if (!b)
        fail_msg("body %s: %s", body, je.text);
    br_msg_set_body(m, b);
    br_msg_set_route(m, "z", 1);
    br_msg_set_user(m, key);
    br_caller_t who;
    br_api_dispatch(c, m, &who);
    json_t *found = NULL;
    for (size_t i = 0; i < br_outbox_count(c->out); i++) {
        const br_msg_t *r = br_outbox_msg(c->out, i);
        if (br_msg_kind(r) == BR_MSG_RESPONSE && br_msg_seq(r) == br_msg_seq(m))
            found = br_msg_body(r);
    }
    br_msg_destroy(&m);
    if (!found)
        fail_msg("%s: no answer", type);
    return json_incref(found);
}

static inline void fixture_close(coord_fixture_t *f)
{
    br_coord_t *c = &f->c;
    br_outbox_destroy(&c->out);
    br_jobtab_destroy(&c->jobs);
    br_store_destroy(&c->store);
    br_nodes_destroy(&c->nodes);
    br_netmap_destroy(&c->netmap);
    br_stats_destroy(&c->stats);
    br_sched_destroy(&c->sched);
    br_usage_destroy(&c->usage);
    br_services_destroy(&c->services);
    br_autoscale_destroy(&c->autoscale);
    br_devenv_destroy(&c->devenv);
    br_routes_destroy(&c->routes);
    br_gwload_destroy(&c->gwload);
    br_overlay_log_destroy(&c->overlay_log);
    br_ckptpull_destroy(&c->ckptpull); /* its sockets close before the context ends */
    br_pace_destroy(&c->pace);
    br_uploads_destroy(&c->uploads);
    br_stages_destroy(&c->stages);
    br_listcache_destroy(&c->listcache);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    br_replicas_destroy(&c->replicas);
    br_replkeep_destroy(&c->replkeep);
    br_hooks_destroy(&c->hooks);
    br_probeset_destroy(&c->probeset);
    br_rm_tree(AT_FDCWD, f->dir);
}

/* A pending job of spec (stolen) owned by "ann" (id 2), added as a submission is. */
static inline br_job_t *fixture_add_job(br_coord_t *c, json_t *spec)
{
    json_t *row = json_pack("{s:s, s:s, s:s, s:I, s:o, s:s, s:I, s:s, s:i}", "name", "t",
                            "kind", "job", "owner", "ann", "owner_id", (json_int_t)2,
                            "spec", spec, "spec_yaml", "x: 1\n", "submitted",
                            (json_int_t)br_now_ms(), "state", "pending", "attempt", 1);
    br_err_t err;
    br_job_t *j = br_jobs_add(c, row, &err);
    json_decref(row);
    assert_non_null(j);
    return j;
}

/* The world most tests of the job core start from: nodes "a" and "b" of 4 CPUs
 * each (serving checkpoint files on port; 0: not) on a fixture of its own. */
typedef struct {
    coord_fixture_t f;
    br_node_t *a, *b;
} fixture_two_t;

static inline int fixture_two_setup(void **state, const char *test, int with_replicas,
                                    int port)
{
    fixture_two_t *w = calloc(1, sizeof(*w));
    if (!w || fixture_open(&w->f, test, with_replicas) < 0) {
        free(w);
        return -1;
    }
    w->a = fixture_node(&w->f.c, "a", 4, port);
    w->b = fixture_node(&w->f.c, "b", 4, port);
    *state = w;
    return 0;
}

/* fixture_two_setup, and the user "ann" of key (a 40-character Z85 key) known. */
static inline int fixture_two_with_ann(void **state, const char *test, const char *key)
{
    fixture_two_t *w;
    br_err_t err;
    if (fixture_two_setup((void **)&w, test, 1, 0) < 0)
        return -1;
    *state = w;
    return br_store_key_add(w->f.c.store, key, BR_PRINCIPAL_USER, "ann", &err);
}

static inline int fixture_two_teardown(void **state)
{
    fixture_two_t *w = *state;
    fixture_close(&w->f);
    free(w);
    return 0;
}

#endif
