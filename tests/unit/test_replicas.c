/* test_replicas.c - the coordinator's replica orders (coordinator/ckpt/replicas.c) carried
 * out by two agents' replica sides (agent/replica.c) over real CURVE sockets: a
 * checkpoint granted on its writer, pulled into another node's store and reported,
 * deduplicated on the next step, restored into the checkpoint's own path, dropped;
 * a node that opted out; what a pull cut short left swept at start; the disk
 * figures looked at off the loop; the choice of targets; a heartbeat's disk
 * checked. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cred.h"
#include "manifest.h"
#include "msg.h"
#include "replica.h"
#include "replicas.h"
#include "settings.h"
#include "util.h"

typedef struct {
    char root[64];
    char dir[PATH_MAX], src[PATH_MAX];
    br_settings_t a, b; /* the writer and the node that holds a replica */
    br_replica_t *ra, *rb;
    json_t *m;
} fix_t;

static void put(const char *path, size_t len, int seed)
{
    unsigned char *b = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)((i * 13 + (size_t)seed * 101 + (i >> 9)) & 0xff);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, len), (ssize_t)len);
    close(fd);
    free(b);
}

static void node(fix_t *f, br_settings_t *s, const char *name, int64_t quota)
{
    br_err_t err;
    br_settings_init(s);
    snprintf(s->data_dir, sizeof(s->data_dir), "%s/%s", f->root, name);
    br_strlcpy(s->name, name, sizeof(s->name));
    assert_int_equal(br_keypair(s->cred.public_key, s->cred.secret_key, &err), 0);
    s->replica_port = 0;
    s->replica_quota = quota;
    s->allow_root_jobs = 1; /* the tests may run as root: jobs as the agent */
    br_settings_finish(s);
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    br_err_t err;
    char p[PATH_MAX];
    snprintf(f->root, sizeof(f->root), "/tmp/test_replicas.XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/a/ckpt", f->root);
    snprintf(f->src, sizeof(f->src), "%s/checkpoint-10", f->dir);
    if (br_mkdir_p(f->src, 0755, &err) < 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/shard-%d.bin", f->src, i);
        put(p, 400 * 1024, i);
    }
    f->m = br_manifest_build(f->dir, f->src, NULL, NULL, &err);
    node(f, &f->a, "a", -1);
    node(f, &f->b, "b", -1);
    f->ra = br_replica_new(&f->a, &err);
    f->rb = f->ra ? br_replica_new(&f->b, &err) : NULL;
    if (!f->m || !f->rb)
        fail_msg("setup: %s", err.text);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    br_replica_destroy(&f->ra);
    br_replica_destroy(&f->rb);
    br_settings_free(&f->a);
    br_settings_free(&f->b);
    json_decref(f->m);
    br_rm_tree(AT_FDCWD, f->root);
    free(f);
    return 0;
}

/* Hand an order to a node's replica side as its agent would. */
static int order(br_replica_t *r, const char *type, json_t *body, br_err_t *err)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, 1);
    br_msg_set_body(m, body);
    *err = (br_err_t){0};
    int rc = strcmp(type, "ckpt.serve") == 0   ? br_replica_serve(r, m, NULL, err)
             : strcmp(type, "ckpt.fetch") == 0 ? br_replica_fetch(r, m, err)
                                               : br_replica_drop(r, m, err);
    br_msg_destroy(&m);
    return rc;
}

static json_t *wait_stored(br_replica_t *r)
{
    int64_t t0 = br_mono_ms();
    json_t *b;
    while (!(b = br_replica_take(r))) {
        struct pollfd p = {br_replica_fd(r), POLLIN, 0};
        assert_true(br_mono_ms() - t0 < 30000);
        poll(&p, 1, 1000);
    }
    return b;
}

