/* test_sched.c - the planner alone (scheduler.h), on nodes and jobs made here: no
 * store, no sockets. Priority then age decides the order; each placement is
 * reserved, so the next job sees what is left; CPUs, memory, whole and shared
 * GPUs, arch and labels, the agent's attempt limit, lost and draining nodes,
 * excluded nodes, restart backoffs; gangs all or nothing; replicas spread; and
 * every wait says what each node lacks. Incremental passes (the planner's memory)
 * look only at the jobs whose inputs changed and decide as a full pass. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"
#include "scheduler.h"
#include "netmap.h"

#define GIB (1024LL * 1024 * 1024)

/* A connected node: cpus, memory in GiB, and GPUs of vram_gib each (0: none). */
static br_node_t *node(br_nodes_t *ns, const char *name, int cpus, int mem_gib, int gpus,
                       int vram_gib, const char *state)
{
    json_t *g = json_array();
    for (int i = 0; i < gpus; i++)
        json_array_append_new(g, json_pack("{s:i, s:s, s:I, s:I}", "index", i, "model",
                                           "RTX 4090", "vram_total", (json_int_t)vram_gib * GIB,
                                           "vram_free", (json_int_t)vram_gib * GIB));
    json_t *info = json_pack("{s:s, s:s, s:s, s:i, s:I, s:o, s:s, s:{s:s}}", "name", name,
                             "pubkey", "k", "state", state, "cpus", cpus, "memory",
                             (json_int_t)mem_gib * GIB, "gpus", g, "arch", "x86_64",
                             "labels", "site", name[0] == 'h' ? "home" : "cloud");
    br_node_t *n = br_nodes_add(ns, info);
    json_decref(info);
    assert_non_null(n);
    n->route_len = 1; /* connected */
    n->last_seen_ms = 1000;
    return n;
}

/* A pending job's store row; res: the spec's resources as JSON text (add makes
 * it the job the planner takes). */
static json_t *job(int id, int priority, const char *res)
{
    json_error_t e;
    json_t *r = json_loads(res, 0, &e);
    assert_non_null(r);
    return json_pack("{s:i, s:s, s:s, s:s, s:s, s:{s:i, s:o}, s:n}", "id", id, "name", "j",
                     "owner", "u", "kind", "job", "state", "pending", "spec", "priority",
                     priority, "resources", r, "reason");
}

typedef struct {
    br_nodes_t *nodes;
    br_netmap_t *netmap;
    br_job_t *jobs[16];
    size_t n;
    br_sched_decision_t *d;
} world_t;

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    w->nodes = br_nodes_new();
    w->netmap = br_netmap_new();
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    br_sched_decisions_free(w->d, w->n);
    for (size_t i = 0; i < w->n; i++)
        br_job_destroy(&w->jobs[i]);
    br_nodes_destroy(&w->nodes);
    br_netmap_destroy(&w->netmap);
    free(w);
    return 0;
}

static void add(world_t *w, json_t *row)
{
    br_err_t err;
    br_job_t *j = br_job_from_row(row, &err);
    json_decref(row);
    assert_non_null(j);
    w->jobs[w->n++] = j;
}

static br_sched_decision_t *plan(world_t *w, int *hb)
{
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000};
    int dummy;
    w->d = br_sched_plan(&in, w->jobs, w->n, hb ? hb : &dummy);
    assert_non_null(w->d);
    return w->d;
}

/* The decision for job id among the nd of d. */
static br_sched_decision_t *decision(br_sched_decision_t *d, size_t nd, int id)
{
    for (size_t i = 0; i < nd; i++)
        if (d[i].job->id == id)
            return &d[i];
    fail_msg("no decision for job %d", id);
    return NULL;
}

/* The decision for job id in w's last plan. */
static br_sched_decision_t *of(world_t *w, int id)
{
    return decision(w->d, w->n, id);
}

static void test_order_and_reservation(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 0, 0, "ready");
    add(w, job(1, 0, "{\"cpus\": 3, \"nodes\": 1}"));
    add(w, job(2, 5, "{\"cpus\": 3, \"nodes\": 1}")); /* younger, but first */
    add(w, job(3, 0, "{\"cpus\": 1, \"nodes\": 1}")); /* fits beside job 2 */
    plan(w, NULL);
    assert_int_equal(w->d[0].job->id, 2);
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_PLACE);
    assert_ptr_equal(of(w, 2)->nodes[0], a);
    assert_int_equal(json_integer_value(json_object_get(of(w, 2)->assign[0], "cpus")), 3);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 1)->reason, "a has 1 CPUs free, the job needs 3"));
    assert_int_equal(of(w, 3)->verdict, BR_SCHED_PLACE);
    assert_int_equal(a->cpus_used, 4); /* both placements reserved */
    assert_int_equal(a->attempts, 2);
}

