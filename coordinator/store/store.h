/* store.h - the coordinator's durable state: one SQLite file in WAL mode with
 * synchronous=FULL, schema versioned by PRAGMA user_version. All SQL lives in
 * store.c. The coordinator groups everything one wake of its loop changed into one
 * transaction (br_store_begin/commit) and answers requests only after the commit,
 * so an acknowledged request is on disk. Rows come back as jansson objects shaped as
 * the CLI's --json output (ARCHITECTURE.md, "Command line"). Times are unix ms in
 * the store; the JSON the CLI prints converts them, not the store. */
#ifndef BRAMBLE_STORE_H
#define BRAMBLE_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct br_store br_store_t;

/* Open (creating and migrating as needed) the store at path. A file that is not a
 * bramble store, or one with a newer schema, is refused with a clear error. */
br_store_t *br_store_open(const char *path, br_err_t *err);
void br_store_destroy(br_store_t **store);

/* Transactions. begin while one is open is an error (EBUSY). commit makes it durable.
 * Every write function below works inside or outside a transaction. */
int br_store_begin(br_store_t *s, br_err_t *err);
int br_store_commit(br_store_t *s, br_err_t *err);
int br_store_rollback(br_store_t *s);
int br_store_in_txn(const br_store_t *s);
/* One message inside the wake's transaction: a savepoint, then release. release
 * returns 0, or the errno (ENOSPC: the disk is full; EIO) of a store failure during
 * the message, whose changes are then undone; when SQLite itself rolled the whole
 * transaction back (the connection is in autocommit again) the wake must end with
 * nothing answered as done. */
int br_store_savepoint(br_store_t *s, br_err_t *err);
int br_store_release(br_store_t *s);
/* Record that node was given (a rank of) the job's attempt; whether it was: 1, 0,
 * or -1 on error. Only such a node may ship that attempt's output or its exit. */
int br_store_attempt_node_add(br_store_t *s, int64_t job, int attempt, const char *node,
                              br_err_t *err);
int br_store_attempt_node_ran(br_store_t *s, int64_t job, int attempt, const char *node,
                              br_err_t *err);
/* Take node's exit report of the attempt once: 1 the first time, 0 for a resend
 * (its acknowledgement was lost or late), -1 on error. */
int br_store_attempt_exited(br_store_t *s, int64_t job, int attempt, const char *node,
                            br_err_t *err);
/* The node's exit report of the attempt was taken, yet the same attempt is sent to
 * it again (it could not start there, and waits for a checkpoint to be brought): its
 * next report is a new one, to be taken too. 0, or -1 on error. */
int br_store_attempt_reopen(br_store_t *s, int64_t job, int attempt, const char *node,
                            br_err_t *err);
/* Output of an attempt that its node's agent had to drop (bytes, as the agent
 * counts them: the largest report wins), returning the count before (or -1); the
 * sum over the job's attempts. */
int64_t br_store_log_lost_set(br_store_t *s, int64_t job, int attempt, const char *node,
                              int64_t bytes, br_err_t *err);
int64_t br_store_log_lost(br_store_t *s, int64_t job, br_err_t *err);
/* The audit log: one row per admin action. list: [{"id","time" (ms),"who","action",
 * "target" (or null),"result"}] after id `after`, at most limit (0: all). */
int br_store_audit_add(br_store_t *s, int64_t time_ms, int64_t principal, const char *who,
                       const char *action, const char *target, const char *result,
                       br_err_t *err);
json_t *br_store_audit_list(br_store_t *s, int64_t after, int limit, br_err_t *err);
/* The highest job and event ids ever issued (AUTOINCREMENT: never reused). */
int br_store_high_ids(br_store_t *s, int64_t *jobs, int64_t *events, br_err_t *err);
/* Rows changed through this connection since it opened. */
int64_t br_store_changes(br_store_t *s);

