/* api.h - the coordinator's request handlers (proto/PROTOCOL.md sections 4-7). Each
 * decodes its body strictly, checks, acts inside the wake's transaction and answers
 * through br_coord_post. Who may call what is in the table in api.c. */
#ifndef BRAMBLE_API_H
#define BRAMBLE_API_H

#include "coord.h"
#include "dashboard.h"
#include "store.h"

typedef void (*br_handler_fn)(br_coord_t *c, br_msg_t *m, const br_caller_t *who);

/* Handle one request or event; who it came from in *who (the audit log's too). */
void br_api_dispatch(br_coord_t *c, br_msg_t *m, br_caller_t *who);

/* The message type of handler i, in table order; NULL past the last. */
const char *br_api_type(size_t i);

/* api_agent.c */
void br_api_node_join(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_hello(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_heartbeat(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_started(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* job.fetched: a gang's rank has its trees in its node's cache (jobs.h) */
void br_api_job_fetched(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_exited(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_log(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_checkpoint(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* A checkpoint manifest as PROTOCOL.md describes it (hash, root, files, bytes,
 * entries with relative paths): 0, or -1 with EPROTO and err saying what is wrong. */
int br_api_check_manifest(const json_t *manifest, br_err_t *err);

/* api_ckpt.c: checkpoints' copies (replicas.h, replkeep.h, ckptpull.h) */
/* ckpt.stored (N): how a pull a node was ordered went */
void br_api_ckpt_stored(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* job.purge: an ended job's replicas dropped now */
void br_api_job_purge(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* checkpoint.open, checkpoint.read, checkpoint.close: a checkpoint pulled to a
 * user's machine */
void br_api_checkpoint_open(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_checkpoint_read(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_checkpoint_close(br_coord_t *c, br_msg_t *m, const br_caller_t *who);

/* api_cli.c */
void br_api_ping(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_token_create(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_token_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_token_revoke(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_show(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_drain(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_undrain(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_remove(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_probe(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_submit(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_show(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_queue(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_cancel(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_job_logs(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_event_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_event_watch(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_user_add(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_user_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_user_remove(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_audit_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_user_rotate_key(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_user_set(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_usage(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_rotate_key(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_env_rm(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_node_key(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_service_endpoints(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* A new principal's public key (user.add, gateway.add): 0 when it is a key and
 * nobody's yet, else -1 with EINVAL or EEXIST. (api_cli.c) */
int br_api_key_unused(br_coord_t *c, const char *key, br_err_t *err);
/* api_gateway.c */
void br_api_gateway_add(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_gateway_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_gateway_remove(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_gateway_watch(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_gateway_report(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_gateway_suspect(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_gateway_load(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_service_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* api_stream.c */
void br_api_stream_open(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_service_scale(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* api_keys.c: the gateway's API keys */
void br_api_key_create(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_key_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_key_revoke(br_coord_t *c, br_msg_t *m, const br_caller_t *who);

/* api_data.c: uploads into the content store, and data sets */
void br_api_content_lack(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_content_put(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* A node's heartbeat says how far its pull of a job's tree is (its "pulling": its
 * code, a data set, its image's archive), kept with the job while it starts
 * (treefetch.h); job.show's transfers of kinds "code", "data" and "image". */
void br_api_code_progress(br_coord_t *c, br_node_t *n, const json_t *pulling);
json_t *br_api_code_transfers(br_coord_t *c, int64_t id);
/* Let go of the code trees no job needs any more (none that names one is active or
 * ended at or after before_ms: the ended jobs' retention), and of the outputs of
 * jobs that ended before before_ms or were purged. */
void br_api_code_expire(br_coord_t *c, int64_t before_ms);
/* content.read from a user: a chunk of a content of a job's outputs that the caller
 * may see (bramble outputs) */
void br_api_content_read_user(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* job.outputs from a node: what an attempt left there, uploaded (api_agent.c) */
void br_api_job_outputs(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* ckpt.read from a node: a chunk of a content of the code of a job it runs
 * (PROTOCOL.md sections 5 and 11) */
void br_api_content_read(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* The whole manifest of an uploaded tree a request names by its listing and
 * summary (section 12), checked: within who's --user-store-quota, every file
 * stored, and for a user as sender every file one they sent or refer to already
 * (knowing a hash grants nothing). A new reference, or NULL with err. */
json_t *br_api_uploaded_tree(br_coord_t *c, const br_caller_t *who,
                             const br_caller_t *sender, const json_t *listing,
                             const json_t *summary, br_err_t *err);
/* {hash: true} of the files of the tree a stored listing names (and the listing's
 * own), or NULL with err. */
json_t *br_api_tree_files(br_coord_t *c, const br_caller_t *who, const json_t *listing,
                          const json_t *summary, br_err_t *err);
/* code.stage (U): the node a job would go to now fetches its code while it is
 * uploaded (stages.h). */
void br_api_code_stage(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* job.submit's code ({"listing", "manifest", "dir"}): the tree checked, kept by
 * the references "code:MANIFEST" (its files and listing), and named in spec_json's
 * "code" as {"dir", "hash", "files", "bytes", "listing"}. 0, or -1 with err. */
int br_api_code_keep(br_coord_t *c, const br_caller_t *who, const json_t *code,
                     json_t *spec_json, br_err_t *err);
/* job.submit's data sets (spec_json's "data": {"[OWNER/]NAME[:TAG]": "/path"}), each
 * the version the caller may use that the tag names, else the newest, fixed for
 * every attempt: its value becomes {"path", "set" ("OWNER/NAME:TAG"), "id", "hash",
 * "files", "bytes", "listing"}. 0, or -1 with err naming the one not found. */
int br_api_data_resolve(br_coord_t *c, const br_caller_t *who, json_t *spec_json,
                        br_err_t *err);
void br_api_data_push(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_data_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_data_show(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_data_rm(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* The answer to a read: {"offset"} and up to BR_CONTENT_CHUNK bytes of the content
 * hash from offset. */
void br_api_reply_chunk(br_coord_t *c, br_msg_t *m, const char *hash, int64_t offset);
/* The contents of tree full (and its listing) are referenced by the caller's job,
 * data set or image now: no longer charged as uploads. */
void br_api_settle_tree(br_coord_t *c, const br_caller_t *who, const json_t *full,
                        const json_t *listing);

/* api_image.c: images loaded without a registry (docs/containers.md) */
void br_api_image_load(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_image_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
void br_api_image_rm(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* job.submit's image: when a loaded image has the name spec_json's "image" gives,
 * spec_json gets "image_archive": {"name", "variants": [{"id", "arch", "variant",
 * "image_id", "hash", "files", "bytes", "listing"}]}: its nodes fetch the archive
 * (of their architecture) and load it; else podman pulls the name. 0, or -1. */
int br_api_image_resolve(br_coord_t *c, json_t *spec_json, br_err_t *err);

/* api_dash.c: the dashboard (dashboard.h) */
void br_api_dashboard_login(br_coord_t *c, br_msg_t *m, const br_caller_t *who);
/* A dashboard request as a message of its session's key (takes r's body); NULL
 * when out of memory. */
br_msg_t *br_dash_msg(br_dash_req_t *r);
/* When m goes to the dashboard (its route is one of the dashboard's): hand it
 * over and return 1; else 0 (send it on the socket). */
int br_dash_catch(br_coord_t *c, const br_msg_t *m);
/* Whether m, read from the socket, has a routing id of the dashboard's form (a
 * peer may choose its own, zero byte first or not): such a message is dropped
 * unanswered (logged), or its answer would reach the dashboard. */
int br_dash_posed(const br_msg_t *m);
/* After a wake, at most once a second: every GPU's live figures into the
 * dashboard's last hour (its sparklines). */
void br_dash_loop_sample(br_coord_t *c);

#endif
