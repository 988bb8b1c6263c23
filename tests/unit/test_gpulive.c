/* test_gpulive.c - heartbeats' GPU figures (coordinator/core/gpulive.c): what is taken,
 * what is refused, free VRAM as the scheduler counts it, and the gauges. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "gpulive.h"

#define GIB (1024LL * 1024 * 1024)

/* A connected node with two 24 GiB GPUs as its hello reported them. */

static char fault[200];

/* br_gpulive_take, its fault kept in fault. */
static int take(br_node_t *n, json_t *hb)
{
    return br_gpulive_take(n, hb, fault, sizeof(fault));
}

static br_node_t *two_gpus(br_nodes_t *ns, const char *name)
{
    json_t *info = json_pack(
        "{s:s, s:s, s:s, s:[{s:i, s:s, s:I, s:I}, {s:i, s:s, s:I, s:I}]}", "name", name,
        "pubkey", "", "state", "ready", "gpus", "index", 0, "model", "RTX 4090",
        "vram_total", (json_int_t)(24 * GIB), "vram_free", (json_int_t)(24 * GIB),
        "index", 1, "model", "RTX \"3090\"", "vram_total", (json_int_t)(24 * GIB),
        "vram_free", (json_int_t)(24 * GIB));
    br_node_t *n = br_nodes_add(ns, info);
    json_decref(info);
    assert_non_null(n);
    n->route_len = 5;
    return n;
}

