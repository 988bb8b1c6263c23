/* test_manifest.c - checkpoint manifests (agent/manifest.c) on real directories:
 * hashes against libsodium's one-shot API, links never followed, special files
 * refused, a big sparse file through a bounded buffer, the job user's identity, and
 * the hashing thread. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <sodium.h>

#include "err.h"
#include "fsid.h"
#include "manifest.h"
#include "util.h"

#define NOBODY 65534

typedef struct {
    char root[64];      /* mkdtemp */
    char dir[PATH_MAX]; /* root/ckpt: the checkpoint dir */
} fix_t;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    snprintf(f->root, sizeof(f->root), "/tmp/test_manifest.XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    chmod(f->root, 0755); /* the job user's tests walk through it */
    snprintf(f->dir, sizeof(f->dir), "%s/ckpt", f->root);
    if (mkdir(f->dir, 0755) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    nftw(f->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void path_of(const fix_t *f, const char *rel, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", f->dir, rel);
}

static void mk(const fix_t *f, const char *rel)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    if (mkdir(p, 0755) < 0)
        fail_msg("mkdir %s: %s", p, strerror(errno));
}

/* Write len bytes (byte i = (i * 7 + seed) & 0xff) with mode. */
static void put(const fix_t *f, const char *rel, size_t len, int seed, mode_t mode)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    unsigned char *b = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)((i * 7 + (size_t)seed) & 0xff);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        fail_msg("open %s: %s", p, strerror(errno));
    assert_int_equal(write(fd, b, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    free(b);
}

/* The expected hash of put's bytes, by libsodium's one-shot API. */
static void expect_hex(size_t len, int seed, char hex[65])
{
    unsigned char *b = malloc(len ? len : 1), h[32];
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)((i * 7 + (size_t)seed) & 0xff);
    crypto_generichash(h, sizeof(h), b, len, NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof(h));
    free(b);
}

static json_t *build(const fix_t *f, const char *rel, br_fsid_t *as, br_err_t *err)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    *err = (br_err_t){0};
    return br_manifest_build(f->dir, p, as, NULL, err);
}

static json_t *entry(const json_t *m, const char *path)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "path")), path) == 0)
            return e;
    }
    fail_msg("no entry %s", path);
    return NULL;
}

/* The manifest hash as docs/checkpoints.md defines it, from the listed entries. */
static void manifest_hash(const json_t *m, char hex[65])
{
    crypto_generichash_state hs;
    unsigned char h[32];
    char num[32];
    crypto_generichash_init(&hs, NULL, 0, sizeof(h));
#define ADD(s) crypto_generichash_update(&hs, (const unsigned char *)(s), strlen(s) + 1)
    ADD("bramble-manifest-1");
    ADD(json_string_value(json_object_get(m, "root")));
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        json_t *link = json_object_get(e, "link");
        ADD(json_string_value(json_object_get(e, "path")));
        ADD(link ? "l" : "f");
        snprintf(num, sizeof(num), "%lld",
                 (long long)json_integer_value(json_object_get(e, "mode")));
        ADD(num);
        snprintf(num, sizeof(num), "%lld",
                 (long long)json_integer_value(json_object_get(e, "size")));
        ADD(num);
        ADD(link ? json_string_value(link)
                 : json_string_value(json_object_get(e, "hash")));
    }
#undef ADD
    crypto_generichash_final(&hs, h, sizeof(h));
    sodium_bin2hex(hex, 65, h, sizeof(h));
}

/* ---- what a manifest holds ---- */

