/* test_netmap.c - the network map: round trips from reports, the probe matrix, and
 * which set of nodes a gang is given. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "netmap.h"
#include "nodes.h"

typedef struct {
    br_nodes_t *nodes;
    br_netmap_t *map;
    br_node_t *n[6];
    int count;
    json_t *rows; /* what each node reported: {"a": {"b": ms|null}} */
} fx_t;

static br_node_t *add(fx_t *f, const char *name, const char *site)
{
    json_t *info = json_pack("{s:s, s:s, s:s, s:{}}", "name", name, "pubkey", "k", "state",
                             "ready", "labels");
    if (site)
        json_object_set_new(json_object_get(info, "labels"), "site", json_string(site));
    br_node_t *n = br_nodes_add(f->nodes, info);
    json_decref(info);
    f->n[f->count++] = n;
    return n;
}

/* a measured b (ms < 0: no answer, null); a reports its whole row each time. */
static void measure(fx_t *f, const char *a, const char *b, double ms)
{
    json_t *row = json_object_get(f->rows, a);
    if (!row)
        json_object_set_new(f->rows, a, row = json_object());
    json_object_set_new(row, b, ms < 0 ? json_null() : json_real(ms));
    json_t *rtt = json_pack("{s:O, s:f}", "peers", row, "coordinator", 0.5);
    br_netmap_report(f->map, a, rtt);
    json_decref(rtt);
}

static void both(fx_t *f, const char *a, const char *b, double ms)
{
    measure(f, a, b, ms);
    measure(f, b, a, ms);
}

static int setup(void **state)
{
    static fx_t f;
    memset(&f, 0, sizeof(f));
    f.nodes = br_nodes_new();
    f.map = br_netmap_new();
    f.rows = json_object();
    *state = &f;
    return f.nodes && f.map ? 0 : -1;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    br_nodes_destroy(&f->nodes);
    br_netmap_destroy(&f->map);
    json_decref(f->rows);
    return 0;
}

static void test_rtt_both_directions(void **state)
{
    fx_t *f = *state;
    add(f, "a", NULL);
    add(f, "b", NULL);
    add(f, "c", NULL);
    assert_true(br_netmap_rtt(f->map, "a", "b") == -1);
    measure(f, "a", "b", 0.3);
    assert_true(br_netmap_rtt(f->map, "a", "b") == 0.3);
    assert_true(br_netmap_rtt(f->map, "b", "a") == 0.3);
    measure(f, "b", "a", 0.7); /* the larger direction counts */
    assert_true(br_netmap_rtt(f->map, "a", "b") == 0.7);
    measure(f, "a", "c", -1);
    assert_true(br_netmap_rtt(f->map, "a", "c") == -2);
    assert_true(br_netmap_coordinator_rtt(f->map, "a") == 0.5);
    assert_true(br_netmap_coordinator_rtt(f->map, "c") == -1);
    /* a report without a round trip to the coordinator keeps the last one */
    json_t *rtt = json_pack("{s:{s:f}}", "peers", "b", 0.9);
    br_netmap_report(f->map, "a", rtt);
    json_decref(rtt);
    assert_true(br_netmap_coordinator_rtt(f->map, "a") == 0.5);
    assert_true(br_netmap_rtt(f->map, "a", "b") == 0.9);
    measure(f, "a", "b", 0.3);

    json_t *m = br_netmap_matrix(f->map, f->nodes);
    assert_int_equal(json_array_size(json_object_get(m, "nodes")), 3);
    json_t *row_a = json_array_get(json_object_get(m, "rtt_ms"), 0);
    assert_true(json_real_value(json_array_get(row_a, 0)) == 0);
    assert_true(json_real_value(json_array_get(row_a, 1)) == 0.3);
    assert_true(json_is_null(json_array_get(row_a, 2)));
    json_decref(m);

    br_netmap_forget(f->map, "a");
    assert_true(br_netmap_rtt(f->map, "a", "b") == 0.7); /* b's view stays */
}

static void test_choose_nearest_pair(void **state)
{
    fx_t *f = *state;
    add(f, "a", NULL);
    add(f, "b", NULL);
    add(f, "c", NULL);
    both(f, "a", "b", 5.0);
    both(f, "a", "c", 0.2);
    both(f, "b", "c", 4.0);
    int chosen[2];
    char why[300];
    br_netmap_choose(f->map, f->n, 3, 2, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 2);
    assert_string_equal(why, "max rtt 0.20 ms; b not chosen: rtt 5.00 ms to a");
}

/* a and b talk through a relay (overlaynet.h), as the callback says */
static int relayed_ab(void *ctx, const br_node_t *a, const br_node_t *b)
{
    (void)ctx;
    return (strcmp(a->name, "a") == 0 && strcmp(b->name, "b") == 0) ||
           (strcmp(a->name, "b") == 0 && strcmp(b->name, "a") == 0);
}

