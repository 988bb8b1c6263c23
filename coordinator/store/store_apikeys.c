/* store_apikeys.c - the gateway's API keys: a user's, kept by hash only. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int br_store_apikey_add(br_store_t *s, int64_t principal, const char *id, const char *hash,
                        const char *name, const json_t *models, int64_t now_ms,
                        br_err_t *err)
{
    if (br_st_check_text(id, SHORT_MAX, 0, "key id", err) < 0 ||
        br_st_check_text(hash, SHORT_MAX, 0, "key hash", err) < 0 ||
        br_st_check_text(name, SHORT_MAX, 0, "key name", err) < 0)
        return -1;
    if (!json_is_array(models))
        return br_errf(err, EINVAL, "a key's models must be an array");
    sqlite3_stmt *st = s->st[ST_APIKEY_ADD];
    if (br_st_bind_text(st, 1, id) || br_st_bind_text(st, 2, hash) ||
        sqlite3_bind_int64(st, 3, principal) || br_st_bind_text(st, 4, name) ||
        sqlite3_bind_int64(st, 6, now_ms))
        return br_st_binderr(s, st, "add a key", err);
    if (br_st_bind_dump(s, st, 5, models, "add a key", err) < 0) {
        br_st_reset(st);
        return -1;
    }
    if (br_st_run(s, st, "add a key", err) < 0)
        return errno == EEXIST ? br_errf(err, EEXIST, "you have a key named '%s' already "
                                                      "(bramble key list shows them)",
                                         name)
                               : -1;
    return 0;
}

static json_t *key_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"id", "name", "user", "user_id", "models",
                                        "created"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= br_st_put(o, names[i], i == 3 || i == 5 ? br_st_col_int(st, i)
                                      : i == 4        ? br_st_col_json(st, i)
                                                      : br_st_col_text(st, i));
    return br_st_row_done(o, bad, "key", err);
}

json_t *br_store_apikey_list(br_store_t *s, int64_t principal, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_APIKEY_LIST];
    if (sqlite3_bind_int64(st, 1, principal)) {
        br_st_binderr(s, st, "list keys", err);
        return NULL;
    }
    return br_st_list_rows(s, st, key_row, "list keys", err);
}

json_t *br_store_apikey_revoke(br_store_t *s, int64_t principal, const char *id_or_name,
                               br_err_t *err)
{
    if (br_st_check_text(id_or_name, SHORT_MAX, 0, "key", err) < 0)
        return NULL;
    sqlite3_stmt *st = s->st[ST_APIKEY_REVOKE];
    if (sqlite3_bind_int64(st, 1, principal) || br_st_bind_text(st, 2, id_or_name) ||
        sqlite3_bind_int64(st, 3, br_now_ms())) {
        br_st_binderr(s, st, "revoke a key", err);
        return NULL;
    }
    json_t *out = NULL;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) /* (a name and an id may both match) */
        if (!out)
            out = json_pack("{s:o, s:o}", "id", br_st_col_text(st, 0), "name",
                            br_st_col_text(st, 1));
    br_st_reset(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        br_st_dberr(s, err, "revoke a key");
        return NULL;
    }
    if (!out)
        br_errf(err, ENOENT, "no key '%s'%s", id_or_name,
                principal ? " of yours (bramble key list shows them)" : "");
    return out;
}

static json_t *live_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "hash", br_st_col_text(st, 0));
    bad |= br_st_put(o, "user_id", br_st_col_int(st, 1));
    bad |= br_st_put(o, "user", br_st_col_text(st, 2));
    bad |= br_st_put(o, "models", br_st_col_json(st, 3));
    return br_st_row_done(o, bad, "key", err);
}

json_t *br_store_apikey_live(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_APIKEY_LIVE], live_row, "read the keys", err);
}
