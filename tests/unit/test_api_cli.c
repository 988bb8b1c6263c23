/* test_api_cli.c - what the CLI sends (api_cli.c), driven as the loop drives it:
 * real messages from the keys of the admin, of users ann and bob, of a node and of
 * strangers, through br_api_dispatch on a coordinator made here (coord_fixture.h,
 * with usage, watchers, the replicas module; nodes a and b of 4 CPUs), the answers
 * read from the outbox. Who may send what (EACCES in words naming the key wanted);
 * strict bodies (EPROTO naming the field); unknown ids (ENOENT, and the same for
 * another user's job, so its existence is not told); and what each answer holds:
 * ping, job.submit / show / list / queue / cancel / logs, node.list / show / drain /
 * undrain / remove / rotate_key / probe, user.add / list / set / remove /
 * rotate_key / env_rm, token.create / list / revoke, usage.show, event.list /
 * watch, audit.list, service.endpoints / scale / list, code.stage, stream.open to
 * an agent that cannot seal streams, and who may see a job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "content.h"
#include "coord_fixture.h"
#include "cred.h"
#include "mfbuild.h"
#include "usage.h"
#include "watchers.h"
#include "jobtab.h"
#include "outbox.h"
#include "stats.h"
#include "stream.h"

#define KEY_ADMIN "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define KEY_ANN "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"
#define KEY_BOB "EEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE"
#define KEY_NODE "GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG"
#define KEY_NEW "IIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIIII"
#define KEY_STRANGER "KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKK"

#define SPEC_TRAIN \
    "name: train\nkind: train\ncommand: python train.py\nresources:\n  cpus: 2\n"

typedef struct {
    fixture_two_t *w;
    br_coord_t *c;
    int own_usage, own_watchers; /* made here, not by the fixture */
} world_t;

static int setup(void **state)
{
    world_t *x = calloc(1, sizeof(*x));
    if (!x || fixture_two_setup((void **)&x->w, "test_api_cli", 1, 0) < 0)
        return -1;
    br_coord_t *c = x->c = &x->w->f.c;
    br_err_t err;
    if (br_keypair(c->cfg.public_key, c->cfg.secret_key, &err) < 0)
        return -1;
    br_strlcpy(c->cfg.advertise, "tcp://coord.example:7700", sizeof(c->cfg.advertise));
    if (br_store_key_add(c->store, KEY_ADMIN, BR_PRINCIPAL_ADMIN, "admin", &err) < 0 ||
        br_store_key_add(c->store, KEY_ANN, BR_PRINCIPAL_USER, "ann", &err) < 0 ||
        br_store_key_add(c->store, KEY_BOB, BR_PRINCIPAL_USER, "bob", &err) < 0 ||
        br_store_key_add(c->store, KEY_NODE, BR_PRINCIPAL_NODE, "a", &err) < 0)
        return -1;
    if (!c->usage) /* (the fixture may wire it already, as brambled does) */
        c->usage = br_usage_new(c, 0), x->own_usage = 1;
    if (!c->watchers)
        c->watchers = br_watchers_new(), x->own_watchers = 1;
    if (!c->usage || !c->watchers ||
        br_usage_load(c->usage, c->store, br_now_ms(), &err) < 0)
        return -1;
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    world_t *x = *state;
    if (x->own_usage)
        br_usage_destroy(&x->c->usage);
    if (x->own_watchers)
        br_watchers_destroy(&x->c->watchers);
    fixture_two_teardown((void **)&x->w);
    free(x);
    return 0;
}

static uint32_t next_seq = 1;

/* The answer to m among those queued (borrowed), or NULL. */
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

/* The message m's answer carried data (job.logs): its bytes. */
static const void *answer_data(br_coord_t *c, const br_msg_t *m, size_t *len)
{
    for (size_t i = 0; i < br_outbox_count(c->out); i++) {
        const br_msg_t *r = br_outbox_msg(c->out, i);
        if (br_msg_kind(r) == BR_MSG_RESPONSE && br_msg_seq(r) == br_msg_seq(m))
            return br_msg_data(r, len);
    }
    *len = 0;
    return NULL;
}

/* Keep the answers small: forget what was queued (answers and orders). */
static void forget(br_coord_t *c)
{
    fixture_drop_orders(c);
}

/* Send type with body (JSON text, or NULL: {}) from key, as the loop does; the
 * answer is a new reference (the outbox is emptied before the next call). */
static json_t *call_kind(br_coord_t *c, br_msg_kind_t kind, const char *key,
                         const char *type, const char *body)
{
    forget(c);
    br_msg_t *m = br_msg_new(kind, type, next_seq++);
    assert_non_null(m);
    json_error_t je;
    json_t *b = body ? json_loads(body, 0, &je) : json_object();
    if (!b)
        fail_msg("body %s: %s", body, je.text);
    br_msg_set_body(m, b);
    br_msg_set_route(m, "z", 1);
    br_msg_set_user(m, key);
    br_caller_t who;
    br_api_dispatch(c, m, &who);
    json_t *a = answer(c, m);
    br_msg_destroy(&m);
    return json_incref(a);
}

static json_t *call(br_coord_t *c, const char *key, const char *type, const char *body)
{
    return call_kind(c, BR_MSG_REQUEST, key, type, body);
}

static int errnum_of(const json_t *a)
{
    return (int)json_integer_value(json_object_get(a, "errnum"));
}

static const char *text_of(const json_t *a)
{
    const char *t = json_string_value(json_object_get(a, "error"));
    return t ? t : "";
}

/* The call is answered well: its body (new reference). */
static json_t *call_ok(br_coord_t *c, const char *key, const char *type,
                       const char *body)
{
    json_t *a = call(c, key, type, body);
    if (!a)
        fail_msg("%s: no answer", type);
    if (errnum_of(a) || json_object_get(a, "error"))
        fail_msg("%s %s: refused %d '%s'", type, body ? body : "{}", errnum_of(a),
                 text_of(a));
    return a;
}

/* The call is refused with errnum, in words that say says. */
static void call_refused(br_coord_t *c, const char *key, const char *type,
                         const char *body, int errnum, const char *says)
{
    json_t *a = call(c, key, type, body);
    if (!a)
        fail_msg("%s %s: no answer", type, body ? body : "{}");
    if (errnum_of(a) != errnum || !strstr(text_of(a), says))
        fail_msg("%s %s: %d '%s', wanted %d '%s'", type, body ? body : "{}",
                 errnum_of(a), text_of(a), errnum, says);
    json_decref(a);
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static json_int_t num(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* job.submit of spec (YAML) from key: the new job's id. */
static int64_t submit(br_coord_t *c, const char *key, const char *yaml)
{
    json_t *body = json_pack("{s:s, s:[]}", "spec", yaml, "sets");
    char *text = json_dumps(body, 0);
    json_decref(body);
    json_t *a = call_ok(c, key, "job.submit", text);
    free(text);
    int64_t id = num(a, "id");
    assert_true(id > 0);
    json_decref(a);
    return id;
}

static json_t *show(br_coord_t *c, const char *key, int64_t id)
{
    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)id);
    return call_ok(c, key, "job.show", body);
}

/* The ids in a list of objects under key. */
static int has_id(const json_t *list, int64_t id)
{
    size_t i;
    json_t *o;
    json_array_foreach (list, i, o)
        if (num(o, "id") == id)
            return 1;
    return 0;
}

/* --- who may send what ----------------------------------------------------------- */

/* Each admin request from a user is refused in words naming the key it needs; a
 * node may not act as a user; a stranger's and a revoked key's are refused saying
 * so; an unknown type and a wrong kind are malformed; a response is taken silently. */
