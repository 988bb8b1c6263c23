/* sched_bench.c - how long one scheduling pass takes: the planner (scheduler.h)
 * over NODES simulated ready nodes (16 CPUs, 64 GiB, 4 GPUs of 24 GiB each) and
 * JOBS pending jobs of a mix of shapes (CPU only, a whole GPU, a shared GPU by
 * VRAM, a 2-node gang), as br_sched_run hands them over. It prints the time of
 * each of ROUNDS passes (every placement released between them) and how many jobs
 * each placed, and the process's CPU time in it (the machine may be shared). The
 * jobs belong to USERS users, whose fair share (fairshare.h) orders them: each
 * user has used a different amount lately, as the ledger (usage.h) reads it from
 * a store file made here; USERS 0: no ledger, priority then age alone. Half the
 * jobs have a time_limit, so the first that fits nowhere gets a reservation
 * (backfill) from the ends of those placed before it. No sockets: the pass alone.
 *
 * Then a pass after one new submission, with JOBS jobs waiting over NODES full
 * nodes (each held whole by a running job with a time limit, so the first job
 * that fits nowhere gets a reservation): a full pass (every job looked at) and
 * an incremental one (the planner's memory: only what may have changed), for the
 * four shapes above and for jobs each of its own shape (no shape memo to share),
 * with how many jobs each looked at.
 *   bramble-bench-sched [JOBS [NODES [ROUNDS [USERS]]]]   (default 10000 1000 5 50) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cred.h"
#include "job.h"
#include "netmap.h"
#include "nodes.h"
#include "scheduler.h"
#include "store.h"
#include "usage.h"
#include "util.h"

#define GIB (1024LL * 1024 * 1024)

/* CPU time of this process in µs: on a shared machine, what the pass itself cost. */
static int64_t cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static br_node_t *add_node(br_nodes_t *ns, int i)
{
    char name[32];
    snprintf(name, sizeof(name), "node-%05d", i);
    json_t *g = json_array();
    for (int k = 0; k < 4; k++)
        json_array_append_new(g, json_pack("{s:i, s:s, s:I, s:I}", "index", k, "model",
                                           "RTX 3090", "vram_total", (json_int_t)24 * GIB,
                                           "vram_free", (json_int_t)24 * GIB));
    json_t *info = json_pack("{s:s, s:s, s:s, s:i, s:I, s:o, s:s}", "name", name, "pubkey",
                             "k", "state", "ready", "cpus", 16, "memory",
                             (json_int_t)64 * GIB, "gpus", g, "arch", "x86_64");
    br_node_t *n = br_nodes_add(ns, info);
    json_decref(info);
    if (n) {
        n->route_len = 1;
        n->last_seen_ms = br_now_ms();
    }
    return n;
}

/* own: a shape of its own (a memory need no other job has). */
static br_job_t *make_job(int id, int64_t owner, int own)
{
    const char *shapes[] = {
        "{\"cpus\": 2, \"memory\": 4294967296, \"nodes\": 1}",
        "{\"cpus\": 4, \"gpus\": 1, \"nodes\": 1}",
        "{\"cpus\": 1, \"gpus\": 1, \"vram\": 6442450944, \"nodes\": 1}",
        "{\"cpus\": 8, \"gpus\": 2, \"nodes\": 2}",
    };
    json_error_t e;
    json_t *res = json_loads(shapes[id % 4], 0, &e);
    if (own)
        json_object_set_new(res, "memory", json_integer((json_int_t)id * 1024 * 1024));
    json_t *row = json_pack("{s:i, s:s, s:s, s:I, s:s, s:s, s:I, s:{s:s, s:i, s:o}}", "id",
                            id, "name", "j", "owner", "u", "owner_id", (json_int_t)owner,
                            "kind", "job", "state", "pending", "submitted",
                            (json_int_t)(br_now_ms() - (int64_t)id * 1000), "spec", "command",
                            "true", "priority", id % 3, "resources", res);
    if (id % 2) /* half of them say how long they run: backfill counts on it */
        json_object_set_new(json_object_get(row, "spec"), "time_limit",
                            json_integer((json_int_t)(id % 7 + 1) * 600000));
    br_err_t err;
    br_job_t *j = br_job_from_row(row, &err);
    json_decref(row);
    return j;
}

/* One pass over list[0..n-1] (memory m, or NULL: a full one): its decisions'
 * verdicts into v, placements given back; the wall and CPU time, and how many
 * jobs it looked at and kept. -1 when out of memory. */
