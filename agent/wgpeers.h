/* wgpeers.h - this node's overlay peers on its WireGuard interface (docs/overlay.md,
 * "Across home routers" and "Relays"): each peer's candidate endpoints tried in turn
 * until a handshake is seen, and each peer's traffic routed to it or, when the
 * coordinator says the pair is relayed, through the relay's peer.
 *
 * The coordinator lists the peers; this object makes `wg` match the list, looks at
 * the interface's latest handshakes (`wg show ... latest-handshakes`) and moves an
 * unreached peer's endpoint to its next candidate every BR_WGPEERS_TRY_MS (sending
 * at once, so that both sides of a NAT send first), and tells which peers it
 * reached and which it reached at none of their endpoints. */
#ifndef BRAMBLE_WGPEERS_H
#define BRAMBLE_WGPEERS_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"

#define BR_WGPEERS_TRY_MS 2500    /* an endpoint tried before the next one is */
#define BR_WGPEERS_RETRY_MS 30000 /* ... once every one failed: tried again slowly */
#define BR_WGPEERS_FRESH_S 180    /* a handshake this recent: the peer is reached */
#define BR_WGPEERS_ENDPOINTS 6    /* candidates kept per peer */

typedef struct br_wgpeers br_wgpeers_t;

/* Peers of interface ifname. */
br_wgpeers_t *br_wgpeers_new(const char *ifname);
void br_wgpeers_destroy(br_wgpeers_t **p);

/* The interface went (or is new): every peer is set again at the next br_wgpeers_set. */
void br_wgpeers_forget(br_wgpeers_t *p);

/* Make the interface's peers exactly list: [{"node", "pubkey", "address",
 * "endpoints"?: ["HOST:PORT"...] (or "endpoint"), "via"?: a listed relay's pubkey}].
 * A peer whose endpoints did not change, or that is reached and whose first
 * endpoint did not change, keeps the one it reached (WireGuard may have learnt a
 * better one from its packets); one whose first endpoint changed (it moved) is
 * sent to there at once. now: monotonic ms. 0, or -1 with err (the
 * peers that could be set are). */
int br_wgpeers_set(br_wgpeers_t *p, const json_t *list, int64_t now, br_err_t *err);

/* The coordinator's changes to the list it gave last: delta {"set": [entry...],
 * "gone": [node...]} (entries as br_wgpeers_set's, each replacing the node's). 0,
 * or -1 with err, as br_wgpeers_set. */
int br_wgpeers_update(br_wgpeers_t *p, const json_t *delta, int64_t now, br_err_t *err);

/* Look at the handshakes (at most once a second while some peer is being tried,
 * else every 10 s) and try unreached peers' next endpoints. 1 when what
 * br_wgpeers_reach says changed, 0 when not, -1 with err when `wg` failed. */
int br_wgpeers_tick(br_wgpeers_t *p, int64_t now, br_err_t *err);

/* {"reached": [node...], "unreached": [node...], "at": {node: "HOST:PORT"}}: the
 * peers a handshake was seen with, those none of whose endpoints answered (a new
 * reference; peers still being tried are in neither), and where WireGuard
 * reached each reached peer when that last changed (the address and port its
 * packets come from: its router's mapping, behind NAT). */
json_t *br_wgpeers_reach(const br_wgpeers_t *p);

/* The interface was taken over as a previous agent left it: every peer is set
 * anew at the next br_wgpeers_set, except that a peer it had a handshake with
 * lately keeps its endpoint (WireGuard's, which may be one it learnt), so that
 * what the jobs send over it goes on. */
void br_wgpeers_adopt(br_wgpeers_t *p);

/* How many peers it has. */
size_t br_wgpeers_count(const br_wgpeers_t *p);

#endif