static void test_who_may_call(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    static const char *const admin_only[] = {
        "token.create", "token.list",  "token.revoke", "node.drain",
        "node.undrain", "node.remove", "user.add",     "user.list",
        "user.remove",  "audit.list",  "user.set",     "node.rotate_key",
    };
    for (size_t i = 0; i < sizeof(admin_only) / sizeof(admin_only[0]); i++)
        call_refused(c, KEY_ANN, admin_only[i], "{\"name\": \"a\"}", EACCES,
                     "needs the admin key");
    call_refused(c, KEY_ANN, "node.drain", "{\"name\": \"a\"}", EACCES,
                 "not allowed: draining nodes needs the admin key");
    assert_int_equal(x->w->a->state, BR_NODE_READY); /* nothing was done */
    call_refused(c, KEY_NODE, "job.submit", NULL, EACCES,
                 "not allowed: submitting jobs needs a user or admin key");
    call_refused(c, KEY_NODE, "job.list", "{\"all\": true}", EACCES,
                 "a user or admin key");
    call_refused(c, KEY_ANN, "node.heartbeat", NULL, EACCES, "needs a node's key");
    call_refused(c, KEY_STRANGER, "ping", NULL, EACCES,
                 "this key is not known to the coordinator");
    call_refused(c, KEY_STRANGER, "job.list", "{\"all\": true}", EACCES,
                 "not allowed: listing jobs: this key is not known");
    br_err_t err = {0};
    assert_int_equal(br_store_key_revoke(c->store, BR_PRINCIPAL_USER, "bob", &err), 0);
    call_refused(c, KEY_BOB, "ping", NULL, EACCES, "this key has been revoked");
    call_refused(c, KEY_ANN, "job.frobnicate", NULL, EPROTO,
                 "unknown message type 'job.frobnicate'");
    json_t *a = call_kind(c, BR_MSG_EVENT, KEY_ANN, "job.submit", NULL);
    assert_null(a); /* an event is never answered */
    forget(c);
    br_msg_t *m = br_msg_new(BR_MSG_EVENT, "job.submit", next_seq++);
    br_msg_set_body(m, json_object());
    br_msg_set_user(m, KEY_ANN);
    br_caller_t who;
    br_api_dispatch(c, m, &who);
    assert_int_equal(br_outbox_count(c->out), 0);
    br_msg_destroy(&m);
    /* agents' receipts (responses) are taken without a word */
    m = br_msg_new(BR_MSG_RESPONSE, "job.run", 7);
    br_msg_set_body(m, json_object());
    br_msg_set_user(m, KEY_NODE);
    br_api_dispatch(c, m, &who);
    assert_int_equal(br_outbox_count(c->out), 0);
    br_msg_destroy(&m);
}

/* ping says who the key is; the admin also hears of dropped sends; it takes no
 * fields. */
static void test_ping(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    json_t *a = call_ok(c, KEY_ANN, "ping", NULL);
    assert_string_equal(str(a, "principal"), "user");
    assert_string_equal(str(a, "name"), "ann");
    assert_string_equal(str(a, "version"), BRAMBLE_VERSION);
    assert_null(json_object_get(a, "sends_dropped"));
    json_decref(a);
    br_stats_set_sends_dropped(c->stats, 5);
    a = call_ok(c, KEY_ADMIN, "ping", NULL);
    assert_string_equal(str(a, "principal"), "admin");
    assert_int_equal(num(a, "sends_dropped"), 5);
    json_decref(a);
    a = call_ok(c, KEY_NODE, "ping", NULL);
    assert_string_equal(str(a, "principal"), "node");
    assert_string_equal(str(a, "name"), "a");
    json_decref(a);
    call_refused(c, KEY_ANN, "ping", "{\"x\": 1}", EPROTO,
                 "ping: bad body: it takes no fields");
}

/* --- jobs ------------------------------------------------------------------------ */

/* A submission is stored as the caller's (name and principal id), pending, with
 * its YAML as sent and an event; one with the same name while it is active is
 * refused; --set values apply; bad bodies and specs are refused naming what. */
static void test_job_submit(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t id = submit(c, KEY_ANN, SPEC_TRAIN);
    br_err_t err = {0};
    json_t *row = br_store_job_get(c->store, id, &err);
    assert_non_null(row);
    assert_string_equal(str(row, "owner"), "ann");
    int64_t ann_id = 0;
    assert_int_equal(
        br_store_principal_id(c->store, BR_PRINCIPAL_USER, "ann", &ann_id, &err), 0);
    assert_int_equal(num(row, "owner_id"), ann_id);
    assert_string_equal(str(row, "state"), "pending");
    assert_string_equal(str(row, "name"), "train");
    assert_string_equal(str(row, "spec_yaml"), SPEC_TRAIN);
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(json_object_get(row, "spec"), "resources"), "cpus")),
        2);
    json_decref(row);
    br_job_t *j = br_jobtab_find(c->jobs, id);
    assert_non_null(j);
    assert_int_equal(j->state, BR_JOB_PENDING);
    json_t *ev = br_store_event_list(c->store, id, 0, 0, &err);
    assert_string_equal(str(json_array_get(ev, 0), "reason"), "submitted by ann");
    json_decref(ev);

    /* the same name while it is active: refused, whoever asks */
    json_t *body = json_pack("{s:s, s:[]}", "spec", SPEC_TRAIN, "sets");
    char *text = json_dumps(body, 0);
    call_refused(c, KEY_BOB, "job.submit", text, EEXIST,
                 "a job named 'train' is already active");
    free(text);
    json_decref(body);

    /* --set overrides the spec */
    body = json_pack("{s:s, s:[s, s]}", "spec", SPEC_TRAIN, "sets", "name=train2",
                     "resources.cpus=3");
    text = json_dumps(body, 0);
    json_t *a = call_ok(c, KEY_BOB, "job.submit", text);
    free(text);
    json_decref(body);
    row = br_store_job_get(c->store, num(a, "id"), &err);
    assert_string_equal(str(row, "name"), "train2");
    assert_string_equal(str(row, "owner"), "bob");
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(json_object_get(row, "spec"), "resources"), "cpus")),
        3);
    json_decref(row);
    json_decref(a);

    /* bodies */
    call_refused(c, KEY_ANN, "job.submit", "{\"spec\": \"name: x\\ncommand: y\\n\"}",
                 EPROTO, "job.submit: bad body");
    call_refused(c, KEY_ANN, "job.submit", "{\"sets\": []}", EPROTO, "spec");
    call_refused(c, KEY_ANN, "job.submit", "{\"spec\": 7, \"sets\": []}", EPROTO,
                 "job.submit: bad body: 'spec'");
    call_refused(c, KEY_ANN, "job.submit",
                 "{\"spec\": \"command: y\\n\", \"sets\": \"a=b\"}", EPROTO,
                 "'sets' must be an array of strings");
    call_refused(c, KEY_ANN, "job.submit",
                 "{\"spec\": \"command: y\\n\", \"sets\": [1]}", EINVAL,
                 "sets: expected strings");
    json_t *many = json_array();
    for (int i = 0; i < 65; i++)
        json_array_append_new(many, json_string("resources.cpus=1"));
    body = json_pack("{s:s, s:o}", "spec", SPEC_TRAIN, "sets", many);
    text = json_dumps(body, 0);
    call_refused(c, KEY_ANN, "job.submit", text, EINVAL,
                 "too many --set values (at most 64)");
    free(text);
    json_decref(body);
    /* specs: a missing field, an unknown one, a service over several nodes */
    call_refused(c, KEY_ANN, "job.submit", "{\"spec\": \"name: x\\n\", \"sets\": []}",
                 EINVAL, "command: required");
    call_refused(c, KEY_ANN, "job.submit",
                 "{\"spec\": \"name: x\\ncommand: y\\nfrobs: 1\\n\", \"sets\": []}",
                 EINVAL, "frobs");
    call_refused(c, KEY_ANN, "job.submit",
                 "{\"spec\": \"name: s\\nkind: service\\ncommand: y\\nresources:\\n  "
                 "nodes: 2\\n\","
                 " \"sets\": []}",
                 ENOTSUP, "each replica runs on one node");
    assert_int_equal(br_jobtab_count(c->jobs), 2); /* train and train2 only */
}

/* job.show: the caller's own job (the admin's: any) with its events, checkpoints
 * and times in seconds; another user's job is "no job N", as one that does not
 * exist; a body without an id, or a negative array index, is refused. */
static void test_job_show(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t before = br_now_ms();
    int64_t id = submit(c, KEY_ANN, SPEC_TRAIN);
    int64_t after = br_now_ms();
    json_t *a = show(c, KEY_ANN, id);
    json_t *job = json_object_get(a, "job");
    assert_int_equal(num(job, "id"), id);
    assert_string_equal(str(job, "name"), "train");
    assert_string_equal(str(job, "state"), "pending");
    assert_string_equal(str(job, "owner"), "ann");
    double submitted = json_real_value(json_object_get(job, "submitted"));
    assert_true(submitted >= before / 1000.0 - 1e-3 &&
                submitted <= after / 1000.0 + 1e-3);
    assert_true(json_is_null(json_object_get(job, "started")));
    assert_null(json_object_get(job, "spec_yaml")); /* not in what users see */
    json_t *events = json_object_get(job, "events");
    assert_true(json_array_size(events) >= 1);
    assert_string_equal(str(json_array_get(events, 0), "reason"), "submitted by ann");
    assert_true(json_is_real(json_object_get(json_array_get(events, 0), "time")));
    assert_true(json_is_array(json_object_get(job, "checkpoints")));
    assert_int_equal(num(job, "log_lost"), 0);
    json_decref(a);

    a = show(c, KEY_ADMIN, id);
    assert_int_equal(num(json_object_get(a, "job"), "id"), id);
    json_decref(a);
    char body[64], want[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)id);
    snprintf(want, sizeof(want), "no job %lld", (long long)id);
    call_refused(c, KEY_BOB, "job.show", body, ENOENT, want);
    call_refused(c, KEY_ANN, "job.show", "{\"id\": 4242}", ENOENT, "no job 4242");
    call_refused(c, KEY_ANN, "job.show", "{}", EPROTO, "job.show: bad body");
    call_refused(c, KEY_ANN, "job.show", "{\"id\": \"one\"}", EPROTO, "'id'");
    call_refused(c, KEY_ANN, "job.show", "{\"id\": 1, \"limit\": 3}", EPROTO,
                 "bad body");
    snprintf(body, sizeof(body), "{\"id\": %lld, \"index\": -2}", (long long)id);
    call_refused(c, KEY_ANN, "job.show", body, EINVAL,
                 "index: an array task's index is not negative");
}

