/* test_jobs.c - the job core's state machine (jobs.h) on a coordinator made here:
 * a real store in a temporary directory, nodes in memory, no sockets (the orders
 * to agents are read from the outbox). Each test drives a job through the calls
 * the handlers make (placement by the scheduler, started, exited, not here, node
 * full, node lost, reconcile, cancel, time limit) with the modules' hooks as
 * brambled registers them (coord_fixture.h), and checks its state in memory
 * and in the store, what the nodes hold, and which orders went to which node;
 * and that jobs a pass does not look at again keep their reason. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api.h"
#include "coord_fixture.h"
#include "hooks.h"
#include "nodelife.h"
#include "services.h"
#include "jobtab.h"
#include "outbox.h"

typedef fixture_two_t world_t;

static int setup(void **state)
{
    return fixture_two_setup(state, "test_jobs", 0, 0);
}

static int teardown(void **state)
{
    return fixture_two_teardown(state);
}

/* The node the job's rank 0 was placed on. */
static br_node_t *rank0_node(br_coord_t *c, const br_job_t *job)
{
    assert_true(job->nranks > 0);
    br_node_t *n = br_nodes_find(c->nodes, job->ranks[0].node);
    assert_non_null(n);
    return n;
}

/* Submit a job: spec as JSON text. */
static int64_t submit(br_coord_t *c, const char *spec)
{
    json_error_t e;
    json_t *s = json_loads(spec, 0, &e);
    assert_non_null(s);
    br_job_t *j = fixture_add_job(c, s);
    assert_int_equal(j->state, BR_JOB_PENDING);
    return j->id;
}

/* The stored row's state; the job's place in memory agrees with it. */
static const char *stored_state(br_coord_t *c, int64_t id, char *buf, size_t len)
{
    json_t *row = br_store_job_get(c->store, id, NULL);
    assert_non_null(row);
    br_strlcpy(buf, json_string_value(json_object_get(row, "state")), len);
    json_decref(row);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    int s = br_job_state_parse(buf);
    if (br_job_state_ended((br_job_state_t)s))
        assert_null(j);
    else
        assert_true(j && j->state == (br_job_state_t)s);
    return buf;
}

static void assert_state(br_coord_t *c, int64_t id, const char *want)
{
    char buf[32];
    assert_string_equal(stored_state(c, id, buf, sizeof(buf)), want);
}

/* How many orders of type went to node (route = its first letter). */
static int orders(br_coord_t *c, const char *type, const br_node_t *n)
{
    int count = 0;
    for (size_t i = 0; i < br_outbox_count(c->out); i++)
        count += fixture_is_order(br_outbox_msg(c->out, i), type, n);
    return count;
}

/* The newest event of the job: its reason contains text. */
static void assert_event(br_coord_t *c, int64_t id, const char *text)
{
    json_t *ev = br_store_event_list(c->store, id, 0, 0, NULL);
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    const char *reason = json_string_value(json_object_get(last, "reason"));
    if (!reason || !strstr(reason, text))
        fail_msg("job %lld: newest event '%s', wanted '%s'", (long long)id,
                 reason ? reason : "(none)", text);
    json_decref(ev);
}

static void test_runs_and_completes(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t id = submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 3}}");
    br_sched_run(c);
    assert_state(c, id, "starting");
    assert_int_equal(w->a->cpus_used, 3);
    assert_int_equal(orders(c, "job.run", w->a), 1);
    br_jobs_started(c, id, 1, w->a, 0);
    assert_state(c, id, "running");
    assert_event(c, id, "attempt 1 running on a");
    br_jobs_exited(c, id, 1, w->a, 0, -1, "");
    assert_state(c, id, "completed");
    assert_int_equal(w->a->cpus_used, 0);
    assert_int_equal(w->a->attempts, 0);
    json_t *row = br_store_job_get(c->store, id, NULL);
    assert_true(json_integer_value(json_object_get(row, "ended")) > 0);
    assert_int_equal(json_integer_value(json_object_get(row, "exit_code")), 0);
    assert_string_equal(json_string_value(json_array_get(json_object_get(row, "nodes"), 0)),
                        "a"); /* where it ran stays */
    json_decref(row);
    /* a report for it now changes nothing */
    br_jobs_exited(c, id, 1, w->a, 1, -1, "");
    assert_state(c, id, "completed");
    assert_event(c, id, "no longer current");
    br_jobtab_sweep(c->jobs);
}

static void test_restart_policy_then_failed(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t id = submit(c, "{\"command\": \"false\", \"resources\": {\"cpus\": 1},"
                           " \"restart\": {\"on\": [\"nonzero_exit\"], \"max\": 1}}");
    br_sched_run(c);
    br_jobs_started(c, id, 1, w->a, 0);
    br_jobs_exited(c, id, 1, w->a, 3, -1, "");
    assert_state(c, id, "pending");
    br_job_t *j = br_jobtab_find(c->jobs, id);
    assert_int_equal(j->attempt, 2);
    assert_int_equal(j->restarts, 1);
    assert_int_equal(j->nranks, 0);
    assert_int_equal(j->exit_code, 3);
    assert_int_equal(w->a->cpus_used, 0);
    assert_event(c, id, "exit code 3; restarting as attempt 2 (nonzero_exit)");
    br_sched_run(c);
    assert_state(c, id, "starting");
    br_jobs_exited(c, id, 1, w->a, 3, -1, ""); /* the old attempt's exit: stale */
    assert_state(c, id, "starting");
    int64_t on = j->ranks[0].node[0] == 'a' ? 0 : 1;
    br_node_t *n = on == 0 ? w->a : w->b;
    br_jobs_exited(c, id, 2, n, -1, 9, "");
    assert_state(c, id, "failed"); /* max 1 restart, used */
    assert_event(c, id, "killed by signal 9");
    assert_int_equal(n->cpus_used, 0);
    br_jobtab_sweep(c->jobs);
}

