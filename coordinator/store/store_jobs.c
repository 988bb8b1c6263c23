/* store_jobs.c - jobs, their attempts and who ran them, and their events. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Given only at insert, all required. Bound as ?1..?6 of ST_JOB_ADD. */
static const jfield_t job_add_fields[] = {
    {"name", F_STR},    {"kind", F_STR},       {"owner", F_STR},
    {"spec", F_OBJECT}, {"spec_yaml", F_YAML}, {"submitted", F_INT},
};
/* br_store_job_update's keys, in ST_JOB_UPDATE's order; ?7..?28 of ST_JOB_ADD. */
static const jfield_t job_fields[] = {
    {"state", F_STR},          {"attempt", F_INT},      {"nodes", F_ARRAY},
    {"assign", F_ANY},         {"started", F_INT_NULL}, {"ended", F_INT_NULL},
    {"exit_code", F_INT_NULL}, {"signal", F_INT_NULL},  {"reason", F_STR_NULL},
    /* the job core's bookkeeping (coordinator/core/job.h) */
    {"restarts", F_INT},       {"not_before", F_INT_NULL}, {"fresh_after", F_INT_NULL},
    {"lost_at", F_INT_NULL},   {"exclude", F_ANY},         {"placement", F_STR_NULL},
    {"service", F_INT_NULL},   {"replica", F_INT_NULL},    {"replicas", F_INT_NULL},
    /* what it used (usage.c) */
    {"gpu_ms", F_INT},         {"cpu_ms", F_INT},          {"cost_micros", F_INT},
    {"charged", F_INT_NULL},
};
/* Optional at insert, never updated; ?29.. of ST_JOB_ADD, after job_fields. */
static const jfield_t job_add_extra[] = {
    {"owner_id", F_INT_NULL}, {"array_of", F_INT_NULL}, {"array_index", F_INT_NULL},
};

int br_store_job_set_owner(br_store_t *s, int64_t job, const char *owner, int64_t owner_id,
                           br_err_t *err)
{
    if (br_st_check_text(owner, SHORT_MAX, 0, "owner", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_JOB_SET_OWNER];
    if (sqlite3_bind_int64(st, 1, job) || br_st_bind_text(st, 2, owner) ||
        sqlite3_bind_int64(st, 3, owner_id))
        return br_st_binderr(s, st, "set owner", err);
    return br_st_run(s, st, "set owner", err);
}

int br_store_job_set_reason(br_store_t *s, int64_t job, const char *reason, br_err_t *err)
{
    size_t len = reason ? strnlen(reason, TEXT_MAX + 1) : 0;
    if (len > TEXT_MAX || (reason && !br_st_valid_utf8(reason, len)))
        return br_errf(err, EINVAL, "job field 'reason' must be UTF-8 of at most %d bytes",
                       TEXT_MAX);
    sqlite3_stmt *st = s->st[ST_JOB_SET_REASON];
    if (sqlite3_bind_int64(st, 1, job) || br_st_bind_text(st, 2, reason))
        return br_st_binderr(s, st, "set reason", err);
    return br_st_run_on_job(s, st, "set reason", job, err);
}

int br_store_attempt_node_add(br_store_t *s, int64_t job, int attempt, const char *node,
                              br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_NODE_ADD];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node))
        return br_st_binderr(s, st, "record attempt node", err);
    return br_st_run(s, st, "record attempt node", err);
}

int br_store_attempt_exited(br_store_t *s, int64_t job, int attempt, const char *node,
                            br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_EXITED];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node))
        return br_st_binderr(s, st, "record exit", err);
    if (br_st_run(s, st, "record exit", err) < 0)
        return -1;
    return sqlite3_changes(s->db) == 1;
}

int br_store_attempt_reopen(br_store_t *s, int64_t job, int attempt, const char *node,
                            br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_REOPEN];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node))
        return br_st_binderr(s, st, "reopen attempt", err);
    return br_st_run(s, st, "reopen attempt", err);
}

int br_store_attempt_node_ran(br_store_t *s, int64_t job, int attempt, const char *node,
                              br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_NODE_RAN];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node))
        return br_st_binderr(s, st, "find attempt node", err);
    int rc = sqlite3_step(st);
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "find attempt node");
    return rc == SQLITE_ROW;
}

