/* nodelife.h - a node's life on the coordinator: heard from (and on which
 * connection), hello (ready again), drain and undrain, removal, and the failure
 * detector that declares a node lost once it has been silent past the node
 * timeout. Each step is an event and the node saved; what it means for jobs and
 * placement the modules hear through hooks (hooks.h): BR_HOOK_NODE_LOST (its
 * ranks are over), BR_HOOK_NODE_UNHEALTHY (its gangs are), BR_HOOK_NODE_BACK,
 * BR_HOOK_NODE_HEARD, BR_HOOK_CHANGED. */
#ifndef BRAMBLE_NODELIFE_H
#define BRAMBLE_NODELIFE_H

#include <stddef.h>

#include "coord.h"
#include "hooks.h"

/* What br_node_post does besides the state: the event's kind (NULL: the new
 * state's name), the hook to run after (BR_HOOK_NODE_LOST, _UNHEALTHY, _BACK,
 * BR_HOOK_CHANGED; or BR_NODE_NO_HOOK) with its reason, and flags:
 * BR_NODE_NOSAVE (nothing stored of the node changed, or it is about to be
 * deleted) and BR_NODE_QUIET (no event: a move to the same state that users are not
 * told of, as a hello that keeps a node draining, or a connection anew). */
#define BR_NODE_NO_HOOK BR_HOOKS
enum { BR_NODE_NOSAVE = 1, BR_NODE_QUIET = 2 };
typedef struct {
    br_node_state_t state;
    const char *kind;
    br_hook_point_t hook;
    const char *reason;
    int flags;
} br_node_move_t;

/* The one path of a node's changes: the move checked (br_node_state_move_ok; a
 * refused one is not made: -1, and brambled's log names both states), then, in this
 * order, its state, the node saved, its event with this text, and its hook. Every
 * run of a node's hooks (BR_HOOK_NODE_LOST, _UNHEALTHY, _BACK) goes through it,
 * a move to the same state included. */
int br_node_post(br_coord_t *c, br_node_t *n, const br_node_move_t *mv, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));

/* A message from node name's agent came on route: its node, now last heard from
 * (NULL when no such node is registered). A new route (a new connection) is a
 * quiet move to its own state with BR_HOOK_NODE_BACK (nothing saved, no event): it
 * may take pending jobs. */
br_node_t *br_nodelife_seen(br_coord_t *c, const char *name, const void *route, size_t len);
/* Its agent said hello: ready (with an event) unless it is draining or unhealthy;
 * else (or when it was ready on the same connection) a quiet move to its own state:
 * saved (what its hello said) and BR_HOOK_NODE_BACK, no event. */
void br_nodelife_hello(br_coord_t *c, br_node_t *n);
/* Its heartbeat was taken. */
void br_nodelife_heard(br_coord_t *c, br_node_t *n);
/* Is an answer to n's heartbeat due at now (monotonic ms)? Its agent freezes its
 * jobs when it has heard nothing for the fence time, so it hears at least every
 * third of it: an answer goes when waiting for one more heartbeat, with half an
 * interval to spare, would take longer since its last (n->answered_at). At the
 * default timing (heartbeats each second, a fence time of 3 s) that is every
 * heartbeat; with a longer node timeout, fewer. */
int br_nodelife_answer_due(const br_coord_t *c, const br_node_t *n, int64_t now);
/* No new jobs (ready -> draining), or again (draining or unhealthy -> ready, which
 * clears an unhealthy node); by: who. */
void br_nodelife_drain(br_coord_t *c, br_node_t *n, const char *by);
void br_nodelife_undrain(br_coord_t *c, br_node_t *n, const char *by);
/* One of its GPUs failed (fault says which and how: an XID, ECC errors):
 * unhealthy, with an event, until an admin clears it; no new jobs go there, and
 * its gangs stop (BR_HOOK_NODE_UNHEALTHY) as if it were lost. A hello keeps it
 * unhealthy. */
void br_nodelife_unhealthy(br_coord_t *c, br_node_t *n, const char *fault);
/* Revoke its key, forget it; its ranks are over. -1 with err when the store fails. */
int br_nodelife_remove(br_coord_t *c, br_node_t *n, const char *by, br_err_t *err);
/* The failure detector: nodes silent past node_timeout (after the start-up grace)
 * become lost. */
void br_nodelife_check(br_coord_t *c);

#endif
