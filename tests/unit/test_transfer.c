/* test_transfer.c - checkpoint transfer between two real endpoints over real CURVE
 * sockets in one process (agent/holder.c, agent/puller.c): a whole pull verified,
 * dedup by hash (a changed file is the only one sent), a link dropped mid-file
 * resumed from its offset, a corrupt byte on the holder caught, paths outside the
 * manifest refused, an unknown key refused by ZAP, an expired grant, a symlink
 * swapped in on the holder, a full disk leaving nothing visible, the thread (a
 * restore ahead of the replicas), files read as the job's user, and a checkpoint
 * whose manifest is too big for a report (its whole listing fetched first). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "cred.h"
#include "err.h"
#include "holder.h"
#include "listing.h"
#include "manifest.h"
#include "msg.h"
#include "puller.h"
#include "sock.h"
#include "util.h"

#define NFILES 10
#define FILE_LEN (300 * 1024) /* more than one chunk */

typedef struct {
    char root[64];           /* mkdtemp */
    char dir[PATH_MAX];      /* root/ckpt: the checkpoint dir */
    char src[PATH_MAX];      /* root/ckpt/checkpoint-100 */
    char hpub[41], hsec[41]; /* the holder's node key */
    char ppub[41], psec[41]; /* the puller's */
    char ep[64];
    br_holder_t *h;
    json_t *m;
    void *ctx;
} fix_t;

static void put(const char *path, size_t len, int seed)
{
    unsigned char *b = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)((i * 131 + (size_t)seed * 17 + (i >> 8)) & 0xff);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    assert_int_equal(write(fd, b, len), (ssize_t)len);
    close(fd);
    free(b);
}

static void src_file(fix_t *f, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s%d.bin", f->src, i < 5 ? "" : "sub/", i);
}

static json_t *manifest_of(const char *dir, const char *path)
{
    br_err_t err = {0};
    json_t *m = br_manifest_build(dir, path, NULL, NULL, &err);
    if (!m)
        fail_msg("manifest of %s: %s", path, err.text);
    return m;
}

static void grant(fix_t *f, const char *id, const json_t *m, int64_t ttl_ms)
{
    br_err_t err;
    br_grant_t g = {.id = id,
                    .peer_key = f->ppub,
                    .peer_name = "node-b",
                    .dir = f->dir,
                    .path = f->src,
                    .manifest = m,
                    .ttl_ms = ttl_ms};
    if (br_holder_grant(f->h, &g, &err) < 0)
        fail_msg("grant: %s", err.text);
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    char p[PATH_MAX];
    br_err_t err;
    snprintf(f->root, sizeof(f->root), "/tmp/test_transfer.XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/ckpt", f->root);
    snprintf(f->src, sizeof(f->src), "%s/checkpoint-100", f->dir);
    snprintf(p, sizeof(p), "%s/sub", f->src);
    if (br_mkdir_p(p, 0755, &err) < 0)
        return -1;
    for (int i = 0; i < NFILES; i++) {
        src_file(f, i, p, sizeof(p));
        put(p, FILE_LEN + (size_t)i * 1000, i);
    }
    snprintf(p, sizeof(p), "%s/empty", f->src);
    put(p, 0, 0);
    snprintf(p, sizeof(p), "%s/latest", f->src);
    if (symlink("sub/5.bin", p) < 0)
        return -1;
    f->m = manifest_of(f->dir, f->src);
    if (br_keypair(f->hpub, f->hsec, &err) < 0 ||
        br_keypair(f->ppub, f->psec, &err) < 0)
        return -1;
    f->h = br_holder_new("tcp://127.0.0.1:0", f->hsec, 0, &err);
    if (!f->h)
        fail_msg("holder: %s", err.text);
    snprintf(f->ep, sizeof(f->ep), "tcp://127.0.0.1:%d", br_holder_port(f->h));
    grant(f, "g1", f->m, 60000);
    f->ctx = zmq_ctx_new();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    br_holder_destroy(&f->h);
    zmq_ctx_term(f->ctx);
    json_decref(f->m);
    br_rm_tree(AT_FDCWD, f->root);
    free(f);
    return 0;
}

static br_pull_req_t req(fix_t *f, const char *dest, const json_t *m)
{
    return (br_pull_req_t){.endpoint = f->ep,
                           .server_key = f->hpub,
                           .public_key = f->ppub,
                           .secret_key = f->psec,
                           .peer_name = "node-a",
                           .grant = "g1",
                           .manifest = m,
                           .dest = dest,
                           .limit = -1,
                           .stall_ms = 2000};
}

static json_t *pull(fix_t *f, const br_pull_req_t *r, br_pull_stats_t *st,
                    br_err_t *err)
{
    *err = (br_err_t){0};
    return br_pull_run(f->ctx, r, NULL, st, err);
}

