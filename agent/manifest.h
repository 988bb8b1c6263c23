/* manifest.h - what a checkpoint holds, so that a copy of it can be verified: every
 * regular file's path (relative to the checkpoint), size, mode and BLAKE2b-256 hash,
 * every symlink's target text (recorded, never followed), and one BLAKE2b-256 hash
 * over all of it. A fifo, socket or device inside refuses the checkpoint. A hasher
 * builds manifests on a thread of its own, one at a time in the order asked, each
 * read as the job's user through a 1 MiB buffer, so the agent's loop (heartbeats,
 * fencing, logs) never waits for a big checkpoint: it polls br_manifest_fd and takes
 * what is finished. docs/checkpoints.md defines the manifest and its hash. */
#ifndef BRAMBLE_MANIFEST_H
#define BRAMBLE_MANIFEST_H

#include <jansson.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "err.h"
#include "fsid.h"
#include "manifest_check.h"
#include "mfbuild.h"

/* JSON bytes of entries a report lists; the rest are counted and hashed, not
 * listed, and the whole manifest is kept aside (listing.h) */
#define BR_MANIFEST_LIST_MAX (256 * 1024)
#define BR_MANIFEST_QUEUE 1024       /* requests waiting at once */

typedef struct br_manifest br_manifest_t;

/* What to hash. */
typedef struct {
    const char *dir;  /* the checkpoint dir path must stay inside (ckpt.h), or NULL */
    const char *path; /* the checkpoint: a directory or a regular file */
    int as_user;      /* read as uid/gid (fsid.h); 0: as the agent itself */
    uid_t uid;
    gid_t gid;
    const char *group; /* the caller's name for related requests (an attempt) */
    json_t *tag;       /* handed back with the result (a reference is taken) */
} br_manifest_req_t;

/* Start the hashing thread. */
br_manifest_t *br_manifest_new(br_err_t *err);
/* Stop a build in progress (within one buffer's read) and drop what is left. */
void br_manifest_destroy(br_manifest_t **h);

/* Readable when a result can be taken (an eventfd). */
int br_manifest_fd(const br_manifest_t *h);

/* Queue a request. -1 with err when BR_MANIFEST_QUEUE are waiting already. */
int br_manifest_submit(br_manifest_t *h, const br_manifest_req_t *r, br_err_t *err);

/* Take one finished request, oldest first: 1 with *tag (the caller's reference
 * now) and *manifest (the caller's), or *manifest NULL and err saying why the
 * checkpoint is refused; 0 when none is finished. */
int br_manifest_take(br_manifest_t *h, json_t **tag, json_t **manifest, br_err_t *err);

/* Requests of group not taken yet (waiting, in progress or finished). */
int br_manifest_pending(br_manifest_t *h, const char *group);
/* Forget every request of group: waiting ones are dropped, one in progress stops. */
void br_manifest_cancel(br_manifest_t *h, const char *group);

/* Build one manifest here and now, as the hasher thread does: as fsid (NULL: as
 * this process), stopping with ECANCELED when *cancel (may be NULL) becomes
 * non-zero. {"hash": hex, "root": "dir"|"file", "files": n, "bytes": n, "entries":
 * [{"path", "size", "mode", "hash"} or {"path", "size", "mode", "link"}]}, every
 * entry, in byte order of their paths; NULL with err. */
json_t *br_manifest_build(const char *dir, const char *path, br_fsid_t *fsid,
                          const atomic_int *cancel, br_err_t *err);

#endif