/* job.list: a user lists their own jobs, the admin everyone's; without "all" a job
 * that ended more than ten minutes ago is left out; the spec is not in the list. */
static void test_job_list(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t mine = submit(c, KEY_ANN, SPEC_TRAIN);
    int64_t old = submit(c, KEY_ANN, "name: old\ncommand: x\n");
    int64_t bobs = submit(c, KEY_BOB, "name: bobs\ncommand: x\n");
    /* old ended an hour ago */
    br_err_t err = {0};
    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld, \"now\": true}", (long long)old);
    json_decref(call_ok(c, KEY_ANN, "job.cancel", body));
    json_t *f = json_pack("{s:I}", "ended", (json_int_t)(br_now_ms() - 3600 * 1000));
    assert_int_equal(br_store_job_update(c->store, old, f, &err), 0);
    json_decref(f);

    json_t *a = call_ok(c, KEY_ANN, "job.list", "{\"all\": false}");
    json_t *jobs = json_object_get(a, "jobs");
    assert_true(has_id(jobs, mine));
    assert_false(has_id(jobs, old));
    assert_false(has_id(jobs, bobs));
    assert_null(json_object_get(json_array_get(jobs, 0), "spec"));
    json_decref(a);
    a = call_ok(c, KEY_ANN, "job.list", "{\"all\": true}");
    jobs = json_object_get(a, "jobs");
    assert_true(has_id(jobs, mine) && has_id(jobs, old));
    assert_false(has_id(jobs, bobs));
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "job.list", "{\"all\": true}");
    jobs = json_object_get(a, "jobs");
    assert_true(has_id(jobs, mine) && has_id(jobs, old) && has_id(jobs, bobs));
    json_decref(a);
    call_refused(c, KEY_ANN, "job.list", NULL, EPROTO, "job.list: bad body");
    call_refused(c, KEY_ANN, "job.list", "{\"all\": 1}", EPROTO, "'all'");
}

/* job.cancel: a pending job ends cancelled at once (the answer and the store say
 * so); a running one is told to stop (job.kill to its node) and stays running in
 * its grace; another user cannot cancel it (no such job); an ended job cannot be
 * cancelled again. */
static void test_job_cancel(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t id = submit(c, KEY_ANN, SPEC_TRAIN);
    char body[64], want[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)id);
    snprintf(want, sizeof(want), "no job %lld", (long long)id);
    call_refused(c, KEY_BOB, "job.cancel", body, ENOENT, want);
    assert_int_equal(br_jobtab_find(c->jobs, id)->state, BR_JOB_PENDING);
    json_t *a = call_ok(c, KEY_ANN, "job.cancel", body);
    assert_string_equal(str(json_object_get(a, "job"), "state"), "cancelled");
    json_decref(a);
    br_err_t err = {0};
    json_t *row = br_store_job_get(c->store, id, &err);
    assert_string_equal(str(row, "state"), "cancelled");
    json_decref(row);
    json_t *again = call(c, KEY_ANN, "job.cancel", body);
    assert_true(errnum_of(again) != 0); /* nothing to cancel */
    json_decref(again);

    /* running: placed on a node, started there */
    int64_t run =
        submit(c, KEY_ANN, "name: runner\ncommand: x\nresources:\n  cpus: 2\n");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, run);
    assert_non_null(j);
    assert_true(j->nranks > 0);
    br_node_t *n = br_nodes_find(c->nodes, j->ranks[0].node);
    br_jobs_started(c, run, 1, n, 0);
    assert_int_equal(j->state, BR_JOB_RUNNING);
    /* node.show lists it on its node, with what is left free */
    snprintf(body, sizeof(body), "{\"name\": \"%s\"}", n->name);
    a = call_ok(c, KEY_ANN, "node.show", body);
    json_t *node = json_object_get(a, "node");
    assert_int_equal(json_array_size(json_object_get(node, "jobs")), 1);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(node, "jobs"), 0)), run);
    assert_int_equal(num(json_object_get(node, "free"), "cpus"), 2);
    json_decref(a);
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)run);
    a = call_ok(c, KEY_ANN, "job.cancel", body);
    assert_string_equal(str(json_object_get(a, "job"), "state"),
                        "running"); /* its grace */
    assert_non_null(fixture_order(c, "job.kill", n));
    json_decref(a);
    call_refused(c, KEY_ANN, "job.cancel", "{\"id\": 1, \"now\": \"yes\"}", EPROTO,
                 "'now'");
}

/* stream.open to a running job whose node's agent said no stream frames version in
 * its hello (a bramble-agent from before sealed streams): refused at once, naming
 * the node and what to do, rather than left to time out at the relay; once the
 * agent says it seals them, the request goes on (to the relay, which this
 * coordinator, made without one, has not). */
static void test_stream_open_to_an_older_agent(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t run = submit(c, KEY_ANN, "name: runner\ncommand: x\nresources:\n  cpus: 2\n");
    br_sched_run(c);
    br_job_t *j = br_jobtab_find(c->jobs, run);
    assert_non_null(j);
    br_node_t *n = br_nodes_find(c->nodes, j->ranks[0].node);
    br_jobs_started(c, run, 1, n, 0);
    assert_int_equal(j->state, BR_JOB_RUNNING);
    char body[96], want[160];
    snprintf(body, sizeof(body), "{\"id\": %lld, \"kind\": \"shell\"}", (long long)run);
    snprintf(want, sizeof(want), "node %s runs a bramble-agent older than this coordinator",
             n->name);
    call_refused(c, KEY_ANN, "stream.open", body, EPROTONOSUPPORT, want);
    call_refused(c, KEY_ANN, "stream.open", body, EPROTONOSUPPORT,
                 "upgrade bramble-agent there");
    snprintf(body, sizeof(body), "{\"id\": %lld, \"kind\": \"forward\", \"port\": 80}",
             (long long)run);
    call_refused(c, KEY_ANN, "stream.open", body, EPROTONOSUPPORT, want);
    json_object_set_new(n->info, "streams", json_integer(1)); /* (an older version) */
    call_refused(c, KEY_ANN, "stream.open", body, EPROTONOSUPPORT, want);
    json_object_set_new(n->info, "streams", json_integer(BR_STREAM_VERSION));
    call_refused(c, KEY_ANN, "stream.open", body, ENOTSUP, "relays no streams");
}

/* job.logs: the job's output after a cursor, as chunks (stream, rank, attempt,
 * len) with the bytes in the answer's data; end once an ended job has no more. */
static void test_job_logs(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t id = submit(c, KEY_ANN, SPEC_TRAIN);
    br_err_t err = {0};
    assert_int_equal(
        br_store_log_add(c->store, id, 1, 0, 1, 0, 1000, "hello\n", 6, &err), 0);
    assert_int_equal(
        br_store_log_add(c->store, id, 1, 0, 2, 0, 1001, "oops\n", 5, &err), 0);
    char body[96];
    snprintf(body, sizeof(body), "{\"id\": %lld, \"after\": 0, \"rank\": -1}",
             (long long)id);
    forget(c);
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.logs", next_seq++);
    json_error_t je;
    br_msg_set_body(m, json_loads(body, 0, &je));
    br_msg_set_route(m, "z", 1);
    br_msg_set_user(m, KEY_ANN);
    br_caller_t who;
    br_api_dispatch(c, m, &who);
    json_t *a = answer(c, m);
    assert_non_null(a);
    assert_int_equal(errnum_of(a), 0);
    json_t *chunks = json_object_get(a, "chunks");
    assert_int_equal(json_array_size(chunks), 2);
    assert_int_equal(num(json_array_get(chunks, 0), "stream"), 1);
    assert_int_equal(num(json_array_get(chunks, 0), "len"), 6);
    assert_int_equal(num(json_array_get(chunks, 1), "stream"), 2);
    assert_false(json_is_true(json_object_get(a, "end"))); /* pending: more may come */
    assert_int_equal(num(a, "ranks"), 1);
    json_int_t next = num(a, "next");
    assert_true(next > 0);
    size_t len;
    const char *data = answer_data(c, m, &len);
    assert_int_equal(len, 11);
    assert_memory_equal(data, "hello\noops\n", 11);
    br_msg_destroy(&m);

    /* cancelled, nothing after the cursor: the end */
    snprintf(body, sizeof(body), "{\"id\": %lld, \"now\": true}", (long long)id);
    json_decref(call_ok(c, KEY_ANN, "job.cancel", body));
    snprintf(body, sizeof(body), "{\"id\": %lld, \"after\": %lld, \"rank\": -1}",
             (long long)id, (long long)next);
    a = call_ok(c, KEY_ANN, "job.logs", body);
    assert_int_equal(json_array_size(json_object_get(a, "chunks")), 0);
    assert_true(json_is_true(json_object_get(a, "end")));
    json_decref(a);
    call_refused(c, KEY_BOB, "job.logs", body, ENOENT, "no job");
    call_refused(c, KEY_ANN, "job.logs", "{\"id\": 1, \"after\": 0}", EPROTO, "rank");
}