static int field_ok(ftype_t type, const json_t *v)
{
    switch (type) {
    case F_STR:
        return json_is_string(v) && json_string_length(v) <= SHORT_MAX;
    case F_INT:
        return json_is_integer(v);
    case F_ARRAY:
        return json_is_array(v);
    case F_OBJECT:
        return json_is_object(v);
    case F_YAML:
        return json_is_string(v) && json_string_length(v) <= BLOB_MAX;
    case F_ANY:
        return v != NULL;
    case F_INT_NULL:
        return json_is_null(v) || json_is_integer(v);
    case F_STR_NULL:
        return json_is_null(v) ||
               (json_is_string(v) && json_string_length(v) <= TEXT_MAX);
    }
    return 0;
}

static const char *const ftype_names[] = {
    [F_STR] = "a string",
    [F_INT] = "an integer",
    [F_ARRAY] = "an array",
    [F_OBJECT] = "an object",
    [F_YAML] = "a string",
    [F_ANY] = "JSON",
    [F_INT_NULL] = "an integer or null",
    [F_STR_NULL] = "a string or null",
};

/* Check the fields of a table that job holds; required ones must be there. */
static int check_fields(const json_t *job, const jfield_t *fields, size_t n,
                        int required, br_err_t *err)
{
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(job, fields[i].key);
        if (!v && !required)
            continue;
        if (!v)
            return br_errf(err, EINVAL, "job field '%s' is missing", fields[i].key);
        if (!field_ok(fields[i].type, v))
            return br_errf(err, EINVAL, "job field '%s' must be %s (of bounded size)",
                           fields[i].key, ftype_names[fields[i].type]);
    }
    return 0;
}

/* Every key of an update must be one of job_fields. */
static int check_update_keys(const json_t *fields, br_err_t *err)
{
    json_t *obj = (json_t *)fields;
    for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
        const char *key = json_object_iter_key(it);
        size_t i = 0;
        while (i < NFIELDS(job_fields) && strcmp(key, job_fields[i].key) != 0)
            i++;
        if (i == NFIELDS(job_fields))
            return br_errf(err, EINVAL, "job field '%.40s' cannot be updated", key);
    }
    return check_fields(fields, job_fields, NFIELDS(job_fields), 0, err);
}

static int bind_job_add(br_store_t *s, sqlite3_stmt *st, const json_t *job,
                        br_err_t *err)
{
    int i = 1;
    for (size_t f = 0; f < NFIELDS(job_add_fields); f++, i++) {
        const jfield_t *jf = &job_add_fields[f];
        if (br_st_bind_field(s, st, i, jf->type, json_object_get(job, jf->key), "add job",
                             err))
            return -1;
    }
    for (size_t f = 0; f < NFIELDS(job_fields); f++, i++) {
        const jfield_t *jf = &job_fields[f];
        if (br_st_bind_field(s, st, i, jf->type, json_object_get(job, jf->key), "add job",
                             err))
            return -1;
    }
    for (size_t f = 0; f < NFIELDS(job_add_extra); f++, i++)
        if (br_st_bind_field(s, st, i, F_INT_NULL, json_object_get(job, job_add_extra[f].key),
                             "add job", err))
            return -1;
    return 0;
}

int64_t br_store_job_add(br_store_t *s, const json_t *job, br_err_t *err)
{
    if (!json_is_object(job))
        return br_errf(err, EINVAL, "a job must be a JSON object");
    if (check_fields(job, job_add_fields, NFIELDS(job_add_fields), 1, err) < 0 ||
        check_fields(job, job_fields, NFIELDS(job_fields), 0, err) < 0 ||
        check_fields(job, job_add_extra, NFIELDS(job_add_extra), 0, err) < 0)
        return -1;
    if (!json_object_get(job, "state"))
        return br_errf(err, EINVAL, "job field 'state' is missing");
    sqlite3_stmt *st = s->st[ST_JOB_ADD];
    if (bind_job_add(s, st, job, err) < 0) {
        br_st_reset(st);
        return -1;
    }
    if (br_st_run(s, st, "add job", err) < 0)
        return -1;
    return sqlite3_last_insert_rowid(s->db);
}

