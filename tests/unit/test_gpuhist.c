/* test_gpuhist.c - a GPU's last hour: figures land in their 15 s slot (the last of
 * a slot stands), slots nobody sampled are null, an hour later they are gone,
 * sampling is due once a second, the number of GPUs is bounded, and only GPUs
 * with a history gain one in a node.list answer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "gpuhist.h"

#define STEP BR_GPUHIST_STEP_MS
#define T0 ((int64_t)1700000000000 / STEP * STEP)

static json_t *answer(void)
{
    return json_pack("{s:[{s:s, s:[{s:i}, {s:i}]}, {s:s, s:[]}]}", "nodes", "name", "a",
                     "gpus", "index", 0, "index", 1, "name", "b", "gpus");
}

static json_t *hist(json_t *ans, int gpu, const char *key)
{
    json_t *g = json_array_get(
        json_object_get(json_array_get(json_object_get(ans, "nodes"), 0), "gpus"),
        (size_t)gpu);
    return json_object_get(json_object_get(g, "history"), key);
}

static void test_slots(void **state)
{
    (void)state;
    br_gpuhist_t *h = br_gpuhist_new();
    br_gpuhist_sample(h, "a", 0, 10, 100, T0);
    br_gpuhist_sample(h, "a", 0, 20, 200, T0 + 1000); /* same slot: the last stands */
    br_gpuhist_sample(h, "a", 0, 30, NAN, T0 + 3 * STEP);
    json_t *ans = answer();
    br_gpuhist_attach(h, ans, T0 + 3 * STEP);
    json_t *u = hist(ans, 0, "util"), *p = hist(ans, 0, "power");
    assert_int_equal(json_array_size(u), BR_GPUHIST_SLOTS);
    assert_true(json_real_value(json_array_get(u, BR_GPUHIST_SLOTS - 1)) == 30);
    assert_true(json_is_null(json_array_get(p, BR_GPUHIST_SLOTS - 1)));
    assert_true(json_is_null(json_array_get(u, BR_GPUHIST_SLOTS - 2)));
    assert_true(json_is_null(json_array_get(u, BR_GPUHIST_SLOTS - 3)));
    assert_true(json_real_value(json_array_get(u, BR_GPUHIST_SLOTS - 4)) == 20);
    assert_true(json_real_value(json_array_get(p, BR_GPUHIST_SLOTS - 4)) == 200);
    assert_true(json_is_null(json_array_get(u, 0)));
    assert_null(hist(ans, 1, "util")); /* GPU 1 was never sampled */
    json_decref(ans);
    /* an hour and more later, without samples, all is gone */
    ans = answer();
    br_gpuhist_attach(h, ans, T0 + (BR_GPUHIST_SLOTS + 5) * STEP);
    u = hist(ans, 0, "util");
    for (size_t i = 0; i < json_array_size(u); i++)
        assert_true(json_is_null(json_array_get(u, i)));
    json_decref(ans);
    /* a sample long after: the old slots do not come back */
    br_gpuhist_sample(h, "a", 0, 50, 5, T0 + 3 * BR_GPUHIST_SLOTS * STEP);
    ans = answer();
    br_gpuhist_attach(h, ans, T0 + 3 * BR_GPUHIST_SLOTS * STEP);
    u = hist(ans, 0, "util");
    int known = 0;
    for (size_t i = 0; i < json_array_size(u); i++)
        known += !json_is_null(json_array_get(u, i));
    assert_int_equal(known, 1);
    json_decref(ans);
    br_gpuhist_destroy(&h);
    assert_null(h);
    br_gpuhist_destroy(&h);
}

static void test_due_and_bounds(void **state)
{
    (void)state;
    br_gpuhist_t *h = br_gpuhist_new();
    assert_int_equal(br_gpuhist_due(h, 5000), 1);
    assert_int_equal(br_gpuhist_due(h, 5500), 0);
    assert_int_equal(br_gpuhist_due(h, 6000), 1);
    char name[32];
    for (int i = 0; i < BR_GPUHIST_GPUS_MAX + 10; i++) {
        snprintf(name, sizeof(name), "n%d", i);
        br_gpuhist_sample(h, name, 0, 1, 1, T0);
    }
    /* the first GPUS_MAX sampled are remembered, the one after them is not (a name
     * that was sampled, so that only the bound can leave it out) */
    snprintf(name, sizeof(name), "n%d", BR_GPUHIST_GPUS_MAX);
    json_t *ans = json_pack("{s:[{s:s, s:[{s:i}]}, {s:s, s:[{s:i}]}]}", "nodes", "name",
                            name, "gpus", "index", 0, "name", "n0", "gpus", "index", 0);
    br_gpuhist_attach(h, ans, T0);
    json_t *nodes = json_object_get(ans, "nodes");
    assert_null(json_object_get(
        json_array_get(json_object_get(json_array_get(nodes, 0), "gpus"), 0),
        "history"));
    assert_non_null(json_object_get(
        json_array_get(json_object_get(json_array_get(nodes, 1), "gpus"), 0),
        "history"));
    json_decref(ans);
    json_t *empty = json_object();
    br_gpuhist_attach(h, empty, T0); /* no nodes: nothing to do */
    assert_int_equal(json_object_size(empty), 0);
    json_decref(empty);
    br_gpuhist_destroy(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_due_and_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