static json_int_t num(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* dest holds exactly what the manifest m says. */
static void same_as(const char *dest, const json_t *m)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", dest);
    *strrchr(dir, '/') = '\0';
    json_t *got = manifest_of(dir, dest);
    assert_string_equal(json_string_value(json_object_get(got, "hash")),
                        json_string_value(json_object_get(m, "hash")));
    json_decref(got);
}

static int exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int exists(const char *fmt, ...)
{
    char p[PATH_MAX];
    struct stat st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof(p), fmt, ap);
    va_end(ap);
    return lstat(p, &st) == 0;
}

/* --- the tests ----------------------------------------------------------------------
 */

static void test_full_pull(void **state)
{
    fix_t *f = *state;
    char dest[PATH_MAX];
    br_err_t err;
    br_pull_stats_t st = {0};
    snprintf(dest, sizeof(dest), "%s/restore/ckpt/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, f->m);
    json_t *res = pull(f, &r, &st, &err);
    if (!res)
        fail_msg("pull: %s", err.text);
    same_as(dest, f->m);
    assert_int_equal(num(res, "received"), num(f->m, "bytes"));
    assert_int_equal(num(res, "deduped"), 0);
    assert_int_equal(st.files_fetched, NFILES + 1);
    assert_false(exists("%s/restore/ckpt/.bramble-pull-checkpoint-100", f->root));
    assert_false(exists("%s/restore/ckpt/.bramble-pull-checkpoint-100.tmp", f->root));
    br_holder_stats_t hs;
    br_holder_stats(f->h, &hs);
    assert_int_equal(hs.bytes_sent, num(f->m, "bytes"));
    assert_int_equal(hs.refused, 0);
    json_decref(res);
    /* the same pull again: everything is at hand, nothing is sent */
    res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("pull again: %s", err.text);
    assert_int_equal(num(res, "received"), 0);
    assert_int_equal(num(res, "deduped"), num(f->m, "bytes"));
    same_as(dest, f->m);
    json_decref(res);
}

/* Change one file of ten: the next checkpoint's pull sends that file alone, into a
 * replica store (hard links by hash) and into an old copy of the checkpoint. */
static void test_dedup(void **state)
{
    fix_t *f = *state;
    char store[PATH_MAX], d1[PATH_MAX], d2[PATH_MAX], p[PATH_MAX], restore[PATH_MAX];
    br_err_t err;
    snprintf(store, sizeof(store), "%s/replicas", f->root);
    snprintf(d1, sizeof(d1), "%s/7/a", store);
    snprintf(d2, sizeof(d2), "%s/7/b", store);
    snprintf(restore, sizeof(restore), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, d1, f->m);
    r.store = store;
    r.in_store = 1;
    json_t *res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("pull: %s", err.text);
    json_decref(res);
    r = req(f, restore, f->m);
    res = pull(f, &r, NULL, &err);
    assert_non_null(res);
    json_decref(res);

    src_file(f, 3, p, sizeof(p));
    put(p, FILE_LEN + 3000, 99); /* same size, other bytes */
    json_t *m2 = manifest_of(f->dir, f->src);
    grant(f, "g1", m2, 60000);
    r = req(f, d2, m2);
    r.store = store;
    r.in_store = 1;
    res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("pull 2: %s", err.text);
    same_as(d2, m2);
    same_as(d1, f->m); /* the older replica is untouched */
    assert_int_equal(num(res, "received"), FILE_LEN + 3000);
    assert_int_equal(num(res, "deduped"), num(m2, "bytes") - (FILE_LEN + 3000));
    struct stat a, b;
    snprintf(p, sizeof(p), "%s/0.bin", d1);
    assert_int_equal(stat(p, &a), 0);
    snprintf(p, sizeof(p), "%s/0.bin", d2);
    assert_int_equal(stat(p, &b), 0);
    assert_int_equal(a.st_ino, b.st_ino); /* one copy on disk */
    json_decref(res);

    /* a restore over an old copy: copies what matches, fetches the one file */
    r = req(f, restore, m2);
    res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("restore: %s", err.text);
    same_as(restore, m2);
    assert_int_equal(num(res, "received"), FILE_LEN + 3000);
    json_decref(res);
    json_decref(m2);
}

/* --- a TCP relay that drops the link once, after some bytes ------------------------
 */

typedef struct {
    int lfd, port, target, stop_pipe[2];
    size_t cut_after; /* holder-to-puller bytes before the drop */
    int cut;          /* dropped once already */
    pthread_t th;
} relay_t;

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 8) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &n) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static void relay_one(relay_t *r, int c)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)r->target),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(c);
        if (s >= 0)
            close(s);
        return;
    }
    size_t down = 0;
    char buf[65536];
    for (;;) {
        struct pollfd p[3] = {
            {c, POLLIN, 0}, {s, POLLIN, 0}, {r->stop_pipe[0], POLLIN, 0}};
        if (poll(p, 3, -1) < 0 || p[2].revents)
            break;
        if (p[0].revents) {
            ssize_t k = read(c, buf, sizeof(buf));
            if (k <= 0 || write(s, buf, (size_t)k) != k)
                break;
        }
        if (p[1].revents) {
            ssize_t k = read(s, buf, sizeof(buf));
            if (k <= 0 || write(c, buf, (size_t)k) != k)
                break;
            down += (size_t)k;
            if (!r->cut && down > r->cut_after) {
                r->cut = 1; /* the link drops: both ends see the connection reset */
                struct linger l = {1, 0};
                setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
                break;
            }
        }
    }
    close(c);
    close(s);
}

