/* test_ckptpull.c - a checkpoint pulled to a user's machine through the
 * coordinator (ckptpull.h) on a coordinator made here (coord_fixture.h, with the
 * replicas module; the holders' links are real ZeroMQ sockets to an address
 * nothing answers on, so reads stay in flight): who may open a pull (the job's
 * owner and the admin; anyone else hears "no job", as for a job that does not
 * exist), the refusals of an unknown job, of a step it has no checkpoint at, of
 * checkpoints that cannot be verified, of no holder serving, of too many pulls; the
 * grant the holder is sent; a pull belongs to the key that opened it (reads and
 * closes by any other key find nothing); the reads in flight are bounded; closing
 * answers them and withdraws the grant; a holder lost fails its pulls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <zmq.h>

#include "ckptpull.h"
#include "coord_fixture.h"
#include "cred.h"
#include "nodelife.h"
#include "hooks.h"
#include "outbox.h"

#define KEY_ANN "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"
#define KEY_ANN2 "DDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD" /* ann's second machine */
#define KEY_BOB "EEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE"
#define KEY_ADMIN "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define H3 "3333333333333333333333333333333333333333333333333333333333333333"
#define WINDOW (2 * BR_XFER_WINDOW)

static const br_caller_t ANN = {BR_PRINCIPAL_USER, "ann",
                                2}; /* fixture_add_job's owner */
static const br_caller_t BOB = {BR_PRINCIPAL_USER, "bob", 3};
static const br_caller_t ADMIN = {BR_PRINCIPAL_ADMIN, "admin", 1};

typedef struct {
    fixture_two_t *w;
    void *ctx;   /* the pulls' context, when made here (else the fixture's) */
    int64_t job; /* ann's, with checkpoints at steps 3 and 5 written on a */
} world_t;

static json_t *manifest(const char *hash)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:[{s:s, s:i, s:i, s:s}]}", "hash", hash,
                     "root", "dir", "files", 1, "bytes", 10, "entries", "path",
                     "state.json", "size", 10, "mode", 420, "hash", hash);
}

static void add_checkpoint(br_coord_t *c, int64_t job, const char *node,
                           const char *path, int64_t step, json_t *man)
{
    br_err_t err = {0};
    if (br_store_checkpoint_add(c->store, job, 1, node, path, step, 10, 1000 + step,
                                man, &err) < 0)
        fail_msg("checkpoint: %s", err.text);
    json_decref(man);
}

static int setup(void **state)
{
    world_t *x = calloc(1, sizeof(*x));
    if (!x || fixture_two_setup((void **)&x->w, "test_ckptpull", 1, 7707) < 0)
        return -1;
    br_coord_t *c = &x->w->f.c;
    br_err_t err;
    if (br_keypair(c->cfg.public_key, c->cfg.secret_key, &err) < 0)
        return -1;
    if (!c->ckptpull) { /* (the fixture may wire it already, as brambled does) */
        x->ctx = zmq_ctx_new();
        c->ckptpull = br_ckptpull_new(x->ctx);
        if (!x->ctx || !c->ckptpull || br_ckptpull_init(c) < 0)
            return -1;
    }
    x->job = fixture_add_job(c, json_pack("{s:s, s:{s:i}}", "command", "train",
                                          "resources", "cpus", 1))
                 ->id;
    add_checkpoint(c, x->job, "a", "/ck/s3", 3, manifest(H1));
    add_checkpoint(c, x->job, "a", "/ck/s5", 5, manifest(H2));
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    world_t *x = *state;
    if (x->ctx) { /* made here: its sockets, before the context */
        br_ckptpull_destroy(&x->w->f.c.ckptpull);
        zmq_ctx_term(x->ctx);
    }
    fixture_two_teardown((void **)&x->w);
    free(x);
    return 0;
}

static uint32_t next_seq = 1000;

/* The CLI's request of type from key (body stolen). */
static br_msg_t *request(const char *type, const char *key, json_t *body)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, next_seq++);
    assert_non_null(m);
    br_msg_set_body(m, body);
    br_msg_set_route(m, "z", 1);
    br_msg_set_user(m, key);
    return m;
}