static void test_node_states_and_exclusions(void **state)
{
    world_t *w = *state;
    node(w->nodes, "a", 8, 16, 0, 0, "lost");
    node(w->nodes, "b", 8, 16, 0, 0, "draining");
    br_node_t *c = node(w->nodes, "c", 8, 16, 0, 0, "ready");
    c->route_len = 0; /* registered, not connected */
    node(w->nodes, "d", 8, 16, 0, 0, "ready");
    json_t *j = job(1, 0, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(j, "exclude", json_pack("[s]", "d"));
    add(w, j);
    j = job(2, 0, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(j, "not_before", json_integer(9000));
    add(w, j);
    plan(w, NULL);
    br_sched_decision_t *d = of(w, 1);
    assert_int_equal(d->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(d->reason, "a is lost"));
    assert_non_null(strstr(d->reason, "b is draining"));
    assert_non_null(strstr(d->reason, "c is not connected"));
    assert_non_null(strstr(d->reason, "d cannot run it (an earlier attempt failed there)"));
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_LATER);
    assert_int_equal(of(w, 2)->not_before, 9000);
}

static void test_gpus_whole_and_shared(void **state)
{
    world_t *w = *state;
    br_node_t *g = node(w->nodes, "g", 16, 64, 2, 24, "ready");
    add(w, job(1, 0, "{\"cpus\": 1, \"gpus\": 1, \"nodes\": 1}"));
    add(w, job(2, 0, "{\"cpus\": 1, \"gpus\": 1, \"vram\": 10737418240, \"nodes\": 1}"));
    add(w, job(3, 0, "{\"cpus\": 1, \"gpus\": 1, \"vram\": 10737418240, \"nodes\": 1}"));
    add(w, job(4, 0, "{\"cpus\": 1, \"gpus\": 1, \"vram\": 10737418240, \"nodes\": 1}"));
    add(w, job(5, 0, "{\"cpus\": 1, \"gpus\": 1, \"nodes\": 1}"));
    plan(w, NULL);
    /* job 1 takes GPU 0 whole; 2 and 3 share GPU 1 (10 + 10 of 24 GiB); 4 does not
     * fit there (4 GiB left) nor on the whole one; 5 finds no whole GPU */
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_PLACE);
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(of(w, 1)->assign[0], "gpus"), 0)), 0);
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_PLACE);
    assert_int_equal(of(w, 3)->verdict, BR_SCHED_PLACE);
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(of(w, 3)->assign[0], "gpus"), 0)), 1);
    assert_int_equal(of(w, 4)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 4)->reason, "g has 0 GPUs with 10.0GiB VRAM to spare"));
    assert_int_equal(of(w, 5)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 5)->reason, "g has 0 GPUs free, the job needs 1"));
    assert_int_equal(g->gpu_whole[0], 1);
    assert_int_equal(g->gpu_jobs[1], 2);
    assert_int_equal(g->gpu_vram_used[1], 20 * GIB);
}

static void test_labels_arch_and_attempt_limit(void **state)
{
    world_t *w = *state;
    node(w->nodes, "home1", 4, 8, 0, 0, "ready");
    br_node_t *cloud = node(w->nodes, "cloud1", 4, 8, 0, 0, "ready");
    cloud->attempts = BR_NODE_MAX_ATTEMPTS; /* what its agent would refuse */
    add(w, job(1, 0, "{\"cpus\": 0, \"nodes\": 1, \"labels\": {\"site\": \"cloud\"}}"));
    add(w, job(2, 0, "{\"cpus\": 0, \"nodes\": 1, \"arch\": [\"aarch64\"]}"));
    plan(w, NULL);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 1)->reason, "home1: labels do not match"));
    assert_non_null(strstr(of(w, 1)->reason, "the most an agent runs"));
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 2)->reason, "arch x86_64 not wanted"));
}

/* A job that brings code or data sets goes only to a node whose agent says what its
 * cache holds (heartbeat "trees"): an older agent would run it with whatever the
 * node happens to hold. Once the agent tells its cache, the job goes there. */