static void test_known_hashes(void **state)
{
    fix_t *f = *state;
    static const struct {
        const char *path;
        size_t len;
        int seed;
        mode_t mode;
    } files[] = {
        {"cp/model.safetensors", 3 * BR_MANIFEST_BUF + 17, 1,
         0644}, /* buffers and a bit */
        {"cp/empty", 0, 0, 0600},
        {"cp/trainer_state.json", 20, 2, 0640},
        {"cp/a/b/c/deep.bin", BR_MANIFEST_BUF, 3, 0755}, /* one buffer */
        {"cp/a.txt", 5, 4, 0644}, /* "a.txt" sorts before "a/..." ('.' < '/') */
    };
    mk(f, "cp");
    mk(f, "cp/a");
    mk(f, "cp/a/b");
    mk(f, "cp/a/b/c");
    mk(f, "cp/emptydir"); /* directories are implied by paths: not listed */
    int64_t bytes = 0;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        put(f, files[i].path, files[i].len, files[i].seed, files[i].mode);
        bytes += (int64_t)files[i].len;
    }
    br_err_t err;
    json_t *m = build(f, "cp", NULL, &err);
    if (!m)
        fail_msg("%s", err.text);
    assert_string_equal(json_string_value(json_object_get(m, "root")), "dir");
    assert_int_equal(json_integer_value(json_object_get(m, "files")), 5);
    assert_int_equal(json_integer_value(json_object_get(m, "bytes")), bytes);
    assert_null(json_object_get(m, "truncated"));
    static const char *order[] = {"a.txt", "a/b/c/deep.bin", "empty",
                                  "model.safetensors", "trainer_state.json"};
    json_t *entries = json_object_get(m, "entries");
    assert_int_equal(json_array_size(entries), 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(entries, i), "path")),
            order[i]);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char hex[65];
        expect_hex(files[i].len, files[i].seed, hex);
        json_t *e = entry(m, files[i].path + 3);
        assert_string_equal(json_string_value(json_object_get(e, "hash")), hex);
        assert_int_equal(json_integer_value(json_object_get(e, "size")), files[i].len);
        assert_int_equal(json_integer_value(json_object_get(e, "mode")), files[i].mode);
    }
    char hex[65];
    manifest_hash(m, hex);
    assert_string_equal(json_string_value(json_object_get(m, "hash")), hex);

    /* the same content elsewhere has the same hash; one byte more does not */
    json_t *again = build(f, "cp", NULL, &err);
    assert_string_equal(json_string_value(json_object_get(again, "hash")), hex);
    json_decref(again);
    put(f, "cp/empty", 1, 0, 0600);
    again = build(f, "cp", NULL, &err);
    assert_string_not_equal(json_string_value(json_object_get(again, "hash")), hex);
    json_decref(again);
    json_decref(m);
}

/* A checkpoint that is one file (Lightning's *.ckpt): one entry, its own name. */
static void test_single_file(void **state)
{
    fix_t *f = *state;
    put(f, "epoch=0-step=100.ckpt", 1000, 9, 0644);
    br_err_t err;
    json_t *m = build(f, "epoch=0-step=100.ckpt", NULL, &err);
    if (!m)
        fail_msg("%s", err.text);
    char hex[65];
    expect_hex(1000, 9, hex);
    assert_string_equal(json_string_value(json_object_get(m, "root")), "file");
    assert_int_equal(json_integer_value(json_object_get(m, "files")), 1);
    assert_string_equal(
        json_string_value(json_object_get(entry(m, "epoch=0-step=100.ckpt"), "hash")),
        hex);
    manifest_hash(m, hex);
    assert_string_equal(json_string_value(json_object_get(m, "hash")), hex);
    json_decref(m);
}

/* An empty checkpoint directory (a job's own report of a directory it made): no
 * entries, and a hash all the same. */
static void test_empty_dir(void **state)
{
    fix_t *f = *state;
    mk(f, "weights-7");
    br_err_t err;
    json_t *m = build(f, "weights-7", NULL, &err);
    if (!m)
        fail_msg("%s", err.text);
    assert_int_equal(json_integer_value(json_object_get(m, "files")), 0);
    assert_int_equal(json_array_size(json_object_get(m, "entries")), 0);
    char hex[65];
    manifest_hash(m, hex);
    assert_string_equal(json_string_value(json_object_get(m, "hash")), hex);
    json_decref(m);
}

/* Links are recorded as links, with their target text: one out of the checkpoint
 * (to a file, to a directory) is never followed, one inside is not hashed twice. */