/* The coordinator's two orders for moving k from->to; the ckpt.stored body. */
static json_t *move(fix_t *f, br_replica_t *from, const br_settings_t *fs,
                    br_replica_t *to, const br_settings_t *ts,
                    const br_replica_ckpt_t *k, int from_store, int restore)
{
    char grant[128];
    br_err_t err;
    br_replicas_grant_id(k->job,
                         json_string_value(json_object_get(k->manifest, "hash")),
                         ts->name, grant, sizeof(grant));
    if (order(from, "ckpt.serve",
              br_replicas_serve_order(k, grant, ts->name, ts->cred.public_key, 60000,
                                      from_store),
              &err) < 0)
        fail_msg("ckpt.serve: %s", err.text);
    if (order(to, "ckpt.fetch",
              br_replicas_fetch_order(k, grant, fs->name, "127.0.0.1",
                                      br_replica_port(from), fs->cred.public_key,
                                      restore),
              &err) < 0)
        fail_msg("ckpt.fetch: %s", err.text);
    return wait_stored(to);
}

/* The heartbeat's disk figures, once the replica side's thread has looked. */
static json_t *disk_now(br_replica_t *r)
{
    int64_t t0 = br_mono_ms();
    json_t *d = br_replica_disk(r, NULL, 0, t0);
    while (!d) {
        assert_true(br_mono_ms() - t0 < 30000);
        usleep(2000);
        d = br_replica_disk(r, NULL, 0, br_mono_ms());
    }
    return d;
}

#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static int same(const char *path, const json_t *m)
{
    char dir[PATH_MAX];
    br_err_t err;
    br_strlcpy(dir, path, sizeof(dir));
    *strrchr(dir, '/') = '\0';
    json_t *got = br_manifest_build(dir, path, NULL, NULL, &err);
    int ok = got && strcmp(json_string_value(json_object_get(got, "hash")),
                           json_string_value(json_object_get(m, "hash"))) == 0;
    json_decref(got);
    return ok;
}

static void test_replicate_and_restore(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX];
    br_err_t err;
    br_replica_ckpt_t k = {
        .job = 7, .step = 10, .manifest = f->m, .path = f->src, .dir = f->dir};
    json_t *st = move(f, f->ra, &f->a, f->rb, &f->b, &k, 0, 0);
    assert_null(json_object_get(st, "error"));
    assert_int_equal(json_integer_value(json_object_get(st, "received")),
                     json_integer_value(json_object_get(f->m, "bytes")));
    assert_int_equal(json_integer_value(json_object_get(st, "job")), 7);
    json_decref(st);
    snprintf(p, sizeof(p), "%s/7/%s/checkpoint-10", f->b.replica_dir,
             json_string_value(json_object_get(f->m, "hash")));
    assert_true(same(p, f->m));

    /* the next step changes one shard of four: one is sent */
    char src2[PATH_MAX];
    snprintf(src2, sizeof(src2), "%s/checkpoint-20", f->dir);
    assert_int_equal(rename(f->src, src2), 0);
    snprintf(p, sizeof(p), "%s/shard-2.bin", src2);
    put(p, 400 * 1024, 77);
    json_t *m2 = br_manifest_build(f->dir, src2, NULL, NULL, &err);
    assert_non_null(m2);
    br_replica_ckpt_t k2 = {
        .job = 7, .step = 20, .manifest = m2, .path = src2, .dir = f->dir};
    st = move(f, f->ra, &f->a, f->rb, &f->b, &k2, 0, 0);
    assert_null(json_object_get(st, "error"));
    assert_int_equal(json_integer_value(json_object_get(st, "received")), 400 * 1024);
    json_decref(st);

    /* node a lost its copy: it restores step 20 from b's replica */
    br_rm_tree(AT_FDCWD, src2);
    st = move(f, f->rb, &f->b, f->ra, &f->a, &k2, 1, 1);
    if (json_object_get(st, "error"))
        fail_msg("restore: %s", json_string_value(json_object_get(st, "error")));
    assert_true(same(src2, m2));
    json_decref(st);

    /* the older replica goes; the files step 20 shares with it stay */
    assert_int_equal(order(f->rb, "ckpt.drop",
                           json_pack("{s:i, s:s}", "job", 7, "hash",
                                     json_string_value(json_object_get(f->m, "hash"))),
                           &err),
                     0);
    snprintf(p, sizeof(p), "%s/7/%s", f->b.replica_dir,
             json_string_value(json_object_get(f->m, "hash")));
    struct stat sb;
    assert_int_equal(lstat(p, &sb), -1);
    snprintf(p, sizeof(p), "%s/7/%s/checkpoint-20", f->b.replica_dir,
             json_string_value(json_object_get(m2, "hash")));
    assert_true(same(p, m2));
    json_t *disk = disk_now(f->rb);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(disk, "replicas"), "used")),
        json_integer_value(json_object_get(m2, "bytes")));
    assert_int_equal(br_replicas_check_disk(disk, &err), 0);
    json_decref(disk);
    json_decref(m2);
}

