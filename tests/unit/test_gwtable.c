/* test_gwtable.c - the gateway's routing table (gateway/table.c), fed tables as the
 * coordinator sends them (routes.h there): a replica known by (job, host, port)
 * keeps its count of requests in flight across tables, and one that moved is a new
 * entry; the names a service answers to; the pick (fewest in flight, ties in turn,
 * max_inflight); a failed replica left alone a while, doubling, and back at once on
 * a success; what left the table stays while it is used and goes on the sweep; a
 * malformed table changes nothing; a bad replica entry is skipped; an IPv6 host's
 * URL. Time is passed in (now_ms): nothing here sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "table.h"

/* The one service of the tests, its replicas given as JSON text (an array). */
#define SVC_HEAD                                                                      \
    "{\"id\": 5, \"name\": \"llm\", \"owner\": \"ann\", \"owner_id\": 2, \"model\": " \
    "\"llama-8b\", \"aliases\": [\"llama\"], \"adapters\": [\"sql-lora\"], "          \
    "\"public\": true, "
#define R(id, k, host, port, node)                                                    \
    "{\"id\": " #id ", \"replica\": " #k ", \"host\": \"" host "\", \"port\": " #port \
    ", \"node\": \"" node "\"}"

/* Update t to version with table (JSON text); gw_table_update's answer. */
static int update(gw_table_t *t, int64_t version, const char *text)
{
    json_error_t e;
    json_t *table = json_loads(text, 0, &e);
    if (!table)
        fail_msg("table %s: %s", text, e.text);
    int rc = gw_table_update(t, version, table);
    json_decref(table);
    return rc;
}

/* The one service "llm" (id 5) with replicas (a JSON array) and max_inflight. */
static void update_llm(gw_table_t *t, int64_t version, int max_inflight,
                       const char *replicas)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"services\": [" SVC_HEAD "\"max_inflight\": %d, \"replicas\": %s}]}",
             max_inflight, replicas);
    assert_int_equal(update(t, version, text), 0);
}

static gw_service_t *service(gw_table_t *t, int64_t id)
{
    for (size_t i = 0; i < t->nservices; i++)
        if (t->services[i]->id == id)
            return t->services[i];
    return NULL;
}

/* Each replica of s answered once: no longer new to the gateway (on trial). */
static void answered_all(gw_service_t *s)
{
    for (size_t i = 0; i < s->nreplicas; i++) {
        int opened = 0;
        gw_replica_answered(s->replicas[i], &opened);
    }
}

static gw_replica_t *replica(gw_service_t *s, int64_t id, const char *host, int port)
{
    for (size_t i = 0; s && i < s->nreplicas; i++) {
        gw_replica_t *r = s->replicas[i];
        if (r->id == id && r->port == port && strcmp(r->host, host) == 0)
            return r;
    }
    return NULL;
}

#define TWO_REPLICAS "[" R(1, 0, "h1", 8000, "a") ", " R(2, 1, "h2", 8000, "b") "]"

/* A table of the service llm (version 1) with replicas 1 on h1 and 2 on h2: *s, *r1
 * and *r2 set. */
static gw_table_t *two_replicas(gw_service_t **s, gw_replica_t **r1, gw_replica_t **r2)
{
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 0, TWO_REPLICAS);
    *s = service(t, 5);
    *r1 = replica(*s, 1, "h1", 8000);
    *r2 = replica(*s, 2, "h2", 8000);
    return t;
}

/* A service's fields and its replicas' are taken from the table as written. */
static void test_update_takes_fields(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    assert_non_null(t);
    update_llm(
        t, 3, 2,
        "[" R(6, 0, "10.0.0.1", 8000, "a") ", " R(7, 1, "10.0.0.2", 8001, "b") "]");
    assert_int_equal(t->version, 3);
    assert_int_equal(t->nservices, 1);
    gw_service_t *s = service(t, 5);
    assert_non_null(s);
    assert_string_equal(s->name, "llm");
    assert_string_equal(s->owner, "ann");
    assert_int_equal(s->owner_id, 2);
    assert_string_equal(s->model, "llama-8b");
    assert_int_equal(s->max_inflight, 2);
    assert_true(s->is_public);
    assert_int_equal(s->nreplicas, 2);
    gw_replica_t *r = replica(s, 7, "10.0.0.2", 8001);
    assert_non_null(r);
    assert_int_equal(r->replica, 1);
    assert_string_equal(r->node, "b");
    assert_string_equal(r->base, "http://10.0.0.2:8001");
    assert_ptr_equal(r->svc, s);
    assert_int_equal(r->inflight, 0);
    assert_int_equal(r->down_until, 0);
    gw_table_destroy(&t);
    assert_null(t);
    gw_table_destroy(&t); /* (NULL: nothing) */
}

