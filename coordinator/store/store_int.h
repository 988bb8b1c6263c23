/* store_int.h - what the parts of the store (store*.c) share and nothing else
 * sees: the connection and its prepared statements, the limits on what is
 * stored, and the helpers that check, bind and read. */
#ifndef BRAMBLE_STORE_INT_H
#define BRAMBLE_STORE_INT_H

#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "jsontext.h"
#include "store.h"
#include "util.h"

#define SHORT_MAX 256              /* names, states, kinds, keys, token ids/hashes */
#define TEXT_MAX 4096              /* reasons */
#define BLOB_MAX (4 << 20)         /* JSON columns, spec texts, log chunks */
#define STATES_MAX 64              /* entries in a job list's state filter */
#define TOKEN_ID_MAX 16            /* *id of br_store_token_use holds 17 bytes */
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* Columns of a job row as job_row reads them (job_get adds spec_yaml last). */
#define JOB_COLS                                                                 \
    "id, name, kind, state, attempt, owner, nodes, assign, submitted, started, " \
    "ended, exit_code, signal, reason, spec, owner_id, log_bytes, log_dropped, "  \
    "restarts, not_before, fresh_after, lost_at, exclude, placement, service, "  \
    "replica, replicas, gpu_ms, cpu_ms, cost_micros, charged, array_of, array_index"
/* Columns of a checkpoint row as ckpt_row reads them: the manifest's summary only. */
#define CKPT_COLS                                                              \
    "path, step, attempt, node, size, time, json_extract(manifest, '$.hash')," \
    " json_extract(manifest, '$.files'), json_extract(manifest, '$.bytes'),"   \
    " json_array_length(manifest, '$.entries')"
/* "col = ?a when flag ?f is set": one fixed UPDATE serves every field subset. */
#define UPD(col, f, v) col " = CASE WHEN ?" #f " THEN ?" #v " ELSE " col " END"

/* Every statement the store runs, prepared once at open, finalized in destroy. */
enum {
    ST_BEGIN,
    ST_HIGH_IDS,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SAVEPOINT,
    ST_SAVEPOINT_UNDO,
    ST_SAVEPOINT_RELEASE,
    ST_KEY_ADD,
    ST_KEY_LOOKUP,
    ST_KEY_REVOKE,
    ST_KEY_REVOKE_ONE,
    ST_PRINCIPAL_FIND,
    ST_PRINCIPAL_ADD,
    ST_PRINCIPAL_REMOVE,
    ST_TOKEN_JOIN_KEY,
    ST_JOB_LIST_RECENT,
    ST_UNIX_USER_SET,
    ST_UNIX_USER_GET,
    ST_AUDIT_ADD,
    ST_AUDIT_LIST,
    ST_LOG_LOST_SET,
    ST_LOG_LOST_SUM,
    ST_LOG_LOST_GET,
    ST_LOG_COUNT,
    ST_LOG_OLDEST,
    ST_LOG_BYTES,
    ST_CKPT_UNDER,
    ST_LOG_TRIM,
    ST_LOG_TRIMMED,
    ST_LOG_EXPIRE,
    ST_LOG_EXPIRED,
    ST_ATTEMPT_NODE_ADD,
    ST_ATTEMPT_NODE_RAN,
    ST_ATTEMPT_EXITED,
    ST_ATTEMPT_REOPEN,
    ST_JOB_SET_OWNER,
    ST_JOB_SET_REASON,
    ST_KEY_USERS,
    ST_KEY_GATEWAYS,
    ST_TOKEN_ADD,
    ST_TOKEN_FIND,
    ST_TOKEN_USE,
    ST_TOKEN_LIST,
    ST_TOKEN_REVOKE,
    ST_TOKEN_ADD_METRICS,
    ST_TOKEN_METRICS,
    ST_JOB_COUNTS,
    ST_LOG_LOST_ALL,
    ST_NODE_SAVE,
    ST_NODE_DELETE,
    ST_NODE_LIST,
    ST_JOB_ADD,
    ST_JOB_UPDATE,
    ST_JOB_GET,
    ST_JOB_LIST,
    ST_JOB_LIST_STATES,
    ST_JOB_SET_ARRAY,
    ST_JOB_ARRAY_TASK,
    ST_EVENT_ADD,
    ST_EVENT_SEEN,
    ST_EVENT_LIST,
    ST_EVENT_LIST_JOB,
    ST_LOG_ADD,
    ST_LOG_READ,
    ST_CKPT_ADD,
    ST_CKPT_LIST,
    ST_CKPT_LATEST,
    ST_CKPT_MANIFEST,
    ST_REPL_ADD,
    ST_REPL_DEL,
    ST_REPL_LIST,
    ST_REPL_EXPIRED,
    ST_USAGE_ADD,
    ST_USAGE_SINCE,
    ST_LIMITS_SET,
    ST_MODEL_USAGE_ADD,
    ST_MODEL_USAGE_SINCE,
    ST_SHARERS,
    ST_APIKEY_ADD,
    ST_APIKEY_LIST,
    ST_APIKEY_REVOKE,
    ST_APIKEY_LIVE,
    ST_DATA_ADD,
    ST_DATA_VERSION,
    ST_DATA_LIST,
    ST_DATA_DEL,
    ST_DATA_MANIFEST_USED,
    ST_IMAGE_ADD,
    ST_IMAGE_LIST,
    ST_IMAGE_DEL,
    ST_CODE_UNNEEDED,
    ST_OUT_ADD,
    ST_OUT_LIST,
    ST_OUT_UNNEEDED,
    ST_OUT_DEL,
    ST_REF_HAS_GLOB,
    ST_REF_ADD,
    ST_REF_HASHES,
    ST_REF_DEL,
    ST_REF_COUNT,
    ST_REF_HAS,
    ST_REF_USER_HAS,
    ST_REF_USER_BYTES,
    ST_TOTALS,
    ST_USAGE_TOTALS,
    ST_COUNT
};

