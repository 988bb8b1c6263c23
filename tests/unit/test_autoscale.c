/* test_autoscale.c - services scaled by their load (coordinator/policy/autoscale.c),
 * the gateways' load reports (gwload.c) and draining replicas (services.c).
 *
 * The decision alone: a cold start at once, more after up_after (the least asked
 * for over that time), fewer after down_after (the most asked), nothing more
 * while a replica waits to be placed, min and max kept. The reports: malformed
 * ones refused naming what, sums over the gateways that reported lately, when a
 * replica may stop. Then on a coordinator made here (coord_fixture.h: nodes a and
 * b of 4 CPUs), a service submitted through the real handler as user ann: a
 * request waiting at 0 replicas starts one at once; load held for up_after adds
 * replicas; load gone for down_after drains the highest numbered, which leave the
 * routing table at once and stop once no gateway holds a request on them; a
 * draining replica wanted again takes requests again; `scale` outside min..max is
 * refused. Times given to the decisions are passed in; a drain compares the
 * reports with the monotonic clock, so those reports are stamped with it. */
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
#include "autoscale.h"
#include "gwload.h"
#include "jobtab.h"
#include "outbox.h"

#define KEY_ANN "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"

static br_autoscale_spec_t policy(int min, int max, int target)
{
    br_autoscale_spec_t as = {.on = 1,
                              .min = min,
                              .max = max,
                              .target_inflight = target,
                              .up_after_ms = 10000,
                              .down_after_ms = 60000,
                              .cold_start_ms = 300000};
    return as;
}

/* At 0 replicas, one waiting request asks for one now; with nothing waiting and
 * min 0, nothing is asked. */
static void test_decide_cold_start(void **state)
{
    (void)state;
    br_autoscale_spec_t as = policy(0, 4, 4);
    br_autoscale_track_t t = {0};
    char why[200];
    assert_int_equal(br_autoscale_decide(&as, &t, 0, 0, 0, 1000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 0, 1, 0, 1000, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "1 request waits for a replica"));
    assert_non_null(strstr(why, "cold start"));
    /* 9 waiting at 0 start ceil(9/4) = 3 at once */
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 0, 9, 0, 1000, why, sizeof(why)), 3);
}

/* More replicas only after up_after of asking, and the least asked for over that
 * time; a dip to what is there starts the wait again; a replica still waiting to
 * be placed holds it; max caps it. */
static void test_decide_up(void **state)
{
    (void)state;
    br_autoscale_spec_t as = policy(0, 4, 4);
    br_autoscale_track_t t = {0};
    char why[200];
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 12, 0, 101000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 9, 0, 106000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 16, 0, 110999, why, sizeof(why)), -1);
    /* 10 s on: the least asked was ceil(9/4) = 3 */
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 16, 0, 111000, why, sizeof(why)), 3);
    assert_non_null(strstr(why, "at least 9 requests in flight or waiting for 10s"));
    /* a dip starts the wait again */
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 12, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 4, 0, 105000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 12, 0, 106000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 12, 0, 115000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 12, 0, 116000, why, sizeof(why)), 3);
    /* one waiting to be placed holds it */
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 2, 40, 1, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 2, 40, 1, 120000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 2, 40, 0, 121000, why, sizeof(why)), -1);
    /* max caps it */
    assert_int_equal(br_autoscale_decide(&as, &t, 2, 40, 0, 131000, why, sizeof(why)), 4);
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 4, 400, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 4, 400, 0, 199000, why, sizeof(why)), -1);
}

/* Fewer replicas only after down_after of asking, the most asked over that time,
 * never under min; to zero when min is 0. */
