/* test_fairshare.c - the ledger (usage.h) and a pass's order (fairshare.h) on a
 * real store file with real users: use decays by the half-life; limits are read
 * and refused by name; the order is priority, then fair share, then age; one
 * pass shares out what is free among users; a user's limits hold a job back with
 * that limit as its reason, and a hard limit refuses a submission; an
 * incremental pass decides such a job again once its limit frees. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cred.h"
#include "fairshare.h"
#include "jobtab.h"
#include "scheduler.h"
#include "store.h"
#include "usage.h"
#include "netmap.h"

#define HOUR 3600000LL
#define HALF (7 * 24 * HOUR)
#define NOW (1000 * HOUR)

typedef struct {
    char dir[64];
    br_store_t *store;
    br_usage_t *usage;
    br_jobtab_t *jobs;
    int64_t ids[4]; /* admin, ann, bob, cat */
    br_job_t *list[16];
    size_t n;
} world_t;

static void add_user(world_t *w, br_principal_t kind, const char *name, int64_t *id)
{
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
    br_err_t err;
    assert_int_equal(br_keypair(pub, sec, &err), 0);
    assert_int_equal(br_store_key_add(w->store, pub, kind, name, &err), 0);
    assert_int_equal(br_store_principal_id(w->store, kind, name, id, &err), 0);
    assert_true(*id > 0);
}

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    snprintf(w->dir, sizeof(w->dir), "/tmp/test_fairshare.XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/bramble.db", w->dir);
    br_err_t err;
    w->store = br_store_open(path, &err);
    assert_non_null(w->store);
    add_user(w, BR_PRINCIPAL_ADMIN, "admin", &w->ids[0]);
    add_user(w, BR_PRINCIPAL_USER, "ann", &w->ids[1]);
    add_user(w, BR_PRINCIPAL_USER, "bob", &w->ids[2]);
    add_user(w, BR_PRINCIPAL_USER, "cat", &w->ids[3]);
    w->usage = br_usage_new(NULL, HALF);
    assert_int_equal(br_usage_load(w->usage, w->store, NOW, &err), 0);
    w->jobs = br_jobtab_new();
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    for (size_t i = 0; i < w->n; i++)
        br_job_destroy(&w->list[i]);
    br_jobtab_destroy(&w->jobs);
    br_usage_destroy(&w->usage);
    br_store_destroy(&w->store);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "%s/bramble.db", w->dir);
    unlink(cmd);
    rmdir(w->dir);
    free(w);
    return 0;
}

static void set_limits(world_t *w, const char *name, const char *json)
{
    json_error_t je;
    json_t *l = json_loads(json, 0, &je);
    br_err_t err;
    assert_non_null(l);
    assert_int_equal(br_store_limits_set(w->store, BR_PRINCIPAL_USER, name, l, &err), 0);
    json_decref(l);
    assert_int_equal(br_usage_load(w->usage, w->store, NOW, &err), 0);
}

/* A pending job of owner (index into ids) submitted at submitted_ms, asking for
 * one GPU (gpus) or one CPU. */
static br_job_t *job(world_t *w, int id, int owner, int priority, int gpus,
                     int64_t submitted_ms)
{
    json_t *row = json_pack("{s:i, s:s, s:s, s:I, s:s, s:s, s:I, s:{s:i, s:{s:i, s:i, s:i}}}",
                            "id", id, "name", "j", "owner", "u", "owner_id",
                            (json_int_t)w->ids[owner], "kind", "job", "state", "pending",
                            "submitted", (json_int_t)submitted_ms, "spec", "priority",
                            priority, "resources", "nodes", 1, "gpus", gpus, "cpus",
                            gpus ? 0 : 1);
    br_err_t err;
    br_job_t *j = br_job_from_row(row, &err);
    json_decref(row);
    assert_non_null(j);
    w->list[w->n++] = j;
    return j;
}