/* --- keys: every CURVE public key (Z85, 40 chars) that may talk to us ---------- */
typedef enum {
    BR_PRINCIPAL_UNKNOWN = 0, /* never seen: may only join */
    BR_PRINCIPAL_ADMIN,
    BR_PRINCIPAL_USER,
    BR_PRINCIPAL_NODE,
    BR_PRINCIPAL_REVOKED, /* a removed node's or user's key: refused outright */
    BR_PRINCIPAL_GATEWAY, /* a bramble-gateway: reads the routing table, nothing else */
} br_principal_t;

int br_store_key_add(br_store_t *s, const char *pubkey, br_principal_t kind,
                     const char *name, br_err_t *err);
/* Look up a key. Unknown keys return 0 with *kind = BR_PRINCIPAL_UNKNOWN. name gets
 * the principal's name (node or user name, "admin" for the admin). */
int br_store_key_lookup(br_store_t *s, const char *pubkey, br_principal_t *kind,
                        char *name, size_t namelen, br_err_t *err);
/* The same, and *id (when given) the principal's id: ids are never reused, so a
 * new user under a removed user's name has another id. 0 for unknown keys. */
int br_store_key_who(br_store_t *s, const char *pubkey, br_principal_t *kind, char *name,
                     size_t namelen, int64_t *id, br_err_t *err);
/* Revoke every key of a principal (kind + name): later lookups say REVOKED, and
 * the principal's id is retired (a later key_add under that name gets a new one). */
int br_store_key_revoke(br_store_t *s, br_principal_t kind, const char *name,
                        br_err_t *err);
/* The local account agents run user name's jobs as (NULL: none, the agent's uid
 * rule applies); read back by principal id ("" when none). */
int br_store_unix_user_set(br_store_t *s, const char *name, const char *unix_user,
                           br_err_t *err);
int br_store_unix_user_get(br_store_t *s, int64_t principal, char *buf, size_t len,
                           br_err_t *err);
/* Revoke one key (a rotated one), leaving its principal and other keys alone. */
int br_store_key_revoke_one(br_store_t *s, const char *pubkey, br_err_t *err);
/* The id of the live (not removed) principal kind + name into *id; 0 when none. */
int br_store_principal_id(br_store_t *s, br_principal_t kind, const char *name,
                          int64_t *id, br_err_t *err);
/* Hand a job to another owner (name and principal id). */
int br_store_job_set_owner(br_store_t *s, int64_t job, const char *owner, int64_t owner_id,
                           br_err_t *err);
/* Set (or clear, reason NULL) why a job is where it is: br_store_job_update of
 * "reason" alone, without going through every other column. */
int br_store_job_set_reason(br_store_t *s, int64_t job, const char *reason, br_err_t *err);
/* [{"name","kind":"admin"|"user","created"}] for admin and user keys. */
json_t *br_store_key_list_users(br_store_t *s, br_err_t *err);
/* [{"name","kind":"gateway","created"}] for the gateways' keys. */
json_t *br_store_key_list_gateways(br_store_t *s, br_err_t *err);

/* --- join tokens: only a hash of the secret is stored ------------------------- */
int br_store_token_add(br_store_t *s, const char *id, const char *hash_hex,
                       int64_t created_ms, int64_t expires_ms, int uses_max,
                       const char *join_key, br_err_t *err);
/* How long after its expiry a token's join key still passes the handshake, so that
 * its holder hears why the token is refused instead of a bare handshake failure. */
#define BR_STORE_TOKEN_KEY_GRACE_MS (24LL * 3600 * 1000)
/* 1 when pubkey is the join key of a token that expired less than the grace ago
 * (used up and revoked tokens included: the join itself says why it is refused),
 * 0 when not, -1 on error. */
int br_store_token_join_key_known(br_store_t *s, const char *pubkey, int64_t now_ms,
                                  br_err_t *err);
