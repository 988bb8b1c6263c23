/* holder.h - the side of a checkpoint transfer that has the files: a CURVE ROUTER,
 * the node's own key as server key, on a thread of its own with its own ZeroMQ
 * context and ZAP handler. It serves a file of a checkpoint only to the one peer
 * key a grant names, only while the grant lasts, and only files the grant's
 * manifest lists (and the manifest's own whole listing, listing.h), in chunks of at most BR_XFER_CHUNK bytes, one per request
 * (`ckpt.read`, PROTOCOL.md section 11), so the puller's requests in flight are
 * its credit. What it sends is capped by a token bucket. Files are opened as the
 * job's user (fsid.h), beneath the checkpoint, never through a symlink. The puller
 * is pull.h. */
#ifndef BRAMBLE_HOLDER_H
#define BRAMBLE_HOLDER_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "msg.h"

#define BR_HOLDER_QUEUE 256        /* requests waiting for the bandwidth cap */
#define BR_HOLDER_GRANTS 1024      /* grants held at once */
#define BR_REPLICA_PORT 7704       /* the default TCP port it listens on */

typedef struct br_holder br_holder_t;

/* Leave to serve one checkpoint to one peer. */
typedef struct {
    const char *id;         /* the grant's name, unique on this holder */
    const char *peer_key;   /* the only client key (Z85) it admits */
    const char *peer_name;  /* for the log: the node behind that key */
    const char *dir;        /* the checkpoint dir the path must stay in, or NULL */
    const char *path;       /* the checkpoint here: a directory or one file */
    const json_t *manifest; /* what may be served (br_manifest_verify'd; copied):
                               whole (listing.h) */
    const char *listing;    /* when the manifest came truncated: the file of its
                               whole listing, served as the path "" to be asked for
                               by listing_hash (read as the agent); else NULL */
    const char *listing_hash;
    int64_t listing_size;
    int as_user;            /* open files as uid/gid (fsid.h); 0: as the agent */
    uid_t uid;
    gid_t gid;
    int64_t ttl_ms; /* it lapses this long from now */
} br_grant_t;

/* What a holder has done since it started. */
typedef struct {
    uint64_t bytes_sent, chunks_sent;
    uint64_t refused;     /* requests answered with an error */
    uint64_t zap_refused; /* connections refused by the ZAP handler */
} br_holder_stats_t;

/* Bind endpoint (tcp://0.0.0.0:7704; port 0: any free one) with the node's secret key
 * (Z85); rate: bytes per second it may send (0: no cap). The thread starts here. */
br_holder_t *br_holder_new(const char *endpoint, const char *secret_key, uint64_t rate,
                           br_err_t *err);
void br_holder_destroy(br_holder_t **h);

/* The TCP port it listens on. */
int br_holder_port(const br_holder_t *h);

/* Add (or renew, same id) a grant. -1 with err for a manifest that fails
 * br_manifest_verify, a bad key, or BR_HOLDER_GRANTS already held. */
int br_holder_grant(br_holder_t *h, const br_grant_t *g, br_err_t *err);
/* Renew the grant id for ttl_ms from now when it is held, unlapsed, for the same
 * peer key and the manifest whose hash is mhash: 1; 0 when there is no such grant
 * (add it with br_holder_grant). */
int br_holder_renew(br_holder_t *h, const char *id, const char *peer_key,
                    const char *mhash, int64_t ttl_ms);
/* Withdraw a grant (none by that id: nothing happens). */
void br_holder_revoke(br_holder_t *h, const char *id);

void br_holder_stats(br_holder_t *h, br_holder_stats_t *st);

#endif
