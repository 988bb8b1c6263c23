/* puller.h - the side of a checkpoint transfer that wants the files: one mechanism
 * for a replica (a node pulls a checkpoint from its writer into its replica store)
 * and for a restore (the node that resumes a job pulls it from a holder into the
 * checkpoint's own path). Given a holder (endpoint, key, grant) and a manifest, it
 * builds the checkpoint in a hidden staging directory next to its destination and
 * renames it into place only once every file is there and verified, so nothing
 * partial is ever visible. A file is not fetched when its bytes are at hand: already
 * in the staging directory, in the destination's old copy with the same hash, or in
 * the replica store (by hash: linked into the store, copied elsewhere). Fetched
 * files go to a temporary file named by their hash, which a dropped link or a later
 * pull resumes from its length; each is hashed as it arrives, fsynced, compared
 * with the manifest and renamed into place. A full disk (ENOSPC, EDQUOT, EFBIG)
 * removes everything the pull wrote. Pulls run one at a time on a thread of their
 * own, with their own ZeroMQ context, so the agent's loop never waits for one. */
#ifndef BRAMBLE_PULLER_H
#define BRAMBLE_PULLER_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

#define BR_PULL_STALL_MS                                                    \
    10000                 /* a link silent this long (no ZMTP heartbeat) is \
                             dropped, and one with no answer for 12 times as long */
#define BR_PULL_RETRIES 5 /* reconnects in a row without progress, then give up */
#define BR_PULL_QUEUE 64  /* pulls waiting at once */
#define BR_PULL_HASH_DIR ".by-hash" /* in the replica store: files by their hash */

typedef struct br_puller br_puller_t;

typedef struct {
    const char *endpoint;                /* the holder: tcp://host:port */
    const char *server_key;              /* its node key (Z85) */
    const char *public_key, *secret_key; /* this node's key pair (Z85) */
    const char *peer_name;               /* the holder's node name, for the log */
    const char *grant;                   /* the grant the holder was given for us */
    const json_t *manifest;              /* what to build (br_manifest_verify'd here) */
    const char *dest;  /* the checkpoint to create: a directory or one file */
    const char *store; /* the replica store to take files from, or NULL */
    int in_store;      /* dest is in the store: link files, index them by hash */
    int as_user;       /* write as uid/gid (fsid.h); 0: as the agent */
    uid_t uid;
    gid_t gid;
    int64_t limit;    /* bytes it may write (a quota), -1: no limit */
    int64_t stall_ms; /* 0: BR_PULL_STALL_MS */
    int urgent;       /* br_puller_submit: before the pulls waiting (a restore:
                         a job waits for it) */
    json_t *tag;      /* handed back with the result (a reference is taken) */
} br_pull_req_t;

/* What pulls have done: bytes that came over the network, bytes that did not have
 * to (found locally by hash), reconnects after a dropped or silent link. */
typedef struct {
    uint64_t bytes_received, bytes_deduped, files_fetched, files_deduped, resumes;
} br_pull_stats_t;

/* One pull here and now, on the calling thread, with zmq context ctx: what the
 * puller's thread does. Stops with ECANCELED when *cancel (may be NULL) becomes
 * non-zero. Adds to *st (may be NULL). The result {"files", "bytes", "received",
 * "deduped", "resumes"}, or NULL with err. */
json_t *br_pull_run(void *ctx, const br_pull_req_t *r, const atomic_int *cancel,
                    br_pull_stats_t *st, br_err_t *err);

/* Start the pulling thread. */
br_puller_t *br_puller_new(br_err_t *err);
/* Stop a pull in progress (within one chunk or one stall check) and drop the rest. */
void br_puller_destroy(br_puller_t **p);

/* Readable (an eventfd) when a result can be taken. */
int br_puller_fd(const br_puller_t *p);
/* Queue a pull (everything in r is copied). -1 with err when BR_PULL_QUEUE wait. */
int br_puller_submit(br_puller_t *p, const br_pull_req_t *r, br_err_t *err);
/* Take one finished pull, oldest first: 1 with *tag and *result (the caller's), or
 * *result NULL and err saying why it failed; 0 when none is finished. */
int br_puller_take(br_puller_t *p, json_t **tag, json_t **result, br_err_t *err);
void br_puller_stats(br_puller_t *p, br_pull_stats_t *st);

#endif