static void test_opted_out(void **state)
{
    fix_t *f = *state;
    br_err_t err;
    br_settings_t c;
    node(f, &c, "c", 0);
    br_replica_t *rc = br_replica_new(&c, &err);
    assert_non_null(rc);
    br_replica_ckpt_t k = {
        .job = 7, .step = 10, .manifest = f->m, .path = f->src, .dir = f->dir};
    assert_int_equal(
        order(rc, "ckpt.fetch",
              br_replicas_fetch_order(&k, "g", "a", "127.0.0.1", br_replica_port(f->ra),
                                      f->a.cred.public_key, 0),
              &err),
        -1);
    assert_int_equal(err.errnum, ENOSPC);
    json_t *disk = disk_now(rc);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(disk, "replicas"), "quota")),
        0);
    json_decref(disk);
    br_replica_destroy(&rc);
    br_settings_free(&c);
    /* a restore outside the checkpoint dir is refused */
    k.path = "/etc/checkpoint-10";
    assert_int_equal(order(f->rb, "ckpt.fetch",
                           br_replicas_fetch_order(&k, "g", "a", "127.0.0.1", 1,
                                                   f->a.cred.public_key, 1),
                           &err),
                     -1);
    assert_int_equal(err.errnum, EINVAL);
}

static void test_pick(void **state)
{
    (void)state;
    br_replica_cand_t c[] = {
        {"a", 1, 7704, -1, 0, 1000, 0, -1},     /* the writer */
        {"b", 1, 7704, -1, 0, 1000, 10, 5},     /* 10 MB/s */
        {"c", 1, 7704, -1, 0, 1000, 100, 5},    /* 100 MB/s */
        {"d", 1, 7704, 0, 0, 1000, 500, 1},     /* opted out */
        {"e", 0, 7704, -1, 0, 1000, 500, 1},    /* not ready */
        {"f", 1, 0, -1, 0, 1000, 500, 1},       /* serves nothing */
        {"g", 1, 7704, 500, 100, 1000, 900, 1}, /* its quota leaves 400 */
        {"h", 1, 7704, -1, 0, 50, 900, 1},      /* a full disk */
        {"i", 1, 7704, -1, 0, 2000, 0, 3},      /* not measured: by round trip */
        {"j", 1, 7704, -1, 0, 3000, 0, -1},     /* nothing measured: by room */
    };
    int out[8], n = br_replicas_pick(c, 10, "a", 450, 8, out);
    assert_int_equal(n, 4);
    const char *want[] = {"c", "b", "i", "j"};
    for (int i = 0; i < n; i++)
        assert_string_equal(c[out[i]].node, want[i]);
    assert_int_equal(br_replicas_pick(c, 10, "a", 450, 1, out), 1);
    assert_string_equal(c[out[0]].node, "c");
    assert_int_equal(br_replicas_pick(c, 10, "a", 350, 8, out), 5); /* g fits */
    assert_string_equal(c[out[0]].node, "g");
    assert_int_equal(br_replicas_pick(c, 10, "a", 1 << 20, 8, out), 0);
}