static void test_gang_port_and_failure_stops_all(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t id = submit(c, "{\"command\": \"train\", \"resources\": {\"cpus\": 2, \"nodes\": 2}}");
    br_sched_run(c);
    assert_state(c, id, "starting");
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 4);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    br_node_t *r0 = rank0_node(c, j);
    br_node_t *r1 = r0 == w->a ? w->b : w->a;
    assert_int_equal(orders(c, "job.run", r0), 1);
    assert_int_equal(orders(c, "job.run", r1), 0); /* after rank 0 chose its port */
    br_jobs_started(c, id, 1, r0, 29555);
    assert_int_equal(orders(c, "job.run", r1), 1);
    assert_int_equal(j->port, 29555);
    assert_state(c, id, "starting"); /* until every rank runs */
    br_jobs_started(c, id, 1, r1, 0);
    assert_state(c, id, "running");
    fixture_drop_orders(c);
    br_jobs_exited(c, id, 1, r1, 1, -1, "");
    assert_state(c, id, "running"); /* held until r0's node speaks (it may be dying) */
    r0->last_seen_mono = br_mono_ms() + 1;
    br_hook_arg_t heard = {.node = r0};
    br_hooks_run(c, c->hooks, BR_HOOK_NODE_HEARD, &heard);
    assert_state(c, id, "failed");
    assert_int_equal(orders(c, "job.kill", r0), 1); /* the other rank is stopped */
    assert_int_equal(orders(c, "job.kill", r1), 0); /* (its own is gone already) */
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 0);
    assert_event(c, id, "stopped the other 1 rank");
    br_jobtab_sweep(c->jobs);
}

/* The progress field of the job.run order that went to node n (NULL: none). */
static json_t *run_progress(br_coord_t *c, const br_node_t *n)
{
    for (size_t i = 0; i < br_outbox_count(c->out); i++)
        if (fixture_is_order(br_outbox_msg(c->out, i), "job.run", n))
            return json_object_get(br_msg_body(br_outbox_msg(c->out, i)), "progress");
    return NULL;
}

/* progress.timeout goes to rank 0's node, which judges the gang; an attempt its
 * agent ended as hung stops the other ranks and is restarted under restart.on's
 * hung, and fails once restart.max is used. */
static void test_hung_restarts_then_fails(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t id = submit(c, "{\"command\": \"train\", \"resources\": {\"cpus\": 1, \"nodes\": 2},"
                           " \"progress\": {\"timeout\": 3000},"
                           " \"restart\": {\"on\": [\"hung\"], \"max\": 1}}");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    br_node_t *r0 = rank0_node(c, j);
    br_node_t *r1 = r0 == w->a ? w->b : w->a;
    json_t *p = run_progress(c, r0);
    assert_int_equal(json_integer_value(json_object_get(p, "timeout")), 3000);
    br_jobs_started(c, id, 1, r0, 29555);
    assert_null(run_progress(c, r1)); /* only rank 0's node judges */
    br_jobs_started(c, id, 1, r1, 0);
    assert_state(c, id, "running");
    fixture_drop_orders(c);
    br_jobs_hung(c, id, 1, r0, -1, 9, "hung: no output, checkpoint or progress for 3s");
    assert_state(c, id, "pending");
    assert_int_equal(j->attempt, 2);
    assert_int_equal(j->restarts, 1);
    assert_int_equal(orders(c, "job.kill", r1), 1); /* the gang stops on every node */
    assert_event(c, id, "hung: no output, checkpoint or progress for 3s; stopped the "
                        "other 1 rank; restarting as attempt 2 (hung)");
    /* attempt 2 runs, and hangs too */
    br_sched_run(c);
    r0 = rank0_node(c, j);
    r1 = r0 == w->a ? w->b : w->a;
    br_jobs_started(c, id, 2, r0, 29556);
    br_jobs_started(c, id, 2, r1, 0);
    br_jobs_hung(c, id, 1, r0, -1, 9, "hung: stale"); /* the old attempt: nothing */
    assert_state(c, id, "running");
    br_jobs_hung(c, id, 2, r0, -1, 9, "hung: no output, checkpoint or progress for 3s");
    assert_state(c, id, "failed"); /* max 1 restart, used */
    br_jobtab_sweep(c->jobs);
}

static void test_node_faults(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    /* cannot run here: never again on that node, no restart counted */
    int64_t id = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    br_node_t *n = rank0_node(c, j);
    br_jobs_not_here(c, id, 1, n, "checkpoint not visible");
    assert_state(c, id, "pending");
    assert_true(br_job_excluded(j, n->name));
    assert_int_equal(j->restarts, 0);
    br_sched_run(c);
    assert_state(c, id, "starting");
    assert_true(j->ranks[0].node[0] != n->name[0]); /* the other node */
    /* too busy: back to pending, no restart, a second's wait */
    br_node_t *m = n == w->a ? w->b : w->a;
    br_jobs_node_full(c, id, 2, m, "this node runs 256 attempts already");
    assert_state(c, id, "pending");
    assert_int_equal(j->restarts, 0);
    assert_true(j->not_before > br_now_ms());
    assert_int_equal(m->cpus_used, 0);
    /* its node lost, with no restart policy for it: failed */
    j->not_before = 0;
    br_sched_run(c);
    assert_state(c, id, "starting");
    br_hook_arg_t lost = {.node = m, .reason = "node m lost (silent for 5.0s)"};
    br_hooks_run(c, c->hooks, BR_HOOK_NODE_LOST, &lost); /* as node life says it */
    assert_state(c, id, "failed");
    assert_event(c, id, "lost");
    br_jobtab_sweep(c->jobs);
}

