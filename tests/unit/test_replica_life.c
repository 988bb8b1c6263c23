/* test_replica_life.c - the replicas module wired into job life (replicas.h) on a
 * coordinator made by coord_fixture.h: a real store, nodes in memory,
 * no sockets (orders are read from the outbox). A counted checkpoint is pulled by
 * another node; only reports of pulls that were ordered are taken; the verified
 * copy is recorded and checkpoint.keep holds; an attempt that resumes on another
 * node waits for the restore and starts once it is verified; a bad copy makes it
 * fall back to the older checkpoint. A failed pull is ordered again, elsewhere or
 * from another holder, a few times at most; copies forgotten by a restart are
 * ordered again; ended jobs' replicas are dropped after the retention or at a
 * purge. */
#include <errno.h>
#include <setjmp.h>
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
#include "jobtab.h"
#include "outbox.h"

typedef fixture_two_t world_t;

static int setup(void **state)
{
    return fixture_two_setup(state, "test_replica_life", 1, 7704);
}

static int teardown(void **state)
{
    return fixture_two_teardown(state);
}

/* The error number of the last reply in the outbox (0: success). */
static int last_reply(br_coord_t *c)
{
    assert_true(br_outbox_count(c->out) > 0);
    json_t *b = br_msg_body(br_outbox_msg(c->out, br_outbox_count(c->out) - 1));
    return (int)json_integer_value(json_object_get(b, "errnum"));
}

/* node says a pull ended: ok, or error with errnum. */
static void stored(br_coord_t *c, br_node_t *n, int64_t job, const char *hash,
                   const char *path, int restore, int errnum)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "ckpt.stored", 7);
    json_t *b = json_pack("{s:I, s:I, s:s, s:s, s:b}", "job", (json_int_t)job, "step",
                          (json_int_t)5, "hash", hash, "path", path, "restore", restore);
    if (errnum) {
        json_object_set_new(b, "errnum", json_integer(errnum));
        json_object_set_new(b, "error", json_string("bad bytes in state.json"));
    } else {
        json_object_set_new(b, "received", json_integer(100));
        json_object_set_new(b, "deduped", json_integer(50));
    }
    br_msg_set_body(m, b);
    br_msg_set_route(m, n->name, 1);
    br_caller_t who = {BR_PRINCIPAL_NODE, "", 0};
    br_strlcpy(who.name, n->name, sizeof(who.name));
    br_api_ckpt_stored(c, m, &who);
    br_msg_destroy(&m);
}

static json_t *manifest(const char *hash)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:[{s:s, s:i, s:i, s:s}]}", "hash", hash,
                     "root", "dir", "files", 1, "bytes", 10, "entries", "path", "state.json",
                     "size", 10, "mode", 420, "hash", hash);
}

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define H3 "3333333333333333333333333333333333333333333333333333333333333333"

/* A training job with checkpoint.replicas (< 0: not given) and keep 2. */
static int64_t submit_n(br_coord_t *c, int replicas)
{
    json_t *s = json_pack("{s:s, s:{s:i}, s:{s:s, s:s, s:n, s:o, s:i}, s:{s:i, s:[s]}}",
                          "command", "train", "resources", "cpus", 1, "checkpoint",
                          "dir", "/ck", "pattern", "*", "complete_file", "replicas",
                          replicas < 0 ? json_null() : json_integer(replicas), "keep",
                          2, "restart", "max", 3, "on", "node_lost");
    br_job_t *j = fixture_add_job(c, s);
    return j->id;
}

static int64_t submit(br_coord_t *c)
{
    return submit_n(c, -1);
}

static void checkpoint(br_coord_t *c, int64_t id, br_node_t *n, const char *path, int step,
                       const char *hash)
{
    br_err_t err;
    json_t *m = manifest(hash);
    assert_int_equal(br_jobs_checkpoint(c, id, 1, n, path, step, 10, br_now_ms(), m, NULL, &err),
                     0);
    json_decref(m);
}

/* A tick of the modules (once a second in brambled): the replicas' repair after a
 * start, failed and silent pulls, retention. */