static void test_code_needs_an_agent_with_a_cache(void **state)
{
    world_t *w = *state;
    br_node_t *old = node(w->nodes, "home1", 4, 8, 0, 0, "ready");
    json_t *r = job(1, 0, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(json_object_get(r, "spec"), "code",
                        json_pack("{s:s, s:s}", "dir", "/p", "hash", "ab"));
    add(w, r);
    r = job(2, 0, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(json_object_get(r, "spec"), "data",
                        json_pack("{s:{s:s}}", "w", "path", "/m"));
    add(w, r);
    add(w, job(3, 5, "{\"cpus\": 1, \"nodes\": 1}")); /* none: runs anywhere */
    plan(w, NULL);
    for (int id = 1; id <= 2; id++) {
        assert_int_equal(of(w, id)->verdict, BR_SCHED_WAIT);
        assert_non_null(strstr(of(w, id)->reason, "home1: its agent fetches no code"));
    }
    assert_int_equal(of(w, 3)->verdict, BR_SCHED_PLACE);
    br_sched_decisions_free(w->d, w->n);
    json_object_set_new(old->info, "trees", json_object()); /* its first heartbeat */
    plan(w, NULL);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_PLACE);
}

/* A job with an image goes only to a node that runs containers, and one whose image
 * was loaded goes only where one of its variants' architectures runs; jobs alike
 * in resources but not in image share no verdict. */
static void test_images_match_runtime_and_architecture(void **state)
{
    world_t *w = *state;
    br_node_t *n = node(w->nodes, "home1", 4, 8, 0, 0, "ready");
    json_object_set_new(n->info, "trees", json_object());
    json_t *r = job(1, 9, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(json_object_get(r, "spec"), "image", json_string("bb:1"));
    add(w, r);
    add(w, job(2, 0, "{\"cpus\": 1, \"nodes\": 1}")); /* bare: runs */
    plan(w, NULL);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 1)->reason, "home1 runs no containers"));
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_PLACE);
    br_sched_decisions_free(w->d, w->n);
    json_object_set_new(n->info, "container_runtime", json_string("podman"));
    for (int id = 3; id <= 4; id++) { /* loaded for arm64 only; then for both */
        r = job(id, 0, "{\"cpus\": 1, \"nodes\": 1}");
        json_t *variants = json_pack("[{s:s, s:s}]", "arch", "arm64", "variant", "v8");
        if (id == 4)
            json_array_append_new(variants, json_pack("{s:s, s:s}", "arch", "amd64",
                                                      "variant", ""));
        json_object_set_new(json_object_get(r, "spec"), "image", json_string("multi:1"));
        json_object_set_new(json_object_get(r, "spec"), "image_archive",
                            json_pack("{s:s, s:o}", "name", "multi:1", "variants", variants));
        add(w, r);
    }
    plan(w, NULL);
    assert_int_equal(of(w, 3)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 3)->reason,
                           "home1 is x86_64, and image multi:1 was loaded for arm64/v8 only"));
    assert_int_equal(of(w, 4)->verdict, BR_SCHED_PLACE);
}

static void test_gang_all_or_nothing(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 8, 0, 0, "ready");
    br_node_t *b = node(w->nodes, "b", 4, 8, 0, 0, "ready");
    node(w->nodes, "c", 1, 8, 0, 0, "ready");
    add(w, job(1, 9, "{\"cpus\": 2, \"nodes\": 3}")); /* c is too small: waits */
    add(w, job(2, 0, "{\"cpus\": 2, \"nodes\": 2}"));
    plan(w, NULL);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 1)->reason, "a gang of 3 nodes, and 2 fit"));
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_PLACE);
    assert_int_equal(of(w, 2)->count, 2);
    assert_true((of(w, 2)->nodes[0] == a && of(w, 2)->nodes[1] == b) ||
                (of(w, 2)->nodes[0] == b && of(w, 2)->nodes[1] == a));
    assert_int_equal(a->cpus_used + b->cpus_used, 4); /* the waiting gang holds nothing */
}

static void test_gang_waits_for_fresh_heartbeats(void **state)
{
    world_t *w = *state;
    node(w->nodes, "a", 4, 8, 0, 0, "ready");
    json_t *j = job(1, 0, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(j, "fresh_after", json_integer(2000));
    add(w, j);
    int hb = 0;
    plan(w, &hb);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 1)->reason, "a not heard from since the gang stopped"));
    assert_int_equal(hb, 1);
}

static void test_replicas_spread(void **state)
{
    world_t *w = *state;
    node(w->nodes, "a", 8, 8, 0, 0, "ready");
    node(w->nodes, "b", 8, 8, 0, 0, "ready");
    for (int i = 1; i <= 4; i++) {
        json_t *j = job(i, 0, "{\"cpus\": 1, \"nodes\": 1}");
        json_object_set_new(j, "service", json_integer(7));
        add(w, j);
    }
    json_t *replicas = json_pack("{s:{s:i}}", "7", "a", 1); /* one runs on a */
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000,
                        .replicas = replicas};
    int hb;
    w->d = br_sched_plan(&in, w->jobs, w->n, &hb);
    int on_a = 0, on_b = 0;
    for (int i = 1; i <= 4; i++) {
        assert_int_equal(of(w, i)->verdict, BR_SCHED_PLACE);
        on_a += strcmp(of(w, i)->nodes[0]->name, "a") == 0;
        on_b += strcmp(of(w, i)->nodes[0]->name, "b") == 0;
    }
    json_t *per = json_object_get(replicas, "7");
    int a = (int)json_integer_value(json_object_get(per, "a"));
    int b = (int)json_integer_value(json_object_get(per, "b"));
    json_decref(replicas);
    /* 1 running + 4 new: 3 and 2, as even as it gets, and counted as placed */
    assert_int_equal(on_a + on_b, 4);
    assert_int_equal(a, 1 + on_a);
    assert_int_equal(b, on_b);
    assert_true((a == 3 && b == 2) || (a == 2 && b == 3));
}

