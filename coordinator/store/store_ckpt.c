/* store_ckpt.c - checkpoints and their verified copies on other nodes
 * (replicas). */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int br_store_checkpoint_under(br_store_t *s, const char *dir, int64_t not_job, int64_t *job,
                              char *path, size_t len, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_UNDER];
    if (sqlite3_bind_int64(st, 1, not_job) || br_st_bind_text(st, 2, dir))
        return br_st_binderr(s, st, "find checkpoints", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *job = sqlite3_column_int64(st, 0);
        br_strlcpy(path, (const char *)sqlite3_column_text(st, 1), len);
    }
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "find checkpoints");
    return rc == SQLITE_ROW;
}

int br_store_checkpoint_add(br_store_t *s, int64_t job_id, int attempt,
                            const char *node, const char *path, int64_t step,
                            int64_t size, int64_t time_ms, const json_t *manifest,
                            br_err_t *err)
{
    if (job_id <= 0 || attempt < 1)
        return br_errf(err, EINVAL, "checkpoint: bad job or attempt");
    if (step < 0 || size < 0)
        return br_errf(err, EINVAL, "checkpoint: negative step or size");
    if (manifest && !json_is_object(manifest))
        return br_errf(err, EINVAL, "checkpoint: the manifest must be an object");
    if (br_st_check_text(node, SHORT_MAX, 0, "checkpoint node", err) < 0 ||
        br_st_check_text(path, TEXT_MAX, 0, "checkpoint path", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_CKPT_ADD];
    int rc = sqlite3_bind_int64(st, 1, job_id) | sqlite3_bind_int(st, 2, attempt);
    rc |= br_st_bind_text(st, 3, node) | br_st_bind_text(st, 4, path);
    rc |= sqlite3_bind_int64(st, 5, step) | sqlite3_bind_int64(st, 6, size);
    rc |= sqlite3_bind_int64(st, 7, time_ms);
    if (rc)
        return br_st_binderr(s, st, "add checkpoint", err);
    if (manifest && br_st_bind_dump(s, st, 8, manifest, "checkpoint manifest", err) < 0) {
        br_st_reset(st);
        return -1;
    }
    if (br_st_run(s, st, "add checkpoint", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    return 0;
}

/* A checkpoint row (CKPT_COLS) as {"path","step","attempt","node","size","time",
 * "manifest": {"hash","files","bytes","listed","truncated"} or null}. */
static json_t *ckpt_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"path", "step", "attempt", "node", "size", "time"};
    json_t *o = json_object(), *m = json_null();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= br_st_put(o, names[i],
                         i == 0 || i == 3 ? br_st_col_text(st, i) : br_st_col_int(st, i));
    if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
        json_decref(m);
        m = json_object();
        bad |= br_st_put(m, "hash", br_st_col_text(st, 6)) |
               br_st_put(m, "files", br_st_col_int(st, 7)) |
               br_st_put(m, "bytes", br_st_col_int(st, 8)) |
               br_st_put(m, "listed", br_st_col_int(st, 9));
        bad |= br_st_put(m, "truncated", json_boolean(sqlite3_column_int64(st, 9) <
                                                      sqlite3_column_int64(st, 7)));
    }
    bad |= br_st_put(o, "manifest", m);
    return br_st_row_done(o, bad, "checkpoint", err);
}

json_t *br_store_checkpoint_list(br_store_t *s, int64_t job_id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_LIST];
    if (sqlite3_bind_int64(st, 1, job_id)) {
        br_st_binderr(s, st, "list checkpoints", err);
        return NULL;
    }
    return br_st_list_rows(s, st, ckpt_row, "list checkpoints", err);
}

json_t *br_store_checkpoint_latest(br_store_t *s, int64_t job_id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_LATEST];
    if (sqlite3_bind_int64(st, 1, job_id)) {
        br_st_binderr(s, st, "latest checkpoint", err);
        return NULL;
    }
    int rc = sqlite3_step(st);
    json_t *ckpt = NULL;
    if (rc == SQLITE_ROW)
        ckpt = ckpt_row(st, err);
    else if (rc == SQLITE_DONE)
        ckpt = json_null();
    else
        br_st_dberr(s, err, "latest checkpoint");
    br_st_reset(st);
    return ckpt;
}

