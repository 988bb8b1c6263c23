/* test_rollback.c - the loop's undoing of a wake whose store write failed (server.c:
 * dispatch_one, abort_wake; both static, so reached through the loop itself): a real
 * coordinator (brambled init's data dir, br_coord_new, br_coord_run on a thread of
 * its own, listening on an ipc:// endpoint) and a real CLI client with the admin's
 * credential. The store's failures are made, not waited for: its own connection
 * (reached by interposing sqlite3_open_v2, as test_store.c does) is given a page
 * limit, so a statement that needs a new page fails as a full disk does; and a test
 * VFS fails the writes of the write-ahead log, so a commit fails as on a full or
 * failing disk. The loop is stopped (SIGTERM to its thread) whenever the test
 * touches the connection, so the two threads never use it at once.
 *
 * What is checked: a refused request is told the store failed and that nothing was
 * changed (ENOSPC for a full disk, EIO otherwise), never answered as done; nothing
 * it did stays, in the store or in memory (the same job can be submitted again, ids
 * are issued again as if it had never been); the log never tells of events that were
 * undone; the refusals are counted on /metrics; the coordinator serves on after;
 * and a chunk handed to the content writer in an undone wake is answered once, by
 * the writer. */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <sqlite3.h>

#include "client.h"
#include "config.h"
#include "content.h"
#include "coord.h"
#include "cred.h"
#include "stats.h"
#include "util.h"

/* --- the store's connection, and a VFS that can fail the WAL's writes ------------ */

static sqlite3 *last_db; /* the connection sqlite3_open_v2 made most recently */

/* Interposed (this definition wins over libsqlite3's for the whole program). */
int sqlite3_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs)
{
    static int (*real)(const char *, sqlite3 **, int, const char *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_open_v2");
    if (!real)
        return SQLITE_ERROR;
    int rc = real(path, db, flags, vfs);
    last_db = *db;
    return rc;
}

static sqlite3_vfs *real_vfs, test_vfs;
static const sqlite3_io_methods *real_wal_methods;
static sqlite3_io_methods wal_methods;
static int wal_fails; /* 0, or what every write of a WAL returns (atomic) */

static int wal_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    int rc = __atomic_load_n(&wal_fails, __ATOMIC_SEQ_CST);
    return rc ? rc : real_wal_methods->xWrite(f, buf, amt, off);
}

static int test_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags,
                     int *out)
{
    (void)vfs;
    int rc = real_vfs->xOpen(real_vfs, name, f, flags, out);
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_WAL) && f->pMethods) {
        if (!real_wal_methods) {
            real_wal_methods = f->pMethods;
            wal_methods = *f->pMethods;
            wal_methods.xWrite = wal_write;
        }
        if (f->pMethods == real_wal_methods)
            f->pMethods = &wal_methods;
    }
    return rc;
}

static void vfs_install(void)
{
    if (real_vfs)
        return;
    real_vfs = sqlite3_vfs_find(NULL);
    assert_non_null(real_vfs);
    test_vfs = *real_vfs;
    test_vfs.zName = "bramble-test-faults";
    test_vfs.xOpen = test_open;
    assert_int_equal(sqlite3_vfs_register(&test_vfs, 1), SQLITE_OK); /* the default */
}

static void set_wal_fails(int rc)
{
    __atomic_store_n(&wal_fails, rc, __ATOMIC_SEQ_CST);
}

/* One integer of a query on the store's connection (the loop stopped). */
static int64_t db_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    int rc = sqlite3_step(st);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
}

/* --- a coordinator on a thread, and a client ------------------------------------- */

typedef struct {
    char dir[64];
    br_coord_t *c;
    sqlite3 *db; /* the coordinator's own connection to its store */
    pthread_t loop;
    int running;
    br_client_t *admin;
    int saved_stderr;
    char log_path[128];
} world_t;

static void *run_loop(void *arg)
{
    br_coord_t *c = arg;
    br_err_t err;
    if (br_coord_run(c, &err) < 0)
        fprintf(stderr, "test_rollback: loop: %s\n", err.text);
    return NULL;
}

static void start(world_t *w)
{
    assert_false(w->running);
    w->c->stop = 0;
    assert_int_equal(pthread_create(&w->loop, NULL, run_loop, w->c), 0);
    w->running = 1;
}

