/* test_specparts.c - the pool of spec parts (coordinator/core/specparts.c): alike parts
 * of different specs become one, unlike ones stay apart, a spec's text is the
 * same after sharing, and parts no spec holds leave the pool as it grows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jsontext.h"
#include "specparts.h"

/* A spec as the coordinator holds one: name and command its own, the rest alike
 * unless gpus differs. */
static json_t *spec(const char *name, int gpus)
{
    json_t *s = json_pack("{s:s, s:s, s:s?, s:{}, s:{s:i, s:i, s:i, s:[], s:{}, s:s},"
                          " s:{s:i, s:[s]}, s:i, s:{s:i, s:i}, s:[]}",
                          "name", name, "command", "python3 train.py", "workdir", NULL,
                          "env", "resources", "nodes", 1, "gpus", gpus, "cpus", 4, "arch",
                          "labels", "spread", "site", "restart", "max", 3, "on",
                          "node_lost", "priority", 0, "preempt", "signal", 10, "grace",
                          120000, "after");
    assert_non_null(s);
    return s;
}

static void test_alike_parts_become_one(void **state)
{
    (void)state;
    br_specparts_t *p = br_specparts_new();
    assert_non_null(p);
    json_t *a = spec("a", 1), *b = spec("b", 1), *c = spec("c", 2);
    char *before[3] = {br_jsontext(a, 0, NULL), br_jsontext(b, 0, NULL),
                       br_jsontext(c, 0, NULL)};
    br_specparts_share(p, a);
    br_specparts_share(p, b);
    br_specparts_share(p, c);
    const char *parts[] = {"env", "resources", "restart", "preempt", "after"};
    for (size_t i = 0; i < sizeof(parts) / sizeof(*parts); i++)
        assert_ptr_equal(json_object_get(a, parts[i]), json_object_get(b, parts[i]));
    /* c's resources differ (gpus); its other parts are a's */
    assert_ptr_not_equal(json_object_get(a, "resources"), json_object_get(c, "resources"));
    assert_ptr_equal(json_object_get(a, "restart"), json_object_get(c, "restart"));
    /* scalars stay each spec's own */
    assert_string_equal(json_string_value(json_object_get(b, "name")), "b");
    /* the same text as before */
    json_t *all[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        char *after = br_jsontext(all[i], 0, NULL);
        assert_string_equal(after, before[i]);
        free(after);
        free(before[i]);
    }
    assert_int_equal(br_specparts_count(p), 6); /* 5 parts + c's resources */
    /* sharing again changes nothing */
    br_specparts_share(p, b);
    assert_int_equal(br_specparts_count(p), 6);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    br_specparts_destroy(&p);
    assert_null(p);
    br_specparts_share(NULL, NULL); /* (nothing to do, no crash) */
}

/* Parts whose specs are gone leave the pool once it grows: it never holds more
 * than about twice what the live specs need. */
static void test_parts_of_gone_specs_leave(void **state)
{
    (void)state;
    br_specparts_t *p = br_specparts_new();
    json_t *keep = spec("keep", 7);
    br_specparts_share(p, keep);
    for (int i = 0; i < 5000; i++) { /* each with resources of its own, then gone */
        json_t *s = spec("gone", 1000 + i);
        br_specparts_share(p, s);
        json_decref(s);
        assert_true(br_specparts_count(p) <= 600);
    }
    json_t *again = spec("again", 7);
    br_specparts_share(p, again);
    assert_ptr_equal(json_object_get(keep, "resources"), json_object_get(again, "resources"));
    json_decref(keep);
    json_decref(again);
    br_specparts_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alike_parts_become_one),
        cmocka_unit_test(test_parts_of_gone_specs_leave),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