static void test_decide_down(void **state)
{
    (void)state;
    br_autoscale_spec_t as = policy(1, 4, 4);
    br_autoscale_track_t t = {0};
    char why[200];
    assert_int_equal(br_autoscale_decide(&as, &t, 4, 0, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 4, 7, 0, 130000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 4, 0, 0, 159999, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 4, 0, 0, 160000, why, sizeof(why)), 2);
    assert_non_null(strstr(why, "at most 7 requests in flight or waiting for 1m"));
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 2, 0, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 2, 0, 0, 160000, why, sizeof(why)), 1);
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 0, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 0, 0, 190000, why, sizeof(why)), -1);
    as = policy(0, 4, 4);
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 0, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 0, 0, 160000, why, sizeof(why)), 0);
    /* under min (a spec changed): up to it, as any rise */
    as = policy(2, 4, 4);
    memset(&t, 0, sizeof(t));
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 0, 0, 100000, why, sizeof(why)), -1);
    assert_int_equal(br_autoscale_decide(&as, &t, 1, 0, 0, 110000, why, sizeof(why)), 2);
}

static json_t *report(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("%s: %s", text, je.text);
    return j;
}

/* Reports: malformed ones are refused naming what; the load is summed over the
 * gateways that reported within BR_GWLOAD_FRESH_MS; a replica is idle once every
 * fresh gateway reported after the drain began, routes it nothing and holds
 * nothing on it. */
static void test_gwload(void **state)
{
    (void)state;
    br_gwload_t *l = br_gwload_new();
    br_err_t err;
    json_t *bad[] = {
        report("{}"),
        report("[{\"id\": 1, \"inflight\": -1, \"waiting\": 0, \"replicas\": []}]"),
        report("[{\"id\": 1, \"inflight\": 0, \"waiting\": 0}]"),
        report("[{\"id\": 1, \"inflight\": 0, \"waiting\": 0, \"rate\": -1, "
               "\"replicas\": []}]"),
        report("[{\"id\": 1, \"inflight\": 0, \"waiting\": 0, \"replicas\": "
               "[{\"id\": 2, \"inflight\": 0}]}]"),
    };
    const char *says[] = {"services must be an array", "services[0] must be",
                          "services[0] must be", "services[0] must be",
                          "services[0].replicas[0] must be"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(br_gwload_take(l, "gw1", bad[i], 5, 1000, &err), -1);
        assert_int_equal(err.errnum, EPROTO);
        assert_non_null(strstr(err.text, says[i]));
        json_decref(bad[i]);
    }
    assert_int_equal(br_gwload_fresh(l, 1000), 0);
    json_t *r1 = report("[{\"id\": 10, \"inflight\": 3, \"waiting\": 2, \"rate\": 3.0, "
                        "\"errors\": 0.5, \"latency_ms\": 10, \"replicas\": "
                        "[{\"id\": 11, \"inflight\": 3, \"routed\": true},"
                        " {\"id\": 12, \"inflight\": 0, \"routed\": false}]}]");
    json_t *r2 = report("[{\"id\": 10, \"inflight\": 1, \"waiting\": 0, \"rate\": 1, "
                        "\"latency_ms\": 50, \"replicas\": "
                        "[{\"id\": 12, \"inflight\": 1, \"routed\": false}]}]");
    assert_int_equal(br_gwload_take(l, "gw1", r1, 5, 1000, &err), 0);
    assert_int_equal(br_gwload_take(l, "gw2", r2, 5, 2000, &err), 0);
    int inflight, waiting, held;
    br_gwload_service(l, 10, 2500, &inflight, &waiting);
    assert_int_equal(inflight, 4);
    assert_int_equal(waiting, 2);
    /* answers a second summed, their time weighted by each gateway's rate */
    double rate, errors, latency;
    br_gwload_service_rates(l, 10, 2500, &rate, &errors, &latency);
    assert_float_equal(rate, 4, 1e-9);
    assert_float_equal(errors, 0.5, 1e-9);
    assert_float_equal(latency, 20, 1e-9);
    br_gwload_service(l, 99, 2500, &inflight, &waiting);
    assert_int_equal(inflight + waiting, 0);
    assert_int_equal(br_gwload_fresh(l, 2500), 2);
    /* gw1's report is stale at 4000 */
    assert_int_equal(br_gwload_fresh(l, 4000), 1);
    br_gwload_service(l, 10, 4000, &inflight, &waiting);
    assert_int_equal(inflight, 1);
    /* replica 12: gw2 holds one on it */
    assert_int_equal(br_gwload_replica_idle(l, 12, 500, 4, 2500, &held), 0);
    assert_int_equal(held, 1);
    json_t *r3 = report("[{\"id\": 10, \"inflight\": 0, \"waiting\": 0, \"replicas\": "
                        "[{\"id\": 12, \"inflight\": 0, \"routed\": false}]}]");
    assert_int_equal(br_gwload_take(l, "gw2", r3, 6, 2600, &err), 0);
    /* gw1 is stale by 4100: gw2 alone speaks, and it has heard */
    assert_int_equal(br_gwload_replica_idle(l, 12, 500, 5, 4100, &held), 1);
    assert_int_equal(held, 0);
    /* with gw1 fresh too (its report from before the drain): not yet */
    assert_int_equal(br_gwload_replica_idle(l, 12, 500, 5, 2700, NULL), 0);
    /* a report that came before the drain began, or made from a table no newer
     * than the one of the drain's start, is not heard */
    assert_int_equal(br_gwload_replica_idle(l, 12, 2650, 5, 4100, NULL), 0);
    assert_int_equal(br_gwload_replica_idle(l, 12, 500, 6, 4100, NULL), 0);
    /* routed still: not idle */
    assert_int_equal(br_gwload_replica_idle(l, 11, 500, 5, 2700, NULL), 0);
    /* a gateway removed leaves no trace; none fresh: nobody has heard, so it
     * waits (one gone quiet may still hold requests) */
    br_gwload_forget(l, "gw1");
    br_gwload_forget(l, "gw2");
    assert_int_equal(br_gwload_fresh(l, 2700), 0);
    assert_int_equal(br_gwload_replica_idle(l, 12, 500, 5, 2700, NULL), 0);
    json_decref(r1);
    json_decref(r2);
    json_decref(r3);
    br_gwload_destroy(&l);
}