/* The same (id, host, port) in a new table is the same entry, its in-flight count
 * kept; a replica that moved to a new port is a new entry (0 in flight), the old
 * one kept while its requests run and swept after. */
static void test_update_keeps_inflight(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(
        t, 1, 0,
        "[" R(6, 0, "10.0.0.1", 8000, "a") ", " R(7, 1, "10.0.0.2", 8000, "b") "]");
    gw_service_t *s = service(t, 5);
    gw_replica_t *r6 = replica(s, 6, "10.0.0.1", 8000);
    assert_non_null(r6);
    r6->inflight = 3;

    update_llm(
        t, 2, 0,
        "[" R(7, 1, "10.0.0.2", 8000, "b") ", " R(6, 0, "10.0.0.1", 8000, "c") "]");
    assert_ptr_equal(service(t, 5), s);
    assert_int_equal(s->nreplicas, 2);
    assert_ptr_equal(replica(s, 6, "10.0.0.1", 8000), r6);
    assert_int_equal(r6->inflight, 3);
    assert_string_equal(r6->node, "c"); /* what may change is taken */
    assert_true(r6->present);

    /* replica 6 moved to port 8001: a new entry; the old one runs its 3 out */
    update_llm(
        t, 3, 0,
        "[" R(7, 1, "10.0.0.2", 8000, "b") ", " R(6, 0, "10.0.0.1", 8001, "a") "]");
    gw_replica_t *moved = replica(s, 6, "10.0.0.1", 8001);
    assert_non_null(moved);
    assert_ptr_not_equal(moved, r6);
    assert_int_equal(moved->inflight, 0);
    assert_string_equal(moved->base, "http://10.0.0.1:8001");
    assert_ptr_equal(replica(s, 6, "10.0.0.1", 8000), r6);
    assert_false(r6->present);
    assert_int_equal(r6->inflight, 3);
    assert_int_equal(s->nreplicas, 3);
    for (int i = 0; i < 3; i++)
        gw_replica_done(r6, 1, 100);
    gw_table_sweep(t);
    assert_null(replica(s, 6, "10.0.0.1", 8000));
    assert_int_equal(s->nreplicas, 2);

    /* a new host under the same id is a new entry too */
    update_llm(t, 4, 0, "[" R(7, 1, "10.0.0.3", 8000, "b") "]");
    assert_null(replica(s, 7, "10.0.0.2", 8000)); /* nothing in flight: swept at once */
    assert_non_null(replica(s, 7, "10.0.0.3", 8000));
    assert_int_equal(s->nreplicas, 1);
    gw_table_destroy(&t);
}

/* A service answers to its model, its aliases and its adapters, and to nothing
 * else (not its own name, not a prefix); gw_service_alias says which are aliases. */
static void test_serves_names(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 0, "[]");
    gw_service_t *s = service(t, 5);
    assert_true(gw_service_serves(s, "llama-8b"));
    assert_true(gw_service_serves(s, "llama"));
    assert_true(gw_service_serves(s, "sql-lora"));
    assert_false(gw_service_serves(s, "llm"));
    assert_false(gw_service_serves(s, "llama-70b"));
    assert_false(gw_service_serves(s, "Llama"));
    assert_false(gw_service_serves(s, "llama-8"));
    assert_false(gw_service_serves(s, ""));
    assert_true(gw_service_alias(s, "llama"));
    assert_false(gw_service_alias(s, "llama-8b"));
    assert_false(gw_service_alias(s, "sql-lora"));
    assert_false(gw_service_alias(s, "nope"));

    /* names change with the table; entries that are not strings are ignored */
    assert_int_equal(update(t, 2,
                            "{\"services\": [{\"id\": 5, \"name\": \"llm\", \"model\": "
                            "\"qwen\", \"aliases\": [7, \"q\"], \"replicas\": []}]}"),
                     0);
    assert_true(gw_service_serves(s, "qwen"));
    assert_true(gw_service_serves(s, "q"));
    assert_true(gw_service_alias(s, "q"));
    assert_false(gw_service_serves(s, "llama-8b"));
    assert_false(gw_service_serves(s, "llama"));
    assert_false(gw_service_serves(s, "sql-lora"));
    assert_false(gw_service_alias(s, "llama"));
    assert_int_equal(s->max_inflight, 0);
    assert_false(s->is_public);
    gw_table_destroy(&t);
}