/* The answer queued for m (borrowed), or NULL when none is. */
static json_t *answer(br_coord_t *c, const br_msg_t *m)
{
    json_t *found = NULL;
    for (size_t i = 0; i < br_outbox_count(c->out); i++) {
        const br_msg_t *r = br_outbox_msg(c->out, i);
        if (br_msg_kind(r) == BR_MSG_RESPONSE && br_msg_seq(r) == br_msg_seq(m) &&
            strcmp(br_msg_type(r), br_msg_type(m)) == 0)
            found = br_msg_body(r);
    }
    return found;
}

static int errnum_of(const json_t *body)
{
    return (int)json_integer_value(json_object_get(body, "errnum"));
}

static const char *text_of(const json_t *body)
{
    const char *t = json_string_value(json_object_get(body, "error"));
    return t ? t : "";
}

/* checkpoint.open of job (step < 0: the newest) by who from key: the answer. */
static json_t *open_pull(br_coord_t *c, const br_caller_t *who, const char *key,
                         int64_t job, int64_t step)
{
    json_t *body = json_pack("{s:I}", "job", (json_int_t)job);
    if (step >= 0)
        json_object_set_new(body, "step", json_integer(step));
    br_msg_t *m = request("checkpoint.open", key, body);
    br_api_checkpoint_open(c, m, who);
    json_t *a = answer(c, m);
    assert_non_null(a);
    br_msg_destroy(&m);
    return a;
}

/* Open and take the pull's id (into xfer). */
static void open_ok(br_coord_t *c, const br_caller_t *who, const char *key, int64_t job,
                    int64_t step, char *xfer, size_t len)
{
    json_t *a = open_pull(c, who, key, job, step);
    if (errnum_of(a))
        fail_msg("open refused: %s", text_of(a));
    br_strlcpy(xfer, json_string_value(json_object_get(a, "xfer")), len);
}

static br_msg_t *read_req(const char *key, const char *xfer)
{
    return request("checkpoint.read", key,
                   json_pack("{s:s, s:s, s:s, s:I}", "xfer", xfer, "path", "state.json",
                             "hash", H2, "offset", (json_int_t)0));
}

static void assert_refused(const json_t *a, int errnum, const char *says)
{
    assert_non_null(a);
    if (errnum_of(a) != errnum || !strstr(text_of(a), says))
        fail_msg("answer %d '%s', wanted %d '%s'", errnum_of(a), text_of(a), errnum,
                 says);
}

/* The last ckpt.serve to node n (borrowed). */
static json_t *serve_order(br_coord_t *c, const br_node_t *n)
{
    return fixture_order(c, "ckpt.serve", n);
}

/* --- checkpoint.open ------------------------------------------------------------- */

/* The owner opens the newest checkpoint: its id, step, path, whole manifest and the
 * node read from; the writer is granted the coordinator's key for it. The admin may
 * open any job's, and a step may be asked for. */
static void test_open_grants_the_coordinator(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    json_t *a = open_pull(c, &ANN, KEY_ANN, x->job, -1);
    assert_int_equal(errnum_of(a), 0);
    const char *xfer = json_string_value(json_object_get(a, "xfer"));
    assert_non_null(xfer);
    assert_int_equal(strlen(xfer), 16);
    assert_int_equal(strspn(xfer, "0123456789abcdef"), 16);
    assert_int_equal(json_integer_value(json_object_get(a, "job")), x->job);
    assert_int_equal(json_integer_value(json_object_get(a, "step")),
                     5); /* the newest */
    assert_string_equal(json_string_value(json_object_get(a, "path")), "/ck/s5");
    assert_string_equal(json_string_value(json_object_get(a, "from")), "a");
    assert_true(json_is_false(json_object_get(a, "replica")));
    json_t *man = json_object_get(a, "manifest");
    assert_string_equal(json_string_value(json_object_get(man, "hash")), H2);
    assert_int_equal(json_array_size(json_object_get(man, "entries")), 1);

    json_t *serve = serve_order(c, x->w->a);
    assert_non_null(serve);
    assert_null(serve_order(c, x->w->b));
    assert_string_equal(json_string_value(json_object_get(serve, "peer_key")),
                        c->cfg.public_key);
    assert_string_equal(json_string_value(json_object_get(serve, "peer")),
                        "the coordinator");
    assert_int_equal(json_integer_value(json_object_get(serve, "ttl")),
                     BR_CKPTPULL_GRANT_MS);
    assert_int_equal(json_integer_value(json_object_get(serve, "job")), x->job);
    assert_string_equal(json_string_value(json_object_get(serve, "path")), "/ck/s5");
    const char *grant = json_string_value(json_object_get(serve, "grant"));
    char want[64];
    snprintf(want, sizeof(want), "pull-%s", xfer);
    assert_non_null(strstr(grant, want)); /* a grant of this pull alone */

    /* the admin, any job's; an earlier step by name */
    a = open_pull(c, &ADMIN, KEY_ADMIN, x->job, 3);
    assert_int_equal(errnum_of(a), 0);
    assert_int_equal(json_integer_value(json_object_get(a, "step")), 3);
    assert_string_equal(json_string_value(json_object_get(a, "path")), "/ck/s3");
    /* two pulls, two ids */
    assert_string_not_equal(json_string_value(json_object_get(a, "xfer")), xfer);
}

