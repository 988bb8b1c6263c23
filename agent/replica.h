/* replica.h - this node's part in keeping checkpoints on other nodes: it serves
 * checkpoint files to the peers the coordinator grants (holder.h), pulls the
 * checkpoints it is told to hold into its replica store, or to restore into a
 * job's checkpoint path (puller.h), keeps the store within its quota, and says how
 * much disk the store and the jobs' checkpoint dirs have left. The coordinator's
 * orders are `ckpt.serve`, `ckpt.fetch` and `ckpt.drop`; a finished fetch is
 * reported with `ckpt.stored` (PROTOCOL.md sections 5 and 6). The store:
 *   DIR/<job>/<manifest hash>/<checkpoint's name>   one replica
 *   DIR/.by-hash/<file hash>                         each file once (hard links)
 * and, in the agent's data dir, manifests/ (listing.h).
 */
#ifndef BRAMBLE_REPLICA_H
#define BRAMBLE_REPLICA_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"
#include "msg.h"
#include "settings.h"

#define BR_REPLICA_DISK_MS 10000 /* free disk is looked at this often */

typedef struct br_replica br_replica_t;
struct br_cache;

/* From the agent's settings (kept, not copied: they outlive it): the store, its
 * quota, the send cap, the port, the node's key pair, and its job users. Starts the
 * serving and pulling threads: call it after the keeper's fork. */
br_replica_t *br_replica_new(const br_settings_t *s, br_err_t *err);
void br_replica_destroy(br_replica_t **r);

/* The TCP port that serves checkpoint files, or -1 when this node serves none. */
int br_replica_port(const br_replica_t *r);
/* Readable when a fetch has finished (br_replica_take). */
int br_replica_fd(const br_replica_t *r);

/* Where this node keeps the whole manifests of checkpoints too big for a report
 * (DATA/manifests, listing.h): those it wrote and those it pulled. */
struct br_listings *br_replica_listings(br_replica_t *r);

/* The coordinator's orders: 0, or -1 with err (the words of the error reply).
 * ckpt.serve with "cache": true serves the tree of the manifest's hash from the
 * node's cache (cache.h, read as the agent): a data set another node fetches from
 * this one. */
int br_replica_serve(br_replica_t *r, const br_msg_t *m, struct br_cache *cache,
                     br_err_t *err);
int br_replica_fetch(br_replica_t *r, const br_msg_t *m, br_err_t *err);
int br_replica_drop(br_replica_t *r, const br_msg_t *m, br_err_t *err);

/* Pull a tree the coordinator serves (a job's code: grant "code:JOB", its data sets:
 * "data:JOB", PROTOCOL.md section 11), or from another node that holds it in its
 * cache (from: {"node", "addr", "port", "key", "grant"}; NULL: the coordinator), into
 * dest, its files linked into store's .by-hash, ahead of the replicas' pulls (a job
 * waits for it); job 0: a tree staged while it is uploaded ("stage:ID"), which no
 * job waits for yet, in turn with the replicas' pulls. Its result comes from br_replica_take with "code": true, "job",
 * "attempt", "hash", "path", "from" (the node's name, when it was one). spare: a
 * job's code, also copied as it comes into this working dir to be (pull.h), or NULL. */
int br_replica_pull_tree(br_replica_t *r, int64_t job, int attempt, const json_t *manifest,
                         const char *grant, const json_t *from, const char *dest,
                         const char *spare, const char *store, int64_t limit, br_err_t *err);
/* A job waits for the tree being pulled into dest (one staged, job 0): ahead of the
 * pulls no job waits for. */
void br_replica_hurry_tree(br_replica_t *r, const char *dest);
/* A finished fetch, as the body of its ckpt.stored report (the caller's), or NULL
 * when none has finished. */
json_t *br_replica_take(br_replica_t *r);
/* The pull in progress, for heartbeats: {"job", "hash", "restore", "done" (bytes in
 * place so far)}, or NULL when none runs. */
json_t *br_replica_progress(br_replica_t *r);

/* The heartbeat's "disk": the store's free bytes, use and quota, and the free
 * bytes under each of dirs (the running jobs' checkpoint dirs that exist). They
 * are looked at on a thread of their own (statvfs may hang on a file system that
 * went away), asked for no more than once per BR_REPLICA_DISK_MS and never while
 * a look is under way: a call returns what the last look found, once, else NULL
 * (nothing new to say); the first figures come from the call after the first. */
json_t *br_replica_disk(br_replica_t *r, const char *const *dirs, int n,
                        int64_t now_ms);

#endif