/* Jobs alike share what the pass learnt: a first fit goes on from where the last
 * alike job went, and once one fit nowhere the rest wait with the same reason,
 * which still names every node. A job with an exclusion is decided on its own. */
static void test_alike_jobs_share_the_pass(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 0, 0, "ready");
    br_node_t *b = node(w->nodes, "b", 4, 16, 0, 0, "ready");
    node(w->nodes, "c", 1, 16, 0, 0, "ready");
    for (int i = 1; i <= 6; i++)
        add(w, job(i, 0, "{\"cpus\": 2, \"nodes\": 1}"));
    json_t *j = job(7, 0, "{\"cpus\": 1, \"nodes\": 1}");
    json_object_set_new(j, "exclude", json_pack("[s]", "c"));
    add(w, j);
    add(w, job(8, 0, "{\"cpus\": 1, \"nodes\": 1}"));
    plan(w, NULL);
    assert_ptr_equal(of(w, 1)->nodes[0], a);
    assert_ptr_equal(of(w, 2)->nodes[0], a);
    assert_ptr_equal(of(w, 3)->nodes[0], b);
    assert_ptr_equal(of(w, 4)->nodes[0], b);
    for (int id = 5; id <= 6; id++) {
        assert_int_equal(of(w, id)->verdict, BR_SCHED_WAIT);
        assert_non_null(strstr(of(w, id)->reason, "a has 0 CPUs free"));
        assert_non_null(strstr(of(w, id)->reason, "b has 0 CPUs free"));
        assert_non_null(strstr(of(w, id)->reason, "c has 1 CPUs free"));
    }
    assert_int_equal(of(w, 7)->verdict, BR_SCHED_WAIT); /* c is excluded for it */
    assert_non_null(strstr(of(w, 7)->reason, "c cannot run it"));
    assert_int_equal(of(w, 8)->verdict, BR_SCHED_PLACE); /* another shape: c fits it */
    assert_string_equal(of(w, 8)->nodes[0]->name, "c");
}

/* A gang on a big cluster chooses among a bounded number of the nodes that fit. */
static void test_gang_on_many_nodes(void **state)
{
    world_t *w = *state;
    char name[16];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof(name), "n%03d", i);
        node(w->nodes, name, 4, 16, 0, 0, "ready");
    }
    add(w, job(1, 0, "{\"cpus\": 4, \"nodes\": 3}"));
    add(w, job(2, 0, "{\"cpus\": 4, \"nodes\": 3}"));
    plan(w, NULL);
    for (int id = 1; id <= 2; id++) {
        br_sched_decision_t *d = of(w, id);
        assert_int_equal(d->verdict, BR_SCHED_PLACE);
        assert_int_equal(d->count, 3);
        for (int r = 0; r < 3; r++) {
            assert_true(strcmp(d->nodes[r]->name, "n064") < 0); /* among the first 64 */
            assert_int_equal(d->nodes[r]->cpus_used, 4);
        }
    }
}

/* A pending job with a time_limit (ms; 0: none). */
static json_t *timed(int id, const char *res, int64_t time_limit)
{
    json_t *row = job(id, 0, res);
    json_object_set_new(json_object_get(row, "spec"), "time_limit",
                        json_integer((json_int_t)time_limit));
    return row;
}

/* Backfill: the highest job that fits nowhere gets the nodes it will fit on when
 * the running ranks end by their time limits; a later job goes there only if it
 * ends before; one without a time limit never does. */