static void test_symlinks(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX];
    mk(f, "cp");
    put(f, "cp/weights.bin", 100, 5, 0644);
    path_of(f, "cp/secret", p, sizeof(p));
    assert_int_equal(symlink("/etc/shadow", p), 0);
    path_of(f, "cp/etc", p, sizeof(p));
    assert_int_equal(symlink("/etc", p), 0);
    path_of(f, "cp/same", p, sizeof(p));
    assert_int_equal(symlink("weights.bin", p), 0);
    path_of(f, "cp/dangling", p, sizeof(p));
    assert_int_equal(symlink("../nowhere", p), 0);
    br_err_t err;
    json_t *m = build(f, "cp", NULL, &err);
    if (!m)
        fail_msg("%s", err.text);
    assert_int_equal(json_integer_value(json_object_get(m, "files")), 5);
    assert_int_equal(json_integer_value(json_object_get(m, "bytes")),
                     100); /* links' targets: not read */
    json_t *e = entry(m, "secret");
    assert_string_equal(json_string_value(json_object_get(e, "link")), "/etc/shadow");
    assert_null(json_object_get(e, "hash"));
    assert_int_equal(json_integer_value(json_object_get(e, "size")),
                     strlen("/etc/shadow"));
    assert_string_equal(json_string_value(json_object_get(entry(m, "etc"), "link")),
                        "/etc");
    assert_string_equal(json_string_value(json_object_get(entry(m, "same"), "link")),
                        "weights.bin");
    assert_string_equal(
        json_string_value(json_object_get(entry(m, "dangling"), "link")), "../nowhere");
    char hex[65];
    manifest_hash(m, hex);
    assert_string_equal(json_string_value(json_object_get(m, "hash")), hex);
    json_decref(m);

    /* a checkpoint that is itself a link out of the checkpoint dir is refused */
    path_of(f, "checkpoint-9", p, sizeof(p));
    assert_int_equal(symlink("/etc", p), 0);
    assert_null(build(f, "checkpoint-9", NULL, &err));
    assert_int_equal(err.errnum, EXDEV);
}

/* A fifo (or socket, or device) in a checkpoint refuses it, naming the file; a
 * fifo is never opened for reading (which would wait for a writer). */
static void test_special_files(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX];
    mk(f, "cp");
    mk(f, "cp/data");
    put(f, "cp/data/a.bin", 10, 1, 0644);
    path_of(f, "cp/data/pipe", p, sizeof(p));
    assert_int_equal(mkfifo(p, 0644), 0);
    br_err_t err;
    assert_null(build(f, "cp", NULL, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_non_null(strstr(err.text, "special file data/pipe (a fifo)"));

    mk(f, "sock");
    path_of(f, "sock/s", p, sizeof(p));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    br_strlcpy(sa.sun_path, p, sizeof(sa.sun_path));
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_null(build(f, "sock", NULL, &err));
    assert_non_null(strstr(err.text, "special file s (a socket)"));
    close(fd);

    path_of(f, "fifo-3", p, sizeof(p)); /* the checkpoint itself */
    assert_int_equal(mkfifo(p, 0644), 0);
    assert_null(build(f, "fifo-3", NULL, &err));
    assert_non_null(strstr(err.text, "(a fifo)"));
}

/* 512 MiB of holes: read and hashed through the 1 MiB buffer, memory stays flat. */
static void test_sparse_file(void **state)
{
    fix_t *f = *state;
    const int64_t size = (int64_t)512 << 20;
    char p[PATH_MAX];
    mk(f, "cp");
    path_of(f, "cp/sparse.bin", p, sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, size), 0);
    assert_int_equal(pwrite(fd, "end", 3, size - 3), 3);
    close(fd);

    /* the expected hash, streamed through another buffer size */
    static unsigned char zero[65536];
    crypto_generichash_state hs;
    unsigned char h[32];
    char hex[65];
    crypto_generichash_init(&hs, NULL, 0, sizeof(h));
    for (int64_t left = size - 3; left > 0; left -= (int64_t)sizeof(zero))
        crypto_generichash_update(
            &hs, zero,
            left < (int64_t)sizeof(zero) ? (unsigned long long)left : sizeof(zero));
    crypto_generichash_update(&hs, (const unsigned char *)"end", 3);
    crypto_generichash_final(&hs, h, sizeof(h));
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));

    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    int64_t t0 = br_mono_us();
    br_err_t err;
    json_t *m = build(f, "cp", NULL, &err);
    int64_t us = br_mono_us() - t0;
    getrusage(RUSAGE_SELF, &after);
    if (!m)
        fail_msg("%s", err.text);
    assert_string_equal(
        json_string_value(json_object_get(entry(m, "sparse.bin"), "hash")), hex);
    assert_int_equal(json_integer_value(json_object_get(m, "bytes")), size);
    long grew_kib = after.ru_maxrss - before.ru_maxrss;
    print_message(
        "512 MiB sparse file hashed in %.2f s (%.0f MB/s); peak memory grew "
        "%ld KiB\n",
        (double)us / 1e6, (double)size / (double)us, grew_kib);
    assert_true(grew_kib < 64 * 1024); /* nowhere near the file's size */
    json_decref(m);
}

/* Reads are the job user's: a file it may not read refuses the checkpoint, though
 * the agent (root) could read it. */
