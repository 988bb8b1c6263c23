/* store.c - the coordinator's durable state: SQLite (WAL, synchronous=FULL) + JSON. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jsontext.h"
#include "util.h"

#define BR_STORE_APP_ID 0x42524d42 /* "BRMB": PRAGMA application_id of a store */
#define SHORT_MAX 256              /* names, states, kinds, keys, token ids/hashes */
#define TEXT_MAX 4096              /* reasons */
#define BLOB_MAX (4 << 20)         /* JSON columns, spec texts, log chunks */
#define STATES_MAX 64              /* entries in a job list's state filter */
#define TOKEN_ID_MAX 16            /* *id of br_store_token_use holds 17 bytes */

/* Schema migrations: migrations[v] takes a store from user_version v to v + 1. */
static const char *const migrations[] = {
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
    "CREATE INDEX logs_job ON logs (job, id);",
    /* 2: free-form job metadata; checkpoints reported by agents. */
    "ALTER TABLE jobs ADD COLUMN extra TEXT;"
    "CREATE TABLE checkpoints (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job INTEGER NOT NULL REFERENCES jobs (id), attempt INTEGER NOT NULL,"
    " node TEXT NOT NULL, path TEXT NOT NULL, step INTEGER NOT NULL,"
    " size INTEGER NOT NULL, time INTEGER NOT NULL, UNIQUE (job, attempt, path));"
    "CREATE INDEX checkpoints_job ON checkpoints (job, step);",
    /* 3: principals with ids that are never reused (a job belongs to its owner's id,
     * so a new user under an old name sees nothing of the old one); the public key
     * a token's holder joins with, so unknown keys are refused at the handshake. */
    "CREATE TABLE principals (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " kind TEXT NOT NULL, name TEXT NOT NULL, created INTEGER NOT NULL,"
    " removed INTEGER);"
    "INSERT INTO principals (kind, name, created)"
    " SELECT kind, name, min(created) FROM keys GROUP BY kind, name"
    " ORDER BY min(created), kind, name;"
    "UPDATE principals SET removed = created WHERE NOT EXISTS (SELECT 1 FROM keys k"
    " WHERE k.kind = principals.kind AND k.name = principals.name AND k.revoked = 0);"
    "CREATE INDEX principals_name ON principals (kind, name);"
    "ALTER TABLE keys ADD COLUMN principal INTEGER REFERENCES principals (id);"
    "UPDATE keys SET principal = (SELECT id FROM principals p"
    " WHERE p.kind = keys.kind AND p.name = keys.name);"
    "ALTER TABLE jobs ADD COLUMN owner_id INTEGER;"
    "UPDATE jobs SET owner_id = (SELECT id FROM principals p"
    " WHERE p.kind IN ('admin', 'user') AND p.name = jobs.owner"
    " ORDER BY p.kind = 'admin' DESC, p.id LIMIT 1);"
    "ALTER TABLE tokens ADD COLUMN join_key TEXT;"
    "CREATE INDEX tokens_join_key ON tokens (join_key);"
    /* which nodes were given each attempt: only they may write into it */
    "CREATE TABLE attempt_nodes (job INTEGER NOT NULL REFERENCES jobs (id),"
    " attempt INTEGER NOT NULL, node TEXT NOT NULL,"
    " log_lost INTEGER NOT NULL DEFAULT 0," /* output its agent had to drop */
    " exited INTEGER NOT NULL DEFAULT 0,"   /* its exit was taken (resends are not) */
    " PRIMARY KEY (job, attempt, node)) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO attempt_nodes (job, attempt, node)"
    " SELECT j.id, j.attempt, n.value FROM jobs j, json_each(j.nodes) n"
    " WHERE json_valid(j.nodes);"
    /* each job's stored output and what a cap dropped of it */
    "ALTER TABLE jobs ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN log_dropped INTEGER NOT NULL DEFAULT 0;"
    "UPDATE jobs SET log_bytes = (SELECT coalesce(sum(length(data)), 0) FROM logs"
    " WHERE logs.job = jobs.id);"
    /* every admin action: who did what to what, when, and how it ended */
    /* the local account an agent runs a user's jobs as, when the admin named one */
    "ALTER TABLE principals ADD COLUMN unix_user TEXT;"
    "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL,"
    " principal INTEGER, who TEXT NOT NULL, action TEXT NOT NULL, target TEXT,"
    " result TEXT NOT NULL);",
    /* 4: tokens of two kinds: join tokens for new nodes, and metrics tokens that a
     * Prometheus server shows as its bearer token on the HTTP side (never used up;
     * expires 0: never expires). */
    "ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'join';",
    /* 5: what each checkpoint held, as its agent hashed it (agent/manifest.h): JSON,
     * NULL for checkpoints reported before manifests or by an agent without them */
    "ALTER TABLE checkpoints ADD COLUMN manifest TEXT;",
    /* 6: the jobs that ended lately, found without reading every ended one */
    "CREATE INDEX jobs_ended ON jobs (ended);",
    /* 7: a job's bookkeeping as columns, no longer as keys of a free-form "extra";
     * a placement stored before gangs (one share object) in today's form */
    "ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN not_before INTEGER;"
    "ALTER TABLE jobs ADD COLUMN fresh_after INTEGER;"
    "ALTER TABLE jobs ADD COLUMN lost_at INTEGER;"
    "ALTER TABLE jobs ADD COLUMN exclude TEXT;"
    "ALTER TABLE jobs ADD COLUMN placement TEXT;"
    "ALTER TABLE jobs ADD COLUMN service INTEGER;"
    "ALTER TABLE jobs ADD COLUMN replica INTEGER;"
    "ALTER TABLE jobs ADD COLUMN replicas INTEGER;"
    "UPDATE jobs SET restarts = coalesce(json_extract(extra, '$.restarts'), 0),"
    " not_before = json_extract(extra, '$.not_before'),"
    " fresh_after = json_extract(extra, '$.fresh_after'),"
    " lost_at = json_extract(extra, '$.lost_at'),"
    " exclude = CASE json_type(extra, '$.exclude') WHEN 'array'"
    "  THEN json_extract(extra, '$.exclude') END,"
    " placement = CASE json_type(extra, '$.placement') WHEN 'text'"
    "  THEN json_extract(extra, '$.placement') END,"
    " service = json_extract(extra, '$.service'),"
    " replica = json_extract(extra, '$.replica'),"
    " replicas = json_extract(extra, '$.replicas')"
    " WHERE json_valid(extra) AND json_type(extra) = 'object';"
    "UPDATE jobs SET assign = json_object('ranks', json_array(json_set(assign,"
    " '$.node', coalesce(json_extract(nodes, '$[0]'), ''), '$.state',"
    " CASE state WHEN 'running' THEN 'started' ELSE 'placed' END)), 'port', 0)"
    " WHERE json_valid(assign) AND json_type(assign) = 'object'"
    " AND json_type(assign, '$.ranks') IS NULL;"
    "ALTER TABLE jobs DROP COLUMN extra;",
    /* 8: where copies of a job's checkpoints are held on other nodes (replicas.c):
     * one row per checkpoint (its manifest hash) and node that verified a pull */
    "CREATE TABLE replicas (job INTEGER NOT NULL REFERENCES jobs (id),"
    " hash TEXT NOT NULL, node TEXT NOT NULL, step INTEGER NOT NULL,"
    " path TEXT NOT NULL, bytes INTEGER NOT NULL, time INTEGER NOT NULL,"
    " PRIMARY KEY (job, hash, node));",
    /* 9: what each job used and cost (usage.c): GPU and CPU milliseconds held, the
     * cost in millionths, and the time it was charged up to; each user's use by
     * the hour, for fair share, weekly quotas and bramble usage; each user's
     * limits and share (JSON; NULL: none, an equal share) */
    "ALTER TABLE jobs ADD COLUMN gpu_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN cpu_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN charged INTEGER;"
    "CREATE TABLE usage (principal INTEGER NOT NULL REFERENCES principals (id),"
    " hour INTEGER NOT NULL, gpu_ms INTEGER NOT NULL DEFAULT 0,"
    " cpu_ms INTEGER NOT NULL DEFAULT 0, cost_micros INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (hour, principal)) WITHOUT ROWID;"
    "ALTER TABLE principals ADD COLUMN limits TEXT;",
    /* 10: job arrays (docs/spec.md, "array"): each task is a job of its own with the
     * array's id (its first task's) and its index; NULL for a job not in one */
    "ALTER TABLE jobs ADD COLUMN array_of INTEGER;"
    "ALTER TABLE jobs ADD COLUMN array_index INTEGER;"
    "CREATE INDEX jobs_array ON jobs (array_of, array_index) WHERE array_of IS NOT NULL;",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

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
    ST_SHARERS,
    ST_TOTALS,
    ST_USAGE_TOTALS,
    ST_COUNT
};

