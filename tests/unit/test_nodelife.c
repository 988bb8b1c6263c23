/* test_nodelife.c - when the coordinator answers a heartbeat (nodelife.h,
 * br_nodelife_answer_due): every one at the default timing and whenever the fence
 * time is short next to the interval; with a longer node timeout, fewer, but never
 * so few that an agent goes a third of its fence time without one, however its
 * heartbeats are late or early. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "nodelife.h"

/* Heartbeats of node n every hb_ms for the given time, each up to jitter ms late
 * or early (a fixed pseudo-random walk), answered as the coordinator would: how
 * many were answered, how many were sent in *beats (may be NULL), and the longest
 * stretch without an answer in *gap. */
static int run(br_coord_t *c, br_node_t *n, int64_t for_ms, int64_t jitter, int64_t *gap,
               int *beats)
{
    unsigned seed = 7;
    int answered = 0, sent = 0;
    int64_t t = 1000000;
    n->answered_at = t; /* its hello */
    *gap = 0;
    for (int64_t end = t + for_ms; t < end;) {
        seed = seed * 1103515245u + 12345u;
        int64_t step = c->cfg.heartbeat_ms + (jitter ? (int64_t)(seed >> 8) % (2 * jitter + 1) -
                                                          jitter
                                                    : 0);
        t += step;
        sent++;
        if (br_nodelife_answer_due(c, n, t)) {
            if (t - n->answered_at > *gap)
                *gap = t - n->answered_at;
            n->answered_at = t;
            answered++;
        }
    }
    if (beats)
        *beats = sent;
    return answered;
}

static void timing(br_coord_t *c, int64_t hb, int64_t node_timeout)
{
    c->cfg.heartbeat_ms = hb;
    c->cfg.node_timeout_ms = node_timeout;
}

static void test_default_answers_every_heartbeat(void **state)
{
    (void)state;
    br_coord_t c = {0};
    br_node_t n = {0};
    int64_t gap;
    timing(&c, 1000, 5000); /* the defaults: a fence time of 3 s */
    int beats;
    assert_int_equal(run(&c, &n, 60000, 0, &gap, &beats), 60);
    assert_int_equal(beats, 60);
    int answered = run(&c, &n, 60000, 300, &gap, &beats); /* early or late */
    assert_int_equal(answered, beats);
    assert_true(br_nodelife_answer_due(&c, &n, n.answered_at + 1)); /* even at once */
    timing(&c, 200, 2000); /* short timeouts, as the fencing tests use */
    answered = run(&c, &n, 20000, 40, &gap, &beats);
    assert_int_equal(answered, beats);
}

static void test_longer_timeout_fewer_answers(void **state)
{
    (void)state;
    br_coord_t c = {0};
    br_node_t n = {0};
    int64_t gap;
    timing(&c, 1000, 120000); /* fence 72 s: a third is 24 s */
    assert_false(br_nodelife_answer_due(&c, &n, n.answered_at + 1000));
    assert_false(br_nodelife_answer_due(&c, &n, n.answered_at + 22000));
    assert_true(br_nodelife_answer_due(&c, &n, n.answered_at + 23000));
    int answered = run(&c, &n, 600000, 0, &gap, NULL);
    assert_true(answered >= 25 && answered <= 27); /* one in 23 */
    assert_true(gap <= 24000);
    timing(&c, 250, 10000); /* the integration tests' timing: fence 6 s */
    answered = run(&c, &n, 60000, 0, &gap, NULL);
    assert_true(answered >= 30 && answered <= 40);
}

/* Whatever the timing and however irregular the heartbeats (up to 40 % of an
 * interval early or late), an agent never goes a third of its fence time plus
 * one interval's lateness without an answer. */
static void test_never_too_long_without_one(void **state)
{
    (void)state;
    br_coord_t c = {0};
    br_node_t n = {0};
    const int64_t hbs[] = {100, 250, 500, 1000, 2000};
    const int64_t timeouts[] = {1000, 2000, 5000, 10000, 30000, 120000, 600000};
    for (size_t i = 0; i < sizeof(hbs) / sizeof(hbs[0]); i++)
        for (size_t k = 0; k < sizeof(timeouts) / sizeof(timeouts[0]); k++) {
            int64_t hb = hbs[i], gap;
            timing(&c, hb, timeouts[k]);
            int64_t third = timeouts[k] * 3 / 5 / 3, jitter = hb * 2 / 5;
            int64_t span = 200 * hb > 10 * third ? 200 * hb : 10 * third;
            int answered = run(&c, &n, span, jitter, &gap, NULL);
            assert_true(answered > 0);
            if (gap > (third > hb ? third : hb) + jitter) {
                fail_msg("heartbeat %lld ms, node timeout %lld ms: %lld ms without an answer",
                         (long long)hb, (long long)timeouts[k], (long long)gap);
            }
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_answers_every_heartbeat),
        cmocka_unit_test(test_longer_timeout_fewer_answers),
        cmocka_unit_test(test_never_too_long_without_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