static void tick(br_coord_t *c)
{
    br_hooks_run(c, c->hooks, BR_HOOK_TICK, NULL);
}

static void test_replicate_keep_restore_fallback(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    int64_t id = submit(c);
    br_sched_run(c);
    br_job_t *job = br_jobtab_find(c->jobs, id);
    assert_non_null(job);
    br_node_t *writer = job->ranks[0].node[0] == 'a' ? w->a : w->b;
    br_node_t *other = writer == w->a ? w->b : w->a;
    br_jobs_started(c, id, 1, writer, 0);
    fixture_drop_orders(c);

    /* a counted checkpoint: a grant on the writer, and the other node pulls at once
     * (its puller waits a little for a grant still on its way) */
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    json_t *serve = fixture_order(c, "ckpt.serve", writer);
    assert_non_null(serve);
    assert_string_equal(json_string_value(json_object_get(serve, "peer")), other->name);
    json_t *fetch = fixture_order(c, "ckpt.fetch", other);
    assert_non_null(fetch);
    assert_null(json_object_get(fetch, "restore"));
    /* reported again by the agent: no second pull */
    fixture_drop_orders(c);
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    assert_null(fixture_order(c, "ckpt.serve", writer));

    /* a report nobody ordered is refused; the one ordered is taken once */
    stored(c, writer, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), EPERM);
    fixture_drop_orders(c);
    stored(c, other, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), 0);
    /* the pull is over: its grant is withdrawn from the writer at once */
    json_t *gone = fixture_order(c, "ckpt.serve", writer);
    assert_non_null(gone);
    assert_int_equal(json_integer_value(json_object_get(gone, "ttl")), 0);
    char grant[160];
    br_replicas_grant_id(id, H1, other->name, grant, sizeof(grant));
    assert_string_equal(json_string_value(json_object_get(gone, "grant")), grant);
    stored(c, other, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), EPERM);
    json_t *reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 1);
    json_decref(reps);
    assert_true(fixture_has_event(c, id, "replicated on"));

    /* two more: keep 2 drops the oldest */
    checkpoint(c, id, writer, "/ck/s10", 10, H2);
    checkpoint(c, id, writer, "/ck/s15", 15, H3);
    tick(c);
    stored(c, other, id, H2, "/ck/s10", 0, 0);
    fixture_drop_orders(c);
    stored(c, other, id, H3, "/ck/s15", 0, 0);
    assert_non_null(fixture_order(c, "ckpt.drop", other));
    reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(reps, 0), "hash")), H3);
    json_decref(reps);
    json_t *cps = br_store_checkpoint_list(c->store, id, NULL);
    br_replicas_annotate(c, id, cps);
    json_t *copies = json_object_get(json_array_get(cps, 2), "copies");
    assert_int_equal(json_array_size(copies), 2); /* the writer, the replica */
    json_decref(cps);

    /* the writer is lost: attempt 2 on the other node waits for the restore */
    fixture_drop_orders(c);
    br_jobs_node_gone(c, writer, "lost");
    br_node_set_state(writer, BR_NODE_LOST);
    br_sched_run(c);
    job = br_jobtab_find(c->jobs, id);
    assert_int_equal(job->attempt, 2);
    assert_int_equal(job->state, BR_JOB_STARTING);
    assert_null(fixture_order(c, "job.run", other));
    fetch = fixture_order(c, "ckpt.fetch", other);
    assert_non_null(fetch);
    assert_true(json_is_true(json_object_get(fetch, "restore")));
    assert_string_equal(json_string_value(json_object_get(fetch, "path")), "/ck/s15");
    /* a heartbeat's reconcile does not send it either */
    json_t *none = json_array();
    br_jobs_reconcile(c, other, none, 0);
    json_decref(none);
    assert_null(fixture_order(c, "job.run", other));

    /* the copy is bad: the older checkpoint is restored instead */
    stored(c, other, id, H3, "/ck/s15", 1, EBADMSG);
    assert_int_equal(last_reply(c), 0);
    assert_true(fixture_has_event(c, id, "falls back to /ck/s10"));
    assert_null(fixture_order(c, "job.run", other));
    fixture_drop_orders(c);
    stored(c, other, id, H2, "/ck/s10", 1, 0);
    assert_true(fixture_has_event(c, id, "restored and verified"));
    json_t *run = fixture_order(c, "job.run", other);
    assert_non_null(run);
    assert_string_equal(json_string_value(json_object_get(json_object_get(run, "env"),
                                                          "BRAMBLE_RESUME_FROM")),
                        "/ck/s10");
    assert_string_equal(json_string_value(json_object_get(json_object_get(run, "env"),
                                                          "BRAMBLE_RESUME_STEP")),
                        "10");
}