static const char *const sql_text[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_HIGH_IDS] = "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),"
                    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    /* one per message, prepared once (a parse costs more than the work of most) */
    [ST_SAVEPOINT] = "SAVEPOINT msg",
    [ST_SAVEPOINT_UNDO] = "ROLLBACK TO msg",
    [ST_SAVEPOINT_RELEASE] = "RELEASE msg",
    [ST_KEY_ADD] = "INSERT INTO keys (pubkey, kind, name, created, principal)"
                   " VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_KEY_LOOKUP] = "SELECT kind, name, revoked, principal FROM keys WHERE pubkey = ?1",
    [ST_KEY_REVOKE] = "UPDATE keys SET revoked = 1 WHERE kind = ?1 AND name = ?2",
    [ST_KEY_REVOKE_ONE] = "UPDATE keys SET revoked = 1 WHERE pubkey = ?1",
    [ST_PRINCIPAL_FIND] = "SELECT id FROM principals WHERE kind = ?1 AND name = ?2"
                          " AND removed IS NULL ORDER BY id DESC LIMIT 1",
    [ST_PRINCIPAL_ADD] = "INSERT INTO principals (kind, name, created) VALUES (?1, ?2, ?3)",
    [ST_PRINCIPAL_REMOVE] = "UPDATE principals SET removed = ?3"
                            " WHERE kind = ?1 AND name = ?2 AND removed IS NULL",
    [ST_JOB_SET_OWNER] = "UPDATE jobs SET owner = ?2, owner_id = ?3 WHERE id = ?1",
    [ST_JOB_SET_REASON] = "UPDATE jobs SET reason = ?2 WHERE id = ?1",
    [ST_ATTEMPT_NODE_ADD] = "INSERT OR IGNORE INTO attempt_nodes (job, attempt, node)"
                            " VALUES (?1, ?2, ?3)",
    [ST_ATTEMPT_NODE_RAN] = "SELECT 1 FROM attempt_nodes"
                            " WHERE job = ?1 AND attempt = ?2 AND node = ?3",
    [ST_ATTEMPT_EXITED] = "UPDATE attempt_nodes SET exited = 1"
                          " WHERE job = ?1 AND attempt = ?2 AND node = ?3 AND exited = 0",
    [ST_ATTEMPT_REOPEN] = "UPDATE attempt_nodes SET exited = 0"
                          " WHERE job = ?1 AND attempt = ?2 AND node = ?3",
    [ST_LOG_COUNT] = "UPDATE jobs SET log_bytes = log_bytes + ?2 WHERE id = ?1"
                     " RETURNING log_bytes",
    [ST_LOG_BYTES] = "SELECT log_bytes FROM jobs WHERE id = ?1",
    [ST_CKPT_UNDER] = "SELECT job, path FROM checkpoints WHERE job != ?1"
                      " AND (path = ?2 OR substr(path, 1, length(?2) + 1) = ?2 || '/')"
                      " ORDER BY job, id DESC LIMIT 1",
    [ST_LOG_OLDEST] = "SELECT id, length(data) FROM logs WHERE job = ?1 ORDER BY id",
    [ST_LOG_TRIM] = "DELETE FROM logs WHERE job = ?1 AND id <= ?2",
    [ST_LOG_TRIMMED] = "UPDATE jobs SET log_bytes = log_bytes - ?2,"
                       " log_dropped = log_dropped + ?2 WHERE id = ?1",
    [ST_LOG_EXPIRE] = "DELETE FROM logs WHERE id IN (SELECT l.id FROM logs l JOIN jobs j"
                      " ON j.id = l.job WHERE j.ended IS NOT NULL AND j.ended < ?1"
                      " LIMIT ?2)",
    [ST_LOG_EXPIRED] = "UPDATE jobs SET log_bytes = 0 WHERE ended IS NOT NULL"
                       " AND ended < ?1 AND log_bytes > 0"
                       " AND NOT EXISTS (SELECT 1 FROM logs WHERE logs.job = jobs.id)",
    [ST_LOG_LOST_SET] = "UPDATE attempt_nodes SET log_lost = max(log_lost, ?4)"
                        " WHERE job = ?1 AND attempt = ?2 AND node = ?3",
    [ST_LOG_LOST_SUM] = "SELECT coalesce(sum(log_lost), 0) FROM attempt_nodes"
                        " WHERE job = ?1",
    [ST_LOG_LOST_GET] = "SELECT log_lost FROM attempt_nodes"
                        " WHERE job = ?1 AND attempt = ?2 AND node = ?3",
    [ST_AUDIT_ADD] = "INSERT INTO audit (time, principal, who, action, target, result)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_AUDIT_LIST] = "SELECT id, time, who, action, target, result FROM audit"
                      " WHERE id > ?1 ORDER BY id LIMIT ?2",
    [ST_UNIX_USER_SET] = "UPDATE principals SET unix_user = ?3"
                         " WHERE kind = ?1 AND name = ?2 AND removed IS NULL",
    [ST_UNIX_USER_GET] = "SELECT unix_user FROM principals WHERE id = ?1",
    [ST_TOKEN_JOIN_KEY] = "SELECT 1 FROM tokens WHERE join_key = ?1 AND expires > ?2",
    [ST_KEY_USERS] = "SELECT name, kind, min(created) FROM keys"
                     " WHERE kind IN ('admin', 'user') AND revoked = 0"
                     " GROUP BY kind, name ORDER BY name, kind",
    [ST_TOKEN_ADD] = "INSERT INTO tokens (id, hash, created, expires, uses_max, join_key)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_TOKEN_FIND] = "SELECT id, expires, uses, uses_max, revoked FROM tokens"
                      " WHERE hash = ?1 AND kind = 'join'",
    [ST_TOKEN_USE] = "UPDATE tokens SET uses = uses + 1"
                     " WHERE id = ?1 AND uses < uses_max",
    [ST_TOKEN_LIST] = "SELECT id, created, expires, uses, uses_max, revoked, kind"
                      " FROM tokens ORDER BY created DESC, id DESC",
    [ST_TOKEN_REVOKE] = "UPDATE tokens SET revoked = 1 WHERE id = ?1",
    [ST_TOKEN_ADD_METRICS] = "INSERT INTO tokens (id, hash, created, expires, uses_max,"
                             " kind) VALUES (?1, ?2, ?3, ?4, 0, 'metrics')",
    [ST_TOKEN_METRICS] = "SELECT id, hash, expires, revoked FROM tokens"
                         " WHERE kind = 'metrics' ORDER BY id",
    [ST_JOB_COUNTS] = "SELECT state, owner, count(*), coalesce(sum(log_dropped), 0)"
                      " FROM jobs GROUP BY state, owner ORDER BY state, owner",
    [ST_LOG_LOST_ALL] = "SELECT coalesce(sum(log_lost), 0) FROM attempt_nodes",
    [ST_NODE_SAVE] = "INSERT INTO nodes (name, data) VALUES (?1, ?2)"
                     " ON CONFLICT (name) DO UPDATE SET data = excluded.data",
    [ST_NODE_DELETE] = "DELETE FROM nodes WHERE name = ?1",
    [ST_NODE_LIST] = "SELECT data FROM nodes ORDER BY name",
    [ST_JOB_ADD] = "INSERT INTO jobs (name, kind, owner, spec, spec_yaml, submitted,"
                   " state, attempt, nodes, assign, started, ended, exit_code, signal,"
                   " reason, restarts, not_before, fresh_after, lost_at, exclude,"
                   " placement, service, replica, replicas, gpu_ms, cpu_ms, cost_micros,"
                   " charged, owner_id, array_of, array_index) VALUES (?1, ?2, ?3, ?4, ?5,"
                   " ?6, ?7, coalesce(?8, 1), coalesce(?9, '[]'), ?10, ?11, ?12, ?13, ?14,"
                   " ?15, coalesce(?16, 0), ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24,"
                   " coalesce(?25, 0), coalesce(?26, 0), coalesce(?27, 0), ?28, ?29, ?30,"
                   " ?31)",
    [ST_JOB_UPDATE] = "UPDATE jobs SET " UPD("state", 1, 2) ", " UPD("attempt", 3, 4)
                      ", " UPD("nodes", 5, 6) ", " UPD("assign", 7, 8) ", "
                      UPD("started", 9, 10) ", " UPD("ended", 11, 12) ", "
                      UPD("exit_code", 13, 14) ", " UPD("signal", 15, 16) ", "
                      UPD("reason", 17, 18) ", " UPD("restarts", 19, 20) ", "
                      UPD("not_before", 21, 22) ", " UPD("fresh_after", 23, 24) ", "
                      UPD("lost_at", 25, 26) ", " UPD("exclude", 27, 28) ", "
                      UPD("placement", 29, 30) ", " UPD("service", 31, 32) ", "
                      UPD("replica", 33, 34) ", " UPD("replicas", 35, 36) ", "
                      UPD("gpu_ms", 37, 38) ", " UPD("cpu_ms", 39, 40) ", "
                      UPD("cost_micros", 41, 42) ", " UPD("charged", 43, 44)
                      " WHERE id = ?45",
    [ST_JOB_GET] = "SELECT " JOB_COLS ", spec_yaml FROM jobs WHERE id = ?1",
    [ST_JOB_LIST] = "SELECT * FROM (SELECT " JOB_COLS " FROM jobs"
                    " ORDER BY id DESC LIMIT ?1) ORDER BY id",
    [ST_JOB_LIST_STATES] = "SELECT * FROM (SELECT " JOB_COLS " FROM jobs"
                           " WHERE state IN (SELECT value FROM json_each(?2))"
                           " ORDER BY id DESC LIMIT ?1) ORDER BY id",
    /* by jobs_state and jobs_ended: however many jobs have ended before */
    [ST_JOB_LIST_RECENT] = "SELECT * FROM (SELECT " JOB_COLS " FROM jobs WHERE id IN"
                           " (SELECT id FROM jobs WHERE state IN"
                           " ('pending', 'starting', 'running')"
                           " UNION ALL SELECT id FROM jobs WHERE ended >= ?1)"
                           " ORDER BY id DESC LIMIT ?2) ORDER BY id",
    [ST_JOB_SET_ARRAY] = "UPDATE jobs SET array_of = ?2, array_index = ?3 WHERE id = ?1",
    [ST_JOB_ARRAY_TASK] = "SELECT id FROM jobs WHERE array_of = ?1 AND array_index = ?2",
    [ST_EVENT_ADD] = "INSERT INTO events (time, job, node, state, reason)"
                     " VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_EVENT_SEEN] = "SELECT 1 FROM events WHERE job = ?1 AND reason = ?2 LIMIT 1",
    [ST_EVENT_LIST] = "SELECT id, time, job, node, state, reason FROM events"
                      " WHERE id > ?1 ORDER BY id LIMIT ?2",
    [ST_EVENT_LIST_JOB] = "SELECT id, time, job, node, state, reason FROM events"
                          " WHERE job = ?3 AND id > ?1 ORDER BY id LIMIT ?2",
    [ST_LOG_ADD] = "INSERT INTO logs (job, attempt, rank, stream, seq, time, data)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                   " ON CONFLICT (job, attempt, rank, stream, seq) DO NOTHING",
    [ST_LOG_READ] = "SELECT id, attempt, rank, stream, data FROM logs"
                    " WHERE job = ?1 AND id > ?2 AND (?3 < 0 OR rank = ?3) ORDER BY id",
    [ST_CKPT_ADD] = "INSERT INTO checkpoints (job, attempt, node, path, step, size,"
                    " time, manifest) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                    " ON CONFLICT (job, attempt, path) DO NOTHING",
    [ST_CKPT_LIST] = "SELECT " CKPT_COLS " FROM checkpoints WHERE job = ?1"
                     " ORDER BY step, id",
    [ST_CKPT_LATEST] = "SELECT " CKPT_COLS " FROM checkpoints WHERE job = ?1"
                       " ORDER BY step DESC, id DESC LIMIT 1",
    [ST_CKPT_MANIFEST] = "SELECT manifest FROM checkpoints WHERE job = ?1"
                         " AND json_extract(manifest, '$.hash') = ?2"
                         " ORDER BY id DESC LIMIT 1",
    [ST_REPL_ADD] = "INSERT INTO replicas (job, hash, node, step, path, bytes, time)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (job, hash, node)"
                    " DO UPDATE SET time = excluded.time",
    [ST_REPL_DEL] = "DELETE FROM replicas WHERE job = ?1 AND (?2 IS NULL OR hash = ?2)"
                    " AND (?3 IS NULL OR node = ?3)",
    [ST_REPL_LIST] = "SELECT hash, node, step, path, bytes, time FROM replicas"
                     " WHERE job = ?1 ORDER BY step DESC, hash, node",
    [ST_REPL_EXPIRED] = "SELECT r.hash, r.node, r.step, r.path, r.bytes, r.time, r.job"
                        " FROM replicas r JOIN jobs j ON j.id = r.job"
                        " WHERE j.ended IS NOT NULL AND j.ended < ?1"
                        " AND (?2 = 0 OR r.job = ?2)"
                        " ORDER BY r.job, r.step DESC, r.hash, r.node LIMIT ?3",
    [ST_USAGE_ADD] = "INSERT INTO usage (principal, hour, gpu_ms, cpu_ms, cost_micros)"
                     " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (hour, principal) DO UPDATE"
                     " SET gpu_ms = gpu_ms + excluded.gpu_ms,"
                     " cpu_ms = cpu_ms + excluded.cpu_ms,"
                     " cost_micros = cost_micros + excluded.cost_micros",
    [ST_USAGE_SINCE] = "SELECT u.principal, p.name, u.hour, u.gpu_ms, u.cpu_ms,"
                       " u.cost_micros FROM usage u JOIN principals p ON p.id = u.principal"
                       " WHERE u.hour >= ?1 ORDER BY u.principal, u.hour",
    [ST_LIMITS_SET] = "UPDATE principals SET limits = ?3"
                      " WHERE kind = ?1 AND name = ?2 AND removed IS NULL",
    [ST_TOTALS] = "SELECT (SELECT count(*) FROM checkpoints),"
                  " (SELECT coalesce(sum(size), 0) FROM checkpoints),"
                  " (SELECT count(*) FROM replicas),"
                  " (SELECT coalesce(sum(bytes), 0) FROM replicas)",
    [ST_USAGE_TOTALS] = "SELECT p.name, sum(u.gpu_ms), sum(u.cpu_ms), sum(u.cost_micros)"
                        " FROM usage u JOIN principals p ON p.id = u.principal"
                        " GROUP BY u.principal ORDER BY p.name",
    [ST_SHARERS] = "SELECT id, kind, name, limits FROM principals"
                   " WHERE kind IN ('admin', 'user') AND removed IS NULL ORDER BY id",
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
    /* the job core's bookkeeping (coordinator/job.h) */
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
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