/* job.queue: the pending jobs in their order; a user sees their own (with their
 * places among everyone's), the admin all. */
static void test_job_queue(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t big1 = submit(c, KEY_BOB, "name: b1\ncommand: x\nresources:\n  cpus: 64\n");
    int64_t big2 = submit(c, KEY_ANN, "name: a1\ncommand: x\nresources:\n  cpus: 64\n");
    (void)big1;
    json_t *a = call_ok(c, KEY_ANN, "job.queue", NULL);
    assert_int_equal(num(a, "pending"), 2);
    json_t *jobs = json_object_get(a, "jobs");
    assert_int_equal(json_array_size(jobs), 1);
    assert_int_equal(num(json_array_get(jobs, 0), "id"), big2);
    assert_true(num(json_array_get(jobs, 0), "position") >= 1);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "job.queue", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "jobs")), 2);
    json_decref(a);
}

/* --- nodes ----------------------------------------------------------------------- */

/* node.list / node.show: every node, its state, whether it is connected, what is
 * free, its jobs; never its key. drain / undrain by the admin change the state (the
 * answer shows it, the store keeps it, an event says who); remove forgets the node
 * and revokes its key; rotate_key orders a connected node only. */
static void test_nodes(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    json_t *a = call_ok(c, KEY_ANN, "node.list", NULL);
    json_t *nodes = json_object_get(a, "nodes");
    assert_int_equal(json_array_size(nodes), 2);
    json_t *na = json_array_get(nodes, 0);
    assert_string_equal(str(na, "name"), "a");
    assert_string_equal(str(na, "state"), "ready");
    assert_true(json_is_true(json_object_get(na, "connected")));
    assert_null(json_object_get(na, "pubkey"));
    assert_null(json_object_get(na, "token"));
    assert_int_equal(num(json_object_get(na, "free"), "cpus"), 4);
    assert_int_equal(json_array_size(json_object_get(na, "jobs")), 0);
    assert_true(json_is_real(json_object_get(na, "last_seen")));
    assert_true(json_object_get(na, "labels") != NULL); /* always there, null if none */
    json_decref(a);

    call_refused(c, KEY_ANN, "node.show", "{\"name\": \"nosuch\"}", ENOENT,
                 "no node named 'nosuch'");
    call_refused(c, KEY_ANN, "node.show", "{}", EPROTO, "node.show: bad body");
    call_refused(c, KEY_ADMIN, "node.drain", "{\"name\": 3}", EPROTO, "'name'");

    a = call_ok(c, KEY_ADMIN, "node.drain", "{\"name\": \"a\"}");
    assert_string_equal(str(json_object_get(a, "node"), "state"), "draining");
    json_decref(a);
    assert_int_equal(x->w->a->state, BR_NODE_DRAINING);
    br_err_t err = {0};
    json_t *stored = br_store_node_list(c->store, &err);
    assert_string_equal(str(json_array_get(stored, 0), "state"), "draining");
    json_decref(stored);
    json_t *ev = br_store_event_list(c->store, 0, 0, 0, &err);
    const char *last = str(json_array_get(ev, json_array_size(ev) - 1), "reason");
    assert_non_null(strstr(last, "drained by admin"));
    json_decref(ev);
    a = call_ok(c, KEY_ADMIN, "node.drain", "{\"name\": \"a\"}"); /* again: no change */
    assert_string_equal(str(json_object_get(a, "node"), "state"), "draining");
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "node.undrain", "{\"name\": \"a\"}");
    assert_string_equal(str(json_object_get(a, "node"), "state"), "ready");
    json_decref(a);
    call_refused(c, KEY_ADMIN, "node.undrain", "{\"name\": \"zz\"}", ENOENT,
                 "no node named");

    a = call_ok(c, KEY_ADMIN, "node.rotate_key", "{\"name\": \"b\"}");
    assert_string_equal(str(a, "name"), "b");
    assert_true(json_is_true(json_object_get(a, "ordered")));
    assert_non_null(fixture_order(c, "node.rekey", x->w->b));
    json_decref(a);
    x->w->b->route_len = 0; /* b's agent is gone */
    call_refused(c, KEY_ADMIN, "node.rotate_key", "{\"name\": \"b\"}", ENOTCONN,
                 "node b is not connected");

    /* remove: the node is forgotten, its key refused from now on */
    a = call_ok(c, KEY_ADMIN, "node.remove", "{\"name\": \"a\"}");
    json_decref(a);
    x->w->a = NULL;
    call_refused(c, KEY_ANN, "node.show", "{\"name\": \"a\"}", ENOENT,
                 "no node named 'a'");
    call_refused(c, KEY_NODE, "ping", NULL, EACCES, "this key has been revoked");
    a = call_ok(c, KEY_ANN, "node.list", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "nodes")), 1);
    json_decref(a);
    a = call_ok(c, KEY_ANN, "node.probe", NULL);
    assert_true(json_is_object(a));
    json_decref(a);
}

/* --- users ----------------------------------------------------------------------- */

/* user.add: the new user's key works at once and the answer names the endpoint to
 * dial; names, keys, unix users and limits are checked before anything is written;
 * user.list shows everyone with their limits. */
static void test_user_add_and_list(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    json_t *a = call_ok(c, KEY_ADMIN, "user.add",
                        "{\"name\": \"carol\", \"public_key\": \"" KEY_NEW
                        "\", "
                        "\"unix_user\": \"carol_x\", \"limits\": {\"max_gpus\": 2}}");
    assert_string_equal(str(a, "name"), "carol");
    assert_string_equal(str(a, "endpoint"), "tcp://coord.example:7700");
    json_decref(a);
    a = call_ok(c, KEY_NEW, "ping", NULL);
    assert_string_equal(str(a, "principal"), "user");
    assert_string_equal(str(a, "name"), "carol");
    json_decref(a);

    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"carol\", \"public_key\": \"" KEY_STRANGER "\"}", EEXIST,
                 "user 'carol' exists already");
    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"dan\", \"public_key\": \"" KEY_ANN "\"}", EEXIST,
                 "that key is already in use");
    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"admin\", \"public_key\": \"" KEY_STRANGER "\"}", EINVAL,
                 "(not 'admin')");
    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"Dan!\", \"public_key\": \"" KEY_STRANGER "\"}", EINVAL,
                 "user name 'Dan!'");
    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"dan\", \"public_key\": \"short\"}", EINVAL,
                 "public_key: not 40 characters of Z85");
    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"dan\", \"public_key\": \"" KEY_STRANGER
                 "\", \"unix_user\": \"Root\"}",
                 EINVAL, "unix user 'Root'");
    call_refused(c, KEY_ADMIN, "user.add",
                 "{\"name\": \"dan\", \"public_key\": \"" KEY_STRANGER
                 "\", "
                 "\"limits\": {\"max_gpus\": -1}}",
                 EINVAL, "max_gpus");
    call_refused(c, KEY_ADMIN, "user.add", "{\"name\": \"dan\"}", EPROTO, "public_key");
    /* none of the refused ones made a user, or let their key in */
    call_refused(c, KEY_STRANGER, "ping", NULL, EACCES, "not known");

    a = call_ok(c, KEY_ADMIN, "user.list", NULL);
    json_t *users = json_object_get(a, "users");
    size_t i;
    json_t *u;
    int seen = 0;
    json_array_foreach (users, i, u) {
        const char *name = str(u, "name");
        assert_true(json_is_object(json_object_get(u, "limits")));
        if (strcmp(name, "carol") == 0) {
            seen |= 1;
            assert_string_equal(str(u, "kind"), "user");
            assert_int_equal(num(json_object_get(u, "limits"), "max_gpus"), 2);
            assert_true(json_is_real(json_object_get(u, "created")));
        } else if (strcmp(name, "admin") == 0) {
            seen |= 2;
            assert_string_equal(str(u, "kind"), "admin");
        } else if (strcmp(name, "ann") == 0) {
            seen |= 4;
        }
    }
    assert_int_equal(seen, 7);
    json_decref(a);
}

/* user.set: a unix user and limits (null drops one) for an existing user; an
 * unknown user is refused, so is a body with nothing to set. */