static void test_use_decays_by_the_half_life(void **state)
{
    world_t *w = *state;
    br_user_use_t *ann = br_usage_user(w->usage, w->ids[1]);
    assert_non_null(ann);
    assert_string_equal(ann->name, "ann");
    br_usage_add(w->usage, ann, 1000 * HOUR, 0, NOW);
    br_usage_standing(w->usage, w->jobs, NOW + HALF);
    assert_true(ann->gpu_now > 499.9 * HOUR && ann->gpu_now < 500.1 * HOUR);
    br_usage_standing(w->usage, w->jobs, NOW + 2 * HALF);
    assert_true(ann->gpu_now > 249.9 * HOUR && ann->gpu_now < 250.1 * HOUR);
    /* the week's GPU time is not decayed */
    assert_int_equal(ann->week_gpu_ms, 1000 * HOUR);

    /* the store's hours give the same, read again */
    br_err_t err;
    assert_int_equal(br_store_usage_add(w->store, w->ids[2], NOW / HOUR - 1, 2 * HOUR, HOUR,
                                        5000000, &err),
                     0);
    assert_int_equal(br_usage_load(w->usage, w->store, NOW, &err), 0);
    br_user_use_t *bob = br_usage_user(w->usage, w->ids[2]);
    assert_true(bob->gpu_decayed > 1.99 * HOUR && bob->gpu_decayed <= 2 * HOUR);
    assert_int_equal(bob->week_gpu_ms, 2 * HOUR);
    json_t *rep = br_usage_report(w->store, NOW - 24 * HOUR, 0, &err);
    assert_non_null(rep);
    assert_int_equal(json_array_size(rep), 1);
    json_t *line = json_array_get(rep, 0);
    assert_string_equal(json_string_value(json_object_get(line, "user")), "bob");
    assert_true(json_real_value(json_object_get(line, "gpu_hours")) == 2.0);
    assert_true(json_real_value(json_object_get(line, "cost")) == 5.0);
    json_decref(rep);
}

