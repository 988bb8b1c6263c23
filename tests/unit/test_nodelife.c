/* test_nodelife.c - when the coordinator answers a heartbeat (nodelife.h,
 * br_nodelife_answer_due): every one at the default timing and whenever the fence
 * time is short next to the interval; with a longer node timeout, fewer, but never
 * so few that an agent goes a third of its fence time without one, however its
 * heartbeats are late or early. And a node's state machine: the moves allowed,
 * each change saved with its event and hook in one order, a refused one not made;
 * a connection anew and a hello that keeps the state are quiet moves to the same
 * state (the hook, no event); and the probe peers its agent is sent after a hello. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coord_fixture.h"
#include "nodelife.h"
#include "hooks.h"
#include "probeset.h"

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

/* The newest event: node, kind and text (which must contain want). */
static void assert_last_event(br_coord_t *c, const char *node, const char *kind,
                              const char *want)
{
    json_t *ev = br_store_event_list(c->store, 0, 0, 0, NULL);
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "node")), node);
    assert_string_equal(json_string_value(json_object_get(last, "state")), kind);
    const char *reason = json_string_value(json_object_get(last, "reason"));
    if (!reason || !strstr(reason, want))
        fail_msg("newest event '%s', wanted '%s'", reason ? reason : "(none)", want);
    json_decref(ev);
}

/* The state the store holds for node name. */
static void assert_stored(br_coord_t *c, const char *name, const char *want)
{
    json_t *list = br_store_node_list(c->store, NULL);
    size_t i;
    json_t *row;
    int found = 0;
    json_array_foreach(list, i, row) {
        if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0) {
            assert_string_equal(json_string_value(json_object_get(row, "state")), want);
            found = 1;
        }
    }
    assert_true(found);
    json_decref(list);
}

static int lost_heard;

static void on_lost(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    /* the hook runs after the node was saved (a removed one is deleted first) */
    if (strcmp(a->reason, "node removed") != 0)
        assert_stored(c, a->node->name, br_node_state_name(a->node->state));
    lost_heard++;
}

static void test_node_moves(void **state)
{
    (void)state;
    assert_true(br_node_state_move_ok(BR_NODE_READY, BR_NODE_DRAINING));
    assert_true(br_node_state_move_ok(BR_NODE_DRAINING, BR_NODE_READY));
    assert_true(br_node_state_move_ok(BR_NODE_UNHEALTHY, BR_NODE_READY));
    assert_true(br_node_state_move_ok(BR_NODE_LOST, BR_NODE_READY));
    assert_true(br_node_state_move_ok(BR_NODE_DRAINING, BR_NODE_LOST));
    assert_true(br_node_state_move_ok(BR_NODE_READY, BR_NODE_READY));
    assert_false(br_node_state_move_ok(BR_NODE_LOST, BR_NODE_DRAINING));
    assert_false(br_node_state_move_ok(BR_NODE_LOST, BR_NODE_UNHEALTHY));
    assert_false(br_node_state_move_ok(BR_NODE_UNHEALTHY, BR_NODE_DRAINING));
    assert_false(br_node_state_move_ok(BR_NODE_STATES, BR_NODE_READY));
    assert_int_equal(br_node_state_parse("draining"), BR_NODE_DRAINING);
    assert_int_equal(br_node_state_parse("gone"), -1);

    coord_fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(fixture_open(f, "test_nodelife", 0), 0);
    br_coord_t *c = &f->c;
    assert_int_equal(br_hooks_add(c->hooks, BR_HOOK_NODE_LOST, on_lost, NULL), 0);
    br_node_t *n = fixture_node(c, "a", 4, 0);
    br_nodelife_drain(c, n, "ann");
    assert_int_equal(n->state, BR_NODE_DRAINING);
    assert_stored(c, "a", "draining");
    assert_last_event(c, "a", "draining", "drained by ann: no new jobs");
    br_nodelife_undrain(c, n, "ann");
    assert_int_equal(n->state, BR_NODE_READY);
    assert_last_event(c, "a", "ready", "undrained by ann");
    br_nodelife_unhealthy(c, n, "GPU 0: XID 79");
    assert_int_equal(n->state, BR_NODE_UNHEALTHY);
    assert_stored(c, "a", "unhealthy");
    br_nodelife_drain(c, n, "ann"); /* not ready: nothing */
    assert_int_equal(n->state, BR_NODE_UNHEALTHY);
    br_nodelife_undrain(c, n, "bob");
    assert_last_event(c, "a", "ready", "cleared by bob");
    /* lost, then a refused move: not made, no event, nothing saved */
    br_node_move_t lost = {BR_NODE_LOST, NULL, BR_HOOK_NODE_LOST, "silent", 0};
    assert_int_equal(br_node_post(c, n, &lost, "node a lost (silent)"), 0);
    assert_int_equal(lost_heard, 1);
    assert_last_event(c, "a", "lost", "node a lost (silent)");
    json_t *before = br_store_event_list(c->store, 0, 0, 0, NULL);
    br_node_move_t drain = {BR_NODE_DRAINING, NULL, BR_NODE_NO_HOOK, NULL, 0};
    assert_int_equal(br_node_post(c, n, &drain, "by hand"), -1);
    assert_int_equal(n->state, BR_NODE_LOST);
    assert_stored(c, "a", "lost");
    json_t *after = br_store_event_list(c->store, 0, 0, 0, NULL);
    assert_int_equal(json_array_size(after), json_array_size(before));
    json_decref(before);
    json_decref(after);
    br_nodelife_hello(c, n);
    assert_int_equal(n->state, BR_NODE_READY);
    assert_last_event(c, "a", "ready", "connected");
    br_err_t err;
    assert_int_equal(br_nodelife_remove(c, n, "ann", &err), 0);
    assert_int_equal(lost_heard, 2);
    assert_last_event(c, "a", "removed", "removed by ann; its key is revoked");
    assert_null(br_nodes_find(c->nodes, "a"));
    fixture_close(f);
    free(f);
}