static const char *const kind_names[] = {
    [BR_PRINCIPAL_ADMIN] = "admin",
    [BR_PRINCIPAL_USER] = "user",
    [BR_PRINCIPAL_NODE] = "node",
};

/* --- errors and small helpers ------------------------------------------------- */

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
static int dberr(br_store_t *s, br_err_t *err, const char *what)
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

static void reset(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Step a statement that returns no rows, then reset it. */
static int run(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err)
{
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : dberr(s, err, what);
    reset(st);
    return rc;
}

/* run, for a statement on job id: ENOENT when it changed no row. */
static int run_on_job(br_store_t *s, sqlite3_stmt *st, const char *what, int64_t id,
                      br_err_t *err)
{
    if (run(s, st, what, err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return br_errf(err, ENOENT, "no job %lld", (long long)id);
    return 0;
}

/* A bind failure (out of memory, misuse): report it and reset the statement. */
static int binderr(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err)
{
    dberr(s, err, what);
    reset(st);
    return -1;
}

static int valid_utf8(const char *v, size_t len)
{
    json_t *j = json_stringn(v, len);
    json_decref(j);
    return j != NULL;
}

/* A C string argument: present unless nullable, 1..max bytes, UTF-8. */
static int check_text(const char *v, size_t max, int nullable, const char *what,
                      br_err_t *err)
{
    if (!v)
        return nullable ? 0 : br_errf(err, EINVAL, "%s is missing", what);
    size_t len = strnlen(v, max + 1);
    if (len == 0 || len > max)
        return br_errf(err, EINVAL, "%s must be 1 to %zu bytes", what, max);
    if (!valid_utf8(v, len))
        return br_errf(err, EINVAL, "%s is not valid UTF-8", what);
    return 0;
}

/* A CURVE public key in Z85: exactly 40 characters of the Z85 alphabet. */
static int check_pubkey(const char *key, br_err_t *err)
{
    static const char z85[] =
        "0123456789abcdefghijklmnopqrstuvwxyz"
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    if (!key || strnlen(key, 41) != 40 || strspn(key, z85) != 40)
        return br_errf(err, EINVAL, "public key must be 40 characters of Z85");
    return 0;
}

static int bind_text(sqlite3_stmt *st, int i, const char *v)
{
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT)
             : sqlite3_bind_null(st, i);
}

/* Bind v as compact JSON text (at most BLOB_MAX bytes). */
static int bind_dump(br_store_t *s, sqlite3_stmt *st, int i, const json_t *v,
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
    return rc == SQLITE_OK ? 0 : dberr(s, err, what);
}

/* Bind a checked field: null or absent as NULL, JSON columns (arrays, objects, any)
 * as JSON text, strings and integers as themselves. */
static int bind_field(br_store_t *s, sqlite3_stmt *st, int i, ftype_t type,
                      const json_t *v, const char *what, br_err_t *err)
{
    int rc;
    if (!v || json_is_null(v))
        rc = sqlite3_bind_null(st, i);
    else if (type == F_ARRAY || type == F_OBJECT || type == F_ANY)
        return bind_dump(s, st, i, v, what, err);
    else if (json_is_string(v))
        rc = sqlite3_bind_text(st, i, json_string_value(v), (int)json_string_length(v),
                               SQLITE_TRANSIENT);
    else
        rc = sqlite3_bind_int64(st, i, json_integer_value(v));
    return rc == SQLITE_OK ? 0 : dberr(s, err, what);
}

/* --- reading rows ------------------------------------------------------------- */

/* Set o[key] = v, taking v; 1 (failure) when either is missing or the set fails. */
static int put(json_t *o, const char *key, json_t *v)
{
    if (!o || !v) {
        json_decref(v);
        return 1;
    }
    return json_object_set_new(o, key, v) != 0;
}

static json_t *col_int(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return json_null();
    return json_integer(sqlite3_column_int64(st, i));
}

static json_t *col_text(sqlite3_stmt *st, int i)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    if (!v)
        return json_null();
    return json_stringn(v, (size_t)sqlite3_column_bytes(st, i));
}

static json_t *col_json(sqlite3_stmt *st, int i)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    if (!v)
        return json_null();
    return json_loadb(v, (size_t)sqlite3_column_bytes(st, i),
                      JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

static json_t *row_done(json_t *o, int bad, const char *what, br_err_t *err)
{
    if (!bad)
        return o;
    json_decref(o);
    return br_errp(err, EIO, "store: unreadable %s row", what);
}

typedef json_t *(*row_fn)(sqlite3_stmt *st, br_err_t *err);

/* Step st to the end, turning each row into an array element with fn. */
static json_t *list_rows(br_store_t *s, sqlite3_stmt *st, row_fn fn, const char *what,
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
        reset(st);
        return arr;
    }
    if (!arr)
        br_errf(err, ENOMEM, "store: %s: out of memory", what);
    else if (rc != SQLITE_ROW)
        dberr(s, err, what);
    json_decref(arr);
    reset(st);
    return NULL;
}

/* --- open, close, transactions ------------------------------------------------ */

/* A file that exists and is not empty must begin with SQLite's magic; anything else
 * is refused before SQLite touches it. */
static int check_magic(const char *path, br_err_t *err)
{
    static const char magic[16] = "SQLite format 3";
    char head[sizeof(magic)];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0
                               : br_errf(err, errno, "%s: %s", path, strerror(errno));
    ssize_t n = read(fd, head, sizeof(head));
    int saved = errno;
    close(fd);
    if (n < 0)
        return br_errf(err, saved, "%s: %s", path, strerror(saved));
    if (n != 0 && (n != (ssize_t)sizeof(head) || memcmp(head, magic, sizeof(magic))))
        return br_errf(err, EINVAL, "%s: not a bramble store", path);
    return 0;
}

/* Run a one-row query (pragma) on the connection: number and/or text of column 0.
 * Returns an SQLite result code. */
static int query1(br_store_t *s, const char *sql, int64_t *num, char *text, size_t len)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (num)
            *num = sqlite3_column_int64(st, 0);
        if (text) {
            const char *v = (const char *)sqlite3_column_text(st, 0);
            br_strlcpy(text, v ? v : "", len);
        }
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK)
        rc = sqlite3_extended_errcode(s->db);
    sqlite3_finalize(st);
    return rc;
}

