/* audit.h - the audit log: every action of the admin (tokens, nodes, users, jobs,
 * services) is kept in the store with who did it, to what, when, and how it
 * ended, in the same transaction as the action itself. `bramble audit` reads it. */
#ifndef BRAMBLE_AUDIT_H
#define BRAMBLE_AUDIT_H

#include <stddef.h>

#include "coord.h"

/* After req was handled: when it is an admin's action (who, as the dispatch found
 * the sender), record it, with the result found among the messages the handler
 * queued (c->outbox[from...]). */
void br_audit_note(br_coord_t *c, const br_msg_t *req, const br_caller_t *who, size_t from);

#endif
