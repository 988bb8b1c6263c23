/* test_newer_resume.c - the coordinator's side of a resume from a newer checkpoint
 * than the newest counted (docs/checkpoints.md, "Nothing newer is lost"): job.run's
 * checkpoint.resume_after (coordinator/core/jobs.c) and job.started's resumed
 * (coordinator/api/api_agent.c), on a coordinator made here (coord_fixture.h). */
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
#include "hooks.h"
#include "outbox.h"

typedef fixture_two_t world_t;

static int setup(void **state)
{
    return fixture_two_setup(state, "test_newer_resume", 0, 0);
}

static int teardown(void **state)
{
    return fixture_two_teardown(state);
}

/* A job of nodes ranks with a checkpoint dir, restarted on a non-zero exit. */
static br_job_t *submit(br_coord_t *c, int nodes)
{
    json_t *s = json_pack("{s:s, s:{s:i, s:i}, s:{s:s, s:s, s:s}, s:{s:i, s:[s]}}",
                          "command", "train", "resources", "cpus", 1, "nodes", nodes,
                          "checkpoint", "dir", "/ck", "pattern", "checkpoint-*",
                          "complete_file", "DONE", "restart", "max", 3, "on",
                          "nonzero_exit");
    br_job_t *j = fixture_add_job(c, s);
    return j;
}

/* The body of the newest job.run that went to node n (NULL: none). */
static json_t *last_run(br_coord_t *c, const br_node_t *n)
{
    json_t *body = NULL;
    for (size_t i = 0; i < br_outbox_count(c->out); i++) {
        size_t len;
        const unsigned char *route = br_msg_route(br_outbox_msg(c->out, i), &len);
        if (strcmp(br_msg_type(br_outbox_msg(c->out, i)), "job.run") == 0 && len == 1 &&
            route[0] == (unsigned char)n->name[0])
            body = br_msg_body(br_outbox_msg(c->out, i));
    }
    return body;
}

static const char *run_env(br_coord_t *c, const br_node_t *n, const char *name)
{
    json_t *run = last_run(c, n);
    assert_non_null(run);
    return json_string_value(json_object_get(json_object_get(run, "env"), name));
}

static br_node_t *node_of(world_t *w, const br_job_t *j, int rank)
{
    return j->ranks[rank].node[0] == 'a' ? w->a : w->b;
}

/* Rank 0 of j's current attempt exits with code 1 (a gang's other nodes then speak,
 * so the failure is not held for them): the next attempt is placed. */
static void end_attempt(world_t *w, br_job_t *j)
{
    br_coord_t *c = &w->f.c;
    int attempt = j->attempt, nranks = j->nranks;
    br_node_t *nodes[2] = {NULL, NULL};
    assert_true(nranks <= 2);
    for (int r = 0; r < nranks; r++)
        nodes[r] = node_of(w, j, r);
    br_jobs_exited(c, j->id, attempt, nodes[0], 1, -1, "");
    for (int r = 1; r < nranks; r++) {
        br_node_t *n = nodes[r];
        n->last_seen_mono = br_mono_ms() + 1;
        br_hook_arg_t heard = {.node = n};
        br_hooks_run(c, c->hooks, BR_HOOK_NODE_HEARD, &heard);
    }
    w->a->last_seen_ms = w->b->last_seen_ms = br_now_ms() + 1; /* heard since */
    br_sched_run(c);
    assert_int_equal(j->attempt, attempt + 1);
}

/* Every rank of j's current attempt starts (rank 0 with a port); then ends unless
 * keep (end_attempt). */
static void run_attempt(world_t *w, br_job_t *j, int keep)
{
    br_coord_t *c = &w->f.c;
    int attempt = j->attempt;
    for (int r = 0; r < j->nranks; r++)
        br_jobs_started(c, j->id, attempt, node_of(w, j, r), r == 0 ? 29500 : 0);
    if (!keep)
        end_attempt(w, j);
}

/* An agent's job.started, as api_agent.c takes it: the answer's errnum (0: ok). */
static int started(br_coord_t *c, br_node_t *n, const br_job_t *j, json_t *resumed)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.started", 11);
    json_t *b = json_pack("{s:I, s:i, s:i, s:i}", "job", (json_int_t)j->id, "attempt",
                          j->attempt, "pid", 4242, "port", 29501);
    if (resumed)
        json_object_set_new(b, "resumed", resumed);
    br_msg_set_body(m, b);
    br_msg_set_route(m, n->name, 1);
    br_caller_t who = {BR_PRINCIPAL_NODE, "", 0};
    br_strlcpy(who.name, n->name, sizeof(who.name));
    br_api_job_started(c, m, &who);
    br_msg_destroy(&m);
    /* the answer is the newest response in the outbox */
    for (size_t i = br_outbox_count(c->out); i-- > 0;)
        if (br_msg_kind(br_outbox_msg(c->out, i)) == BR_MSG_RESPONSE &&
            strcmp(br_msg_type(br_outbox_msg(c->out, i)), "job.started") == 0)
            return (int)json_integer_value(json_object_get(br_msg_body(br_outbox_msg(c->out, i)),
                                                           "errnum"));
    fail_msg("job.started was not answered");
    return -1;
}

/* 1 when one of the job's events says text. */
/* Only an attempt after one that ran is told when that one started; not when it
 * resumes from an older checkpoint on purpose (replicas' fallback). */