static void *relay_run(void *arg)
{
    relay_t *r = arg;
    for (;;) {
        struct pollfd p[2] = {{r->lfd, POLLIN, 0}, {r->stop_pipe[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 || p[1].revents)
            return NULL;
        int c = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c >= 0)
            relay_one(r, c);
    }
}

static void test_dropped_link(void **state)
{
    fix_t *f = *state;
    char big[PATH_MAX], dest[PATH_MAX], ep[64];
    br_err_t err;
    snprintf(big, sizeof(big), "%s/big.bin", f->src);
    put(big, 8 << 20, 5);
    json_t *m = manifest_of(f->dir, f->src);
    grant(f, "g1", m, 60000);
    relay_t r = {.target = br_holder_port(f->h), .cut_after = 5 << 20};
    assert_int_equal(pipe(r.stop_pipe), 0);
    r.lfd = listen_any(&r.port);
    assert_true(r.lfd >= 0);
    assert_int_equal(pthread_create(&r.th, NULL, relay_run, &r), 0);
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", r.port);
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t q = req(f, dest, m);
    q.endpoint = ep;
    br_pull_stats_t st = {0};
    json_t *res = pull(f, &q, &st, &err);
    assert_int_equal(write(r.stop_pipe[1], "x", 1), 1);
    pthread_join(r.th, NULL);
    close(r.lfd);
    close(r.stop_pipe[0]);
    close(r.stop_pipe[1]);
    if (!res)
        fail_msg("pull: %s", err.text);
    assert_true(r.cut);
    assert_true(st.resumes >= 1);
    same_as(dest, m);
    /* resumed from the offset reached: the holder sent the lost window again, not the
     * whole 8 MiB file */
    br_holder_stats_t hs;
    br_holder_stats(f->h, &hs);
    assert_true(hs.bytes_sent >= (uint64_t)num(m, "bytes"));
    assert_true(hs.bytes_sent < (uint64_t)num(m, "bytes") + (3 << 20));
    json_decref(res);
    json_decref(m);
}

/* A pull that stops mid-file (here: the grant lapses) keeps what it has; the next
 * pull goes on from the temporary file's length. */
static void test_resume_later(void **state)
{
    fix_t *f = *state;
    char big[PATH_MAX], dest[PATH_MAX];
    br_err_t err;
    snprintf(big, sizeof(big), "%s/big.bin", f->src);
    put(big, 8 << 20, 6);
    json_t *m = manifest_of(f->dir, f->src);
    br_holder_destroy(&f->h); /* a holder slow enough to stop in the middle */
    f->h = br_holder_new("tcp://127.0.0.1:0", f->hsec, 16 << 20, &err);
    assert_non_null(f->h);
    snprintf(f->ep, sizeof(f->ep), "tcp://127.0.0.1:%d", br_holder_port(f->h));
    grant(f, "g1", m, 60000);
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t q = req(f, dest, m);
    q.stall_ms = 300;
    int64_t t0 = br_mono_ms();
    br_holder_stats_t hs = {0};
    /* the pull runs on the puller's thread; the grant is withdrawn from here once
     * part of big.bin is in */
    br_puller_t *pl = br_puller_new(&err);
    assert_non_null(pl);
    assert_int_equal(br_puller_submit(pl, &q, &err), 0);
    while (hs.bytes_sent < (uint64_t)num(m, "bytes") - (6 << 20) &&
           br_mono_ms() - t0 < 30000) {
        usleep(10000);
        br_holder_stats(f->h, &hs);
    }
    br_holder_revoke(f->h, "g1");
    struct pollfd pfd = {br_puller_fd(pl), POLLIN, 0};
    assert_int_equal(poll(&pfd, 1, 30000), 1);
    json_t *tag = NULL, *res = NULL;
    assert_int_equal(br_puller_take(pl, &tag, &res, &err), 1);
    assert_null(res);
    assert_int_equal(err.errnum, EACCES); /* no grant: refused */
    assert_false(exists("%s", dest));
    br_holder_stats(f->h, &hs);
    uint64_t first = hs.bytes_sent;
    assert_true(first < (uint64_t)num(m, "bytes"));
    grant(f, "g1", m, 60000);
    q.stall_ms = 2000;
    res = pull(f, &q, NULL, &err);
    if (!res)
        fail_msg("pull again: %s", err.text);
    same_as(dest, m);
    br_holder_stats(f->h, &hs);
    /* altogether about the checkpoint once, not once and a half */
    assert_true(hs.bytes_sent < (uint64_t)num(m, "bytes") + (3 << 20));
    assert_true(num(res, "deduped") > 0);
    json_decref(res);
    br_puller_destroy(&pl);
    json_decref(m);
}

static void test_corrupt_on_holder(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX], dest[PATH_MAX];
    br_err_t err;
    src_file(f, 7, p, sizeof(p));
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    unsigned char c;
    assert_int_equal(pread(fd, &c, 1, 1234), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, 1234), 1);
    close(fd);
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, f->m);
    json_t *res = pull(f, &r, NULL, &err);
    assert_null(res);
    assert_int_equal(err.errnum, EBADMSG);
    assert_non_null(strstr(err.text, "node-a"));
    assert_false(exists("%s", dest));
    assert_false(exists("%s/restore/.bramble-pull-checkpoint-100/sub/7.bin", f->root));
}