struct br_store {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    int failed; /* errno of the last failure of the disk or the file (0: none) */
};

/* Fields of a job object and what each may hold. */
typedef enum {
    F_STR,
    F_INT,
    F_ARRAY,
    F_OBJECT,
    F_YAML,
    F_ANY,
    F_INT_NULL,
    F_STR_NULL
} ftype_t;

typedef struct {
    const char *key;
    ftype_t type;
} jfield_t;

typedef json_t *(*row_fn)(sqlite3_stmt *st, br_err_t *err);

/* Fill err from the connection's last error: "store: WHAT: sqlite's message". */
int br_st_dberr(br_store_t *s, br_err_t *err, const char *what);

void br_st_reset(sqlite3_stmt *st);

/* Step a statement that returns no rows, then reset it. */
int br_st_run(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err);

/* run, for a statement on job id: ENOENT when it changed no row. */
int br_st_run_on_job(br_store_t *s, sqlite3_stmt *st, const char *what, int64_t id,
                      br_err_t *err);

/* A bind failure (out of memory, misuse): report it and reset the statement. */
int br_st_binderr(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err);

int br_st_valid_utf8(const char *v, size_t len);

/* A C string argument: present unless nullable, 1..max bytes, UTF-8. */
int br_st_check_text(const char *v, size_t max, int nullable, const char *what,
                      br_err_t *err);

/* A CURVE public key in Z85: exactly 40 characters of the Z85 alphabet. */
int br_st_check_pubkey(const char *key, br_err_t *err);

int br_st_bind_text(sqlite3_stmt *st, int i, const char *v);

/* Bind v as compact JSON text (at most BLOB_MAX bytes). */
int br_st_bind_dump(br_store_t *s, sqlite3_stmt *st, int i, const json_t *v,
                     const char *what, br_err_t *err);

/* Bind a checked field: null or absent as NULL, JSON columns (arrays, objects, any)
 * as JSON text, strings and integers as themselves. */
int br_st_bind_field(br_store_t *s, sqlite3_stmt *st, int i, ftype_t type,
                      const json_t *v, const char *what, br_err_t *err);

/* Set o[key] = v, taking v; 1 (failure) when either is missing or the set fails. */
int br_st_put(json_t *o, const char *key, json_t *v);

json_t *br_st_col_int(sqlite3_stmt *st, int i);

json_t *br_st_col_text(sqlite3_stmt *st, int i);

json_t *br_st_col_json(sqlite3_stmt *st, int i);

json_t *br_st_row_done(json_t *o, int bad, const char *what, br_err_t *err);

/* Step st to the end, turning each row into an array element with fn. */
json_t *br_st_list_rows(br_store_t *s, sqlite3_stmt *st, row_fn fn, const char *what,
                         br_err_t *err);

const char *br_st_kind_name(br_principal_t kind);

#endif