/* Use a token once. Fails (no use counted) with errnum EACCES and text exactly one
 * of "token expired", "token used up", "token revoked", "token not recognised". On
 * success *id (17 bytes) gets the token id. */
int br_store_token_use(br_store_t *s, const char *hash_hex, int64_t now_ms, char *id,
                       br_err_t *err);
/* [{"id","created","expires" (null: never),"uses","uses_max","revoked":bool,
 * "kind":"join"|"metrics"}] newest first. */
json_t *br_store_token_list(br_store_t *s, br_err_t *err);
/* ENOENT "no token 'x'" when unknown. Revokes join and metrics tokens alike. */
int br_store_token_revoke(br_store_t *s, const char *id, br_err_t *err);
/* Metrics tokens (kind "metrics" in the list above): the bearer tokens of the HTTP
 * side's /metrics. Never used up; expires_ms 0: never expires. Join tokens and
 * metrics tokens never stand in for each other. */
int br_store_token_add_metrics(br_store_t *s, const char *id, const char *hash_hex,
                               int64_t created_ms, int64_t expires_ms, br_err_t *err);
/* [{"id","hash","expires" (ms, 0: never),"revoked":bool}] of every metrics token. */
json_t *br_store_token_list_metrics(br_store_t *s, br_err_t *err);

/* --- nodes ------------------------------------------------------------------- */
/* Upsert a node by name. node is an object with at least "name", "pubkey",
 * "state"; it is stored whole (as JSON) and given back whole by the list. */
int br_store_node_save(br_store_t *s, const json_t *node, br_err_t *err);
int br_store_node_delete(br_store_t *s, const char *name, br_err_t *err);
/* Every node object saved, ordered by name. */
json_t *br_store_node_list(br_store_t *s, br_err_t *err);

/* --- jobs -------------------------------------------------------------------- */
/* Insert a job. job is an object with "name", "kind", "state", "owner",
 * "spec" (object), "spec_yaml" (string), "submitted" (ms), and optional fields
 * below, "owner_id", and "array_of" and "array_index" (a task of a job array: the
 * array's id and the task's index). Returns the new id (>0) or -1. */
int64_t br_store_job_add(br_store_t *s, const json_t *job, br_err_t *err);
/* Update some fields of a job: any of "state", "attempt", "nodes" (array),
 * "assign" (any JSON), "started", "ended", "exit_code", "signal", "reason", and
 * the job core's bookkeeping (coordinator/core/job.h): "restarts", "not_before",
 * "fresh_after", "lost_at", "exclude" (an array of node names), "placement",
 * "service", "replica", "replicas"; null clears. Other keys are an error
 * (EINVAL). ENOENT when no such job. */
int br_store_job_update(br_store_t *s, int64_t id, const json_t *fields, br_err_t *err);
/* One job: {"id","name","kind","state","attempt","owner","nodes":[...],"assign",
 * "submitted","started","ended" (ms or null),"exit_code","signal","reason",
 * "spec","owner_id","log_bytes","log_dropped", the bookkeeping above (null when
 * unset, restarts 0), "array_of", "array_index" (null: not in an array),
 * "spec_yaml"}. NULL with ENOENT when none. */
json_t *br_store_job_get(br_store_t *s, int64_t id, br_err_t *err);
/* Jobs ordered by id. states: NULL for all, else a NULL-terminated list of states
 * to include (e.g. {"pending","starting","running",NULL}). The objects are as
 * br_store_job_get gives them, without "spec_yaml". limit 0 = no limit (the newest
 * limit jobs when set, still in id order). */
json_t *br_store_job_list(br_store_t *s, const char *const *states, int limit,
                          br_err_t *err);
/* The current jobs (pending, starting, running) and those that ended at or after
 * ended_since_ms, ordered by id: the newest limit of them (0: all). */
json_t *br_store_job_list_recent(br_store_t *s, int64_t ended_since_ms, int limit,
                                 br_err_t *err);