/* Stop the loop (as SIGTERM stops brambled) and wait for its thread. */
static void stop(world_t *w)
{
    if (!w->running)
        return;
    assert_int_equal(pthread_kill(w->loop, SIGTERM), 0);
    assert_int_equal(pthread_join(w->loop, NULL), 0);
    w->running = 0;
}

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    vfs_install();
    snprintf(w->dir, sizeof(w->dir), "/tmp/test_rollback.XXXXXX");
    if (!mkdtemp(w->dir))
        return -1;
    /* brambled's log (stderr) into a file, to read what it said */
    snprintf(w->log_path, sizeof(w->log_path), "%s.log", w->dir);
    int fd = open(w->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    fflush(stderr);
    w->saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);

    br_config_t cfg;
    br_err_t err = {0};
    br_config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/data", w->dir);
    snprintf(cfg.listen, sizeof(cfg.listen), "ipc://%s/sock", w->dir);
    br_strlcpy(cfg.advertise, cfg.listen, sizeof(cfg.advertise));
    if (br_config_init(&cfg, &err) < 0) {
        fprintf(stderr, "init: %s\n", err.text);
        return -1;
    }
    w->c = br_coord_new(&cfg, &err);
    if (!w->c) {
        fprintf(stderr, "coordinator: %s\n", err.text);
        return -1;
    }
    w->db = last_db;
    char path[1100];
    br_cred_t admin;
    if (br_cred_load(br_config_path(&cfg, "admin.credential", path, sizeof(path)),
                     &admin, &err) < 0 ||
        !(w->admin = br_client_new_cred(&admin, &err))) {
        fprintf(stderr, "client: %s\n", err.text);
        return -1;
    }
    *state = w;
    return 0;
}

