/* test_watchers.c - who hears of what: a watcher of one job hears of that job's
 * events (and output when it asked), a watcher of every job hears of the jobs its
 * owner may see and of the nodes, news goes once per flush, watches expire, are
 * renewed, are bounded, and a gone client's watch is dropped. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "watchers.h"

typedef struct {
    char routes[16][8];
    int64_t jobs[16];
    int n;
    const char *gone; /* a route whose client went away */
} sent_t;

static int record(void *arg, const void *route, size_t len, int64_t job)
{
    sent_t *s = arg;
    if (s->gone && len == strlen(s->gone) && memcmp(route, s->gone, len) == 0)
        return -1;
    assert_true(s->n < 16 && len < 8);
    memcpy(s->routes[s->n], route, len);
    s->routes[s->n][len] = '\0';
    s->jobs[s->n++] = job;
    return 0;
}

static int heard(const sent_t *s, const char *route)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += strcmp(s->routes[i], route) == 0;
    return n;
}

static void test_who_hears_what(void **state)
{
    br_watchers_t *w = br_watchers_new();
    br_err_t err;
    br_watch_who_t admin = {1, 1}, alice = {0, 7}, bob = {0, 8};
    assert_int_equal(br_watchers_add(w, "A", 1, 0, 0, &admin, 0, &err), 0);
    assert_int_equal(br_watchers_add(w, "B", 1, 0, 0, &alice, 0, &err), 0);
    assert_int_equal(br_watchers_add(w, "C", 1, 5, 0, &bob, 0, &err), 0);
    assert_int_equal(br_watchers_add(w, "D", 1, 5, 1, &bob, 0, &err), 0);
    assert_int_equal(br_watchers_count(w), 4);
    assert_true(br_watchers_need_owner(w)); /* alice watches every job */

    sent_t s = {0};
    br_watchers_note(w, 5, 8, 0); /* an event of bob's job 5 */
    br_watchers_note(w, 5, 8, 0); /* twice in one wake: one news */
    br_watchers_flush(w, 1, record, &s);
    assert_int_equal(heard(&s, "A"), 1);
    assert_int_equal(heard(&s, "B"), 0); /* not alice's job */
    assert_int_equal(heard(&s, "C"), 1);
    assert_int_equal(heard(&s, "D"), 1);
    assert_int_equal(s.n, 3);

    memset(&s, 0, sizeof(s));
    br_watchers_note(w, 5, 8, 1); /* output of job 5: only who asked for logs */
    br_watchers_note(w, 9, 7, 0); /* an event of alice's job 9 */
    br_watchers_note(w, 0, -1, 0); /* a node's event */
    br_watchers_flush(w, 2, record, &s);
    assert_int_equal(heard(&s, "A"), 1);
    assert_int_equal(heard(&s, "B"), 1);
    assert_int_equal(heard(&s, "C"), 0);
    assert_int_equal(heard(&s, "D"), 1);

    memset(&s, 0, sizeof(s));
    br_watchers_flush(w, 3, record, &s); /* nothing new: nothing sent */
    assert_int_equal(s.n, 0);
    br_watchers_destroy(&w);
    assert_null(w);
}

static void test_expiry_renewal_and_gone(void **state)
{
    br_watchers_t *w = br_watchers_new();
    br_err_t err;
    br_watch_who_t admin = {1, 1};
    assert_int_equal(br_watchers_add(w, "A", 1, 3, 0, &admin, 0, &err), 0);
    assert_int_equal(br_watchers_add(w, "B", 1, 3, 0, &admin, 0, &err), 0);
    /* renewed (the same route and job): still one watcher, living longer */
    assert_int_equal(br_watchers_add(w, "A", 1, 3, 0, &admin, BR_WATCH_TTL_MS / 2, &err),
                     0);
    assert_int_equal(br_watchers_count(w), 2);
    sent_t s = {.gone = "B"};
    br_watchers_note(w, 3, 1, 0);
    br_watchers_flush(w, 1, record, &s);
    assert_int_equal(heard(&s, "A"), 1);
    assert_int_equal(br_watchers_count(w), 1); /* B's client is gone */
    br_watchers_flush(w, BR_WATCH_TTL_MS + 1, record, &s);
    assert_int_equal(br_watchers_count(w), 1); /* A was renewed */
    br_watchers_flush(w, BR_WATCH_TTL_MS * 2, record, &s);
    assert_int_equal(br_watchers_count(w), 0);
    br_watchers_destroy(&w);
}

static void test_bounds(void **state)
{
    br_watchers_t *w = br_watchers_new();
    br_err_t err;
    br_watch_who_t admin = {1, 1};
    char route[16];
    for (int i = 0; i < BR_WATCH_MAX; i++) {
        int n = snprintf(route, sizeof(route), "r%d", i);
        assert_int_equal(br_watchers_add(w, route, (size_t)n, 1, 0, &admin, 0, &err), 0);
    }
    assert_int_equal(br_watchers_add(w, "one more", 8, 1, 0, &admin, 0, &err), -1);
    assert_int_equal(err.errnum, EBUSY);
    assert_int_equal(br_watchers_add(w, "r0", 2, 1, 0, &admin, 5, &err), 0); /* renewal */
    char big[BR_WATCH_ROUTE_MAX + 1] = {0};
    assert_int_equal(br_watchers_add(w, big, sizeof(big), 1, 0, &admin, 0, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_watchers_add(w, "x", 1, -1, 0, &admin, 0, &err), -1);
    br_watchers_destroy(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_who_hears_what),
        cmocka_unit_test(test_expiry_renewal_and_gone),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