/* Make job id a task of array array_of with this index (the array's first task,
 * whose id the array takes, is stored before it knows it). */
int br_store_job_set_array(br_store_t *s, int64_t id, int64_t array_of, int index,
                           br_err_t *err);
/* The id of task index of array array_of; -1 with ENOENT when none. */
int64_t br_store_job_array_task(br_store_t *s, int64_t array_of, int index, br_err_t *err);
/* The schema version this build writes (its count of migrations). */
int br_store_schema_version(void);

/* --- events: every state change, with time, reason and node -------------------- */
/* job_id 0 = no job (a node event); node may be NULL. Returns the event id. */
int64_t br_store_event_add(br_store_t *s, int64_t time_ms, int64_t job_id,
                           const char *node, const char *state, const char *reason,
                           br_err_t *err);
/* 1 if job_id has an event with exactly this reason, else 0 (-1 error): a report an
 * agent resent is not recorded twice. */
int br_store_event_seen(br_store_t *s, int64_t job_id, const char *reason,
                        br_err_t *err);
/* Events with id > after, oldest first, at most limit (0 = all). job_id 0 = all
 * jobs. Each {"id","time" (ms),"job" (id or null),"node" (or null),"state",
 * "reason"}. */
json_t *br_store_event_list(br_store_t *s, int64_t job_id, int64_t after, int limit,
                            br_err_t *err);

/* --- logs: stdout/stderr chunks shipped by agents, kept after the node is gone - */
/* stream 1 = stdout, 2 = stderr. A chunk already stored (same job, attempt, rank,
 * stream, seq) is ignored, so agents may resend. */
int br_store_log_add(br_store_t *s, int64_t job_id, int attempt, int rank, int stream,
                     int64_t seq, int64_t time_ms, const void *data, size_t len,
                     br_err_t *err);
/* Keep at most max_bytes of the job's output (0: no limit): when over, the oldest
 * chunks are deleted down to 7/8 of it and counted in the job's log_dropped. The
 * bytes dropped now, or -1. */
int64_t br_store_log_cap(br_store_t *s, int64_t job_id, int64_t max_bytes, br_err_t *err);
/* Delete up to max_rows chunks of jobs that ended before ended_before_ms. The
 * number deleted, or -1. */
int64_t br_store_log_expire(br_store_t *s, int64_t ended_before_ms, int max_rows,
                            br_err_t *err);
/* Read chunks of a job with cursor > after, oldest first, at most max_bytes in all
 * (but at least one chunk, however big). rank < 0 = every rank. Calls fn for each chunk; *next gets
 * the cursor of the last chunk given (unchanged when none). */
typedef void (*br_log_chunk_fn)(void *arg, int attempt, int rank, int stream,
                                const void *data, size_t len);
int br_store_log_read(br_store_t *s, int64_t job_id, int rank, int64_t after,
                      size_t max_bytes, br_log_chunk_fn fn, void *arg, int64_t *next,
                      br_err_t *err);

/* --- checkpoints: complete checkpoints reported by current attempts ---------- */
/* Record a checkpoint with its manifest (an object as agent/manifest.h builds it,
 * checked by the caller; NULL: none). One already stored (same job, attempt, path)
 * is ignored and returns 0, so agents may resend. ENOENT "no job N" for an unknown
 * job; EINVAL for job id < 1, attempt < 1, node not 1..256 bytes, path not 1..4096
 * bytes, step < 0, size < 0 or a manifest that is not an object; EFBIG for a
 * manifest over 4 MiB of JSON. */
/* A checkpoint of a job other than not_job that lies in dir (dir itself or below;
 * no trailing '/'): 1 with its job and path (the newest of the lowest such job),
 * 0 when there is none, -1 on error. */
int br_store_checkpoint_under(br_store_t *s, const char *dir, int64_t not_job, int64_t *job,
                              char *path, size_t len, br_err_t *err);