/* What brambled has said so far (a new string). */
static char *log_text(world_t *w)
{
    fflush(stderr);
    FILE *f = fopen(w->log_path, "r");
    assert_non_null(f);
    size_t cap = 1 << 20;
    char *buf = calloc(1, cap);
    assert_non_null(buf);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int teardown(void **state)
{
    world_t *w = *state;
    stop(w);
    set_wal_fails(0);
    br_client_destroy(&w->admin);
    br_coord_destroy(&w->c);
    /* br_coord_new blocked these for its signalfd: let them through again */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    /* what was said (brambled's lines, and cmocka's of a failure) where it is read */
    char *said = log_text(w);
    fflush(stderr);
    dup2(w->saved_stderr, 2);
    close(w->saved_stderr);
    fputs(said, stderr);
    free(said);
    unlink(w->log_path);
    br_rm_tree(AT_FDCWD, w->dir);
    free(w);
    return 0;
}

/* A job.submit body of a job named name; pad: bytes of comment, so that storing
 * it needs pages of its own. */
static json_t *submit_body(const char *name, size_t pad)
{
    size_t len = pad + 200;
    char *yaml = malloc(len);
    assert_non_null(yaml);
    int n = snprintf(yaml, len, "name: %s\ncommand: sleep 1\n#", name);
    memset(yaml + n, 'x', pad);
    yaml[n + pad] = '\n';
    yaml[n + pad + 1] = '\0';
    json_t *body = json_pack("{s:s, s:[]}", "spec", yaml, "sets");
    free(yaml);
    return body;
}

/* Send two submissions at once (both in flight, most often read in one wake):
 * their results into rc[], err[] and ids[] (0 when refused). */
static void submit_two(world_t *w, json_t *b1, json_t *b2, int rc[2], br_err_t err[2],
                       int64_t ids[2])
{
    uint32_t seq[2];
    assert_int_equal(br_client_send(w->admin, "job.submit", b1, &seq[0], &err[0]), 0);
    assert_int_equal(br_client_send(w->admin, "job.submit", b2, &seq[1], &err[1]), 0);
    for (int i = 0; i < 2; i++) {
        br_msg_t *resp = NULL;
        memset(&err[i], 0, sizeof(err[i]));
        rc[i] = br_client_recv(w->admin, seq[i], 5000, &resp, &err[i]);
        ids[i] = rc[i] == 0
                     ? json_integer_value(json_object_get(br_msg_body(resp), "id"))
                     : 0;
        br_msg_destroy(&resp);
    }
}

static int64_t submit_ok(world_t *w, const char *name)
{
    br_err_t err = {0};
    json_t *a =
        br_client_call(w->admin, "job.submit", submit_body(name, 0), 5000, &err);
    if (!a)
        fail_msg("job.submit %s: %s", name, err.text);
    int64_t id = json_integer_value(json_object_get(a, "id"));
    json_decref(a);
    return id;
}

/* The jobs the coordinator lists (all of them). */
static size_t listed_jobs(world_t *w)
{
    br_err_t err = {0};
    json_t *a =
        br_client_call(w->admin, "job.list", json_pack("{s:b}", "all", 1), 5000, &err);
    if (!a)
        fail_msg("job.list: %s", err.text);
    size_t n = json_array_size(json_object_get(a, "jobs"));
    json_decref(a);
    return n;
}

static size_t count_of(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

static void assert_says(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("'%s' does not say '%s'", text, want);
}

/* The count of refusals for reason on the metrics page (the loop stopped). */
static double refused_on_page(world_t *w, const char *reason)
{
    size_t len;
    const char *page = br_stats_page(w->c->stats, w->c, &len);
    assert_non_null(page);
    char series[128];
    snprintf(series, sizeof(series), "bramble_requests_refused_total{reason=\"%s\"} ",
             reason);
    const char *p = strstr(page, series);
    assert_non_null(p);
    return strtod(p + strlen(series), NULL);
}

/* --- the tests ------------------------------------------------------------------- */

/* A statement that cannot get the pages it needs (the disk full): the request that
 * made it is refused with ENOSPC and "nothing was changed"; its job is neither in
 * the store nor in memory, its event not in the log; the other request of the wake
 * is answered for what it is, and the coordinator serves on: the job submitted again
 * once there is room is taken, under the id the undone one would have had. */
static void test_full_disk_during_a_request(void **state)
{
    world_t *w = *state;
    start(w);
    assert_int_equal(listed_jobs(w), 0); /* (the client's handshake is done) */
    stop(w);
    int64_t pages = db_int(w->db, "PRAGMA page_count");
    assert_true(pages > 0);
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %lld", (long long)pages);
    assert_int_equal(db_int(w->db, sql), pages);

    start(w);
    int rc[2];
    br_err_t err[2];
    int64_t ids[2];
    submit_two(w, submit_body("big", 64 * 1024), submit_body("small", 0), rc, err, ids);
    assert_int_equal(rc[0], -1);
    assert_int_equal(err[0].errnum, ENOSPC);
    assert_says(err[0].text, "job.submit: store full (the coordinator's disk is full)");
    assert_says(err[0].text, "nothing was changed");
    /* the small one either fitted (its own savepoint, kept) or was refused as the
     * whole wake was (SQLite rolled the transaction back): never a half */
    if (rc[1] == 0)
        assert_true(ids[1] > 0);
    else
        assert_says(err[1].text, "nothing was changed");
    size_t kept = rc[1] == 0 ? 1 : 0;
    assert_int_equal(listed_jobs(w), kept);
    stop(w);
    assert_int_equal(db_int(w->db, "SELECT count(*) FROM jobs WHERE name = 'big'"), 0);
    assert_true(refused_on_page(w, "store_full") >= 1);
    /* SQLite undid the statement alone (the request's savepoint is rolled back, the
     * wake goes on: dispatch_one) or the whole transaction (the wake is undone:
     * abort_wake); which, is SQLite's choice for the statement that failed */
    char *said = log_text(w);
    if (!strstr(said, "its changes were undone"))
        assert_says(said, "the store rolled the wake back (No space left on device)");
    /* the log tells of the submissions that were kept, and of no other */
    assert_int_equal(count_of(said, "pending: submitted by admin"), kept);
    free(said);

    /* room again: the same name is free (memory was read again from the store) */
    assert_int_equal(db_int(w->db, "PRAGMA max_page_count = 1073741823"), 1073741823);
    start(w);
    int64_t big = submit_ok(w, "big");
    assert_int_equal(big, kept ? ids[1] + 1 : 1); /* the undone one's id, issued now */
    assert_int_equal(listed_jobs(w), kept + 1);
    stop(w);
}

/* A commit that cannot be written (the WAL's writes fail: a full disk, then a failing
 * one): every request the wake read is refused ("nothing was changed, try again
 * later"; ENOSPC, then EIO), none is answered as done; nothing is kept, in the store
 * or in memory; the events of the wake never reach the log; the refusals are on
 * /metrics; once the disk takes writes again the same submissions are taken. */
static void test_commit_that_fails(void **state)
{
    world_t *w = *state;
    static const struct {
        int sqlite_rc, errnum;
        const char *says, *reason;
    } faults[] = {
        {SQLITE_FULL, ENOSPC, "store full (the coordinator's disk is full)",
         "store_full"},
        {SQLITE_IOERR_WRITE, EIO, "store error (see brambled's log)", "store_error"},
    };
    for (size_t f = 0; f < sizeof(faults) / sizeof(faults[0]); f++) {
        set_wal_fails(faults[f].sqlite_rc);
        start(w);
        int rc[2];
        br_err_t err[2];
        int64_t ids[2];
        submit_two(w, submit_body("one", 0), submit_body("two", 0), rc, err, ids);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(rc[i], -1);
            assert_int_equal(err[i].errnum, faults[f].errnum);
            assert_says(err[i].text, faults[f].says);
            assert_says(err[i].text, "nothing was changed, try again later");
        }
        /* a read answers well even now: nothing to write */
        assert_int_equal(listed_jobs(w), 0);
        stop(w);
        set_wal_fails(0);
        assert_int_equal(db_int(w->db, "SELECT count(*) FROM jobs"), 0);
        assert_int_equal(db_int(w->db, "SELECT count(*) FROM events"), 0);
        assert_true(refused_on_page(w, faults[f].reason) >= 2);
        char *said = log_text(w);
        assert_says(said, "commit failed");
        assert_null(strstr(said, "submitted by admin"));
        free(said);
    }
    /* the disk takes writes again: both taken, the first id as if none was undone */
    start(w);
    int rc[2];
    br_err_t err[2];
    int64_t ids[2];
    submit_two(w, submit_body("one", 0), submit_body("two", 0), rc, err, ids);
    assert_int_equal(rc[0], 0);
    assert_int_equal(rc[1], 0);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(listed_jobs(w), 2);
    stop(w);
    char *said = log_text(w);
    assert_says(said, "job 1 pending: submitted by admin"); /* said once committed */
    free(said);
    assert_int_equal(db_int(w->db, "SELECT count(*) FROM jobs"), 2);
}

/* A chunk of an upload is handed to the content writer, which answers it once
 * written; a wake whose commit then fails (another request's write) does not also
 * tell it "nothing was changed": its one answer is the writer's, and the file is
 * stored. Both are sent while the loop is stopped, so one wake reads them. */
static void test_a_chunk_in_an_undone_wake_is_answered_once(void **state)
{
    world_t *w = *state;
    const char *data = "the bytes of a small file";
    size_t len = strlen(data);
    unsigned char h[crypto_generichash_BYTES];
    char hex[2 * crypto_generichash_BYTES + 1];
    crypto_generichash(h, sizeof(h), (const unsigned char *)data, len, NULL, 0);
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    set_wal_fails(SQLITE_FULL);
    br_err_t err = {0};
    uint32_t put, sub;
    assert_int_equal(br_client_send_data(w->admin, "content.put",
                                         json_pack("{s:s, s:I, s:I}", "hash", hex, "size",
                                                   (json_int_t)len, "offset", 0),
                                         data, len, &put, &err),
                     0);
    assert_int_equal(br_client_send(w->admin, "job.submit", submit_body("one", 0), &sub,
                                    &err),
                     0);
    start(w);
    br_msg_t *resp = NULL;
    assert_int_equal(br_client_recv(w->admin, sub, 5000, &resp, &err), -1);
    assert_int_equal(err.errnum, ENOSPC); /* the wake was undone */
    br_msg_destroy(&resp);
    memset(&err, 0, sizeof(err));
    if (br_client_recv(w->admin, put, 5000, &resp, &err) < 0)
        fail_msg("the chunk was answered: %s", err.text);
    assert_true(json_is_true(json_object_get(br_msg_body(resp), "whole")));
    br_msg_destroy(&resp);
    stop(w);
    set_wal_fails(0);
    assert_true(br_content_has(w->c->content, hex));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk_during_a_request, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_commit_that_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_chunk_in_an_undone_wake_is_answered_once,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
