/* store_keys.c - principals (admins, users, nodes), their CURVE keys, unix users
 * and join or metrics tokens. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    [BR_PRINCIPAL_ADMIN] = "admin",
    [BR_PRINCIPAL_USER] = "user",
    [BR_PRINCIPAL_NODE] = "node",
    [BR_PRINCIPAL_GATEWAY] = "gateway",
};

const char *br_st_kind_name(br_principal_t kind)
{
    return (unsigned)kind < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[kind]
                                                                         : NULL;
}

static br_principal_t kind_parse(const char *text)
{
    for (int k = BR_PRINCIPAL_ADMIN; k <= BR_PRINCIPAL_GATEWAY; k++)
        if (text && kind_names[k] && strcmp(text, kind_names[k]) == 0)
            return (br_principal_t)k;
    return BR_PRINCIPAL_UNKNOWN;
}

/* The id of the live principal kind + name, made when there is none: 0 or -1. */
static int principal_of(br_store_t *s, br_principal_t kind, const char *name,
                        int64_t *id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_PRINCIPAL_FIND];
    if (br_st_bind_text(st, 1, br_st_kind_name(kind)) || br_st_bind_text(st, 2, name))
        return br_st_binderr(s, st, "find principal", err);
    int rc = sqlite3_step(st);
    *id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "find principal");
    if (*id)
        return 0;
    st = s->st[ST_PRINCIPAL_ADD];
    if (br_st_bind_text(st, 1, br_st_kind_name(kind)) || br_st_bind_text(st, 2, name) ||
        sqlite3_bind_int64(st, 3, br_now_ms()))
        return br_st_binderr(s, st, "add principal", err);
    if (br_st_run(s, st, "add principal", err) < 0)
        return -1;
    *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int br_store_key_add(br_store_t *s, const char *pubkey, br_principal_t kind,
                     const char *name, br_err_t *err)
{
    int64_t principal;
    if (br_st_check_pubkey(pubkey, err) < 0 ||
        br_st_check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return -1;
    if (!br_st_kind_name(kind))
        return br_errf(err, EINVAL, "a key's principal must be admin, user, node or gateway");
    if (principal_of(s, kind, name, &principal, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_KEY_ADD];
    if (br_st_bind_text(st, 1, pubkey) || br_st_bind_text(st, 2, br_st_kind_name(kind)) ||
        br_st_bind_text(st, 3, name) || sqlite3_bind_int64(st, 4, br_now_ms()) ||
        sqlite3_bind_int64(st, 5, principal))
        return br_st_binderr(s, st, "add key", err);
    if (br_st_run(s, st, "add key", err) < 0)
        return errno == EEXIST ? br_errf(err, EEXIST, "key already registered") : -1;
    return 0;
}

int br_store_key_lookup(br_store_t *s, const char *pubkey, br_principal_t *kind,
                        char *name, size_t namelen, br_err_t *err)
{
    return br_store_key_who(s, pubkey, kind, name, namelen, NULL, err);
}

int br_store_key_who(br_store_t *s, const char *pubkey, br_principal_t *kind, char *name,
                     size_t namelen, int64_t *id, br_err_t *err)
{
    if (!kind)
        return br_errf(err, EINVAL, "key lookup needs somewhere to put the kind");
    *kind = BR_PRINCIPAL_UNKNOWN;
    if (id)
        *id = 0;
    if (name && namelen)
        name[0] = '\0';
    if (br_st_check_pubkey(pubkey, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_KEY_LOOKUP];
    if (br_st_bind_text(st, 1, pubkey))
        return br_st_binderr(s, st, "look up key", err);
    int rc = sqlite3_step(st), ret = 0;
    if (rc == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        const char *n = (const char *)sqlite3_column_text(st, 1);
        *kind = sqlite3_column_int(st, 2) ? BR_PRINCIPAL_REVOKED : kind_parse(k);
        if (id)
            *id = sqlite3_column_int64(st, 3);
        if (name && namelen)
            br_strlcpy(name, n ? n : "", namelen);
        if (kind_parse(k) == BR_PRINCIPAL_UNKNOWN)
            ret = br_errf(err, EIO, "store: key has an unknown kind");
    } else if (rc != SQLITE_DONE) {
        ret = br_st_dberr(s, err, "look up key");
    }
    br_st_reset(st);
    return ret;
}

int br_store_key_revoke(br_store_t *s, br_principal_t kind, const char *name,
                        br_err_t *err)
{
    if (br_st_check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return -1;
    if (!br_st_kind_name(kind))
        return br_errf(err, EINVAL, "a key's principal must be admin, user, node or gateway");
    sqlite3_stmt *st = s->st[ST_KEY_REVOKE];
    if (br_st_bind_text(st, 1, br_st_kind_name(kind)) || br_st_bind_text(st, 2, name))
        return br_st_binderr(s, st, "revoke key", err);
    if (br_st_run(s, st, "revoke key", err) < 0)
        return -1;
    st = s->st[ST_PRINCIPAL_REMOVE]; /* its id is never given to anyone again */
    if (br_st_bind_text(st, 1, br_st_kind_name(kind)) || br_st_bind_text(st, 2, name) ||
        sqlite3_bind_int64(st, 3, br_now_ms()))
        return br_st_binderr(s, st, "remove principal", err);
    return br_st_run(s, st, "remove principal", err);
}

int br_store_key_revoke_one(br_store_t *s, const char *pubkey, br_err_t *err)
{
    if (br_st_check_pubkey(pubkey, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_KEY_REVOKE_ONE];
    if (br_st_bind_text(st, 1, pubkey))
        return br_st_binderr(s, st, "revoke key", err);
    if (br_st_run(s, st, "revoke key", err) < 0)
        return -1;
    return sqlite3_changes(s->db) == 1 ? 0 : br_errf(err, ENOENT, "no such key");
}

int br_store_unix_user_set(br_store_t *s, const char *name, const char *unix_user,
                           br_err_t *err)
{
    if (br_st_check_text(name, SHORT_MAX, 0, "name", err) < 0 ||
        br_st_check_text(unix_user, SHORT_MAX, 1, "unix user", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_UNIX_USER_SET];
    if (br_st_bind_text(st, 1, "user") || br_st_bind_text(st, 2, name) ||
        br_st_bind_text(st, 3, unix_user))
        return br_st_binderr(s, st, "set unix user", err);
    if (br_st_run(s, st, "set unix user", err) < 0)
        return -1;
    return sqlite3_changes(s->db) ? 0 : br_errf(err, ENOENT, "no user '%s'", name);
}

int br_store_unix_user_get(br_store_t *s, int64_t principal, char *buf, size_t len,
                           br_err_t *err)
{
    buf[0] = '\0';
    sqlite3_stmt *st = s->st[ST_UNIX_USER_GET];
    if (sqlite3_bind_int64(st, 1, principal))
        return br_st_binderr(s, st, "get unix user", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        br_strlcpy(buf, (const char *)sqlite3_column_text(st, 0), len);
    br_st_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : br_st_dberr(s, err, "get unix user");
}

int br_store_principal_id(br_store_t *s, br_principal_t kind, const char *name,
                          int64_t *id, br_err_t *err)
{
    *id = 0;
    if (!br_st_kind_name(kind) || br_st_check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return br_errf(err, EINVAL, "a principal is an admin, a user or a node, by name");
    sqlite3_stmt *st = s->st[ST_PRINCIPAL_FIND];
    if (br_st_bind_text(st, 1, br_st_kind_name(kind)) || br_st_bind_text(st, 2, name))
        return br_st_binderr(s, st, "find principal", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    br_st_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : br_st_dberr(s, err, "find principal");
}

int br_store_token_join_key_known(br_store_t *s, const char *pubkey, int64_t now_ms,
                                  br_err_t *err)
{
    if (br_st_check_pubkey(pubkey, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_TOKEN_JOIN_KEY];
    if (br_st_bind_text(st, 1, pubkey) ||
        sqlite3_bind_int64(st, 2, now_ms - BR_STORE_TOKEN_KEY_GRACE_MS))
        return br_st_binderr(s, st, "find join key", err);
    int rc = sqlite3_step(st);
    br_st_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return br_st_dberr(s, err, "find join key");
    return rc == SQLITE_ROW;
}

static json_t *user_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "name", br_st_col_text(st, 0));
    bad |= br_st_put(o, "kind", br_st_col_text(st, 1));
    bad |= br_st_put(o, "created", br_st_col_int(st, 2));
    return br_st_row_done(o, bad, "key", err);
}

json_t *br_store_key_list_users(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_KEY_USERS], user_row, "list users", err);
}

json_t *br_store_key_list_gateways(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_KEY_GATEWAYS], user_row, "list gateways", err);
}

int br_store_token_add(br_store_t *s, const char *id, const char *hash_hex,
                       int64_t created_ms, int64_t expires_ms, int uses_max,
                       const char *join_key, br_err_t *err)
{
    if (br_st_check_text(id, TOKEN_ID_MAX, 0, "token id", err) < 0 ||
        br_st_check_text(hash_hex, SHORT_MAX, 0, "token hash", err) < 0 ||
        (join_key && br_st_check_pubkey(join_key, err) < 0))
        return -1;
    if (uses_max < 1)
        return br_errf(err, EINVAL, "a token needs at least one use");
    sqlite3_stmt *st = s->st[ST_TOKEN_ADD];
    if (br_st_bind_text(st, 1, id) || br_st_bind_text(st, 2, hash_hex) ||
        sqlite3_bind_int64(st, 3, created_ms) ||
        sqlite3_bind_int64(st, 4, expires_ms) || sqlite3_bind_int(st, 5, uses_max) ||
        br_st_bind_text(st, 6, join_key))
        return br_st_binderr(s, st, "add token", err);
    if (br_st_run(s, st, "add token", err) < 0)
        return errno == EEXIST ? br_errf(err, EEXIST, "token already exists") : -1;
    return 0;
}

/* Why a token may not be used now, or NULL. Order: revoked, expired, used up. */
static const char *token_refusal(sqlite3_stmt *find, int64_t now_ms)
{
    if (sqlite3_column_int(find, 4))
        return "token revoked";
    if (sqlite3_column_int64(find, 1) <= now_ms)
        return "token expired";
    if (sqlite3_column_int64(find, 2) >= sqlite3_column_int64(find, 3))
        return "token used up";
    return NULL;
}

int br_store_token_use(br_store_t *s, const char *hash_hex, int64_t now_ms, char *id,
                       br_err_t *err)
{
    if (br_st_check_text(hash_hex, SHORT_MAX, 0, "token hash", err) < 0)
        return br_errf(err, EACCES, "token not recognised");
    sqlite3_stmt *st = s->st[ST_TOKEN_FIND];
    if (br_st_bind_text(st, 1, hash_hex))
        return br_st_binderr(s, st, "use token", err);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int ret = rc == SQLITE_DONE ? br_errf(err, EACCES, "token not recognised")
                                    : br_st_dberr(s, err, "use token");
        br_st_reset(st);
        return ret;
    }
    char tid[TOKEN_ID_MAX + 1];
    const char *v = (const char *)sqlite3_column_text(st, 0);
    br_strlcpy(tid, v ? v : "", sizeof(tid));
    const char *why = token_refusal(st, now_ms);
    br_st_reset(st);
    if (why)
        return br_errf(err, EACCES, "%s", why);
    st = s->st[ST_TOKEN_USE];
    if (br_st_bind_text(st, 1, tid))
        return br_st_binderr(s, st, "use token", err);
    if (br_st_run(s, st, "use token", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) != 1)
        return br_errf(err, EACCES, "token used up");
    if (id)
        br_strlcpy(id, tid, TOKEN_ID_MAX + 1);
    return 0;
}

static json_t *token_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "id", br_st_col_text(st, 0));
    bad |= br_st_put(o, "created", br_st_col_int(st, 1));
    bad |= br_st_put(o, "expires", br_st_col_int(st, 2));
    bad |= br_st_put(o, "uses", br_st_col_int(st, 3));
    bad |= br_st_put(o, "uses_max", br_st_col_int(st, 4));
    bad |= br_st_put(o, "revoked", json_boolean(sqlite3_column_int(st, 5)));
    bad |= br_st_put(o, "kind", br_st_col_text(st, 6));
    if (!bad && json_integer_value(json_object_get(o, "expires")) == 0)
        bad |= br_st_put(o, "expires", json_null()); /* a metrics token that never expires */
    return br_st_row_done(o, bad, "token", err);
}

json_t *br_store_token_list(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_TOKEN_LIST], token_row, "list tokens", err);
}