static void test_node_lost_requeues_and_reconcile(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t id = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1},"
                           " \"restart\": {\"on\": [\"node_lost\"], \"max\": 3}}");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    br_node_t *n = rank0_node(c, j);
    br_jobs_started(c, id, 1, n, 0);
    /* a heartbeat that still lists it: nothing changes */
    json_t *tasks = json_pack("[{s:I, s:i, s:s}]", "job", (json_int_t)id, "attempt", 1,
                              "state", "running");
    br_jobs_reconcile(c, n, tasks, 0);
    assert_state(c, id, "running");
    /* one that no longer does: the attempt is over, restarted per policy */
    json_t *none = json_array();
    br_jobs_reconcile(c, n, none, 0);
    assert_state(c, id, "pending");
    assert_int_equal(j->attempt, 2);
    assert_int_equal(j->restarts, 1);
    assert_true(j->lost_at > 0); /* recovery is measured from here */
    /* the node runs the old attempt after all: it is told to stop it */
    fixture_drop_orders(c);
    br_jobs_reconcile(c, n, tasks, 0);
    assert_int_equal(orders(c, "job.kill", n), 1);
    /* placed again; a frozen current attempt is thawed */
    br_sched_run(c);
    br_node_t *m = rank0_node(c, j);
    br_jobs_started(c, id, 2, m, 0);
    assert_int_equal(j->lost_at, 0);
    json_t *frozen = json_pack("[{s:I, s:i, s:s}]", "job", (json_int_t)id, "attempt", 2,
                               "state", "frozen");
    fixture_drop_orders(c);
    br_jobs_reconcile(c, m, frozen, 0);
    assert_int_equal(orders(c, "job.thaw", m), 1);
    json_decref(tasks);
    json_decref(none);
    json_decref(frozen);
}

static void test_cancel_and_time_limit(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    int64_t p = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 64}}"); /* fits nowhere */
    int64_t r = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    int64_t t = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}, \"time_limit\": 1}");
    br_sched_run(c);
    assert_state(c, p, "pending");
    json_t *row = br_store_job_get(c->store, p, NULL);
    assert_non_null(strstr(json_string_value(json_object_get(row, "reason")), "waiting"));
    json_decref(row);
    json_decref(br_jobs_cancel(c, p, 1, &err));
    assert_state(c, p, "cancelled");
    br_job_t *j = br_jobtab_find(c->jobs, r);
    br_node_t *n = rank0_node(c, j);
    fixture_drop_orders(c);
    json_t *done = br_jobs_cancel(c, r, 1, &err);
    assert_non_null(done);
    assert_string_equal(json_string_value(json_object_get(done, "state")), "cancelled");
    json_decref(done);
    assert_int_equal(orders(c, "job.kill", n), 1);
    assert_null(br_jobs_cancel(c, r, 1, &err)); /* twice: it has ended */
    assert_non_null(strstr(err.text, "already ended"));
    assert_null(br_jobs_cancel(c, 999, 1, &err));
    j = br_jobtab_find(c->jobs, t);
    n = rank0_node(c, j);
    br_jobs_started(c, t, 1, n, 0);
    j->started -= 10; /* ran for longer than its 1 ms */
    fixture_drop_orders(c);
    br_jobs_check_limits(c); /* SIGTERM, with the grace for SIGKILL */
    assert_state(c, t, "running");
    assert_int_equal(orders(c, "job.kill", n), 1);
    assert_event(c, t, "time limit 1ms reached: SIGTERM sent, SIGKILL in 30s");
    br_jobs_check_limits(c); /* (sent once) */
    assert_int_equal(orders(c, "job.kill", n), 1);
    br_jobs_exited(c, t, 1, n, -1, 15, "signal 15"); /* it stopped: failed, no restart */
    assert_state(c, t, "failed");
    assert_event(c, t, "time limit 1ms reached (signal 15)");
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 0);

    /* an agent that reports no exit: killed once the grace and node_timeout passed */
    int64_t deaf = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}, "
                             "\"time_limit\": 1}");
    br_sched_run(c);
    j = br_jobtab_find(c->jobs, deaf);
    n = rank0_node(c, j);
    br_jobs_started(c, deaf, 1, n, 0);
    j->started -= 10;
    br_jobs_check_limits(c);
    j->stop.at_mono -= c->cfg.kill_grace_ms + c->cfg.node_timeout_ms + 1;
    br_jobs_check_limits(c);
    assert_state(c, deaf, "failed");
    assert_event(c, deaf, "time limit 1ms reached (no exit reported after signal 15: killed)");
    br_jobtab_sweep(c->jobs);
}

/* A running job's cancel is SIGTERM with --kill-grace; its exit then cancels it.
 * --now kills it at once, in the grace too. */