/* The pick is the usable replica with the fewest requests in flight. */
static void test_pick_fewest_inflight(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 0,
               "[" R(1, 0, "h1", 8000, "a") ", " R(2, 1, "h2", 8000, "a") ", " R(
                   3, 2, "h3", 8000, "b") "]");
    gw_service_t *s = service(t, 5);
    answered_all(s);
    gw_replica_t *r1 = replica(s, 1, "h1", 8000), *r2 = replica(s, 2, "h2", 8000),
                 *r3 = replica(s, 3, "h3", 8000);
    r1->inflight = 2, r2->inflight = 0, r3->inflight = 1;
    for (int i = 0; i < 4; i++) /* (whatever the turn) */
        assert_ptr_equal(gw_service_pick(s, 0), r2);
    r2->inflight = 5;
    assert_ptr_equal(gw_service_pick(s, 0), r3);
    r3->inflight = 7;
    assert_ptr_equal(gw_service_pick(s, 0), r1);

    /* as the gateway uses it: each pick counted in flight, so all get one in turn */
    r1->inflight = r2->inflight = r3->inflight = 0;
    int got[4] = {0};
    for (int i = 0; i < 9; i++) {
        gw_replica_t *r = gw_service_pick(s, 0);
        assert_non_null(r);
        r->inflight++;
        got[r->id]++;
    }
    assert_int_equal(got[1], 3);
    assert_int_equal(got[2], 3);
    assert_int_equal(got[3], 3);

    /* a service without replicas has none to pick */
    update_llm(t, 2, 0, "[]");
    r1->inflight = r2->inflight = r3->inflight = 0;
    gw_table_sweep(t);
    assert_int_equal(s->nreplicas, 0);
    assert_null(gw_service_pick(s, 0));
    gw_table_destroy(&t);
}

/* Ties are taken in turn: picks with equal counts go to different replicas. */
static void test_pick_ties_in_turn(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 0, TWO_REPLICAS);
    gw_service_t *s = service(t, 5);
    gw_replica_t *a = gw_service_pick(s, 0), *b = gw_service_pick(s, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(gw_service_pick(s, 0), a); /* and round again */
    assert_ptr_equal(gw_service_pick(s, 0), b);

    update_llm(t, 2, 0,
               "[" R(1, 0, "h1", 8000, "a") ", " R(2, 1, "h2", 8000, "b") ", " R(
                   3, 2, "h3", 8000, "c") "]");
    int got[4] = {0};
    for (int i = 0; i < 6; i++)
        got[gw_service_pick(s, 0)->id]++;
    assert_int_equal(got[1], 2);
    assert_int_equal(got[2], 2);
    assert_int_equal(got[3], 2);
    /* a replica passed over (down) does not tilt the turns: the two left share */
    gw_replica_done(s->replicas[0], 0, 0);
    s->replicas[0]->inflight = 0;
    int left[4] = {0};
    for (int i = 0; i < 6; i++)
        left[gw_service_pick(s, 1)->id]++;
    assert_int_equal(left[s->replicas[0]->id], 0);
    assert_int_equal(left[1] + left[2] + left[3], 6);
    for (int k = 1; k <= 3; k++)
        assert_true(left[k] == 0 || left[k] == 3);
    gw_table_destroy(&t);
}

/* A replica at max_inflight is skipped, even when it has the fewest; when every
 * replica is at the cap there is none (the request waits), though they are up. */
static void test_pick_skips_capped(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 2, TWO_REPLICAS);
    gw_service_t *s = service(t, 5);
    answered_all(s);
    gw_replica_t *r1 = replica(s, 1, "h1", 8000), *r2 = replica(s, 2, "h2", 8000);
    r1->inflight = 2, r2->inflight = 1;
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(gw_service_pick(s, 0), r2);
    r2->inflight = 2;
    assert_null(gw_service_pick(s, 0));
    assert_true(gw_service_has_up(s, 0)); /* busy, not down */
    gw_replica_done(r1, 1, 0);            /* one ends: room again */
    assert_ptr_equal(gw_service_pick(s, 0), r1);

    /* four picks counted in flight fill two replicas of cap 2, the fifth waits */
    r1->inflight = r2->inflight = 0;
    for (int i = 0; i < 4; i++) {
        gw_replica_t *r = gw_service_pick(s, 0);
        assert_non_null(r);
        r->inflight++;
    }
    assert_int_equal(r1->inflight, 2);
    assert_int_equal(r2->inflight, 2);
    assert_null(gw_service_pick(s, 0));

    /* max_inflight 0: no cap */
    update_llm(t, 2, 0, TWO_REPLICAS);
    r1->inflight = r2->inflight = 1000;
    assert_non_null(gw_service_pick(s, 0));
    gw_table_destroy(&t);
}

/* A failure takes a replica out for GW_DOWN_MS, doubling with each failure in a row
 * up to GW_DOWN_MAX_MS; a success brings it back at once and starts the count over. */
