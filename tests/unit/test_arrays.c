/* test_arrays.c - the "%N" rule of job arrays (coordinator/policy/arrays.c) inside the
 * planner (scheduler.h): tasks that run count, and so do tasks placed earlier in
 * the same pass; a task held back waits with the array's reason; other jobs and
 * other arrays are not held back. No store, no sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrays.h"
#include "jobtab.h"
#include "scheduler.h"
#include "netmap.h"

#define GIB (1024LL * 1024 * 1024)

static void add_node(br_nodes_t *ns, const char *name, int cpus)
{
    json_t *info = json_pack("{s:s, s:s, s:s, s:i, s:I, s:[], s:s, s:{}}", "name", name,
                             "pubkey", "k", "state", "ready", "cpus", cpus, "memory",
                             (json_int_t)16 * GIB, "gpus", "arch", "x86_64", "labels");
    br_node_t *n = br_nodes_add(ns, info);
    json_decref(info);
    assert_non_null(n);
    n->route_len = 1;
    n->last_seen_ms = 1000;
}

/* A job of array array_of (0: none) with limit max, in state. */
static br_job_t *task(int id, const char *state, int array_of, int index, int max)
{
    json_t *row =
        json_pack("{s:i, s:s, s:s, s:s, s:s, s:{s:i, s:{s:i}}, s:n}", "id", id, "name",
                  "t", "owner", "u", "kind", "train", "state", state, "spec",
                  "priority", 0, "resources", "cpus", 1, "reason");
    if (array_of) {
        json_object_set_new(row, "array_of", json_integer(array_of));
        json_object_set_new(row, "array_index", json_integer(index));
        json_object_set_new(
            json_object_get(row, "spec"), "array",
            json_pack("{s:s, s:i, s:i}", "range", "0-9", "count", 10, "max", max));
    }
    br_err_t err;
    br_job_t *j = br_job_from_row(row, &err);
    json_decref(row);
    assert_non_null(j);
    return j;
}

static void test_limit_counts_running_and_placed(void **state)
{
    (void)state;
    br_nodes_t *nodes = br_nodes_new();
    br_netmap_t *netmap = br_netmap_new();
    br_jobtab_t *tab = br_jobtab_new();
    add_node(nodes, "a", 64);
    /* array 10, %3: tasks 0 and 1 run; 2..6 pending. Array 20 (%1) and job 30
     * pending beside it. */
    br_jobtab_add(tab, task(10, "running", 10, 0, 3));
    br_jobtab_add(tab, task(11, "starting", 10, 1, 3));
    for (int i = 2; i < 7; i++)
        br_jobtab_add(tab, task(10 + i, "pending", 10, i, 3));
    br_jobtab_add(tab, task(20, "pending", 20, 0, 1));
    br_jobtab_add(tab, task(21, "pending", 20, 1, 1));
    br_jobtab_add(tab, task(30, "pending", 0, -1, 0));
    size_t n;
    br_job_t **pending = br_jobtab_pending(tab, &n);
    assert_int_equal(n, 8);
    br_sched_in_t in = {.nodes = nodes,
                        .netmap = netmap,
                        .now_ms = 5000,
                        .arrays = br_arrays_pass_new(tab, pending, n)};
    assert_non_null(in.arrays);
    int hb;
    br_sched_decision_t *d = br_sched_plan(&in, pending, n, &hb);
    assert_non_null(d);
    int placed10 = 0, placed20 = 0, placed30 = 0;
    for (size_t i = 0; i < n; i++) {
        const br_job_t *j = d[i].job;
        if (d[i].verdict == BR_SCHED_PLACE) {
            placed10 += j->array_of == 10;
            placed20 += j->array_of == 20;
            placed30 += j->id == 30;
            continue;
        }
        assert_int_equal(d[i].verdict, BR_SCHED_WAIT);
        char want[80];
        snprintf(want, sizeof(want), "waiting: array %lld runs %d at once (%%%d)",
                 (long long)j->array_of, j->array_max, j->array_max);
        assert_string_equal(d[i].reason, want);
    }
    assert_int_equal(placed10, 1);      /* 2 run, 1 more: %3 */
    assert_int_equal(placed20, 1);      /* %1, counted within the pass */
    assert_int_equal(placed30, 1);      /* not in an array: never held back */
    assert_int_equal(d[0].job->id, 12); /* the oldest first */
    assert_int_equal(d[0].verdict, BR_SCHED_PLACE);
    br_sched_decisions_free(d, n);
    br_arrays_pass_destroy(&in.arrays);
    assert_null(in.arrays);
    free(pending);
    br_jobtab_destroy(&tab);
    br_netmap_destroy(&netmap);
    br_nodes_destroy(&nodes);
}

static void test_no_limit_no_pass(void **state)
{
    (void)state;
    br_jobtab_t *tab = br_jobtab_new();
    br_jobtab_add(tab, task(1, "pending", 1, 0, 0)); /* an array without %N */
    br_jobtab_add(tab, task(2, "pending", 0, -1, 0));
    size_t n;
    br_job_t **pending = br_jobtab_pending(tab, &n);
    assert_null(br_arrays_pass_new(tab, pending, n)); /* nothing to hold back */
    br_sched_decision_t d = {0};
    assert_int_equal(br_arrays_hold_back(NULL, pending[0], &d, 0), 0);
    free(pending);
    br_jobtab_destroy(&tab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_counts_running_and_placed),
        cmocka_unit_test(test_no_limit_no_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
