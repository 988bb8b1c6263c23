/* replicas.h - the coordinator's side of checkpoint replicas (docs/checkpoints.md,
 * "Replicas"): what agents say about them (the port a node serves checkpoint files
 * on, in node.hello; its free disk and replica quota, in node.heartbeat; a finished
 * pull, in ckpt.stored), the orders that grant a pull and start it (ckpt.serve to
 * the node that has the files, ckpt.fetch to the one that wants them), and the
 * choice of the nodes that hold a job's replicas.
 *
 * The replicas module (br_replicas_t, registered by br_replicas_init) runs them
 * from job life's hooks: a counted checkpoint (BR_HOOK_CHECKPOINT) is pulled by
 * checkpoint.replicas other nodes; a verified pull (ckpt.stored) is recorded in
 * the store's replicas table and the job's replicas beyond checkpoint.keep are
 * dropped; and an attempt that resumes on a node other than the writer's
 * (BR_HOOK_RESUMING) waits until the checkpoint was restored there from the
 * nearest holder and verified, falling back to an older checkpoint when no copy
 * of the newest is good. A replica's pull that failed is ordered again, a few
 * times at most: on another node when its target had no room or went away, else
 * from another node that has the checkpoint. Its pulls in flight live in its own
 * context, not in the store: a coordinator that restarts orders a restore again,
 * and copies the running jobs' newest checkpoints that lack copies once the nodes
 * are back. Replicas of ended jobs are dropped by replkeep.h. */
#ifndef BRAMBLE_REPLICAS_H
#define BRAMBLE_REPLICAS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "coord.h"
#include "err.h"
#include "nodes.h"

#define BR_REPLICAS_GRANT_TTL_MS (15 * 60 * 1000) /* a grant lapses after this */
#define BR_REPLICAS_MAX 16                        /* checkpoint.replicas at most */
#define BR_REPLICAS_TRIES 3 /* pulls of one copy at most (the first and 2 more) */

/* node.hello's replica_port (0: none) into n's info. */
void br_replicas_hello(br_node_t *n, int port);

/* Check node.heartbeat's "disk": {"replicas": {"quota": int >= -1, "used": int >= 0,
 * "free"?: int >= 0}, "checkpoints": [{"dir": absolute path, "free": int >= 0}...]
 * (at most 64)}, nothing else; else -1 with EPROTO and words naming 'disk' (the
 * agent then sends heartbeats without it, as to a coordinator from before). */
int br_replicas_check_disk(json_t *disk, br_err_t *err);

/* A node that could hold a replica, as the caller saw it. */
typedef struct {
    const char *node;
    int ready;     /* connected, not draining */
    int port;      /* where it serves (0: it does not) */
    int64_t quota; /* its replica quota: -1 none, 0 opted out */
    int64_t used;  /* bytes of replicas it holds */
    int64_t free;  /* free bytes in its store (-1: not known) */
    double mbps;   /* measured bandwidth from the writer, MB/s (0: not measured) */
    double rtt_ms; /* round trip from the writer (< 0: not measured) */
} br_replica_cand_t;

/* Up to n targets for a checkpoint of bytes written on writer: ready nodes other
 * than the writer that serve, have not opted out, and have room for it (within
 * their quota and free disk), the highest measured bandwidth first, then the
 * shortest round trip, then the most room, then by name. Their indexes into c in
 * out; the count. */
int br_replicas_pick(const br_replica_cand_t *c, int nc, const char *writer,
                     int64_t bytes, int n, int *out);

/* The grant's name for a pull of checkpoint hash (its manifest's) of job by node
 * target: "JOB.HASH16.TARGET". */
void br_replicas_grant_id(int64_t job, const char *hash, const char *target, char *buf,
                          size_t len);

/* What a pull is about: the checkpoint and whose it is. */
typedef struct {
    int64_t job, step;
    const json_t *manifest; /* as stored with the checkpoint */
    const char *path;       /* its path on the node that wrote it */
    const char *dir;        /* the job's checkpoint dir, or NULL */
    int64_t owner_id;       /* whose job (< 1: not known) */
    const char *unix_user;  /* the owner's mapped account, or NULL */
} br_replica_ckpt_t;

/* ckpt.serve for holder: let peer (its key) pull k for ttl_ms; from_store: the
 * holder's copy is a replica in its store, not the checkpoint the job wrote. */
json_t *br_replicas_serve_order(const br_replica_ckpt_t *k, const char *grant,
                                const char *peer, const char *peer_key, int64_t ttl_ms,
                                int from_store);
/* ckpt.fetch for the puller: pull k from the holder (name, address, port, key) into
 * its store, or (restore) into k's own path. */