static void test_cancel_is_graceful(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    int64_t id = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    br_sched_run(c);
    br_node_t *n = rank0_node(c, br_jobtab_find(c->jobs, id));
    br_jobs_started(c, id, 1, n, 0);
    assert_state(c, id, "running");
    fixture_drop_orders(c);
    json_t *row = br_jobs_cancel(c, id, 0, &err);
    assert_non_null(row);
    assert_string_equal(json_string_value(json_object_get(row, "state")), "running");
    json_decref(row);
    json_t *kill = fixture_order(c, "job.kill", n);
    assert_non_null(kill);
    assert_int_equal(json_integer_value(json_object_get(kill, "signal")), SIGTERM);
    assert_int_equal(json_integer_value(json_object_get(kill, "grace")), c->cfg.kill_grace_ms);
    assert_event(c, id, "cancel requested: SIGTERM sent, SIGKILL in 30s");
    json_decref(br_jobs_cancel(c, id, 0, &err)); /* a second cancel: nothing new */
    assert_int_equal(orders(c, "job.kill", n), 1);
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 1); /* held until it ends */
    br_jobs_exited(c, id, 1, n, -1, 15, "/bin/sh ended (killed by signal 15) and its "
                                        "processes 1.0s later, within the grace");
    assert_state(c, id, "cancelled");
    assert_event(c, id, "cancelled by request (/bin/sh ended (killed by signal 15)");
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 0);

    /* --now in the grace: killed at once (an order without a signal) */
    int64_t slow = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    br_sched_run(c);
    n = rank0_node(c, br_jobtab_find(c->jobs, slow));
    br_jobs_started(c, slow, 1, n, 0);
    json_decref(br_jobs_cancel(c, slow, 0, &err));
    fixture_drop_orders(c);
    json_decref(br_jobs_cancel(c, slow, 1, &err));
    assert_state(c, slow, "cancelled");
    assert_event(c, slow, "cancelled by request (killed at once, in its grace)");
    kill = fixture_order(c, "job.kill", n);
    assert_non_null(kill);
    assert_null(json_object_get(kill, "signal"));
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 0);

    /* a deaf agent: cancelled once the grace and node_timeout passed */
    int64_t deaf = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, deaf);
    br_jobs_started(c, deaf, 1, rank0_node(c, j), 0);
    json_decref(br_jobs_cancel(c, deaf, 0, &err));
    j->stop.at_mono -= c->cfg.kill_grace_ms + c->cfg.node_timeout_ms + 1;
    br_jobs_check_limits(c);
    assert_state(c, deaf, "cancelled");
    assert_event(c, deaf, "cancelled by request (no exit reported after signal 15: killed)");
    br_jobtab_sweep(c->jobs);
}

/* A gang asked to stop: each rank has its whole grace. The rank that ends first
 * (its handler done) does not cut the others short; the attempt ends with the
 * last rank, and the cancel then says how. */
static void test_gang_ranks_each_have_their_grace(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    int64_t id = submit(c, "{\"command\": \"train\", \"resources\": {\"cpus\": 2, "
                           "\"nodes\": 2}}");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    br_node_t *r0 = rank0_node(c, j);
    br_node_t *r1 = r0 == w->a ? w->b : w->a;
    br_jobs_started(c, id, 1, r0, 29555);
    br_jobs_started(c, id, 1, r1, 0);
    assert_state(c, id, "running");
    json_decref(br_jobs_cancel(c, id, 0, &err));
    assert_int_equal(orders(c, "job.kill", r0) + orders(c, "job.kill", r1), 2); /* SIGTERM */
    fixture_drop_orders(c);
    br_jobs_exited(c, id, 1, r0, -1, 15, "/bin/sh ended (killed by signal 15) and its "
                                         "processes 1.0s later, within the grace");
    assert_state(c, id, "running"); /* rank 1 still saves */
    assert_int_equal(orders(c, "job.kill", r1), 0);
    assert_event(c, id, "rank 0 on");
    assert_event(c, id, "ended in its grace");
    assert_int_equal(r0->cpus_used, 0); /* rank 0's node is free already */
    br_jobs_exited(c, id, 1, r1, 0, -1, "");
    assert_state(c, id, "cancelled");
    assert_event(c, id, "cancelled by request (it exited 0 when asked to stop)");
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 0);
    br_jobtab_sweep(c->jobs);
}

/* node's agent reports the attempt's exit as agent.c does: exit code code, or with
 * fault (a start that could not be made) none. */
static void report_exited(br_coord_t *c, br_node_t *n, int64_t id, int attempt, int code,
                          const char *fault)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.exited", 9);
    json_t *b = json_pack("{s:I, s:i, s:o, s:n, s:s}", "job", (json_int_t)id, "attempt",
                          attempt, "exit_code", fault ? json_null() : json_integer(code),
                          "signal", "reason",
                          fault ? "could not start: checkpoint /ck/s5 is not visible on this "
                                  "node"
                                : "");
    if (fault)
        json_object_set_new(b, "fault", json_string(fault));
    br_msg_set_body(m, b);
    br_msg_set_route(m, n->name, 1);
    br_caller_t who = {BR_PRINCIPAL_NODE, "", 0};
    br_strlcpy(who.name, n->name, sizeof(who.name));
    br_api_job_exited(c, m, &who);
    br_msg_destroy(&m);
}

/* As the replicas module does when the checkpoint can be brought there: hold the
 * attempt's start (the first time only). */
static void hold_once(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    int *held = ctx;
    if (a->cause && strcmp(a->cause, "not_here") == 0 && (*held)++ == 0)
        a->hold = 1;
}