/* A client with the granted key asks for what is not in the manifest. */
static void test_bad_paths(void **state)
{
    fix_t *f = *state;
    br_err_t err;
    void *s = br_sock_client(f->ctx, f->ep, f->hpub, f->ppub, f->psec, &err);
    assert_non_null(s);
    json_t *e0 = json_array_get(json_object_get(f->m, "entries"), 0);
    const char *hash0 = json_string_value(json_object_get(e0, "hash"));
    struct {
        const char *grant, *path, *hash;
        json_int_t off;
        int errnum;
    } cases[] = {
        {"g1", "../checkpoint-100/0.bin", hash0, 0, EINVAL},
        {"g1", "/etc/passwd", hash0, 0, EINVAL},
        {"g1", "sub/../0.bin", hash0, 0, EINVAL},
        {"g1", "nothere.bin", hash0, 0, ENOENT},
        {"g1", "latest", hash0, 0, ENOENT}, /* a link is not served */
        {"g1", "1.bin", hash0, 0, ENOENT},  /* listed, but with another hash */
        {"g1", "0.bin", hash0, FILE_LEN + 1, ERANGE},
        {"g2", "0.bin", hash0, 0, EACCES}, /* no such grant */
        {"g1", "0.bin", hash0, 0, 0},      /* and the right request is served */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "ckpt.read", (uint32_t)i + 1);
        br_msg_set_body(
            m, json_pack("{s:s, s:s, s:s, s:I}", "grant", cases[i].grant, "path",
                         cases[i].path, "hash", cases[i].hash, "offset", cases[i].off));
        assert_int_equal(br_msg_send(s, m, &err), 0);
        br_msg_destroy(&m);
        assert_int_equal(br_msg_recv(s, 0, 0, &m, &err), 0);
        assert_int_equal(br_msg_seq(m), i + 1);
        int rc = br_msg_check(m, &err);
        if (cases[i].errnum) {
            assert_int_equal(rc, -1);
            assert_int_equal(err.errnum, cases[i].errnum);
        } else {
            assert_int_equal(rc, 0);
            size_t len;
            assert_non_null(br_msg_data(m, &len));
            assert_int_equal(len, BR_XFER_CHUNK);
        }
        br_msg_destroy(&m);
    }
    br_sock_close(&s);
    br_holder_stats_t hs;
    br_holder_stats(f->h, &hs);
    assert_int_equal(hs.refused, 8);

    /* a puller refuses a manifest with such paths before it asks anything */
    const char *bad[] = {"../x", "/abs", "a//b", "a/./b", "", "a/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(br_manifest_path_ok(bad[i]));
    assert_true(br_manifest_path_ok("a/b.c"));
    json_t *m = json_deep_copy(f->m);
    json_object_set_new(json_array_get(json_object_get(m, "entries"), 0), "path",
                        json_string("../../escape"));
    char dest[PATH_MAX];
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, m);
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, EPROTO);
    json_decref(m);
    /* entries that do not hash to the manifest's hash are refused too */
    m = json_deep_copy(f->m);
    json_object_set_new(json_array_get(json_object_get(m, "entries"), 1), "mode",
                        json_integer(04755));
    r = req(f, dest, m);
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, EPROTO);
    json_decref(m);
    assert_false(exists("%s/restore", f->root));
}

/* A symlink put in place of a file after the manifest was made is not followed. */
static void test_symlink_swapped_in(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX], dest[PATH_MAX], outside[PATH_MAX];
    br_err_t err;
    snprintf(outside, sizeof(outside), "%s/secret", f->root);
    put(outside, FILE_LEN, 0); /* the size 0.bin had */
    snprintf(p, sizeof(p), "%s/0.bin", f->src);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(symlink(outside, p), 0);
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, f->m);
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, EACCES);
    assert_false(exists("%s", dest));
}