static void test_limits_parse_and_refuse_by_name(void **state)
{
    (void)state;
    br_limits_t l;
    br_err_t err;
    json_t *o = json_pack("{s:i, s:f, s:i}", "max_gpus", 2, "share", 3.0, "max_priority", 5);
    assert_int_equal(br_limits_parse(o, &l, &err), 0);
    assert_int_equal(l.max_gpus, 2);
    assert_int_equal(l.max_jobs, -1);
    assert_true(l.share == 3.0);
    json_t *back = br_limits_json(&l);
    assert_true(json_equal(back, o));
    json_decref(back);
    json_decref(o);
    static const char *bad[][2] = {
        {"{\"max_gpu\": 1}", "unknown limit 'max_gpu'"},
        {"{\"share\": 0}", "share must be a number from 0.001"},
        {"{\"max_jobs\": -1}", "max_jobs must be a whole number from 0"},
        {"{\"max_priority\": 2000}", "max_priority must be a whole number from -1000 to 1000"},
        {"{\"gpu_hours_week\": \"x\"}", "gpu_hours_week must be a number"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_error_t je;
        o = json_loads(bad[i][0], 0, &je);
        assert_int_equal(br_limits_parse(o, &l, &err), -1);
        if (!strstr(err.text, bad[i][1]))
            fail_msg("%s: '%s' does not say '%s'", bad[i][0], err.text, bad[i][1]);
        json_decref(o);
    }
}

/* Take the whole order, placing each job (one GPU or one CPU) as it comes. */
static size_t take_all(br_fairshare_t *f, int64_t *ids, char limits[][200])
{
    br_score_t sc;
    size_t k = 0;
    br_job_t *j;
    while ((j = br_fairshare_next(f, &sc, limits[k], 200))) {
        ids[k] = j->id;
        if (!limits[k][0]) {
            int gpus = (int)json_integer_value(
                json_object_get(json_object_get(j->spec, "resources"), "gpus"));
            br_fairshare_placed(f, gpus, gpus ? 0 : 1);
        }
        k++;
    }
    return k;
}

static void test_order_shares_out_among_users(void **state)
{
    world_t *w = *state;
    br_usage_add(w->usage, br_usage_user(w->usage, w->ids[1]), 10 * HOUR, 0, NOW);
    for (int i = 1; i <= 3; i++)
        job(w, i, 1, 0, 1, NOW - 60000); /* ann's, queued first */
    job(w, 4, 2, 0, 1, NOW);
    job(w, 5, 2, 0, 1, NOW);
    job(w, 6, 3, 0, 1, NOW);
    br_usage_standing(w->usage, w->jobs, NOW);
    br_fairshare_t *f = br_fairshare_new(w->usage, w->list, w->n, NOW);
    int64_t ids[16];
    char limits[16][200];
    assert_int_equal(take_all(f, ids, limits), 6);
    /* bob and cat used nothing: one each, then bob's second; ann (ten GPU-hours)
     * last, however early she queued */
    int64_t want[] = {4, 6, 5, 1, 2, 3};
    for (int i = 0; i < 6; i++)
        assert_int_equal(ids[i], want[i]);
    br_fairshare_destroy(&f);
}

static void test_priority_outweighs_share_and_is_capped(void **state)
{
    world_t *w = *state;
    set_limits(w, "cat", "{\"max_priority\": -1}"); /* (reads the store's use again) */
    br_usage_add(w->usage, br_usage_user(w->usage, w->ids[1]), 10 * HOUR, 0, NOW);
    job(w, 1, 2, 0, 1, NOW);  /* bob: nothing used */
    job(w, 2, 1, 1, 1, NOW);  /* ann: priority 1 */
    job(w, 3, 3, 50, 1, NOW); /* cat asked for 50, capped at -1 */
    br_usage_standing(w->usage, w->jobs, NOW);
    br_fairshare_t *f = br_fairshare_new(w->usage, w->list, w->n, NOW);
    br_score_t sc;
    char limit[200];
    br_job_t *j = br_fairshare_next(f, &sc, limit, sizeof(limit));
    assert_int_equal(j->id, 2);
    assert_true(sc.priority == 1000 && sc.fairshare < 100 && sc.age == 0);
    assert_true(sc.total == sc.priority + sc.fairshare + sc.age);
    j = br_fairshare_next(f, &sc, limit, sizeof(limit));
    assert_int_equal(j->id, 1);
    assert_true(sc.fairshare == 1000);
    j = br_fairshare_next(f, &sc, limit, sizeof(limit));
    assert_int_equal(j->id, 3);
    assert_true(sc.priority == -1000);
    assert_null(br_fairshare_next(f, &sc, limit, sizeof(limit)));
    br_fairshare_destroy(&f);

    /* age: a point per 10 minutes, at most 500 */
    job(w, 9, 2, 0, 1, NOW - 30 * 60000);
    job(w, 10, 2, 0, 1, NOW - 100LL * 24 * HOUR);
    f = br_fairshare_new(NULL, &w->list[3], 2, NOW);
    j = br_fairshare_next(f, &sc, limit, sizeof(limit));
    assert_int_equal(j->id, 9); /* without a ledger: priority, then id */
    assert_true(sc.age > 2.99 && sc.age < 3.01);
    j = br_fairshare_next(f, &sc, limit, sizeof(limit));
    assert_true(sc.age == BR_FAIRSHARE_AGE_MAX);
    br_fairshare_destroy(&f);
}

static void test_limits_hold_back_and_refuse(void **state)
{
    world_t *w = *state;
    set_limits(w, "ann", "{\"max_jobs\": 2, \"max_gpus\": 1}");
    set_limits(w, "bob", "{\"gpu_hours_week\": 1.5, \"max_pending\": 0}");
    br_usage_add(w->usage, br_usage_user(w->usage, w->ids[2]), 2 * HOUR, 0, NOW);
    job(w, 1, 1, 0, 1, NOW); /* ann: a GPU */
    job(w, 2, 1, 0, 1, NOW); /* ann: a second GPU, over max-gpus */
    job(w, 3, 1, 0, 0, NOW); /* ann: a CPU job, her second running */
    job(w, 4, 1, 0, 0, NOW); /* ann: a third running, over max-jobs */
    job(w, 5, 2, 0, 1, NOW); /* bob: a GPU job, the week used up */
    job(w, 6, 2, 0, 0, NOW); /* bob: a CPU job runs */
    br_usage_standing(w->usage, w->jobs, NOW);
    br_fairshare_t *f = br_fairshare_new(w->usage, w->list, w->n, NOW);
    int64_t ids[16];
    char limits[16][200];
    size_t n = take_all(f, ids, limits);
    assert_int_equal(n, 6);
    for (size_t i = 0; i < n; i++) {
        const char *want = ids[i] == 2   ? "waiting: ann's limit max-gpus 1 (1 held, this job needs 1)"
                           : ids[i] == 4 ? "waiting: ann's limit max-jobs 2 (2 running)"
                           : ids[i] == 5 ? "waiting: bob's limit gpu-hours-week 1.5 (2.00 used in "
                                           "the last 7 days)"
                                         : "";
        if (strcmp(limits[i], want) != 0)
            fail_msg("job %lld: '%s', not '%s'", (long long)ids[i], limits[i], want);
    }
    br_fairshare_destroy(&f);

    /* hard limits at submit; the admin has none */
    br_err_t err;
    json_t *spec = json_pack("{s:i, s:{s:i, s:i}}", "priority", 0, "resources", "gpus", 2,
                             "nodes", 1);
    assert_int_equal(br_usage_admit(w->usage, w->jobs, w->ids[1], spec, &err), -1);
    assert_non_null(strstr(err.text, "the job needs 2 GPUs, over your limit max-gpus 1"));
    assert_int_equal(br_usage_admit(w->usage, w->jobs, w->ids[2], spec, &err), -1);
    assert_non_null(strstr(err.text, "you have 0 jobs pending, your limit max-pending is 0"));
    assert_int_equal(br_usage_admit(w->usage, w->jobs, w->ids[0], spec, &err), 0);
    assert_int_equal(br_usage_admit(w->usage, w->jobs, w->ids[3], spec, &err), 0);
    json_decref(spec);

    /* an array counts a pending job per task: 10 tasks over a max-pending of 9 */
    set_limits(w, "cat", "{\"max_pending\": 9}");
    spec = json_pack("{s:i, s:{s:i}, s:{s:s, s:i, s:i}}", "priority", 0, "resources", "nodes",
                     1, "array", "range", "0-9", "count", 10, "max", 0);
    assert_int_equal(br_usage_admit(w->usage, w->jobs, w->ids[3], spec, &err), -1);
    assert_non_null(strstr(err.text, "the array adds 10 pending jobs to your 0, over your "
                                     "limit max-pending 9"));
    json_object_set_new(json_object_get(spec, "array"), "count", json_integer(9));
    assert_int_equal(br_usage_admit(w->usage, w->jobs, w->ids[3], spec, &err), 0);
    json_decref(spec);
}

/* The planner with the ledger: two GPUs free at once go to two users who wait,
 * not both to the first. */
static void test_one_pass_places_one_job_per_user(void **state)
{
    world_t *w = *state;
    br_nodes_t *nodes = br_nodes_new();
    br_netmap_t *netmap = br_netmap_new();
    json_t *info = json_pack("{s:s, s:s, s:s, s:i, s:I, s:[{s:i, s:s, s:I, s:I},"
                             " {s:i, s:s, s:I, s:I}], s:s, s:{}}",
                             "name", "n", "pubkey", "k", "state", "ready", "cpus", 2, "memory",
                             (json_int_t)1 << 34, "gpus", "index", 0, "model", "T",
                             "vram_total", (json_int_t)1 << 30, "vram_free",
                             (json_int_t)1 << 30, "index", 1, "model", "T", "vram_total",
                             (json_int_t)1 << 30, "vram_free", (json_int_t)1 << 30, "arch",
                             "x86_64", "labels");
    br_node_t *n = br_nodes_add(nodes, info);
    json_decref(info);
    n->route_len = 1;
    for (int i = 1; i <= 4; i++)
        job(w, i, 1, 0, 1, NOW - 60000); /* ann queued four first */
    for (int i = 5; i <= 8; i++)
        job(w, i, 2, 0, 1, NOW);
    br_usage_standing(w->usage, w->jobs, NOW);
    br_sched_in_t in = {.nodes = nodes, .netmap = netmap, .now_ms = NOW, .usage = w->usage};
    int hb;
    br_sched_decision_t *d = br_sched_plan(&in, w->list, w->n, &hb);
    assert_non_null(d);
    assert_int_equal(d[0].verdict, BR_SCHED_PLACE);
    assert_int_equal(d[0].job->id, 1);
    assert_int_equal(d[1].verdict, BR_SCHED_PLACE);
    assert_int_equal(d[1].job->id, 5);
    for (size_t i = 2; i < w->n; i++)
        assert_int_equal(d[i].verdict, BR_SCHED_WAIT);
    assert_true(d[0].score.fairshare == 1000 && d[1].score.fairshare == 1000);
    br_sched_decisions_free(d, w->n);
    br_netmap_destroy(&netmap);
    br_nodes_destroy(&nodes);
}

/* With the planner's memory (scheduler.h): a job its owner's limit held back is
 * decided again once the limit no longer holds, though no node gained room, while
 * the jobs that fit nowhere are not looked at. */
static void test_limit_freed_is_decided_again(void **state)
{
    world_t *w = *state;
    set_limits(w, "ann", "{\"max_jobs\": 1}");
    br_nodes_t *nodes = br_nodes_new();
    br_netmap_t *netmap = br_netmap_new();
    json_t *info = json_pack("{s:s, s:s, s:s, s:i, s:I, s:[], s:s, s:{}}", "name", "n",
                             "pubkey", "k", "state", "ready", "cpus", 2, "memory",
                             (json_int_t)1 << 34, "gpus", "arch", "x86_64", "labels");
    br_node_t *n = br_nodes_add(nodes, info);
    json_decref(info);
    n->route_len = 1;
    br_job_t *running = job(w, 1, 1, 0, 0, NOW - 60000); /* ann's, runs on n */
    w->n--;                                               /* (the table owns it) */
    json_t *share = json_pack("{s:i, s:I, s:[]}", "cpus", 1, "memory", (json_int_t)0, "gpus");
    const char *names[] = {"n"};
    assert_int_equal(br_job_set_ranks(running, names, &share, 1), 0);
    running->state = BR_JOB_RUNNING;
    br_jobtab_add(w->jobs, running);
    br_node_hold(n, share, 1);
    job(w, 2, 1, 0, 0, NOW);         /* ann's second: max-jobs holds it */
    job(w, 3, 2, 0, 1, NOW - 30000); /* bob's: a GPU, and n has none */
    job(w, 4, 2, 0, 1, NOW - 20000);
    br_sched_memory_t *m = br_sched_memory_new();
    br_sched_in_t in = {.nodes = nodes, .netmap = netmap, .now_ms = NOW, .usage = w->usage,
                        .memory = m};
    size_t considered, kept;
    int hb;
    for (int round = 0; round < 3; round++) {
        if (round == 2) /* the admin raises ann's limit: no node has more room */
            set_limits(w, "ann", "{\"max_jobs\": 2}");
        br_usage_standing(w->usage, w->jobs, NOW);
        br_sched_decision_t *d = br_sched_plan(&in, w->list, w->n, &hb);
        assert_non_null(d);
        br_sched_memory_counts(m, &considered, &kept);
        for (size_t i = 0; i < w->n; i++) {
            if (d[i].job->id == 2 && round < 2) {
                assert_int_equal(d[i].verdict, BR_SCHED_WAIT);
                assert_non_null(strstr(d[i].reason, "ann's limit max-jobs 1"));
            } else if (d[i].job->id == 2) {
                assert_int_equal(d[i].verdict, BR_SCHED_PLACE);
                br_node_hold(n, d[i].assign[0], -1); /* (as it was) */
            } else {
                assert_int_equal(d[i].verdict, BR_SCHED_WAIT);
                assert_int_equal(d[i].kept, round > 0);
            }
        }
        br_sched_decisions_free(d, w->n);
        assert_int_equal(considered, round == 0 ? 2 : round == 1 ? 0 : 1);
        assert_int_equal(kept, round == 0 ? 0 : 2);
    }
    br_sched_memory_destroy(&m);
    json_decref(share);
    br_netmap_destroy(&netmap);
    br_nodes_destroy(&nodes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_use_decays_by_the_half_life, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_parse_and_refuse_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_shares_out_among_users, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priority_outweighs_share_and_is_capped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_limits_hold_back_and_refuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_pass_places_one_job_per_user, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_limit_freed_is_decided_again, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
