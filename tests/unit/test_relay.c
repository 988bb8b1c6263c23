/* test_relay.c - the stream relay's bounds: so many shells and forwards a user, so
 * many in all, each refusal naming its bound, and a slot given back once the relay's
 * thread has closed a stream that was cut. A real relay, on a loopback port. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cred.h"
#include "relay.h"
#include "util.h"

#define PER_USER 2
#define TOTAL 3

static int grant(br_relay_t *r, int64_t user, int64_t job, br_err_t *err)
{
    br_relay_grant_t g = {.user_id = user, .job = job};
    snprintf(g.cli_key, sizeof(g.cli_key), "%040lld", (long long)user);
    return br_relay_open(r, &g, err);
}

static void test_bounds_per_user_and_in_all(void **state)
{
    (void)state;
    br_err_t err;
    br_relay_t *r = br_relay_new("tcp://127.0.0.1:0", PER_USER, TOTAL, &err);
    assert_non_null(r);
    assert_true(br_relay_port(r) > 0);

    assert_int_equal(grant(r, 1, 10, &err), 0);
    assert_int_equal(grant(r, 1, 10, &err), 0);
    assert_int_equal(grant(r, 1, 10, &err), -1); /* the user's third */
    assert_int_equal(err.errnum, EBUSY);
    assert_non_null(strstr(err.text, "2 shells and forwards are open for this user"));
    assert_int_equal(grant(r, 2, 20, &err), 0);   /* another user's: the last slot */
    assert_int_equal(grant(r, 3, 30, &err), -1); /* a third user: none left in all */
    assert_int_equal(err.errnum, EBUSY);
    assert_non_null(strstr(err.text, "3 shells and forwards are open, the most the "
                                     "coordinator carries"));
    assert_int_equal(br_relay_job_streams(r, 10), 2);
    assert_int_equal(br_relay_job_streams(r, 20), 1);

    /* user 1 removed: both their streams are closed by the relay's thread, and
     * their slots are given back */
    assert_int_equal(br_relay_cut(r, 1, NULL, "the user was removed"), 2);
    int64_t deadline = br_mono_ms() + 10000;
    while (br_relay_job_streams(r, 10) > 0 && br_mono_ms() < deadline)
        usleep(5000);
    assert_int_equal(br_relay_job_streams(r, 10), 0);
    assert_true(br_relay_job_closed(r, 10) > 0);
    assert_int_equal(grant(r, 3, 30, &err), 0);
    assert_int_equal(grant(r, 3, 30, &err), 0);
    assert_int_equal(grant(r, 2, 20, &err), -1); /* in all again */
    assert_non_null(strstr(err.text, "the most the coordinator carries"));
    br_relay_destroy(&r);
    assert_null(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounds_per_user_and_in_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