static void test_unknown_key(void **state)
{
    fix_t *f = *state;
    char pub[41], sec[41], dest[PATH_MAX];
    br_err_t err;
    assert_int_equal(br_keypair(pub, sec, &err), 0);
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, f->m);
    r.public_key = pub;
    r.secret_key = sec;
    r.stall_ms = 20000;
    int64_t t0 = br_mono_ms();
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, EACCES);
    /* refused once the wait for a grant on its way (1 s) is over, not timed out */
    assert_true(br_mono_ms() - t0 < 10000);
    br_holder_stats_t hs;
    br_holder_stats(f->h, &hs);
    assert_true(hs.zap_refused >= 1);
    assert_int_equal(hs.bytes_sent, 0);
    assert_false(exists("%s", dest));
}

/* The puller's next finished pull, waited for (30 s at most). */
static void take_next(br_puller_t *pl, json_t **tag, json_t **res, br_err_t *err)
{
    while (br_puller_take(pl, tag, res, err) == 0) {
        struct pollfd p = {br_puller_fd(pl), POLLIN, 0};
        assert_int_equal(poll(&p, 1, 30000), 1);
    }
}

/* The coordinator sends the holder its grant and the puller its order at once:
 * a puller that knocks before the grant arrived is refused, and gets in once it
 * is there (within its first second). */
static void test_grant_on_its_way(void **state)
{
    fix_t *f = *state;
    char dest[PATH_MAX];
    br_err_t err;
    br_puller_t *pl = br_puller_new(&err);
    assert_non_null(pl);
    snprintf(dest, sizeof(dest), "%s/restore/late", f->root);
    char pub[41], sec[41];
    assert_int_equal(br_keypair(pub, sec, &err), 0);
    br_pull_req_t r = req(f, dest, f->m);
    r.public_key = pub;
    r.secret_key = sec;
    r.grant = "g-late";
    r.tag = json_string("late");
    assert_int_equal(br_puller_submit(pl, &r, &err), 0);
    json_decref(r.tag);
    /* refused first: no grant names its key yet */
    br_holder_stats_t hs = {0};
    int64_t deadline = br_mono_ms() + 10000;
    while (br_mono_ms() < deadline) {
        br_holder_stats(f->h, &hs);
        if (hs.zap_refused >= 1)
            break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    assert_true(hs.zap_refused >= 1);
    br_grant_t g = {.id = "g-late", .peer_key = pub, .peer_name = "node-b", .dir = f->dir,
                    .path = f->src, .manifest = f->m, .ttl_ms = 60000};
    assert_int_equal(br_holder_grant(f->h, &g, &err), 0);
    json_t *tag = NULL, *res = NULL;
    take_next(pl, &tag, &res, &err);
    if (!res)
        fail_msg("the pull failed: %s", err.text);
    json_decref(tag);
    json_decref(res);
    same_as(dest, f->m);
    br_puller_destroy(&pl);
}

/* A replica's pull waiting in the queue is left out once a newer checkpoint of the
 * same job is queued (it would be dropped as soon as it is there); the one in
 * progress, and other jobs' pulls, are not. */
static void test_superseded(void **state)
{
    fix_t *f = *state;
    br_err_t err;
    br_puller_t *pl = br_puller_new(&err);
    assert_non_null(pl);
    /* the first pull stays in progress: its holder never answers */
    int port;
    int lfd = listen_any(&port);
    char ep[64], dest[4][PATH_MAX];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
    static const struct {
        const char *name;
        int64_t group, order;
    } pulls[] = {{"running", 7, 1}, {"older", 7, 5}, {"other-job", 8, 2},
                 {"newest", 7, 9}};
    for (int i = 0; i < 4; i++) {
        snprintf(dest[i], sizeof(dest[i]), "%s/restore/%s", f->root, pulls[i].name);
        br_pull_req_t r = req(f, dest[i], f->m);
        if (i == 0)
            r.endpoint = ep;
        r.stall_ms = 60000;
        r.group = pulls[i].group;
        r.order = pulls[i].order;
        r.tag = json_string(pulls[i].name);
        assert_int_equal(br_puller_submit(pl, &r, &err), 0);
        json_decref(r.tag);
        if (i == 0) { /* in progress before the others come */
            long long done;
            json_t *cur = NULL;
            for (int k = 0; k < 5000 && !(cur = br_puller_progress(pl, &done)); k++) {
                struct timespec ts = {0, 2000000};
                nanosleep(&ts, NULL);
            }
            assert_non_null(cur);
            json_decref(cur);
        }
    }
    /* "older" ends at once, superseded by "newest"; nothing else has ended */
    json_t *tag = NULL, *res = NULL;
    take_next(pl, &tag, &res, &err);
    assert_string_equal(json_string_value(tag), "older");
    assert_null(res);
    assert_int_equal(err.errnum, ECANCELED);
    assert_non_null(strstr(err.text, "superseded"));
    assert_non_null(strstr(err.text, "step 9"));
    json_decref(tag);
    assert_int_equal(br_puller_take(pl, &tag, &res, &err), 0);
    long long done;
    json_t *cur = br_puller_progress(pl, &done);
    assert_string_equal(json_string_value(cur), "running");
    json_decref(cur);
    br_puller_destroy(&pl); /* (stops the one in progress, drops the rest) */
    close(lfd);
}

/* A renewal without the manifest read again: only of a grant held, unlapsed, for
 * the same key and manifest; a lapsed one stays lapsed until granted anew. */
static void test_renew(void **state)
{
    fix_t *f = *state;
    const char *mhash = json_string_value(json_object_get(f->m, "hash"));
    assert_int_equal(br_holder_renew(f->h, "g1", f->ppub, mhash, 60000), 1);
    assert_int_equal(br_holder_renew(f->h, "g1", f->hpub, mhash, 60000), 0);
    assert_int_equal(br_holder_renew(f->h, "g1", f->ppub, "00ff", 60000), 0);
    assert_int_equal(br_holder_renew(f->h, "nope", f->ppub, mhash, 60000), 0);
    assert_int_equal(br_holder_renew(f->h, "g1", f->ppub, mhash, 0), 1); /* lapses */
    assert_int_equal(br_holder_renew(f->h, "g1", f->ppub, mhash, 60000), 0);
}

static void test_expired_grant(void **state)
{
    fix_t *f = *state;
    char dest[PATH_MAX];
    br_err_t err;
    grant(f, "g1", f->m, 0); /* lapsed at once */
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, f->m);
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, EACCES);
}

