/* pull.h - one pull of a checkpoint from the node that has it (holder.h): one
 * mechanism for a replica (a node pulls a checkpoint from its writer into its
 * replica store) and for a restore (the node that resumes a job pulls it from a
 * holder into the checkpoint's own path). Given a holder (endpoint, key, grant) and
 * a manifest, it builds the checkpoint in a hidden staging directory next to its
 * destination and renames it into place only once every file is there and
 * verified, so nothing partial is ever visible. A file is not fetched when its
 * bytes are at hand: already in the staging directory, in the destination's old
 * copy with the same hash, or in the replica store (by hash: linked into the store,
 * copied elsewhere). Fetched files go to a temporary file named by their hash, which
 * a dropped link or a later pull resumes from its length; each is hashed as it
 * arrives, fsynced, compared with the manifest and renamed into place. A full disk
 * (ENOSPC, EDQUOT, EFBIG) removes everything the pull wrote. puller.h runs pulls on
 * a thread of their own. */
#ifndef BRAMBLE_PULL_H
#define BRAMBLE_PULL_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* A link with no ZMTP heartbeat back for this long is dropped (and taken up again),
 * and so is a live one with no answer for 12 times as long. */
#define BR_PULL_STALL_MS 10000
#define BR_PULL_RETRIES 5 /* reconnects in a row without progress, then give up */
#define BR_PULL_HASH_DIR ".by-hash" /* in the replica store: files by their hash */
#define BR_PULL_SEAL_DIR ".by-hash-seals" /* ... and the seal of each when it was last
                                            * verified: one unchanged since is not
                                            * hashed again when a new tree takes it */

/* Bytes in store's BR_PULL_HASH_DIR, each file once; forget: first remove the files
 * nothing else links any more (a link count of 1: only the index holds them), with
 * their seals, in the same pass. The node's cache and its replica store both count
 * and trim their index by it. */
int64_t br_pull_index_used(const char *store, int forget);
/* Remove store's index entry hex (a file found damaged) and its seal. */
void br_pull_index_drop(const char *store, const char *hex);

typedef struct {
    const char *endpoint;                /* the holder: tcp://host:port */
    const char *server_key;              /* its node key (Z85) */
    const char *public_key, *secret_key; /* this node's key pair (Z85) */
    const char *peer_name;               /* the holder's node name, for the log */
    const char *grant;                   /* the grant the holder was given for us */
    const json_t *manifest; /* what to build (br_manifest_verify'd here); a truncated
                               one (listing.h): its whole listing is fetched first */
    const char *listings;   /* where this node keeps whole listings (listing.h): a
                               fetched one is kept there, as the agent */
    const char *dest;  /* the checkpoint to create: a directory or one file */
    const char *spare; /* a tree: also build a copy of it here, each file copied (in
                          the kernel) as soon as it is in place, to be a working dir
                          at once (cache.h); made afresh as SPARE.part and renamed to
                          SPARE once whole; the agent's, 0700. Should it fail, only
                          the spare is lost. NULL: none */
    const char *store; /* the replica store to take files from, or NULL */
    int in_store;      /* dest is in the store: link files, index them by hash */
    int as_user;       /* write as uid/gid (fsid.h); 0: as the agent */
    uid_t uid;
    gid_t gid;
    int64_t limit;    /* bytes it may write (a quota), -1: no limit */
    const char *quota_name; /* that quota, for the error (NULL: the replica quota) */
    int64_t stall_ms; /* 0: BR_PULL_STALL_MS */
    int urgent;       /* br_puller_submit: before the pulls waiting (a restore:
                         a job waits for it) */
    int64_t group, order; /* br_puller_submit: a pull that is not urgent supersedes
                             those of its group (> 0) waiting with a lower order (a
                             replica: the job, and its checkpoint's step) */
    json_t *tag;      /* handed back with the result (a reference is taken) */
    _Atomic long long *progress; /* NULL, or bytes done so far (received, or found
                                    here by hash), added to as the pull goes */
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

#endif
