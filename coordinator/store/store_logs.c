/* store_logs.c - jobs' output: chunks, the per-job cap, expiry, and what
 * agents dropped. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t br_store_log_lost_set(br_store_t *s, int64_t job, int attempt, const char *node,
                              int64_t bytes, br_err_t *err)
{
    int64_t before = 0;
    sqlite3_stmt *st = s->st[ST_LOG_LOST_GET];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node))
        return br_st_binderr(s, st, "read lost output", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        before = sqlite3_column_int64(st, 0);
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "read lost output");
    st = s->st[ST_LOG_LOST_SET];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node) || sqlite3_bind_int64(st, 4, bytes))
        return br_st_binderr(s, st, "count lost output", err);
    return br_st_run(s, st, "count lost output", err) < 0 ? -1 : before;
}

int64_t br_store_log_lost(br_store_t *s, int64_t job, br_err_t *err)
{
    int64_t n = 0;
    sqlite3_stmt *st = s->st[ST_LOG_LOST_SUM];
    if (sqlite3_bind_int64(st, 1, job))
        return br_st_binderr(s, st, "sum lost output", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    br_st_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : br_st_dberr(s, err, "sum lost output");
}

int br_store_log_add(br_store_t *s, int64_t job_id, int attempt, int rank, int stream,
                     int64_t seq, int64_t time_ms, const void *data, size_t len,
                     br_err_t *err)
{
    if (stream != 1 && stream != 2)
        return br_errf(err, EINVAL, "log: stream must be 1 or 2");
    if (job_id <= 0 || attempt < 1 || rank < 0 || seq < 0)
        return br_errf(err, EINVAL, "log: bad job, attempt, rank or seq");
    if (len > BLOB_MAX || (len && !data))
        return br_errf(err, EINVAL, "log: chunk over %d bytes or missing", BLOB_MAX);
    sqlite3_stmt *st = s->st[ST_LOG_ADD];
    int rc = sqlite3_bind_int64(st, 1, job_id);
    rc |= sqlite3_bind_int(st, 2, attempt) | sqlite3_bind_int(st, 3, rank);
    rc |= sqlite3_bind_int(st, 4, stream) | sqlite3_bind_int64(st, 5, seq);
    rc |= sqlite3_bind_int64(st, 6, time_ms);
    rc |= sqlite3_bind_blob(st, 7, len ? data : "", (int)len, SQLITE_TRANSIENT);
    if (rc)
        return br_st_binderr(s, st, "add log", err);
    if (br_st_run(s, st, "add log", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    if (sqlite3_changes(s->db) == 0 || len == 0)
        return 0; /* a chunk seen before */
    st = s->st[ST_LOG_COUNT];
    if (sqlite3_bind_int64(st, 1, job_id) || sqlite3_bind_int64(st, 2, (int64_t)len))
        return br_st_binderr(s, st, "count log", err);
    rc = sqlite3_step(st);
    br_st_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : br_st_dberr(s, err, "count log");
}

int64_t br_store_log_cap(br_store_t *s, int64_t job_id, int64_t max_bytes, br_err_t *err)
{
    if (max_bytes <= 0)
        return 0;
    sqlite3_stmt *st = s->st[ST_LOG_BYTES];
    if (sqlite3_bind_int64(st, 1, job_id))
        return br_st_binderr(s, st, "count log", err);
    int rc = sqlite3_step(st);
    int64_t bytes = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "count log");
    if (bytes <= max_bytes)
        return 0;
    /* drop the oldest chunks down to 7/8 of the cap, so that a job printing on
     * does not trim at every chunk */
    int64_t goal = bytes - max_bytes / 8 * 7, dropped = 0, last = 0;
    st = s->st[ST_LOG_OLDEST];
    if (sqlite3_bind_int64(st, 1, job_id))
        return br_st_binderr(s, st, "trim log", err);
    while (dropped < goal && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        last = sqlite3_column_int64(st, 0);
        dropped += sqlite3_column_int64(st, 1);
    }
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "trim log");
    st = s->st[ST_LOG_TRIM];
    if (sqlite3_bind_int64(st, 1, job_id) || sqlite3_bind_int64(st, 2, last))
        return br_st_binderr(s, st, "trim log", err);
    if (br_st_run(s, st, "trim log", err) < 0)
        return -1;
    st = s->st[ST_LOG_TRIMMED];
    if (sqlite3_bind_int64(st, 1, job_id) || sqlite3_bind_int64(st, 2, dropped))
        return br_st_binderr(s, st, "trim log", err);
    return br_st_run(s, st, "trim log", err) < 0 ? -1 : dropped;
}

int64_t br_store_log_expire(br_store_t *s, int64_t ended_before_ms, int max_rows,
                            br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_LOG_EXPIRE];
    if (sqlite3_bind_int64(st, 1, ended_before_ms) || sqlite3_bind_int(st, 2, max_rows))
        return br_st_binderr(s, st, "expire logs", err);
    if (br_st_run(s, st, "expire logs", err) < 0)
        return -1;
    int64_t n = sqlite3_changes(s->db);
    st = s->st[ST_LOG_EXPIRED];
    if (sqlite3_bind_int64(st, 1, ended_before_ms))
        return br_st_binderr(s, st, "expire logs", err);
    return br_st_run(s, st, "expire logs", err) < 0 ? -1 : n;
}

int br_store_log_read(br_store_t *s, int64_t job_id, int rank, int64_t after,
                      size_t max_bytes, br_log_chunk_fn fn, void *arg, int64_t *next,
                      br_err_t *err)
{
    if (!fn)
        return br_errf(err, EINVAL, "log read needs a chunk function");
    sqlite3_stmt *st = s->st[ST_LOG_READ];
    int rc = sqlite3_bind_int64(st, 1, job_id);
    rc |= sqlite3_bind_int64(st, 2, after) |
          sqlite3_bind_int(st, 3, rank < 0 ? -1 : rank);
    if (rc)
        return br_st_binderr(s, st, "read log", err);
    size_t total = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *data = sqlite3_column_blob(st, 4);
        size_t len = (size_t)sqlite3_column_bytes(st, 4);
        if (total > 0 && total + len > max_bytes) { /* the next page begins with it */
            rc = SQLITE_DONE;
            break;
        }
        fn(arg, sqlite3_column_int(st, 1), sqlite3_column_int(st, 2),
           sqlite3_column_int(st, 3), data ? data : "", len);
        if (next)
            *next = sqlite3_column_int64(st, 0);
        total += len;
    }
    int ret = rc == SQLITE_DONE ? 0 : br_st_dberr(s, err, "read log");
    br_st_reset(st);
    return ret;
}

int64_t br_store_log_lost_all(br_store_t *s, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_LOG_LOST_ALL];
    int64_t n = 0;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    br_st_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : br_st_dberr(s, err, "sum lost output");
}