/* A replica new to the gateway is on trial until it answers once: one request at
 * a time (a burst routed to a server that is not there tries it once), one new
 * connection opening at a time; answered, it takes any number. */
static void test_new_replica_on_trial(void **state)
{
    (void)state;
    gw_service_t *s;
    gw_replica_t *r1, *r2;
    gw_table_t *t = two_replicas(&s, &r1, &r2);
    assert_true(r1->trial && r2->trial);
    gw_replica_t *a = gw_service_pick(s, 0);
    a->inflight++;
    gw_replica_t *b = gw_service_pick(s, 0);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    b->inflight++;
    assert_null(gw_service_pick(s, 0)); /* both tried once: the rest wait */
    int opened = 0, other = 0;
    assert_true(gw_replica_may_open(a, &opened, 0));
    assert_false(gw_replica_may_open(a, &other, 0)); /* one connection opening at a time */
    gw_replica_answered(a, &opened);
    assert_false(a->trial);
    for (int i = 0; i < 3; i++) { /* answered: as many as it is given */
        assert_ptr_equal(gw_service_pick(s, 0), a);
        a->inflight++;
    }
    /* a table again with the same replicas: still known, not new again */
    update_llm(t, 2, 0, TWO_REPLICAS);
    assert_false(a->trial);
    gw_table_destroy(&t);
}

/* A refused connection puts its replica out at once, for its first failure's time,
 * before the try that found it ends: a longer time out it has already is kept; the
 * try's failure, counted after, is the first of a row (2 s, not 4). */
static void test_refused_out_at_once(void **state)
{
    (void)state;
    gw_service_t *s;
    gw_replica_t *r1, *r2;
    gw_table_t *t = two_replicas(&s, &r1, &r2);
    int64_t now = 1000000;
    r1->inflight = 1;
    gw_replica_refused(r1, now);
    assert_int_equal(r1->down_until, now + GW_DOWN_MS);
    assert_int_equal(r1->fails, 0);
    int held = 0;
    assert_false(gw_replica_may_open(r1, &held, now + 1)); /* out: no connection */
    for (int i = 0; i < 3; i++) /* the requests routed meanwhile go to the other */
        assert_ptr_equal(gw_service_pick(s, now + 1), r2);
    gw_replica_done(r1, 0, now + 1); /* the try that was refused ends */
    assert_int_equal(r1->fails, 1);
    assert_int_equal(r1->down_until, now + 1 + GW_DOWN_MS);
    r1->down_until = now + 10 * GW_DOWN_MS; /* out longer already: kept */
    gw_replica_refused(r1, now + 2);
    assert_int_equal(r1->down_until, now + 10 * GW_DOWN_MS);
    gw_table_destroy(&t);
}

static void test_failure_backoff(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 0, "[" R(1, 0, "h1", 8000, "a") "]");
    gw_service_t *s = service(t, 5);
    answered_all(s);
    gw_replica_t *r = replica(s, 1, "h1", 8000);
    int64_t now = 1000000;
    r->inflight = 1;
    gw_replica_done(r, 0, now);
    assert_int_equal(r->inflight, 0);
    assert_int_equal(r->fails, 1);
    assert_int_equal(r->down_until, now + GW_DOWN_MS);
    assert_null(gw_service_pick(s, now));
    assert_null(gw_service_pick(s, now + GW_DOWN_MS - 1));
    assert_false(gw_service_has_up(s, now + GW_DOWN_MS - 1));
    assert_true(gw_service_has_up(s, now + GW_DOWN_MS));
    assert_ptr_equal(gw_service_pick(s, now + GW_DOWN_MS), r);

    /* in a row: 2 s, 4 s, 8 s, 16 s, then 30 s at most */
    int64_t want[] = {2 * GW_DOWN_MS, 4 * GW_DOWN_MS, 8 * GW_DOWN_MS,
                      GW_DOWN_MAX_MS, GW_DOWN_MAX_MS, GW_DOWN_MAX_MS};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        now = r->down_until;
        gw_replica_done(r, 0, now);
        assert_int_equal(r->down_until - now, want[i]);
        assert_false(gw_service_has_up(s, now + want[i] - 1));
        assert_true(gw_service_has_up(s, now + want[i]));
    }
    assert_int_equal(r->inflight, 0); /* (never below 0) */

    /* a success while it is down brings it back at once; the next failure is 2 s */
    gw_replica_done(r, 1, now);
    assert_int_equal(r->fails, 0);
    assert_int_equal(r->down_until, 0);
    assert_true(gw_service_has_up(s, now));
    assert_ptr_equal(gw_service_pick(s, now), r);
    gw_replica_done(r, 0, now);
    assert_int_equal(r->down_until, now + GW_DOWN_MS);

    /* a down replica is passed over for an up one, even a busier one */
    update_llm(t, 2, 0, TWO_REPLICAS);
    gw_replica_t *r2 = replica(s, 2, "h2", 8000);
    gw_replica_answered(r2, &(int){0});
    r2->inflight = 4;
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(gw_service_pick(s, now + 1), r2);
    assert_ptr_equal(gw_service_pick(s, now + GW_DOWN_MS), r); /* back: fewest */
    gw_table_destroy(&t);
}