json_t *br_replicas_fetch_order(const br_replica_ckpt_t *k, const char *grant,
                                const char *holder, const char *addr, int port,
                                const char *key, int restore);

/* --- the module ----------------------------------------------------------------- */

struct br_coord;
typedef struct br_replicas br_replicas_t;

br_replicas_t *br_replicas_new(void);
void br_replicas_destroy(br_replicas_t **r);
/* Register the module's hooks on c (c->replicas must be set). 0, or -1. */
int br_replicas_init(struct br_coord *c);

/* How many replicas job's spec asks for: checkpoint.replicas, or (not given) 1
 * when the cluster has two or more nodes; 0 without a checkpoint section. */
int br_replicas_wanted(const json_t *spec, int cluster_nodes);
/* checkpoint.keep (2 when not given). */
int br_replicas_keep(const json_t *spec);

/* The node a client that is no node (the coordinator itself, for a user's pull)
 * reads job's checkpoint hash (written on writer) from: the writer when it is
 * connected and serves, else a connected node with a verified replica;
 * *from_store: a replica. NULL: none. */
br_node_t *br_replicas_source(struct br_coord *c, int64_t job, const char *hash,
                              const char *writer, int *from_store);
/* ckpt.serve to holder: let peer_key (named peer in its log) read job's checkpoint
 * (step, path where it was written, whole manifest; from_store: holder's replica)
 * under grant for ttl_ms; 0 withdraws the grant. */
void br_replicas_lend(struct br_coord *c, br_node_t *holder, int from_store, int64_t job,
                      int64_t step, const char *path, const json_t *manifest,
                      const char *grant, const char *peer, const char *peer_key,
                      int64_t ttl_ms);

/* ckpt.serve with ttl 0 to holder (NULL, or not connected: nothing): the grant
 * named grant, of job's checkpoint at path, is withdrawn. */
void br_replicas_withdraw(struct br_coord *c, br_node_t *holder, int64_t job,
                          const char *grant, const char *path);

/* Drop job's replica row (br_store_replica_list's: "hash", "node", "path", "step"):
 * its node is told (ckpt.drop) when connected, else the row is only forgotten;
 * the row leaves the store and an event of the job says why. 1 when the node was
 * told, 0 when not. */
int br_replicas_drop(struct br_coord *c, int64_t job, const json_t *row,
                     const char *why);
/* job was purged: copies of it still under way are dropped as they arrive. */
void br_replicas_purged(struct br_coord *c, int64_t job);

/* node.heartbeat's "pulling": {"job": id, "hash": hex, "restore": bool, "done":
 * bytes >= 0}, nothing else; else -1 with EPROTO and words naming 'pulling' (the
 * agent then sends heartbeats without it). */
int br_replicas_check_pulling(const json_t *p, br_err_t *err);
/* n's heartbeat said how far its pull in progress is (checked): kept with the pull
 * this coordinator ordered, for br_replicas_transfers. */
void br_replicas_progress(struct br_coord *c, br_node_t *n, const json_t *p);
/* The job's checkpoint copies under way: [{"kind": "replica"|"restore", "step",
 * "path", "from", "to", "done", "bytes", "seconds" (since ordered), "rate"? (bytes
 * a second, once a heartbeat said how far it is)}]. */
json_t *br_replicas_transfers(struct br_coord *c, int64_t job);

/* The job's checkpoints (br_store_checkpoint_list's array, changed in place) each
 * with "copies": [{"node", "time"}] of the verified replicas (and the writer's
 * own, as {"node", "writer": true}). */
void br_replicas_annotate(struct br_coord *c, int64_t job, json_t *checkpoints);

/* What a node says of a pull it was ordered (ckpt.stored, PROTOCOL.md section 5). */
typedef struct {
    int64_t job, step;     /* step: -1 when not said */
    const char *hash;      /* the checkpoint's manifest hash */
    const char *path;      /* the checkpoint's path on its writer */
    int restore;           /* a restore into the job's own path, not a replica */
    int64_t received;      /* bytes pulled */
    int64_t deduped;       /* bytes found there already */
    int errnum;            /* when it failed */
    const char *error;     /* why it failed; NULL: it was stored and verified */
} br_replica_stored_t;

/* node says how a pull it was ordered went: a verified replica is recorded (and the
 * job's beyond checkpoint.keep dropped), a failed one ordered again, a restore
 * ended. 0, or -1 with EPERM when this coordinator ordered no such pull to node (a
 * verified replica nobody ordered is then dropped once the copies are repaired). */
int br_replicas_stored(struct br_coord *c, const char *node, const br_replica_stored_t *s,
                       br_err_t *err);

#endif