static void test_resume_after(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_job_t *j = submit(c, 1);
    br_sched_run(c);
    json_t *ck = json_object_get(last_run(c, node_of(w, j, 0)), "checkpoint");
    assert_string_equal(json_string_value(json_object_get(ck, "dir")), "/ck");
    assert_null(json_object_get(ck, "resume_after"));
    run_attempt(w, j, 0);
    ck = json_object_get(last_run(c, node_of(w, j, 0)), "checkpoint");
    assert_true(j->started > 0);
    assert_int_equal(json_integer_value(json_object_get(ck, "resume_after")), j->started);
    run_attempt(w, j, 0);
    fixture_drop_orders(c);
    /* attempt 3 ends before running; attempt 4 is told attempt 3's start */
    int64_t ran = j->started;
    br_jobs_exited(c, j->id, j->attempt, node_of(w, j, 0), 1, -1, "");
    br_sched_run(c);
    ck = json_object_get(last_run(c, node_of(w, j, 0)), "checkpoint");
    assert_int_equal(json_integer_value(json_object_get(ck, "resume_after")), ran);
}

static void test_resume_after_not_with_fallback(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_job_t *j = submit(c, 1);
    br_sched_run(c);
    run_attempt(w, j, 1);
    br_jobs_exited(c, j->id, 1, node_of(w, j, 0), 1, -1, "");
    j->resume_from = strdup("/ck/checkpoint-5");
    j->resume_step = 5;
    j->resume_attempt = 2;
    fixture_drop_orders(c);
    br_sched_run(c);
    json_t *ck = json_object_get(last_run(c, node_of(w, j, 0)), "checkpoint");
    assert_non_null(ck);
    assert_null(json_object_get(ck, "resume_after"));
    assert_string_equal(run_env(c, node_of(w, j, 0), "BRAMBLE_RESUME_FROM"),
                        "/ck/checkpoint-5");
}

/* A two-node gang whose attempt 1 counted checkpoint-20 and then failed: attempt 2
 * is placed, its orders not sent yet but rank 0's. */
static br_job_t *gang_after_20(world_t *w)
{
    br_coord_t *c = &w->f.c;
    br_job_t *j = submit(c, 2);
    br_sched_run(c);
    run_attempt(w, j, 1);
    br_err_t err;
    assert_int_equal(br_jobs_checkpoint(c, j->id, 1, node_of(w, j, 0), "/ck/checkpoint-20",
                                        20, 10, br_now_ms(), NULL, NULL, &err),
                     0);
    fixture_drop_orders(c);
    end_attempt(w, j);
    return j;
}

/* Rank 0 resumed from a newer one: the job's events say so and the other rank is
 * ordered to resume from it too. */
static void test_resumed_gang(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_job_t *j = gang_after_20(w);
    br_node_t *r0 = node_of(w, j, 0), *r1 = node_of(w, j, 1);
    assert_string_equal(run_env(c, r0, "BRAMBLE_RESUME_STEP"), "20");
    assert_null(last_run(c, r1)); /* once rank 0 has started */
    assert_int_equal(started(c, r0, j,
                             json_pack("{s:s, s:i}", "path", "/ck/checkpoint-30", "step", 30)),
                     0);
    assert_string_equal(run_env(c, r1, "BRAMBLE_RESUME_FROM"), "/ck/checkpoint-30");
    assert_string_equal(run_env(c, r1, "BRAMBLE_RESUME_STEP"), "30");
    assert_true(fixture_has_event(c, j->id,
                          "attempt 2 resumes from /ck/checkpoint-30 (step 30), newer than "
                          "the newest counted (step 20): written by the previous attempt "
                          "after its last report"));
    /* its report counts it as attempt 2's */
    br_err_t err;
    assert_int_equal(br_jobs_checkpoint(c, j->id, 2, r0, "/ck/checkpoint-30", 30, 10,
                                        br_now_ms(), NULL, NULL, &err),
                     0);
    json_t *latest = br_store_checkpoint_latest(c->store, j->id, NULL);
    assert_int_equal(json_integer_value(json_object_get(latest, "step")), 30);
    assert_int_equal(json_integer_value(json_object_get(latest, "attempt")), 2);
    json_decref(latest);
}

/* A step not above the newest counted is ignored; a malformed resumed is refused
 * (and the start with it). */
static void test_resumed_ignored_or_refused(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_job_t *j = gang_after_20(w);
    br_node_t *r0 = node_of(w, j, 0), *r1 = node_of(w, j, 1);
    static const char *const bad[] = {
        "{\"path\": \"ck/checkpoint-30\", \"step\": 30}",
        "{\"path\": \"/ck/checkpoint-30\", \"step\": -1}",
        "{\"path\": \"/ck/checkpoint-30\"}",
        "{\"path\": \"/ck/checkpoint-30\", \"step\": 30, \"extra\": 1}",
        "{\"path\": 30, \"step\": 30}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int e = started(c, r0, j, json_loads(bad[i], 0, NULL));
        assert_true(e == EINVAL || e == EPROTO);
        assert_null(last_run(c, r1)); /* not heard as a start */
    }
    /* the rank that is not 0 says it: ignored, though heard as its start */
    assert_int_equal(started(c, r1, j,
                             json_pack("{s:s, s:i}", "path", "/ck/checkpoint-30", "step", 30)),
                     0);
    assert_null(last_run(c, r1));
    assert_int_equal(started(c, r0, j,
                             json_pack("{s:s, s:i}", "path", "/ck/checkpoint-20", "step", 20)),
                     0);
    assert_string_equal(run_env(c, r1, "BRAMBLE_RESUME_STEP"), "20");
    assert_false(fixture_has_event(c, j->id,
                           "attempt 2 resumes from /ck/checkpoint-20 (step 20), newer than "
                           "the newest counted (step 20): written by the previous attempt "
                           "after its last report"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_resume_after),
        T(test_resume_after_not_with_fallback),
        T(test_resumed_gang),
        T(test_resumed_ignored_or_refused),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