/* A disk that fills up (here: RLIMIT_FSIZE below one file's size) leaves neither the
 * checkpoint nor its staging and temporary files. */
static void test_full_disk(void **state)
{
    fix_t *f = *state;
    char dest[PATH_MAX];
    br_err_t err;
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    struct rlimit old, small = {200 * 1024, 0};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    br_pull_req_t r = req(f, dest, f->m);
    json_t *res = pull(f, &r, NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_null(res);
    assert_int_equal(err.errnum, EFBIG);
    assert_false(exists("%s", dest));
    assert_false(exists("%s/restore/.bramble-pull-checkpoint-100", f->root));
    assert_false(exists("%s/restore/.bramble-pull-checkpoint-100.tmp", f->root));
    /* a quota smaller than what is to come is refused before a byte is written */
    r.limit = num(f->m, "bytes") - 1;
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, ENOSPC);
}

/* The puller's thread: results come back through its fd, with their tags. */
static void test_thread(void **state)
{
    fix_t *f = *state;
    char d1[PATH_MAX], d2[PATH_MAX];
    br_err_t err;
    br_puller_t *pl = br_puller_new(&err);
    assert_non_null(pl);
    snprintf(d1, sizeof(d1), "%s/restore/one", f->root);
    snprintf(d2, sizeof(d2), "%s/restore/two", f->root);
    br_pull_req_t r = req(f, d1, f->m);
    r.tag = json_string("one");
    assert_int_equal(br_puller_submit(pl, &r, &err), 0);
    json_decref(r.tag);
    r = req(f, d2, f->m);
    r.tag = json_string("two");
    assert_int_equal(br_puller_submit(pl, &r, &err), 0);
    json_decref(r.tag);
    char d3[PATH_MAX];
    snprintf(d3, sizeof(d3), "%s/restore/three", f->root);
    r = req(f, d3, f->m);
    r.tag = json_string("three");
    r.urgent = 1; /* ahead of "two" unless "two" started already */
    assert_int_equal(br_puller_submit(pl, &r, &err), 0);
    json_decref(r.tag);
    const char *seen[3];
    for (int i = 0; i < 3; i++) {
        json_t *tag = NULL, *res = NULL;
        int got;
        while ((got = br_puller_take(pl, &tag, &res, &err)) == 0) {
            struct pollfd p = {br_puller_fd(pl), POLLIN, 0};
            assert_int_equal(poll(&p, 1, 30000), 1);
        }
        if (!res)
            fail_msg("pull %d: %s", i, err.text);
        static const char *const names[] = {"one", "two", "three"};
        for (int k = 0; k < 3; k++) /* a name that outlives the tag */
            if (strcmp(json_string_value(tag), names[k]) == 0)
                seen[i] = names[k];
        json_decref(tag);
        json_decref(res);
    }
    assert_string_equal(seen[2], "two"); /* "one" ran first; "three" went ahead */
    same_as(d1, f->m);
    same_as(d2, f->m);
    same_as(d3, f->m);
    br_pull_stats_t st;
    br_puller_stats(pl, &st);
    /* every byte of the three, once; when "three" stopped "two" mid-file, "two"
     * went on from the bytes it had, and at most the chunks then in flight (8 of
     * 256 KiB) came twice */
    int64_t all = 3 * num(f->m, "bytes");
    assert_true(st.bytes_received >= (uint64_t)all);
    assert_true(st.bytes_received <= (uint64_t)all + 8 * 256 * 1024);
    br_puller_destroy(&pl);
}