/* The writer gone, a node with a verified replica serves it (from its store). */
static void test_open_from_a_replica(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    br_err_t err = {0};
    x->w->a->route_len = 0; /* the writer is not connected */
    json_t *a = open_pull(c, &ANN, KEY_ANN, x->job, -1);
    assert_refused(a, EHOSTUNREACH, "no node that holds checkpoint step 5");
    assert_non_null(strstr(text_of(a), "written on a"));
    assert_int_equal(
        br_store_replica_add(c->store, x->job, H2, "b", 5, "/ck/s5", 10, 2000, &err),
        0);
    a = open_pull(c, &ANN, KEY_ANN, x->job, -1);
    assert_int_equal(errnum_of(a), 0);
    assert_string_equal(json_string_value(json_object_get(a, "from")), "b");
    assert_true(json_is_true(json_object_get(a, "replica")));
    json_t *serve = serve_order(c, x->w->b);
    assert_non_null(serve);
    assert_true(json_is_true(json_object_get(serve, "replica")));
}

/* Who may open, and what is refused: another user's job is "no job", as a job that
 * does not exist; a job without checkpoints, a step without one, a checkpoint
 * without a manifest or with one that does not list its files; a bad body. */
static void test_open_refusals(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    char want[64];
    snprintf(want, sizeof(want), "no job %lld", (long long)x->job);
    assert_refused(open_pull(c, &BOB, KEY_BOB, x->job, -1), ENOENT, want);
    assert_refused(open_pull(c, &ANN, KEY_ANN, 999, -1), ENOENT, "no job 999");
    assert_refused(open_pull(c, &ANN, KEY_ANN, x->job, 4), ENOENT,
                   "has no counted checkpoint at step 4");
    snprintf(want, sizeof(want), "bramble checkpoint list %lld", (long long)x->job);
    assert_refused(open_pull(c, &ANN, KEY_ANN, x->job, 4), ENOENT, want);

    int64_t bare = fixture_add_job(c, json_pack("{s:s}", "command", "x"))->id;
    assert_refused(open_pull(c, &ANN, KEY_ANN, bare, -1), ENOENT,
                   "has no counted checkpoint");
    /* counted without a manifest: cannot be verified, so not pulled */
    add_checkpoint(c, bare, "a", "/ck/bare", 1, NULL);
    assert_refused(open_pull(c, &ANN, KEY_ANN, bare, -1), ENOTSUP,
                   "counted without a manifest");
    /* a truncated manifest that names no whole listing (an older agent's) */
    json_t *m = json_pack("{s:s, s:s, s:i, s:i, s:b, s:[{s:s, s:i, s:i, s:s}]}", "hash",
                          H3, "root", "dir", "files", 2, "bytes", 20, "truncated", 1,
                          "entries", "path", "a", "size", 10, "mode", 420, "hash", H3);
    add_checkpoint(c, bare, "a", "/ck/trunc", 2, m);
    assert_refused(open_pull(c, &ANN, KEY_ANN, bare, 2), ENOTSUP,
                   "more files (2) than its manifest lists");
    assert_null(serve_order(c, x->w->a)); /* nothing granted by any of them */

    static const char *const bad[] = {"{}", "{\"job\": \"one\"}",
                                      "{\"job\": 1, \"step\": \"x\"}",
                                      "{\"job\": 1, \"extra\": 1}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_error_t je;
        br_msg_t *r = request("checkpoint.open", KEY_ANN, json_loads(bad[i], 0, &je));
        br_api_checkpoint_open(c, r, &ANN);
        assert_refused(answer(c, r), EPROTO, "checkpoint.open: bad body");
        br_msg_destroy(&r);
    }
}

