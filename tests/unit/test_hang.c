/* test_hang.c - hang detection's timer (agent/hang.h): it fires once, only after a
 * whole timeout without output, checkpoint or progress; any of them puts it off;
 * frozen time does not count; the reason says the timeout and the last step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "hang.h"

static void test_fires_after_timeout(void **state)
{
    (void)state;
    br_hang_t *h = br_hang_new(3000, 1000);
    assert_non_null(h);
    assert_int_equal(br_hang_timeout(h), 3000);
    assert_int_equal(br_hang_check(h, 1000), 0);
    assert_int_equal(br_hang_check(h, 3999), 0); /* 2999 ms quiet */
    assert_int_equal(br_hang_idle(h, 3999), 2999);
    assert_int_equal(br_hang_fired(h), 0);
    assert_int_equal(br_hang_check(h, 4000), 1); /* a whole timeout */
    assert_int_equal(br_hang_fired(h), 1);
    assert_int_equal(br_hang_check(h, 9000), 0); /* once */
    assert_int_equal(br_hang_fired(h), 1);
    br_hang_destroy(&h);
    assert_null(h);
    br_hang_destroy(&h);
    br_hang_destroy(NULL);
}

static void test_activity_puts_it_off(void **state)
{
    (void)state;
    static const br_hang_what_t kinds[] = {BR_HANG_OUTPUT, BR_HANG_CHECKPOINT,
                                           BR_HANG_PROGRESS};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        br_hang_t *h = br_hang_new(3000, 0);
        /* slow but steady: something every 2.5 s for a minute never fires */
        for (int64_t t = 2500; t <= 60000; t += 2500) {
            assert_int_equal(br_hang_check(h, t - 1), 0);
            br_hang_activity(h, kinds[k], -1, t);
            assert_int_equal(br_hang_check(h, t), 0);
        }
        assert_int_equal(br_hang_check(h, 62999), 0);
        assert_int_equal(br_hang_check(h, 63000), 1); /* then it stopped */
        br_hang_destroy(&h);
    }
}

static void test_clock_backwards(void **state)
{
    (void)state;
    br_hang_t *h = br_hang_new(1000, 5000);
    br_hang_activity(h, BR_HANG_OUTPUT, -1, 4000); /* older than the last: kept */
    assert_int_equal(br_hang_check(h, 5999), 0);
    assert_int_equal(br_hang_idle(h, 4000), 0);
    assert_int_equal(br_hang_check(h, 6000), 1);
    br_hang_destroy(&h);
    br_hang_activity(NULL, BR_HANG_OUTPUT, -1, 1); /* no detection: nothing */
    br_hang_frozen(NULL, 1, 1);
    assert_int_equal(br_hang_check(NULL, 1), 0);
    assert_int_equal(br_hang_fired(NULL), 0);
    assert_null(br_hang_new(0, 0));
    assert_null(br_hang_new(-5, 0));
}

static void test_frozen_time_does_not_count(void **state)
{
    (void)state;
    br_hang_t *h = br_hang_new(3000, 0);
    br_hang_frozen(h, 1, 2000);
    assert_int_equal(br_hang_check(h, 100000), 0); /* fenced: cannot hang */
    assert_int_equal(br_hang_idle(h, 100000), 0);
    br_hang_frozen(h, 1, 100000); /* said again: no change */
    br_hang_frozen(h, 0, 100000); /* thawed: a whole timeout again */
    br_hang_frozen(h, 0, 101000); /* said again: the clock is not reset */
    assert_int_equal(br_hang_check(h, 102999), 0);
    assert_int_equal(br_hang_check(h, 103000), 1);
    br_hang_destroy(&h);
}

static void test_reason(void **state)
{
    (void)state;
    char buf[200];
    br_hang_t *h = br_hang_new(15 * 60000, 0);
    assert_int_equal(br_hang_check(h, 15 * 60000), 1);
    assert_string_equal(br_hang_reason(h, 15 * 60000, buf, sizeof(buf)),
                        "hung: no output, checkpoint or progress for 15m");
    br_hang_destroy(&h);

    h = br_hang_new(3000, 0);
    br_hang_activity(h, BR_HANG_PROGRESS, 120, 1000);
    br_hang_activity(h, BR_HANG_PROGRESS, -1, 2000); /* no step: the last one stays */
    br_hang_activity(h, BR_HANG_OUTPUT, 7, 2500);    /* only progress gives steps */
    assert_int_equal(br_hang_check(h, 5499), 0);
    assert_int_equal(br_hang_check(h, 5500), 1);
    assert_string_equal(br_hang_reason(h, 5500, buf, sizeof(buf)),
                        "hung: no output, checkpoint or progress for 3s (last progress: "
                        "step 120, 4s ago)");
    /* a short buffer is cut, never overrun */
    char tiny[16];
    br_hang_reason(h, 5500, tiny, sizeof(tiny));
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
    br_hang_destroy(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fires_after_timeout),
        cmocka_unit_test(test_activity_puts_it_off),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_frozen_time_does_not_count),
        cmocka_unit_test(test_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