int br_store_checkpoint_add(br_store_t *s, int64_t job_id, int attempt,
                            const char *node, const char *path, int64_t step,
                            int64_t size, int64_t time_ms, const json_t *manifest,
                            br_err_t *err);
/* A job's checkpoints, [{"path","step","attempt","node","size","time" (ms),
 * "manifest"}], ordered by step, then by id (the order they were recorded).
 * "manifest" is the summary {"hash", "files", "bytes", "listed" (entries stored),
 * "truncated" (listed < files)}, or null for a checkpoint reported without one. */
json_t *br_store_checkpoint_list(br_store_t *s, int64_t job_id, br_err_t *err);
/* The newest checkpoint of a job: the one with the highest step (ties: the last
 * recorded), shaped as in the list; json_null() when it has none. NULL on error. */
json_t *br_store_checkpoint_latest(br_store_t *s, int64_t job_id, br_err_t *err);
/* The whole manifest (as the agent sent it) of job's newest checkpoint with that
 * manifest hash; NULL with ENOENT when there is none (or it has no manifest). */
json_t *br_store_checkpoint_manifest(br_store_t *s, int64_t job_id, const char *hash,
                                     br_err_t *err);

/* --- replicas: verified copies of checkpoints on other nodes (replicas.c) ------ */
/* node holds a verified copy of job's checkpoint hash (step, its path where it was
 * written, bytes); again: only the time changes. ENOENT for an unknown job. */
int br_store_replica_add(br_store_t *s, int64_t job_id, const char *hash, const char *node,
                         int64_t step, const char *path, int64_t bytes, int64_t time_ms,
                         br_err_t *err);
/* Forget job's replicas of hash (NULL: every checkpoint) on node (NULL: anywhere). */
int br_store_replica_del(br_store_t *s, int64_t job_id, const char *hash, const char *node,
                         br_err_t *err);
/* [{"hash","node","step","path","bytes","time" (ms)}], newest step first. */
json_t *br_store_replica_list(br_store_t *s, int64_t job_id, br_err_t *err);
/* Up to limit replicas (as in the list, with "job") of jobs that ended before
 * ended_before_ms, of job_id only unless it is 0; by job, newest step first. */
json_t *br_store_replica_expired(br_store_t *s, int64_t ended_before_ms, int64_t job_id,
                                 int limit, br_err_t *err);

/* What a user used in one hour (hour: wall ms / 3,600,000), added to what the
 * hour holds already: GPU and CPU milliseconds held, cost in millionths. */
int br_store_usage_add(br_store_t *s, int64_t principal, int64_t hour, int64_t gpu_ms,
                       int64_t cpu_ms, int64_t cost_micros, br_err_t *err);
/* Every hour's use from hour on: [{"principal","name","hour","gpu_ms","cpu_ms",
 * "cost_micros"}], by principal then hour. */
json_t *br_store_usage_since(br_store_t *s, int64_t hour, br_err_t *err);
/* What a gateway answered for a user (principal; 0: without a key) and model in
 * one hour, added to what the hour holds: u = {requests, errors, prompt_tokens,
 * completion_tokens, ms}. */
int br_store_model_usage_add(br_store_t *s, int64_t principal, const char *model,
                             int64_t hour, const int64_t u[5], br_err_t *err);
/* The gateways' answers from hour on, per user and model: [{"user" ("" without a
 * key), "model", "requests", "errors", "prompt_tokens", "completion_tokens",
 * "ms"}], by model then user; principal >= 0: that user's only. */
json_t *br_store_model_usage_since(br_store_t *s, int64_t hour, int64_t principal,
                                   br_err_t *err);
/* A user's (or the admin's) limits and share, as usage.h reads them; NULL or {}:
 * none. ENOENT when there is no such principal. */
int br_store_limits_set(br_store_t *s, br_principal_t kind, const char *name,
                        const json_t *limits, br_err_t *err);