static void test_user_set(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    json_t *a = call_ok(c, KEY_ADMIN, "user.set",
                        "{\"name\": \"ann\", \"unix_user\": \"ann\", "
                        "\"limits\": {\"max_gpus\": 4, \"max_pending\": 10}}");
    assert_string_equal(str(a, "unix_user"), "ann");
    assert_int_equal(num(json_object_get(a, "limits"), "max_gpus"), 4);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "user.set",
                "{\"name\": \"ann\", \"limits\": {\"max_gpus\": null}}");
    json_t *lim = json_object_get(a, "limits");
    assert_null(json_object_get(lim, "max_gpus"));
    assert_int_equal(num(lim, "max_pending"), 10); /* kept */
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "user.set", "{\"name\": \"ann\", \"unix_user\": null}");
    assert_true(json_is_null(json_object_get(a, "unix_user")));
    json_decref(a);
    call_refused(c, KEY_ADMIN, "user.set", "{\"name\": \"nosuch\", \"limits\": {}}",
                 ENOENT, "no user 'nosuch'");
    call_refused(c, KEY_ADMIN, "user.set", "{\"name\": \"ann\"}", EINVAL,
                 "give unix_user, limits or both");
    call_refused(c, KEY_ADMIN, "user.set", "{\"name\": \"ann\", \"unix_user\": 5}",
                 EINVAL, "unix_user must be a string or null");
}

/* user.remove: the user's active jobs are cancelled (or handed to the admin), and
 * their key is refused from then on; the admin cannot be removed. */
static void test_user_remove(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t ann_job = submit(c, KEY_ANN, SPEC_TRAIN);
    int64_t bob_job = submit(c, KEY_BOB, "name: bobs\ncommand: x\n");
    json_t *a = call_ok(c, KEY_ADMIN, "user.remove", "{\"name\": \"ann\"}");
    assert_int_equal(num(a, "jobs"), 1);
    assert_string_equal(str(a, "jobs_were"), "cancelled");
    json_decref(a);
    br_err_t err = {0};
    json_t *row = br_store_job_get(c->store, ann_job, &err);
    assert_string_equal(str(row, "state"), "cancelled");
    json_decref(row);
    call_refused(c, KEY_ANN, "ping", NULL, EACCES, "this key has been revoked");

    a = call_ok(c, KEY_ADMIN, "user.remove",
                "{\"name\": \"bob\", \"jobs\": \"admin\"}");
    assert_int_equal(num(a, "jobs"), 1);
    assert_string_equal(str(a, "jobs_were"), "handed to the admin");
    json_decref(a);
    row = br_store_job_get(c->store, bob_job, &err);
    assert_string_equal(str(row, "state"), "pending");
    assert_string_equal(str(row, "owner"), "admin");
    json_decref(row);

    call_refused(c, KEY_ADMIN, "user.remove", "{\"name\": \"admin\"}", EINVAL,
                 "the admin cannot be removed");
    call_refused(c, KEY_ADMIN, "user.remove", "{\"name\": \"ann\"}", ENOENT,
                 "no user 'ann'");
    call_refused(c, KEY_ADMIN, "user.remove", "{\"name\": \"x\", \"jobs\": \"keep\"}",
                 EINVAL, "jobs must be 'cancel' or 'admin'");
}

/* user.rotate_key: the new key is the same principal (same jobs), the old one is
 * refused from then on. */
static void test_user_rotate_key(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t id = submit(c, KEY_ANN, SPEC_TRAIN);
    json_decref(
        call_ok(c, KEY_ANN, "user.rotate_key", "{\"public_key\": \"" KEY_NEW "\"}"));
    call_refused(c, KEY_ANN, "ping", NULL, EACCES, "revoked");
    json_t *a = show(c, KEY_NEW, id); /* still ann's job */
    assert_string_equal(str(json_object_get(a, "job"), "owner"), "ann");
    json_decref(a);
    call_refused(c, KEY_NEW, "user.rotate_key", "{\"public_key\": \"nope\"}", EINVAL,
                 "public_key must be a CURVE public key");
    call_refused(c, KEY_NEW, "user.rotate_key", "{\"public_key\": \"" KEY_BOB "\"}",
                 EEXIST, "key already registered"); /* bob's: not taken over */
}

/* --- tokens ---------------------------------------------------------------------- */

/* token.create: a join token (ttl and uses) or a metrics token (no uses; ttl 0
 * never expires); token.list shows them with times in seconds; token.revoke. */
static void test_tokens(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t now = br_now_ms();
    json_t *a =
        call_ok(c, KEY_ADMIN, "token.create", "{\"ttl\": 3600000, \"uses\": 2}");
    assert_string_equal(str(a, "kind"), "join");
    const char *id = str(a, "id");
    assert_non_null(id);
    assert_true(strlen(str(a, "token")) > 20);
    double expires = json_real_value(json_object_get(a, "expires"));
    assert_true(fabs(expires - (now + 3600000) / 1000.0) < 5);
    char join_id[64];
    br_strlcpy(join_id, id, sizeof(join_id));
    json_decref(a);

    a = call_ok(c, KEY_ADMIN, "token.create", "{\"ttl\": 0, \"kind\": \"metrics\"}");
    assert_string_equal(str(a, "kind"), "metrics");
    assert_true(json_is_null(json_object_get(a, "expires"))); /* never */
    assert_true(json_is_null(json_object_get(a, "http")));    /* no HTTP side here */
    assert_int_equal(c->http_tokens_dirty,
                     1); /* handed to the HTTP side after the wake */
    json_decref(a);

    a = call_ok(c, KEY_ADMIN, "token.list", NULL);
    json_t *tokens = json_object_get(a, "tokens");
    assert_int_equal(json_array_size(tokens), 2);
    size_t i;
    json_t *t;
    int found = 0;
    json_array_foreach (tokens, i, t) {
        if (str(t, "id") && strcmp(str(t, "id"), join_id) == 0) {
            found = 1;
            assert_true(json_is_real(json_object_get(t, "created")));
            assert_true(json_is_real(json_object_get(t, "expires")));
        }
    }
    assert_true(found);
    json_decref(a);

    char body[96];
    snprintf(body, sizeof(body), "{\"id\": \"%s\"}", join_id);
    c->http_tokens_dirty = 0;
    json_decref(call_ok(c, KEY_ADMIN, "token.revoke", body));
    assert_int_equal(c->http_tokens_dirty, 1);
    call_refused(c, KEY_ADMIN, "token.revoke", "{\"id\": \"nosuch\"}", ENOENT,
                 "no token 'nosuch'");

    call_refused(c, KEY_ADMIN, "token.create", "{\"ttl\": 60000}", EINVAL,
                 "a join token needs uses");
    call_refused(c, KEY_ADMIN, "token.create", "{\"ttl\": 0, \"uses\": 1}", EINVAL,
                 "ttl must be within a year and uses 1..100000");
    call_refused(c, KEY_ADMIN, "token.create", "{\"ttl\": 60000, \"uses\": 0}", EINVAL,
                 "uses 1..100000");
    call_refused(c, KEY_ADMIN, "token.create", "{\"ttl\": 40000000000, \"uses\": 1}",
                 EINVAL, "within a year");
    call_refused(c, KEY_ADMIN, "token.create",
                 "{\"ttl\": 0, \"kind\": \"metrics\", \"uses\": 1}", EINVAL,
                 "a metrics token has no uses");
    call_refused(c, KEY_ADMIN, "token.create", "{\"ttl\": 1, \"kind\": \"party\"}",
                 EINVAL, "kind must be join or metrics, not 'party'");
    call_refused(c, KEY_ADMIN, "token.create", "{\"uses\": 1}", EPROTO, "ttl");
}

/* --- usage, events, audit -------------------------------------------------------- */

/* usage.show: a user sees their own, the admin anyone's (by name) or everyone's;
 * a user asking for another's is refused (EPERM); an unknown user ENOENT. */
