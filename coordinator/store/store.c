/* store.c - the coordinator's durable state: SQLite (WAL, synchronous=FULL) + JSON.
 * This file: opening a store, its schema and migrations, every statement it
 * prepares, and transactions. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#define BR_STORE_APP_ID 0x42524d42 /* "BRMB": PRAGMA application_id of a store */

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
    /* 11: data sets (docs/files.md): each version of a user's named tree, its manifest
     * (kept in the content store by its hash), its tag (immutable) and who else may
     * use it; and what refers to each content of the store ("data:ID"), with its
     * size and whose it is, for the quotas and for removing what nothing holds */
    "CREATE TABLE datasets (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " owner INTEGER NOT NULL REFERENCES principals (id), name TEXT NOT NULL,"
    " tag TEXT NOT NULL, version INTEGER NOT NULL, manifest TEXT NOT NULL,"
    " files INTEGER NOT NULL, bytes INTEGER NOT NULL, created INTEGER NOT NULL,"
    " public INTEGER NOT NULL DEFAULT 0, shares TEXT NOT NULL DEFAULT '[]',"
    " UNIQUE (owner, name, tag), UNIQUE (owner, name, version));"
    "CREATE TABLE content_refs (ref TEXT NOT NULL, hash TEXT NOT NULL,"
    " size INTEGER NOT NULL, principal INTEGER NOT NULL,"
    " PRIMARY KEY (ref, hash)) WITHOUT ROWID;"
    "CREATE INDEX content_refs_hash ON content_refs (hash);"
    "CREATE INDEX content_refs_principal ON content_refs (principal, hash);",
    /* 12: the outputs each attempt left on each node (docs/files.md): the tree's
     * manifest and listing in the content store, referred to as "out:JOB:ATTEMPT:NODE" */
    "CREATE TABLE outputs (job INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    " node TEXT NOT NULL, manifest TEXT NOT NULL, listing TEXT NOT NULL,"
    " listing_size INTEGER NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " time INTEGER NOT NULL, PRIMARY KEY (job, attempt, node));",
    /* 13: a data set's listing ({"hash", "size"} of its manifest's text in the
     * content store), which the nodes that mount it read its entries from */
    "ALTER TABLE datasets ADD COLUMN listing TEXT NOT NULL DEFAULT 'null';",
    /* 14: the gateway's API keys (docs/gateway.md): each a user's, kept as the
     * BLAKE2b-256 of its text only; its id is the hash's first 12 hex digits; models:
     * the model names it may be used for (an array; [] every one) */
    "CREATE TABLE api_keys (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE,"
    " principal INTEGER NOT NULL REFERENCES principals (id), name TEXT NOT NULL,"
    " models TEXT NOT NULL DEFAULT '[]', created INTEGER NOT NULL, revoked INTEGER);"
    "CREATE UNIQUE INDEX api_keys_name ON api_keys (principal, name)"
    " WHERE revoked IS NULL;",
    /* 15: what the gateways answered (docs/gateway.md), per user and model name by
     * the hour: requests, those answered 4xx/5xx, tokens the answers said they
     * used, and their time summed; principal 0: requests without a key */
    "CREATE TABLE model_usage (principal INTEGER NOT NULL, model TEXT NOT NULL,"
    " hour INTEGER NOT NULL, requests INTEGER NOT NULL DEFAULT 0,"
    " errors INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0, ms INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (hour, principal, model)) WITHOUT ROWID;",
    /* 16: images loaded without a registry (docs/containers.md): each an archive
     * (docker-archive or oci-archive) kept as a one-file tree in the content store
     * ("image:ID" refers to it), under a name, one per architecture (and variant);
     * image_id is podman's ID for it (the sha256 of its config) */
    "CREATE TABLE images (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,"
    " arch TEXT NOT NULL, variant TEXT NOT NULL DEFAULT '', os TEXT NOT NULL,"
    " format TEXT NOT NULL, image_id TEXT NOT NULL, layers INTEGER NOT NULL,"
    " owner INTEGER NOT NULL REFERENCES principals (id), manifest TEXT NOT NULL,"
    " listing TEXT NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " created INTEGER NOT NULL, UNIQUE (name, arch, variant));",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

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
    [ST_KEY_GATEWAYS] = "SELECT name, kind, min(created) FROM keys"
                        " WHERE kind = 'gateway' AND revoked = 0"
                        " GROUP BY name ORDER BY name",
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
    [ST_MODEL_USAGE_ADD] = "INSERT INTO model_usage (principal, model, hour, requests,"
                           " errors, prompt_tokens, completion_tokens, ms)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                           " ON CONFLICT (hour, principal, model) DO UPDATE"
                           " SET requests = requests + excluded.requests,"
                           " errors = errors + excluded.errors,"
                           " prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                           " completion_tokens = completion_tokens + excluded.completion_tokens,"
                           " ms = ms + excluded.ms",
    /* ?2: one principal's (-1: everyone's) */
    [ST_MODEL_USAGE_SINCE] = "SELECT coalesce(p.name, ''), u.model, sum(u.requests),"
                             " sum(u.errors), sum(u.prompt_tokens),"
                             " sum(u.completion_tokens), sum(u.ms) FROM model_usage u"
                             " LEFT JOIN principals p ON p.id = u.principal"
                             " WHERE u.hour >= ?1 AND (?2 < 0 OR u.principal = ?2)"
                             " GROUP BY u.principal, u.model ORDER BY u.model, p.name",
    [ST_LIMITS_SET] = "UPDATE principals SET limits = ?3"
                      " WHERE kind = ?1 AND name = ?2 AND removed IS NULL",
    [ST_TOTALS] = "SELECT (SELECT count(*) FROM checkpoints),"
                  " (SELECT coalesce(sum(size), 0) FROM checkpoints),"
                  " (SELECT count(*) FROM replicas),"
                  " (SELECT coalesce(sum(bytes), 0) FROM replicas)",
    [ST_USAGE_TOTALS] = "SELECT p.name, sum(u.gpu_ms), sum(u.cpu_ms), sum(u.cost_micros)"
                        " FROM usage u JOIN principals p ON p.id = u.principal"
                        " GROUP BY u.principal ORDER BY p.name",
    [ST_APIKEY_ADD] = "INSERT INTO api_keys (id, hash, principal, name, models, created)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* ?1: the principal (0: every one's); a removed user's keys are gone with them */
    [ST_APIKEY_LIST] = "SELECT k.id, k.name, p.name, k.principal, k.models, k.created"
                       " FROM api_keys k JOIN principals p ON p.id = k.principal"
                       " WHERE k.revoked IS NULL AND p.removed IS NULL"
                       " AND (?1 = 0 OR k.principal = ?1) ORDER BY p.name, k.created, k.id",
    /* ?1: the principal (0: any, then by id only); ?2: the id or the name */
    [ST_APIKEY_REVOKE] = "UPDATE api_keys SET revoked = ?3 WHERE revoked IS NULL"
                         " AND principal IN (SELECT id FROM principals WHERE removed IS NULL)"
                         " AND ((?1 != 0 AND principal = ?1 AND (id = ?2 OR name = ?2))"
                         " OR (?1 = 0 AND id = ?2)) RETURNING id, name",
    [ST_APIKEY_LIVE] = "SELECT k.hash, k.principal, p.name, k.models FROM api_keys k"
                       " JOIN principals p ON p.id = k.principal"
                       " WHERE k.revoked IS NULL AND p.removed IS NULL ORDER BY k.hash",
    [ST_DATA_ADD] = "INSERT INTO datasets (owner, name, tag, version, manifest, files,"
                    " bytes, created, public, shares, listing)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [ST_DATA_VERSION] = "SELECT coalesce(max(version), 0) + 1 FROM datasets"
                        " WHERE owner = ?1 AND name = ?2",
    [ST_DATA_LIST] = "SELECT d.id, p.name, d.owner, d.name, d.tag, d.version, d.manifest,"
                     " d.files, d.bytes, d.created, d.public, d.shares, d.listing"
                     " FROM datasets d JOIN principals p ON p.id = d.owner"
                     " ORDER BY p.name, d.name, d.version",
    [ST_DATA_DEL] = "DELETE FROM datasets WHERE id = ?1",
    [ST_DATA_MANIFEST_USED] = "SELECT count(*) FROM datasets WHERE manifest = ?1",
    [ST_IMAGE_ADD] = "INSERT INTO images (name, arch, variant, os, format, image_id, layers,"
                     " owner, manifest, listing, files, bytes, created)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    [ST_IMAGE_LIST] = "SELECT i.id, i.name, i.arch, i.variant, i.os, i.format, i.image_id,"
                      " i.layers, p.name, i.owner, i.manifest, i.listing, i.files, i.bytes,"
                      " i.created FROM images i JOIN principals p ON p.id = i.owner"
                      " ORDER BY i.name, i.arch, i.variant",
    [ST_IMAGE_DEL] = "DELETE FROM images WHERE id = ?1",
    /* the code trees no job needs any more: none that names one is active, or
     * ended at or after ?1 */
    [ST_OUT_ADD] = "INSERT OR REPLACE INTO outputs (job, attempt, node, manifest, listing,"
                   " listing_size, files, bytes, time) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [ST_OUT_LIST] = "SELECT attempt, node, manifest, listing, listing_size, files, bytes, time"
                    " FROM outputs WHERE job = ?1 ORDER BY attempt, node",
    /* the outputs of jobs that ended before ?1, or are gone (purged) */
    [ST_OUT_UNNEEDED] = "SELECT 'out:' || o.job || ':' || o.attempt || ':' || o.node"
                        " FROM outputs o LEFT JOIN jobs j ON j.id = o.job"
                        " WHERE j.id IS NULL OR (j.ended IS NOT NULL AND j.ended < ?1)"
                        " LIMIT ?2",
    [ST_OUT_DEL] = "DELETE FROM outputs"
                   " WHERE 'out:' || job || ':' || attempt || ':' || node = ?1",
    [ST_REF_HAS_GLOB] = "SELECT count(*) FROM content_refs WHERE ref GLOB ?1 AND hash = ?2",
    [ST_CODE_UNNEEDED] = "SELECT DISTINCT r.ref FROM content_refs r WHERE r.ref GLOB 'code:*'"
                         " AND NOT EXISTS (SELECT 1 FROM jobs j"
                         " WHERE json_extract(j.spec, '$.code.hash') = substr(r.ref, 6)"
                         " AND (j.ended IS NULL OR j.ended >= ?1)) LIMIT ?2",
    [ST_REF_ADD] = "INSERT OR IGNORE INTO content_refs (ref, hash, size, principal)"
                   " VALUES (?1, ?2, ?3, ?4)",
    [ST_REF_HASHES] = "SELECT hash FROM content_refs WHERE ref = ?1",
    [ST_REF_DEL] = "DELETE FROM content_refs WHERE ref = ?1",
    [ST_REF_COUNT] = "SELECT count(*) FROM content_refs WHERE hash = ?1",
    [ST_REF_HAS] = "SELECT count(*) FROM content_refs WHERE ref = ?1 AND hash = ?2",
    [ST_REF_USER_HAS] = "SELECT count(*) FROM content_refs WHERE principal = ?1"
                        " AND hash = ?2",
    [ST_REF_USER_BYTES] = "SELECT coalesce(sum(size), 0) FROM (SELECT DISTINCT hash, size"
                          " FROM content_refs WHERE principal = ?1)",
    [ST_SHARERS] = "SELECT id, kind, name, limits FROM principals"
                   " WHERE kind IN ('admin', 'user') AND removed IS NULL ORDER BY id",
};

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
        return br_st_dberr(s, err, path);
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
        return br_st_dberr(s, err, path);
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
        return br_st_dberr(s, err, what);
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
            return br_st_dberr(s, err, "prepare");
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
            br_st_dberr(s, err, path);
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
    int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : br_st_dberr(s, err, "read the highest ids");
    if (rc == 0) {
        *jobs = sqlite3_column_int64(st, 0);
        *events = sqlite3_column_int64(st, 1);
    }
    br_st_reset(st);
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
    return br_st_run(s, s->st[ST_BEGIN], "begin", err);
}