static void test_check_disk(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int ok;
    } cases[] = {
        {"{}", 1},
        {"{\"replicas\": {\"quota\": -1, \"used\": 0, \"free\": 5}, \"checkpoints\": "
         "[]}",
         1},
        {"{\"replicas\": {\"quota\": 0, \"used\": 0}}", 1},
        {"{\"checkpoints\": [{\"dir\": \"/srv/ckpt\", \"free\": 1}]}", 1},
        {"{\"replicas\": {\"quota\": -2, \"used\": 0}}", 0},
        {"{\"replicas\": {\"quota\": 1, \"used\": -1}}", 0},
        {"{\"replicas\": {\"quota\": 1, \"used\": 0, \"extra\": 1}}", 0},
        {"{\"checkpoints\": [{\"dir\": \"rel\", \"free\": 1}]}", 0},
        {"{\"checkpoints\": {}}", 0},
        {"{\"other\": 1}", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_err_t err = {0};
        json_t *d = json_loads(cases[i].json, 0, NULL);
        assert_non_null(d);
        int rc = br_replicas_check_disk(d, &err);
        if (cases[i].ok != (rc == 0))
            fail_msg("%s: %s", cases[i].json, rc ? err.text : "taken");
        if (rc < 0)
            assert_non_null(strstr(err.text, "'disk'"));
        json_decref(d);
    }
}

/* What a pull cut short by a crash left in the store goes when the agent starts
 * again; whole replicas stay. */
static void test_unfinished_pull_swept(void **state)
{
    fix_t *f = *state;
    br_err_t err;
    char p[PATH_MAX];
    br_replica_destroy(&f->rb);
    const char *store = f->b.replica_dir;
    const char *cut[] = {"7/" HASH_A "/.bramble-pull-checkpoint-10",
                         "7/" HASH_A "/.bramble-pull-checkpoint-10.tmp",
                         "8/" HASH_B "/.bramble-pull-checkpoint-20.tmp",
                         "8/" HASH_B "/checkpoint-15"};
    for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", store, cut[i]);
        assert_int_equal(br_mkdir_p(p, 0700, &err), 0);
        snprintf(p, sizeof(p), "%s/%s/part", store, cut[i]);
        put(p, 1000, (int)i);
    }
    f->rb = br_replica_new(&f->b, &err);
    assert_non_null(f->rb);
    snprintf(p, sizeof(p), "%s/7", store);
    assert_int_equal(access(p, F_OK), -1); /* nothing but leftovers: gone */
    snprintf(p, sizeof(p), "%s/8/%s/.bramble-pull-checkpoint-20.tmp", store, HASH_B);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof(p), "%s/8/%s/checkpoint-15/part", store, HASH_B);
    assert_int_equal(access(p, F_OK), 0); /* a whole replica stays */
}

/* The disk figures come from the replica side's own thread: once per look, each
 * checkpoint dir once, one that is not there left out. */
static void test_disk_figures(void **state)
{
    fix_t *f = *state;
    const char *dirs[] = {f->dir, f->dir, "/nonexistent/ckpt"};
    int64_t t0 = br_mono_ms();
    json_t *d = br_replica_disk(f->ra, dirs, 3, t0);
    while (!d) {
        assert_true(br_mono_ms() - t0 < 30000);
        usleep(2000);
        d = br_replica_disk(f->ra, dirs, 3, br_mono_ms());
    }
    json_t *ck = json_object_get(d, "checkpoints");
    assert_int_equal(json_array_size(ck), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(ck, 0), "dir")), f->dir);
    assert_true(json_integer_value(json_object_get(json_array_get(ck, 0), "free")) > 0);
    assert_true(json_integer_value(
                    json_object_get(json_object_get(d, "replicas"), "free")) > 0);
    json_decref(d);
    assert_null(br_replica_disk(f->ra, dirs, 3, br_mono_ms())); /* nothing new yet */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replicate_and_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_opted_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unfinished_pull_swept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_figures, setup, teardown),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_check_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