static void test_backfill_reservation(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 1, 24, "ready");
    br_node_t *b = node(w->nodes, "b", 4, 16, 1, 24, "ready");
    json_t *held = json_pack("{s:i, s:I, s:[i]}", "cpus", 1, "memory", (json_int_t)0, "gpus", 0);
    br_node_hold(b, held, 1); /* b's GPU runs a job that ends by its limit at 125 s */
    br_sched_end_t ends[] = {{b, held, 125000}};
    add(w, timed(1, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 2}", 0)); /* a gang */
    add(w, timed(2, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}", 30000));   /* short */
    add(w, timed(3, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}", 300000));  /* long */
    add(w, timed(4, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}", 0));       /* none */
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000,
                        .backfill = 1, .ends = ends, .nends = 1};
    int hb;
    w->d = br_sched_plan(&in, w->jobs, w->n, &hb);
    assert_non_null(w->d);
    assert_int_equal(of(w, 1)->verdict, BR_SCHED_WAIT);
    assert_int_equal(of(w, 1)->start_at, 125000);
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_PLACE); /* done by 35 s */
    assert_ptr_equal(of(w, 2)->nodes[0], a);
    assert_int_equal(of(w, 3)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 3)->reason, "a is reserved for job 1 in 2m"));
    assert_non_null(strstr(of(w, 3)->reason, "(for a job whose time_limit ends before)"));
    assert_int_equal(of(w, 4)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(of(w, 4)->reason, "a is reserved for job 1"));
    assert_int_equal(of(w, 2)->start_at, 0);
    br_sched_decisions_free(w->d, w->n);

    /* a rank without a time limit in the way: no reservation, and the others go */
    for (br_node_t *n = br_nodes_first(w->nodes); n; n = n->next)
        br_node_release_all(n);
    br_node_hold(b, held, 1);
    in.nends = 0;
    w->d = br_sched_plan(&in, w->jobs, w->n, &hb);
    assert_int_equal(of(w, 1)->start_at, 0);
    assert_int_equal(of(w, 2)->verdict, BR_SCHED_PLACE);
    json_decref(held);
}

/* Preemption: a job that waited long enough picks the fewest running jobs of lower
 * priority to make room: the lowest priority, then the newest; never its equals. */
static void test_preemption_picks_victims(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 2, 24, "ready");
    /* two running jobs hold a's GPUs: 7 (priority 0, older) and 8 (priority 0,
     * newer); 9 (priority 5) holds nothing */
    add(w, job(7, 0, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}"));
    add(w, job(8, 0, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}"));
    json_t *share[2] = {json_pack("{s:i, s:I, s:[i]}", "cpus", 1, "memory", (json_int_t)0,
                                  "gpus", 0),
                        json_pack("{s:i, s:I, s:[i]}", "cpus", 1, "memory", (json_int_t)0,
                                  "gpus", 1)};
    const char *names[] = {"a"};
    for (int k = 0; k < 2; k++) {
        br_job_t *r = w->jobs[k];
        assert_int_equal(br_job_set_ranks(r, names, &share[k], 1), 0);
        r->state = BR_JOB_RUNNING;
        r->started = 1000 + k;
        br_node_hold(a, share[k], 1);
        json_decref(share[k]);
    }
    br_job_t *running[] = {w->jobs[0], w->jobs[1]};
    w->n = 2; /* (they are not pending) */
    add(w, job(9, 5, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}"));
    w->jobs[2]->submitted = 0;
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000,
                        .backfill = 1, .preempt_after_ms = 1000, .victims = running,
                        .nvictims = 2};
    int hb;
    br_sched_decision_t *d = br_sched_plan(&in, &w->jobs[2], 1, &hb);
    assert_int_equal(d[0].verdict, BR_SCHED_WAIT);
    assert_int_equal(d[0].nvictims, 1);
    assert_int_equal(d[0].victims[0]->id, 8); /* the newest: the least work lost */
    assert_int_equal(a->gpu_jobs[0] + a->gpu_jobs[1], 2); /* nothing given back yet */
    br_sched_decisions_free(d, 1);
    /* not yet waited long enough: no victims, and when it may */
    w->jobs[2]->submitted = 4500;
    d = br_sched_plan(&in, &w->jobs[2], 1, &hb);
    assert_int_equal(d[0].nvictims, 0);
    assert_int_equal(d[0].preempt_at, 5500);
    br_sched_decisions_free(d, 1);
    /* its equals are never asked */
    w->jobs[2]->submitted = 0;
    w->jobs[2]->priority = 0;
    d = br_sched_plan(&in, &w->jobs[2], 1, &hb);
    assert_int_equal(d[0].nvictims, 0);
    br_sched_decisions_free(d, 1);
    for (int k = 0; k < 2; k++)
        br_job_set_ranks(w->jobs[k], NULL, NULL, 0);
}

/* ---- incremental passes (in->memory) ------------------------------------------- */

/* One pass with memory m over the jobs still pending, as br_sched_run makes it: the
 * placed ones then run. *nd: its decisions' count. */
static br_sched_decision_t *pass(world_t *w, br_sched_in_t *in, size_t *nd)
{
    br_job_t *pending[16];
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++)
        if (w->jobs[i]->state == BR_JOB_PENDING)
            pending[k++] = w->jobs[i];
    int hb;
    br_sched_decision_t *d = br_sched_plan(in, pending, k, &hb);
    assert_non_null(d);
    for (size_t i = 0; i < k; i++)
        if (d[i].verdict == BR_SCHED_PLACE)
            d[i].job->state = BR_JOB_RUNNING;
    *nd = k;
    return d;
}

