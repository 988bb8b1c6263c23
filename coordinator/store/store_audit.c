/* store_audit.c - the audit log of admin actions. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int br_store_audit_add(br_store_t *s, int64_t time_ms, int64_t principal, const char *who,
                       const char *action, const char *target, const char *result,
                       br_err_t *err)
{
    if (br_st_check_text(who, SHORT_MAX, 0, "audit who", err) < 0 ||
        br_st_check_text(action, SHORT_MAX, 0, "audit action", err) < 0 ||
        br_st_check_text(target, SHORT_MAX, 1, "audit target", err) < 0 ||
        br_st_check_text(result, TEXT_MAX, 0, "audit result", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_AUDIT_ADD];
    if (sqlite3_bind_int64(st, 1, time_ms) || sqlite3_bind_int64(st, 2, principal) ||
        br_st_bind_text(st, 3, who) || br_st_bind_text(st, 4, action) ||
        br_st_bind_text(st, 5, target) || br_st_bind_text(st, 6, result))
        return br_st_binderr(s, st, "audit", err);
    return br_st_run(s, st, "audit", err);
}

static json_t *audit_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"id", "time", "who", "action", "target", "result"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= br_st_put(o, names[i], i < 2 ? br_st_col_int(st, i) : br_st_col_text(st, i));
    return br_st_row_done(o, bad, "audit entry", err);
}

json_t *br_store_audit_list(br_store_t *s, int64_t after, int limit, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_AUDIT_LIST];
    if (sqlite3_bind_int64(st, 1, after) || sqlite3_bind_int(st, 2, limit > 0 ? limit : -1)) {
        br_st_binderr(s, st, "list audit", err);
        return NULL;
    }
    return br_st_list_rows(s, st, audit_row, "list audit", err);
}