/* A replica back from its time out is on trial: one request at a time (the others
 * go to a sure replica, or wait) until one succeeds; a failure on trial takes it
 * out for longer; a success makes it a replica like the others again. */
static void test_back_on_trial(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 2, 0, TWO_REPLICAS);
    gw_service_t *s = service(t, 5);
    answered_all(s);
    gw_replica_t *r1 = replica(s, 1, "h1", 8000), *r2 = replica(s, 2, "h2", 8000);
    r1->inflight = 1;
    gw_replica_done(r1, 0, 0); /* died */
    int64_t back = GW_DOWN_MS;
    r2->inflight = 30;
    assert_ptr_equal(gw_service_pick(s, back), r1); /* fewest: its trial */
    r1->inflight++;
    for (int i = 0; i < 5; i++) /* while it runs, the busier sure one */
        assert_ptr_equal(gw_service_pick(s, back), r2);
    assert_true(gw_service_has_up(s, back));
    r2->present = 0; /* and with no other, requests wait for the trial's end */
    assert_null(gw_service_pick(s, back));
    assert_false(gw_service_has_up(s, back));
    r2->present = 1;

    gw_replica_done(r1, 0, back); /* the trial failed: out for longer */
    assert_int_equal(r1->down_until, back + 2 * GW_DOWN_MS);
    back = r1->down_until;
    assert_ptr_equal(gw_service_pick(s, back), r1);
    r1->inflight++;
    assert_ptr_equal(gw_service_pick(s, back), r2);
    gw_replica_release(r1); /* its client hung up: still on trial */
    assert_int_equal(r1->inflight, 0);
    r1->inflight++;
    assert_ptr_equal(gw_service_pick(s, back), r2);
    gw_replica_done(r1, 1, back + 1); /* it answered: like any replica again */
    r1->inflight = 1;
    assert_ptr_equal(gw_service_pick(s, back + 1), r1);
    r1->inflight = 2;
    assert_ptr_equal(gw_service_pick(s, back + 1), r1);

    /* on trial for closing its idle connections, its one request's answer begins (a
     * stream that runs on): the trial ends then, not at the answer's end */
    r1->inflight = 0;
    gw_replica_suspect(r1);
    int opened = 0;
    assert_ptr_equal(gw_service_pick(s, back + 2), r1);
    r1->inflight++;
    assert_true(gw_replica_may_open(r1, &opened, back + 2) && opened);
    assert_ptr_equal(gw_service_pick(s, back + 2), r2); /* held to one meanwhile */
    gw_replica_answered(r1, &opened);
    assert_false(opened);
    assert_int_equal(r1->inflight, 1); /* (still in flight: its answer runs on) */
    assert_ptr_equal(gw_service_pick(s, back + 2), r1); /* fewest again: r2 has 30 */
    int other = 0;
    assert_true(gw_replica_may_open(r1, &other, back + 2)); /* no longer in doubt */
    assert_false(other);
    gw_table_destroy(&t);
}

/* A replica in doubt (on trial, or failing) is let open one new connection at a
 * time: a second try is held back until the first lets go; a replica not in doubt
 * opens as many as it is asked; a try that holds it may open more (both of a
 * host's addresses). */
static void test_one_new_connection_while_in_doubt(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 2, 0, "[" R(1, 0, "h1", 8000, "a") "]");
    gw_service_t *s = service(t, 5);
    answered_all(s);
    gw_replica_t *r = replica(s, 1, "h1", 8000);
    int a = 0, b = 0, c = 0;
    assert_true(gw_replica_may_open(r, &a, 0)); /* sure: any number */
    assert_true(gw_replica_may_open(r, &b, 0));
    assert_false(a || b);
    gw_replica_suspect(r); /* its kept connection was found closed */
    assert_true(gw_replica_may_open(r, &a, 0));
    assert_true(a);
    assert_true(gw_replica_may_open(r, &a, 0)); /* (its second address) */
    assert_false(gw_replica_may_open(r, &b, 0)); /* held back */
    assert_false(b);
    gw_replica_opened_done(r, &b); /* (one held back lets go of nothing) */
    assert_false(gw_replica_may_open(r, &c, 0));
    gw_replica_opened_done(r, &a);
    assert_false(a);
    assert_true(gw_replica_may_open(r, &b, 0)); /* the next one may */
    gw_replica_done(r, 1, 0); /* answered: no longer in doubt */
    gw_replica_opened_done(r, &b);
    assert_true(gw_replica_may_open(r, &a, 0) && gw_replica_may_open(r, &c, 0));
    a = c = 0;
    gw_replica_done(r, 0, 0); /* failing, back from its time out: in doubt again */
    assert_true(gw_replica_may_open(r, &a, GW_DOWN_MS));
    assert_false(gw_replica_may_open(r, &c, GW_DOWN_MS));
    gw_replica_opened_done(NULL, &c); /* (a try whose replica is gone) */
    gw_table_destroy(&t);
}

