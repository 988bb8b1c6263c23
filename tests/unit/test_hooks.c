/* test_hooks.c - the hook registry (hooks.h): hooks run in the order added, each
 * with its own context; at BR_HOOK_ATTEMPT_ENDED the first that takes the attempt
 * over is the last to run; a point without hooks, or a NULL argument, is fine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "hooks.h"

static char seen[16];

static void note(struct br_coord *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    (void)a;
    strncat(seen, ctx, sizeof(seen) - strlen(seen) - 1);
}

static void take_over(struct br_coord *c, br_hook_arg_t *a, void *ctx)
{
    note(c, a, ctx);
    a->restart = 1;
    a->delay_ms = 250;
}

static void test_order_and_take_over(void **state)
{
    (void)state;
    br_hooks_t *h = br_hooks_new();
    assert_non_null(h);
    assert_int_equal(br_hooks_add(h, BR_HOOK_TICK, note, "a"), 0);
    assert_int_equal(br_hooks_add(h, BR_HOOK_TICK, note, "b"), 0);
    assert_int_equal(br_hooks_add(h, BR_HOOK_ATTEMPT_ENDED, note, "x"), 0);
    assert_int_equal(br_hooks_add(h, BR_HOOK_ATTEMPT_ENDED, take_over, "y"), 0);
    assert_int_equal(br_hooks_add(h, BR_HOOK_ATTEMPT_ENDED, note, "z"), 0);
    assert_int_equal(br_hooks_add(h, BR_HOOKS, note, "bad"), -1);
    assert_int_equal(br_hooks_add(h, BR_HOOK_TICK, NULL, "bad"), -1);
    seen[0] = '\0';
    br_hooks_run(NULL, h, BR_HOOK_TICK, NULL);
    br_hooks_run(NULL, h, BR_HOOK_TICK, NULL);
    assert_string_equal(seen, "abab");
    seen[0] = '\0';
    br_hook_arg_t a = {0};
    br_hooks_run(NULL, h, BR_HOOK_ATTEMPT_ENDED, &a);
    assert_string_equal(seen, "xy"); /* z never hears of it */
    assert_int_equal(a.restart, 1);
    assert_int_equal(a.delay_ms, 250);
    seen[0] = '\0';
    br_hooks_run(NULL, h, BR_HOOK_NODE_LOST, NULL); /* none registered */
    br_hooks_run(NULL, NULL, BR_HOOK_TICK, NULL);
    assert_string_equal(seen, "");
    br_hooks_destroy(&h);
    assert_null(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_take_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