/* Read-only checks: is this a bramble store (or an empty file), and which schema.
 * Nothing is written before these pass. */
static int identify(br_store_t *s, const char *path, int64_t *version, br_err_t *err)
{
    int64_t app = 0, tables = 0;
    int rc = query1(s, "PRAGMA application_id", &app, NULL, 0);
    if (rc == SQLITE_OK)
        rc = query1(s, "PRAGMA user_version", version, NULL, 0);
    if (rc == SQLITE_OK)
        rc = query1(s, "SELECT count(*) FROM sqlite_master", &tables, NULL, 0);
    if ((rc & 0xff) == SQLITE_NOTADB)
        return br_errf(err, EINVAL, "%s: not a bramble store", path);
    if (rc != SQLITE_OK)
        return dberr(s, err, path);
    if (app != BR_STORE_APP_ID && (app != 0 || *version != 0 || tables != 0))
        return br_errf(err, EINVAL, "%s: not a bramble store", path);
    if (*version > SCHEMA_VERSION)
        return br_errf(err, ENOTSUP,
                       "store schema %lld is newer than this brambled (%d)",
                       (long long)*version, SCHEMA_VERSION);
    if (sqlite3_db_readonly(s->db, "main") == 1)
        return br_errf(err, EROFS, "%s: store is read-only", path);
    return 0;
}

/* WAL, synchronous=FULL, foreign keys: set, then read back to be sure. */
static int setup(br_store_t *s, const char *path, br_err_t *err)
{
    char mode[16] = "";
    int64_t sync = 0, fkeys = 0;
    int rc = query1(s, "PRAGMA journal_mode = WAL", NULL, mode, sizeof(mode));
    if (rc == SQLITE_OK)
        rc = query1(s, "PRAGMA synchronous = FULL", NULL, NULL, 0);
    if (rc == SQLITE_OK)
        rc = query1(s, "PRAGMA synchronous", &sync, NULL, 0);
    if (rc == SQLITE_OK)
        rc = query1(s, "PRAGMA foreign_keys = ON", NULL, NULL, 0);
    if (rc == SQLITE_OK)
        rc = query1(s, "PRAGMA foreign_keys", &fkeys, NULL, 0);
    if (rc != SQLITE_OK)
        return dberr(s, err, path);
    if (strcasecmp(mode, "wal") != 0)
        return br_errf(err, EIO, "%s: journal mode is '%s', not wal", path, mode);
    if (sync != 2 || fkeys != 1)
        return br_errf(err, EIO, "%s: cannot set synchronous=FULL and foreign_keys",
                       path);
    return 0;
}

static int exec(br_store_t *s, const char *sql, const char *what, br_err_t *err)
{
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return dberr(s, err, what);
    return 0;
}

/* Apply every migration past version, each in its own transaction. */
static int migrate(br_store_t *s, int64_t version, br_err_t *err)
{
    for (int v = (int)version; v < SCHEMA_VERSION; v++) {
        char pragma[96];
        snprintf(pragma, sizeof(pragma),
                 "PRAGMA user_version = %d; PRAGMA application_id = %d;", v + 1,
                 BR_STORE_APP_ID);
        if (exec(s, "BEGIN IMMEDIATE", "migrate", err) < 0)
            return -1;
        if (exec(s, migrations[v], "migrate", err) < 0 ||
            exec(s, pragma, "migrate", err) < 0 ||
            exec(s, "COMMIT", "migrate", err) < 0) {
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    return 0;
}

static int prepare_all(br_store_t *s, br_err_t *err)
{
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, sql_text[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &s->st[i], NULL) != SQLITE_OK)
            return dberr(s, err, "prepare");
    }
    return 0;
}

br_store_t *br_store_open(const char *path, br_err_t *err)
{
    if (!path || !*path)
        return br_errp(err, EINVAL, "store path is empty");
    if (check_magic(path, err) < 0)
        return NULL;
    br_store_t *s = calloc(1, sizeof(*s));
    if (!s)
        return br_errp(err, ENOMEM, "store: out of memory");
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int64_t version = 0;
    /* the store holds every key and token: 0600 whatever the umask, and SQLite makes
     * its -wal and -shm files with the mode of the database file */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || fchmod(fd, 0600) < 0) {
        br_errf(err, errno, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(s);
        return NULL;
    }
    close(fd);
    for (int i = 0; i < 2; i++) { /* and those of a store made before this rule */
        char side[PATH_MAX];
        snprintf(side, sizeof(side), "%s%s", path, i ? "-shm" : "-wal");
        if (chmod(side, 0600) < 0 && errno != ENOENT)
            fprintf(stderr, "brambled: %s: %s\n", side, strerror(errno));
    }
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        if (s->db)
            dberr(s, err, path);
        else
            br_errf(err, ENOMEM, "store: out of memory");
        br_store_destroy(&s);
        return NULL;
    }
    sqlite3_busy_timeout(s->db, 5000);
    if (identify(s, path, &version, err) < 0 || setup(s, path, err) < 0 ||
        migrate(s, version, err) < 0 || prepare_all(s, err) < 0)
        br_store_destroy(&s);
    return s;
}

void br_store_destroy(br_store_t **store)
{
    if (!store || !*store)
        return;
    br_store_t *s = *store;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->st[i]);
    sqlite3_close_v2(s->db);
    free(s);
    *store = NULL;
}

int br_store_high_ids(br_store_t *s, int64_t *jobs, int64_t *events, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_HIGH_IDS]; /* after every commit: prepared once */
    *jobs = *events = 0;
    int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : dberr(s, err, "read the highest ids");
    if (rc == 0) {
        *jobs = sqlite3_column_int64(st, 0);
        *events = sqlite3_column_int64(st, 1);
    }
    reset(st);
    return rc;
}

int64_t br_store_changes(br_store_t *s)
{
    return sqlite3_total_changes64(s->db);
}

int br_store_in_txn(const br_store_t *s)
{
    return s && s->db && !sqlite3_get_autocommit(s->db);
}

int br_store_begin(br_store_t *s, br_err_t *err)
{
    if (br_store_in_txn(s))
        return br_errf(err, EBUSY, "store: a transaction is already open");
    return run(s, s->st[ST_BEGIN], "begin", err);
}

int br_store_commit(br_store_t *s, br_err_t *err)
{
    if (!br_store_in_txn(s))
        return br_errf(err, EINVAL, "store: commit without a transaction");
    return run(s, s->st[ST_COMMIT], "commit", err);
}

int br_store_savepoint(br_store_t *s, br_err_t *err)
{
    s->failed = 0;
    return run(s, s->st[ST_SAVEPOINT], "savepoint", err);
}

int br_store_release(br_store_t *s)
{
    int failed = s->failed;
    if (!br_store_in_txn(s))
        return failed ? failed : EIO; /* SQLite rolled the whole transaction back */
    if (failed) /* undo this message's half, keep the wake's other messages */
        run(s, s->st[ST_SAVEPOINT_UNDO], "roll back a message", NULL);
    if (run(s, s->st[ST_SAVEPOINT_RELEASE], "release a message", NULL) < 0 && !failed)
        failed = EIO;
    s->failed = 0;
    return failed;
}

