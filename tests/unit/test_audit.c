/* test_audit.c - the audit log of admin actions (audit.h) on a coordinator made
 * here (coord_fixture.h): each action of the admin (tokens, nodes, users, jobs,
 * services) is recorded with who did it, when, what it was done to (the name or id
 * in its body, else the new job's or token's id in the answer) and how it ended
 * (done, refused with the words of the refusal, no answer), found among this
 * request's own answers only; what is left out: reads, everything users and nodes
 * send (refused admin actions included), and events. Also driven the way the loop
 * does it, through br_api_dispatch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "api.h"
#include "audit.h"
#include "coord_fixture.h"
#include "cred.h"
#include "outbox.h"

#define KEY_ADMIN "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define KEY_ANN "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"

static const br_caller_t ADMIN = {BR_PRINCIPAL_ADMIN, "admin", 1};
static const br_caller_t ANN = {BR_PRINCIPAL_USER, "ann", 2};
static const br_caller_t NODE = {BR_PRINCIPAL_NODE, "a", 3};

static int setup(void **state)
{
    coord_fixture_t *f = calloc(1, sizeof(*f));
    if (!f || fixture_open(f, "test_audit", 0) < 0) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    coord_fixture_t *f = *state;
    fixture_close(f);
    free(f);
    return 0;
}

static uint32_t next_seq = 100;

/* A request from the CLI (body stolen; NULL: {}). */
static br_msg_t *request(const char *type, json_t *body)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, next_seq++);
    assert_non_null(m);
    br_msg_set_body(m, body ? body : json_object());
    br_msg_set_route(m, "u", 1);
    return m;
}

/* The audit log, oldest first (a new reference). */
static json_t *entries(br_coord_t *c)
{
    br_err_t err = {0};
    json_t *list = br_store_audit_list(c->store, 0, 0, &err);
    if (!list)
        fail_msg("audit list: %s", err.text);
    return list;
}