/* At most BR_CKPTPULL_MAX pulls open at once; a closed one makes room. */
static void test_open_at_most_max(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    char xfer[BR_CKPTPULL_MAX][32];
    for (int i = 0; i < BR_CKPTPULL_MAX; i++)
        open_ok(c, &ANN, KEY_ANN, x->job, -1, xfer[i], sizeof(xfer[i]));
    char want[64];
    snprintf(want, sizeof(want), "%d checkpoint pulls are open already",
             BR_CKPTPULL_MAX);
    assert_refused(open_pull(c, &ANN, KEY_ANN, x->job, -1), EBUSY, want);
    br_msg_t *m =
        request("checkpoint.close", KEY_ANN, json_pack("{s:s}", "xfer", xfer[3]));
    br_api_checkpoint_close(c, m, &ANN);
    assert_int_equal(errnum_of(answer(c, m)), 0);
    br_msg_destroy(&m);
    assert_int_equal(errnum_of(open_pull(c, &ANN, KEY_ANN, x->job, -1)), 0);
}

/* --- checkpoint.read and checkpoint.close ---------------------------------------- */

/* A pull is its opener's key's: another user, the admin, even the same user on
 * another key, find no such pull; the opener's read is passed on to the holder and
 * waits for its answer (none is queued yet). */
static void test_pull_belongs_to_its_key(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    char xfer[32];
    open_ok(c, &ANN, KEY_ANN, x->job, -1, xfer, sizeof(xfer));
    struct {
        const br_caller_t *who;
        const char *key;
    } others[] = {{&BOB, KEY_BOB}, {&ADMIN, KEY_ADMIN}, {&ANN, KEY_ANN2}};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        br_msg_t *m = read_req(others[i].key, xfer);
        br_api_checkpoint_read(c, m, others[i].who);
        char want[64];
        snprintf(want, sizeof(want), "no checkpoint pull %s", xfer);
        assert_refused(answer(c, m), ENOENT, want);
        br_msg_destroy(&m);
        /* their close is answered, and closes nothing */
        m = request("checkpoint.close", others[i].key,
                    json_pack("{s:s}", "xfer", xfer));
        br_api_checkpoint_close(c, m, others[i].who);
        assert_int_equal(errnum_of(answer(c, m)), 0);
        br_msg_destroy(&m);
    }
    fixture_drop_orders(c);
    br_msg_t *m = read_req(KEY_ANN, xfer);
    br_api_checkpoint_read(c, m, &ANN);
    assert_null(answer(c, m)); /* in flight: answered when the holder answers */
    assert_null(serve_order(c, x->w->a)); /* still granted: no withdrawal */
    br_msg_destroy(&m);

    /* unknown ids, and bodies without what a read needs */
    m = read_req(KEY_ANN, "0000000000000000");
    br_api_checkpoint_read(c, m, &ANN);
    assert_refused(answer(c, m), ENOENT, "closed, or not read from for 60 s");
    br_msg_destroy(&m);
    m = request("checkpoint.read", KEY_ANN,
                json_pack("{s:s, s:s, s:I}", "xfer", xfer, "path", "p", "offset",
                          (json_int_t)0));
    br_api_checkpoint_read(c, m, &ANN);
    assert_refused(answer(c, m), EPROTO,
                   "checkpoint.read: bad body: Object item not found: hash");
    br_msg_destroy(&m);
    m = request("checkpoint.close", KEY_ANN, json_object());
    br_api_checkpoint_close(c, m, &ANN);
    assert_refused(answer(c, m), EPROTO, "checkpoint.close: bad body");
    br_msg_destroy(&m);
}

/* At most WINDOW reads of one pull wait for the holder at once; the next is
 * refused (EAGAIN: ask again), not queued. */
static void test_reads_in_flight_are_bounded(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    char xfer[32];
    open_ok(c, &ANN, KEY_ANN, x->job, -1, xfer, sizeof(xfer));
    for (int i = 0; i < WINDOW; i++) {
        br_msg_t *m = read_req(KEY_ANN, xfer);
        br_api_checkpoint_read(c, m, &ANN);
        assert_null(answer(c, m));
        br_msg_destroy(&m);
    }
    br_msg_t *m = read_req(KEY_ANN, xfer);
    br_api_checkpoint_read(c, m, &ANN);
    char want[64];
    snprintf(want, sizeof(want), "%d reads of this pull are in flight already", WINDOW);
    assert_refused(answer(c, m), EAGAIN, want);
    br_msg_destroy(&m);
}