int br_store_job_update(br_store_t *s, int64_t id, const json_t *fields, br_err_t *err)
{
    if (!json_is_object(fields))
        return br_errf(err, EINVAL, "job fields must be a JSON object");
    if (check_update_keys(fields, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_JOB_UPDATE];
    for (size_t f = 0; f < NFIELDS(job_fields); f++) {
        const json_t *v = json_object_get(fields, job_fields[f].key);
        int i = 2 * (int)f + 1;
        if (sqlite3_bind_int(st, i, v != NULL))
            return br_st_binderr(s, st, "update job", err);
        if (br_st_bind_field(s, st, i + 1, job_fields[f].type, v, "update job", err) < 0) {
            br_st_reset(st);
            return -1;
        }
    }
    if (sqlite3_bind_int64(st, 2 * (int)NFIELDS(job_fields) + 1, id))
        return br_st_binderr(s, st, "update job", err);
    return br_st_run_on_job(s, st, "update job", id, err);
}

/* A job row (JOB_COLS, then spec_yaml when with_yaml) as the CLI's object. */
static json_t *job_row(sqlite3_stmt *st, int with_yaml, br_err_t *err)
{
    static const char *const names[] = {
        "id",          "name",     "kind",       "state",       "attempt",   "owner",
        "nodes",       "assign",   "submitted",  "started",     "ended",     "exit_code",
        "signal",      "reason",   "spec",       "owner_id",    "log_bytes", "log_dropped",
        "restarts",    "not_before", "fresh_after", "lost_at",  "exclude",   "placement",
        "service",     "replica",  "replicas",   "gpu_ms",      "cpu_ms",    "cost_micros",
        "charged",     "array_of", "array_index", "spec_yaml",
    };
    json_t *o = json_object();
    int bad = 0, n = with_yaml ? 34 : 33;
    for (int i = 0; i < n; i++) {
        json_t *v;
        if (i == 6 || i == 7 || i == 14 || i == 22)
            v = br_st_col_json(st, i);
        else if (sqlite3_column_type(st, i) == SQLITE_INTEGER)
            v = br_st_col_int(st, i);
        else
            v = br_st_col_text(st, i);
        bad |= br_st_put(o, names[i], v);
    }
    bad |= !json_is_array(json_object_get(o, "nodes"));
    bad |= !json_is_object(json_object_get(o, "spec"));
    return br_st_row_done(o, bad, "job", err);
}

static json_t *job_row_list(sqlite3_stmt *st, br_err_t *err)
{
    return job_row(st, 0, err);
}

json_t *br_store_job_get(br_store_t *s, int64_t id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_JOB_GET];
    if (sqlite3_bind_int64(st, 1, id)) {
        br_st_binderr(s, st, "get job", err);
        return NULL;
    }
    int rc = sqlite3_step(st);
    json_t *job = NULL;
    if (rc == SQLITE_ROW)
        job = job_row(st, 1, err);
    else if (rc == SQLITE_DONE)
        br_errf(err, ENOENT, "no job %lld", (long long)id);
    else
        br_st_dberr(s, err, "get job");
    br_st_reset(st);
    return job;
}

/* The state filter as a JSON array text for json_each, or NULL on error. */
static char *states_json(const char *const *states, br_err_t *err)
{
    json_t *arr = json_array();
    size_t n = 0;
    for (; arr && states[n] && n < STATES_MAX; n++)
        if (json_array_append_new(arr, json_string(states[n])) < 0)
            break;
    char *text = NULL;
    if (arr && !states[n])
        text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!text)
        br_errf(err, EINVAL, "job list: bad state filter (at most %d UTF-8 states)",
                STATES_MAX);
    return text;
}

json_t *br_store_job_list(br_store_t *s, const char *const *states, int limit,
                          br_err_t *err)
{
    if (limit < 0)
        return br_errp(err, EINVAL, "job list: negative limit");
    sqlite3_stmt *st = s->st[states ? ST_JOB_LIST_STATES : ST_JOB_LIST];
    char *filter = states ? states_json(states, err) : NULL;
    if (states && !filter)
        return NULL;
    int rc = sqlite3_bind_int(st, 1, limit ? limit : -1);
    if (rc == SQLITE_OK && filter)
        rc = sqlite3_bind_text(st, 2, filter, -1, SQLITE_TRANSIENT);
    free(filter);
    if (rc != SQLITE_OK) {
        br_st_binderr(s, st, "list jobs", err);
        return NULL;
    }
    return br_st_list_rows(s, st, job_row_list, "list jobs", err);
}

json_t *br_store_job_list_recent(br_store_t *s, int64_t ended_since_ms, int limit,
                                 br_err_t *err)
{
    if (limit < 0)
        return br_errp(err, EINVAL, "job list: negative limit");
    sqlite3_stmt *st = s->st[ST_JOB_LIST_RECENT];
    if (sqlite3_bind_int64(st, 1, ended_since_ms) ||
        sqlite3_bind_int(st, 2, limit ? limit : -1)) {
        br_st_binderr(s, st, "list recent jobs", err);
        return NULL;
    }
    return br_st_list_rows(s, st, job_row_list, "list recent jobs", err);
}