/* gw_service_has_up: a replica that is up, busy or not; none when every one is
 * down, when it has none, or when the service left the table. */
static void test_has_up(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 1, "[]");
    gw_service_t *s = service(t, 5);
    assert_false(gw_service_has_up(s, 0));
    update_llm(t, 2, 1, TWO_REPLICAS);
    gw_replica_t *r1 = replica(s, 1, "h1", 8000), *r2 = replica(s, 2, "h2", 8000);
    answered_all(s);
    r1->inflight = r2->inflight = 1; /* both at the cap */
    assert_true(gw_service_has_up(s, 0));
    gw_replica_done(r1, 0, 0);
    assert_true(gw_service_has_up(s, 1));
    gw_replica_done(r2, 0, 0);
    assert_false(gw_service_has_up(s, 1));
    assert_true(gw_service_has_up(s, GW_DOWN_MS));

    /* the service left (a request still runs on r1): nothing of it is up */
    r1->inflight = 1;
    assert_int_equal(update(t, 3, "{\"services\": []}"), 0);
    assert_ptr_equal(service(t, 5), s);
    assert_false(s->present);
    assert_false(gw_service_has_up(s, GW_DOWN_MS));
    assert_null(gw_service_pick(s, GW_DOWN_MS));
    gw_replica_done(r1, 1, GW_DOWN_MS);
    gw_table_sweep(t);
    assert_int_equal(t->nservices, 0);
    gw_table_destroy(&t);
}

/* A replica that left the table while requests run on it stays (its pointer good,
 * never picked) until its last one ends and the table is swept; if it comes back
 * first, it is the same entry. */
static void test_left_replica_stays_while_used(void **state)
{
    (void)state;
    gw_service_t *s;
    gw_replica_t *r1, *r2;
    gw_table_t *t = two_replicas(&s, &r1, &r2);
    answered_all(s);
    r1->inflight = 2;
    update_llm(t, 2, 0, "[" R(2, 1, "h2", 8000, "b") "]");
    assert_ptr_equal(replica(s, 1, "h1", 8000), r1);
    assert_false(r1->present);
    assert_ptr_equal(r1->svc, s);
    r2->inflight = 50;
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(gw_service_pick(s, 0), r2); /* never the one that left */

    gw_replica_done(r1, 1, 0);
    gw_table_sweep(t);
    assert_ptr_equal(replica(s, 1, "h1", 8000), r1); /* one still runs */
    update_llm(t, 3, 0, "[" R(2, 1, "h2", 8000, "b") "]");
    assert_ptr_equal(replica(s, 1, "h1", 8000), r1); /* nor does an update drop it */
    gw_replica_done(r1, 0, 0);                       /* its last, failed */
    assert_int_equal(r1->inflight, 0);
    assert_int_equal(s->nreplicas, 2);
    gw_table_sweep(t);
    assert_null(replica(s, 1, "h1", 8000));
    assert_int_equal(s->nreplicas, 1);

    /* back before its last request ended: the same entry, its count kept */
    update_llm(t, 4, 0, TWO_REPLICAS);
    r1 = replica(s, 1, "h1", 8000);
    r1->inflight = 1;
    update_llm(t, 5, 0, "[" R(2, 1, "h2", 8000, "b") "]");
    update_llm(t, 6, 0, TWO_REPLICAS);
    assert_ptr_equal(replica(s, 1, "h1", 8000), r1);
    assert_true(r1->present);
    assert_int_equal(r1->inflight, 1);
    assert_int_equal(s->nreplicas, 2);
    gw_table_destroy(&t); /* (with requests still counted: all freed) */
}

/* A service that left the table with nothing in flight or waiting is freed; one
 * with requests waiting for it stays until they are gone and the table is swept. */