/* Closing answers every read still waiting (ECANCELED), withdraws the grant (a
 * ckpt.serve of ttl 0 to the holder), and the pull is gone; closing it again is no
 * fault. */
static void test_close_answers_and_withdraws(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    char xfer[32];
    open_ok(c, &ANN, KEY_ANN, x->job, -1, xfer, sizeof(xfer));
    const char *g =
        json_string_value(json_object_get(serve_order(c, x->w->a), "grant"));
    char grant[160];
    br_strlcpy(grant, g, sizeof(grant));
    br_msg_t *r1 = read_req(KEY_ANN, xfer), *r2 = read_req(KEY_ANN, xfer);
    br_api_checkpoint_read(c, r1, &ANN);
    br_api_checkpoint_read(c, r2, &ANN);
    fixture_drop_orders(c);
    br_msg_t *m =
        request("checkpoint.close", KEY_ANN, json_pack("{s:s}", "xfer", xfer));
    br_api_checkpoint_close(c, m, &ANN);
    assert_int_equal(errnum_of(answer(c, m)), 0);
    assert_refused(answer(c, r1), ECANCELED, "the pull was closed");
    assert_refused(answer(c, r2), ECANCELED, "the pull was closed");
    json_t *serve = serve_order(c, x->w->a);
    assert_non_null(serve);
    assert_int_equal(json_integer_value(json_object_get(serve, "ttl")), 0);
    assert_string_equal(json_string_value(json_object_get(serve, "grant")), grant);
    br_msg_destroy(&m);
    br_msg_destroy(&r1);
    br_msg_destroy(&r2);

    m = read_req(KEY_ANN, xfer);
    br_api_checkpoint_read(c, m, &ANN);
    assert_refused(answer(c, m), ENOENT, "no checkpoint pull");
    br_msg_destroy(&m);
    m = request("checkpoint.close", KEY_ANN, json_pack("{s:s}", "xfer", xfer));
    br_api_checkpoint_close(c, m, &ANN);
    assert_int_equal(errnum_of(answer(c, m)), 0);
    br_msg_destroy(&m);
}

/* The holder lost: its pulls are closed, each read waiting told why and to pull
 * again; pulls from other holders stay. */
static void test_lost_holder_fails_its_pulls(void **state)
{
    world_t *x = *state;
    br_coord_t *c = &x->w->f.c;
    br_err_t err = {0};
    char from_a[32], from_b[32];
    open_ok(c, &ANN, KEY_ANN, x->job, -1, from_a, sizeof(from_a));
    /* a second job's checkpoint, written on b */
    int64_t other = fixture_add_job(c, json_pack("{s:s}", "command", "y"))->id;
    add_checkpoint(c, other, "b", "/ck/o1", 1, manifest(H3));
    open_ok(c, &ANN, KEY_ANN, other, -1, from_b, sizeof(from_b));
    br_msg_t *ra = read_req(KEY_ANN, from_a), *rb = read_req(KEY_ANN, from_b);
    br_api_checkpoint_read(c, ra, &ANN);
    br_api_checkpoint_read(c, rb, &ANN);
    br_node_move_t lost = {BR_NODE_LOST, NULL, BR_HOOK_NODE_LOST, "silent", 0};
    assert_int_equal(br_node_post(c, x->w->a, &lost, "lost"), 0);
    assert_refused(answer(c, ra), EHOSTUNREACH,
                   "a, which the checkpoint was read from, was lost: pull it again");
    assert_null(answer(c, rb));
    br_msg_destroy(&ra);
    br_msg_destroy(&rb);
    br_msg_t *m = read_req(KEY_ANN, from_a);
    br_api_checkpoint_read(c, m, &ANN);
    assert_refused(answer(c, m), ENOENT, "no checkpoint pull");
    br_msg_destroy(&m);
    (void)err;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_grants_the_coordinator, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_open_from_a_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_at_most_max, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_belongs_to_its_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_in_flight_are_bounded, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_answers_and_withdraws, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lost_holder_fails_its_pulls, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