static int timed_pass(br_nodes_t *ns, br_netmap_t *netmap, br_usage_t *usage,
                      br_jobtab_t *none, const br_sched_end_t *ends, size_t nends,
                      br_sched_memory_t *m, br_job_t **list, size_t n, int *v,
                      const char *what)
{
    br_sched_in_t in = {.nodes = ns, .netmap = netmap, .now_ms = br_now_ms(),
                        .usage = usage, .backfill = 1, .ends = ends, .nends = nends,
                        .memory = m};
    int hb;
    int64_t t0 = br_mono_us(), c0 = cpu_us();
    if (usage)
        br_usage_standing(usage, none, in.now_ms);
    br_sched_decision_t *d = br_sched_plan(&in, list, n, &hb);
    int64_t us = br_mono_us() - t0, cpu = cpu_us() - c0;
    if (!d)
        return -1;
    size_t considered = n, kept = 0;
    if (m)
        br_sched_memory_counts(m, &considered, &kept);
    int placed = 0;
    for (size_t i = 0; i < n; i++) {
        v[d[i].job->id - 1] = (int)d[i].verdict; /* (by job: ids from 1) */
        placed += d[i].verdict == BR_SCHED_PLACE;
        for (int r = 0; r < d[i].count; r++)
            br_node_hold(d[i].nodes[r], d[i].assign[r], -1);
    }
    printf("  %s: %.3f s (CPU %.3f s), %zu jobs looked at, %zu kept, %d placed\n", what,
           (double)us / 1e6, (double)cpu / 1e6, considered, kept, placed);
    br_sched_decisions_free(d, n);
    return 0;
}

/* JOBS waiting over full nodes, then one more: a full pass and an incremental
 * one after it (own: each job of its own shape). */
static int after_submission(br_nodes_t *ns, br_netmap_t *netmap, br_usage_t *usage,
                            br_jobtab_t *none, const int64_t *owners, int users, int jobs,
                            int own)
{
    size_t nn = 0;
    for (br_node_t *n = br_nodes_first(ns); n; n = n->next)
        nn++;
    br_sched_end_t *ends = calloc(nn, sizeof(*ends));
    json_t *whole = json_pack("{s:i, s:I, s:[i, i, i, i]}", "cpus", 16, "memory",
                              (json_int_t)64 * GIB, "gpus", 0, 1, 2, 3);
    br_job_t **list = calloc((size_t)jobs + 1, sizeof(*list));
    int *v = calloc((size_t)jobs + 1, sizeof(*v)), *w = calloc((size_t)jobs + 1, sizeof(*w));
    br_sched_memory_t *m = br_sched_memory_new();
    if (!ends || !whole || !list || !v || !w || !m)
        return -1;
    size_t k = 0;
    int64_t now = br_now_ms();
    for (br_node_t *n = br_nodes_first(ns); n; n = n->next, k++) {
        br_node_hold(n, whole, 1); /* a running job holds it all, up to an hour more */
        ends[k] = (br_sched_end_t){n, whole, now + (int64_t)(k % 60 + 1) * 60000};
    }
    for (int i = 0; i <= jobs; i++)
        if (!(list[i] = make_job(i + 1, users ? owners[i % users] : 0, own)))
            return -1;
    list[jobs]->submitted = now; /* the new one */
    printf("%d jobs waiting over %zu full nodes (%s), then one more:\n", jobs, nn,
           own ? "each of its own shape" : "four shapes");
    int rc = 0;
    rc |= timed_pass(ns, netmap, usage, none, ends, nn, m, list, (size_t)jobs, v,
                     "first pass (all looked at)");
    rc |= timed_pass(ns, netmap, usage, none, ends, nn, NULL, list, (size_t)jobs + 1, v,
                     "after one more, full pass");
    rc |= timed_pass(ns, netmap, usage, none, ends, nn, m, list, (size_t)jobs + 1, w,
                     "after one more, incremental");
    int same = 1;
    for (int i = 0; i <= jobs; i++)
        same &= v[i] == w[i];
    printf("  same decisions: %s\n", same ? "yes" : "NO");
    for (br_node_t *n = br_nodes_first(ns); n; n = n->next)
        br_node_release_all(n);
    for (int i = 0; i <= jobs; i++)
        br_job_destroy(&list[i]);
    br_sched_memory_destroy(&m);
    json_decref(whole);
    free(list);
    free(ends);
    free(v);
    free(w);
    return rc || !same ? -1 : 0;
}