/* ---- on a coordinator --------------------------------------------------------- */

#define SPEC_AUTO                                                                  \
    "name: chat\nkind: service\ncommand: serve\nresources: {cpus: 1}\nservice:\n"  \
    "  model: m\n  autoscale: {min: 0, max: 3, target_inflight: 2, up_after: 10s," \
    " down_after: 1m}\n"

static int setup(void **state)
{
    return fixture_two_with_ann(state, "test_autoscale", KEY_ANN);
}

static int teardown(void **state)
{
    return fixture_two_teardown(state);
}

static json_t *call(br_coord_t *c, const char *type, const char *body)
{
    return fixture_call(c, KEY_ANN, type, body);
}

static int64_t submit(br_coord_t *c, const char *yaml)
{
    json_t *body = json_pack("{s:s, s:[]}", "spec", yaml, "sets");
    char *text = json_dumps(body, 0);
    json_decref(body);
    json_t *a = call(c, "job.submit", text);
    free(text);
    int64_t id = json_integer_value(json_object_get(a, "id"));
    json_decref(a);
    assert_true(id > 0);
    return id;
}

/* The service's live replica number k, or NULL. */
static br_job_t *replica(br_coord_t *c, int64_t service, int k)
{
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        if (j->service == service && j->replica == k && !br_job_state_ended(j->state))
            return j;
    return NULL;
}

static int live_replicas(br_coord_t *c, int64_t service)
{
    int n = 0;
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        n += j->service == service && !br_job_state_ended(j->state);
    return n;
}

/* Place what waits, and have each replica of service start on port 9000+K and its
 * agent say it is healthy (each node reports all its tasks at once: a task left
 * out of a report is one the node no longer runs). */
