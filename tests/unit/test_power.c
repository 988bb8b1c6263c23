/* test_power.c - a node's mean draw and cost per hour (agent/power.c): readings
 * weighted by the time they stand for, the baseline added, intervals that start
 * afresh at each take, and the rate's arithmetic. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "power.h"

static void test_cost(void **state)
{
    (void)state;
    static const struct {
        double fixed, price, watts, want;
    } cases[] = {
        {0.5, 0.30, 350, 0.605}, /* 0.5 + 0.30 * 350 W / 1000 */
        {0.5, 0.30, 50, 0.515},  /* idle only */
        {0, 0.25, 1000, 0.25},   /* one kW for an hour at 0.25 per kWh */
        {1.2, 0, 700, 1.2},      /* no power price: the fixed rate alone */
        {0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_true(fabs(br_power_cost(cases[i].fixed, cases[i].price, cases[i].watts) -
                         cases[i].want) < 1e-12);
}

static void test_no_readings(void **state)
{
    (void)state;
    br_power_t *p = br_power_new(50);
    assert_non_null(p);
    assert_true(br_power_take(p, 1000) == 50); /* no NVML: the baseline alone */
    assert_true(br_power_take(p, 2000) == 50);
    br_power_destroy(&p);
    assert_null(p);
    br_power_destroy(&p); /* NULL is fine */
    p = br_power_new(-5); /* a negative baseline counts as none */
    assert_true(br_power_take(p, 0) == 0);
    br_power_destroy(&p);
}

static void test_mean(void **state)
{
    (void)state;
    br_power_t *p = br_power_new(50);
    /* the first reading opens the interval; alone, it is the mean */
    br_power_sample(p, 1000, 300);
    assert_true(br_power_take(p, 1000) == 350);
    /* a reading just before each take, once a second: each take is that reading */
    br_power_sample(p, 2000, 200);
    assert_true(br_power_take(p, 2000) == 250);
    /* readings stand for the time since the one before: 100 W for 250 ms, then
     * 300 W for 750 ms -> 250 W, plus the baseline */
    br_power_sample(p, 2250, 100);
    br_power_sample(p, 3000, 300);
    assert_true(fabs(br_power_take(p, 3000) - 300) < 1e-9);
    /* the last reading stands until the next: a take with none in between */
    assert_true(br_power_take(p, 3500) == 350);
    /* a take halfway between readings: 400 W for 500 ms, then 400 W held */
    br_power_sample(p, 4000, 400);
    assert_true(fabs(br_power_take(p, 4500) - 450) < 1e-9);
    /* the next interval starts at that take: 0 W for 500 ms, held for 500 ms */
    br_power_sample(p, 5000, 0);
    assert_true(fabs(br_power_take(p, 5500) - 50) < 1e-9);
    /* nonsense readings count as nothing */
    br_power_sample(p, 6500, NAN);
    assert_true(fabs(br_power_take(p, 6500) - 50) < 1e-9);
    br_power_sample(p, 7500, -10);
    assert_true(fabs(br_power_take(p, 7500) - 50) < 1e-9);
    br_power_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_no_readings),
        cmocka_unit_test(test_mean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