/* The admin and the users, not removed: [{"id","kind","name","limits"}], by id. */
json_t *br_store_sharers(br_store_t *s, br_err_t *err);
/* For /metrics: the checkpoints counted and their bytes, the replicas held and
 * theirs (totals[0..3]). */
int br_store_totals(br_store_t *s, int64_t totals[4], br_err_t *err);
/* What each user used, ever: [{"name","gpu_ms","cpu_ms","cost_micros"}], by name. */
json_t *br_store_usage_totals(br_store_t *s, br_err_t *err);

/* --- the gateway's API keys (store_apikeys.c) --------------------------------- */
/* A key of principal's: id (its hash's first 12 hex digits), hash (hex BLAKE2b-256
 * of its text), a name unique among that principal's live keys (EEXIST when taken),
 * models (an array of names; [] every one). */
int br_store_apikey_add(br_store_t *s, int64_t principal, const char *id, const char *hash,
                        const char *name, const json_t *models, int64_t now_ms,
                        br_err_t *err);
/* Live keys, principal's (0: everyone's): [{"id","name","user","user_id","models",
 * "created" (ms)}], by user then age. */
json_t *br_store_apikey_list(br_store_t *s, int64_t principal, br_err_t *err);
/* Revoke principal's key by id or name (principal 0: anyone's, by id only):
 * {"id","name"} of the key revoked, or NULL with ENOENT "no key 'x'". */
json_t *br_store_apikey_revoke(br_store_t *s, int64_t principal, const char *id_or_name,
                               br_err_t *err);
/* Every live key of a live user, as the gateways need them: [{"hash","user_id",
 * "user","models"}], by hash. */
json_t *br_store_apikey_live(br_store_t *s, br_err_t *err);

/* --- data sets and what refers to the content store (store_data.c) ---------------- */
/* A new version of owner's data set name, of the manifest summarised by mhash,
 * files and bytes; tag NULL: "vN" for its version N. Every content the manifest
 * names (entries with a hash) is referenced as "data:ID" for owner, and so is
 * listing ({"hash", "size"}: the manifest's text, which nodes read; may be NULL). shares: the
 * user names that may use it (an array). The new row (br_store_data_list's form),
 * or NULL with err (EEXIST: that tag exists). */
json_t *br_store_data_add(br_store_t *s, int64_t owner, const char *name, const char *tag,
                          const json_t *manifest, const json_t *listing, int public_,
                          const json_t *shares, br_err_t *err);
/* Every version of every data set: [{"id", "owner", "owner_id", "name", "tag",
 * "version", "manifest", "files", "bytes", "created", "public", "shares", "listing"}], by owner,
 * name and version. */
json_t *br_store_data_list(br_store_t *s, br_err_t *err);
/* Remove data set version id and its references; *hashes (may be NULL) gets the
 * contents it referred to (a new array), which may now be unreferenced. */
int br_store_data_remove(br_store_t *s, int64_t id, json_t **hashes, br_err_t *err);
/* How many data set versions name the manifest mhash (-1 with err). */
/* Drop every reference ref makes; *hashes (may be NULL) gets what it referred to
 * (a new array), for the content store to look at. */
int br_store_content_unref(br_store_t *s, const char *ref, json_t **hashes, br_err_t *err);
/* The "code:MANIFEST" references of trees no job needs any more: no job that names
 * that code is active or ended at or after before_ms (wall ms). A new array of at
 * most max refs. */
json_t *br_store_code_unneeded(br_store_t *s, int64_t before_ms, int max, br_err_t *err);
/* What attempt `attempt` of job left on node: its outputs' manifest (whole) and
 * listing ({"hash", "size"}), referred to for owner; a report made again replaces
 * the one before. */
int br_store_output_add(br_store_t *s, int64_t job, int attempt, const char *node,
                        const json_t *manifest, const json_t *listing, int64_t owner,
                        br_err_t *err);