static json_int_t gpu_int(br_node_t *n, int i, const char *key)
{
    json_t *v = json_object_get(br_node_gpu(n, i), key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static void test_check(void **state)
{
    static const struct {
        const char *json, *want; /* want NULL: taken */
    } cases[] = {
        {"[]", NULL},
        {"[{\"index\": 0}]", NULL},
        {"[{\"index\": 1, \"vram_free\": 1, \"vram_used\": 0, \"util\": 100, "
         "\"power_w\": 85.5, \"temp_c\": -5}]",
         NULL},
        {"[{\"index\": 0, \"power_w\": 300}]", NULL},
        {"{}", "'gpus' must be an array"},
        {"[7]", "'gpus'[0] must be an object"},
        {"[{}]", "'gpus'[0]: 'index' must be 0..63"},
        {"[{\"index\": 64}]", "'index' must be 0..63"},
        {"[{\"index\": \"0\"}]", "'index' must be 0..63"},
        {"[{\"index\": 0}, {\"index\": 1, \"fan\": 3}]",
         "'gpus'[1]: unknown key 'fan'"},
        {"[{\"index\": 0, \"util\": 101}]", "'util' out of range"},
        {"[{\"index\": 0, \"util\": 0.5}]", "'util' out of range"},
        {"[{\"index\": 0, \"vram_free\": -1}]", "'vram_free' out of range"},
        {"[{\"index\": 0, \"vram_used\": 1.5}]", "'vram_used' out of range"},
        {"[{\"index\": 0, \"power_w\": -3}]", "'power_w' out of range"},
        {"[{\"index\": 0, \"temp_c\": \"hot\"}]", "'temp_c' out of range"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *j = json_loads(cases[i].json, 0, NULL);
        assert_non_null(j);
        br_err_t err = {0};
        int rc = br_gpulive_check(j, &err);
        if (!cases[i].want) {
            if (rc != 0)
                fail_msg("%s refused: %s", cases[i].json, err.text);
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(err.errnum, EPROTO);
            if (!strstr(err.text, cases[i].want) || !strstr(err.text, "node.heartbeat"))
                fail_msg("%s: '%s' lacks '%s'", cases[i].json, err.text, cases[i].want);
        }
        json_decref(j);
    }
    json_t *many = json_array();
    for (int i = 0; i <= BR_NODE_MAX_GPUS; i++)
        json_array_append_new(many, json_pack("{s:i}", "index", i % BR_NODE_MAX_GPUS));
    br_err_t err = {0};
    assert_int_equal(br_gpulive_check(many, &err), -1);
    assert_non_null(strstr(err.text, "more than 64 GPUs"));
    json_decref(many);
}

static void test_take(void **state)
{
    br_nodes_t *ns = br_nodes_new();
    br_node_t *n = two_gpus(ns, "n");
    json_t *hb = json_pack("[{s:i, s:I, s:I, s:i, s:f, s:i}, {s:i, s:I}, {s:i}, {s:i}]",
                           "index", 0, "vram_free", (json_int_t)(2 * GIB), "vram_used",
                           (json_int_t)(22 * GIB), "util", 97, "power_w", 402.5,
                           "temp_c", 77, "index", 1, "vram_free", (json_int_t)(2 * GIB),
                           "index", 5, "index", 63);
    assert_int_equal(take(n, hb),
                     0); /* less to spare: nothing to schedule */
    assert_int_equal(gpu_int(n, 0, "vram_free"), 2 * GIB);
    assert_int_equal(gpu_int(n, 0, "vram_used"), 22 * GIB);
    assert_int_equal(gpu_int(n, 0, "util"), 97);
    assert_int_equal(gpu_int(n, 0, "temp_c"), 77);
    assert_true(json_real_value(json_object_get(br_node_gpu(n, 0), "power_w")) ==
                402.5);
    assert_int_equal(gpu_int(n, 1, "vram_free"), 2 * GIB);
    assert_int_equal(gpu_int(n, 1, "vram_total"), 24 * GIB); /* the hello's stays */
    assert_int_equal(br_node_gpu_count(n), 2); /* unknown GPUs 5 and 63 ignored */
    json_decref(hb);

    /* a figure no longer sent is no longer known; a missing free figure stands */
    hb = json_pack("[{s:i, s:i}]", "index", 0, "temp_c", 60);
    assert_int_equal(take(n, hb), 0);
    assert_null(json_object_get(br_node_gpu(n, 0), "util"));
    assert_null(json_object_get(br_node_gpu(n, 0), "vram_used"));
    assert_int_equal(gpu_int(n, 0, "vram_free"), 2 * GIB);
    assert_int_equal(gpu_int(n, 0, "temp_c"), 60);
    json_decref(hb);

    /* memory freed: more to spare, the scheduler should look again */
    hb = json_pack("[{s:i, s:I}]", "index", 1, "vram_free", (json_int_t)(24 * GIB));
    assert_int_equal(take(n, hb), 1);
    json_decref(hb);
    /* ... but not for NVML's small moves */
    hb = json_pack("[{s:i, s:I}]", "index", 0, "vram_free",
                   (json_int_t)(2 * GIB + 1000));
    assert_int_equal(take(n, hb), 0);
    json_decref(hb);
    br_nodes_destroy(&ns);
}

/* bramble's own sharing jobs are in NVML's used figure and the scheduler subtracts
 * their reservations itself: free VRAM counts them back, up to the total. */
static void test_take_counts_reservations_once(void **state)
{
    br_nodes_t *ns = br_nodes_new();
    br_node_t *n = two_gpus(ns, "n");
    json_t *share = json_pack("{s:i, s:I, s:[i], s:I}", "cpus", 0, "memory",
                              (json_int_t)0, "gpus", 0, "vram", (json_int_t)(7 * GIB));
    br_node_hold(n, share, 1);
    /* the job allocated its 7 GiB; something else uses 5 GiB */
    json_t *hb = json_pack("[{s:i, s:I, s:I}]", "index", 0, "vram_free",
                           (json_int_t)(12 * GIB), "vram_used", (json_int_t)(12 * GIB));
    take(n, hb);
    assert_int_equal(gpu_int(n, 0, "vram_free"), 19 * GIB); /* 19 - 7 reserved: 12 */
    json_decref(hb);
    /* the job has not allocated yet: never more than the GPU has */
    hb = json_pack("[{s:i, s:I}]", "index", 0, "vram_free", (json_int_t)(24 * GIB));
    take(n, hb);
    assert_int_equal(gpu_int(n, 0, "vram_free"), 24 * GIB);
    json_decref(hb);
    br_node_hold(n, share, -1);
    json_decref(share);
    br_nodes_destroy(&ns);
}

static void test_page(void **state)
{
    br_nodes_t *ns = br_nodes_new();
    br_node_t *n = two_gpus(ns, "a");
    br_node_t *lost = two_gpus(ns, "b");
    br_node_set_state(lost, BR_NODE_LOST);
    json_t *hb =
        json_pack("[{s:i, s:I, s:i, s:f, s:i}]", "index", 1, "vram_used",
                  (json_int_t)(22 * GIB), "util", 37, "power_w", 85.5, "temp_c", 41);
    take(n, hb);
    take(lost, hb);
    json_decref(hb);
    br_metrics_t *m = br_metrics_new();
    br_gpulive_page(m, ns);
    const char *text = br_metrics_text(m, NULL);
    static const char *const want[] = {
        "# TYPE bramble_gpu_memory_total_bytes gauge\n",
        "bramble_gpu_memory_total_bytes{node=\"a\",gpu=\"0\",model=\"RTX 4090\"} "
        "25769803776\n",
        "bramble_gpu_memory_total_bytes{node=\"a\",gpu=\"1\",model=\"RTX "
        "\\\"3090\\\"\"} "
        "25769803776\n",
        "bramble_gpu_memory_used_bytes{node=\"a\",gpu=\"1\",model=\"RTX "
        "\\\"3090\\\"\"} "
        "23622320128\n",
        "bramble_gpu_utilization_ratio{node=\"a\",gpu=\"1\",model=\"RTX "
        "\\\"3090\\\"\"} "
        "0.37\n",
        "bramble_gpu_power_watts{node=\"a\",gpu=\"1\",model=\"RTX \\\"3090\\\"\"} "
        "85.5\n",
        "bramble_gpu_temperature_celsius{node=\"a\",gpu=\"1\",model=\"RTX "
        "\\\"3090\\\"\"} "
        "41\n",
        "# TYPE bramble_gpu_temperature_celsius gauge\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(text, want[i]))
            fail_msg("page lacks '%s':\n%s", want[i], text);
    /* GPU 0 sent no figures: only its size; a lost node: nothing */
    assert_null(strstr(text, "bramble_gpu_memory_used_bytes{node=\"a\",gpu=\"0\""));
    assert_null(strstr(text, "node=\"b\""));
    br_metrics_destroy(&m);
    br_nodes_destroy(&ns);
}

/* A new XID (not one a program causes itself) or more uncorrected ECC errors is
 * a fault, said once; the same counts again are not. */
static void test_faults(void **state)
{
    (void)state;
    br_nodes_t *ns = br_nodes_new();
    br_node_t *n = two_gpus(ns, "n");
    json_t *hb = json_pack("[{s:i, s:i}]", "index", 0, "ecc_uncorrected", 0);
    assert_int_equal(take(n, hb), 0);
    assert_string_equal(fault, "");
    json_decref(hb);
    hb = json_pack("[{s:i, s:i, s:i}]", "index", 1, "xid_count", 1, "xid_last", 79);
    assert_int_equal(take(n, hb), BR_GPULIVE_FAULT);
    assert_string_equal(fault, "GPU 1: XID 79 (1 since its agent started)");
    assert_int_equal(take(n, hb), 0); /* the same: told already */
    json_decref(hb);
    hb = json_pack("[{s:i, s:i, s:i}]", "index", 1, "xid_count", 2, "xid_last", 13);
    assert_int_equal(take(n, hb), 0); /* a program's own fault */
    json_decref(hb);
    hb = json_pack("[{s:i, s:i}]", "index", 0, "ecc_uncorrected", 3);
    assert_int_equal(take(n, hb), BR_GPULIVE_FAULT);
    assert_string_equal(fault, "GPU 0: 3 uncorrected ECC errors");
    assert_int_equal(take(n, hb), 0);
    json_decref(hb);
    br_err_t err;
    hb = json_pack("[{s:i, s:i}]", "index", 0, "xid_count", -1);
    assert_int_equal(br_gpulive_check(hb, &err), -1);
    json_decref(hb);
    br_nodes_destroy(&ns);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_take),
        cmocka_unit_test(test_take_counts_reservations_once),
        cmocka_unit_test(test_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