static void assert_counts(br_sched_memory_t *m, size_t considered, size_t kept)
{
    size_t c, k;
    br_sched_memory_counts(m, &c, &k);
    if (c != considered || k != kept)
        fail_msg("considered %zu and kept %zu, not %zu and %zu", c, k, considered, kept);
}

/* A pass whose counts are all there is to check. */
static void pass_counts(world_t *w, br_sched_in_t *in, size_t considered, size_t kept)
{
    size_t nd;
    br_sched_decision_t *d = pass(w, in, &nd);
    assert_counts(in->memory, considered, kept);
    br_sched_decisions_free(d, nd);
}

/* With every node full, a new job costs one look, not one per waiting job; once a
 * rank ends, every waiting job is decided again and what fits is placed. */
static void test_incremental_new_job_and_rank_end(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 0, 0, "ready");
    json_t *held = json_pack("{s:i, s:I, s:[]}", "cpus", 4, "memory", (json_int_t)0, "gpus");
    br_node_hold(a, held, 1); /* a running job holds all of a */
    char res[64];
    for (int i = 1; i <= 10; i++) { /* each of its own shape: no memo to share */
        snprintf(res, sizeof(res), "{\"cpus\": 2, \"memory\": %d, \"nodes\": 1}", i);
        add(w, job(i, 0, res));
    }
    br_sched_memory_t *m = br_sched_memory_new();
    assert_non_null(m);
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000, .memory = m};
    size_t nd;
    br_sched_decision_t *d = pass(w, &in, &nd);
    assert_counts(m, 10, 0);
    for (int id = 1; id <= 10; id++)
        assert_int_equal(decision(d, nd, id)->verdict, BR_SCHED_WAIT);
    br_sched_decisions_free(d, nd);

    add(w, job(11, 0, "{\"cpus\": 1, \"nodes\": 1}")); /* a new submission */
    d = pass(w, &in, &nd);
    assert_counts(m, 1, 10);
    assert_int_equal(decision(d, nd, 11)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(decision(d, nd, 11)->reason, "a has 0 CPUs free"));
    for (int id = 1; id <= 10; id++) {
        assert_int_equal(decision(d, nd, id)->verdict, BR_SCHED_WAIT);
        assert_true(decision(d, nd, id)->kept);
        assert_null(decision(d, nd, id)->reason); /* its reason stands */
    }
    br_sched_decisions_free(d, nd);

    pass_counts(w, &in, 0, 11); /* nothing changed: nothing looked at */

    br_node_hold(a, held, -1); /* the running job ended */
    d = pass(w, &in, &nd);
    assert_counts(m, 11, 0);
    assert_int_equal(decision(d, nd, 1)->verdict, BR_SCHED_PLACE); /* oldest first */
    assert_int_equal(decision(d, nd, 2)->verdict, BR_SCHED_PLACE);
    for (int id = 3; id <= 11; id++)
        assert_int_equal(decision(d, nd, id)->verdict, BR_SCHED_WAIT);
    assert_int_equal(a->cpus_used, 4);
    br_sched_decisions_free(d, nd);

    /* what was placed holds a again: the rest fit nowhere, unlooked at */
    pass_counts(w, &in, 0, 9);

    /* a node joins: everything is looked at again */
    node(w->nodes, "b", 1, 16, 0, 0, "ready");
    d = pass(w, &in, &nd);
    assert_counts(m, 9, 0);
    assert_int_equal(decision(d, nd, 11)->verdict, BR_SCHED_PLACE);
    assert_string_equal(decision(d, nd, 11)->nodes[0]->name, "b");
    br_sched_decisions_free(d, nd);

    /* a node draining has less room; one that comes back ready, or whose labels
     * change, counts as more */
    br_node_set_state(a, BR_NODE_DRAINING);
    pass_counts(w, &in, 0, 8);
    br_node_set_state(a, BR_NODE_READY);
    pass_counts(w, &in, 8, 0);
    json_object_set_new(json_object_get(a->info, "labels"), "zone", json_string("z"));
    pass_counts(w, &in, 8, 0);
    br_sched_memory_destroy(&m);
    json_decref(held);
}

/* A job in a restart backoff is looked at each pass and placed once it is over,
 * while the jobs that fit nowhere are not looked at. */