int main(int argc, char **argv)
{
    int jobs = argc > 1 ? atoi(argv[1]) : 10000;
    int nodes = argc > 2 ? atoi(argv[2]) : 1000;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    int users = argc > 4 ? atoi(argv[4]) : 50;
    if (jobs < 1 || nodes < 1 || rounds < 1 || users < 0) {
        fprintf(stderr, "usage: bramble-bench-sched [JOBS [NODES [ROUNDS [USERS]]]]\n");
        return 2;
    }
    /* the users, and what each used over the last days, in a store of their own */
    char dir[] = "/tmp/bramble-bench-sched.XXXXXX", path[64];
    br_store_t *store = NULL;
    br_usage_t *usage = NULL;
    br_jobtab_t *none = br_jobtab_new(); /* (no jobs run yet) */
    int64_t *owners = calloc((size_t)(users ? users : 1), sizeof(*owners));
    br_err_t err;
    if (!none || !owners || !mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/bramble.db", dir);
    if (users && !(store = br_store_open(path, &err))) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    int64_t now = br_now_ms();
    for (int u = 0; u < users; u++) {
        char name[32], pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
        snprintf(name, sizeof(name), "user-%02d", u);
        if (br_keypair(pub, sec, &err) < 0 ||
            br_store_key_add(store, pub, BR_PRINCIPAL_USER, name, &err) < 0 ||
            br_store_principal_id(store, BR_PRINCIPAL_USER, name, &owners[u], &err) < 0)
            return 1;
        for (int h = 0; h < 72; h += 1 + u % 5) /* hour by hour, more for some */
            if (br_store_usage_add(store, owners[u], now / 3600000 - h,
                                   (int64_t)(u + 1) * 600000, (int64_t)(50 - u) * 60000, 0,
                                   &err) < 0)
                return 1;
    }
    if (users && (!(usage = br_usage_new(NULL, 7LL * 24 * 3600000)) ||
                  br_usage_load(usage, store, now, &err) < 0)) {
        fprintf(stderr, "usage: %s\n", err.text);
        return 1;
    }
    br_nodes_t *ns = br_nodes_new();
    br_netmap_t *netmap = br_netmap_new();
    br_job_t **list = calloc((size_t)jobs, sizeof(*list));
    if (!ns || !netmap || !list)
        return 1;
    for (int i = 0; i < nodes; i++)
        if (!add_node(ns, i))
            return 1;
    for (int i = 0; i < jobs; i++)
        if (!(list[i] = make_job(i + 1, users ? owners[i % users] : 0, 0)))
            return 1;
    printf("pending jobs %d, nodes %d, users %d (%s)\n", jobs, nodes, users,
           users ? "fair share" : "priority and age alone");
    for (int r = 0; r < rounds; r++) {
        br_sched_in_t in = {
            .nodes = ns, .netmap = netmap, .now_ms = br_now_ms(), .usage = usage,
            .backfill = 1};
        int hb;
        int64_t t0 = br_mono_us(), c0 = cpu_us();
        if (usage) /* (part of the pass: br_sched_run does it first) */
            br_usage_standing(usage, none, in.now_ms);
        br_sched_decision_t *d = br_sched_plan(&in, list, (size_t)jobs, &hb);
        int64_t us = br_mono_us() - t0, cpu = cpu_us() - c0;
        if (!d)
            return 1;
        int placed = 0, reserved = 0;
        for (int i = 0; i < jobs; i++) {
            placed += d[i].verdict == BR_SCHED_PLACE;
            reserved += d[i].start_at > 0;
        }
        printf("pass %d: %.3f s (CPU %.3f s), %d placed, %d waiting, %d reserved for\n",
               r + 1, (double)us / 1e6, (double)cpu / 1e6, placed, jobs - placed, reserved);
        br_sched_decisions_free(d, (size_t)jobs);
        for (br_node_t *n = br_nodes_first(ns); n; n = n->next)
            br_node_release_all(n); /* the next pass starts from empty nodes again */
    }
    for (int own = 0; own <= 1; own++)
        if (after_submission(ns, netmap, usage, none, owners, users, jobs, own) < 0)
            return 1;
    for (int i = 0; i < jobs; i++)
        br_job_destroy(&list[i]);
    free(list);
    br_netmap_destroy(&netmap);
    br_nodes_destroy(&ns);
    br_usage_destroy(&usage);
    br_jobtab_destroy(&none);
    br_store_destroy(&store);
    free(owners);
    unlink(path);
    rmdir(dir);
    return 0;
}