int br_store_rollback(br_store_t *s)
{
    if (!br_store_in_txn(s))
        return 0;
    return run(s, s->st[ST_ROLLBACK], "rollback", NULL);
}

/* --- keys --------------------------------------------------------------------- */

static const char *kind_name(br_principal_t kind)
{
    if (kind < BR_PRINCIPAL_ADMIN || kind > BR_PRINCIPAL_NODE)
        return NULL;
    return kind_names[kind];
}

static br_principal_t kind_parse(const char *text)
{
    for (int k = BR_PRINCIPAL_ADMIN; k <= BR_PRINCIPAL_NODE; k++)
        if (text && strcmp(text, kind_names[k]) == 0)
            return (br_principal_t)k;
    return BR_PRINCIPAL_UNKNOWN;
}

/* The id of the live principal kind + name, made when there is none: 0 or -1. */
static int principal_of(br_store_t *s, br_principal_t kind, const char *name,
                        int64_t *id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_PRINCIPAL_FIND];
    if (bind_text(st, 1, kind_name(kind)) || bind_text(st, 2, name))
        return binderr(s, st, "find principal", err);
    int rc = sqlite3_step(st);
    *id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "find principal");
    if (*id)
        return 0;
    st = s->st[ST_PRINCIPAL_ADD];
    if (bind_text(st, 1, kind_name(kind)) || bind_text(st, 2, name) ||
        sqlite3_bind_int64(st, 3, br_now_ms()))
        return binderr(s, st, "add principal", err);
    if (run(s, st, "add principal", err) < 0)
        return -1;
    *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int br_store_key_add(br_store_t *s, const char *pubkey, br_principal_t kind,
                     const char *name, br_err_t *err)
{
    int64_t principal;
    if (check_pubkey(pubkey, err) < 0 ||
        check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return -1;
    if (!kind_name(kind))
        return br_errf(err, EINVAL, "a key's principal must be admin, user or node");
    if (principal_of(s, kind, name, &principal, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_KEY_ADD];
    if (bind_text(st, 1, pubkey) || bind_text(st, 2, kind_name(kind)) ||
        bind_text(st, 3, name) || sqlite3_bind_int64(st, 4, br_now_ms()) ||
        sqlite3_bind_int64(st, 5, principal))
        return binderr(s, st, "add key", err);
    if (run(s, st, "add key", err) < 0)
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
    if (check_pubkey(pubkey, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_KEY_LOOKUP];
    if (bind_text(st, 1, pubkey))
        return binderr(s, st, "look up key", err);
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
        ret = dberr(s, err, "look up key");
    }
    reset(st);
    return ret;
}

int br_store_key_revoke(br_store_t *s, br_principal_t kind, const char *name,
                        br_err_t *err)
{
    if (check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return -1;
    if (!kind_name(kind))
        return br_errf(err, EINVAL, "a key's principal must be admin, user or node");
    sqlite3_stmt *st = s->st[ST_KEY_REVOKE];
    if (bind_text(st, 1, kind_name(kind)) || bind_text(st, 2, name))
        return binderr(s, st, "revoke key", err);
    if (run(s, st, "revoke key", err) < 0)
        return -1;
    st = s->st[ST_PRINCIPAL_REMOVE]; /* its id is never given to anyone again */
    if (bind_text(st, 1, kind_name(kind)) || bind_text(st, 2, name) ||
        sqlite3_bind_int64(st, 3, br_now_ms()))
        return binderr(s, st, "remove principal", err);
    return run(s, st, "remove principal", err);
}

int br_store_key_revoke_one(br_store_t *s, const char *pubkey, br_err_t *err)
{
    if (check_pubkey(pubkey, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_KEY_REVOKE_ONE];
    if (bind_text(st, 1, pubkey))
        return binderr(s, st, "revoke key", err);
    if (run(s, st, "revoke key", err) < 0)
        return -1;
    return sqlite3_changes(s->db) == 1 ? 0 : br_errf(err, ENOENT, "no such key");
}

int br_store_unix_user_set(br_store_t *s, const char *name, const char *unix_user,
                           br_err_t *err)
{
    if (check_text(name, SHORT_MAX, 0, "name", err) < 0 ||
        check_text(unix_user, SHORT_MAX, 1, "unix user", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_UNIX_USER_SET];
    if (bind_text(st, 1, "user") || bind_text(st, 2, name) || bind_text(st, 3, unix_user))
        return binderr(s, st, "set unix user", err);
    if (run(s, st, "set unix user", err) < 0)
        return -1;
    return sqlite3_changes(s->db) ? 0 : br_errf(err, ENOENT, "no user '%s'", name);
}

int br_store_unix_user_get(br_store_t *s, int64_t principal, char *buf, size_t len,
                           br_err_t *err)
{
    buf[0] = '\0';
    sqlite3_stmt *st = s->st[ST_UNIX_USER_GET];
    if (sqlite3_bind_int64(st, 1, principal))
        return binderr(s, st, "get unix user", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        br_strlcpy(buf, (const char *)sqlite3_column_text(st, 0), len);
    reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dberr(s, err, "get unix user");
}

int br_store_principal_id(br_store_t *s, br_principal_t kind, const char *name,
                          int64_t *id, br_err_t *err)
{
    *id = 0;
    if (!kind_name(kind) || check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return br_errf(err, EINVAL, "a principal is an admin, a user or a node, by name");
    sqlite3_stmt *st = s->st[ST_PRINCIPAL_FIND];
    if (bind_text(st, 1, kind_name(kind)) || bind_text(st, 2, name))
        return binderr(s, st, "find principal", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dberr(s, err, "find principal");
}

int br_store_job_set_owner(br_store_t *s, int64_t job, const char *owner, int64_t owner_id,
                           br_err_t *err)
{
    if (check_text(owner, SHORT_MAX, 0, "owner", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_JOB_SET_OWNER];
    if (sqlite3_bind_int64(st, 1, job) || bind_text(st, 2, owner) ||
        sqlite3_bind_int64(st, 3, owner_id))
        return binderr(s, st, "set owner", err);
    return run(s, st, "set owner", err);
}

int br_store_job_set_reason(br_store_t *s, int64_t job, const char *reason, br_err_t *err)
{
    size_t len = reason ? strnlen(reason, TEXT_MAX + 1) : 0;
    if (len > TEXT_MAX || (reason && !valid_utf8(reason, len)))
        return br_errf(err, EINVAL, "job field 'reason' must be UTF-8 of at most %d bytes",
                       TEXT_MAX);
    sqlite3_stmt *st = s->st[ST_JOB_SET_REASON];
    if (sqlite3_bind_int64(st, 1, job) || bind_text(st, 2, reason))
        return binderr(s, st, "set reason", err);
    return run_on_job(s, st, "set reason", job, err);
}

int br_store_attempt_node_add(br_store_t *s, int64_t job, int attempt, const char *node,
                              br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_NODE_ADD];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        bind_text(st, 3, node))
        return binderr(s, st, "record attempt node", err);
    return run(s, st, "record attempt node", err);
}

int br_store_attempt_exited(br_store_t *s, int64_t job, int attempt, const char *node,
                            br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_EXITED];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        bind_text(st, 3, node))
        return binderr(s, st, "record exit", err);
    if (run(s, st, "record exit", err) < 0)
        return -1;
    return sqlite3_changes(s->db) == 1;
}

int br_store_attempt_reopen(br_store_t *s, int64_t job, int attempt, const char *node,
                            br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_REOPEN];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        bind_text(st, 3, node))
        return binderr(s, st, "reopen attempt", err);
    return run(s, st, "reopen attempt", err);
}

int br_store_attempt_node_ran(br_store_t *s, int64_t job, int attempt, const char *node,
                              br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_ATTEMPT_NODE_RAN];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        bind_text(st, 3, node))
        return binderr(s, st, "find attempt node", err);
    int rc = sqlite3_step(st);
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "find attempt node");
    return rc == SQLITE_ROW;
}

int64_t br_store_log_lost_set(br_store_t *s, int64_t job, int attempt, const char *node,
                              int64_t bytes, br_err_t *err)
{
    int64_t before = 0;
    sqlite3_stmt *st = s->st[ST_LOG_LOST_GET];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        bind_text(st, 3, node))
        return binderr(s, st, "read lost output", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        before = sqlite3_column_int64(st, 0);
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "read lost output");
    st = s->st[ST_LOG_LOST_SET];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        bind_text(st, 3, node) || sqlite3_bind_int64(st, 4, bytes))
        return binderr(s, st, "count lost output", err);
    return run(s, st, "count lost output", err) < 0 ? -1 : before;
}

int64_t br_store_log_lost(br_store_t *s, int64_t job, br_err_t *err)
{
    int64_t n = 0;
    sqlite3_stmt *st = s->st[ST_LOG_LOST_SUM];
    if (sqlite3_bind_int64(st, 1, job))
        return binderr(s, st, "sum lost output", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : dberr(s, err, "sum lost output");
}

int br_store_token_join_key_known(br_store_t *s, const char *pubkey, int64_t now_ms,
                                  br_err_t *err)
{
    if (check_pubkey(pubkey, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_TOKEN_JOIN_KEY];
    if (bind_text(st, 1, pubkey) ||
        sqlite3_bind_int64(st, 2, now_ms - BR_STORE_TOKEN_KEY_GRACE_MS))
        return binderr(s, st, "find join key", err);
    int rc = sqlite3_step(st);
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "find join key");
    return rc == SQLITE_ROW;
}

static json_t *user_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = put(o, "name", col_text(st, 0));
    bad |= put(o, "kind", col_text(st, 1));
    bad |= put(o, "created", col_int(st, 2));
    return row_done(o, bad, "key", err);
}