static void all_healthy(br_coord_t *c, int64_t service)
{
    br_sched_run(c);
    br_node_t *nodes[] = {br_nodes_find(c->nodes, "a"), br_nodes_find(c->nodes, "b")};
    for (int i = 0; i < 2; i++) {
        json_t *tasks = json_array();
        for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next) {
            if (j->service != service || br_job_state_ended(j->state) || !j->nranks ||
                strcmp(j->ranks[0].node, nodes[i]->name) != 0)
                continue;
            if (j->state != BR_JOB_RUNNING)
                br_jobs_started(c, j->id, j->attempt, nodes[i], 9000 + j->replica);
            json_array_append_new(tasks, json_pack("{s:I, s:i, s:i}", "job",
                                                   (json_int_t)j->id, "attempt", j->attempt,
                                                   "port", 9000 + j->replica));
        }
        br_jobs_reconcile(c, nodes[i], tasks, 0);
        json_decref(tasks);
    }
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        if (j->service == service && !br_job_state_ended(j->state) && j->nranks)
            assert_string_equal(br_services_health_of(c, j->id), "healthy");
}

/* A gateway's load report for service: inflight and waiting, and for each live
 * replica its in-flight count (held[k], or 0) and whether it is routed (it is
 * among the endpoints). */
static void load(br_coord_t *c, int64_t service, int inflight, int waiting,
                 const int *held, int64_t now)
{
    /* (the gateway has the table made after the last change) */
    int64_t version = br_gwload_table_version(c->gwload) + 1;
    json_t *reps = json_array();
    json_t *ends = br_services_endpoints_of(c, service);
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next) {
        if (j->service != service || br_job_state_ended(j->state))
            continue;
        int routed = 0;
        size_t i;
        json_t *e;
        json_array_foreach(ends, i, e)
            routed |= json_integer_value(json_object_get(e, "id")) == j->id;
        json_array_append_new(reps, json_pack("{s:I, s:i, s:b}", "id", (json_int_t)j->id,
                                              "inflight", held ? held[j->replica] : 0,
                                              "routed", routed));
    }
    json_decref(ends);
    json_t *services = json_pack("[{s:I, s:i, s:i, s:o}]", "id", (json_int_t)service,
                                 "inflight", inflight, "waiting", waiting, "replicas", reps);
    br_err_t err;
    assert_int_equal(br_gwload_take(c->gwload, "gw1", services, version, now, &err), 0);
    json_decref(services);
}

static int endpoints(br_coord_t *c, int64_t service)
{
    json_t *e = br_services_endpoints_of(c, service);
    int n = (int)json_array_size(e);
    json_decref(e);
    return n;
}

/* Submitted at min 0: no replica; a request waiting starts one at once; load
 * held up_after adds up to what it asks; the routing table keeps the service at 0
 * with its cold start timeout. */
static void test_scales_up_from_zero(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t svc = submit(c, SPEC_AUTO);
    assert_int_equal(live_replicas(c, svc), 0);
    json_t *t = br_routes_table(c);
    json_t *e = json_array_get(json_object_get(t, "services"), 0);
    assert_int_equal(json_integer_value(json_object_get(e, "id")), svc);
    assert_int_equal(json_integer_value(json_object_get(e, "cold_start_ms")), 300000);
    json_decref(t);
    int64_t now = br_mono_ms();
    load(c, svc, 0, 0, NULL, now);
    br_autoscale_run(c, now);
    assert_int_equal(live_replicas(c, svc), 0);
    load(c, svc, 0, 1, NULL, now + 100);
    br_autoscale_run(c, now + 100);
    assert_int_equal(live_replicas(c, svc), 1);
    assert_true(fixture_has_event(c, svc, "scaled from 0 to 1 replica: autoscale: 1 request waits"));
    all_healthy(c, svc);
    /* 5 in flight ask for 3 (target 2): after 10 s */
    load(c, svc, 5, 0, NULL, now + 1000);
    br_autoscale_run(c, now + 1000);
    load(c, svc, 5, 0, NULL, now + 10999);
    br_autoscale_run(c, now + 10999);
    assert_int_equal(live_replicas(c, svc), 1);
    load(c, svc, 6, 0, NULL, now + 11000);
    br_autoscale_run(c, now + 11000);
    assert_int_equal(live_replicas(c, svc), 3);
    assert_true(fixture_has_event(c, svc, "scaled from 1 to 3 replicas: autoscale: at least 5"));
    /* job show tells the load and what it asks */
    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)svc);
    json_t *show = call(c, "job.show", body);
    json_t *as = json_object_get(json_object_get(show, "job"), "autoscale");
    assert_non_null(as);
    assert_int_equal(json_integer_value(json_object_get(as, "max")), 3);
    assert_int_equal(json_integer_value(json_object_get(as, "wants")), 3);
    json_decref(show);
}

