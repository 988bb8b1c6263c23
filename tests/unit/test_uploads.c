/* test_uploads.c - the ledger of stored files nothing refers to yet
 * (coordinator/core/uploads.c) on a fake clock: a file is charged once however
 * often it is written to, leaves when referenced or a day after its last write,
 * another user's holding of it is told, and a user's referenced bytes are
 * remembered only briefly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "uploads.h"

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"

static void test_charged_once_and_settled(void **state)
{
    (void)state;
    br_uploads_t *u = br_uploads_new();
    assert_non_null(u);
    assert_int_equal(br_uploads_touch(u, 7, H1, 1000), 0);
    assert_int_equal(br_uploads_add(u, 7, H1, 500, 1000), 0);
    assert_int_equal(br_uploads_add(u, 7, H1, 500, 2000), 0); /* again: not twice */
    assert_int_equal(br_uploads_add(u, 7, H2, 300, 2000), 0);
    assert_int_equal(br_uploads_add(u, 8, H2, 300, 2000), 0); /* another user's own */
    assert_int_equal(br_uploads_pending(u, 7), 800);
    assert_int_equal(br_uploads_pending(u, 8), 300);
    assert_int_equal(br_uploads_size(u, 7, H1), 500);
    /* whether another user's upload holds a file (a refused one's listing stays) */
    assert_false(br_uploads_others(u, 7, H1));
    assert_true(br_uploads_others(u, 8, H1));
    assert_true(br_uploads_others(u, 0, H1)); /* (not a user: any holds it) */
    assert_true(br_uploads_others(u, 7, H2));
    assert_false(br_uploads_others(NULL, 7, H1));
    assert_int_equal(br_uploads_touch(u, 7, H1, 3000), 1);
    br_uploads_settle(u, 7, H1);
    assert_false(br_uploads_others(u, 8, H1)); /* referenced now: in no ledger */
    assert_int_equal(br_uploads_pending(u, 7), 300);
    assert_int_equal(br_uploads_size(u, 7, H1), 0);
    br_uploads_settle(u, 7, H1); /* twice: nothing more */
    br_uploads_settle(u, 9, H1); /* a user with none */
    assert_int_equal(br_uploads_pending(u, 7), 300);
    assert_int_equal(br_uploads_pending(u, 9), 0);
    br_uploads_destroy(&u);
    assert_null(u);
}

static void test_expires_a_day_after_the_last_write(void **state)
{
    (void)state;
    br_uploads_t *u = br_uploads_new();
    int64_t t = 10000;
    br_uploads_add(u, 7, H1, 500, t);
    br_uploads_add(u, 7, H2, 300, t);
    br_uploads_touch(u, 7, H2, t + 3600 * 1000); /* still being written an hour on */
    json_t *gone = br_uploads_expire(u, t + BR_UPLOADS_TTL_MS - 1);
    assert_int_equal(json_array_size(gone), 0);
    json_decref(gone);
    gone = br_uploads_expire(u, t + BR_UPLOADS_TTL_MS);
    assert_int_equal(json_array_size(gone), 1);
    assert_string_equal(json_string_value(json_array_get(gone, 0)), H1);
    json_decref(gone);
    assert_int_equal(br_uploads_pending(u, 7), 300);
    gone = br_uploads_expire(u, t + 3600 * 1000 + BR_UPLOADS_TTL_MS);
    assert_int_equal(json_array_size(gone), 1);
    json_decref(gone);
    assert_int_equal(br_uploads_pending(u, 7), 0);
    br_uploads_destroy(&u);
}

static void test_used_is_remembered_briefly(void **state)
{
    (void)state;
    br_uploads_t *u = br_uploads_new();
    assert_int_equal(br_uploads_used(u, 7, 1000), -1);
    br_uploads_set_used(u, 7, 4096, 1000);
    assert_int_equal(br_uploads_used(u, 7, 1000 + BR_UPLOADS_USED_MS - 1), 4096);
    assert_int_equal(br_uploads_used(u, 7, 1000 + BR_UPLOADS_USED_MS), -1);
    br_uploads_set_used(u, 7, 4096, 5000);
    br_uploads_add(u, 7, H1, 10, 5000);
    br_uploads_settle(u, 7, H1); /* referenced now: counted there, so asked again */
    assert_int_equal(br_uploads_used(u, 7, 5001), -1);
    br_uploads_destroy(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_charged_once_and_settled),
        cmocka_unit_test(test_expires_a_day_after_the_last_write),
        cmocka_unit_test(test_used_is_remembered_briefly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