json_t *br_store_key_list_users(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_KEY_USERS], user_row, "list users", err);
}

/* --- tokens ------------------------------------------------------------------- */

int br_store_token_add(br_store_t *s, const char *id, const char *hash_hex,
                       int64_t created_ms, int64_t expires_ms, int uses_max,
                       const char *join_key, br_err_t *err)
{
    if (check_text(id, TOKEN_ID_MAX, 0, "token id", err) < 0 ||
        check_text(hash_hex, SHORT_MAX, 0, "token hash", err) < 0 ||
        (join_key && check_pubkey(join_key, err) < 0))
        return -1;
    if (uses_max < 1)
        return br_errf(err, EINVAL, "a token needs at least one use");
    sqlite3_stmt *st = s->st[ST_TOKEN_ADD];
    if (bind_text(st, 1, id) || bind_text(st, 2, hash_hex) ||
        sqlite3_bind_int64(st, 3, created_ms) ||
        sqlite3_bind_int64(st, 4, expires_ms) || sqlite3_bind_int(st, 5, uses_max) ||
        bind_text(st, 6, join_key))
        return binderr(s, st, "add token", err);
    if (run(s, st, "add token", err) < 0)
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
    if (check_text(hash_hex, SHORT_MAX, 0, "token hash", err) < 0)
        return br_errf(err, EACCES, "token not recognised");
    sqlite3_stmt *st = s->st[ST_TOKEN_FIND];
    if (bind_text(st, 1, hash_hex))
        return binderr(s, st, "use token", err);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int ret = rc == SQLITE_DONE ? br_errf(err, EACCES, "token not recognised")
                                    : dberr(s, err, "use token");
        reset(st);
        return ret;
    }
    char tid[TOKEN_ID_MAX + 1];
    const char *v = (const char *)sqlite3_column_text(st, 0);
    br_strlcpy(tid, v ? v : "", sizeof(tid));
    const char *why = token_refusal(st, now_ms);
    reset(st);
    if (why)
        return br_errf(err, EACCES, "%s", why);
    st = s->st[ST_TOKEN_USE];
    if (bind_text(st, 1, tid))
        return binderr(s, st, "use token", err);
    if (run(s, st, "use token", err) < 0)
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
    int bad = put(o, "id", col_text(st, 0));
    bad |= put(o, "created", col_int(st, 1));
    bad |= put(o, "expires", col_int(st, 2));
    bad |= put(o, "uses", col_int(st, 3));
    bad |= put(o, "uses_max", col_int(st, 4));
    bad |= put(o, "revoked", json_boolean(sqlite3_column_int(st, 5)));
    bad |= put(o, "kind", col_text(st, 6));
    if (!bad && json_integer_value(json_object_get(o, "expires")) == 0)
        bad |= put(o, "expires", json_null()); /* a metrics token that never expires */
    return row_done(o, bad, "token", err);
}

json_t *br_store_token_list(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_TOKEN_LIST], token_row, "list tokens", err);
}

int br_store_token_add_metrics(br_store_t *s, const char *id, const char *hash_hex,
                               int64_t created_ms, int64_t expires_ms, br_err_t *err)
{
    if (check_text(id, TOKEN_ID_MAX, 0, "token id", err) < 0 ||
        check_text(hash_hex, SHORT_MAX, 0, "token hash", err) < 0)
        return -1;
    if (expires_ms < 0)
        return br_errf(err, EINVAL, "a token's expiry cannot be negative");
    sqlite3_stmt *st = s->st[ST_TOKEN_ADD_METRICS];
    if (bind_text(st, 1, id) || bind_text(st, 2, hash_hex) ||
        sqlite3_bind_int64(st, 3, created_ms) || sqlite3_bind_int64(st, 4, expires_ms))
        return binderr(s, st, "add metrics token", err);
    if (run(s, st, "add metrics token", err) < 0)
        return errno == EEXIST ? br_errf(err, EEXIST, "token already exists") : -1;
    return 0;
}

static json_t *metrics_token_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = put(o, "id", col_text(st, 0));
    bad |= put(o, "hash", col_text(st, 1));
    bad |= put(o, "expires", col_int(st, 2));
    bad |= put(o, "revoked", json_boolean(sqlite3_column_int(st, 3)));
    return row_done(o, bad, "token", err);
}

json_t *br_store_token_list_metrics(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_TOKEN_METRICS], metrics_token_row, "list metrics tokens",
                     err);
}

int br_store_token_revoke(br_store_t *s, const char *id, br_err_t *err)
{
    if (check_text(id, SHORT_MAX, 0, "token id", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_TOKEN_REVOKE];
    if (bind_text(st, 1, id))
        return binderr(s, st, "revoke token", err);
    if (run(s, st, "revoke token", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return br_errf(err, ENOENT, "no token '%.40s'", id);
    return 0;
}

/* --- nodes -------------------------------------------------------------------- */

int br_store_node_save(br_store_t *s, const json_t *node, br_err_t *err)
{
    static const char *const need[] = {"name", "pubkey", "state"};
    if (!json_is_object(node))
        return br_errf(err, EINVAL, "a node must be a JSON object");
    for (size_t i = 0; i < NFIELDS(need); i++) {
        const json_t *v = json_object_get(node, need[i]);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > SHORT_MAX)
            return br_errf(err, EINVAL, "a node needs a string '%s'", need[i]);
    }
    sqlite3_stmt *st = s->st[ST_NODE_SAVE];
    if (bind_field(s, st, 1, F_STR, json_object_get(node, "name"), "save node", err) ||
        bind_field(s, st, 2, F_OBJECT, node, "save node", err)) {
        reset(st);
        return -1;
    }
    return run(s, st, "save node", err);
}

int br_store_node_delete(br_store_t *s, const char *name, br_err_t *err)
{
    if (check_text(name, SHORT_MAX, 0, "node name", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_NODE_DELETE];
    if (bind_text(st, 1, name))
        return binderr(s, st, "delete node", err);
    if (run(s, st, "delete node", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return br_errf(err, ENOENT, "no node '%.64s'", name);
    return 0;
}

static json_t *node_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = col_json(st, 0);
    return row_done(o, !json_is_object(o), "node", err);
}

json_t *br_store_node_list(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_NODE_LIST], node_row, "list nodes", err);
}

/* --- jobs --------------------------------------------------------------------- */

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
        if (bind_field(s, st, i, jf->type, json_object_get(job, jf->key), "add job",
                       err))
            return -1;
    }
    for (size_t f = 0; f < NFIELDS(job_fields); f++, i++) {
        const jfield_t *jf = &job_fields[f];
        if (bind_field(s, st, i, jf->type, json_object_get(job, jf->key), "add job",
                       err))
            return -1;
    }
    for (size_t f = 0; f < NFIELDS(job_add_extra); f++, i++)
        if (bind_field(s, st, i, F_INT_NULL, json_object_get(job, job_add_extra[f].key),
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
        reset(st);
        return -1;
    }
    if (run(s, st, "add job", err) < 0)
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
            return binderr(s, st, "update job", err);
        if (bind_field(s, st, i + 1, job_fields[f].type, v, "update job", err) < 0) {
            reset(st);
            return -1;
        }
    }
    if (sqlite3_bind_int64(st, 2 * (int)NFIELDS(job_fields) + 1, id))
        return binderr(s, st, "update job", err);
    return run_on_job(s, st, "update job", id, err);
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
            v = col_json(st, i);
        else if (sqlite3_column_type(st, i) == SQLITE_INTEGER)
            v = col_int(st, i);
        else
            v = col_text(st, i);
        bad |= put(o, names[i], v);
    }
    bad |= !json_is_array(json_object_get(o, "nodes"));
    bad |= !json_is_object(json_object_get(o, "spec"));
    return row_done(o, bad, "job", err);
}

static json_t *job_row_list(sqlite3_stmt *st, br_err_t *err)
{
    return job_row(st, 0, err);
}

json_t *br_store_job_get(br_store_t *s, int64_t id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_JOB_GET];
    if (sqlite3_bind_int64(st, 1, id)) {
        binderr(s, st, "get job", err);
        return NULL;
    }
    int rc = sqlite3_step(st);
    json_t *job = NULL;
    if (rc == SQLITE_ROW)
        job = job_row(st, 1, err);
    else if (rc == SQLITE_DONE)
        br_errf(err, ENOENT, "no job %lld", (long long)id);
    else
        dberr(s, err, "get job");
    reset(st);
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
        binderr(s, st, "list jobs", err);
        return NULL;
    }
    return list_rows(s, st, job_row_list, "list jobs", err);
}

json_t *br_store_job_list_recent(br_store_t *s, int64_t ended_since_ms, int limit,
                                 br_err_t *err)
{
    if (limit < 0)
        return br_errp(err, EINVAL, "job list: negative limit");
    sqlite3_stmt *st = s->st[ST_JOB_LIST_RECENT];
    if (sqlite3_bind_int64(st, 1, ended_since_ms) ||
        sqlite3_bind_int(st, 2, limit ? limit : -1)) {
        binderr(s, st, "list recent jobs", err);
        return NULL;
    }
    return list_rows(s, st, job_row_list, "list recent jobs", err);
}

