/* store_usage.c - what principals used, per hour, and their limits. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int br_store_usage_add(br_store_t *s, int64_t principal, int64_t hour, int64_t gpu_ms,
                       int64_t cpu_ms, int64_t cost_micros, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_USAGE_ADD];
    if (sqlite3_bind_int64(st, 1, principal) | sqlite3_bind_int64(st, 2, hour) |
        sqlite3_bind_int64(st, 3, gpu_ms) | sqlite3_bind_int64(st, 4, cpu_ms) |
        sqlite3_bind_int64(st, 5, cost_micros))
        return br_st_binderr(s, st, "add usage", err);
    return br_st_run(s, st, "add usage", err);
}

static json_t *usage_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"principal", "name", "hour",
                                        "gpu_ms",    "cpu_ms", "cost_micros"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= br_st_put(o, names[i], i == 1 ? br_st_col_text(st, i) : br_st_col_int(st, i));
    return br_st_row_done(o, bad, "usage", err);
}

json_t *br_store_usage_since(br_store_t *s, int64_t hour, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_USAGE_SINCE];
    if (sqlite3_bind_int64(st, 1, hour)) {
        br_st_binderr(s, st, "list usage", err);
        return NULL;
    }
    return br_st_list_rows(s, st, usage_row, "list usage", err);
}

int br_store_model_usage_add(br_store_t *s, int64_t principal, const char *model,
                             int64_t hour, const int64_t u[5], br_err_t *err)
{
    if (br_st_check_text(model, SHORT_MAX, 0, "model", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_MODEL_USAGE_ADD];
    int bad = sqlite3_bind_int64(st, 1, principal) | br_st_bind_text(st, 2, model) |
              sqlite3_bind_int64(st, 3, hour);
    for (int i = 0; i < 5; i++)
        bad |= sqlite3_bind_int64(st, 4 + i, u[i]);
    if (bad)
        return br_st_binderr(s, st, "add model usage", err);
    return br_st_run(s, st, "add model usage", err);
}

static json_t *model_usage_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"user",          "model",
                                        "requests",      "errors",
                                        "prompt_tokens", "completion_tokens",
                                        "ms"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 7; i++)
        bad |= br_st_put(o, names[i], i < 2 ? br_st_col_text(st, i) : br_st_col_int(st, i));
    return br_st_row_done(o, bad, "model usage", err);
}

json_t *br_store_model_usage_since(br_store_t *s, int64_t hour, int64_t principal,
                                   br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_MODEL_USAGE_SINCE];
    if (sqlite3_bind_int64(st, 1, hour) || sqlite3_bind_int64(st, 2, principal)) {
        br_st_binderr(s, st, "list model usage", err);
        return NULL;
    }
    return br_st_list_rows(s, st, model_usage_row, "list model usage", err);
}

int br_store_limits_set(br_store_t *s, br_principal_t kind, const char *name,
                        const json_t *limits, br_err_t *err)
{
    if (!br_st_kind_name(kind) || br_st_check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return br_errf(err, EINVAL, "limits belong to an admin or a user, by name");
    sqlite3_stmt *st = s->st[ST_LIMITS_SET];
    if (br_st_bind_text(st, 1, br_st_kind_name(kind)) || br_st_bind_text(st, 2, name))
        return br_st_binderr(s, st, "set limits", err);
    if ((limits && json_object_size(limits)
             ? br_st_bind_dump(s, st, 3, limits, "set limits", err)
             : (sqlite3_bind_null(st, 3) ? -1 : 0)) < 0) {
        br_st_reset(st);
        return -1;
    }
    if (br_st_run(s, st, "set limits", err) < 0)
        return -1;
    return sqlite3_changes(s->db)
               ? 0
               : br_errf(err, ENOENT, "no %s '%s'", br_st_kind_name(kind), name);
}

static json_t *sharer_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "id", br_st_col_int(st, 0));
    bad |= br_st_put(o, "kind", br_st_col_text(st, 1));
    bad |= br_st_put(o, "name", br_st_col_text(st, 2));
    bad |= br_st_put(o, "limits", br_st_col_json(st, 3));
    return br_st_row_done(o, bad, "principal", err);
}

json_t *br_store_sharers(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_SHARERS], sharer_row, "list users", err);
}

int br_store_totals(br_store_t *s, int64_t totals[4], br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_TOTALS];
    int rc = sqlite3_step(st);
    for (int i = 0; i < 4; i++)
        totals[i] = rc == SQLITE_ROW ? sqlite3_column_int64(st, i) : 0;
    br_st_reset(st);
    return rc == SQLITE_ROW ? 0 : br_st_dberr(s, err, "count checkpoints");
}

static json_t *usage_total_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "name", br_st_col_text(st, 0));
    bad |= br_st_put(o, "gpu_ms", br_st_col_int(st, 1));
    bad |= br_st_put(o, "cpu_ms", br_st_col_int(st, 2));
    bad |= br_st_put(o, "cost_micros", br_st_col_int(st, 3));
    return br_st_row_done(o, bad, "usage", err);
}

json_t *br_store_usage_totals(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_USAGE_TOTALS], usage_total_row, "sum usage", err);
}
