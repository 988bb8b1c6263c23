/* fill_store.c - a store with a long past: N ended jobs (completed, each with a
 * spec, its placement and three events), added to DIR/bramble.db of a stopped
 * coordinator, for bench/ended_jobs.sh.
 *   bramble-bench-fill DATA_DIR N */
#include <stdio.h>
#include <stdlib.h>

#include "store.h"
#include "util.h"

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[2]) < 1) {
        fprintf(stderr, "usage: bramble-bench-fill DATA_DIR N\n");
        return 2;
    }
    long n = atol(argv[2]);
    char path[4096];
    snprintf(path, sizeof(path), "%s/bramble.db", argv[1]);
    br_err_t err;
    br_store_t *s = br_store_open(path, &err);
    if (!s || br_store_begin(s, &err) < 0) {
        fprintf(stderr, "bramble-bench-fill: %s\n", err.text);
        return 1;
    }
    int64_t t = br_now_ms() - 30LL * 24 * 3600 * 1000; /* a month ago, on */
    for (long i = 0; i < n; i++, t += 10) {
        char name[32];
        snprintf(name, sizeof(name), "run-%ld", i);
        json_t *job = json_pack(
            "{s:s, s:s, s:s, s:I, s:{s:s, s:s, s:{s:i, s:I}}, s:s, s:I, s:s, s:i, s:[s],"
            " s:{s:[{s:s, s:i, s:I, s:[], s:s}], s:i}, s:I, s:I, s:i}",
            "name", name, "kind", "job", "owner", "admin", "owner_id", (json_int_t)1, "spec",
            "name", name, "command", "python train.py --epochs 3", "resources", "cpus", 1,
            "memory", (json_int_t)1 << 30, "spec_yaml", "command: python train.py\n",
            "submitted", (json_int_t)t, "state", "completed", "attempt", 1, "nodes",
            "node-1", "assign", "ranks", "node", "node-1", "cpus", 1, "memory",
            (json_int_t)1 << 30, "gpus", "state", "done", "port", 0, "started",
            (json_int_t)t + 2, "ended", (json_int_t)t + 8, "exit_code", 0);
        int64_t id = br_store_job_add(s, job, &err);
        json_decref(job);
        if (id < 0 || br_store_event_add(s, t, id, NULL, "pending", "submitted", &err) < 0 ||
            br_store_event_add(s, t + 2, id, "node-1", "running", "attempt 1 running",
                               &err) < 0 ||
            br_store_event_add(s, t + 8, id, "node-1", "completed", "attempt 1 exited 0",
                               &err) < 0) {
            fprintf(stderr, "bramble-bench-fill: %s\n", err.text);
            return 1;
        }
    }
    if (br_store_commit(s, &err) < 0) {
        fprintf(stderr, "bramble-bench-fill: %s\n", err.text);
        return 1;
    }
    br_store_destroy(&s);
    printf("added %ld ended jobs to %s\n", n, path);
    return 0;
}