static void test_usage_show(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    br_err_t err = {0};
    int64_t ann = 0, bob = 0;
    br_store_principal_id(c->store, BR_PRINCIPAL_USER, "ann", &ann, &err);
    br_store_principal_id(c->store, BR_PRINCIPAL_USER, "bob", &bob, &err);
    int64_t hour = br_now_ms() / 3600000;
    assert_int_equal(
        br_store_usage_add(c->store, ann, hour, 7200000, 3600000, 1500000, &err), 0);
    assert_int_equal(br_store_usage_add(c->store, bob, hour, 3600000, 0, 0, &err), 0);

    json_t *a = call_ok(c, KEY_ANN, "usage.show", NULL);
    json_t *users = json_object_get(a, "users");
    assert_int_equal(json_array_size(users), 1);
    json_t *row = json_array_get(users, 0);
    assert_string_equal(str(row, "user"), "ann");
    assert_true(fabs(json_number_value(json_object_get(row, "gpu_hours")) - 2.0) <
                1e-9);
    assert_true(fabs(json_number_value(json_object_get(row, "cpu_hours")) - 1.0) <
                1e-9);
    assert_true(fabs(json_number_value(json_object_get(row, "cost")) - 1.5) < 1e-9);
    assert_int_equal(num(a, "since"), 0);
    json_decref(a);
    a = call_ok(c, KEY_ANN, "usage.show",
                "{\"user\": \"ann\"}"); /* their own by name */
    assert_int_equal(json_array_size(json_object_get(a, "users")), 1);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "usage.show", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "users")), 2);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "usage.show", "{\"user\": \"bob\"}");
    users = json_object_get(a, "users");
    assert_int_equal(json_array_size(users), 1);
    assert_string_equal(str(json_array_get(users, 0), "user"), "bob");
    json_decref(a);
    /* since the next hour: nothing yet */
    char body[64];
    snprintf(body, sizeof(body), "{\"since\": %lld}",
             (long long)((hour + 1) * 3600000));
    a = call_ok(c, KEY_ADMIN, "usage.show", body);
    assert_int_equal(json_array_size(json_object_get(a, "users")), 0);
    json_decref(a);
    call_refused(c, KEY_ANN, "usage.show", "{\"user\": \"bob\"}", EPERM,
                 "only the admin sees another user's usage");
    call_refused(c, KEY_ADMIN, "usage.show", "{\"user\": \"nosuch\"}", ENOENT,
                 "no user 'nosuch'");
    call_refused(c, KEY_ANN, "usage.show", "{\"since\": \"yesterday\"}", EPROTO,
                 "'since'");
}

/* event.list: a user sees node events and their own jobs' events, not other
 * users'; the admin sees all; next is the last id read (so a follower skips
 * what it may not see); one job's events only for a job the caller may see;
 * limits and ids are checked. event.watch: checked the same way. */
static void test_events(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    int64_t mine = submit(c, KEY_ANN, SPEC_TRAIN);
    int64_t bobs = submit(c, KEY_BOB, "name: bobs\ncommand: x\n");
    br_coord_event(c, 0, "a", "ready", "a node event");
    json_t *a =
        call_ok(c, KEY_ANN, "event.list", "{\"after\": 0, \"job\": 0, \"limit\": 0}");
    json_t *events = json_object_get(a, "events");
    int mine_seen = 0, node_seen = 0;
    size_t i;
    json_t *e;
    json_array_foreach (events, i, e) {
        json_t *job = json_object_get(e, "job");
        if (json_is_integer(job)) {
            assert_int_not_equal(json_integer_value(job), bobs);
            mine_seen |= json_integer_value(job) == mine;
        } else {
            node_seen = 1;
        }
        assert_true(json_is_real(json_object_get(e, "time")));
    }
    assert_true(mine_seen && node_seen);
    br_err_t err = {0};
    json_t *all = br_store_event_list(c->store, 0, 0, 0, &err);
    json_int_t last = num(json_array_get(all, json_array_size(all) - 1), "id");
    assert_int_equal(num(a, "next"), last);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "event.list", "{\"after\": 0, \"job\": 0, \"limit\": 0}");
    assert_int_equal(json_array_size(json_object_get(a, "events")),
                     json_array_size(all));
    json_decref(a);
    /* after the last: none, and next stays */
    char body[96];
    snprintf(body, sizeof(body), "{\"after\": %lld, \"job\": 0, \"limit\": 10}",
             (long long)last);
    a = call_ok(c, KEY_ANN, "event.list", body);
    assert_int_equal(json_array_size(json_object_get(a, "events")), 0);
    assert_int_equal(num(a, "next"), last);
    json_decref(a);
    /* limit 1 from the start: the first event only */
    a = call_ok(c, KEY_ADMIN, "event.list", "{\"after\": 0, \"job\": 0, \"limit\": 1}");
    assert_int_equal(json_array_size(json_object_get(a, "events")), 1);
    json_decref(a);
    json_decref(all);

    snprintf(body, sizeof(body), "{\"after\": 0, \"job\": %lld, \"limit\": 0}",
             (long long)bobs);
    call_refused(c, KEY_ANN, "event.list", body, ENOENT, "no job");
    a = call_ok(c, KEY_BOB, "event.list", body);
    assert_true(json_array_size(json_object_get(a, "events")) >= 1);
    json_decref(a);
    call_refused(c, KEY_ANN, "event.list",
                 "{\"after\": 0, \"job\": 0, \"limit\": 10001}", EINVAL,
                 "limit is 0 (the most, 10000) to 10000");
    call_refused(c, KEY_ANN, "event.list", "{\"after\": -1, \"job\": 0, \"limit\": 0}",
                 EINVAL, "after and job are ids");
    call_refused(c, KEY_ANN, "event.list", "{\"after\": 0, \"limit\": 0}", EPROTO,
                 "job");

    a = call_ok(c, KEY_ANN, "event.watch", "{\"job\": 0}");
    assert_int_equal(num(a, "ttl_ms"), BR_WATCH_TTL_MS);
    json_decref(a);
    assert_int_equal(br_watchers_count(c->watchers), 1);
    snprintf(body, sizeof(body), "{\"job\": %lld, \"logs\": true}", (long long)mine);
    json_decref(call_ok(c, KEY_ANN, "event.watch", body));
    snprintf(body, sizeof(body), "{\"job\": %lld}", (long long)bobs);
    call_refused(c, KEY_ANN, "event.watch", body, ENOENT, "no job");
    call_refused(c, KEY_ANN, "event.watch", "{\"job\": 0, \"logs\": true}", EINVAL,
                 "logs needs one job, not 0");
    call_refused(c, KEY_ANN, "event.watch", "{\"job\": -4}", EINVAL,
                 "job must be an id, or 0 for every job");
}

/* audit.list: the admin's actions, with times in seconds; its bounds checked. */
static void test_audit_list(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    br_err_t err = {0};
    assert_int_equal(br_store_audit_add(c->store, 1700000000500, 1, "admin",
                                        "node.drain", "a", "done", &err),
                     0);
    assert_int_equal(br_store_audit_add(c->store, 1700000001000, 1, "admin", "user.add",
                                        "ann", "done", &err),
                     0);
    json_t *a = call_ok(c, KEY_ADMIN, "audit.list", NULL);
    json_t *entries = json_object_get(a, "entries");
    assert_int_equal(json_array_size(entries), 2);
    json_t *first = json_array_get(entries, 0);
    assert_string_equal(str(first, "action"), "node.drain");
    assert_true(fabs(json_real_value(json_object_get(first, "time")) - 1700000000.5) <
                1e-6);
    json_int_t first_id = num(first, "id");
    json_decref(a);
    char body[64];
    snprintf(body, sizeof(body), "{\"after\": %lld}", (long long)first_id);
    a = call_ok(c, KEY_ADMIN, "audit.list", body);
    assert_int_equal(json_array_size(json_object_get(a, "entries")), 1);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "audit.list", "{\"limit\": 1}");
    assert_int_equal(json_array_size(json_object_get(a, "entries")), 1);
    json_decref(a);
    call_refused(c, KEY_ADMIN, "audit.list", "{\"limit\": 100001}", EINVAL,
                 "after must be >= 0 and limit 0..100000");
    call_refused(c, KEY_ADMIN, "audit.list", "{\"after\": -1}", EINVAL,
                 "after must be >= 0");
}

/* service.endpoints / service.scale: a running service by name, the owner's or
 * (the admin) anyone's: scaled, the answer says from what to what; another user's
 * is refused (EACCES: unlike a job, its existence is told), an unknown one ENOENT,
 * a replica count out of range EINVAL; a replica cannot be cancelled alone. */
static void test_services(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    call_refused(c, KEY_ANN, "service.scale", "{\"name\": \"web\", \"replicas\": 1001}",
                 EINVAL, "replicas: 1001 is out of range (0..1000)");
    call_refused(c, KEY_ANN, "service.scale", "{\"name\": \"web\"}", EPROTO,
                 "replicas");
    call_refused(c, KEY_ANN, "service.endpoints", "{\"name\": \"web\"}", ENOENT,
                 "no running service named 'web'");
    call_refused(c, KEY_ANN, "service.scale", "{\"name\": \"web\", \"replicas\": 2}",
                 ENOENT, "no running service named 'web'");
    json_t *a;
    call_refused(c, KEY_ANN, "service.endpoints", "{}", EPROTO,
                 "service.endpoints: bad body");

    /* ann's service of two replicas: scaled by her (or the admin), not by bob */
    int64_t svc = submit(c, KEY_ANN,
                         "name: web\nkind: service\ncommand: x\n"
                         "resources: {cpus: 1}\nservice:\n  replicas: 2\n"
                         "  port: 8000\n");
    a = call_ok(c, KEY_ANN, "service.endpoints", "{\"name\": \"web\"}");
    assert_int_equal(num(a, "replicas"), 2);
    assert_int_equal(json_array_size(json_object_get(a, "endpoints")),
                     0); /* none healthy */
    json_decref(a);
    a = call_ok(c, KEY_ANN, "service.scale", "{\"name\": \"web\", \"replicas\": 3}");
    assert_int_equal(num(a, "id"), svc);
    assert_int_equal(num(a, "replicas"), 3);
    assert_int_equal(num(a, "was"), 2);
    json_decref(a);
    call_refused(c, KEY_BOB, "service.scale", "{\"name\": \"web\", \"replicas\": 0}",
                 EACCES, "service 'web' is not yours");
    a = call_ok(c, KEY_ADMIN, "service.scale", "{\"name\": \"web\", \"replicas\": 1}");
    assert_int_equal(num(a, "was"), 3);
    json_decref(a);
    /* a replica is not cancelled on its own: the service is scaled or cancelled */
    a = call_ok(c, KEY_ANN, "job.list", "{\"all\": true}");
    json_t *jobs = json_object_get(a, "jobs");
    size_t i;
    json_t *j;
    int64_t replica = 0;
    json_array_foreach (jobs, i, j)
        if (num(j, "id") != svc)
            replica = num(j, "id");
    json_decref(a);
    assert_true(replica > 0);
    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)replica);
    call_refused(c, KEY_ANN, "job.cancel", body, EINVAL, "scale the service");
}