static int back_heard;

static void on_back(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    (void)ctx;
    assert_null(a->reason);
    back_heard++;
}

static size_t events(br_coord_t *c)
{
    json_t *ev = br_store_event_list(c->store, 0, 0, 0, NULL);
    size_t n = json_array_size(ev);
    json_decref(ev);
    return n;
}

/* What the store holds of node name under key (a new reference; NULL: none, or no
 * such node stored). */
static json_t *stored_field(br_coord_t *c, const char *name, const char *key)
{
    json_t *list = br_store_node_list(c->store, NULL), *row, *v = NULL;
    size_t i;
    json_array_foreach(list, i, row) {
        if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
            v = json_incref(json_object_get(row, key));
    }
    json_decref(list);
    return v;
}

static void assert_stored_int(br_coord_t *c, const char *name, const char *key,
                              json_int_t want)
{
    json_t *v = stored_field(c, name, key);
    assert_true(json_is_integer(v));
    assert_int_equal(json_integer_value(v), want);
    json_decref(v);
}

/* BR_HOOK_NODE_BACK runs through br_node_post alone: a message on a new connection
 * is a move to the same state with the hook, neither saved nor an event; a hello
 * that keeps the state (drained, or ready on the same connection) is saved with
 * the hook and no event; one that makes it ready has its event. */
