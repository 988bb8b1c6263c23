/* test_nodes.c - the coordinator's node registry: lookups by name through its hash
 * index agree with the sorted list through adds, removals and re-adds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_add_remove),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