static void test_job_user(void **state)
{
    fix_t *f = *state;
    if (geteuid() != 0)
        skip();
    mk(f, "cp");
    put(f, "cp/ok.bin", 10, 1, 0644);
    br_err_t err;
    br_fsid_t *nobody = br_fsid_new(NOBODY, NOBODY, &err);
    json_t *m = build(f, "cp", nobody, &err);
    if (!m)
        fail_msg("%s", err.text);
    json_decref(m);
    put(f, "cp/root-only.bin", 10, 1, 0600);
    assert_null(build(f, "cp", nobody, &err));
    assert_int_equal(err.errnum, EACCES);
    assert_non_null(strstr(err.text, "root-only.bin"));
    /* and the thread is itself again: root reads it */
    m = build(f, "cp", NULL, &err);
    assert_non_null(m);
    json_decref(m);
    br_fsid_destroy(&nobody);
}

/* More entries than fit in a report: all are listed (a report lists the first of
 * them, listing.h, test_listing.c). */
static void test_every_entry_listed(void **state)
{
    fix_t *f = *state;
    enum { N = 3000 };
    mk(f, "cp");
    char name[200];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "cp/shard-%05d-%0120d.bin", i, 0);
        put(f, name, 1, i, 0644);
    }
    br_err_t err;
    json_t *m = build(f, "cp", NULL, &err);
    if (!m)
        fail_msg("%s", err.text);
    json_t *entries = json_object_get(m, "entries");
    assert_null(json_object_get(m, "truncated"));
    assert_int_equal(json_integer_value(json_object_get(m, "files")), N);
    assert_int_equal(json_array_size(entries), N);
    assert_int_equal(br_manifest_verify(m, &err), 0);
    snprintf(name, sizeof(name), "shard-%05d-%0120d.bin", N - 1, 0);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(entries, N - 1), "path")), name);
    json_decref(m);
}

/* A writer still at work: appends to a file every millisecond until told to stop. */
typedef struct {
    char path[PATH_MAX];
    atomic_int stop;
} writer_t;

static void *keep_writing(void *arg)
{
    writer_t *wr = arg;
    while (!atomic_load(&wr->stop)) {
        int fd = open(wr->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, "x", 1) < 0)
                break;
            close(fd);
        }
        usleep(1000);
    }
    return NULL;
}

/* Wait (up to 20 s) until cond(arg) holds; 1 when it did. */
static int wait_until(int (*cond)(const void *), const void *arg)
{
    for (int waited = 0; waited < 20000; waited += 5) {
        if (cond(arg))
            return 1;
        usleep(5000);
    }
    return 0;
}

/* 1 when the file at path has some bytes (a writer wrote it). */
static int written(const void *path)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* 1 when a descriptor of this process is open on path (the hasher reads it). */
static int open_here(const void *path)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d))) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, (const char *)path) == 0;
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* A checkpoint that changes while it is hashed gets no manifest (EAGAIN: the
 * hasher thread tries again a little later). */
static void test_changed_while_hashed(void **state)
{
    fix_t *f = *state;
    mk(f, "cp");
    put(f, "cp/big.bin", 64 << 20, 1, 0644);
    writer_t wr = {0};
    path_of(f, "cp/log.txt", wr.path, sizeof(wr.path));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, keep_writing, &wr), 0);
    assert_true(wait_until(written, wr.path)); /* the writer is at work */
    br_err_t err;
    json_t *m = build(f, "cp", NULL, &err);
    atomic_store(&wr.stop, 1);
    pthread_join(t, NULL);
    assert_null(m);
    assert_int_equal(err.errnum, EAGAIN);
    assert_non_null(strstr(err.text, "changed while it was hashed"));
    m = build(f, "cp", NULL, &err); /* quiet again */
    assert_non_null(m);
    json_decref(m);
}

/* ---- the hashing thread ---- */

static int take_one(br_manifest_t *h, json_t **tag, json_t **m, br_err_t *err)
{
    for (int waited = 0; waited < 20000; waited += 10) {
        int rc = br_manifest_take(h, tag, m, err);
        if (rc)
            return rc;
        struct pollfd p = {br_manifest_fd(h), POLLIN, 0};
        poll(&p, 1, 10);
    }
    return 0;
}