/* An attempt that could not start for want of its checkpoint, held until a copy is
 * brought, and sent to the same node again: the exit of the run it then makes is
 * taken (not dropped as a resend of the first report), once. */
static void test_exit_after_a_held_start_is_taken(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int held = 0;
    assert_int_equal(br_hooks_add(c->hooks, BR_HOOK_RESUMING, hold_once, &held), 0);
    int64_t id = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    br_node_t *n = rank0_node(c, j);
    report_exited(c, n, id, 1, -1, "checkpoint_not_visible");
    assert_int_equal(held, 1);
    assert_state(c, id, "starting"); /* held, not ended */
    fixture_drop_orders(c);
    br_jobs_release(c, id, 1);
    assert_int_equal(orders(c, "job.run", n), 1);
    br_jobs_started(c, id, 1, n, 0);
    assert_state(c, id, "running");
    report_exited(c, n, id, 1, 0, NULL);
    assert_state(c, id, "completed");
    report_exited(c, n, id, 1, 0, NULL); /* a resend: nothing more */
    assert_state(c, id, "completed");
    br_jobtab_sweep(c->jobs);
}

/* Estimated starts: each time a job ends by its time limit, what then fits starts,
 * in queue order; a job that no time limit frees has none; nothing is kept. */
static void test_estimated_starts(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    /* a and b have 4 CPUs each: two running jobs fill them, ending in 60 s and 120 s */
    int64_t r1 = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 4}, "
                           "\"time_limit\": 60000}");
    int64_t r2 = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 4}, "
                           "\"time_limit\": 120000}");
    br_sched_run(c);
    int64_t now = br_now_ms();
    for (int64_t id = r1; id <= r2; id++) {
        br_job_t *j = br_jobtab_find(c->jobs, id);
        br_jobs_started(c, id, 1, rank0_node(c, j), 0);
        j->started = now;
    }
    int64_t p1 = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 4}, "
                           "\"time_limit\": 30000}");
    int64_t p2 = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 4}}");
    int64_t p3 = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 4}}");
    br_sched_run(c);
    br_job_t *q[] = {br_jobtab_find(c->jobs, p1), br_jobtab_find(c->jobs, p2),
                     br_jobtab_find(c->jobs, p3)};
    int64_t start[3];
    int used = w->a->cpus_used + w->b->cpus_used;
    br_sched_estimate(c, q, 3, start);
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, used); /* as it was */
    /* p1 when r1 ends (60 s); p2 when p1 ends (90 s) or r2 (120 s): 90 s; p3 when
     * r2 ends, 120 s (p2 has no time limit: it never frees its node) */
    assert_true(start[0] >= now + 60000 && start[0] < now + 61000);
    assert_true(start[1] >= now + 90000 && start[1] < now + 91000);
    assert_true(start[2] >= now + 120000 && start[2] < now + 121000);
    /* with r2 unlimited, p3 has nothing to wait for that ends */
    br_jobtab_find(c->jobs, r2)->time_limit = 0;
    br_sched_estimate(c, q, 3, start);
    assert_true(start[0] > 0 && start[1] > 0);
    assert_int_equal(start[2], 0);
    br_jobtab_sweep(c->jobs);
}

static void test_restore_after_rollback(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    int64_t id = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 2}}");
    assert_int_equal(br_store_commit(c->store, &err), 0);
    assert_int_equal(br_store_begin(c->store, &err), 0);
    br_sched_run(c); /* placed in memory and in the store, then undone */
    assert_state(c, id, "starting");
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 2);
    br_store_rollback(c->store);
    assert_int_equal(br_jobs_restore(c, &err), 0);
    assert_int_equal(br_store_begin(c->store, &err), 0);
    assert_state(c, id, "pending");
    assert_int_equal(br_jobtab_find(c->jobs, id)->nranks, 0);
    assert_int_equal(w->a->cpus_used + w->b->cpus_used, 0);
}

/* A service's replica starts again whenever it ends (services' hook): after a
 * backoff that doubles, none when its node was lost; cancelled, it ends. */
static void test_replica_restarts_through_the_services_hook(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    int64_t id = submit(c, "{\"command\": \"serve\", \"resources\": {\"cpus\": 1}}");
    br_job_t *j = br_jobtab_find(c->jobs, id);
    j->service = 1; /* as br_services_submit makes them */
    j->replica = 0;
    br_sched_run(c);
    br_node_t *n = rank0_node(c, j);
    br_jobs_started(c, id, 1, n, 8000);
    br_jobs_exited(c, id, 1, n, 0, -1, "");
    assert_state(c, id, "pending"); /* not completed: a service runs until cancelled */
    assert_event(c, id, "exited 0 (a service runs until cancelled); starting it again as "
                        "attempt 2 in 1.0s");
    assert_true(j->not_before > br_now_ms());
    j->not_before = 0;
    br_sched_run(c);
    n = rank0_node(c, j);
    br_jobs_started(c, id, 2, n, 8000);
    br_jobs_exited(c, id, 2, n, 1, -1, "");
    assert_event(c, id, "exit code 1; starting it again as attempt 3 in 2.0s");
    j->not_before = 0;
    br_sched_run(c);
    n = rank0_node(c, j);
    br_jobs_started(c, id, 3, n, 8000);
    br_hook_arg_t lost = {.node = n, .reason = "node lost (silent for 5.0s)"};
    br_hooks_run(c, c->hooks, BR_HOOK_NODE_LOST, &lost);
    assert_event(c, id, "starting it again as attempt 4 in 0.0s");
    json_decref(br_jobs_cancel(c, id, 1, &err));
    assert_state(c, id, "cancelled");
    br_jobtab_sweep(c->jobs);
}