int br_store_job_set_array(br_store_t *s, int64_t id, int64_t array_of, int index,
                           br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_JOB_SET_ARRAY];
    if (sqlite3_bind_int64(st, 1, id) || sqlite3_bind_int64(st, 2, array_of) ||
        sqlite3_bind_int(st, 3, index))
        return binderr(s, st, "set job array", err);
    return run_on_job(s, st, "set job array", id, err);
}

int64_t br_store_job_array_task(br_store_t *s, int64_t array_of, int index, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_JOB_ARRAY_TASK];
    if (sqlite3_bind_int64(st, 1, array_of) || sqlite3_bind_int(st, 2, index))
        return binderr(s, st, "find array task", err);
    int rc = sqlite3_step(st);
    int64_t id = rc == SQLITE_ROW    ? sqlite3_column_int64(st, 0)
                 : rc == SQLITE_DONE ? br_errf(err, ENOENT, "no job %lld[%d]",
                                               (long long)array_of, index)
                                     : dberr(s, err, "find array task");
    reset(st);
    return id;
}

int br_store_schema_version(void)
{
    return SCHEMA_VERSION;
}

/* --- events ------------------------------------------------------------------- */

int64_t br_store_event_add(br_store_t *s, int64_t time_ms, int64_t job_id,
                           const char *node, const char *state, const char *reason,
                           br_err_t *err)
{
    if (job_id < 0)
        return br_errf(err, EINVAL, "event: bad job id %lld", (long long)job_id);
    if (check_text(node, SHORT_MAX, 1, "event node", err) < 0 ||
        check_text(state, SHORT_MAX, 0, "event state", err) < 0 ||
        check_text(reason, TEXT_MAX, 1, "event reason", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_EVENT_ADD];
    int rc = sqlite3_bind_int64(st, 1, time_ms);
    rc |= job_id ? sqlite3_bind_int64(st, 2, job_id) : sqlite3_bind_null(st, 2);
    rc |= bind_text(st, 3, node) | bind_text(st, 4, state) | bind_text(st, 5, reason);
    if (rc)
        return binderr(s, st, "add event", err);
    if (run(s, st, "add event", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    return sqlite3_last_insert_rowid(s->db);
}

int br_store_event_seen(br_store_t *s, int64_t job_id, const char *reason,
                        br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_EVENT_SEEN];
    if (sqlite3_bind_int64(st, 1, job_id) || bind_text(st, 2, reason))
        return binderr(s, st, "find event", err);
    int rc = sqlite3_step(st);
    int ret = rc == SQLITE_ROW    ? 1
              : rc == SQLITE_DONE ? 0
                                  : dberr(s, err, "find event");
    reset(st);
    return ret;
}

static json_t *event_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"id", "time", "job", "node", "state", "reason"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= put(o, names[i], i < 3 ? col_int(st, i) : col_text(st, i));
    return row_done(o, bad, "event", err);
}

int br_store_audit_add(br_store_t *s, int64_t time_ms, int64_t principal, const char *who,
                       const char *action, const char *target, const char *result,
                       br_err_t *err)
{
    if (check_text(who, SHORT_MAX, 0, "audit who", err) < 0 ||
        check_text(action, SHORT_MAX, 0, "audit action", err) < 0 ||
        check_text(target, SHORT_MAX, 1, "audit target", err) < 0 ||
        check_text(result, TEXT_MAX, 0, "audit result", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_AUDIT_ADD];
    if (sqlite3_bind_int64(st, 1, time_ms) || sqlite3_bind_int64(st, 2, principal) ||
        bind_text(st, 3, who) || bind_text(st, 4, action) || bind_text(st, 5, target) ||
        bind_text(st, 6, result))
        return binderr(s, st, "audit", err);
    return run(s, st, "audit", err);
}

static json_t *audit_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"id", "time", "who", "action", "target", "result"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= put(o, names[i], i < 2 ? col_int(st, i) : col_text(st, i));
    return row_done(o, bad, "audit entry", err);
}

json_t *br_store_audit_list(br_store_t *s, int64_t after, int limit, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_AUDIT_LIST];
    if (sqlite3_bind_int64(st, 1, after) || sqlite3_bind_int(st, 2, limit > 0 ? limit : -1)) {
        binderr(s, st, "list audit", err);
        return NULL;
    }
    return list_rows(s, st, audit_row, "list audit", err);
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
        binderr(s, st, "list events", err);
        return NULL;
    }
    return list_rows(s, st, event_row, "list events", err);
}

/* --- logs --------------------------------------------------------------------- */

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
        return binderr(s, st, "add log", err);
    if (run(s, st, "add log", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    if (sqlite3_changes(s->db) == 0 || len == 0)
        return 0; /* a chunk seen before */
    st = s->st[ST_LOG_COUNT];
    if (sqlite3_bind_int64(st, 1, job_id) || sqlite3_bind_int64(st, 2, (int64_t)len))
        return binderr(s, st, "count log", err);
    rc = sqlite3_step(st);
    reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dberr(s, err, "count log");
}

int64_t br_store_log_cap(br_store_t *s, int64_t job_id, int64_t max_bytes, br_err_t *err)
{
    if (max_bytes <= 0)
        return 0;
    sqlite3_stmt *st = s->st[ST_LOG_BYTES];
    if (sqlite3_bind_int64(st, 1, job_id))
        return binderr(s, st, "count log", err);
    int rc = sqlite3_step(st);
    int64_t bytes = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "count log");
    if (bytes <= max_bytes)
        return 0;
    /* drop the oldest chunks down to 7/8 of the cap, so that a job printing on
     * does not trim at every chunk */
    int64_t goal = bytes - max_bytes / 8 * 7, dropped = 0, last = 0;
    st = s->st[ST_LOG_OLDEST];
    if (sqlite3_bind_int64(st, 1, job_id))
        return binderr(s, st, "trim log", err);
    while (dropped < goal && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        last = sqlite3_column_int64(st, 0);
        dropped += sqlite3_column_int64(st, 1);
    }
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "trim log");
    st = s->st[ST_LOG_TRIM];
    if (sqlite3_bind_int64(st, 1, job_id) || sqlite3_bind_int64(st, 2, last))
        return binderr(s, st, "trim log", err);
    if (run(s, st, "trim log", err) < 0)
        return -1;
    st = s->st[ST_LOG_TRIMMED];
    if (sqlite3_bind_int64(st, 1, job_id) || sqlite3_bind_int64(st, 2, dropped))
        return binderr(s, st, "trim log", err);
    return run(s, st, "trim log", err) < 0 ? -1 : dropped;
}

int64_t br_store_log_expire(br_store_t *s, int64_t ended_before_ms, int max_rows,
                            br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_LOG_EXPIRE];
    if (sqlite3_bind_int64(st, 1, ended_before_ms) || sqlite3_bind_int(st, 2, max_rows))
        return binderr(s, st, "expire logs", err);
    if (run(s, st, "expire logs", err) < 0)
        return -1;
    int64_t n = sqlite3_changes(s->db);
    st = s->st[ST_LOG_EXPIRED];
    if (sqlite3_bind_int64(st, 1, ended_before_ms))
        return binderr(s, st, "expire logs", err);
    return run(s, st, "expire logs", err) < 0 ? -1 : n;
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
        return binderr(s, st, "read log", err);
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
    int ret = rc == SQLITE_DONE ? 0 : dberr(s, err, "read log");
    reset(st);
    return ret;
}

/* --- checkpoints -------------------------------------------------------------- */

int br_store_checkpoint_under(br_store_t *s, const char *dir, int64_t not_job, int64_t *job,
                              char *path, size_t len, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_UNDER];
    if (sqlite3_bind_int64(st, 1, not_job) || bind_text(st, 2, dir))
        return binderr(s, st, "find checkpoints", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *job = sqlite3_column_int64(st, 0);
        br_strlcpy(path, (const char *)sqlite3_column_text(st, 1), len);
    }
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(s, err, "find checkpoints");
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
    if (check_text(node, SHORT_MAX, 0, "checkpoint node", err) < 0 ||
        check_text(path, TEXT_MAX, 0, "checkpoint path", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_CKPT_ADD];
    int rc = sqlite3_bind_int64(st, 1, job_id) | sqlite3_bind_int(st, 2, attempt);
    rc |= bind_text(st, 3, node) | bind_text(st, 4, path);
    rc |= sqlite3_bind_int64(st, 5, step) | sqlite3_bind_int64(st, 6, size);
    rc |= sqlite3_bind_int64(st, 7, time_ms);
    if (rc)
        return binderr(s, st, "add checkpoint", err);
    if (manifest && bind_dump(s, st, 8, manifest, "checkpoint manifest", err) < 0) {
        reset(st);
        return -1;
    }
    if (run(s, st, "add checkpoint", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    return 0;
}

/* A checkpoint row (CKPT_COLS) as {"path","step","attempt","node","size","time",
 * "manifest": {"hash","files","bytes","listed","truncated"} or null}. */
static json_t *ckpt_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"path", "step", "attempt",
                                        "node", "size", "time"};
    json_t *o = json_object(), *m = json_null();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= put(o, names[i], i == 0 || i == 3 ? col_text(st, i) : col_int(st, i));
    if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
        json_decref(m);
        m = json_object();
        bad |= put(m, "hash", col_text(st, 6)) | put(m, "files", col_int(st, 7)) |
               put(m, "bytes", col_int(st, 8)) | put(m, "listed", col_int(st, 9));
        bad |= put(
            m, "truncated",
            json_boolean(sqlite3_column_int64(st, 9) < sqlite3_column_int64(st, 7)));
    }
    bad |= put(o, "manifest", m);
    return row_done(o, bad, "checkpoint", err);
}