static void test_thread(void **state)
{
    fix_t *f = *state;
    char good[PATH_MAX], bad[PATH_MAX], p[PATH_MAX];
    mk(f, "good");
    put(f, "good/w.bin", 1000, 3, 0644);
    mk(f, "bad");
    path_of(f, "bad/pipe", p, sizeof(p));
    assert_int_equal(mkfifo(p, 0644), 0);
    path_of(f, "good", good, sizeof(good));
    path_of(f, "bad", bad, sizeof(bad));
    br_err_t err = {0};
    br_manifest_t *h = br_manifest_new(&err);
    assert_non_null(h);
    assert_true(br_manifest_fd(h) >= 0);
    json_t *t1 = json_pack("{s:i}", "n", 1), *t2 = json_pack("{s:i}", "n", 2);
    br_manifest_req_t r = {.dir = f->dir, .path = good, .group = "7.1", .tag = t1};
    if (geteuid() == 0) { /* as the job user, where there is one to be */
        r.as_user = 1;
        r.uid = r.gid = NOBODY;
    }
    assert_int_equal(br_manifest_submit(h, &r, &err), 0);
    r.path = bad;
    r.tag = t2;
    assert_int_equal(br_manifest_submit(h, &r, &err), 0);
    json_decref(t1);
    json_decref(t2);
    assert_true(br_manifest_pending(h, "7.1") >= 1);
    assert_int_equal(br_manifest_pending(h, "8.1"), 0);

    json_t *tag = NULL, *m = NULL;
    assert_int_equal(take_one(h, &tag, &m, &err), 1);
    assert_int_equal(json_integer_value(json_object_get(tag, "n")), 1);
    assert_non_null(m);
    char hex[65];
    expect_hex(1000, 3, hex);
    assert_string_equal(json_string_value(json_object_get(entry(m, "w.bin"), "hash")),
                        hex);
    json_decref(tag);
    json_decref(m);
    assert_int_equal(take_one(h, &tag, &m, &err), 1);
    assert_int_equal(json_integer_value(json_object_get(tag, "n")), 2);
    assert_null(m);
    assert_non_null(strstr(err.text, "special file pipe (a fifo)"));
    json_decref(tag);
    assert_int_equal(br_manifest_pending(h, "7.1"), 0);
    assert_int_equal(br_manifest_take(h, &tag, &m, &err), 0);
    br_manifest_destroy(&h);
    assert_null(h);
    br_manifest_destroy(NULL);
}

/* A cancelled group is dropped, even in the middle of a big file; destroying the
 * hasher with work left stops it at once. */
static void test_cancel(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX], big[PATH_MAX];
    mk(f, "big");
    path_of(f, "big/sparse", p, sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_int_equal(ftruncate(fd, (off_t)64 << 30), 0); /* 64 GiB: minutes to hash */
    close(fd);
    path_of(f, "big", big, sizeof(big));
    br_err_t err;
    br_manifest_t *h = br_manifest_new(&err);
    json_t *tag = json_object();
    br_manifest_req_t r = {.dir = f->dir, .path = big, .group = "1.1", .tag = tag};
    assert_int_equal(br_manifest_submit(h, &r, &err), 0);
    assert_int_equal(br_manifest_submit(h, &r, &err), 0);
    assert_true(wait_until(open_here, p)); /* in the middle of the big file */
    int64_t t0 = br_mono_ms();
    br_manifest_cancel(h, "1.1");
    assert_int_equal(br_manifest_pending(h, "1.1"), 0);
    /* a small one of another group, asked after: the first thing to take */
    mk(f, "small");
    put(f, "small/x", 10, 1, 0644);
    path_of(f, "small", p, sizeof(p));
    json_t *small = json_string("small");
    br_manifest_req_t r2 = {.dir = f->dir, .path = p, .group = "2.1", .tag = small};
    assert_int_equal(br_manifest_submit(h, &r2, &err), 0);
    json_t *m = NULL, *got = NULL;
    assert_int_equal(take_one(h, &got, &m, &err), 1);
    assert_ptr_equal(got, small);
    assert_non_null(m);
    assert_true(br_mono_ms() - t0 < 2000);
    json_decref(got);
    json_decref(m);
    json_decref(small);
    assert_int_equal(br_manifest_submit(h, &r, &err), 0); /* another 64 GiB */
    path_of(f, "big/sparse", p, sizeof(p));
    assert_true(wait_until(open_here, p));
    t0 = br_mono_ms();
    br_manifest_destroy(&h);
    assert_true(br_mono_ms() - t0 < 2000);
    json_decref(tag);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_known_hashes),
        T(test_single_file),
        T(test_empty_dir),
        T(test_symlinks),
        T(test_special_files),
        T(test_sparse_file),
        T(test_job_user),
        T(test_every_entry_listed),
        T(test_changed_while_hashed),
        T(test_thread),
        T(test_cancel),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
