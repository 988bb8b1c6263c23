/* probeset.h - the peers each agent probes: a copy of the connected nodes that
 * answer probes, in name order, rebuilt from the registry when it changed (at most
 * every BR_PROBESET_REBUILD_MS); each node is given the next BR_PROBE_PEERS_MAX of
 * them after its own name, wrapping round, so that what a heartbeat carries and
 * what an agent sends stay bounded however many nodes there are. */
#ifndef BRAMBLE_PROBESET_H
#define BRAMBLE_PROBESET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "nodes.h"

#define BR_PROBE_PEERS_MAX 64      /* peers one agent probes */
#define BR_PROBESET_REBUILD_MS 100 /* while nodes join, one rebuild per this */
#define BR_PROBE_OVERLAY_SUFFIX "/overlay" /* a peer's name with it: the peer probed at
                                            * its overlay address */

typedef struct br_probeset br_probeset_t;

/* secret_key: the coordinator's (Z85), from which the probe key follows, so that it
 * is the same after a restart. */
br_probeset_t *br_probeset_new(const char *secret_key);
void br_probeset_destroy(br_probeset_t **p);

/* The key agents sign their probes with (64 hex digits), sent in hello's answer. */
const char *br_probeset_key(const br_probeset_t *p);

/* The set of peers may have changed (a node said hello, was lost or removed): its
 * version, which every agent is to hear of, grows. */
void br_probeset_changed(br_probeset_t *p);
/* The version the set is to reflect (0 until the first change). */
int br_probeset_wanted(const br_probeset_t *p);

/* Rebuild from nodes when the version wanted is not the one built, unless the
 * last rebuild was under BR_PROBESET_REBUILD_MS before now_ms (then the next call
 * does it). Returns the version the set now reflects (-1: never built). */
int br_probeset_refresh(br_probeset_t *p, br_nodes_t *nodes, int64_t now_ms);

size_t br_probeset_size(const br_probeset_t *p);

/* The peers of node self: [{"node", "addr", "port"}], every other node of the set
 * in name order when they are at most BR_PROBE_PEERS_MAX, else the
 * BR_PROBE_PEERS_MAX after self's name; when self and a peer both have a place in
 * the overlay, the peer again as {"node": "NAME/overlay", "addr": its overlay
 * address}, so that the network map has the overlay's round trips too. *hash is set to a digest of that list (never
 * 0); NULL is returned when it equals last (the list did not change). */
json_t *br_probeset_peers(const br_probeset_t *p, const char *self, uint64_t last,
                          uint64_t *hash);

/* What each node's agent was sent of its peers is the probe set's, on the node
 * (nodes.h's slot "probeset"): the version it heard of, the list's digest, when. */

/* Node n's agent said hello: the set changes (n's address or port may be new, so
 * every agent hears), and n's agent is told its peers at its next heartbeat, at
 * once and whole. */
void br_probeset_hello(br_probeset_t *p, br_node_t *n);

/* The peers n's agent is to probe (br_probeset_peers, after a refresh from nodes),
 * when they changed since it last heard, else NULL: none while the version it heard
 * of is current, none when the list is the one it has. With more than
 * BR_PROBE_PEERS_MAX nodes they go to each node at most once per probe interval
 * (its first after hello at once), so that nodes joining by the thousand do not
 * make every heartbeat carry a list. now_ms: monotonic. */
json_t *br_probeset_news(br_probeset_t *p, br_nodes_t *nodes, br_node_t *n,
                         int64_t now_ms);

#endif
