/* test_stages.c - the trees staged on a node while they are uploaded
 * (coordinator/core/stages.c) on a fake clock: one stage per user, tree and node,
 * taken up again by a retry; kept while the upload goes on, ended once it stops or
 * its node goes; a held tree remembered a while for the placement; the oldest
 * dropped past BR_STAGE_MAX. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "stages.h"

#define T1 "1111111111111111111111111111111111111111111111111111111111111111"
#define T2 "2222222222222222222222222222222222222222222222222222222222222222"

static int gone_node(void *arg, const char *name)
{
    return strcmp(name, (const char *)arg) != 0;
}

static void test_one_stage_per_upload(void **state)
{
    (void)state;
    br_stages_t *s = br_stages_new();
    assert_non_null(s);
    json_t *files = json_pack("{s:b}", "aa", 1);
    int fresh;
    br_stage_t *a = br_stages_add(s, 7, "node-1", T1, files, 1000, &fresh);
    assert_non_null(a);
    assert_int_equal(fresh, 1);
    int64_t id = a->id;
    br_stage_t *b = br_stages_add(s, 7, "node-1", T1, files, 2000, &fresh); /* a retry */
    assert_int_equal(fresh, 0);
    assert_int_equal(b->id, id);
    assert_int_equal(b->last_ms, 2000);
    br_stages_add(s, 8, "node-2", T1, files, 2000, &fresh); /* another user's */
    assert_int_equal(fresh, 1);
    assert_non_null(br_stages_find(s, id));
    assert_null(br_stages_find(s, 999));
    assert_string_equal(br_stages_node_of(s, T1), "node-1");
    assert_null(br_stages_node_of(s, T2));
    assert_true(json_object_get(br_stages_find(s, id)->files, "aa") != NULL);
    json_decref(files);
    br_stages_destroy(&s);
    assert_null(s);
}

static void test_ends_when_the_upload_stops_or_the_node_goes(void **state)
{
    (void)state;
    br_stages_t *s = br_stages_new();
    int fresh;
    int64_t t = 10000;
    int64_t a = br_stages_add(s, 7, "node-1", T1, NULL, t, &fresh)->id;
    int64_t b = br_stages_add(s, 8, "node-2", T2, NULL, t, &fresh)->id;
    br_stages_touch(s, 7, t + BR_STAGE_IDLE_MS - 1); /* a file of user 7's stored */
    br_stages_expire(s, t + BR_STAGE_IDLE_MS, NULL, NULL);
    assert_non_null(br_stages_find(s, a));
    assert_null(br_stages_find(s, b)); /* user 8 stored nothing for a minute */
    br_stages_expire(s, t + BR_STAGE_IDLE_MS, gone_node, (void *)"node-1");
    assert_null(br_stages_find(s, a)); /* its node went */
    br_stages_destroy(&s);
}

static void test_a_held_tree_is_remembered_a_while(void **state)
{
    (void)state;
    br_stages_t *s = br_stages_new();
    int fresh;
    int64_t t = 10000;
    int64_t a = br_stages_add(s, 7, "node-1", T1, NULL, t, &fresh)->id;
    br_stages_held(s, "node-2", T1, t + 5); /* another node's: not this stage */
    assert_int_equal(br_stages_find(s, a)->held_ms, 0);
    br_stages_held(s, "node-1", T1, t + 10);
    assert_int_equal(br_stages_find(s, a)->held_ms, t + 10);
    br_stages_touch(s, 7, t + 20); /* held: the upload's pace no longer matters */
    br_stages_expire(s, t + 10 + BR_STAGE_KEEP_MS - 1, NULL, NULL);
    assert_string_equal(br_stages_node_of(s, T1), "node-1"); /* still preferred */
    br_stages_add(s, 7, "node-1", T1, NULL, t + 30, &fresh); /* held: a new stage */
    assert_int_equal(fresh, 1);
    br_stages_expire(s, t + 10 + BR_STAGE_KEEP_MS, NULL, NULL);
    assert_null(br_stages_find(s, a));
    br_stages_destroy(&s);
}

static void test_the_oldest_goes_past_the_most(void **state)
{
    (void)state;
    br_stages_t *s = br_stages_new();
    int fresh;
    char mhash[80];
    int64_t first = 0;
    for (int i = 0; i <= BR_STAGE_MAX; i++) {
        snprintf(mhash, sizeof(mhash), "%064d", i);
        br_stage_t *x = br_stages_add(s, 7, "node-1", mhash, NULL, 1000 + i, &fresh);
        assert_non_null(x);
        if (i == 0)
            first = x->id;
    }
    assert_null(br_stages_find(s, first));
    snprintf(mhash, sizeof(mhash), "%064d", BR_STAGE_MAX);
    assert_string_equal(br_stages_node_of(s, mhash), "node-1");
    br_stages_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_stage_per_upload),
        cmocka_unit_test(test_ends_when_the_upload_stops_or_the_node_goes),
        cmocka_unit_test(test_a_held_tree_is_remembered_a_while),
        cmocka_unit_test(test_the_oldest_goes_past_the_most),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