/* A job of replicas copies submitted and running, the node its rank 0 runs on. */
static int64_t running(br_coord_t *c, int replicas, br_node_t **writer)
{
    int64_t id = submit_n(c, replicas);
    br_sched_run(c);
    br_job_t *job = br_jobtab_find(c->jobs, id);
    assert_non_null(job);
    *writer = br_nodes_find(c->nodes, job->ranks[0].node);
    assert_non_null(*writer);
    br_jobs_started(c, id, 1, *writer, 0);
    fixture_drop_orders(c);
    return id;
}

/* The node that was last granted a pull of the checkpoint (peer of the last
 * ckpt.serve in the outbox), and the holder that serves it. */
static br_node_t *granted(br_coord_t *c, br_node_t **holder)
{
    br_node_t *peer = NULL;
    for (size_t i = 0; i < br_outbox_count(c->out); i++) {
        size_t len;
        const unsigned char *route = br_msg_route(br_outbox_msg(c->out, i), &len);
        if (strcmp(br_msg_type(br_outbox_msg(c->out, i)), "ckpt.serve") != 0)
            continue;
        json_t *b = br_msg_body(br_outbox_msg(c->out, i));
        peer = br_nodes_find(c->nodes, json_string_value(json_object_get(b, "peer")));
        for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next)
            if (len == 1 && route[0] == (unsigned char)n->name[0])
                *holder = n;
    }
    return peer;
}

/* A pull that failed for want of room is pulled by another node; one whose holder
 * stopped answering, by the same node from another that has a copy; three pulls
 * of one copy at most. */
static void test_failed_pull_tried_again(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    fixture_node(c, "c", 4, 7704);
    fixture_node(c, "d", 4, 7704);
    br_node_t *writer, *holder = NULL;
    int64_t id = running(c, 1, &writer);
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    br_node_t *t1 = granted(c, &holder);
    assert_non_null(t1);
    assert_ptr_equal(holder, writer);
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.fetch", t1));

    /* no room on the first: another node pulls it, from the writer */
    fixture_drop_orders(c);
    stored(c, t1, id, H1, "/ck/s5", 0, ENOSPC);
    assert_int_equal(last_reply(c), 0);
    br_node_t *t2 = granted(c, &holder);
    assert_non_null(t2);
    assert_ptr_not_equal(t2, t1);
    assert_ptr_not_equal(t2, writer);
    assert_ptr_equal(holder, writer);
    assert_true(fixture_has_event(c, id, "(try 2 of 3)"));
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.fetch", t2));
    /* ... the first's report again is not taken */
    stored(c, t1, id, H1, "/ck/s5", 0, ENOSPC);
    assert_int_equal(last_reply(c), EPERM);

    /* none on the second either: the third try, on the last node */
    fixture_drop_orders(c);
    stored(c, t2, id, H1, "/ck/s5", 0, EDQUOT);
    br_node_t *t3 = granted(c, &holder);
    assert_non_null(t3);
    assert_true(t3 != t1 && t3 != t2 && t3 != writer);
    assert_true(fixture_has_event(c, id, "(try 3 of 3)"));
    fixture_drop_orders(c);
    stored(c, t3, id, H1, "/ck/s5", 0, EFBIG);
    assert_null(granted(c, &holder));
    assert_true(fixture_has_event(c, id, "given up after 3 tries"));
    json_t *reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 0);
    json_decref(reps);
}

/* Two copies wanted: the writer stops answering under the second pull, which is
 * then pulled from the first copy. */