static void test_choose_no_relayed_pair_when_another_fits(void **state)
{
    fx_t *f = *state;
    add(f, "a", NULL);
    add(f, "b", NULL);
    add(f, "c", NULL);
    both(f, "a", "b", 0.1); /* the nearest, but only through a relay */
    both(f, "a", "c", 2.0);
    both(f, "b", "c", 3.0);
    int chosen[2];
    char why[300];
    br_netmap_via_t via = {0, relayed_ab, NULL};
    br_netmap_choose(f->map, f->n, 3, 2, 0, &via, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 2);
    assert_null(strstr(why, "relayed"));
    /* only the relayed pair fits: it is used, and said */
    br_netmap_choose(f->map, f->n, 2, 2, 0, &via, chosen, why, sizeof(why));
    assert_int_equal(chosen[1], 1);
    assert_non_null(strstr(why, "some pairs relayed: no set without fits"));
}

/* A pair with no direct path but a fast overlay one: a gang that may run over the
 * overlay weighs the overlay's round trip; one that runs direct does not. */
static void test_choose_by_overlay_round_trips(void **state)
{
    fx_t *f = *state;
    add(f, "a", NULL);
    add(f, "b", NULL);
    add(f, "c", NULL);
    both(f, "a", "b", -1);          /* no direct answer (behind two routers) */
    both(f, "a", "b/overlay", 0.5); /* ... but over the overlay */
    both(f, "a", "c", 3.0);
    both(f, "b", "c", 4.0);
    assert_true(br_netmap_overlay_rtt(f->map, "a", "b") == 0.5);
    assert_true(br_netmap_overlay_rtt(f->map, "a", "c") == -1); /* (not measured) */
    int chosen[2];
    char why[300];
    br_netmap_choose(f->map, f->n, 3, 2, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[1], 2); /* direct: a and c */
    br_netmap_via_t via = {0, NULL, NULL};
    br_netmap_choose(f->map, f->n, 3, 2, 0, &via, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0); /* auto: a and b, over the overlay */
    assert_int_equal(chosen[1], 1);
    assert_string_equal(why, "max rtt 0.50 ms; c not chosen: rtt 4.00 ms to b");
    both(f, "a", "b/overlay", -1); /* the overlay lost too: a and c again */
    br_netmap_choose(f->map, f->n, 3, 2, 0, &via, chosen, why, sizeof(why));
    assert_int_equal(chosen[1], 2);
}

static void test_choose_one_site_unless_any(void **state)
{
    fx_t *f = *state;
    add(f, "a", "home");
    add(f, "b", "cloud");
    add(f, "c", "home");
    both(f, "a", "b", 0.1); /* the nearest pair is across sites */
    both(f, "a", "c", 2.0);
    both(f, "b", "c", 0.3);
    int chosen[2];
    char why[300];
    br_netmap_choose(f->map, f->n, 3, 2, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 2);
    assert_string_equal(why, "max rtt 2.00 ms; b not chosen: site cloud");
    br_netmap_choose(f->map, f->n, 3, 2, 1, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 1);

    /* only a set across sites fits: it is used, and said */
    br_netmap_choose(f->map, f->n, 2, 2, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 1);
    assert_non_null(strstr(why, "across sites"));
}

static void test_choose_far_counts_as_another_site(void **state)
{
    fx_t *f = *state;
    add(f, "a", NULL);
    add(f, "b", NULL);
    add(f, "c", NULL);
    add(f, "d", NULL);
    both(f, "a", "b", 40.0); /* a is 40 ms from everyone */
    both(f, "a", "c", 40.0);
    both(f, "a", "d", 40.0);
    both(f, "b", "c", 9.0);
    both(f, "b", "d", 0.5);
    both(f, "c", "d", 9.5);
    int chosen[3];
    char why[300];
    br_netmap_choose(f->map, f->n, 4, 3, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 1);
    assert_int_equal(chosen[1], 2);
    assert_int_equal(chosen[2], 3);
    assert_string_equal(why, "max rtt 9.50 ms; a not chosen: rtt 40.00 ms to b");
}

static void test_choose_unmeasured_and_lost(void **state)
{
    fx_t *f = *state;
    add(f, "a", NULL);
    add(f, "b", NULL);
    add(f, "c", NULL);
    int chosen[2];
    char why[300];
    /* nothing measured: first fit, in candidate order */
    br_netmap_choose(f->map, f->n, 3, 2, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 1);
    assert_non_null(strstr(why, "round trips not measured yet"));
    /* a stops answering b: a measured pair that answers wins */
    both(f, "a", "b", -1);
    both(f, "b", "c", 0.4);
    both(f, "a", "c", 0.9);
    br_netmap_choose(f->map, f->n, 3, 2, 0, NULL, chosen, why, sizeof(why));
    assert_int_equal(chosen[0], 1);
    assert_int_equal(chosen[1], 2);
    assert_string_equal(why, "max rtt 0.40 ms; a not chosen: no answer from it to b");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rtt_both_directions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose_nearest_pair, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose_no_relayed_pair_when_another_fits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_choose_by_overlay_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose_one_site_unless_any, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose_far_counts_as_another_site, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_choose_unmeasured_and_lost, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
