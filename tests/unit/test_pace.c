/* test_pace.c - the coordinator's pace (coordinator/core/pace.c) on a fake clock: a
 * loop that reads fewer than BR_PACE_BUSY messages a second reads at once; one
 * that read more in the last whole second lets messages gather, unless its last
 * wake read a backlog; quiet again (or a gap with nothing), it reads at once
 * again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pace.h"

#define S 1000000 /* a second in us */

static void test_quiet_reads_at_once(void **state)
{
    (void)state;
    br_pace_t *p = br_pace_new();
    assert_non_null(p);
    int64_t t = 5 * S;
    assert_int_equal(br_pace_gather_us(p, t), 0);
    for (int i = 0; i < BR_PACE_BUSY; i++) /* exactly the limit: not busy */
        br_pace_count(p, t + i * (S / BR_PACE_BUSY) / 2, 1);
    assert_int_equal(br_pace_gather_us(p, t + S + 1), 0);
    br_pace_destroy(&p);
    assert_null(p);
}

static void test_busy_gathers_until_quiet(void **state)
{
    (void)state;
    br_pace_t *p = br_pace_new();
    int64_t t = 5 * S;
    br_pace_count(p, t, 1); /* the window starts */
    for (int i = 0; i < 10; i++)
        br_pace_count(p, t + i * 1000, BR_PACE_BUSY / 5);
    assert_int_equal(br_pace_gather_us(p, t + S / 2), 0); /* the second is not over */
    assert_int_equal(br_pace_gather_us(p, t + S), BR_PACE_GATHER_US);
    br_pace_count(p, t + S + 10, 50); /* a quiet second follows */
    assert_int_equal(br_pace_gather_us(p, t + S + S / 2), BR_PACE_GATHER_US);
    assert_int_equal(br_pace_gather_us(p, t + 2 * S + 1), 0);
    br_pace_destroy(&p);
}

static void test_gap_is_quiet(void **state)
{
    (void)state;
    br_pace_t *p = br_pace_new();
    int64_t t = 5 * S;
    br_pace_count(p, t, 1);
    br_pace_count(p, t + 1000, 2 * BR_PACE_BUSY);
    /* nothing for more than two seconds: the second before now brought nothing */
    assert_int_equal(br_pace_gather_us(p, t + 3 * S), 0);
    br_pace_destroy(&p);
}

/* Busy, a wake that read a backlog is followed by one that reads at once (the
 * messages are waiting already); one that read a few, by one that gathers. */
static void test_backlog_reads_at_once(void **state)
{
    (void)state;
    br_pace_t *p = br_pace_new();
    int64_t t = 5 * S;
    br_pace_count(p, t, 2 * BR_PACE_BUSY);
    assert_int_equal(br_pace_gather_us(p, t + S), BR_PACE_GATHER_US);
    br_pace_woke(p, BR_PACE_BACKLOG);
    assert_int_equal(br_pace_gather_us(p, t + S + 10), 0);
    br_pace_woke(p, BR_PACE_BACKLOG - 1);
    assert_int_equal(br_pace_gather_us(p, t + S + 20), BR_PACE_GATHER_US);
    br_pace_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quiet_reads_at_once),
        cmocka_unit_test(test_busy_gathers_until_quiet),
        cmocka_unit_test(test_gap_is_quiet),
        cmocka_unit_test(test_backlog_reads_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