/* Every state change passes the one table: a move it refuses is not made (no
 * event, nothing stored), and a service's own job, which runs no process, goes
 * from pending to running through it, with its start time and its event. */
static void test_state_moves_are_checked(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    assert_true(br_job_state_move_ok(BR_JOB_PENDING, BR_JOB_STARTING, 0));
    assert_true(br_job_state_move_ok(BR_JOB_RUNNING, BR_JOB_PENDING, 0));
    assert_true(br_job_state_move_ok(BR_JOB_STARTING, BR_JOB_COMPLETED, 0));
    assert_true(br_job_state_move_ok(BR_JOB_PENDING, BR_JOB_CANCELLED, 0));
    assert_false(br_job_state_move_ok(BR_JOB_PENDING, BR_JOB_RUNNING, 0));
    assert_true(br_job_state_move_ok(BR_JOB_PENDING, BR_JOB_RUNNING, 1));
    assert_false(br_job_state_move_ok(BR_JOB_PENDING, BR_JOB_COMPLETED, 0));
    assert_false(br_job_state_move_ok(BR_JOB_RUNNING, BR_JOB_STARTING, 0));
    assert_false(br_job_state_move_ok(BR_JOB_RUNNING, BR_JOB_RUNNING, 0));
    for (int from = BR_JOB_COMPLETED; from <= BR_JOB_CANCELLED; from++)
        for (int to = 0; to < BR_JOB_STATES; to++)
            assert_false(br_job_state_move_ok(from, to, 1)); /* nothing after an end */
    assert_false(br_job_state_move_ok(BR_JOB_STATES, BR_JOB_PENDING, 0));

    int64_t id = submit(c, "{\"command\": \"true\"}");
    br_job_t *j = br_jobtab_find(c->jobs, id);
    json_t *before = br_store_event_list(c->store, id, 0, 0, NULL);
    assert_int_equal(br_job_post(c, j, BR_JOB_COMPLETED, NULL, "by hand"), -1);
    assert_int_equal(br_job_post(c, j, BR_JOB_RUNNING, NULL, "by hand"), -1);
    assert_state(c, id, "pending");
    json_t *after = br_store_event_list(c->store, id, 0, 0, NULL);
    assert_int_equal(json_array_size(after), json_array_size(before));
    json_decref(before);
    json_decref(after);

    json_t *row = json_pack("{s:s, s:s, s:s, s:s, s:I, s:{s:s}, s:s, s:I, s:i}", "name",
                            "web", "kind", "service", "state", "pending", "owner", "ann",
                            "owner_id", (json_int_t)2, "spec", "command", "serve",
                            "spec_yaml", "x: 1\n", "submitted", (json_int_t)br_now_ms(),
                            "attempt", 1);
    int64_t svc = br_services_submit(c, row, 2, &err);
    json_decref(row);
    assert_true(svc > 0);
    br_job_t *parent = br_jobtab_find(c->jobs, svc);
    assert_non_null(parent);
    assert_int_equal(parent->state, BR_JOB_RUNNING);
    assert_true(parent->started > 0);
    json_t *ev = br_store_event_list(c->store, svc, 0, 0, NULL);
    json_t *first = json_array_get(ev, 0);
    assert_string_equal(json_string_value(json_object_get(first, "state")), "running");
    assert_non_null(strstr(json_string_value(json_object_get(first, "reason")),
                           "service of 2 replicas submitted by ann"));
    json_decref(ev);
    json_t *stored = br_store_job_get(c->store, svc, NULL);
    assert_true(json_integer_value(json_object_get(stored, "started")) > 0);
    json_decref(stored);
    json_decref(br_jobs_cancel(c, svc, 1, &err));
    assert_state(c, svc, "cancelled");
    br_jobtab_sweep(c->jobs);
}

/* Jobs that wait for others (deps.h): placed only once the wait came true; one
 * whose wait can never come true fails at once, saying why; a load works the
 * waits out again from the store. */