static size_t entry_count(br_coord_t *c)
{
    json_t *list = entries(c);
    size_t n = json_array_size(list);
    json_decref(list);
    return n;
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The newest entry is this action on target (NULL: none), ended as result. */
static void assert_last(br_coord_t *c, const char *who, const char *action,
                        const char *target, const char *result)
{
    json_t *list = entries(c);
    json_t *e = json_array_get(list, json_array_size(list) - 1);
    if (!e)
        fail_msg("no audit entry for %s", action);
    assert_string_equal(str(e, "who"), who);
    assert_string_equal(str(e, "action"), action);
    if (target)
        assert_string_equal(str(e, "target"), target);
    else
        assert_true(json_is_null(json_object_get(e, "target")));
    assert_string_equal(str(e, "result"), result);
    json_decref(list);
}

/* Each action of the admin, answered: who, what, to what, done, and when. */
static void test_admin_actions_are_recorded(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    static const struct {
        const char *type, *body, *answer, *target;
    } cases[] = {
        {"token.create", "{\"ttl\": 60000, \"uses\": 1}", "{\"id\": \"t0k3n\"}",
         "token t0k3n"},
        {"token.revoke", "{\"id\": \"t0k3n\"}", "{}", "token t0k3n"},
        {"node.drain", "{\"name\": \"a\"}", "{}", "a"},
        {"node.undrain", "{\"name\": \"a\"}", "{}", "a"},
        {"node.remove", "{\"name\": \"b\"}", "{}", "b"},
        {"node.rotate_key", "{\"name\": \"a\"}", "{}", "a"},
        {"user.add", "{\"name\": \"ann\", \"public_key\": \"" KEY_ANN "\"}", "{}",
         "ann"},
        {"user.set", "{\"name\": \"ann\", \"limits\": {}}", "{}", "ann"},
        {"user.remove", "{\"name\": \"ann\"}", "{}", "ann"},
        {"user.rotate_key", "{\"public_key\": \"" KEY_ANN "\"}", "{}", NULL},
        {"job.submit", "{\"spec\": \"command: x\\n\", \"sets\": []}", "{\"id\": 7}",
         "job 7"},
        {"job.cancel", "{\"id\": 7}", "{}", "job 7"},
        {"job.cancel", "{\"id\": 7, \"index\": 3}", "{}", "job 7[3]"},
        {"job.purge", "{\"id\": 7}", "{}", "job 7"},
        {"service.scale", "{\"name\": \"web\", \"replicas\": 2}", "{}", "web"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_error_t je;
        br_msg_t *m = request(cases[i].type, json_loads(cases[i].body, 0, &je));
        size_t from = br_outbox_count(c->out);
        int64_t before = br_now_ms();
        br_reply_ok(c, m, json_loads(cases[i].answer, 0, &je));
        br_audit_note(c, m, &ADMIN, from);
        int64_t after = br_now_ms();
        assert_int_equal(entry_count(c), i + 1);
        assert_last(c, "admin", cases[i].type, cases[i].target, "done");
        json_t *list = entries(c);
        json_t *e = json_array_get(list, i);
        json_int_t t = json_integer_value(json_object_get(e, "time"));
        assert_true(t >= before && t <= after);
        json_decref(list);
        br_msg_destroy(&m);
    }
}

/* A refusal is recorded with its words; a request the handler did not answer
 * (nothing was queued for it) as "no answer". */
static void test_refused_and_unanswered(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_msg_t *m = request("node.drain", json_pack("{s:s}", "name", "zz"));
    size_t from = br_outbox_count(c->out);
    br_err_t err;
    br_errf(&err, ENOENT, "no node named 'zz'");
    br_reply_fail(c, m, &err);
    br_audit_note(c, m, &ADMIN, from);
    assert_last(c, "admin", "node.drain", "zz", "refused: no node named 'zz'");
    br_msg_destroy(&m);

    /* a refused job.submit has no job: no target */
    m = request("job.submit", json_pack("{s:s, s:[]}", "spec", "bad: [", "sets"));
    from = br_outbox_count(c->out);
    br_errf(&err, EINVAL, "spec: line 1: bad YAML");
    br_reply_fail(c, m, &err);
    br_audit_note(c, m, &ADMIN, from);
    assert_last(c, "admin", "job.submit", NULL, "refused: spec: line 1: bad YAML");
    br_msg_destroy(&m);

    m = request("user.remove", json_pack("{s:s}", "name", "bob"));
    br_audit_note(c, m, &ADMIN, br_outbox_count(c->out));
    assert_last(c, "admin", "user.remove", "bob", "no answer");
    br_msg_destroy(&m);
    assert_int_equal(entry_count(c), 3);
}

/* The result is this request's own answer: not one queued before it (from), not
 * an order to a node, not the answer to another request of the same type. */
static void test_result_is_this_requests_answer(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_node_t *a = fixture_node(c, "a", 4, 0);
    br_msg_t *m = request("node.drain", json_pack("{s:s}", "name", "a"));
    /* answered well before: an earlier wake's handling of the same message */
    br_reply_ok(c, m, json_object());
    size_t from = br_outbox_count(c->out);
    /* this time: an order to the node, another request's answer, then its own */
    br_coord_send_node(c, a, "node.drain", json_object());
    br_msg_t *other = request("node.drain", json_pack("{s:s}", "name", "a"));
    br_reply_ok(c, other, json_object());
    br_err_t err;
    br_errf(&err, EBUSY, "node a is busy");
    br_reply_fail(c, m, &err);
    br_audit_note(c, m, &ADMIN, from);
    assert_last(c, "admin", "node.drain", "a", "refused: node a is busy");
    /* its answer not among those queued since: no answer, whatever came before */
    br_audit_note(c, other, &ADMIN, br_outbox_count(c->out));
    assert_last(c, "admin", "node.drain", "a", "no answer");
    br_msg_destroy(&m);
    br_msg_destroy(&other);
}

/* Left out: the admin's reads, whatever users and nodes send (their refused
 * attempts at admin actions too), and events (they have no answer). */
static void test_what_is_left_out(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    static const char *const reads[] = {
        "ping",
        "token.list",
        "node.list",
        "node.show",
        "node.probe",
        "job.list",
        "job.show",
        "job.queue",
        "job.logs",
        "event.list",
        "event.watch",
        "user.list",
        "audit.list",
        "usage.show",
        "service.endpoints",
        "checkpoint.open",
        "checkpoint.read",
        "checkpoint.close",
        "dashboard.login",
    };
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
        br_msg_t *m = request(reads[i], json_pack("{s:s}", "name", "a"));
        size_t from = br_outbox_count(c->out);
        br_reply_ok(c, m, json_object());
        br_audit_note(c, m, &ADMIN, from);
        br_msg_destroy(&m);
    }
    assert_int_equal(entry_count(c), 0);
    static const char *const actions[] = {
        "job.submit",   "job.cancel", "user.rotate_key", "node.drain",
        "token.create", "job.purge",  "service.scale"};
    for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++) {
        br_msg_t *m = request(actions[i], json_pack("{s:I}", "id", (json_int_t)3));
        size_t from = br_outbox_count(c->out);
        br_reply_ok(c, m, json_object());
        br_audit_note(c, m, &ANN, from);
        br_audit_note(c, m, &NODE, from);
        br_msg_destroy(&m);
    }
    assert_int_equal(entry_count(c), 0);
    /* an event is never an action, even of an audited type */
    br_msg_t *ev = br_msg_new(BR_MSG_EVENT, "job.cancel", 0);
    br_msg_set_body(ev, json_pack("{s:I}", "id", (json_int_t)3));
    br_audit_note(c, ev, &ADMIN, br_outbox_count(c->out));
    br_msg_destroy(&ev);
    assert_int_equal(entry_count(c), 0);
}