/* Load gone for down_after: the highest numbered drain (out of the endpoints at
 * once, still running); each stops once the gateway holds nothing on it; a drain
 * wanted again is taken back. */
static void test_drains_on_scale_down(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t svc = submit(c, SPEC_AUTO);
    int64_t now = br_mono_ms();
    load(c, svc, 0, 6, NULL, now);
    br_autoscale_run(c, now);
    assert_int_equal(live_replicas(c, svc), 3);
    all_healthy(c, svc);
    assert_int_equal(endpoints(c, svc), 3);
    /* 1 in flight asks for 1: after a minute, replicas 1 and 2 drain */
    int held[3] = {1, 0, 1};
    load(c, svc, 2, 0, held, now + 1000);
    br_autoscale_run(c, now + 1000);
    load(c, svc, 1, 0, held, now + 61000);
    br_autoscale_run(c, now + 61000);
    assert_int_equal(live_replicas(c, svc), 3);
    assert_int_equal(endpoints(c, svc), 1);
    assert_true(fixture_has_event(c, replica(c, svc, 2)->id, "replica 2 draining"));
    assert_int_equal(replica(c, svc, 2)->state, BR_JOB_RUNNING);
    /* a tick with the gateway's report from before the drain: nothing stops */
    br_hooks_run(c, c->hooks, BR_HOOK_TICK, NULL);
    assert_int_equal(live_replicas(c, svc), 3);
    /* the next report: replica 1 idle, 2 still holds one */
    int64_t r2 = replica(c, svc, 2)->id, r1 = replica(c, svc, 1)->id;
    load(c, svc, 2, 0, held, br_mono_ms() + 1);
    br_hooks_run(c, c->hooks, BR_HOOK_TICK, NULL);
    assert_null(replica(c, svc, 1));
    assert_true(fixture_has_event(c, r1, "replica 1 stops: drained"));
    assert_non_null(replica(c, svc, 2));
    /* load comes back: replica 2 is wanted again, and not stopped */
    load(c, svc, 5, 0, held, now + 62000);
    br_autoscale_run(c, now + 62000);
    load(c, svc, 5, 0, held, now + 72000);
    br_autoscale_run(c, now + 72000);
    assert_true(fixture_has_event(c, r2, "replica 2 is wanted again"));
    assert_int_equal(endpoints(c, svc), 2);
    assert_int_equal(live_replicas(c, svc), 3); /* replica 3 is new, waiting */
}

/* bramble scale of an autoscaled service stays within min..max. */
static void test_scale_by_hand_within_bounds(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    submit(c, SPEC_AUTO);
    json_t *a = call(c, "service.scale", "{\"name\": \"chat\", \"replicas\": 5}");
    assert_non_null(strstr(json_string_value(json_object_get(a, "error")),
                           "scales itself between 0 and 3 replicas"));
    json_decref(a);
    a = call(c, "service.scale", "{\"name\": \"chat\", \"replicas\": 2}");
    assert_null(json_object_get(a, "error"));
    json_decref(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide_cold_start),
        cmocka_unit_test(test_decide_up),
        cmocka_unit_test(test_decide_down),
        cmocka_unit_test(test_gwload),
        cmocka_unit_test_setup_teardown(test_scales_up_from_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drains_on_scale_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scale_by_hand_within_bounds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