static void test_holder_died_pull_from_replica(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    fixture_node(c, "c", 4, 7704);
    br_node_t *writer, *holder = NULL;
    int64_t id = running(c, 2, &writer);
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    tick(c);
    br_node_t *t[2];
    int nt = 0;
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next)
        if (fixture_order(c, "ckpt.fetch", n))
            t[nt++] = n;
    assert_int_equal(nt, 2);
    stored(c, t[0], id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), 0);
    fixture_drop_orders(c);
    stored(c, t[1], id, H1, "/ck/s5", 0, ETIMEDOUT);
    assert_int_equal(last_reply(c), 0);
    assert_ptr_equal(granted(c, &holder), t[1]);
    assert_ptr_equal(holder, t[0]);
    json_t *serve = fixture_order(c, "ckpt.serve", t[0]);
    assert_true(json_is_true(json_object_get(serve, "replica"))); /* from its store */
    tick(c);
    json_t *fetch = fixture_order(c, "ckpt.fetch", t[1]);
    assert_non_null(fetch);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(fetch, "from"), "node")),
        t[0]->name);
    stored(c, t[1], id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), 0);
    json_t *reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 2);
    json_decref(reps);
}

/* A target lost under its pull: another node pulls the copy. */
static void test_target_lost_other_node(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    fixture_node(c, "c", 4, 7704);
    br_node_t *writer, *holder = NULL;
    int64_t id = running(c, 1, &writer);
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    br_node_t *t1 = granted(c, &holder);
    assert_non_null(t1);
    tick(c);
    fixture_drop_orders(c);
    br_node_set_state(t1, BR_NODE_LOST);
    tick(c);
    br_node_t *t2 = granted(c, &holder);
    assert_non_null(t2);
    assert_true(t2 != t1 && t2 != writer);
    assert_ptr_equal(holder, writer);
    assert_true(fixture_has_event(c, id, "went away; pulled again by"));
}

/* A restart forgets the pulls in flight: their reports are refused, and once the
 * nodes are back the copy is ordered again and taken. */
static void test_copies_ordered_again_after_restart(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_node_t *writer;
    int64_t id = running(c, -1, &writer);
    br_node_t *other = writer == w->a ? w->b : w->a;
    tick(c); /* (the repair after the start: nothing to do yet) */
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.fetch", other));
    br_hooks_run(c, c->hooks, BR_HOOK_LOADED, NULL); /* as a restart leaves it */
    fixture_drop_orders(c);
    stored(c, other, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), EPERM);
    tick(c); /* the repair: a grant and its fetch now */
    assert_non_null(fixture_order(c, "ckpt.serve", writer));
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.fetch", other));
    assert_true(fixture_has_event(c, id, "the coordinator restarted"));
    stored(c, other, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), 0);
    json_t *reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 1);
    json_decref(reps);
    assert_null(fixture_order(c, "ckpt.drop", other)); /* (the report before: taken in) */
    /* held now: a later tick orders nothing more */
    fixture_drop_orders(c);
    br_hooks_run(c, c->hooks, BR_HOOK_LOADED, NULL);
    tick(c);
    assert_null(fixture_order(c, "ckpt.serve", writer));
    /* a copy nobody ordered again: dropped from its node */
    br_node_t *third = fixture_node(c, "c", 4, 7704);
    stored(c, third, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), EPERM);
    assert_non_null(fixture_order(c, "ckpt.drop", third));
    assert_true(fixture_has_event(c, id, "is not needed"));
    json_t *reps2 = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps2), 1);
    json_decref(reps2);
}

/* A rollback forgets the pulls in flight as a restart does, and the event says
 * which of the two it was. */
static void test_copies_ordered_again_after_rollback(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_node_t *writer;
    int64_t id = running(c, -1, &writer);
    br_node_t *other = writer == w->a ? w->b : w->a;
    br_hooks_run(c, c->hooks, BR_HOOK_LOADED, NULL); /* the start's reading */
    tick(c);
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.fetch", other));
    br_hooks_run(c, c->hooks, BR_HOOK_LOADED, NULL); /* as a rollback leaves it */
    fixture_drop_orders(c);
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.serve", writer));
    tick(c);
    assert_non_null(fixture_order(c, "ckpt.fetch", other));
    assert_true(fixture_has_event(c, id, "the store rolled a wake back"));
    assert_false(fixture_has_event(c, id, "the coordinator restarted"));
}