int br_store_job_set_array(br_store_t *s, int64_t id, int64_t array_of, int index,
                           br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_JOB_SET_ARRAY];
    if (sqlite3_bind_int64(st, 1, id) || sqlite3_bind_int64(st, 2, array_of) ||
        sqlite3_bind_int(st, 3, index))
        return br_st_binderr(s, st, "set job array", err);
    return br_st_run_on_job(s, st, "set job array", id, err);
}

int64_t br_store_job_array_task(br_store_t *s, int64_t array_of, int index, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_JOB_ARRAY_TASK];
    if (sqlite3_bind_int64(st, 1, array_of) || sqlite3_bind_int(st, 2, index))
        return br_st_binderr(s, st, "find array task", err);
    int rc = sqlite3_step(st);
    int64_t id = rc == SQLITE_ROW    ? sqlite3_column_int64(st, 0)
                 : rc == SQLITE_DONE ? br_errf(err, ENOENT, "no job %lld[%d]",
                                               (long long)array_of, index)
                                     : br_st_dberr(s, err, "find array task");
    br_st_reset(st);
    return id;
}

int64_t br_store_event_add(br_store_t *s, int64_t time_ms, int64_t job_id,
                           const char *node, const char *state, const char *reason,
                           br_err_t *err)
{
    if (job_id < 0)
        return br_errf(err, EINVAL, "event: bad job id %lld", (long long)job_id);
    if (br_st_check_text(node, SHORT_MAX, 1, "event node", err) < 0 ||
        br_st_check_text(state, SHORT_MAX, 0, "event state", err) < 0 ||
        br_st_check_text(reason, TEXT_MAX, 1, "event reason", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_EVENT_ADD];
    int rc = sqlite3_bind_int64(st, 1, time_ms);
    rc |= job_id ? sqlite3_bind_int64(st, 2, job_id) : sqlite3_bind_null(st, 2);
    rc |= br_st_bind_text(st, 3, node) | br_st_bind_text(st, 4, state) |
          br_st_bind_text(st, 5, reason);
    if (rc)
        return br_st_binderr(s, st, "add event", err);
    if (br_st_run(s, st, "add event", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    return sqlite3_last_insert_rowid(s->db);
}

int br_store_event_seen(br_store_t *s, int64_t job_id, const char *reason,
                        br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_EVENT_SEEN];
    if (sqlite3_bind_int64(st, 1, job_id) || br_st_bind_text(st, 2, reason))
        return br_st_binderr(s, st, "find event", err);
    int rc = sqlite3_step(st);
    int ret = rc == SQLITE_ROW    ? 1
              : rc == SQLITE_DONE ? 0
                                  : br_st_dberr(s, err, "find event");
    br_st_reset(st);
    return ret;
}

static json_t *event_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"id", "time", "job", "node", "state", "reason"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= br_st_put(o, names[i], i < 3 ? br_st_col_int(st, i) : br_st_col_text(st, i));
    return br_st_row_done(o, bad, "event", err);
}

json_t *br_store_event_list(br_store_t *s, int64_t job_id, int64_t after, int limit,
                            br_err_t *err)
{
    if (limit < 0 || job_id < 0)
        return br_errp(err, EINVAL, "event list: negative limit or job id");
    sqlite3_stmt *st = s->st[job_id ? ST_EVENT_LIST_JOB : ST_EVENT_LIST];
    int rc = sqlite3_bind_int64(st, 1, after);
    rc |= sqlite3_bind_int(st, 2, limit ? limit : -1);
    if (job_id)
        rc |= sqlite3_bind_int64(st, 3, job_id);
    if (rc) {
        br_st_binderr(s, st, "list events", err);
        return NULL;
    }
    return br_st_list_rows(s, st, event_row, "list events", err);
}

static json_t *job_count_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "state", br_st_col_text(st, 0));
    bad |= br_st_put(o, "owner", br_st_col_text(st, 1));
    bad |= br_st_put(o, "count", br_st_col_int(st, 2));
    bad |= br_st_put(o, "log_dropped", br_st_col_int(st, 3));
    return br_st_row_done(o, bad, "job count", err);
}

json_t *br_store_job_counts(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_JOB_COUNTS], job_count_row, "count jobs", err);
}