static void test_incremental_backoff_ends(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 0, 0, "ready");
    json_t *held = json_pack("{s:i, s:I, s:[]}", "cpus", 2, "memory", (json_int_t)0, "gpus");
    br_node_hold(a, held, 1);
    for (int i = 1; i <= 5; i++)
        add(w, job(i, 0, "{\"cpus\": 3, \"nodes\": 1}")); /* fit nowhere */
    add(w, job(6, 0, "{\"cpus\": 1, \"nodes\": 1}"));
    w->jobs[5]->not_before = 10000; /* restarted, in its backoff */
    br_sched_memory_t *m = br_sched_memory_new();
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000, .memory = m};
    size_t nd;
    br_sched_decision_t *d = pass(w, &in, &nd);
    assert_counts(m, 6, 0);
    assert_int_equal(decision(d, nd, 6)->verdict, BR_SCHED_LATER);
    assert_int_equal(decision(d, nd, 6)->not_before, 10000);
    br_sched_decisions_free(d, nd);
    in.now_ms = 9000;
    d = pass(w, &in, &nd);
    assert_counts(m, 1, 5);
    assert_int_equal(decision(d, nd, 6)->verdict, BR_SCHED_LATER);
    br_sched_decisions_free(d, nd);
    in.now_ms = 11000; /* its backoff is over */
    d = pass(w, &in, &nd);
    assert_counts(m, 1, 5);
    assert_int_equal(decision(d, nd, 6)->verdict, BR_SCHED_PLACE);
    for (int id = 1; id <= 5; id++)
        assert_int_equal(decision(d, nd, id)->verdict, BR_SCHED_WAIT);
    br_sched_decisions_free(d, nd);
    br_sched_memory_destroy(&m);
    json_decref(held);
}

/* Backfill with memory: the job the reservation is for is looked at in every pass;
 * a new job with a time limit past the reservation still keeps off its nodes; and
 * when a new job takes the reservation role and no reservation can be made, the
 * jobs kept off the reserved nodes are looked at again and go there, as a full
 * pass would place them. */
