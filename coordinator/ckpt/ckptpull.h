/* ckptpull.h - a counted checkpoint pulled to a user's own machine through the
 * coordinator (docs/checkpoints.md, "Getting a checkpoint back"; PROTOCOL.md
 * checkpoint.open, checkpoint.read, checkpoint.close). `bramble checkpoint pull`
 * opens a pull of one checkpoint, reads its files chunk by chunk and closes it.
 *
 * The coordinator grants its own key the checkpoint on a node that holds it (the
 * writer, else a node with a verified replica: ckpt.serve), connects to that
 * node's replica port as any puller does (PROTOCOL.md section 11), and passes each
 * read on and each answer back, so the user's machine needs to reach the
 * coordinator only. Nothing is written on the coordinator, and the CLI verifies
 * every file against the manifest. Answers go out as they come, outside the
 * wake's transaction: reading a chunk changes nothing. A pull belongs to the key
 * that opened it; one that nobody read from for a minute is closed, and its grant
 * withdrawn. The requests' handlers are api_ckpt.c's. */
#ifndef BRAMBLE_CKPTPULL_H
#define BRAMBLE_CKPTPULL_H

#include <zmq.h>

#include "coord.h"

#define BR_CKPTPULL_MAX 8              /* pulls open at once */
#define BR_CKPTPULL_IDLE_MS 60000      /* a pull not read from for this long is closed */
#define BR_CKPTPULL_ANSWER_MS 30000    /* a read the holder has not answered by then
                                        * fails (ETIMEDOUT) */
#define BR_CKPTPULL_GRANT_MS (15 * 60 * 1000) /* the grant's life, renewed by reads */

struct br_coord;
typedef struct br_ckptpull br_ckptpull_t;

/* Links to holders are made in ctx (the coordinator's ZeroMQ context). */
br_ckptpull_t *br_ckptpull_new(void *ctx);
/* Closes every socket; grants lapse on their own. */
void br_ckptpull_destroy(br_ckptpull_t **p);
/* Register its hooks on c (c->ckptpull must be set): pulls idle too long are
 * closed each second, and a lost holder fails its pulls. 0, or -1. */
int br_ckptpull_init(struct br_coord *c);

/* The holders' sockets to poll, up to max into items; how many. */
int br_ckptpull_items(br_ckptpull_t *p, zmq_pollitem_t *items, int max);
/* Pass the answers that came from holders back to their clients, and fail the
 * reads waiting past BR_CKPTPULL_ANSWER_MS: queued in the outbox (outbox.h), which
 * the loop sends at once. */
void br_ckptpull_answer(struct br_coord *c);

/* Open a pull, for the key owner (Z85), of job's counted checkpoint at step (< 0:
 * the newest): its holder is granted the coordinator's key. What the client is
 * told ({"xfer", "job", "step", "path", "manifest", "from", "replica"}, a new
 * reference), or NULL with err (ENOENT, ENOTSUP, EHOSTUNREACH, EBUSY...). Whether
 * owner may see the job is the caller's to check. */
json_t *br_ckptpull_open(struct br_coord *c, const char *owner, int64_t job, int64_t step,
                         br_err_t *err);
/* Pass a read of offset of the file at path (hash) of owner's pull xfer on to its
 * holder. answer (taken on success) is the message the holder's answer is copied
 * into and posted as, once it comes (br_ckptpull_answer). 0, or -1 with err
 * (ENOENT: no such pull of owner's; EAGAIN: too many reads in flight, or the link
 * is busy). */
int br_ckptpull_read(struct br_coord *c, const char *owner, const char *xfer,
                     const char *path, const char *hash, int64_t offset, br_msg_t *answer,
                     br_err_t *err);
/* Close owner's pull xfer, if it is open: its reads in flight fail, its grant is
 * withdrawn. */
void br_ckptpull_close(struct br_coord *c, const char *owner, const char *xfer);

#endif