/* The references ("out:JOB:ATTEMPT:NODE") of the outputs of jobs that ended before
 * before_ms (wall ms) or are purged: a new array of at most max. */
json_t *br_store_outputs_unneeded(br_store_t *s, int64_t before_ms, int max, br_err_t *err);
/* Drop an attempt's outputs (ref as br_store_outputs_unneeded names them) and what
 * they refer to; *hashes (may be NULL) gets those contents (a new array). */
int br_store_output_remove(br_store_t *s, const char *ref, json_t **hashes, br_err_t *err);
/* The job's outputs, by attempt and node: [{"attempt", "node", "manifest",
 * "listing", "listing_size", "files", "bytes", "time" (ms)}]. */
json_t *br_store_output_list(br_store_t *s, int64_t job, br_err_t *err);
/* 1 when an output of job refers to the content hash (or is its listing). */
int br_store_output_has(br_store_t *s, int64_t job, const char *hash, br_err_t *err);
int br_store_data_manifest_used(br_store_t *s, const char *mhash, br_err_t *err);
/* --- images loaded without a registry (store_images.c) ------------------------------ */
/* A new image: img {"name", "arch", "variant", "os", "format", "image_id", "layers"}
 * (as checked by ociarchive.h), loaded by owner as the one-file tree manifest (its
 * contents referred to as "image:ID", and its listing {"hash", "size"}). The new
 * row (br_store_image_list's form), or NULL with err (EEXIST: that name has an
 * image of that architecture). */
json_t *br_store_image_add(br_store_t *s, int64_t owner, const json_t *img,
                           const json_t *manifest, const json_t *listing, br_err_t *err);
/* Every image: [{"id", "name", "arch", "variant", "os", "format", "image_id",
 * "layers", "owner", "owner_id", "manifest", "listing", "files", "bytes",
 * "created"}], by name, arch and variant. */
json_t *br_store_image_list(br_store_t *s, br_err_t *err);
/* Remove image id and its references; *hashes (may be NULL) gets the contents it
 * referred to (a new array). */
int br_store_image_remove(br_store_t *s, int64_t id, json_t **hashes, br_err_t *err);
/* How many references the content hash has (-1 with err). */
int br_store_content_refs(br_store_t *s, const char *hash, br_err_t *err);
/* ref (e.g. "data:ID", "code:MANIFEST") refers to the content hash of size bytes,
 * held by principal (for the quotas); once is enough. */
int br_store_content_ref(br_store_t *s, const char *ref, const char *hash, int64_t size,
                         int64_t principal, br_err_t *err);
/* ... to every content a manifest's entries name. */
int br_store_content_ref_tree(br_store_t *s, const char *ref, const json_t *manifest,
                              int64_t principal, br_err_t *err);
/* 1 when ref refers to hash, 0 when not. */
int br_store_content_ref_has(br_store_t *s, const char *ref, const char *hash,
                             br_err_t *err);
/* Whether principal refers to hash already (-1 with err). */
int br_store_content_user_has(br_store_t *s, int64_t principal, const char *hash,
                              br_err_t *err);
/* Bytes of the distinct contents principal refers to (-1 with err). */
int64_t br_store_content_user_bytes(br_store_t *s, int64_t principal, br_err_t *err);

/* --- figures for the metrics (coordinator/core/stats.c) ----------------------------- */
/* [{"state","owner","count","log_dropped" (bytes a cap dropped)}], one per state
 * and owner that has jobs. */
json_t *br_store_job_counts(br_store_t *s, br_err_t *err);
/* Bytes of output that agents had to drop, over every job (-1 on error). */
int64_t br_store_log_lost_all(br_store_t *s, br_err_t *err);
/* Bytes the store takes on disk: its file and its write-ahead log (-1 on error). */
int64_t br_store_size(br_store_t *s, br_err_t *err);

#endif
