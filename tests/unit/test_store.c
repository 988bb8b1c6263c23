/* test_store.c - the SQLite store on real files: durability, refusals, every table. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "util.h"

#define APP_ID 0x42524d42
/* 40-character Z85 keys for literal use in SQL and calls */
#define KEY_ALICE "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define KEY_ALICE2 "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
#define KEY_BOB "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"

static char tmpdir[] = "/tmp/test_store.XXXXXX";
static sqlite3 *last_db; /* the connection sqlite3_open_v2 made most recently */

/* Interposed (this definition wins over libsqlite3's for the whole program) so a test
 * can reach the store's own connection: synchronous and foreign_keys are settings of
 * a connection, which a second connection cannot see. */
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

/* --- helpers ------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int group_setup(void **state)
{
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_for(const char *name, char *path)
{
    snprintf(path, PATH_MAX, "%s/%s", tmpdir, name);
}

static br_store_t *open_ok(const char *path)
{
    br_err_t err = {0};
    br_store_t *s = br_store_open(path, &err);
    if (!s)
        print_error("open %s: %s\n", path, err.text);
    assert_non_null(s);
    return s;
}

/* A 40-character Z85 key made of one repeated character. */
static const char *key40(char c, char *buf)
{
    memset(buf, c, 40);
    buf[40] = '\0';
    return buf;
}

static json_t *new_job(const char *name, const char *state)
{
    json_t *job = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:i}, s:s, s:I}", "name",
                            name, "kind", "train", "state", state, "owner", "alice",
                            "spec", "command", "python3 train.py", "priority", 0,
                            "spec_yaml", "name: x\n", "submitted", (json_int_t)1000);
    assert_non_null(job);
    return job;
}

static int64_t add_job(br_store_t *s, const char *name, const char *state)
{
    br_err_t err = {0};
    json_t *job = new_job(name, state);
    int64_t id = br_store_job_add(s, job, &err);
    json_decref(job);
    assert_true(id > 0);
    return id;
}

static void update_ok(br_store_t *s, int64_t id, const char *fields_json)
{
    br_err_t err = {0};
    json_t *fields = json_loads(fields_json, 0, NULL);
    assert_non_null(fields);
    int rc = br_store_job_update(s, id, fields, &err);
    if (rc < 0)
        print_error("update: %s\n", err.text);
    assert_int_equal(rc, 0);
    json_decref(fields);
}