json_t *br_store_checkpoint_list(br_store_t *s, int64_t job_id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_LIST];
    if (sqlite3_bind_int64(st, 1, job_id)) {
        binderr(s, st, "list checkpoints", err);
        return NULL;
    }
    return list_rows(s, st, ckpt_row, "list checkpoints", err);
}

json_t *br_store_checkpoint_latest(br_store_t *s, int64_t job_id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_LATEST];
    if (sqlite3_bind_int64(st, 1, job_id)) {
        binderr(s, st, "latest checkpoint", err);
        return NULL;
    }
    int rc = sqlite3_step(st);
    json_t *ckpt = NULL;
    if (rc == SQLITE_ROW)
        ckpt = ckpt_row(st, err);
    else if (rc == SQLITE_DONE)
        ckpt = json_null();
    else
        dberr(s, err, "latest checkpoint");
    reset(st);
    return ckpt;
}

/* --- figures for the metrics --------------------------------------------------- */

static json_t *job_count_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = put(o, "state", col_text(st, 0));
    bad |= put(o, "owner", col_text(st, 1));
    bad |= put(o, "count", col_int(st, 2));
    bad |= put(o, "log_dropped", col_int(st, 3));
    return row_done(o, bad, "job count", err);
}

json_t *br_store_job_counts(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_JOB_COUNTS], job_count_row, "count jobs", err);
}

int64_t br_store_log_lost_all(br_store_t *s, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_LOG_LOST_ALL];
    int64_t n = 0;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : dberr(s, err, "sum lost output");
}

int64_t br_store_size(br_store_t *s, br_err_t *err)
{
    const char *path = sqlite3_db_filename(s->db, "main");
    struct stat st;
    if (!path || !*path || stat(path, &st) < 0)
        return br_errf(err, errno ? errno : ENOENT, "store: cannot stat %s: %s",
                       path ? path : "(no file)", strerror(errno ? errno : ENOENT));
    int64_t size = (int64_t)st.st_size;
    char wal[PATH_MAX];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    if (stat(wal, &st) == 0) /* committed pages not yet checkpointed into the file */
        size += (int64_t)st.st_size;
    return size;
}

/* --- replicas: verified copies of checkpoints on other nodes ------------------ */

int br_store_replica_add(br_store_t *s, int64_t job_id, const char *hash, const char *node,
                         int64_t step, const char *path, int64_t bytes, int64_t time_ms,
                         br_err_t *err)
{
    if (job_id <= 0 || step < 0 || bytes < 0)
        return br_errf(err, EINVAL, "replica: bad job, step or size");
    if (check_text(hash, SHORT_MAX, 0, "replica hash", err) < 0 ||
        check_text(node, SHORT_MAX, 0, "replica node", err) < 0 ||
        check_text(path, TEXT_MAX, 0, "replica path", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_REPL_ADD];
    int rc = sqlite3_bind_int64(st, 1, job_id) | bind_text(st, 2, hash) |
             bind_text(st, 3, node) | sqlite3_bind_int64(st, 4, step) |
             bind_text(st, 5, path) | sqlite3_bind_int64(st, 6, bytes) |
             sqlite3_bind_int64(st, 7, time_ms);
    if (rc)
        return binderr(s, st, "add replica", err);
    if (run(s, st, "add replica", err) < 0)
        return errno == ENOENT ? br_errf(err, ENOENT, "no job %lld", (long long)job_id)
                               : -1;
    return 0;
}

int br_store_replica_del(br_store_t *s, int64_t job_id, const char *hash, const char *node,
                         br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REPL_DEL];
    int rc = sqlite3_bind_int64(st, 1, job_id);
    rc |= hash ? bind_text(st, 2, hash) : sqlite3_bind_null(st, 2);
    rc |= node ? bind_text(st, 3, node) : sqlite3_bind_null(st, 3);
    if (rc)
        return binderr(s, st, "drop replica", err);
    return run(s, st, "drop replica", err);
}

static json_t *replica_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"hash", "node", "step", "path", "bytes", "time"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= put(o, names[i], i < 2 || i == 3 ? col_text(st, i) : col_int(st, i));
    return row_done(o, bad, "replica", err);
}

json_t *br_store_replica_list(br_store_t *s, int64_t job_id, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REPL_LIST];
    if (sqlite3_bind_int64(st, 1, job_id)) {
        binderr(s, st, "list replicas", err);
        return NULL;
    }
    return list_rows(s, st, replica_row, "list replicas", err);
}

/* A replica row with its job (column 6). */
static json_t *replica_job_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = replica_row(st, err);
    if (o && put(o, "job", col_int(st, 6))) {
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
        binderr(s, st, "list expired replicas", err);
        return NULL;
    }
    return list_rows(s, st, replica_job_row, "list expired replicas", err);
}

json_t *br_store_checkpoint_manifest(br_store_t *s, int64_t job_id, const char *hash,
                                     br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CKPT_MANIFEST];
    if (sqlite3_bind_int64(st, 1, job_id) | bind_text(st, 2, hash)) {
        binderr(s, st, "checkpoint manifest", err);
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
        dberr(s, err, "checkpoint manifest");
    }
    reset(st);
    return m;
}

/* --- usage and limits ----------------------------------------------------------- */

int br_store_usage_add(br_store_t *s, int64_t principal, int64_t hour, int64_t gpu_ms,
                       int64_t cpu_ms, int64_t cost_micros, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_USAGE_ADD];
    if (sqlite3_bind_int64(st, 1, principal) | sqlite3_bind_int64(st, 2, hour) |
        sqlite3_bind_int64(st, 3, gpu_ms) | sqlite3_bind_int64(st, 4, cpu_ms) |
        sqlite3_bind_int64(st, 5, cost_micros))
        return binderr(s, st, "add usage", err);
    return run(s, st, "add usage", err);
}

static json_t *usage_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"principal", "name", "hour",
                                        "gpu_ms",    "cpu_ms", "cost_micros"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad |= put(o, names[i], i == 1 ? col_text(st, i) : col_int(st, i));
    return row_done(o, bad, "usage", err);
}

json_t *br_store_usage_since(br_store_t *s, int64_t hour, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_USAGE_SINCE];
    if (sqlite3_bind_int64(st, 1, hour)) {
        binderr(s, st, "list usage", err);
        return NULL;
    }
    return list_rows(s, st, usage_row, "list usage", err);
}

int br_store_limits_set(br_store_t *s, br_principal_t kind, const char *name,
                        const json_t *limits, br_err_t *err)
{
    if (!kind_name(kind) || check_text(name, SHORT_MAX, 0, "name", err) < 0)
        return br_errf(err, EINVAL, "limits belong to an admin or a user, by name");
    sqlite3_stmt *st = s->st[ST_LIMITS_SET];
    if (bind_text(st, 1, kind_name(kind)) || bind_text(st, 2, name))
        return binderr(s, st, "set limits", err);
    if ((limits && json_object_size(limits) ? bind_dump(s, st, 3, limits, "set limits", err)
                                            : (sqlite3_bind_null(st, 3) ? -1 : 0)) < 0) {
        reset(st);
        return -1;
    }
    if (run(s, st, "set limits", err) < 0)
        return -1;
    return sqlite3_changes(s->db) ? 0 : br_errf(err, ENOENT, "no %s '%s'", kind_name(kind), name);
}

static json_t *sharer_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = put(o, "id", col_int(st, 0));
    bad |= put(o, "kind", col_text(st, 1));
    bad |= put(o, "name", col_text(st, 2));
    bad |= put(o, "limits", col_json(st, 3));
    return row_done(o, bad, "principal", err);
}

json_t *br_store_sharers(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_SHARERS], sharer_row, "list users", err);
}

int br_store_totals(br_store_t *s, int64_t totals[4], br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_TOTALS];
    int rc = sqlite3_step(st);
    for (int i = 0; i < 4; i++)
        totals[i] = rc == SQLITE_ROW ? sqlite3_column_int64(st, i) : 0;
    reset(st);
    return rc == SQLITE_ROW ? 0 : dberr(s, err, "count checkpoints");
}

static json_t *usage_total_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = json_object();
    int bad = put(o, "name", col_text(st, 0));
    bad |= put(o, "gpu_ms", col_int(st, 1));
    bad |= put(o, "cpu_ms", col_int(st, 2));
    bad |= put(o, "cost_micros", col_int(st, 3));
    return row_done(o, bad, "usage", err);
}

json_t *br_store_usage_totals(br_store_t *s, br_err_t *err)
{
    return list_rows(s, s->st[ST_USAGE_TOTALS], usage_total_row, "sum usage", err);
}