/* As the loop does it: dispatch, then note. The admin's drain is recorded and
 * done; a user's is refused (EACCES) and not recorded; the admin's join token is
 * recorded under the id its answer gives. */
static void test_through_dispatch(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_err_t err = {0};
    char sec[BR_KEY_LEN + 1];
    assert_int_equal(br_keypair(c->cfg.public_key, sec, &err), 0);
    br_strlcpy(c->cfg.advertise, "tcp://coord:7700", sizeof(c->cfg.advertise));
    assert_int_equal(
        br_store_key_add(c->store, KEY_ADMIN, BR_PRINCIPAL_ADMIN, "admin", &err), 0);
    assert_int_equal(
        br_store_key_add(c->store, KEY_ANN, BR_PRINCIPAL_USER, "ann", &err), 0);
    br_node_t *a = fixture_node(c, "a", 4, 0);

    br_msg_t *m = request("node.drain", json_pack("{s:s}", "name", "a"));
    br_msg_set_user(m, KEY_ANN);
    br_caller_t who;
    size_t from = br_outbox_count(c->out);
    br_api_dispatch(c, m, &who);
    br_audit_note(c, m, &who, from);
    assert_int_equal(who.kind, BR_PRINCIPAL_USER);
    const br_msg_t *r = br_outbox_msg(c->out, br_outbox_count(c->out) - 1);
    assert_int_equal(json_integer_value(json_object_get(br_msg_body(r), "errnum")),
                     EACCES);
    assert_int_equal(a->state, BR_NODE_READY);
    assert_int_equal(entry_count(c), 0);
    br_msg_destroy(&m);

    m = request("node.drain", json_pack("{s:s}", "name", "a"));
    br_msg_set_user(m, KEY_ADMIN);
    from = br_outbox_count(c->out);
    br_api_dispatch(c, m, &who);
    br_audit_note(c, m, &who, from);
    assert_int_equal(who.kind, BR_PRINCIPAL_ADMIN);
    assert_int_equal(a->state, BR_NODE_DRAINING);
    assert_last(c, "admin", "node.drain", "a", "done");
    br_msg_destroy(&m);

    m = request("token.create",
                json_pack("{s:I, s:i}", "ttl", (json_int_t)60000, "uses", 2));
    br_msg_set_user(m, KEY_ADMIN);
    from = br_outbox_count(c->out);
    br_api_dispatch(c, m, &who);
    br_audit_note(c, m, &who, from);
    r = br_outbox_msg(c->out, br_outbox_count(c->out) - 1);
    const char *id = str(br_msg_body(r), "id");
    assert_non_null(id);
    char want[64];
    snprintf(want, sizeof(want), "token %s", id);
    assert_last(c, "admin", "token.create", want, "done");
    br_msg_destroy(&m);

    /* a refusal by the handler itself: recorded with its words */
    m = request("node.undrain", json_pack("{s:s}", "name", "nosuch"));
    br_msg_set_user(m, KEY_ADMIN);
    from = br_outbox_count(c->out);
    br_api_dispatch(c, m, &who);
    br_audit_note(c, m, &who, from);
    assert_last(c, "admin", "node.undrain", "nosuch",
                "refused: no node named 'nosuch'");
    br_msg_destroy(&m);
    assert_int_equal(entry_count(c), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_admin_actions_are_recorded, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refused_and_unanswered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_result_is_this_requests_answer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_what_is_left_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_through_dispatch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
