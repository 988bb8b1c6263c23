/* test_treefetch.c - a starting job's tree fetches as job show lists them
 * (coordinator/core/treefetch.h): each from its order on, with what it is and
 * where it is read from; how far, as the node's heartbeat says; none once the job
 * no longer starts; a placement anew forgets the last one's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "treefetch.h"

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"

static br_job_t *starting_job(void)
{
    json_t *r = json_pack("{s:I, s:s, s:s, s:s, s:s, s:i, s:I, s:{s:s}, s:I, s:I, s:I, s:[]}",
                          "id", (json_int_t)5, "name", "train", "kind", "job", "owner", "ann",
                          "state", "starting", "attempt", 1, "owner_id", (json_int_t)7,
                          "spec", "command", "true", "priority", (json_int_t)3, "time_limit",
                          (json_int_t)60000, "submitted", (json_int_t)1000, "nodes");
    br_err_t err;
    br_job_t *j = br_job_from_row(r, &err);
    json_decref(r);
    assert_non_null(j);
    assert_int_equal(j->state, BR_JOB_STARTING);
    return j;
}

/* The entry of list to node of kind, or NULL. */
static json_t *entry(json_t *list, const char *node, const char *kind)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
        if (strcmp(json_string_value(json_object_get(e, "to")), node) == 0 &&
            strcmp(json_string_value(json_object_get(e, "kind")), kind) == 0)
            return e;
    return NULL;
}

static void test_fetches_from_order_to_start(void **state)
{
    (void)state;
    br_job_t *j = starting_job();
    json_t *none = br_treefetch_list(j, 0);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    br_treefetch_ordered(j, "a", "code", NULL, H1, 600, NULL, 1000);
    br_treefetch_ordered(j, "b", "code", NULL, H1, 600, "a", 1000);
    br_treefetch_ordered(j, "a", "data", "ann/w:v1", H2, 4000, NULL, 1000);
    /* a heartbeat: b holds 300 bytes of the code, 500 ms after its order */
    assert_int_equal(br_treefetch_progress(j, "b", H1, 300, 1500), 1);
    /* not one of its fetches: a checkpoint's copy, another node */
    assert_int_equal(br_treefetch_progress(j, "b", H2, 10, 1500), 0);
    assert_int_equal(br_treefetch_progress(j, "c", H1, 10, 1500), 0);
    json_t *l = br_treefetch_list(j, 2000);
    assert_int_equal(json_array_size(l), 3);
    json_t *ac = entry(l, "a", "code"), *bc = entry(l, "b", "code"), *ad = entry(l, "a", "data");
    assert_string_equal(json_string_value(json_object_get(ac, "from")), "the coordinator");
    assert_string_equal(json_string_value(json_object_get(bc, "from")), "a");
    assert_int_equal(json_integer_value(json_object_get(bc, "done")), 300);
    assert_int_equal(json_integer_value(json_object_get(bc, "bytes")), 600);
    assert_true(json_real_value(json_object_get(bc, "rate")) > 599.0 &&
                json_real_value(json_object_get(bc, "rate")) < 601.0);
    assert_null(json_object_get(ac, "rate")); /* (nothing heard of it yet) */
    assert_string_equal(json_string_value(json_object_get(ad, "name")), "ann/w:v1");
    assert_true(json_real_value(json_object_get(ad, "seconds")) > 0.99);
    json_decref(l);
    /* started: none listed; placed anew: the last placement's are forgotten */
    j->state = BR_JOB_RUNNING;
    l = br_treefetch_list(j, 2000);
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
    assert_int_equal(br_treefetch_progress(j, "b", H1, 400, 2500), 0);
    j->state = BR_JOB_STARTING;
    br_treefetch_forget(j);
    br_treefetch_ordered(j, "c", "code", NULL, H1, 600, NULL, 3000);
    l = br_treefetch_list(j, 3000);
    assert_int_equal(json_array_size(l), 1);
    assert_non_null(entry(l, "c", "code"));
    json_decref(l);
    br_job_destroy(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fetches_from_order_to_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
