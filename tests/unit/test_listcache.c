/* test_listcache.c - manifests kept by listing: found only for the same listing and
 * summary, shared not copied, the least recently used going first, and let go once
 * unused for a minute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "listcache.h"

static json_t *summary(int files)
{
    return json_pack("{s:s, s:s, s:i, s:i}", "hash", "ab", "root", "dir", "files", files,
                     "bytes", 10);
}

static void test_found_for_its_listing_and_summary_only(void **state)
{
    (void)state;
    br_listcache_t *lc = br_listcache_new();
    json_t *sum = summary(1), *other = summary(2), *m = json_object();
    assert_null(br_listcache_get(lc, "aa", sum, 0));
    br_listcache_put(lc, "aa", sum, m, 0);
    json_t *got = br_listcache_get(lc, "aa", sum, 10);
    assert_ptr_equal(got, m); /* the same one, a reference more */
    assert_int_equal(m->refcount, 3);
    json_decref(got);
    assert_null(br_listcache_get(lc, "aa", other, 10)); /* another summary */
    assert_null(br_listcache_get(lc, "bb", sum, 10));   /* another listing */
    br_listcache_destroy(&lc);
    assert_null(lc);
    assert_int_equal(m->refcount, 1); /* what it held, let go */
    json_decref(m);
    json_decref(sum);
    json_decref(other);
}

static void test_least_recently_used_goes_and_unused_expire(void **state)
{
    (void)state;
    br_listcache_t *lc = br_listcache_new();
    json_t *sum = summary(1), *m[BR_LISTCACHE_N + 1];
    char name[BR_LISTCACHE_N + 1][8];
    for (int i = 0; i <= BR_LISTCACHE_N; i++) {
        snprintf(name[i], sizeof(name[i]), "l%d", i);
        m[i] = json_integer(i);
    }
    for (int i = 0; i < BR_LISTCACHE_N; i++)
        br_listcache_put(lc, name[i], sum, m[i], 100 + i);
    json_decref(br_listcache_get(lc, name[0], sum, 200)); /* l0 used last: l1 goes */
    br_listcache_put(lc, name[BR_LISTCACHE_N], sum, m[BR_LISTCACHE_N], 201);
    assert_null(br_listcache_get(lc, name[1], sum, 202));
    for (int i = 0; i <= BR_LISTCACHE_N; i++) {
        if (i == 1)
            continue;
        json_t *got = br_listcache_get(lc, name[i], sum, 203);
        assert_ptr_equal(got, m[i]);
        json_decref(got);
    }
    br_listcache_expire(lc, 203 + BR_LISTCACHE_KEEP_MS - 1); /* not yet */
    json_t *got = br_listcache_get(lc, name[0], sum, 203 + BR_LISTCACHE_KEEP_MS - 1);
    assert_non_null(got);
    json_decref(got);
    br_listcache_expire(lc, 203 + 2 * BR_LISTCACHE_KEEP_MS);
    for (int i = 0; i <= BR_LISTCACHE_N; i++) {
        assert_null(br_listcache_get(lc, name[i], sum, 0));
        assert_int_equal(m[i]->refcount, 1);
        json_decref(m[i]);
    }
    br_listcache_destroy(&lc);
    json_decref(sum);
}

/* A manifest kept after a slot that expired is found, and putting it again renews
 * it rather than keeping it twice; putting the one kept is safe. */
static void test_found_past_a_free_slot_and_kept_once(void **state)
{
    (void)state;
    br_listcache_t *lc = br_listcache_new();
    json_t *sum = summary(1), *a = json_object(), *b = json_object();
    br_listcache_put(lc, "aa", sum, a, 0);
    br_listcache_put(lc, "bb", sum, b, BR_LISTCACHE_KEEP_MS);
    br_listcache_expire(lc, BR_LISTCACHE_KEEP_MS + 10); /* a goes: its slot is free */
    assert_int_equal(a->refcount, 1);
    br_listcache_put(lc, "bb", sum, b, BR_LISTCACHE_KEEP_MS + 20);
    assert_int_equal(b->refcount, 2); /* ours and the cache's: not kept twice */
    json_t *got = br_listcache_get(lc, "bb", sum, BR_LISTCACHE_KEEP_MS + 30);
    assert_ptr_equal(got, b);
    br_listcache_put(lc, "bb", sum, got, BR_LISTCACHE_KEEP_MS + 40); /* the one kept */
    json_decref(got);
    assert_int_equal(b->refcount, 2);
    br_listcache_destroy(&lc);
    assert_int_equal(b->refcount, 1);
    json_decref(a);
    json_decref(b);
    json_decref(sum);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_found_for_its_listing_and_summary_only),
        cmocka_unit_test(test_least_recently_used_goes_and_unused_expire),
        cmocka_unit_test(test_found_past_a_free_slot_and_kept_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
