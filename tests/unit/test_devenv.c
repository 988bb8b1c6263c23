/* test_devenv.c - dev environments stopped when unused (coordinator/policy/
 * devenv.c), on a coordinator made here (coord_fixture.h: nodes a and b of 4
 * CPUs), with a dev environment submitted through the real handler as user ann.
 *
 * Its idle clock starts when it runs; output (job.log) and a use seen by the
 * module start it again; past idle_stop it is asked to stop as a cancel asks
 * (SIGTERM, then the grace) with an event naming idle_stop, and ends cancelled
 * once its exit comes; job show tells how long it has been idle. A train job is
 * never stopped for being quiet, and a coordinator that starts again gives a
 * dev environment its whole idle_stop. Times are passed in to the decision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coord_fixture.h"
#include "devenv.h"

#define KEY_ANN "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"

static int setup(void **state)
{
    return fixture_two_with_ann(state, "test_devenv", KEY_ANN);
}

static int teardown(void **state)
{
    return fixture_two_teardown(state);
}

/* Submit yaml as ann, place it and have its node report it started. */
static br_job_t *run(br_coord_t *c, const char *yaml)
{
    json_t *body = json_pack("{s:s, s:[]}", "spec", yaml, "sets");
    char *text = json_dumps(body, 0);
    json_decref(body);
    json_t *a = fixture_call(c, KEY_ANN, "job.submit", text);
    free(text);
    int64_t id = json_integer_value(json_object_get(a, "id"));
    json_decref(a);
    assert_true(id > 0);
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    assert_non_null(j);
    assert_int_equal(j->nranks, 1);
    br_jobs_started(c, id, j->attempt, br_nodes_find(c->nodes, j->ranks[0].node), 0);
    assert_int_equal(j->state, BR_JOB_RUNNING);
    return j;
}

static void test_idle_dev_stops(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_job_t *j = run(c, "name: box\nkind: dev\ncommand: sleep infinity\nidle_stop: 5s\n");
    int64_t id = j->id, t0 = br_mono_ms();
    br_devenv_run(c, t0 + 4000);
    assert_int_equal(j->stop.at_mono, 0);
    /* job show says how long */
    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)id);
    json_t *show = fixture_call(c, KEY_ANN, "job.show", body);
    json_t *dev = json_object_get(json_object_get(show, "job"), "dev");
    assert_int_equal(json_integer_value(json_object_get(dev, "idle_stop")), 5000);
    assert_int_equal(json_integer_value(json_object_get(dev, "streams")), 0);
    assert_true(json_integer_value(json_object_get(dev, "idle")) >= 0);
    json_decref(show);
    /* used again: the clock starts over */
    br_devenv_touch(c, id);
    int64_t t1 = br_mono_ms();
    br_devenv_run(c, t1 + 4999);
    assert_int_equal(j->stop.at_mono, 0);
    br_devenv_run(c, t1 + 5000 + 100);
    assert_true(j->stop.at_mono != 0);
    assert_int_equal(j->stop.cancel, 1);
    assert_true(fixture_has_event(c, id, "idle for 5s (idle_stop): no shell, no forward "
                                         "connection and no output: SIGTERM sent"));
    /* a second tick asks nothing more */
    br_devenv_run(c, t1 + 9000);
    /* its exit comes: cancelled, and the reason says why */
    br_jobs_exited(c, id, j->attempt, br_nodes_find(c->nodes, j->ranks[0].node), 143, 0,
                   "exited with status 143");
    json_t *row = br_store_job_get(c->store, id, NULL);
    assert_string_equal(json_string_value(json_object_get(row, "state")), "cancelled");
    assert_non_null(strstr(json_string_value(json_object_get(row, "reason")),
                           "idle for 5s (idle_stop)"));
    json_decref(row);
}

/* A train job is never stopped for want of use; a dev one the coordinator loads
 * again has its whole idle_stop from then. */
static void test_only_dev_and_reload(void **state)
{
    fixture_two_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_job_t *t = run(c, "name: quiet\ncommand: sleep infinity\n");
    br_job_t *d = run(c, "name: box\nkind: dev\ncommand: sleep infinity\nidle_stop: 2s\n");
    int64_t tid = t->id, did = d->id;
    br_devenv_run(c, br_mono_ms() + 3 * 3600 * 1000);
    assert_int_equal(t->stop.at_mono, 0);
    assert_true(d->stop.at_mono != 0);
    /* a coordinator starting again: a new dev environment's clock starts at the load */
    br_job_t *d2 = run(c, "name: box2\nkind: dev\ncommand: sleep infinity\nidle_stop: 2s\n");
    int64_t d2id = d2->id;
    assert_int_equal(br_store_commit(c->store, NULL), 0);
    br_err_t err;
    assert_int_equal(br_store_begin(c->store, &err), 0);
    assert_int_equal(br_jobs_restore(c, &err), 0);
    int64_t loaded = br_mono_ms();
    br_devenv_run(c, loaded + 1500);
    d2 = br_jobtab_find(c->jobs, d2id);
    assert_non_null(d2);
    assert_int_equal(d2->stop.at_mono, 0);
    br_devenv_run(c, loaded + 2500);
    assert_true(d2->stop.at_mono != 0);
    assert_int_equal(br_jobtab_find(c->jobs, tid)->stop.at_mono, 0);
    (void)did;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idle_dev_stops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_only_dev_and_reload, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
