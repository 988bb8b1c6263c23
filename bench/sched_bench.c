/* sched_bench.c - how long one scheduling pass takes: the planner (scheduler.h)
 * over NODES simulated ready nodes (16 CPUs, 64 GiB, 4 GPUs of 24 GiB each) and
 * JOBS pending jobs of a mix of shapes (CPU only, a whole GPU, a shared GPU by
 * VRAM, a 2-node gang), as br_sched_run hands them over. It prints the time of
 * each of ROUNDS passes (every placement released between them) and how many jobs
 * each placed, and the process's CPU time in it (the machine may be shared). No
 * store and no sockets: the pass alone.
 *   bramble-bench-sched [JOBS [NODES [ROUNDS]]]   (default 10000 1000 5) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "job.h"
#include "netmap.h"
#include "nodes.h"
#include "scheduler.h"
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

static br_job_t *make_job(int id)
{
    const char *shapes[] = {
        "{\"cpus\": 2, \"memory\": 4294967296, \"nodes\": 1}",
        "{\"cpus\": 4, \"gpus\": 1, \"nodes\": 1}",
        "{\"cpus\": 1, \"gpus\": 1, \"vram\": 6442450944, \"nodes\": 1}",
        "{\"cpus\": 8, \"gpus\": 2, \"nodes\": 2}",
    };
    json_error_t e;
    json_t *res = json_loads(shapes[id % 4], 0, &e);
    json_t *row = json_pack("{s:i, s:s, s:s, s:s, s:s, s:{s:s, s:i, s:o}}", "id", id, "name",
                            "j", "owner", "u", "kind", "job", "state", "pending", "spec",
                            "command", "true", "priority", id % 3, "resources", res);
    br_err_t err;
    br_job_t *j = br_job_from_row(row, &err);
    json_decref(row);
    return j;
}

int main(int argc, char **argv)
{
    int jobs = argc > 1 ? atoi(argv[1]) : 10000;
    int nodes = argc > 2 ? atoi(argv[2]) : 1000;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (jobs < 1 || nodes < 1 || rounds < 1) {
        fprintf(stderr, "usage: bramble-bench-sched [JOBS [NODES [ROUNDS]]]\n");
        return 2;
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
        if (!(list[i] = make_job(i + 1)))
            return 1;
    printf("pending jobs %d, nodes %d\n", jobs, nodes);
    for (int r = 0; r < rounds; r++) {
        br_sched_in_t in = {.nodes = ns, .netmap = netmap, .now_ms = br_now_ms()};
        int hb;
        int64_t t0 = br_mono_us(), c0 = cpu_us();
        br_sched_decision_t *d = br_sched_plan(&in, list, (size_t)jobs, &hb);
        int64_t us = br_mono_us() - t0, cpu = cpu_us() - c0;
        if (!d)
            return 1;
        int placed = 0;
        for (int i = 0; i < jobs; i++)
            placed += d[i].verdict == BR_SCHED_PLACE;
        printf("pass %d: %.3f s (CPU %.3f s), %d placed, %d waiting\n", r + 1,
               (double)us / 1e6, (double)cpu / 1e6, placed, jobs - placed);
        br_sched_decisions_free(d, (size_t)jobs);
        for (br_node_t *n = br_nodes_first(ns); n; n = n->next)
            br_node_release_all(n); /* the next pass starts from empty nodes again */
    }
    for (int i = 0; i < jobs; i++)
        br_job_destroy(&list[i]);
    free(list);
    br_netmap_destroy(&netmap);
    br_nodes_destroy(&ns);
    return 0;
}