int br_store_replica_add(br_store_t *s, int64_t job_id, const char *hash, const char *node,
                         int64_t step, const char *path, int64_t bytes, int64_t time_ms,
                         br_err_t *err)
{
    if (job_id <= 0 || step < 0 || bytes < 0)
        return br_errf(err, EINVAL, "replica: bad job, step or size");
    if (br_st_check_text(hash, SHORT_MAX, 0, "replica hash", err) < 0 ||
        br_st_check_text(node, SHORT_MAX, 0, "replica node", err) < 0 ||
        br_st_check_text(path, TEXT_MAX, 0, "replica path", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_REPL_ADD];
    int rc = sqlite3_bind_int64(st, 1, job_id) | br_st_bind_text(st, 2, hash) |
             br_st_bind_text(st, 3, node) | sqlite3_bind_int64(st, 4, step) |
             br_st_bind_text(st, 5, path) | sqlite3_bind_int64(st, 6, bytes) |
             sqlite3_bind_int64(st, 7, time_ms);
    if (rc)
        return br_st_binderr(s, st, "add replica", err);
    if (br_st_run(s, st, "add replica", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    return 0;
}

int br_store_replica_del(br_store_t *s, int64_t job_id, const char *hash, const char *node,
                         br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REPL_DEL];
    int rc = sqlite3_bind_int64(st, 1, job_id);
    rc |= hash ? br_st_bind_text(st, 2, hash) : sqlite3_bind_null(st, 2);
    rc |= node ? br_st_bind_text(st, 3, node) : sqlite3_bind_null(st, 3);
    if (rc)
        return br_st_binderr(s, st, "drop replica", err);
    return br_st_run(s, st, "drop replica", err);
}

static json_t *replica_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"hash", "node", "step", "path", "bytes", "time"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= br_st_put(o, names[i],
                         i < 2 || i == 3 ? br_st_col_text(st, i) : br_st_col_int(st, i));
    return br_st_row_done(o, bad, "replica", err);
}

json_t *br_store_replica_list(br_store_t *s, int64_t job_id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REPL_LIST];
    if (sqlite3_bind_int64(st, 1, job_id)) {
        br_st_binderr(s, st, "list replicas", err);
        return NULL;
    }
    return br_st_list_rows(s, st, replica_row, "list replicas", err);
}

/* A replica row with its job (column 6). */
static json_t *replica_job_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = replica_row(st, err);
    if (o && br_st_put(o, "job", br_st_col_int(st, 6))) {
        json_decref(o);
        return br_errp(err, ENOMEM, "replica: out of memory");
    }
    return o;
}

json_t *br_store_replica_expired(br_store_t *s, int64_t ended_before_ms, int64_t job_id,
                                 int limit, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REPL_EXPIRED];
    if (sqlite3_bind_int64(st, 1, ended_before_ms) ||
        sqlite3_bind_int64(st, 2, job_id) || sqlite3_bind_int(st, 3, limit)) {
        br_st_binderr(s, st, "list expired replicas", err);
        return NULL;
    }
    return br_st_list_rows(s, st, replica_job_row, "list expired replicas", err);
}

json_t *br_store_checkpoint_manifest(br_store_t *s, int64_t job_id, const char *hash,
                                     br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_MANIFEST];
    if (sqlite3_bind_int64(st, 1, job_id) | br_st_bind_text(st, 2, hash)) {
        br_st_binderr(s, st, "checkpoint manifest", err);
        return NULL;
    }
    json_t *m = NULL;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *text = (const char *)sqlite3_column_text(st, 0);
        m = text ? json_loads(text, 0, NULL) : NULL;
        if (!m)
            br_errf(err, ENOENT, "checkpoint %.16s of job %lld has no manifest", hash,
                    (long long)job_id);
    } else if (rc == SQLITE_DONE) {
        br_errf(err, ENOENT, "job %lld has no checkpoint %.16s", (long long)job_id, hash);
    } else {
        br_st_dberr(s, err, "checkpoint manifest");
    }
    br_st_reset(st);
    return m;
}