static void test_incremental_reservation(void **state)
{
    world_t *w = *state;
    br_node_t *a = node(w->nodes, "a", 4, 16, 1, 24, "ready");
    br_node_t *b = node(w->nodes, "b", 4, 16, 1, 24, "ready");
    json_t *held = json_pack("{s:i, s:I, s:[i]}", "cpus", 1, "memory", (json_int_t)0, "gpus", 0);
    br_node_hold(b, held, 1); /* b's GPU runs a job that ends by its limit at 125 s */
    br_sched_end_t ends[] = {{b, held, 125000}};
    add(w, timed(1, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 2}", 0));      /* a gang */
    add(w, timed(2, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}", 300000)); /* long */
    add(w, timed(3, "{\"gpus\": 1, \"cpus\": 2, \"nodes\": 1}", 0));      /* none */
    br_sched_memory_t *m = br_sched_memory_new();
    br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap, .now_ms = 5000,
                        .backfill = 1, .ends = ends, .nends = 1, .memory = m};
    size_t nd;
    br_sched_decision_t *d = pass(w, &in, &nd);
    assert_counts(m, 3, 0);
    assert_int_equal(decision(d, nd, 1)->start_at, 125000);
    assert_non_null(strstr(decision(d, nd, 2)->reason, "a is reserved for job 1"));
    assert_non_null(strstr(decision(d, nd, 3)->reason, "a is reserved for job 1"));
    br_sched_decisions_free(d, nd);

    add(w, timed(4, "{\"gpus\": 1, \"cpus\": 3, \"nodes\": 1}", 400000)); /* long, new */
    d = pass(w, &in, &nd);
    assert_counts(m, 2, 2); /* job 1 (the reservation's) and job 4 */
    assert_int_equal(decision(d, nd, 1)->start_at, 125000);
    assert_int_equal(decision(d, nd, 4)->verdict, BR_SCHED_WAIT);
    assert_non_null(strstr(decision(d, nd, 4)->reason, "a is reserved for job 1"));
    assert_true(decision(d, nd, 2)->kept && decision(d, nd, 3)->kept);
    br_sched_decisions_free(d, nd);

    /* a higher job that fits nowhere, and for which no reservation can be made (no
     * third node): job 1 no longer holds a, so the jobs kept off it are looked at */
    json_t *big = timed(5, "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 3}", 0);
    json_object_set_new(json_object_get(big, "spec"), "priority", json_integer(9));
    add(w, big);
    d = pass(w, &in, &nd);
    assert_int_equal(decision(d, nd, 5)->start_at, 0);
    assert_int_equal(decision(d, nd, 1)->start_at, 0);
    assert_int_equal(decision(d, nd, 2)->verdict, BR_SCHED_PLACE); /* the oldest */
    assert_ptr_equal(decision(d, nd, 2)->nodes[0], a);
    assert_int_equal(decision(d, nd, 3)->verdict, BR_SCHED_WAIT);
    assert_int_equal(decision(d, nd, 4)->verdict, BR_SCHED_WAIT);
    br_sched_decisions_free(d, nd);
    br_sched_memory_destroy(&m);
    json_decref(held);
}

/* The same passes with and without memory decide alike, pass after pass, as nodes
 * fill and empty and jobs come. */
static void test_incremental_decides_as_a_full_pass(void **state)
{
    world_t *w = *state;
    node(w->nodes, "a", 4, 16, 2, 24, "ready");
    node(w->nodes, "b", 8, 32, 0, 0, "ready");
    const char *shapes[] = {"{\"cpus\": 3, \"nodes\": 1}",
                            "{\"gpus\": 1, \"cpus\": 1, \"nodes\": 1}",
                            "{\"gpus\": 1, \"cpus\": 1, \"vram\": 8589934592, \"nodes\": 1}",
                            "{\"cpus\": 2, \"nodes\": 2}"};
    for (int i = 1; i <= 16; i++)
        add(w, timed(i, shapes[i % 4], i % 3 ? 60000 * i : 0));
    br_sched_memory_t *m = br_sched_memory_new();
    size_t first = 4, kept = 0; /* jobs submitted so far; the rest come one per pass */
    struct {
        br_node_t *nodes[4];
        json_t *shares[4];
        int count;
    } holds[16]; /* what each running job holds, by its index */
    memset(holds, 0, sizeof(holds));
    int ended = 0, looked_again = 0; /* a job ended before this pass; passes after one */
    for (int round = 0; round < 12; round++) {
        br_job_t *pending[16];
        size_t k = 0;
        for (size_t i = 0; i < first && i < w->n; i++)
            if (w->jobs[i]->state == BR_JOB_PENDING)
                pending[k++] = w->jobs[i];
        br_sched_in_t in = {.nodes = w->nodes, .netmap = w->netmap,
                            .now_ms = 5000 + round * 1000, .backfill = 1};
        int hb;
        /* the full pass first, then everything given back, then the incremental */
        br_sched_decision_t *full = br_sched_plan(&in, pending, k, &hb);
        assert_non_null(full);
        for (size_t i = 0; i < k; i++)
            for (int r = 0; r < full[i].count; r++)
                br_node_hold(full[i].nodes[r], full[i].assign[r], -1);
        in.memory = m;
        br_sched_decision_t *inc = br_sched_plan(&in, pending, k, &hb);
        assert_non_null(inc);
        size_t c, kk;
        br_sched_memory_counts(m, &c, &kk);
        kept += kk;
        if (ended && k > 0) { /* a node has room again: every job is looked at */
            assert_int_equal(c, k);
            assert_int_equal(kk, 0);
            looked_again++;
        }
        for (size_t i = 0; i < k; i++) {
            assert_ptr_equal(full[i].job, inc[i].job);
            assert_int_equal(full[i].verdict, inc[i].verdict);
            assert_int_equal(full[i].count, inc[i].count);
            for (int r = 0; r < full[i].count; r++)
                assert_ptr_equal(full[i].nodes[r], inc[i].nodes[r]);
            assert_int_equal(full[i].start_at, inc[i].start_at);
            if (inc[i].verdict != BR_SCHED_PLACE)
                continue;
            inc[i].job->state = BR_JOB_RUNNING;
            size_t at = (size_t)(inc[i].job->id - 1);
            assert_true(inc[i].count <= 4);
            for (int r = 0; r < inc[i].count; r++) {
                holds[at].nodes[r] = inc[i].nodes[r];
                holds[at].shares[r] = json_incref(inc[i].assign[r]);
            }
            holds[at].count = inc[i].count;
        }
        /* every third pass the oldest running job ends, giving back what it holds */
        ended = 0;
        for (size_t i = 0; round % 3 == 2 && i < w->n; i++)
            if (w->jobs[i]->state == BR_JOB_RUNNING) {
                for (int r = 0; r < holds[i].count; r++) {
                    br_node_hold(holds[i].nodes[r], holds[i].shares[r], -1);
                    json_decref(holds[i].shares[r]);
                }
                holds[i].count = 0;
                w->jobs[i]->state = BR_JOB_COMPLETED;
                ended = 1;
                break;
            }
        br_sched_decisions_free(full, k);
        br_sched_decisions_free(inc, k);
        first++;
    }
    assert_true(kept > 0);         /* (some passes did keep jobs unlooked at) */
    assert_true(looked_again > 0); /* (and some came after a node gained room) */
    for (int i = 0; i < 16; i++)
        for (int r = 0; r < holds[i].count; r++)
            json_decref(holds[i].shares[r]);
    br_sched_memory_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order_and_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_states_and_exclusions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpus_whole_and_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_labels_arch_and_attempt_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_images_match_runtime_and_architecture, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_code_needs_an_agent_with_a_cache, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gang_all_or_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gang_waits_for_fresh_heartbeats, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_replicas_spread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alike_jobs_share_the_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gang_on_many_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backfill_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preemption_picks_victims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incremental_new_job_and_rank_end, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_incremental_backoff_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incremental_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incremental_decides_as_a_full_pass, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