/* Five pullers at once on a holder capped at 512 KiB/s, which takes in no more
 * requests than it sends in 4 s (8): the others wait in ZeroMQ's queues, longer
 * than the pullers' stall time, yet no link is taken for dropped (ZMTP heartbeats
 * show it alive), nothing is sent twice, and every pull completes. */
static void test_busy_holder(void **state)
{
    fix_t *f = *state;
    char src[PATH_MAX];
    br_err_t err;
    snprintf(src, sizeof(src), "%s/model-300.pt", f->dir);
    put(src, 512 << 10, 9);
    json_t *m = manifest_of(f->dir, src);
    br_holder_destroy(&f->h);
    f->h = br_holder_new("tcp://127.0.0.1:0", f->hsec, 512 << 10, &err);
    assert_non_null(f->h);
    snprintf(f->ep, sizeof(f->ep), "tcp://127.0.0.1:%d", br_holder_port(f->h));
    br_grant_t g = {.id = "one",
                    .peer_key = f->ppub,
                    .dir = f->dir,
                    .path = src,
                    .manifest = m,
                    .ttl_ms = 60000};
    assert_int_equal(br_holder_grant(f->h, &g, &err), 0);
    br_puller_t *pl[5];
    for (int i = 0; i < 5; i++) {
        char dest[PATH_MAX];
        snprintf(dest, sizeof(dest), "%s/restore/%d/model-300.pt", f->root, i);
        assert_non_null(pl[i] = br_puller_new(&err));
        br_pull_req_t r = req(f, dest, m);
        r.grant = "one";
        r.stall_ms = 1000; /* heartbeats: the link is alive */
        assert_int_equal(br_puller_submit(pl[i], &r, &err), 0);
    }
    for (int i = 0; i < 5; i++) {
        json_t *tag = NULL, *res = NULL;
        while (br_puller_take(pl[i], &tag, &res, &err) == 0) {
            struct pollfd p = {br_puller_fd(pl[i]), POLLIN, 0};
            assert_int_equal(poll(&p, 1, 30000), 1);
        }
        if (!res)
            fail_msg("pull %d: %s", i, err.text);
        assert_int_equal(num(res, "resumes"), 0);
        json_decref(res);
        br_puller_destroy(&pl[i]);
    }
    br_holder_stats_t hs;
    br_holder_stats(f->h, &hs);
    assert_int_equal(hs.refused, 0);
    assert_int_equal(hs.bytes_sent, 5 * (512 << 10));
    json_decref(m);
}

/* The holder reads as the job's user: what that user cannot read is refused. */
static void test_job_user(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX], dest[PATH_MAX];
    br_err_t err;
    if (geteuid() != 0)
        skip(); /* only root acts as another user */
    assert_int_equal(chmod(f->root, 0755), 0);
    br_grant_t g = {.id = "g1",
                    .peer_key = f->ppub,
                    .peer_name = "node-b",
                    .dir = f->dir,
                    .path = f->src,
                    .manifest = f->m,
                    .ttl_ms = 60000,
                    .as_user = 1,
                    .uid = 65534,
                    .gid = 65534};
    assert_int_equal(br_holder_grant(f->h, &g, &err), 0);
    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-100", f->root);
    br_pull_req_t r = req(f, dest, f->m);
    json_t *res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("pull as nobody: %s", err.text);
    json_decref(res);
    snprintf(p, sizeof(p), "%s/restore", f->root);
    br_rm_tree(AT_FDCWD, p);
    assert_false(exists("%s", p));
    src_file(f, 6, p, sizeof(p));
    assert_int_equal(chmod(p, 0600), 0); /* root's alone now */
    assert_null(pull(f, &r, NULL, &err));
    assert_int_equal(err.errnum, EACCES);
    assert_non_null(strstr(err.text, "6.bin"));
    assert_false(exists("%s", dest));
}

/* A one-file checkpoint. */
static void test_single_file(void **state)
{
    fix_t *f = *state;
    char src[PATH_MAX], dest[PATH_MAX];
    br_err_t err;
    snprintf(src, sizeof(src), "%s/model-200.pt", f->dir);
    put(src, 700 * 1024, 3);
    json_t *m = manifest_of(f->dir, src);
    br_grant_t g = {.id = "one",
                    .peer_key = f->ppub,
                    .dir = f->dir,
                    .path = src,
                    .manifest = m,
                    .ttl_ms = 60000};
    assert_int_equal(br_holder_grant(f->h, &g, &err), 0);
    snprintf(dest, sizeof(dest), "%s/restore/model-200.pt", f->root);
    br_pull_req_t r = req(f, dest, m);
    r.grant = "one";
    json_t *res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("pull: %s", err.text);
    same_as(dest, m);
    assert_false(exists("%s/restore/.bramble-pull-model-200.pt", f->root));
    json_decref(res);
    json_decref(m);
}