int br_store_commit(br_store_t *s, br_err_t *err)
{
    if (!br_store_in_txn(s))
        return br_errf(err, EINVAL, "store: commit without a transaction");
    return br_st_run(s, s->st[ST_COMMIT], "commit", err);
}

int br_store_savepoint(br_store_t *s, br_err_t *err)
{
    s->failed = 0;
    return br_st_run(s, s->st[ST_SAVEPOINT], "savepoint", err);
}

int br_store_release(br_store_t *s)
{
    int failed = s->failed;
    if (!br_store_in_txn(s))
        return failed ? failed : EIO; /* SQLite rolled the whole transaction back */
    if (failed) /* undo this message's half, keep the wake's other messages */
        br_st_run(s, s->st[ST_SAVEPOINT_UNDO], "roll back a message", NULL);
    if (br_st_run(s, s->st[ST_SAVEPOINT_RELEASE], "release a message", NULL) < 0 && !failed)
        failed = EIO;
    s->failed = 0;
    return failed;
}

int br_store_rollback(br_store_t *s)
{
    if (!br_store_in_txn(s))
        return 0;
    return br_st_run(s, s->st[ST_ROLLBACK], "rollback", NULL);
}

int br_store_schema_version(void)
{
    return SCHEMA_VERSION;
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
