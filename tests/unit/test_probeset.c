/* test_probeset.c - which peers each agent is told to probe: all others in a small
 * cluster, a bounded run of the names after its own in a large one, and no list
 * again while it has not changed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "probeset.h"

#define KEY "a coordinator secret key of forty chars"

/* count nodes n000.. connected at 10.0.0.x:7703; those at odd places answer no
 * probes when odd_off is set. */
static br_nodes_t *cluster(int count, int odd_off)
{
    br_nodes_t *nodes = br_nodes_new();
    for (int i = 0; i < count; i++) {
        char name[16], addr[32];
        snprintf(name, sizeof(name), "n%03d", i);
        snprintf(addr, sizeof(addr), "10.0.%d.%d", i / 200, i % 200 + 1);
        json_t *info = json_pack("{s:s, s:s, s:s, s:s}", "name", name, "pubkey", "k",
                                 "state", "ready", "address", addr);
        if (!(odd_off && i % 2))
            json_object_set_new(info, "probe_port", json_integer(7703));
        br_node_t *n = br_nodes_add(nodes, info);
        n->route_len = 5;
        json_decref(info);
    }
    return nodes;
}

static const char *peer(json_t *peers, size_t i)
{
    return json_string_value(json_object_get(json_array_get(peers, i), "node"));
}

/* the same secret, the same probe key; another secret, another */
static void test_probe_key_follows_from_the_secret(void **state)
{
    (void)state;
    br_probeset_t *a = br_probeset_new(KEY), *b = br_probeset_new(KEY),
                  *other = br_probeset_new("another secret");
    assert_int_equal(strlen(br_probeset_key(a)), 64);
    assert_string_equal(br_probeset_key(a), br_probeset_key(b));
    assert_string_not_equal(br_probeset_key(a), br_probeset_key(other));
    br_probeset_destroy(&a);
    br_probeset_destroy(&b);
    br_probeset_destroy(&other);
}

static void test_small_cluster_all_others_in_order(void **state)
{
    (void)state;
    br_nodes_t *nodes = cluster(4, 0);
    br_probeset_t *p = br_probeset_new(KEY);
    br_probeset_changed(p);
    assert_int_equal(br_probeset_refresh(p, nodes, 1000), 1);
    uint64_t h;
    json_t *peers = br_probeset_peers(p, "n002", 0, &h);
    assert_int_equal(json_array_size(peers), 3);
    assert_string_equal(peer(peers, 0), "n000");
    assert_string_equal(peer(peers, 2), "n003");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(peers, 0), "port")),
                     7703);
    assert_string_equal(json_string_value(json_object_get(json_array_get(peers, 1), "addr")),
                        "10.0.0.2");
    json_decref(peers);
    assert_null(br_probeset_peers(p, "n002", h, &h)); /* unchanged: nothing to send */
    br_probeset_destroy(&p);
    br_nodes_destroy(&nodes);
}

/* nodes with a place in the overlay probe each other at their overlay addresses
 * too; a node without one is probed directly only, and probes so */
static void test_overlay_paths_probed_too(void **state)
{
    (void)state;
    br_nodes_t *nodes = cluster(3, 0);
    int i = 0;
    for (br_node_t *n = br_nodes_first(nodes); n; n = n->next, i++)
        if (i < 2) { /* n000 and n001 */
            char addr[16];
            snprintf(addr, sizeof(addr), "10.213.0.%d", i + 1);
            json_object_set_new(n->info, "overlay", json_pack("{s:s, s:s}", "mode",
                                                              "userspace", "address", addr));
        }
    br_probeset_t *p = br_probeset_new(KEY);
    br_probeset_changed(p);
    br_probeset_refresh(p, nodes, 1000);
    uint64_t h;
    json_t *peers = br_probeset_peers(p, "n000", 0, &h);
    assert_int_equal(json_array_size(peers), 3); /* n001, n001/overlay, n002 */
    assert_string_equal(peer(peers, 1), "n001" BR_PROBE_OVERLAY_SUFFIX);
    assert_string_equal(json_string_value(json_object_get(json_array_get(peers, 1), "addr")),
                        "10.213.0.2");
    json_decref(peers);
    peers = br_probeset_peers(p, "n002", 0, &h); /* it has none: direct only */
    assert_int_equal(json_array_size(peers), 2);
    json_decref(peers);
    br_probeset_destroy(&p);
    br_nodes_destroy(&nodes);
}

static void test_large_cluster_bounded_after_own_name(void **state)
{
    (void)state;
    br_nodes_t *nodes = cluster(300, 1); /* 150 answer probes */
    br_probeset_t *p = br_probeset_new(KEY);
    br_probeset_changed(p);
    br_probeset_refresh(p, nodes, 1000);
    assert_int_equal(br_probeset_size(p), 150);
    uint64_t h;
    json_t *peers = br_probeset_peers(p, "n010", 0, &h);
    assert_int_equal(json_array_size(peers), BR_PROBE_PEERS_MAX);
    assert_string_equal(peer(peers, 0), "n012");
    json_decref(peers);
    peers = br_probeset_peers(p, "n296", 0, &h); /* wraps round */
    assert_string_equal(peer(peers, 0), "n298");
    assert_string_equal(peer(peers, 1), "n000");
    json_decref(peers);
    peers = br_probeset_peers(p, "n011", 0, &h); /* not in the set itself */
    assert_string_equal(peer(peers, 0), "n012");
    json_decref(peers);
    br_probeset_destroy(&p);
    br_nodes_destroy(&nodes);
}

static void test_rebuilt_when_changed_at_most_so_often(void **state)
{
    (void)state;
    br_nodes_t *nodes = cluster(3, 0);
    br_probeset_t *p = br_probeset_new(KEY);
    uint64_t h, h2;
    br_probeset_changed(p);
    br_probeset_refresh(p, nodes, 1000);
    json_decref(br_probeset_peers(p, "n000", 0, &h));
    br_nodes_first(nodes)->next->route_len = 0; /* n001 is lost */
    br_probeset_changed(p);
    assert_int_equal(br_probeset_wanted(p), 2);
    assert_int_equal(br_probeset_refresh(p, nodes, 1000 + BR_PROBESET_REBUILD_MS - 1), 1);
    assert_int_equal(br_probeset_refresh(p, nodes, 1000 + BR_PROBESET_REBUILD_MS), 2);
    json_t *peers = br_probeset_peers(p, "n000", h, &h2);
    assert_int_equal(json_array_size(peers), 1);
    assert_string_equal(peer(peers, 0), "n002");
    assert_true(h2 != h);
    json_decref(peers);
    br_probeset_destroy(&p);
    br_nodes_destroy(&nodes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_key_follows_from_the_secret),
        cmocka_unit_test(test_small_cluster_all_others_in_order),
        cmocka_unit_test(test_overlay_paths_probed_too),
        cmocka_unit_test(test_large_cluster_bounded_after_own_name),
        cmocka_unit_test(test_rebuilt_when_changed_at_most_so_often),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