static void test_left_service_swept(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    assert_int_equal(
        update(t, 1,
               "{\"services\": [{\"id\": 5, \"name\": \"a\", \"model\": \"ma\", "
               "\"replicas\": "
               "[" R(1, 0, "h1", 8000,
                     "a") "]}, {\"id\": 9, \"name\": \"b\", \"model\": \"mb\", "
                          "\"replicas\": [" R(2, 0, "h2", 8000, "b") "]}]}"),
        0);
    assert_int_equal(t->nservices, 2);
    gw_service_t *b = service(t, 9);
    b->waiting = 1;
    assert_int_equal(update(t, 2, "{\"services\": []}"), 0);
    assert_null(service(t, 5)); /* nothing in flight or waiting: freed */
    assert_ptr_equal(service(t, 9), b);
    assert_false(b->present);
    assert_int_equal(b->nreplicas, 0);       /* its idle replica went */
    assert_true(gw_service_serves(b, "mb")); /* its names kept for those waiting */
    b->waiting = 0;
    assert_ptr_equal(service(t, 9), b); /* (until the sweep) */
    gw_table_sweep(t);
    assert_int_equal(t->nservices, 0);
    assert_int_equal(t->version, 2);
    gw_table_destroy(&t);
}

/* A table without a "services" array is refused (-1) and the table stays as it
 * was: version, services, replicas, counts. */
static void test_malformed_table_changes_nothing(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 7, 0, "[" R(1, 0, "h1", 8000, "a") "]");
    gw_service_t *s = service(t, 5);
    gw_replica_t *r = replica(s, 1, "h1", 8000);
    answered_all(s);
    r->inflight = 2;
    const char *bad[] = {"{}",
                         "{\"services\": {}}",
                         "{\"services\": null}",
                         "{\"services\": \"llm\"}",
                         "{\"table\": {\"services\": []}}",
                         "[]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(update(t, 8 + (int64_t)i, bad[i]), -1);
        assert_int_equal(t->version, 7);
        assert_int_equal(t->nservices, 1);
        assert_ptr_equal(service(t, 5), s);
        assert_true(s->present);
        assert_int_equal(s->nreplicas, 1);
        assert_ptr_equal(replica(s, 1, "h1", 8000), r);
        assert_true(r->present);
        assert_int_equal(r->inflight, 2);
        assert_true(gw_service_serves(s, "llama"));
        assert_ptr_equal(gw_service_pick(s, 0), r);
    }
    assert_int_equal(gw_table_update(t, 99, NULL), -1);
    assert_int_equal(t->version, 7);
    gw_table_destroy(&t);
}

/* A replica entry with a bad port (0, over 65535, not a number), no host or no id
 * is skipped, the good ones beside it taken; a service entry without a model or an
 * id is skipped. */
static void test_bad_entries_skipped(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(t, 1, 0,
               "[" R(1, 0, "h1", 0, "a") ", " R(2, 0, "h2", 65536, "a") ", "
               R(3, 0, "h3", -80, "a") ", "
               "{\"id\": 4, \"replica\": 0, \"host\": \"h4\", \"port\": \"8000\"}, "
               "{\"id\": 5, \"replica\": 0, \"port\": 8000}, "
               "{\"replica\": 0, \"host\": \"h6\", \"port\": 8000}, "
               "\"h7:8000\", " R(8, 1, "h8", 65535, "b") "]");
    gw_service_t *s = service(t, 5);
    assert_int_equal(s->nreplicas, 1);
    assert_non_null(replica(s, 8, "h8", 65535));
    assert_string_equal(replica(s, 8, "h8", 65535)->base, "http://h8:65535");

    /* a node may be left out */
    update_llm(t, 2, 0, "[{\"id\": 9, \"replica\": 0, \"host\": \"h9\", \"port\": 1}]");
    assert_non_null(replica(s, 9, "h9", 1));
    assert_string_equal(replica(s, 9, "h9", 1)->node, "");

    assert_int_equal(update(t, 3,
                            "{\"services\": [{\"id\": 6, \"name\": \"x\"}, "
                            "{\"name\": \"y\", \"model\": \"my\"}, 42, "
                            "{\"id\": 7, \"name\": \"z\", \"model\": \"mz\"}]}"),
                     0);
    assert_int_equal(t->nservices, 1);
    assert_non_null(service(t, 7));
    assert_int_equal(t->version, 3);
    gw_table_destroy(&t);
}

/* A replica's base URL: http://HOST:PORT, an IPv6 address in brackets. */
/* What the gateway tells the coordinator (gateway.load): per service its requests
 * in flight (over its replicas, those that left the table too) and waiting, its
 * answers a second and their mean time over the last GW_WINDOW_S s; per replica
 * its in flight and whether it is routed. A cold start timeout comes with the
 * table. */
