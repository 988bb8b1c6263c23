/* outbox.h - what one wake of the coordinator sends and says: the replies and the
 * orders to agents it queued, which leave only once its transaction commits, the
 * numbers of those orders, and its event lines for the daemon's log, printed only
 * once committed (the log never claims what was not stored). A request whose
 * changes were undone has what it queued undone too (mark, undo). The reply
 * helpers are here; the loop (server.c) alone sends. A leaf: it calls nothing of
 * the coordinator's. */
#ifndef BRAMBLE_OUTBOX_H
#define BRAMBLE_OUTBOX_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "msg.h"

typedef struct br_outbox br_outbox_t;

br_outbox_t *br_outbox_new(void);
void br_outbox_destroy(br_outbox_t **o);

/* Queue m (taken; NULL: nothing) to leave once the wake commits. */
void br_outbox_post(br_outbox_t *o, br_msg_t *m);
/* Queue a request to the peer at route, numbered with the next order number (body
 * taken). */
void br_outbox_order(br_outbox_t *o, const void *route, size_t len, const char *type,
                     json_t *body);
/* The answer to req: {} with body (taken; NULL: {}), or err. An event gets none. */
void br_outbox_ok(br_outbox_t *o, br_msg_t *req, json_t *body);
void br_outbox_fail(br_outbox_t *o, br_msg_t *req, const br_err_t *err);
/* A line for the daemon's log ("brambled: ...\n"), printed once the wake commits. */
void br_outbox_log(br_outbox_t *o, const char *line);

/* What is queued now; undo drops what was queued (messages and lines) since. */
typedef struct {
    size_t msgs, log;
} br_outbox_mark_t;
br_outbox_mark_t br_outbox_mark(const br_outbox_t *o);
void br_outbox_undo(br_outbox_t *o, br_outbox_mark_t to);

/* The messages queued, oldest first (i < br_outbox_count), to be looked at. */
size_t br_outbox_count(const br_outbox_t *o);
const br_msg_t *br_outbox_msg(const br_outbox_t *o, size_t i);

/* The wake's end: its lines are printed when it committed (dropped when it was
 * undone), and each message queued is handed to send, which owns it from then on,
 * in order (a wake undone has had its own undone, and its answers saying so
 * queued). Empty after. */
void br_outbox_end(br_outbox_t *o, int committed, void (*send)(void *arg, br_msg_t *m),
                   void *arg);

#endif