static void test_back_is_a_same_state_move(void **state)
{
    (void)state;
    coord_fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(fixture_open(f, "test_nodelife_back", 0), 0);
    br_coord_t *c = &f->c;
    assert_int_equal(br_hooks_add(c->hooks, BR_HOOK_NODE_BACK, on_back, NULL), 0);
    br_node_t *n = fixture_node(c, "a", 4, 0); /* ready, on route "a" */
    back_heard = 0;
    size_t had = events(c);
    const unsigned char same = 'a', other = 'z';
    assert_ptr_equal(br_nodelife_seen(c, "a", &same, 1), n); /* its own: nothing */
    assert_int_equal(back_heard, 0);
    assert_ptr_equal(br_nodelife_seen(c, "a", &other, 1), n); /* a new one */
    assert_int_equal(back_heard, 1);
    assert_int_equal(n->state, BR_NODE_READY);
    assert_int_equal(events(c), had);
    assert_null(stored_field(c, "a", "state")); /* (not saved: nothing stored yet) */
    assert_null(br_nodelife_seen(c, "nobody", &other, 1));
    /* its hello on that new connection: ready again, with an event */
    br_nodelife_hello(c, n);
    assert_int_equal(back_heard, 2);
    assert_last_event(c, "a", "ready", "reconnected");
    had = events(c);
    /* drained, it says hello: still draining, saved with what the hello said, the
     * hook, and no event */
    br_nodelife_drain(c, n, "ann");
    had = events(c);
    json_object_set_new(n->info, "probe_port", json_integer(7000));
    br_nodelife_seen(c, "a", &other, 1);
    br_nodelife_hello(c, n);
    assert_int_equal(n->state, BR_NODE_DRAINING);
    assert_int_equal(back_heard, 3);
    assert_int_equal(events(c), had);
    assert_stored(c, "a", "draining");
    assert_stored_int(c, "a", "probe_port", 7000);
    /* ready on the same connection: the same */
    br_nodelife_undrain(c, n, "ann");
    had = events(c);
    json_object_set_new(n->info, "probe_port", json_integer(7001));
    br_nodelife_seen(c, "a", &other, 1);
    br_nodelife_hello(c, n);
    assert_int_equal(n->state, BR_NODE_READY);
    assert_int_equal(back_heard, 4);
    assert_int_equal(events(c), had);
    assert_stored_int(c, "a", "probe_port", 7001);
    /* a lost node heard again on a new connection stays lost until its hello */
    br_node_move_t lost = {BR_NODE_LOST, NULL, BR_NODE_NO_HOOK, NULL, 0};
    assert_int_equal(br_node_post(c, n, &lost, "node a lost (silent)"), 0);
    had = events(c);
    br_nodelife_seen(c, "a", &same, 1);
    assert_int_equal(n->state, BR_NODE_LOST);
    assert_int_equal(back_heard, 5);
    assert_int_equal(events(c), had);
    br_nodelife_hello(c, n);
    assert_int_equal(n->state, BR_NODE_READY);
    assert_last_event(c, "a", "ready", "connected");
    fixture_close(f);
    free(f);
}

/* The probe peers a node's agent is sent (probeset.h): after its hello, at its next
 * heartbeat, whole; then nothing until the set changes, and nothing when the list
 * it would get is the one it has. */
static void test_probe_peers_after_hello(void **state)
{
    (void)state;
    coord_fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(fixture_open(f, "test_nodelife_peers", 0), 0);
    br_coord_t *c = &f->c;
    br_node_t *a = fixture_node(c, "a", 4, 0), *b = fixture_node(c, "b", 4, 0);
    json_object_set_new(a->info, "probe_port", json_integer(7000));
    json_object_set_new(b->info, "probe_port", json_integer(7000));
    int64_t now = 1000000;
    assert_null(br_probeset_news(c->probeset, c->nodes, a, now)); /* (no set yet) */
    br_nodelife_hello(c, a);
    json_t *peers = br_probeset_news(c->probeset, c->nodes, a, now);
    assert_int_equal(json_array_size(peers), 1);
    json_t *first = json_array_get(peers, 0);
    assert_string_equal(json_string_value(json_object_get(first, "node")), "b");
    json_decref(peers);
    assert_null(br_probeset_news(c->probeset, c->nodes, a, now)); /* heard */
    /* b's hello changes the set: both hear, a only when its list changed */
    now += BR_PROBESET_REBUILD_MS;
    br_nodelife_hello(c, b);
    peers = br_probeset_news(c->probeset, c->nodes, b, now);
    assert_int_equal(json_array_size(peers), 1);
    json_decref(peers);
    assert_null(br_probeset_news(c->probeset, c->nodes, a, now)); /* (the same list) */
    /* a's agent reconnects: its hello has it told anew */
    now += BR_PROBESET_REBUILD_MS;
    br_nodelife_hello(c, a);
    peers = br_probeset_news(c->probeset, c->nodes, a, now);
    assert_int_equal(json_array_size(peers), 1);
    json_decref(peers);
    fixture_close(f);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_answers_every_heartbeat),
        cmocka_unit_test(test_longer_timeout_fewer_answers),
        cmocka_unit_test(test_never_too_long_without_one),
        cmocka_unit_test(test_node_moves),
        cmocka_unit_test(test_back_is_a_same_state_move),
        cmocka_unit_test(test_probe_peers_after_hello),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