static void test_load_report(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    assert_int_equal(update(t, 1, "{\"services\": [" SVC_HEAD "\"cold_start_ms\": 60000, "
                                  "\"replicas\": [" R(7, 0, "10.0.0.1", 9000, "a") ", "
                                  R(8, 1, "10.0.0.2", 9000, "b") "]}]}"),
                     0);
    gw_service_t *s = service(t, 5);
    assert_int_equal(s->cold_start_ms, 60000);
    replica(s, 7, "10.0.0.1", 9000)->inflight = 2;
    replica(s, 8, "10.0.0.2", 9000)->inflight = 1;
    s->waiting = 3;
    /* replica 8 leaves the table with a request on it */
    assert_int_equal(update(t, 2, "{\"services\": [" SVC_HEAD "\"replicas\": ["
                                  R(7, 0, "10.0.0.1", 9000, "a") "]}]}"),
                     0);
    /* answers: 2 in second 100, 1 (a 502) in second 105; the one of second 80 and
     * one of an unknown service do not count */
    gw_table_answered(t, 5, 200, 80, 80000);
    gw_table_answered(t, 5, 200, 10, 100100);
    gw_table_answered(t, 5, 200, 30, 100900);
    gw_table_answered(t, 5, 502, 50, 105000);
    gw_table_answered(t, 99, 200, 10, 105000);
    json_t *load = gw_table_load(t, 105500);
    assert_int_equal(json_array_size(load), 1);
    json_t *e = json_array_get(load, 0);
    assert_int_equal(json_integer_value(json_object_get(e, "id")), 5);
    assert_int_equal(json_integer_value(json_object_get(e, "inflight")), 3);
    assert_int_equal(json_integer_value(json_object_get(e, "waiting")), 3);
    assert_float_equal(json_real_value(json_object_get(e, "rate")), 0.3, 1e-9);
    assert_float_equal(json_real_value(json_object_get(e, "errors")), 0.1, 1e-9);
    assert_float_equal(json_real_value(json_object_get(e, "latency_ms")), 30, 1e-9);
    json_t *reps = json_object_get(e, "replicas");
    assert_int_equal(json_array_size(reps), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(reps, i);
        int id = (int)json_integer_value(json_object_get(r, "id"));
        assert_int_equal(json_integer_value(json_object_get(r, "inflight")), id == 7 ? 2 : 1);
        assert_int_equal(json_is_true(json_object_get(r, "routed")), id == 7);
    }
    json_decref(load);
    /* 10 s on, the window is empty */
    load = gw_table_load(t, 116000);
    e = json_array_get(load, 0);
    assert_float_equal(json_real_value(json_object_get(e, "rate")), 0, 1e-9);
    assert_float_equal(json_real_value(json_object_get(e, "latency_ms")), 0, 1e-9);
    json_decref(load);
    gw_table_destroy(&t);
}

static void test_base_url(void **state)
{
    (void)state;
    gw_table_t *t = gw_table_new();
    update_llm(
        t, 1, 0,
        "[" R(1, 0, "::1", 8000, "a") ", " R(2, 0, "fd00::2", 9000, "b") ", " R(
            3, 0, "10.0.0.1", 8000, "c") ", " R(4, 0, "gpu-a.example", 80, "d") "]");
    gw_service_t *s = service(t, 5);
    assert_string_equal(replica(s, 1, "::1", 8000)->base, "http://[::1]:8000");
    assert_string_equal(replica(s, 2, "fd00::2", 9000)->base, "http://[fd00::2]:9000");
    assert_string_equal(replica(s, 3, "10.0.0.1", 8000)->base, "http://10.0.0.1:8000");
    assert_string_equal(replica(s, 4, "gpu-a.example", 80)->base,
                        "http://gpu-a.example:80");
    gw_table_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_update_takes_fields),
        cmocka_unit_test(test_update_keeps_inflight),
        cmocka_unit_test(test_serves_names),
        cmocka_unit_test(test_pick_fewest_inflight),
        cmocka_unit_test(test_pick_ties_in_turn),
        cmocka_unit_test(test_pick_skips_capped),
        cmocka_unit_test(test_new_replica_on_trial),
        cmocka_unit_test(test_refused_out_at_once),
        cmocka_unit_test(test_failure_backoff),
        cmocka_unit_test(test_back_on_trial),
        cmocka_unit_test(test_one_new_connection_while_in_doubt),
        cmocka_unit_test(test_has_up),
        cmocka_unit_test(test_left_replica_stays_while_used),
        cmocka_unit_test(test_left_service_swept),
        cmocka_unit_test(test_malformed_table_changes_nothing),
        cmocka_unit_test(test_bad_entries_skipped),
        cmocka_unit_test(test_load_report),
        cmocka_unit_test(test_base_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