int br_store_token_add_metrics(br_store_t *s, const char *id, const char *hash_hex,
                               int64_t created_ms, int64_t expires_ms, br_err_t *err)
{
    if (br_st_check_text(id, TOKEN_ID_MAX, 0, "token id", err) < 0 ||
        br_st_check_text(hash_hex, SHORT_MAX, 0, "token hash", err) < 0)
        return -1;
    if (expires_ms < 0)
        return br_errf(err, EINVAL, "a token's expiry cannot be negative");
    sqlite3_stmt *st = s->st[ST_TOKEN_ADD_METRICS];
    if (br_st_bind_text(st, 1, id) || br_st_bind_text(st, 2, hash_hex) ||
        sqlite3_bind_int64(st, 3, created_ms) || sqlite3_bind_int64(st, 4, expires_ms))
        return br_st_binderr(s, st, "add metrics token", err);
    if (br_st_run(s, st, "add metrics token", err) < 0)
        return errno == EEXIST ? br_errf(err, EEXIST, "token already exists") : -1;
    return 0;
}

static json_t *metrics_token_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = br_st_put(o, "id", br_st_col_text(st, 0));
    bad |= br_st_put(o, "hash", br_st_col_text(st, 1));
    bad |= br_st_put(o, "expires", br_st_col_int(st, 2));
    bad |= br_st_put(o, "revoked", json_boolean(sqlite3_column_int(st, 3)));
    return br_st_row_done(o, bad, "token", err);
}

json_t *br_store_token_list_metrics(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_TOKEN_METRICS], metrics_token_row, "list metrics tokens",
                           err);
}

int br_store_token_revoke(br_store_t *s, const char *id, br_err_t *err)
{
    if (br_st_check_text(id, SHORT_MAX, 0, "token id", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_TOKEN_REVOKE];
    if (br_st_bind_text(st, 1, id))
        return br_st_binderr(s, st, "revoke token", err);
    if (br_st_run(s, st, "revoke token", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return br_errf(err, ENOENT, "no token '%.40s'", id);
    return 0;
}