/* job.purge by who for job id: the reply's error number (0: done) and body. */
static int purge(br_coord_t *c, int64_t id, br_principal_t kind, int64_t who_id,
                 json_t **body)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.purge", 9);
    br_msg_set_body(m, json_pack("{s:I}", "id", (json_int_t)id));
    br_msg_set_route(m, "u", 1);
    br_caller_t who = {kind, "ann", who_id};
    br_api_job_purge(c, m, &who);
    br_msg_destroy(&m);
    json_t *b = br_msg_body(br_outbox_msg(c->out, br_outbox_count(c->out) - 1));
    if (body)
        *body = b;
    return (int)json_integer_value(json_object_get(b, "errnum"));
}

/* An ended job's replicas are dropped once the retention has passed; job.purge
 * drops them at once, only for a job that has ended and that the caller may see. */
static void test_retention_and_purge(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    br_node_t *writer;
    br_err_t err;
    int64_t id = running(c, -1, &writer);
    br_node_t *other = writer == w->a ? w->b : w->a;
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    tick(c);
    stored(c, other, id, H1, "/ck/s5", 0, 0);
    assert_int_equal(last_reply(c), 0);

    /* running: refused; another user's: not found */
    assert_int_equal(purge(c, id, BR_PRINCIPAL_USER, 2, NULL), EBUSY);
    assert_int_equal(purge(c, id, BR_PRINCIPAL_USER, 3, NULL), ENOENT);
    assert_int_equal(purge(c, 999, BR_PRINCIPAL_ADMIN, 1, NULL), ENOENT);

    /* the retention is off (0): an ended job's copies stay */
    json_t *cancelled = br_jobs_cancel(c, id, 1, &err);
    assert_non_null(cancelled);
    json_decref(cancelled);
    fixture_drop_orders(c);
    tick(c);
    json_t *reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 1);
    json_decref(reps);

    /* purged by its owner: dropped from the node */
    json_t *body;
    assert_int_equal(purge(c, id, BR_PRINCIPAL_USER, 2, &body), 0);
    assert_int_equal(json_integer_value(json_object_get(body, "dropped")), 1);
    assert_int_equal(json_integer_value(json_object_get(body, "forgotten")), 0);
    json_t *drop = fixture_order(c, "ckpt.drop", other);
    assert_non_null(drop);
    assert_string_equal(json_string_value(json_object_get(drop, "hash")), H1);
    reps = br_store_replica_list(c->store, id, NULL);
    assert_int_equal(json_array_size(reps), 0);
    json_decref(reps);
    assert_true(fixture_has_event(c, id, "the job was purged"));

    /* a second job, its copy in flight when it is purged, then another copy held
     * by a node that is gone when the retention passes */
    int64_t id2 = running(c, -1, &writer);
    other = writer == w->a ? w->b : w->a;
    checkpoint(c, id2, writer, "/ck/s5", 5, H2);
    tick(c);
    stored(c, other, id2, H2, "/ck/s5", 0, 0);
    checkpoint(c, id2, writer, "/ck/s10", 10, H3);
    tick(c);
    cancelled = br_jobs_cancel(c, id2, 1, &err);
    json_decref(cancelled);
    c->cfg.replica_retention_ms = 1;
    other->route_len = 0; /* not connected */
    for (int64_t ended = br_now_ms(); br_now_ms() <= ended + 1;)
        usleep(500); /* the retention of 1 ms has passed */
    fixture_drop_orders(c);
    tick(c);
    assert_null(fixture_order(c, "ckpt.drop", other));
    assert_true(fixture_has_event(c, id2, "forgotten on"));
    assert_true(fixture_has_event(c, id2, "--replica-retention"));
    reps = br_store_replica_list(c->store, id2, NULL);
    assert_int_equal(json_array_size(reps), 0);
    json_decref(reps);
    other->route_len = 1;
    /* the copy under way arrives after the job ended: purged, it is dropped */
    assert_int_equal(purge(c, id2, BR_PRINCIPAL_ADMIN, 1, &body), 0);
    assert_int_equal(json_integer_value(json_object_get(body, "dropped")), 0);
    fixture_drop_orders(c);
    stored(c, other, id2, H3, "/ck/s10", 0, 0);
    assert_int_equal(last_reply(c), 0);
    assert_non_null(fixture_order(c, "ckpt.drop", other));
    reps = br_store_replica_list(c->store, id2, NULL);
    assert_int_equal(json_array_size(reps), 0);
    json_decref(reps);
}