/* node.env_rm: the admin has a node's agent remove an environment its last
 * heartbeat listed (env.rm); one it does not keep, an unknown node, a node not
 * connected and a body without the key are refused, each saying which. */
static void test_node_env_rm(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    json_object_set_new(x->w->a->info, "envs",
                        json_pack("[{s:s}, {s:s}]", "key", "0a1b2c", "key", "3d4e5f"));
    json_t *a = call_ok(c, KEY_ADMIN, "node.env_rm", "{\"name\": \"a\", \"key\": \"3d4e5f\"}");
    assert_string_equal(str(a, "name"), "a");
    assert_string_equal(str(a, "key"), "3d4e5f");
    assert_true(json_is_true(json_object_get(a, "ordered")));
    json_decref(a);
    json_t *order = fixture_order(c, "env.rm", x->w->a);
    assert_non_null(order);
    assert_string_equal(str(order, "key"), "3d4e5f");
    assert_null(fixture_order(c, "env.rm", x->w->b));

    call_refused(c, KEY_ADMIN, "node.env_rm", "{\"name\": \"a\", \"key\": \"ffffff\"}",
                 ENOENT, "node a keeps no environment 'ffffff' ('bramble node show a' "
                 "lists them)");
    assert_null(fixture_order(c, "env.rm", x->w->a)); /* nothing was ordered */
    call_refused(c, KEY_ADMIN, "node.env_rm", "{\"name\": \"b\", \"key\": \"3d4e5f\"}",
                 ENOENT, "node b keeps no environment '3d4e5f'");
    call_refused(c, KEY_ADMIN, "node.env_rm", "{\"name\": \"zz\", \"key\": \"3d4e5f\"}",
                 ENOENT, "no node named 'zz'");
    call_refused(c, KEY_ADMIN, "node.env_rm", "{\"name\": \"a\"}", EPROTO,
                 "node.env_rm: bad body");
    call_refused(c, KEY_ANN, "node.env_rm", "{\"name\": \"a\", \"key\": \"3d4e5f\"}",
                 EACCES, "removing a node's environments needs the admin key");
    x->w->a->route_len = 0; /* a's agent is gone: it cannot be told */
    call_refused(c, KEY_ADMIN, "node.env_rm", "{\"name\": \"a\", \"key\": \"3d4e5f\"}",
                 ENOTCONN, "node a is not connected");
    assert_null(fixture_order(c, "env.rm", x->w->a));
}

/* service.list: the running services with what the gateways say of them, the
 * caller's own (the admin's: everyone's); a node may not ask. */
static void test_service_list(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    json_t *a = call_ok(c, KEY_ANN, "service.list", NULL);
    assert_true(json_is_array(json_object_get(a, "services")));
    assert_int_equal(json_array_size(json_object_get(a, "services")), 0);
    json_decref(a);

    int64_t svc = submit(c, KEY_ANN,
                         "name: web\nkind: service\ncommand: x\n"
                         "resources: {cpus: 1}\nservice:\n  replicas: 2\n"
                         "  port: 8000\n  model: llama-3-8b\n");
    submit(c, KEY_ANN, SPEC_TRAIN); /* a plain job is no service */
    a = call_ok(c, KEY_ANN, "service.list", NULL);
    json_t *list = json_object_get(a, "services");
    assert_int_equal(json_array_size(list), 1);
    json_t *web = json_array_get(list, 0);
    assert_int_equal(num(web, "id"), svc);
    assert_string_equal(str(web, "name"), "web");
    assert_string_equal(str(web, "owner"), "ann");
    assert_string_equal(str(web, "model"), "llama-3-8b");
    assert_true(json_is_array(json_object_get(web, "aliases")));
    assert_true(json_is_array(json_object_get(web, "adapters")));
    assert_int_equal(num(web, "replicas_wanted"), 2);
    assert_true(json_is_null(json_object_get(web, "autoscale")));
    json_t *load = json_object_get(web, "load"); /* no gateway reported: all zero */
    assert_int_equal(num(load, "inflight"), 0);
    assert_int_equal(num(load, "waiting"), 0);
    assert_int_equal(num(load, "gateways"), 0);
    assert_true(json_is_real(json_object_get(load, "rate")));
    json_decref(a);

    a = call_ok(c, KEY_BOB, "service.list", NULL); /* not bob's */
    assert_int_equal(json_array_size(json_object_get(a, "services")), 0);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "service.list", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "services")), 1);
    json_decref(a);
    call_refused(c, KEY_NODE, "service.list", NULL, EACCES,
                 "managing services needs a user or admin key");

    char body[64];
    snprintf(body, sizeof(body), "{\"id\": %lld}", (long long)svc);
    json_decref(call_ok(c, KEY_ANN, "job.cancel", body)); /* a cancelled one is gone */
    a = call_ok(c, KEY_ADMIN, "service.list", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "services")), 0);
    json_decref(a);
}

/* A tree of one file, train.py, stored in c's content store as an upload leaves it:
 * its listing (the manifest's text) whole in the store. code.stage's body for spec
 * with it into body (len bytes); the manifest's hash into mhash. */