static int64_t jint(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static const char *jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

static void assert_jnull(const json_t *o, const char *key)
{
    assert_true(json_is_null(json_object_get(o, key)));
}

/* An integer pragma or query through a fresh connection of our own. */
static int64_t sql_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static int64_t conn_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    assert_int_equal(sqlite3_open_v2(path, &db, flags, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static char *slurp(const char *path, size_t *len)
{
    br_err_t err = {0};
    char *data = br_read_file(path, 1 << 24, len, &err);
    assert_non_null(data);
    return data;
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Opening path must fail with exactly want and leave the file's bytes as they were. */
static void assert_refused(const char *path, const char *want)
{
    size_t len0, len1;
    char *before = slurp(path, &len0);
    char wal[PATH_MAX + 8];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    int had_wal = exists(wal);
    br_err_t err = {0};
    br_store_t *s = br_store_open(path, &err);
    assert_null(s);
    assert_string_equal(err.text, want);
    char *after = slurp(path, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    assert_int_equal(exists(wal), had_wal);
    free(before);
    free(after);
}

/* --- open, durability, refusals ----------------------------------------------- */

static void test_destroy_null(void **state)
{
    br_store_t *s = NULL;
    br_store_destroy(NULL);
    br_store_destroy(&s);
    char path[PATH_MAX];
    path_for("destroy.db", path);
    s = open_ok(path);
    br_store_destroy(&s);
    assert_null(s);
}

static void test_pragmas(void **state)
{
    char path[PATH_MAX];
    path_for("pragmas.db", path);
    br_store_t *s = open_ok(path);
    sqlite3 *own = last_db;
    assert_int_equal(conn_int(own, "PRAGMA synchronous"), 2); /* FULL */
    assert_int_equal(conn_int(own, "PRAGMA foreign_keys"), 1);
    /* journal_mode, application_id and user_version live in the file itself. */
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    assert_int_equal(conn_int(db, "PRAGMA application_id"), APP_ID);
    assert_int_equal(conn_int(db, "PRAGMA user_version"), br_store_schema_version());
    sqlite3_close(db);
    br_store_destroy(&s);
}

static void test_reopen_keeps_everything(void **state)
{
    char path[PATH_MAX], k1[41], k2[41], id[17] = "";
    br_err_t err = {0};
    path_for("reopen.db", path);
    br_store_t *s = open_ok(path);
    assert_int_equal(br_store_key_add(s, key40('n', k1), BR_PRINCIPAL_NODE, "n1", &err),
                     0);
    assert_int_equal(
        br_store_key_add(s, key40('u', k2), BR_PRINCIPAL_USER, "bob", &err), 0);
    assert_int_equal(br_store_token_add(s, "tok1", "hash1", 100, 1000000, 3, NULL, &err), 0);
    assert_int_equal(br_store_token_use(s, "hash1", 500, id, &err), 0);
    json_t *node = json_pack("{s:s, s:s, s:s, s:i}", "name", "n1", "pubkey", k1,
                             "state", "ready", "cpus", 8);
    assert_int_equal(br_store_node_save(s, node, &err), 0);
    int64_t job = add_job(s, "train-a", "pending");
    update_ok(s, job,
              "{\"state\": \"running\", \"nodes\": [\"n1\"], \"started\": 2000,"
              " \"restarts\": 2, \"exclude\": [\"n9\"]}");
    assert_true(br_store_event_add(s, 2000, job, "n1", "running", "started", &err) > 0);
    assert_int_equal(br_store_log_add(s, job, 1, 0, 1, 0, 2100, "hi\n", 3, &err), 0);
    assert_int_equal(br_store_checkpoint_add(s, job, 1, "n1", "/ckpt/step-10", 10, 99,
                                             2200, NULL, &err),
                     0);
    br_store_destroy(&s);

    s = open_ok(path);
    br_principal_t kind;
    char name[64];
    assert_int_equal(br_store_key_lookup(s, k1, &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_NODE);
    assert_string_equal(name, "n1");
    assert_int_equal(br_store_key_lookup(s, k2, &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_USER);
    json_t *tokens = br_store_token_list(s, &err);
    assert_int_equal(json_array_size(tokens), 1);
    assert_int_equal(jint(json_array_get(tokens, 0), "uses"), 1);
    json_t *nodes = br_store_node_list(s, &err);
    assert_int_equal(json_array_size(nodes), 1);
    assert_true(json_equal(json_array_get(nodes, 0), node));
    json_t *got = br_store_job_get(s, job, &err);
    assert_non_null(got);
    assert_string_equal(jstr(got, "state"), "running");
    assert_int_equal(jint(got, "started"), 2000);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(got, "nodes"), 0)), "n1");
    assert_int_equal(jint(got, "restarts"), 2);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(got, "exclude"), 0)), "n9");
    json_t *ckpt = br_store_checkpoint_latest(s, job, &err);
    assert_string_equal(jstr(ckpt, "path"), "/ckpt/step-10");
    assert_int_equal(jint(ckpt, "step"), 10);
    json_decref(ckpt);
    json_t *events = br_store_event_list(s, 0, 0, 0, &err);
    assert_int_equal(json_array_size(events), 1);
    assert_string_equal(jstr(json_array_get(events, 0), "reason"), "started");
    json_decref(events);
    json_decref(got);
    json_decref(nodes);
    json_decref(tokens);
    json_decref(node);
    br_store_destroy(&s);
}

static void test_refuse_foreign_sqlite(void **state)
{
    char path[PATH_MAX], want[PATH_MAX + 32];
    path_for("foreign.db", path);
    sql_exec(path, "CREATE TABLE t (x); INSERT INTO t VALUES (1);");
    snprintf(want, sizeof(want), "%s: not a bramble store", path);
    assert_refused(path, want);
    /* No tables but someone else's application_id: still not ours. */
    path_for("foreign-app.db", path);
    sql_exec(path, "PRAGMA application_id = 1234; PRAGMA user_version = 1;");
    snprintf(want, sizeof(want), "%s: not a bramble store", path);
    assert_refused(path, want);
}

static void test_refuse_random_bytes(void **state)
{
    char path[PATH_MAX], want[PATH_MAX + 32];
    unsigned char junk[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(junk); i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (unsigned char)(x >> 16);
    }
    path_for("random.db", path);
    br_err_t err = {0};
    assert_int_equal(br_write_file(path, junk, sizeof(junk), 0600, &err), 0);
    snprintf(want, sizeof(want), "%s: not a bramble store", path);
    assert_refused(path, want);
    /* SQLite's magic with garbage after it gets past the first check only. */
    memcpy(junk, "SQLite format 3", 16);
    path_for("fake-magic.db", path);
    assert_int_equal(br_write_file(path, junk, sizeof(junk), 0600, &err), 0);
    snprintf(want, sizeof(want), "%s: not a bramble store", path);
    assert_refused(path, want);
}

static void test_refuse_newer_schema(void **state)
{
    char path[PATH_MAX];
    path_for("newer.db", path);
    br_store_t *s = open_ok(path);
    add_job(s, "train-a", "pending");
    br_store_destroy(&s);
    sql_exec(path, "PRAGMA user_version = 99;");
    assert_int_equal(sql_int(path, "PRAGMA user_version"), 99);
    char want[80];
    snprintf(want, sizeof(want), "store schema 99 is newer than this brambled (%d)",
             br_store_schema_version());
    assert_refused(path, want);
}

static void test_rollback_discards(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("txn.db", path);
    br_store_t *s = open_ok(path);
    assert_int_equal(br_store_in_txn(s), 0);
    assert_int_equal(br_store_rollback(s), 0); /* nothing open: no-op */
    assert_int_equal(br_store_commit(s, &err), -1);
    assert_int_equal(br_store_begin(s, &err), 0);
    assert_int_equal(br_store_in_txn(s), 1);
    assert_int_equal(br_store_begin(s, &err), -1);
    assert_int_equal(err.errnum, EBUSY);
    int64_t gone = add_job(s, "gone", "pending");
    assert_int_equal(br_store_rollback(s), 0);
    assert_int_equal(br_store_in_txn(s), 0);
    assert_null(br_store_job_get(s, gone, &err));
    assert_int_equal(err.errnum, ENOENT);

    assert_int_equal(br_store_begin(s, &err), 0);
    int64_t kept = add_job(s, "kept", "pending");
    assert_int_equal(br_store_commit(s, &err), 0);
    assert_int_equal(br_store_in_txn(s), 0);
    /* A transaction still open when the store closes is discarded too. */
    assert_int_equal(br_store_begin(s, &err), 0);
    int64_t lost = add_job(s, "lost", "pending");
    br_store_destroy(&s);

    s = open_ok(path);
    json_t *job = br_store_job_get(s, kept, &err);
    assert_non_null(job);
    json_decref(job);
    assert_null(br_store_job_get(s, lost, &err));
    json_t *all = br_store_job_list(s, NULL, 0, &err);
    assert_int_equal(json_array_size(all), 1);
    json_decref(all);
    br_store_destroy(&s);
}

/* --- migrations ---------------------------------------------------------------- */

/* Schema 1 exactly as brambled 1 created it (store.c, migrations[0]). */
static const char v1_schema[] =
    "CREATE TABLE keys (pubkey TEXT PRIMARY KEY, kind TEXT NOT NULL,"
    " name TEXT NOT NULL, created INTEGER NOT NULL,"
    " revoked INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX keys_principal ON keys (kind, name);"
    "CREATE TABLE tokens (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE,"
    " created INTEGER NOT NULL, expires INTEGER NOT NULL,"
    " uses INTEGER NOT NULL DEFAULT 0, uses_max INTEGER NOT NULL,"
    " revoked INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE nodes (name TEXT PRIMARY KEY, data TEXT NOT NULL);"
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,"
    " kind TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 1,"
    " owner TEXT NOT NULL, nodes TEXT NOT NULL DEFAULT '[]', assign TEXT,"
    " submitted INTEGER NOT NULL, started INTEGER, ended INTEGER, exit_code INTEGER,"
    " signal INTEGER, reason TEXT, spec TEXT NOT NULL, spec_yaml TEXT NOT NULL);"
    "CREATE INDEX jobs_state ON jobs (state);"
    "CREATE INDEX jobs_name ON jobs (name);"
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL,"
    " job INTEGER REFERENCES jobs (id), node TEXT, state TEXT NOT NULL, reason TEXT);"
    "CREATE INDEX events_job ON events (job, id);"
    "CREATE TABLE logs (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job INTEGER NOT NULL REFERENCES jobs (id), attempt INTEGER NOT NULL,"
    " rank INTEGER NOT NULL, stream INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " time INTEGER NOT NULL, data BLOB NOT NULL,"
    " UNIQUE (job, attempt, rank, stream, seq));"
    "CREATE INDEX logs_job ON logs (job, id);"
    "PRAGMA user_version = 1;"
    "PRAGMA application_id = 1112689986;" /* APP_ID */
    "INSERT INTO jobs (id, name, kind, state, attempt, owner, nodes, assign,"
    " submitted, started, spec, spec_yaml) VALUES (7, 'old', 'train', 'running', 2,"
    " 'alice', '[\"n1\"]', '{\"n1\":[0]}', 1000, 2000, '{\"command\":\"x\"}',"
    " 'name: old\n');"
    "INSERT INTO events (time, job, node, state, reason)"
    " VALUES (2000, 7, 'n1', 'running', 'started');"
    "INSERT INTO keys (pubkey, kind, name, created)"
    " VALUES ('" KEY_ALICE "', 'user', 'alice', 500);"
    "INSERT INTO tokens (id, hash, created, expires, uses_max)"
    " VALUES ('old-token', 'old-hash', 100, 99999999999999, 2);";

/* A user removed and added again under the same name is a new principal: its id
 * differs, and the old id is never given out again. */
static void test_principal_ids_not_reused(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    br_principal_t kind;
    int64_t first = 0, second = 0, bob = 0;
    path_for("principals.db", path);
    br_store_t *s = open_ok(path);
    assert_int_equal(br_store_key_add(s, KEY_ALICE, BR_PRINCIPAL_USER, "alice", &err), 0);
    assert_int_equal(br_store_key_who(s, KEY_ALICE, &kind, NULL, 0, &first, &err), 0);
    assert_true(first > 0);
    assert_int_equal(br_store_key_revoke(s, BR_PRINCIPAL_USER, "alice", &err), 0);
    assert_int_equal(br_store_key_who(s, KEY_ALICE, &kind, NULL, 0, &first, &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_REVOKED);
    assert_int_equal(br_store_key_add(s, KEY_ALICE2, BR_PRINCIPAL_USER, "alice", &err), 0);
    assert_int_equal(br_store_key_who(s, KEY_ALICE2, &kind, NULL, 0, &second, &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_USER);
    assert_true(second > first);
    assert_int_equal(br_store_key_add(s, KEY_BOB, BR_PRINCIPAL_USER, "bob", &err), 0);
    assert_int_equal(br_store_key_who(s, KEY_BOB, &kind, NULL, 0, &bob, &err), 0);
    assert_true(bob > second);
    br_store_destroy(&s);
}

/* The per-job cap keeps the newest output: the oldest chunks go first, down to 7/8
 * of the cap, and what went is counted; a resent chunk is not counted twice. */
static void test_log_cap_keeps_newest(void **state)
{
    char path[PATH_MAX], chunk[100];
    br_err_t err = {0};
    path_for("logcap.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "chatty", "running");
    for (int i = 0; i < 10; i++) {
        memset(chunk, 'a' + i, sizeof(chunk));
        assert_int_equal(br_store_log_add(s, job, 1, 0, 1, i, 1000 + i, chunk,
                                          sizeof(chunk), &err), 0);
    }
    assert_int_equal(br_store_log_add(s, job, 1, 0, 1, 9, 2000, chunk, sizeof(chunk), &err),
                     0); /* the same chunk again */
    assert_int_equal(br_store_log_cap(s, job, 2000, &err), 0); /* under: nothing goes */
    int64_t dropped = br_store_log_cap(s, job, 500, &err);
    assert_int_equal(dropped, 600); /* 1000 -> 400, at most 7/8 of 500 */
    json_t *j = br_store_job_get(s, job, &err);
    assert_int_equal(jint(j, "log_bytes"), 400);
    assert_int_equal(jint(j, "log_dropped"), 600);
    json_decref(j);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM logs"), 4);
    assert_int_equal(sql_int(path, "SELECT min(seq) FROM logs"), 6);
    br_store_destroy(&s);
}

static int64_t has_column(const char *path, const char *table, const char *col)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s'", table,
             col);
    return sql_int(path, sql);
}

/* The job the v1 store was made with, as it must read after the upgrade. */
static void assert_old_job(br_store_t *s)
{
    br_err_t err = {0};
    json_t *job = br_store_job_get(s, 7, &err);
    assert_non_null(job);
    assert_string_equal(jstr(job, "name"), "old");
    assert_string_equal(jstr(job, "state"), "running");
    assert_int_equal(jint(job, "attempt"), 2);
    assert_int_equal(jint(job, "started"), 2000);
    assert_string_equal(jstr(job, "spec_yaml"), "name: old\n");
    assert_string_equal(jstr(json_object_get(job, "spec"), "command"), "x");
    assert_int_equal(json_array_size(json_object_get(job, "nodes")), 1);
    /* schema 7: a placement from before gangs in today's form, no "extra" */
    json_t *rank = json_array_get(json_object_get(json_object_get(job, "assign"), "ranks"), 0);
    assert_string_equal(jstr(rank, "node"), "n1");
    assert_string_equal(jstr(rank, "state"), "started");
    assert_int_equal(jint(json_object_get(job, "assign"), "port"), 0);
    assert_null(json_object_get(job, "extra"));
    assert_int_equal(jint(job, "restarts"), 0);
    assert_jnull(job, "exclude");
    json_decref(job);
}

static void test_migrate_v1(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("v1.db", path);
    sql_exec(path, v1_schema);
    assert_int_equal(has_column(path, "jobs", "extra"), 0);
    br_store_t *s = open_ok(path);
    assert_int_equal(sql_int(path, "PRAGMA user_version"), br_store_schema_version());
    assert_int_equal(sql_int(path, "PRAGMA application_id"), APP_ID);
    /* schema 3: the job belongs to alice's principal id, and her key maps to it */
    br_principal_t kind;
    int64_t alice = 0;
    assert_int_equal(br_store_key_who(s, KEY_ALICE, &kind, NULL, 0, &alice, &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_USER);
    assert_true(alice > 0);
    assert_int_equal(sql_int(path, "SELECT owner_id FROM jobs WHERE id = 7"), alice);
    assert_int_equal(has_column(path, "jobs", "extra"), 0); /* added at 2, gone at 7 */
    assert_int_equal(has_column(path, "jobs", "restarts"), 1);
    /* schema 4: a token from before is a join token, and still joins */
    assert_int_equal(sql_int(path, "SELECT kind = 'join' FROM tokens WHERE id = 'old-token'"),
                     1);
    char tid[17];
    assert_int_equal(br_store_token_use(s, "old-hash", 1000, tid, &err), 0);
    assert_string_equal(tid, "old-token");
    assert_old_job(s);
    json_t *list = br_store_job_list(s, NULL, 0, &err);
    assert_int_equal(json_array_size(list), 1);
    assert_jnull(json_array_get(list, 0), "placement");
    json_decref(list);
    list = br_store_event_list(s, 7, 0, 0, &err);
    assert_int_equal(json_array_size(list), 1);
    json_decref(list);
    /* The upgraded store takes the new field and table; new ids follow the old. */
    update_ok(s, 7, "{\"restarts\": 1, \"placement\": \"near\"}");
    assert_int_equal(
        br_store_checkpoint_add(s, 7, 2, "n1", "/c/1", 1, 5, 3000, NULL, &err), 0);
    assert_true(add_job(s, "new", "pending") > 7);
    br_store_destroy(&s);

    s = open_ok(path); /* already at 7: nothing to migrate */
    assert_int_equal(sql_int(path, "PRAGMA user_version"), br_store_schema_version());
    json_t *job = br_store_job_get(s, 7, &err);
    assert_int_equal(jint(job, "restarts"), 1);
    assert_string_equal(jstr(job, "placement"), "near");
    json_decref(job);
    list = br_store_checkpoint_list(s, 7, &err);
    assert_int_equal(json_array_size(list), 1);
    assert_true(json_is_null(json_object_get(json_array_get(list, 0), "manifest")));
    json_decref(list);
    br_store_destroy(&s);
}

/* A migration that fails is rolled back whole: the store stays at schema 1. */
static void test_migrate_failure_rolls_back(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("v1-clash.db", path);
    sql_exec(path, v1_schema);
    sql_exec(path, "CREATE TABLE checkpoints (x);");
    assert_null(br_store_open(path, &err));
    assert_non_null(strstr(err.text, "checkpoints"));
    assert_int_equal(sql_int(path, "PRAGMA user_version"), 1);
    assert_int_equal(has_column(path, "jobs", "extra"), 0);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM jobs"), 1);
}

/* --- tokens and keys ---------------------------------------------------------- */

static int64_t token_uses(br_store_t *s, const char *id)
{
    br_err_t err = {0};
    json_t *list = br_store_token_list(s, &err);
    assert_non_null(list);
    int64_t uses = -1;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *t = json_array_get(list, i);
        if (strcmp(jstr(t, "id"), id) == 0)
            uses = jint(t, "uses");
    }
    json_decref(list);
    return uses;
}

static void assert_token_refused(br_store_t *s, const char *hash, int64_t now,
                                 const char *id, const char *want)
{
    br_err_t err = {0};
    char got[17] = "unchanged";
    int64_t before = id ? token_uses(s, id) : 0;
    assert_int_equal(br_store_token_use(s, hash, now, got, &err), -1);
    assert_int_equal(err.errnum, EACCES);
    assert_string_equal(err.text, want);
    assert_string_equal(got, "unchanged");
    if (id)
        assert_int_equal(token_uses(s, id), before);
}

static void test_tokens(void **state)
{
    char path[PATH_MAX], id[17];
    br_err_t err = {0};
    const int64_t now = 10000;
    path_for("tokens.db", path);
    br_store_t *s = open_ok(path);
    assert_int_equal(br_store_token_add(s, "t-exp", "h-exp", 1, now, 5, NULL, &err), 0);
    assert_int_equal(br_store_token_add(s, "t-rev", "h-rev", 2, now - 1, 5, NULL, &err), 0);
    assert_int_equal(br_store_token_add(s, "t-one", "h-one", 3, now + 1, 1, NULL, &err), 0);
    assert_int_equal(br_store_token_revoke(s, "t-rev", &err), 0);

    assert_token_refused(s, "h-none", now, NULL, "token not recognised");
    /* expires == now is expired; revoked is said before expired. */
    assert_token_refused(s, "h-exp", now, "t-exp", "token expired");
    assert_token_refused(s, "h-rev", now, "t-rev", "token revoked");
    assert_int_equal(br_store_token_use(s, "h-one", now, id, &err), 0);
    assert_string_equal(id, "t-one");
    assert_int_equal(token_uses(s, "t-one"), 1);
    assert_token_refused(s, "h-one", now, "t-one", "token used up");
    assert_token_refused(s, "h-one", now + 5, "t-one", "token expired");

    assert_int_equal(br_store_token_revoke(s, "nope", &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_string_equal(err.text, "no token 'nope'");
    assert_int_equal(br_store_token_add(s, "t-zero", "h-zero", 4, now + 1, 0, NULL, &err),
                     -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_store_token_add(s, "t-one", "h-other", 4, now + 1, 1, NULL, &err),
                     -1);
    assert_int_equal(err.errnum, EEXIST);

    json_t *list = br_store_token_list(s, &err);
    assert_int_equal(json_array_size(list), 3);
    json_t *first = json_array_get(list, 0); /* newest first */
    assert_string_equal(jstr(first, "id"), "t-one");
    assert_int_equal(jint(first, "expires"), now + 1);
    assert_int_equal(jint(first, "uses_max"), 1);
    assert_true(json_is_false(json_object_get(first, "revoked")));
    assert_true(json_is_true(json_object_get(json_array_get(list, 1), "revoked")));
    assert_null(json_object_get(first, "hash"));
    json_decref(list);
    br_store_destroy(&s);
}

/* Metrics tokens live beside join tokens: listed with their kind, revoked alike,
 * and never usable as join tokens; expires 0 means never. */
static void test_metrics_tokens(void **state)
{
    char path[PATH_MAX], id[17];
    br_err_t err = {0};
    path_for("mtokens.db", path);
    br_store_t *s = open_ok(path);
    assert_int_equal(br_store_token_add(s, "t-join", "h-join", 1, 5000, 1, NULL, &err), 0);
    assert_int_equal(br_store_token_add_metrics(s, "t-m1", "h-m1", 2, 0, &err), 0);
    assert_int_equal(br_store_token_add_metrics(s, "t-m2", "h-m2", 3, 9000, &err), 0);
    assert_int_equal(br_store_token_add_metrics(s, "t-m1", "h-m3", 4, 0, &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    assert_int_equal(br_store_token_add_metrics(s, "t-m4", "h-m4", 4, -1, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_store_token_add_metrics(s, "", "h-m5", 4, 0, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    /* a metrics token's hash is not a join token */
    assert_token_refused(s, "h-m1", 10, NULL, "token not recognised");
    assert_int_equal(br_store_token_revoke(s, "t-m2", &err), 0);

    json_t *all = br_store_token_list(s, &err);
    assert_int_equal(json_array_size(all), 3);
    json_t *m2 = json_array_get(all, 0), *m1 = json_array_get(all, 1);
    assert_string_equal(jstr(m2, "kind"), "metrics");
    assert_string_equal(jstr(m1, "id"), "t-m1");
    assert_jnull(m1, "expires"); /* never */
    assert_string_equal(jstr(json_array_get(all, 2), "kind"), "join");
    json_decref(all);

    json_t *list = br_store_token_list_metrics(s, &err);
    assert_int_equal(json_array_size(list), 2);
    assert_string_equal(jstr(json_array_get(list, 0), "id"), "t-m1");
    assert_string_equal(jstr(json_array_get(list, 0), "hash"), "h-m1");
    assert_int_equal(jint(json_array_get(list, 0), "expires"), 0);
    assert_true(json_is_false(json_object_get(json_array_get(list, 0), "revoked")));
    assert_int_equal(jint(json_array_get(list, 1), "expires"), 9000);
    assert_true(json_is_true(json_object_get(json_array_get(list, 1), "revoked")));
    json_decref(list);
    assert_int_equal(br_store_token_use(s, "h-join", 10, id, &err), 0);
    br_store_destroy(&s);
}

/* The figures /metrics shows: jobs by state and owner, dropped output, size. */
static void test_metrics_figures(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("figures.db", path);
    br_store_t *s = open_ok(path);
    json_t *rows = br_store_job_counts(s, &err);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    assert_int_equal(br_store_log_lost_all(s, &err), 0);
    add_job(s, "a", "running");
    add_job(s, "b", "completed");
    int64_t c = add_job(s, "c", "completed");
    assert_int_equal(br_store_attempt_node_add(s, c, 1, "n1", &err), 0);
    assert_int_equal(br_store_log_lost_set(s, c, 1, "n1", 300, &err), 0);
    sql_exec(path, "UPDATE jobs SET log_dropped = 40 WHERE name = 'b'");
    rows = br_store_job_counts(s, &err);
    assert_int_equal(json_array_size(rows), 2);
    json_t *done = json_array_get(rows, 0); /* ordered by state */
    assert_string_equal(jstr(done, "state"), "completed");
    assert_string_equal(jstr(done, "owner"), "alice");
    assert_int_equal(jint(done, "count"), 2);
    assert_int_equal(jint(done, "log_dropped"), 40);
    assert_int_equal(jint(json_array_get(rows, 1), "count"), 1);
    json_decref(rows);
    assert_int_equal(br_store_log_lost_all(s, &err), 300);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(br_store_size(s, &err) >= (int64_t)st.st_size);
    br_store_destroy(&s);
}

static void test_keys(void **state)
{
    char path[PATH_MAX], ka[41], kb[41], kc[41], kd[41], name[64];
    br_err_t err = {0};
    br_principal_t kind = BR_PRINCIPAL_ADMIN;
    path_for("keys.db", path);
    br_store_t *s = open_ok(path);
    assert_int_equal(
        br_store_key_lookup(s, key40('a', ka), &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_UNKNOWN);
    assert_string_equal(name, "");

    assert_int_equal(br_store_key_add(s, ka, BR_PRINCIPAL_NODE, "n1", &err), 0);
    assert_int_equal(
        br_store_key_add(s, key40('b', kb), BR_PRINCIPAL_ADMIN, "admin", &err), 0);
    assert_int_equal(
        br_store_key_add(s, key40('c', kc), BR_PRINCIPAL_USER, "alice", &err), 0);
    assert_int_equal(br_store_key_add(s, ka, BR_PRINCIPAL_USER, "x", &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    assert_int_equal(br_store_key_add(s, "short", BR_PRINCIPAL_USER, "x", &err), -1);
    assert_int_equal(
        br_store_key_add(s, key40('e', kd), BR_PRINCIPAL_REVOKED, "x", &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_store_key_lookup(s, ka, &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_NODE);
    assert_string_equal(name, "n1");

    json_t *users = br_store_key_list_users(s, &err);
    assert_int_equal(json_array_size(users), 2);
    assert_string_equal(jstr(json_array_get(users, 0), "name"), "admin");
    assert_string_equal(jstr(json_array_get(users, 0), "kind"), "admin");
    assert_string_equal(jstr(json_array_get(users, 1), "name"), "alice");
    assert_string_equal(jstr(json_array_get(users, 1), "kind"), "user");
    assert_true(jint(json_array_get(users, 1), "created") > 0);
    json_decref(users);

    /* Removed, then re-joined under the same name with a new key. */
    assert_int_equal(br_store_key_revoke(s, BR_PRINCIPAL_NODE, "n1", &err), 0);
    assert_int_equal(br_store_key_lookup(s, ka, &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_REVOKED);
    assert_int_equal(br_store_key_add(s, key40('d', kd), BR_PRINCIPAL_NODE, "n1", &err),
                     0);
    assert_int_equal(br_store_key_lookup(s, kd, &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_NODE);
    assert_int_equal(br_store_key_lookup(s, ka, &kind, NULL, 0, &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_REVOKED);

    assert_int_equal(br_store_key_revoke(s, BR_PRINCIPAL_USER, "alice", &err), 0);
    users = br_store_key_list_users(s, &err);
    assert_int_equal(json_array_size(users), 1);
    json_decref(users);
    br_store_destroy(&s);
}

/* --- jobs --------------------------------------------------------------------- */

static void assert_ids(json_t *list, const int64_t *want, size_t n)
{
    assert_non_null(list);
    assert_int_equal(json_array_size(list), n);
    for (size_t i = 0; i < n; i++) {
        json_t *job = json_array_get(list, i);
        assert_int_equal(jint(job, "id"), want[i]);
        assert_null(json_object_get(job, "spec_yaml"));
        assert_true(json_is_object(json_object_get(job, "spec")));
    }
    json_decref(list);
}

static void test_job_fields(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("job-fields.db", path);
    br_store_t *s = open_ok(path);
    int64_t id = add_job(s, "train-a", "pending");
    json_t *job = br_store_job_get(s, id, &err);
    assert_non_null(job);
    assert_int_equal(jint(job, "id"), id);
    assert_string_equal(jstr(job, "name"), "train-a");
    assert_string_equal(jstr(job, "kind"), "train");
    assert_string_equal(jstr(job, "state"), "pending");
    assert_string_equal(jstr(job, "owner"), "alice");
    assert_int_equal(jint(job, "attempt"), 1);
    assert_int_equal(jint(job, "submitted"), 1000);
    assert_true(json_is_array(json_object_get(job, "nodes")));
    assert_int_equal(json_array_size(json_object_get(job, "nodes")), 0);
    assert_jnull(job, "assign");
    assert_jnull(job, "started");
    assert_jnull(job, "ended");
    assert_jnull(job, "exit_code");
    assert_jnull(job, "signal");
    assert_jnull(job, "reason");
    assert_string_equal(jstr(json_object_get(job, "spec"), "command"),
                        "python3 train.py");
    assert_string_equal(jstr(job, "spec_yaml"), "name: x\n");
    json_decref(job);

    update_ok(s, id,
              "{\"state\": \"running\", \"attempt\": 2, \"nodes\": [\"n1\", \"n2\"],"
              " \"assign\": {\"n1\": [0, 1]}, \"started\": 2000}");
    update_ok(s, id,
              "{\"reason\": \"boom\", \"exit_code\": 3, \"signal\": null,"
              " \"ended\": 3000}");
    job = br_store_job_get(s, id, &err);
    assert_string_equal(jstr(job, "state"), "running");
    assert_int_equal(jint(job, "attempt"), 2);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(job, "nodes"), 1)), "n2");
    json_t *want = json_pack("{s:[i,i]}", "n1", 0, 1);
    assert_true(json_equal(json_object_get(job, "assign"), want));
    json_decref(want);
    assert_int_equal(jint(job, "started"), 2000);
    assert_int_equal(jint(job, "ended"), 3000);
    assert_int_equal(jint(job, "exit_code"), 3);
    assert_jnull(job, "signal");
    assert_string_equal(jstr(job, "reason"), "boom");
    json_decref(job);
    update_ok(s, id, "{\"reason\": null, \"assign\": \"plain string\"}");
    job = br_store_job_get(s, id, &err);
    assert_jnull(job, "reason");
    assert_string_equal(jstr(job, "assign"), "plain string");
    assert_string_equal(jstr(job, "state"), "running");
    json_decref(job);
    br_store_destroy(&s);
}

/* The job core's bookkeeping: unset is null (restarts 0), an update sets some and
 * leaves the rest, null clears, an unknown key or a wrong type is refused. */
static void test_job_bookkeeping(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("job-book.db", path);
    br_store_t *s = open_ok(path);
    int64_t plain = add_job(s, "plain", "pending");
    json_t *job = new_job("replica", "pending");
    json_object_set_new(job, "service", json_integer(plain));
    json_object_set_new(job, "replica", json_integer(3));
    int64_t id = br_store_job_add(s, job, &err);
    assert_true(id > plain);
    json_decref(job);

    job = br_store_job_get(s, plain, &err);
    assert_int_equal(jint(job, "restarts"), 0);
    const char *unset[] = {"not_before", "fresh_after", "lost_at", "exclude",
                           "placement",  "service",     "replica", "replicas"};
    for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++)
        assert_jnull(job, unset[i]);
    json_decref(job);
    job = br_store_job_get(s, id, &err);
    assert_int_equal(jint(job, "service"), plain);
    assert_int_equal(jint(job, "replica"), 3);
    json_decref(job);

    update_ok(s, id, "{\"restarts\": 2, \"not_before\": 9000, \"exclude\": [\"a\", \"b\"]}");
    update_ok(s, id, "{\"state\": \"running\"}"); /* leaves them */
    job = br_store_job_get(s, id, &err);
    assert_int_equal(jint(job, "restarts"), 2);
    assert_int_equal(jint(job, "not_before"), 9000);
    assert_int_equal(json_array_size(json_object_get(job, "exclude")), 2);
    json_decref(job);
    update_ok(s, id, "{\"not_before\": null, \"exclude\": null}");
    br_store_destroy(&s);

    s = open_ok(path);
    job = br_store_job_get(s, id, &err);
    assert_jnull(job, "not_before");
    assert_jnull(job, "exclude");
    assert_int_equal(jint(job, "restarts"), 2);
    json_decref(job);
    json_t *f = json_pack("{s:{}}", "extra");
    assert_int_equal(br_store_job_update(s, id, f, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    json_decref(f);
    f = json_pack("{s:s}", "restarts", "many");
    assert_int_equal(br_store_job_update(s, id, f, &err), -1);
    json_decref(f);
    br_store_destroy(&s);
}

static void assert_update_refused(br_store_t *s, int64_t id, const char *fields_json,
                                  int errnum)
{
    br_err_t err = {0};
    json_t *fields = json_loads(fields_json, 0, NULL);
    assert_non_null(fields);
    assert_int_equal(br_store_job_update(s, id, fields, &err), -1);
    assert_int_equal(err.errnum, errnum);
    json_decref(fields);
}

static void test_job_refusals(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("job-refusals.db", path);
    br_store_t *s = open_ok(path);
    int64_t id = add_job(s, "train-a", "pending");
    assert_update_refused(s, id, "{\"state\": \"running\", \"bogus\": 1}", EINVAL);
    assert_update_refused(s, id, "{\"name\": \"renamed\"}", EINVAL);
    assert_update_refused(s, id, "{\"id = 1; DROP TABLE jobs; --\": 1}", EINVAL);
    assert_update_refused(s, id, "{\"started\": \"soon\"}", EINVAL);
    assert_update_refused(s, id, "{\"state\": null}", EINVAL);
    assert_update_refused(s, id, "{\"nodes\": \"n1\"}", EINVAL);
    assert_update_refused(s, id + 100, "{\"state\": \"running\"}", ENOENT);
    json_t *job = br_store_job_get(s, id, &err);
    assert_string_equal(jstr(job, "state"), "pending");
    assert_string_equal(jstr(job, "name"), "train-a");
    json_decref(job);
    assert_null(br_store_job_get(s, id + 100, &err));
    assert_int_equal(err.errnum, ENOENT);

    job = new_job("train-b", "pending");
    json_object_del(job, "spec");
    assert_int_equal(br_store_job_add(s, job, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    json_object_set_new(job, "spec", json_string("not an object"));
    assert_int_equal(br_store_job_add(s, job, &err), -1);
    json_object_set_new(job, "spec", json_object());
    json_object_set_new(job, "attempt", json_integer(3));
    json_object_set_new(job, "nodes", json_pack("[s]", "n9"));
    int64_t id2 = br_store_job_add(s, job, &err);
    assert_true(id2 > id);
    json_decref(job);
    job = br_store_job_get(s, id2, &err);
    assert_int_equal(jint(job, "attempt"), 3);
    assert_int_equal(json_array_size(json_object_get(job, "nodes")), 1);
    json_decref(job);
    br_store_destroy(&s);
}

/* The reason alone is set, kept across a reopen, cleared; what is not UTF-8, too
 * long, or of no job is refused and changes nothing. */
static void test_job_set_reason(void **state)
{
    (void)state;
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("job-reason.db", path);
    br_store_t *s = open_ok(path);
    int64_t id = add_job(s, "train-r", "pending");
    update_ok(s, id, "{\"attempt\": 2}");
    assert_int_equal(br_store_job_set_reason(s, id, "waiting: no node has 8 GPUs", &err), 0);
    br_store_destroy(&s);
    s = open_ok(path);
    json_t *job = br_store_job_get(s, id, &err);
    assert_string_equal(jstr(job, "reason"), "waiting: no node has 8 GPUs");
    assert_string_equal(jstr(job, "state"), "pending");
    assert_int_equal(jint(job, "attempt"), 2);
    assert_string_equal(jstr(json_object_get(job, "spec"), "command"), "python3 train.py");
    json_decref(job);

    char big[4098];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(br_store_job_set_reason(s, id, big, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_store_job_set_reason(s, id, "bad \xff byte", &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_store_job_set_reason(s, id + 100, "gone", &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    job = br_store_job_get(s, id, &err);
    assert_string_equal(jstr(job, "reason"), "waiting: no node has 8 GPUs");
    json_decref(job);

    assert_int_equal(br_store_job_set_reason(s, id, NULL, &err), 0);
    job = br_store_job_get(s, id, &err);
    assert_jnull(job, "reason");
    json_decref(job);
    br_store_destroy(&s);
}

static void test_job_list(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("job-list.db", path);
    br_store_t *s = open_ok(path);
    int64_t j1 = add_job(s, "j1", "pending");
    int64_t j2 = add_job(s, "j2", "running");
    int64_t j3 = add_job(s, "j3", "completed");
    int64_t j4 = add_job(s, "j4", "pending");
    int64_t j5 = add_job(s, "j5", "failed");
    update_ok(s, j1, "{\"state\": \"starting\"}");
    const char *const active[] = {"pending", "starting", "running", NULL};
    const char *const none[] = {NULL};
    assert_ids(br_store_job_list(s, NULL, 0, &err), (int64_t[]){j1, j2, j3, j4, j5}, 5);
    assert_ids(br_store_job_list(s, active, 0, &err), (int64_t[]){j1, j2, j4}, 3);
    assert_ids(br_store_job_list(s, NULL, 2, &err), (int64_t[]){j4, j5}, 2);
    assert_ids(br_store_job_list(s, active, 2, &err), (int64_t[]){j2, j4}, 2);
    assert_ids(br_store_job_list(s, NULL, 50, &err), (int64_t[]){j1, j2, j3, j4, j5},
               5);
    assert_ids(br_store_job_list(s, none, 0, &err), NULL, 0);
    assert_null(br_store_job_list(s, NULL, -1, &err));
    assert_int_equal(err.errnum, EINVAL);
    /* the current ones and those ended since a time, newest limit of them */
    update_ok(s, j3, "{\"ended\": 5000}");
    update_ok(s, j5, "{\"ended\": 9000}");
    assert_ids(br_store_job_list_recent(s, 6000, 0, &err), (int64_t[]){j1, j2, j4, j5}, 4);
    assert_ids(br_store_job_list_recent(s, 5000, 0, &err), (int64_t[]){j1, j2, j3, j4, j5},
               5);
    assert_ids(br_store_job_list_recent(s, 6000, 2, &err), (int64_t[]){j4, j5}, 2);
    assert_ids(br_store_job_list_recent(s, 99000, 0, &err), (int64_t[]){j1, j2, j4}, 3);
    assert_null(br_store_job_list_recent(s, 0, -1, &err));
    br_store_destroy(&s);
}

/* --- events and logs ---------------------------------------------------------- */

static void test_events(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("events.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-a", "pending");
    int64_t e1 = br_store_event_add(s, 100, job, "n1", "pending", "submitted", &err);
    int64_t e2 = br_store_event_add(s, 200, 0, "n1", "ready", NULL, &err);
    int64_t e3 = br_store_event_add(s, 300, job, NULL, "running", "started", &err);
    assert_true(e1 > 0 && e2 > e1 && e3 > e2);

    json_t *all = br_store_event_list(s, 0, 0, 0, &err);
    assert_int_equal(json_array_size(all), 3);
    json_t *ev = json_array_get(all, 0);
    assert_int_equal(jint(ev, "id"), e1);
    assert_int_equal(jint(ev, "time"), 100);
    assert_int_equal(jint(ev, "job"), job);
    assert_string_equal(jstr(ev, "node"), "n1");
    assert_string_equal(jstr(ev, "state"), "pending");
    assert_string_equal(jstr(ev, "reason"), "submitted");
    ev = json_array_get(all, 1);
    assert_jnull(ev, "job");
    assert_jnull(ev, "reason");
    assert_jnull(json_array_get(all, 2), "node");
    json_decref(all);

    json_t *list = br_store_event_list(s, job, 0, 0, &err);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(jint(json_array_get(list, 1), "id"), e3);
    json_decref(list);
    list = br_store_event_list(s, 0, e1, 0, &err);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(jint(json_array_get(list, 0), "id"), e2);
    json_decref(list);
    list = br_store_event_list(s, 0, 0, 2, &err);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(jint(json_array_get(list, 1), "id"), e2);
    json_decref(list);
    list = br_store_event_list(s, job, e1, 0, &err);
    assert_int_equal(json_array_size(list), 1);
    json_decref(list);
    list = br_store_event_list(s, 0, e3, 0, &err);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);

    assert_int_equal(br_store_event_add(s, 400, job + 50, NULL, "running", NULL, &err),
                     -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_int_equal(br_store_event_add(s, 400, job, NULL, NULL, NULL, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    br_store_destroy(&s);
}

typedef struct {
    char text[256];
    size_t len;
    int chunks;
} collect_t;

/* Append each chunk as "rank:stream:attempt:data|". */
static void collect(void *arg, int attempt, int rank, int stream, const void *data,
                    size_t len)
{
    collect_t *c = arg;
    int n = snprintf(c->text + c->len, sizeof(c->text) - c->len, "%d:%d:%d:%.*s|", rank,
                     stream, attempt, (int)len, (const char *)data);
    assert_true(n > 0 && (size_t)n < sizeof(c->text) - c->len);
    c->len += (size_t)n;
    c->chunks++;
}

static void read_logs(br_store_t *s, int64_t job, int rank, int64_t *cursor, size_t max,
                      const char *want)
{
    br_err_t err = {0};
    collect_t c = {.len = 0};
    c.text[0] = '\0';
    assert_int_equal(
        br_store_log_read(s, job, rank, *cursor, max, collect, &c, cursor, &err), 0);
    assert_string_equal(c.text, want);
}

static void test_logs(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("logs.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-a", "running");
    assert_int_equal(br_store_log_add(s, job, 1, 0, 1, 0, 10, "hello ", 6, &err), 0);
    assert_int_equal(br_store_log_add(s, job, 1, 1, 1, 0, 11, "r1-a", 4, &err), 0);
    assert_int_equal(br_store_log_add(s, job, 1, 0, 1, 1, 12, "world", 5, &err), 0);
    assert_int_equal(br_store_log_add(s, job, 1, 0, 2, 0, 13, "oops", 4, &err), 0);
    /* A resend of a stored chunk is ignored; another attempt's chunk is not. */
    assert_int_equal(br_store_log_add(s, job, 1, 0, 1, 0, 14, "XXXXXX", 6, &err), 0);
    assert_int_equal(br_store_log_add(s, job, 2, 0, 1, 0, 15, "again", 5, &err), 0);
    assert_int_equal(br_store_log_add(s, job, 2, 0, 1, 1, 16, "", 0, &err), 0);

    int64_t cur = 0;
    read_logs(s, job, -1, &cur, 1 << 20,
              "0:1:1:hello |1:1:1:r1-a|0:1:1:world|0:2:1:oops|0:1:2:again|0:1:2:|");
    int64_t end = cur;
    read_logs(s, job, -1, &cur, 1 << 20, "");
    assert_int_equal(cur, end); /* unchanged when nothing new */

    cur = 0; /* pages of at most 5 bytes, but at least one chunk (6 bytes here) */
    read_logs(s, job, -1, &cur, 5, "0:1:1:hello |");
    read_logs(s, job, -1, &cur, 5, "1:1:1:r1-a|");
    read_logs(s, job, -1, &cur, 5, "0:1:1:world|");
    read_logs(s, job, -1, &cur, 5, "0:2:1:oops|");
    read_logs(s, job, -1, &cur, 5, "0:1:2:again|0:1:2:|");
    assert_int_equal(cur, end);

    cur = 0;
    read_logs(s, job, 1, &cur, 1 << 20, "1:1:1:r1-a|");
    cur = 0;
    read_logs(s, job, 0, &cur, 6, "0:1:1:hello |");
    read_logs(s, job, 0, &cur, 6, "0:1:1:world|");

    assert_int_equal(br_store_log_add(s, job + 9, 1, 0, 1, 0, 10, "x", 1, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_int_equal(br_store_log_add(s, job, 1, 0, 3, 0, 10, "x", 1, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    br_store_destroy(&s);
}

/* --- checkpoints --------------------------------------------------------------- */

static void ckpt_add_ok(br_store_t *s, int64_t job, int attempt, const char *path,
                        int64_t step, int64_t time_ms)
{
    br_err_t err = {0};
    int rc = br_store_checkpoint_add(s, job, attempt, "n1", path, step, 100 + step,
                                     time_ms, NULL, &err);
    if (rc < 0)
        print_error("checkpoint: %s\n", err.text);
    assert_int_equal(rc, 0);
}

/* The list's paths joined by "|", with each step, e.g. "a@1|b@2|". */
static void assert_ckpts(br_store_t *s, int64_t job, const char *want)
{
    br_err_t err = {0};
    char got[512] = "";
    size_t len = 0;
    json_t *list = br_store_checkpoint_list(s, job, &err);
    assert_non_null(list);
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *c = json_array_get(list, i);
        len += (size_t)snprintf(got + len, sizeof(got) - len, "%s@%lld|",
                                jstr(c, "path"), (long long)jint(c, "step"));
        assert_true(len < sizeof(got));
    }
    assert_string_equal(got, want);
    json_decref(list);
}

static void assert_latest(br_store_t *s, int64_t job, const char *path, int attempt)
{
    br_err_t err = {0};
    json_t *c = br_store_checkpoint_latest(s, job, &err);
    assert_non_null(c);
    assert_string_equal(jstr(c, "path"), path);
    assert_int_equal(jint(c, "attempt"), attempt);
    json_decref(c);
}

static void test_checkpoints(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("checkpoints.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-a", "running");
    int64_t other = add_job(s, "train-b", "running");
    json_t *none = br_store_checkpoint_latest(s, job, &err);
    assert_non_null(none);
    assert_true(json_is_null(none));
    json_decref(none);
    assert_ckpts(s, job, "");

    ckpt_add_ok(s, job, 1, "/c/20", 20, 1000);
    ckpt_add_ok(s, job, 1, "/c/10", 10, 1001);
    ckpt_add_ok(s, job, 1, "/c/30", 30, 1002);
    ckpt_add_ok(s, other, 1, "/o/99", 99, 1003);
    /* A resend (same job, attempt, path) is ignored, even with other values. */
    ckpt_add_ok(s, job, 1, "/c/10", 50, 1004);
    /* The same path from a later attempt is a checkpoint of its own. */
    ckpt_add_ok(s, job, 2, "/c/10", 30, 1005);
    assert_ckpts(s, job, "/c/10@10|/c/20@20|/c/30@30|/c/10@30|");
    assert_ckpts(s, other, "/o/99@99|");
    assert_ckpts(s, job + 100, "");
    assert_latest(s, job, "/c/10", 2); /* step 30 twice: the later one */
    assert_latest(s, other, "/o/99", 1);

    json_t *list = br_store_checkpoint_list(s, job, &err);
    json_t *c = json_array_get(list, 0);
    assert_int_equal(json_object_size(c), 7);
    assert_true(json_is_null(json_object_get(c, "manifest")));
    assert_int_equal(jint(c, "attempt"), 1);
    assert_string_equal(jstr(c, "node"), "n1");
    assert_int_equal(jint(c, "size"), 110);
    assert_int_equal(jint(c, "time"), 1001);
    json_decref(list);
    br_store_destroy(&s);

    s = open_ok(path);
    assert_ckpts(s, job, "/c/10@10|/c/20@20|/c/30@30|/c/10@30|");
    assert_latest(s, job, "/c/10", 2);
    br_store_destroy(&s);
}

static void assert_ckpt_refused(br_store_t *s, int64_t job, int attempt,
                                const char *node, const char *path, int64_t step,
                                int64_t size, int errnum)
{
    br_err_t err = {0};
    assert_int_equal(
        br_store_checkpoint_add(s, job, attempt, node, path, step, size, 1, NULL, &err),
        -1);
    assert_int_equal(err.errnum, errnum);
}

static void test_checkpoint_refusals(void **state)
{
    char path[PATH_MAX], want[64], longpath[4098];
    br_err_t err = {0};
    path_for("checkpoint-refusals.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-a", "running");
    assert_int_equal(
        br_store_checkpoint_add(s, job + 9, 1, "n1", "/c", 1, 1, 1, NULL, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    snprintf(want, sizeof(want), "no job %lld", (long long)(job + 9));
    assert_string_equal(err.text, want);

    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0'; /* 4097 bytes */
    assert_ckpt_refused(s, job, 1, "n1", longpath, 1, 1, EINVAL);
    assert_ckpt_refused(s, job, 1, "n1", "", 1, 1, EINVAL);
    assert_ckpt_refused(s, job, 1, "n1", NULL, 1, 1, EINVAL);
    assert_ckpt_refused(s, job, 1, "n1", "\xff\xfe", 1, 1, EINVAL);
    assert_ckpt_refused(s, job, 1, NULL, "/c", 1, 1, EINVAL);
    assert_ckpt_refused(s, job, 1, "n1", "/c", -1, 1, EINVAL);
    assert_ckpt_refused(s, job, 1, "n1", "/c", 1, -1, EINVAL);
    assert_ckpt_refused(s, job, 0, "n1", "/c", 1, 1, EINVAL);
    assert_ckpt_refused(s, 0, 1, "n1", "/c", 1, 1, EINVAL);
    assert_ckpts(s, job, "");

    longpath[4096] = '\0'; /* exactly 4096 bytes is fine, as are step and size 0 */
    assert_int_equal(
        br_store_checkpoint_add(s, job, 1, "n1", longpath, 0, 0, 1, NULL, &err), 0);
    json_t *c = br_store_checkpoint_latest(s, job, &err);
    assert_int_equal(strlen(jstr(c, "path")), 4096);
    assert_int_equal(jint(c, "step"), 0);
    json_decref(c);
    br_store_destroy(&s);
}

/* A checkpoint's manifest is kept whole; lists show its summary. */
static void test_checkpoint_manifest(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("checkpoint-manifest.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-a", "running");
    json_t *m = json_pack(
        "{s:s, s:s, s:i, s:i, s:[{s:s, s:i, s:i, s:s}, {s:s, s:i, s:i, s:s}], s:b}",
        "hash", "ab12", "root", "dir", "files", 3, "bytes", 30, "entries", "path", "a",
        "size", 10, "mode", 420, "hash", "cd34", "path", "b", "size", 20, "mode", 420,
        "hash", "ef56", "truncated", 1);
    assert_int_equal(
        br_store_checkpoint_add(s, job, 1, "n1", "/c/1", 1, 30, 1000, m, &err), 0);
    ckpt_add_ok(s, job, 1, "/c/2", 2, 1001); /* from an agent without manifests */
    json_t *bad = json_array();
    assert_int_equal(
        br_store_checkpoint_add(s, job, 1, "n1", "/c/3", 3, 30, 1002, bad, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    json_decref(bad);
    assert_ckpts(s, job, "/c/1@1|/c/2@2|");
    br_store_destroy(&s);

    s = open_ok(path);
    json_t *list = br_store_checkpoint_list(s, job, &err);
    json_t *got = json_object_get(json_array_get(list, 0), "manifest");
    assert_string_equal(jstr(got, "hash"), "ab12");
    assert_int_equal(jint(got, "files"), 3);
    assert_int_equal(jint(got, "bytes"), 30);
    assert_int_equal(jint(got, "listed"), 2);
    assert_true(json_is_true(json_object_get(got, "truncated")));
    assert_true(json_is_null(json_object_get(json_array_get(list, 1), "manifest")));
    json_decref(list);
    json_t *latest = br_store_checkpoint_latest(s, job, &err);
    assert_true(json_is_null(json_object_get(latest, "manifest")));
    json_decref(latest);
    /* the whole manifest is in the store, as sent */
    br_store_destroy(&s);
    char *text = json_dumps(m, JSON_COMPACT);
    char q[512];
    snprintf(q, sizeof(q), "SELECT count(*) FROM checkpoints WHERE manifest = '%s'",
             text);
    assert_int_equal(sql_int(path, q), 1);
    free(text);
    json_decref(m);
}

/* Where copies of checkpoints are held: added once per (job, hash, node), listed
 * newest first, dropped by hash and node; a checkpoint's whole manifest by hash. */
static void test_replicas(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("replicas.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-r", "running");
    json_t *m = json_pack("{s:s, s:i, s:i, s:[]}", "hash", "ab12", "files", 0, "bytes", 0,
                          "entries");
    assert_int_equal(
        br_store_checkpoint_add(s, job, 1, "n1", "/c/1", 1, 30, 1000, m, &err), 0);
    json_t *got = br_store_checkpoint_manifest(s, job, "ab12", &err);
    assert_true(json_equal(got, m));
    json_decref(got);
    assert_null(br_store_checkpoint_manifest(s, job, "ffff", &err));
    assert_int_equal(err.errnum, ENOENT);
    json_decref(m);
    assert_int_equal(br_store_replica_add(s, job, "ab12", "n2", 1, "/c/1", 30, 5, &err), 0);
    assert_int_equal(br_store_replica_add(s, job, "ab12", "n2", 1, "/c/1", 30, 6, &err), 0);
    assert_int_equal(br_store_replica_add(s, job, "cd34", "n2", 2, "/c/2", 30, 7, &err), 0);
    assert_int_equal(br_store_replica_add(s, job, "cd34", "n3", 2, "/c/2", 30, 7, &err), 0);
    assert_int_equal(br_store_replica_add(s, 999, "cd34", "n3", 2, "/c/2", 30, 7, &err), -1);
    json_t *list = br_store_replica_list(s, job, &err);
    assert_int_equal(json_array_size(list), 3);
    assert_string_equal(jstr(json_array_get(list, 0), "hash"), "cd34");
    assert_string_equal(jstr(json_array_get(list, 2), "node"), "n2");
    assert_int_equal(jint(json_array_get(list, 2), "time"), 6);
    json_decref(list);
    assert_int_equal(br_store_replica_del(s, job, "cd34", "n3", &err), 0);
    assert_int_equal(br_store_replica_del(s, job, "ab12", NULL, &err), 0);
    list = br_store_replica_list(s, job, &err);
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(jstr(json_array_get(list, 0), "node"), "n2");
    json_decref(list);
    assert_int_equal(br_store_replica_del(s, job, NULL, NULL, &err), 0);
    list = br_store_replica_list(s, job, &err);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);
    br_store_destroy(&s);
}

/* A reason already recorded for a job is found, for resent reports. */
static void test_event_seen(void **state)
{
    char path[PATH_MAX];
    br_err_t err = {0};
    path_for("event-seen.db", path);
    br_store_t *s = open_ok(path);
    int64_t job = add_job(s, "train-a", "running"), other = add_job(s, "b", "running");
    assert_int_equal(br_store_event_seen(s, job, "checkpoint x not counted", &err), 0);
    assert_true(br_store_event_add(s, 1, job, "n1", "running",
                                   "checkpoint x not counted", &err) > 0);
    assert_int_equal(br_store_event_seen(s, job, "checkpoint x not counted", &err), 1);
    assert_int_equal(br_store_event_seen(s, job, "checkpoint y not counted", &err), 0);
    assert_int_equal(br_store_event_seen(s, other, "checkpoint x not counted", &err),
                     0);
    br_store_destroy(&s);
}

/* --- nodes -------------------------------------------------------------------- */

static void test_nodes(void **state)
{
    char path[PATH_MAX], k[41];
    br_err_t err = {0};
    path_for("nodes.db", path);
    br_store_t *s = open_ok(path);
    key40('k', k);
    json_t *b =
        json_pack("{s:s, s:s, s:s}", "name", "nb", "pubkey", k, "state", "ready");
    json_t *a = json_pack("{s:s, s:s, s:s, s:[]}", "name", "na", "pubkey", k, "state",
                          "ready", "gpus");
    assert_int_equal(br_store_node_save(s, b, &err), 0);
    assert_int_equal(br_store_node_save(s, a, &err), 0);
    json_object_set_new(b, "state", json_string("lost"));
    assert_int_equal(br_store_node_save(s, b, &err), 0); /* upsert */
    json_t *list = br_store_node_list(s, &err);
    assert_int_equal(json_array_size(list), 2);
    assert_true(json_equal(json_array_get(list, 0), a));
    assert_true(json_equal(json_array_get(list, 1), b));
    json_decref(list);
    json_t *bad = json_pack("{s:s}", "name", "nc");
    assert_int_equal(br_store_node_save(s, bad, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_store_node_delete(s, "na", &err), 0);
    assert_int_equal(br_store_node_delete(s, "na", &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    list = br_store_node_list(s, &err);
    assert_int_equal(json_array_size(list), 1);
    json_decref(list);
    json_decref(bad);
    json_decref(a);
    json_decref(b);
    br_store_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_destroy_null),
        cmocka_unit_test(test_pragmas),
        cmocka_unit_test(test_reopen_keeps_everything),
        cmocka_unit_test(test_refuse_foreign_sqlite),
        cmocka_unit_test(test_refuse_random_bytes),
        cmocka_unit_test(test_refuse_newer_schema),
        cmocka_unit_test(test_principal_ids_not_reused),
        cmocka_unit_test(test_log_cap_keeps_newest),
        cmocka_unit_test(test_rollback_discards),
        cmocka_unit_test(test_migrate_v1),
        cmocka_unit_test(test_migrate_failure_rolls_back),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_job_fields),
        cmocka_unit_test(test_job_bookkeeping),
        cmocka_unit_test(test_job_refusals),
        cmocka_unit_test(test_job_list),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_logs),
        cmocka_unit_test(test_checkpoints),
        cmocka_unit_test(test_checkpoint_refusals),
        cmocka_unit_test(test_checkpoint_manifest),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_event_seen),
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_metrics_tokens),
        cmocka_unit_test(test_metrics_figures),
        cmocka_unit_test(test_job_set_reason),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