/* replicas: 0, or a cluster of one: nothing is copied; a resume is not held. */
/* An attempt that restarts on the node that wrote the checkpoint, with no replica
 * anywhere: the checkpoint is restored from the node's own files (hashed where
 * they lie) before job.run goes, and the events say so. */
static void test_resume_on_writer_checked_from_its_own_files(void **state)
{
    world_t *w = *state;
    br_coord_t *c = &w->f.c;
    json_t *s = json_pack("{s:s, s:{s:i}, s:{s:s, s:s, s:n, s:i}, s:{s:i, s:[s]}}",
                          "command", "train", "resources", "cpus", 1, "checkpoint", "dir",
                          "/ck", "pattern", "*", "complete_file", "replicas", 0, "restart",
                          "max", 3, "on", "nonzero_exit");
    br_job_t *job = fixture_add_job(c, s);
    int64_t id = job->id;
    br_sched_run(c);
    br_node_t *writer = job->ranks[0].node[0] == 'a' ? w->a : w->b;
    br_node_t *other = writer == w->a ? w->b : w->a;
    br_node_set_state(other, BR_NODE_DRAINING); /* the restart can only go back to the writer */
    br_jobs_started(c, id, 1, writer, 0);
    checkpoint(c, id, writer, "/ck/s5", 5, H1);
    fixture_drop_orders(c);

    br_jobs_exited(c, id, 1, writer, 3, -1, "");
    br_sched_run(c);
    job = br_jobtab_find(c->jobs, id);
    assert_int_equal(job->attempt, 2);
    assert_int_equal(job->state, BR_JOB_STARTING);
    assert_null(fixture_order(c, "job.run", writer)); /* held until checked */
    json_t *fetch = fixture_order(c, "ckpt.fetch", writer);
    assert_non_null(fetch);
    assert_true(json_is_true(json_object_get(fetch, "restore")));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(fetch, "from"), "node")),
        writer->name);
    assert_non_null(fixture_order(c, "ckpt.serve", writer));
    assert_true(fixture_has_event(c, id, "restoring it on"));
    assert_true(fixture_has_event(c, id, "its own files"));

    fixture_drop_orders(c);
    stored(c, writer, id, H1, "/ck/s5", 1, 0);
    assert_int_equal(last_reply(c), 0);
    assert_non_null(fixture_order(c, "job.run", writer));
    assert_true(fixture_has_event(c, id, "restored and verified on"));
}

static void test_wanted(void **state)
{
    (void)state;
    json_t *s = json_pack("{s:{s:s, s:n}}", "checkpoint", "dir", "/c", "replicas");
    assert_int_equal(br_replicas_wanted(s, 1), 0);
    assert_int_equal(br_replicas_wanted(s, 2), 1);
    json_object_set_new(json_object_get(s, "checkpoint"), "replicas", json_integer(0));
    assert_int_equal(br_replicas_wanted(s, 5), 0);
    json_object_set_new(json_object_get(s, "checkpoint"), "replicas", json_integer(3));
    assert_int_equal(br_replicas_wanted(s, 5), 3);
    assert_int_equal(br_replicas_keep(s), 2);
    json_decref(s);
    s = json_pack("{s:n}", "checkpoint");
    assert_int_equal(br_replicas_wanted(s, 5), 0);
    json_decref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replicate_keep_restore_fallback, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_pull_tried_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holder_died_pull_from_replica, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_target_lost_other_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copies_ordered_again_after_rollback, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_copies_ordered_again_after_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_retention_and_purge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_on_writer_checked_from_its_own_files,
                                        setup, teardown),
        cmocka_unit_test(test_wanted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
