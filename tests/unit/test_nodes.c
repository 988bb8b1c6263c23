/* test_nodes.c - the coordinator's node registry: lookups by name through its hash
 * index agree with the sorted list through adds, removals and re-adds; and the
 * modules' slots on a node, their data freed when replaced and when the node goes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nodes.h"

static br_node_t *add(br_nodes_t *nodes, const char *name)
{
    json_t *info = json_pack("{s:s, s:s, s:s}", "name", name, "pubkey",
                             "0123456789012345678901234567890123456789", "state", "ready");
    br_node_t *n = br_nodes_add(nodes, info);
    json_decref(info);
    return n;
}

static void test_find_add_remove(void **state)
{
    (void)state;
    br_nodes_t *nodes = br_nodes_new();
    assert_non_null(nodes);
    char name[32];
    for (int i = 0; i < 3000; i++) { /* grows the index several times */
        snprintf(name, sizeof(name), "n%04d", (i * 7919) % 3000);
        br_node_t *n = add(nodes, name);
        assert_non_null(n);
        assert_ptr_equal(add(nodes, name), n); /* adding again gives the same node */
    }
    for (int i = 0; i < 3000; i += 2) {
        snprintf(name, sizeof(name), "n%04d", i);
        br_nodes_remove(nodes, name);
    }
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof(name), "n%04d", i);
        br_node_t *n = br_nodes_find(nodes, name);
        if (i % 2) {
            assert_non_null(n);
            assert_string_equal(n->name, name);
        } else {
            assert_null(n);
        }
    }
    for (int round = 0; round < 3; round++) /* tombstones reused, never a full table */
        for (int i = 0; i < 3000; i += 2) {
            snprintf(name, sizeof(name), "n%04d", i);
            assert_non_null(add(nodes, name));
            br_nodes_remove(nodes, name);
            assert_null(br_nodes_find(nodes, name));
        }
    int count = 0;
    const char *last = "";
    for (br_node_t *n = br_nodes_first(nodes); n; n = n->next, count++) {
        assert_true(strcmp(last, n->name) < 0); /* the list stays sorted */
        assert_ptr_equal(br_nodes_find(nodes, n->name), n);
        last = n->name;
    }
    assert_int_equal(count, 1500);
    assert_null(br_nodes_find(nodes, "absent"));
    br_nodes_destroy(&nodes);
    assert_null(nodes);
}

static int freed;

static void count_free(void *data)
{
    freed++;
    free(data);
}

/* A module's slot on a node: one per module name, what it hangs there freed when
 * replaced, when the node is removed and when the registry goes. */
static void test_aux_slots(void **state)
{
    (void)state;
    int a = br_node_aux_slot("test-a"), b = br_node_aux_slot("test-b");
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(br_node_aux_slot("test-a"), a);
    assert_int_equal(br_node_aux_slot("test-b"), b);
    br_nodes_t *nodes = br_nodes_new();
    assert_non_null(nodes);
    br_node_t *x = add(nodes, "x"), *y = add(nodes, "y");
    assert_null(br_node_aux_get(x, a));
    freed = 0;
    br_node_aux_set(x, a, strdup("one"), count_free);
    br_node_aux_set(x, b, strdup("two"), count_free);
    br_node_aux_set(y, a, strdup("its own"), count_free);
    assert_string_equal(br_node_aux_get(x, a), "one");
    assert_string_equal(br_node_aux_get(x, b), "two");
    assert_string_equal(br_node_aux_get(y, a), "its own");
    assert_null(br_node_aux_get(y, b));
    br_node_aux_set(x, a, strdup("three"), count_free); /* the old one is freed */
    assert_int_equal(freed, 1);
    assert_string_equal(br_node_aux_get(x, a), "three");
    br_node_aux_set(x, b, NULL, NULL); /* cleared: freed */
    assert_int_equal(freed, 2);
    assert_null(br_node_aux_get(x, b));
    assert_null(br_node_aux_get(x, -1));
    assert_null(br_node_aux_get(x, BR_NODE_AUX_MAX));
    br_node_aux_set(x, BR_NODE_AUX_MAX, NULL, NULL); /* no such slot: nothing */
    br_nodes_remove(nodes, "x"); /* its data goes with it */
    assert_int_equal(freed, 3);
    x = add(nodes, "x"); /* added again: nothing of the old one */
    assert_null(br_node_aux_get(x, a));
    br_nodes_destroy(&nodes); /* y's too */
    assert_int_equal(freed, 4);
    /* the slots are few: once every one is taken, a new owner gets none */
    static char names[BR_NODE_AUX_MAX][16]; /* (kept by the registry as given) */
    int taken = 0;
    for (int i = 0; i < BR_NODE_AUX_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "test-%d", i);
        if (br_node_aux_slot(names[i]) >= 0)
            taken++;
    }
    assert_true(taken < BR_NODE_AUX_MAX); /* (test-a and test-b hold two) */
    assert_int_equal(br_node_aux_slot("one too many"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_add_remove),
        cmocka_unit_test(test_aux_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