/* More files than a report lists: the writer keeps the whole listing and the
 * holder serves it as the path ""; the puller, given the truncated report, fetches
 * it first, checks it, keeps it, and builds the checkpoint from it. A listing that
 * is not the one named (the holder's copy changed) is refused. */
static void test_big_manifest(void **state)
{
    fix_t *f = *state;
    enum { N = 2500 };
    char src[PATH_MAX], p[PATH_MAX], dest[PATH_MAX], wdir[PATH_MAX], pdir[PATH_MAX];
    br_err_t err;
    snprintf(src, sizeof(src), "%s/checkpoint-300", f->dir);
    assert_int_equal(br_mkdir_p(src, 0755, &err), 0);
    for (int i = 0; i < N; i++) {
        snprintf(p, sizeof(p), "%s/part-%05d-%0100d.bin", src, i, 0);
        put(p, 10 + (size_t)i % 7, i);
    }
    json_t *whole = manifest_of(f->dir, src);
    snprintf(wdir, sizeof(wdir), "%s/writer-manifests", f->root);
    snprintf(pdir, sizeof(pdir), "%s/puller-manifests", f->root);
    br_listings_t *wl = br_listings_new(wdir, &err), *pl = br_listings_new(pdir, &err);
    assert_non_null(wl);
    assert_non_null(pl);
    json_t *cut = br_listings_report(wl, whole, &err);
    assert_int_equal(err.errnum, 0);
    assert_true(json_is_true(json_object_get(cut, "truncated")));
    char lfile[PATH_MAX];
    json_t *served = br_listings_whole(wdir, cut, lfile, sizeof(lfile), &err);
    assert_non_null(served);
    br_grant_t g = {.id = "big",
                    .peer_key = f->ppub,
                    .dir = f->dir,
                    .path = src,
                    .manifest = served,
                    .listing = lfile,
                    .ttl_ms = 60000};
    br_manifest_listing(cut, &g.listing_hash, &g.listing_size, &err);
    assert_int_equal(br_holder_grant(f->h, &g, &err), 0);

    snprintf(dest, sizeof(dest), "%s/restore/checkpoint-300", f->root);
    br_pull_req_t r = req(f, dest, cut);
    r.grant = "big";
    json_t *res = pull(f, &r, NULL, &err); /* no place to keep a listing */
    assert_null(res);
    assert_int_equal(err.errnum, ENOTSUP);
    r.listings = pdir;
    res = pull(f, &r, NULL, &err);
    if (!res)
        fail_msg("pull: %s", err.text);
    assert_int_equal(num(res, "files"), N);
    assert_int_equal(num(res, "received"), num(whole, "bytes"));
    same_as(dest, whole);
    json_t *kept = br_listings_whole(pdir, cut, NULL, 0, &err);
    assert_non_null(kept);
    assert_true(json_equal(kept, whole));
    json_decref(kept);
    json_decref(res);

    /* the holder's listing no longer the one named: refused, nothing built */
    snprintf(p, sizeof(p), "%s", lfile);
    FILE *fp = fopen(p, "r+");
    fseek(fp, 10, SEEK_SET);
    fputc(' ', fp);
    fclose(fp);
    snprintf(dest, sizeof(dest), "%s/restore2/checkpoint-300", f->root);
    br_pull_req_t r2 = req(f, dest, cut);
    r2.grant = "big";
    snprintf(pdir, sizeof(pdir), "%s/other-manifests", f->root);
    assert_int_equal(br_mkdir_p(pdir, 0700, &err), 0);
    r2.listings = pdir;
    assert_null(pull(f, &r2, NULL, &err));
    assert_int_equal(err.errnum, EBADMSG);
    assert_false(exists("%s/restore2/checkpoint-300", f->root));

    json_decref(served);
    json_decref(cut);
    json_decref(whole);
    br_listings_destroy(&wl);
    br_listings_destroy(&pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_full_pull),
        T(test_dedup),
        T(test_dropped_link),
        T(test_resume_later),
        T(test_corrupt_on_holder),
        T(test_bad_paths),
        T(test_symlink_swapped_in),
        T(test_unknown_key),
        T(test_grant_on_its_way),
        T(test_superseded),
        T(test_expired_grant),
        T(test_renew),
        T(test_full_disk),
        T(test_thread),
        T(test_single_file),
        T(test_job_user),
        T(test_busy_holder),
        T(test_big_manifest),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