static void test_waits_on_other_jobs(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_err_t err;
    int64_t a = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    char spec[256];
    snprintf(spec, sizeof(spec), "{\"command\": \"y\", \"resources\": {\"cpus\": 1},"
             " \"after\": [{\"job\": %lld, \"on\": \"ok\"}]}", (long long)a);
    int64_t on_ok = submit(c, spec);
    snprintf(spec, sizeof(spec), "{\"command\": \"y\", \"resources\": {\"cpus\": 1},"
             " \"after\": [{\"job\": %lld, \"on\": \"failed\"}]}", (long long)a);
    int64_t on_failed = submit(c, spec);
    snprintf(spec, sizeof(spec), "{\"command\": \"y\", \"resources\": {\"cpus\": 1},"
             " \"after\": [{\"job\": %lld, \"on\": \"started\"}]}", (long long)a);
    int64_t on_started = submit(c, spec);
    br_sched_run(c);
    assert_state(c, a, "starting");
    assert_state(c, on_ok, "pending");
    json_t *row = br_store_job_get(c->store, on_ok, NULL);
    char want[64];
    snprintf(want, sizeof(want), "waiting: for job %lld to end ok", (long long)a);
    assert_string_equal(json_string_value(json_object_get(row, "reason")), want);
    json_decref(row);
    br_node_t *n = rank0_node(c, br_jobtab_find(c->jobs, a));
    br_jobs_started(c, a, 1, n, 0); /* a runs: the one waiting for its start goes */
    br_sched_run(c);
    assert_state(c, on_started, "starting");
    assert_state(c, on_ok, "pending");
    br_jobs_exited(c, a, 1, n, 0, -1, ""); /* a completes */
    assert_state(c, on_failed, "failed"); /* never: it completed */
    row = br_store_job_get(c->store, on_failed, NULL);
    snprintf(want, sizeof(want), "after: job %lld completed, so it can never end failed",
             (long long)a);
    assert_string_equal(json_string_value(json_object_get(row, "reason")), want);
    json_decref(row);
    br_sched_run(c);
    assert_state(c, on_ok, "starting");
    /* at submit: a wait that cannot come true, or on a job that is not there */
    json_t *bad = json_pack("{s:[{s:I, s:s}]}", "after", "job", (json_int_t)a, "on", "failed");
    assert_int_equal(br_deps_check(c, bad, 0, &err), -1);
    assert_non_null(strstr(err.text, "can never end failed"));
    json_decref(bad);
    bad = json_pack("{s:[{s:i, s:s}]}", "after", "job", 999, "on", "ok");
    assert_int_equal(br_deps_check(c, bad, 0, &err), -1);
    assert_non_null(strstr(err.text, "no job 999"));
    json_decref(bad);
    bad = json_pack("{s:[{s:I, s:s}]}", "after", "job", (json_int_t)a, "on", "ended");
    assert_int_equal(br_deps_check(c, bad, 0, &err), 0);
    assert_int_equal(br_deps_check(c, bad, 77, &err), -1); /* not this user's job */
    json_decref(bad);
    /* a load works the waits out again: one on a completed job is met */
    snprintf(spec, sizeof(spec), "{\"command\": \"y\", \"resources\": {\"cpus\": 64},"
             " \"after\": [{\"job\": %lld, \"on\": \"ok\"}]}", (long long)a);
    int64_t late = submit(c, spec);
    assert_int_equal(br_jobs_restore(c, &err), 0);
    assert_null(br_job_waits_for(br_jobtab_find(c->jobs, late)));
    /* and a wait on a job still current is told of it after a load as before */
    int64_t b = submit(c, "{\"command\": \"x\", \"resources\": {\"cpus\": 1}}");
    snprintf(spec, sizeof(spec), "{\"command\": \"y\", \"resources\": {\"cpus\": 1},"
             " \"after\": [{\"job\": %lld, \"on\": \"ended\"}]}", (long long)b);
    int64_t after_b = submit(c, spec);
    assert_int_equal(br_jobs_restore(c, &err), 0);
    assert_non_null(br_job_waits_for(br_jobtab_find(c->jobs, after_b)));
    json_decref(br_jobs_cancel(c, b, 1, NULL));
    assert_null(br_job_waits_for(br_jobtab_find(c->jobs, after_b)));
    br_jobtab_sweep(c->jobs);
}

/* A node's GPU fails (node life: unhealthy): its gangs stop on every node and
 * restart as after a node loss; a job of that node alone goes on; no new job
 * goes there until it is cleared. */
static void test_unhealthy_node_stops_its_gangs(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t gang = submit(c, "{\"command\": \"g\", \"resources\": {\"cpus\": 1, \"nodes\": 2},"
                             " \"restart\": {\"on\": [\"node_lost\"], \"max\": 3}}");
    br_sched_run(c);
    br_job_t *g = br_jobtab_find(c->jobs, gang);
    br_jobs_started(c, gang, 1, w->a, 29500);
    br_jobs_started(c, gang, 1, w->b, 0);
    assert_state(c, gang, "running");
    int64_t alone = submit(c, "{\"command\": \"s\","
                              " \"resources\": {\"cpus\": 1, \"nodelist\": [\"a\"]}}");
    br_sched_run(c);
    br_jobs_started(c, alone, 1, w->a, 0);
    assert_state(c, alone, "running");
    fixture_drop_orders(c);
    br_nodelife_unhealthy(c, w->a, "GPU 0: XID 79 (1 since its agent started)");
    assert_int_equal(w->a->state, BR_NODE_UNHEALTHY);
    assert_state(c, gang, "pending");
    assert_int_equal(g->attempt, 2);
    assert_int_equal(orders(c, "job.kill", w->a), 1); /* its rank there too */
    assert_int_equal(orders(c, "job.kill", w->b), 1);
    assert_event(c, gang, "node a unhealthy (GPU 0: XID 79");
    assert_state(c, alone, "running");
    br_sched_run(c); /* a gang of 2 and only b ready: it waits */
    assert_state(c, gang, "pending");
    br_nodelife_undrain(c, w->a, "admin"); /* cleared */
    assert_int_equal(w->a->state, BR_NODE_READY);
    br_sched_run(c);
    assert_state(c, gang, "starting");
}

/* A gang rank's failure waits for the verdict on its peers' nodes: a peer that
 * is then lost makes it a node loss (restarted under node_lost); peers that speak
 * make it the rank's own failure. */
