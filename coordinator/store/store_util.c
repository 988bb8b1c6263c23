/* store_util.c - what every part of the store shares: errors, checked text,
 * binding values and reading rows. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sqlite_errno(int xcode)
{
    switch (xcode) {
    case SQLITE_CONSTRAINT_FOREIGNKEY:
        return ENOENT;
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
        return EEXIST;
    }
    switch (xcode & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return EBUSY;
    case SQLITE_FULL:
        return ENOSPC;
    case SQLITE_READONLY:
        return EROFS;
    case SQLITE_NOMEM:
        return ENOMEM;
    case SQLITE_TOOBIG:
        return EFBIG;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
        return EINVAL;
    }
    return EIO;
}

/* Fill err from the connection's last error: "store: WHAT: sqlite's message". */
int br_st_dberr(br_store_t *s, br_err_t *err, const char *what)
{
    int xcode = sqlite3_extended_errcode(s->db);
    switch (xcode & 0xff) {
    case SQLITE_FULL:
        s->failed = ENOSPC;
        return br_errf(err, ENOSPC, "store full: %s: %s", what, sqlite3_errmsg(s->db));
    case SQLITE_IOERR:
    case SQLITE_CORRUPT:
    case SQLITE_CANTOPEN:
    case SQLITE_NOTADB:
        s->failed = EIO;
        break;
    }
    return br_errf(err, sqlite_errno(xcode), "store: %s: %s", what,
                   sqlite3_errmsg(s->db));
}

void br_st_reset(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Step a statement that returns no rows, then reset it. */
int br_st_run(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err)
{
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : br_st_dberr(s, err, what);
    br_st_reset(st);
    return rc;
}

/* run, for a statement on job id: ENOENT when it changed no row. */
int br_st_run_on_job(br_store_t *s, sqlite3_stmt *st, const char *what, int64_t id,
                      br_err_t *err)
{
    if (br_st_run(s, st, what, err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return br_errf(err, ENOENT, "no job %lld", (long long)id);
    return 0;
}

/* A bind failure (out of memory, misuse): report it and reset the statement. */
int br_st_binderr(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err)
{
    br_st_dberr(s, err, what);
    br_st_reset(st);
    return -1;
}

int br_st_valid_utf8(const char *v, size_t len)
{
    json_t *j = json_stringn(v, len);
    json_decref(j);
    return j != NULL;
}

/* A C string argument: present unless nullable, 1..max bytes, UTF-8. */
int br_st_check_text(const char *v, size_t max, int nullable, const char *what,
                      br_err_t *err)
{
    if (!v)
        return nullable ? 0 : br_errf(err, EINVAL, "%s is missing", what);
    size_t len = strnlen(v, max + 1);
    if (len == 0 || len > max)
        return br_errf(err, EINVAL, "%s must be 1 to %zu bytes", what, max);
    if (!br_st_valid_utf8(v, len))
        return br_errf(err, EINVAL, "%s is not valid UTF-8", what);
    return 0;
}

/* A CURVE public key in Z85: exactly 40 characters of the Z85 alphabet. */
int br_st_check_pubkey(const char *key, br_err_t *err)
{
    static const char z85[] =
        "0123456789abcdefghijklmnopqrstuvwxyz"
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    if (!key || strnlen(key, 41) != 40 || strspn(key, z85) != 40)
        return br_errf(err, EINVAL, "public key must be 40 characters of Z85");
    return 0;
}

int br_st_bind_text(sqlite3_stmt *st, int i, const char *v)
{
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT)
             : sqlite3_bind_null(st, i);
}

/* Bind v as compact JSON text (at most BLOB_MAX bytes). */
int br_st_bind_dump(br_store_t *s, sqlite3_stmt *st, int i, const json_t *v,
                     const char *what, br_err_t *err)
{
    size_t len;
    char *text = br_jsontext(v, 0, &len);
    if (!text)
        return br_errf(err, ENOMEM, "store: %s: cannot encode JSON", what);
    int rc = SQLITE_TOOBIG;
    if (len <= BLOB_MAX)
        rc = sqlite3_bind_text(st, i, text, (int)len, SQLITE_TRANSIENT);
    free(text);
    if (rc == SQLITE_TOOBIG)
        return br_errf(err, EFBIG, "store: %s: JSON over %d bytes", what, BLOB_MAX);
    return rc == SQLITE_OK ? 0 : br_st_dberr(s, err, what);
}

/* Bind a checked field: null or absent as NULL, JSON columns (arrays, objects, any)
 * as JSON text, strings and integers as themselves. */
int br_st_bind_field(br_store_t *s, sqlite3_stmt *st, int i, ftype_t type,
                      const json_t *v, const char *what, br_err_t *err)
{
    int rc;
    if (!v || json_is_null(v))
        rc = sqlite3_bind_null(st, i);
    else if (type == F_ARRAY || type == F_OBJECT || type == F_ANY)
        return br_st_bind_dump(s, st, i, v, what, err);
    else if (json_is_string(v))
        rc = sqlite3_bind_text(st, i, json_string_value(v), (int)json_string_length(v),
                               SQLITE_TRANSIENT);
    else
        rc = sqlite3_bind_int64(st, i, json_integer_value(v));
    return rc == SQLITE_OK ? 0 : br_st_dberr(s, err, what);
}

/* Set o[key] = v, taking v; 1 (failure) when either is missing or the set fails. */
int br_st_put(json_t *o, const char *key, json_t *v)
{
    if (!o || !v) {
        json_decref(v);
        return 1;
    }
    return json_object_set_new(o, key, v) != 0;
}

json_t *br_st_col_int(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return json_null();
    return json_integer(sqlite3_column_int64(st, i));
}

json_t *br_st_col_text(sqlite3_stmt *st, int i)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    if (!v)
        return json_null();
    return json_stringn(v, (size_t)sqlite3_column_bytes(st, i));
}

json_t *br_st_col_json(sqlite3_stmt *st, int i)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    if (!v)
        return json_null();
    return json_loadb(v, (size_t)sqlite3_column_bytes(st, i),
                      JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

json_t *br_st_row_done(json_t *o, int bad, const char *what, br_err_t *err)
{
    if (!bad)
        return o;
    json_decref(o);
    return br_errp(err, EIO, "store: unreadable %s row", what);
}


/* Step st to the end, turning each row into an array element with fn. */
json_t *br_st_list_rows(br_store_t *s, sqlite3_stmt *st, row_fn fn, const char *what,
                         br_err_t *err)
{
    json_t *arr = json_array();
    int rc = arr ? SQLITE_ROW : SQLITE_NOMEM;
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *o = fn(st, err);
        if (!o || json_array_append_new(arr, o) < 0) {
            if (o)
                br_errf(err, ENOMEM, "store: %s: out of memory", what);
            break;
        }
    }
    if (rc == SQLITE_DONE) {
        br_st_reset(st);
        return arr;
    }
    if (!arr)
        br_errf(err, ENOMEM, "store: %s: out of memory", what);
    else if (rc != SQLITE_ROW)
        br_st_dberr(s, err, what);
    json_decref(arr);
    br_st_reset(st);
    return NULL;
}