static void stage_body(br_coord_t *c, const char *dir, const char *spec, char *body,
                       size_t len, char mhash[65])
{
    char path[160];
    snprintf(path, sizeof(path), "%s/train.py", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("print('training')\n", f);
    fclose(f);
    br_err_t err;
    br_mfbuild_t *b = br_mfbuild_new(NULL, &err);
    assert_non_null(b);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    assert_true(fd >= 0 && fstat(fd, &st) == 0);
    assert_int_equal(br_mfbuild_file(b, fd, &st, "train.py", NULL, &err), 0);
    close(fd);
    json_t *m = br_mfbuild_json(b, "dir", &err);
    br_mfbuild_destroy(&b);
    assert_non_null(m);
    char *text = json_dumps(m, JSON_COMPACT);
    size_t tlen = strlen(text);
    unsigned char h[crypto_generichash_BYTES];
    char lhash[2 * crypto_generichash_BYTES + 1];
    crypto_generichash(h, sizeof(h), (const unsigned char *)text, tlen, NULL, 0);
    sodium_bin2hex(lhash, sizeof(lhash), h, sizeof(h));
    int64_t held, ann;
    int whole = 0;
    assert_int_equal(br_store_principal_id(c->store, BR_PRINCIPAL_USER, "ann", &ann, &err), 0);
    /* (sent by ann, who calls with it: a listing is hers to name once she sent it) */
    assert_int_equal(br_content_write(c->content, lhash, ann, (int64_t)tlen, 0, text, tlen,
                                      &held, &whole, &err), 0);
    assert_true(whole);
    free(text);
    br_strlcpy(mhash, str(m, "hash"), 65);
    json_t *o = json_pack("{s:s, s:[], s:{s:s, s:I}, s:{s:s, s:s, s:O, s:O}}", "spec", spec,
                          "sets", "listing", "hash", lhash, "size", (json_int_t)tlen,
                          "manifest", "hash", mhash, "root", "dir", "files",
                          json_object_get(m, "files"), "bytes", json_object_get(m, "bytes"));
    char *t = json_dumps(o, 0);
    br_strlcpy(body, t, len);
    free(t);
    json_decref(o);
    json_decref(m);
}

/* Knowing a hash grants nothing: ann's listing, sent by her, is stored, yet
 * content.lack tells bob it is lacking (he must send the bytes himself), and his
 * content.lack of the tree it lists is refused as not stored; for ann and the admin
 * it is there. */
static void test_knowing_a_hash_grants_nothing(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    char dir[128], body[2048], mhash[65], q[512];
    br_err_t err;
    snprintf(dir, sizeof(dir), "%s/content", x->w->f.dir);
    c->content = br_content_open(dir, 0, &err);
    assert_non_null(c->content);
    stage_body(c, x->w->f.dir, "name: t\ncommand: python train.py\n", body, sizeof(body),
               mhash);
    json_t *o = json_loads(body, 0, NULL);
    json_t *listing = json_object_get(o, "listing");
    snprintf(q, sizeof(q), "{\"contents\": [{\"hash\": \"%s\", \"size\": %lld}]}",
             json_string_value(json_object_get(listing, "hash")),
             (long long)json_integer_value(json_object_get(listing, "size")));
    json_t *a = call_ok(c, KEY_BOB, "content.lack", q);
    assert_int_equal(json_array_size(json_object_get(a, "lack")), 1);
    json_decref(a);
    a = call_ok(c, KEY_ANN, "content.lack", q);
    assert_int_equal(json_array_size(json_object_get(a, "lack")), 0);
    json_decref(a);
    a = call_ok(c, KEY_ADMIN, "content.lack", q);
    assert_int_equal(json_array_size(json_object_get(a, "lack")), 0);
    json_decref(a);
    char says[200];
    snprintf(says, sizeof(says), "the manifest's listing %.16s... is not stored: send it "
                                 "first (content.put)",
             json_string_value(json_object_get(listing, "hash")));
    json_object_del(o, "spec"); /* (content.lack of a whole tree: its listing, manifest) */
    json_object_del(o, "sets");
    char *t = json_dumps(o, 0);
    /* bob's refusal lets go of no listing ann's upload under way wrote (charged to
     * her as content.put does), though nothing refers to it yet */
    int64_t ann = 0;
    assert_int_equal(br_store_principal_id(c->store, BR_PRINCIPAL_USER, "ann", &ann, &err),
                     0);
    if (!c->uploads)
        c->uploads = br_uploads_new();
    assert_int_equal(br_uploads_add(c->uploads, ann, json_string_value(json_object_get(
                                        listing, "hash")),
                                    json_integer_value(json_object_get(listing, "size")), 0),
                     0);
    call_refused(c, KEY_BOB, "content.lack", t, ENOENT, says);
    br_content_sweep(c->content, c->store); /* (the wake's end) */
    a = call_ok(c, KEY_ANN, "content.lack", t);
    assert_int_equal(json_array_size(json_object_get(a, "lack")), 1); /* (her file: unsent) */
    json_decref(a);
    free(t);
    json_decref(o);
    br_content_destroy(&c->content);
}

/* code.stage: the node a job would go to now fetches its code while it is uploaded
 * (tree.stage), named in the answer; nothing is staged for a spec the submit would
 * refuse, a service, a job that fits nowhere or a node that holds the tree (held);
 * a listing not stored yet and a body without a manifest are refused, saying why. */
static void test_code_stage(void **state)
{
    world_t *x = *state;
    br_coord_t *c = x->c;
    char dir[128], body[2048], mhash[65];
    br_err_t err;
    snprintf(dir, sizeof(dir), "%s/content", x->w->f.dir);
    assert_null(c->content);
    c->content = br_content_open(dir, 0, &err);
    assert_non_null(c->content);
    stage_body(c, x->w->f.dir, "name: t\ncommand: python train.py\nresources: {cpus: 2}\n",
               body, sizeof(body), mhash);

    /* no node's agent fetches trees yet: the job fits nowhere now, nothing staged */
    json_t *a = call_ok(c, KEY_ANN, "code.stage", body);
    assert_int_equal(json_object_size(a), 0);
    json_decref(a);
    json_object_set_new(x->w->a->info, "trees", json_object());
    json_object_set_new(x->w->b->info, "trees", json_object());

    a = call_ok(c, KEY_ANN, "code.stage", body);
    const char *name = str(a, "node");
    assert_non_null(name);
    br_node_t *n = br_nodes_find(c->nodes, name), *other = n == x->w->a ? x->w->b : x->w->a;
    assert_non_null(n);
    assert_null(json_object_get(a, "held"));
    json_t *order = fixture_order(c, "tree.stage", n);
    assert_non_null(order);
    assert_int_equal(strncmp(str(order, "grant"), "stage:", 6), 0);
    json_t *om = json_object_get(order, "manifest");
    assert_string_equal(str(om, "hash"), mhash);
    assert_string_equal(str(om, "root"), "dir");
    assert_true(json_is_true(json_object_get(om, "truncated")));
    assert_non_null(json_object_get(om, "listing"));
    assert_null(fixture_order(c, "tree.stage", other));
    json_decref(a);
    /* asked again while that stage lasts: the same node, not ordered twice */
    a = call_ok(c, KEY_ANN, "code.stage", body);
    assert_string_equal(str(a, "node"), n->name);
    assert_null(fixture_order(c, "tree.stage", n));
    json_decref(a);
    /* once the node holds the tree: named as holding it, nothing staged */
    json_object_set_new(json_object_get(n->info, "trees"), mhash, json_true());
    a = call_ok(c, KEY_ANN, "code.stage", body);
    assert_string_equal(str(a, "node"), n->name);
    assert_true(json_is_true(json_object_get(a, "held")));
    assert_null(fixture_order(c, "tree.stage", n));
    assert_null(fixture_order(c, "tree.stage", other));
    json_decref(a);

    /* what job.submit would refuse, a service, a job too big: {} (the submit says why) */
    static const char *const none[] = {
        "name: t\ncommand: x\nresources: {cpus: 2}\nbogus: 1\n",
        "name: web\nkind: service\ncommand: x\nresources: {cpus: 1}\n"
        "service:\n  replicas: 1\n  port: 8000\n",
        "name: t\ncommand: x\nresources: {cpus: 64}\n",
    };
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        char other_body[2048];
        stage_body(c, x->w->f.dir, none[i], other_body, sizeof(other_body), mhash);
        a = call_ok(c, KEY_ANN, "code.stage", other_body);
        assert_int_equal(json_object_size(a), 0);
        assert_int_equal(br_outbox_count(c->out), 1); /* the answer, no order */
        json_decref(a);
    }

    /* a listing the store lacks: the upload must send it first */
    json_t *o = json_loads(body, 0, NULL);
    json_t *listing = json_object_get(o, "listing");
    json_object_set_new(listing, "hash", json_string("00000000000000000000000000000000"
                                                     "00000000000000000000000000000000"));
    json_object_set_new(json_object_get(o, "manifest"), "hash",
                        json_string("11111111111111111111111111111111"
                                    "11111111111111111111111111111111"));
    char *t = json_dumps(o, 0);
    call_refused(c, KEY_ANN, "code.stage", t, ENOENT,
                 "the manifest's listing 0000000000000000... is not stored: send it first "
                 "(content.put)");
    free(t);
    json_object_set_new(o, "manifest", json_pack("{s:i}", "files", 1));
    t = json_dumps(o, 0);
    call_refused(c, KEY_ANN, "code.stage", t, EPROTO, "code.stage: the manifest has no hash");
    free(t);
    json_object_del(o, "manifest");
    t = json_dumps(o, 0);
    call_refused(c, KEY_ANN, "code.stage", t, EPROTO, "code.stage: bad body");
    free(t);
    json_decref(o);
    call_refused(c, KEY_NODE, "code.stage", body, EACCES,
                 "uploading files needs a user or admin key");
    br_content_destroy(&c->content);
}

/* Who may see a job (a store row): the admin any; a user the jobs of their own
 * principal id only, not by name (a new user under a removed user's name is
 * someone else); a row without an owner id is the admin's alone. */
static void test_may_see(void **state)
{
    (void)state;
    br_caller_t admin = {BR_PRINCIPAL_ADMIN, "admin", 1},
                ann = {BR_PRINCIPAL_USER, "ann", 2},
                ann_again = {BR_PRINCIPAL_USER, "ann", 9},
                node = {BR_PRINCIPAL_NODE, "a", 2};
    json_t *job = json_pack("{s:s, s:I}", "owner", "ann", "owner_id", (json_int_t)2);
    json_t *orphan = json_pack("{s:s}", "owner", "ann");
    assert_true(br_coord_may_see(&admin, job));
    assert_true(br_coord_may_see(&ann, job));
    assert_false(br_coord_may_see(&ann_again, job));
    assert_true(br_coord_may_see(&admin, orphan));
    assert_false(br_coord_may_see(&ann, orphan));
    (void)node;
    json_decref(job);
    json_decref(orphan);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_who_may_call),
        T(test_ping),
        T(test_job_submit),
        T(test_job_show),
        T(test_job_list),
        T(test_job_cancel),
        T(test_stream_open_to_an_older_agent),
        T(test_job_logs),
        T(test_job_queue),
        T(test_nodes),
        T(test_user_add_and_list),
        T(test_user_set),
        T(test_user_remove),
        T(test_user_rotate_key),
        T(test_tokens),
        T(test_usage_show),
        T(test_events),
        T(test_audit_list),
        T(test_services),
        T(test_node_env_rm),
        T(test_service_list),
        T(test_knowing_a_hash_grants_nothing),
        T(test_code_stage),
        cmocka_unit_test(test_may_see),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