static void test_gang_failure_waits_for_a_silent_peer(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    c->cfg.node_timeout_ms = 60000;
    const char *spec = "{\"command\": \"g\", \"resources\": {\"cpus\": 1, \"nodes\": 2},"
                       " \"restart\": {\"on\": [\"node_lost\"], \"max\": 3}}";
    int64_t id = submit(c, spec);
    br_sched_run(c);
    br_job_t *g = br_jobtab_find(c->jobs, id);
    br_jobs_started(c, id, 1, w->a, 29500);
    br_jobs_started(c, id, 1, w->b, 0);
    /* b's host dies; a's rank crashes at once with a gloo error */
    br_jobs_exited(c, id, 1, w->a, 1, -1, "");
    assert_state(c, id, "running"); /* held: b has not spoken since */
    json_t *none = json_array();
    br_jobs_reconcile(c, w->a, none, 0); /* a's heartbeat without the task: held still */
    assert_state(c, id, "running");
    br_hook_arg_t lost = {.node = w->b, .reason = "node b lost (silent for 5.0s)"};
    br_hooks_run(c, c->hooks, BR_HOOK_NODE_LOST, &lost);
    assert_state(c, id, "pending"); /* the node's loss, not a's exit: restarted */
    assert_int_equal(g->attempt, 2);
    assert_int_equal(g->held.rank, -1);
    assert_event(c, id, "(node_lost)");

    /* attempt 2: a rank fails while its peer is alive: its own failure, once the
     * peer has spoken */
    br_sched_run(c);
    br_jobs_started(c, id, 2, w->a, 29500);
    br_jobs_started(c, id, 2, w->b, 0);
    br_jobs_exited(c, id, 2, w->b, 3, -1, "");
    assert_state(c, id, "running");
    w->a->last_seen_mono = br_mono_ms() + 1; /* a's next heartbeat */
    br_hook_arg_t heard = {.node = w->a};
    br_hooks_run(c, c->hooks, BR_HOOK_NODE_HEARD, &heard);
    assert_state(c, id, "failed"); /* nonzero_exit is not in restart.on */
    assert_event(c, id, "exit code 3");
    json_decref(none);
    br_jobtab_sweep(c->jobs);
}

/* A pass looks again only at what may have changed (scheduler.h): jobs that fit
 * nowhere keep their reason, in memory and in the store, through passes that do
 * not look at them; once a job ends, they are placed. */
static void test_waiting_jobs_keep_their_reason(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t x = submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 4}}");
    submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 4}}");
    int64_t z1 = submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 3}}");
    int64_t z2 = submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 2}}");
    br_sched_run(c);
    assert_state(c, z1, "pending");
    br_job_t *j1 = br_jobtab_find(c->jobs, z1);
    assert_non_null(j1->reason);
    assert_non_null(strstr(j1->reason, "a has 0 CPUs free, the job needs 3"));
    int64_t z3 = submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 1}}");
    br_sched_run(c); /* the new job alone is looked at */
    br_sched_run(c); /* nothing at all */
    for (int k = 0; k < 3; k++) {
        int64_t id = k == 0 ? z1 : k == 1 ? z2 : z3;
        br_job_t *j = br_jobtab_find(c->jobs, id);
        assert_int_equal(j->state, BR_JOB_PENDING);
        assert_non_null(j->reason);
        assert_non_null(strstr(j->reason, "waiting: no ready node fits"));
        json_t *row = br_store_job_get(c->store, id, NULL);
        assert_string_equal(json_string_value(json_object_get(row, "reason")), j->reason);
        json_decref(row);
    }
    br_jobs_started(c, x, 1, w->a, 0);
    br_jobs_exited(c, x, 1, w->a, 0, -1, ""); /* a is free again */
    br_sched_run(c);
    assert_state(c, z1, "starting");
    assert_state(c, z3, "starting"); /* beside it */
    assert_state(c, z2, "pending");
    assert_non_null(strstr(br_jobtab_find(c->jobs, z2)->reason, "a has 1 CPUs free"));
    br_jobtab_sweep(c->jobs);
}

/* A pass due right after another is held back at most BR_SCHED_PACE times the
 * last pass (br_sched_wait_ms tells the loop how long), and the change it is for
 * is placed once the loop wakes then: pacing delays, it never loses. */
static void test_passes_paced(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    assert_int_equal(br_sched_wait_ms(c), 0); /* the first wake's pass, at once */
    int64_t t0 = br_mono_us();
    br_sched_wake(c);
    int64_t pass_us = br_mono_us() - t0;
    assert_int_equal(br_sched_wait_ms(c), -1); /* nothing more to do */
    int64_t id = submit(c, "{\"command\": \"true\", \"resources\": {\"cpus\": 1}}");
    int64_t bound = (BR_SCHED_PACE * pass_us + 999) / 1000 + 1;
    int64_t deadline = br_mono_ms() + 5000;
    char buf[32];
    while (strcmp(stored_state(c, id, buf, sizeof(buf)), "pending") == 0) {
        int64_t ms = br_sched_wait_ms(c);
        assert_true(ms >= 0 && ms <= bound);
        assert_true(br_mono_ms() < deadline);
        usleep((useconds_t)ms * 1000);
        br_sched_wake(c);
    }
    assert_state(c, id, "starting");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_runs_and_completes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_policy_then_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gang_port_and_failure_stops_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hung_restarts_then_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_faults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_lost_requeues_and_reconcile, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cancel_and_time_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_is_graceful, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gang_ranks_each_have_their_grace, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_exit_after_a_held_start_is_taken, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_estimated_starts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_after_rollback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replica_restarts_through_the_services_hook, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_waits_on_other_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiting_jobs_keep_their_reason, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unhealthy_node_stops_its_gangs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passes_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_moves_are_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gang_failure_waits_for_a_silent_peer, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
