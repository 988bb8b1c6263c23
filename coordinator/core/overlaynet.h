/* overlaynet.h - the coordinator's side of the WireGuard overlay its agents run
 * between them (docs/overlay.md): the overlay's network (--overlay-net CIDR), and
 * each node's place in it, kept in its info as "overlay": {"mode", "pubkey",
 * "relay", "address"} (saved with the node): an address of the net that stays the
 * node's for good (another node never gets it while the node is registered, and
 * a new key keeps it), and its public key, which no other node may report. */
#ifndef BRAMBLE_OVERLAY_NET_H
#define BRAMBLE_OVERLAY_NET_H

#include <jansson.h>
#include <stdint.h>

#include "coord.h"
#include "job.h"
#include "wgkey.h"

/* The default overlay network: a /16 of 10/8 that the overlays people run beside
 * bramble do not take by default (Tailscale 100.64.0.0/10, ZeroTier 10.147.*, k3s
 * 10.42.0.0/16 and 10.43.0.0/16, Docker 172.17.0.0/16 and up, Kubernetes services
 * 10.96.0.0/12). */
#define BR_OVERLAY_NET_DEFAULT "10.213.0.0/16"

typedef struct {
    uint32_t base;  /* the network's first address, host order */
    int prefix;     /* 8..30 */
} br_overlay_net_t;

/* "A.B.C.D/N" (N 8..30, A.B.C.D its network's first address) into net. 0, or -1
 * with err saying what is wrong. */
int br_overlay_net_parse(const char *cidr, br_overlay_net_t *net, br_err_t *err);

/* Node n's hello said `said` of its overlay (the inventory's "overlay", NULL when
 * its agent predates it): what n->info's "overlay" is to be from now (new), and
 * into *answer what the hello's answer says of it ({"address", "prefix"}, or
 * {"error"}; NULL: nothing, the node runs none). A key that is not one, or that
 * another node reported, gets no address and an error naming why; so does a node
 * when the net has no address left. Others' places are never changed. */
json_t *br_overlay_node_hello(br_coord_t *c, br_node_t *n, const json_t *said,
                              const char *seen_from, json_t **answer);

/* Node n's overlay address ("A.B.C.D") when it has one and runs the overlay, else
 * NULL; why (may be NULL) then gets why not. */
const char *br_overlay_node_address(const br_node_t *n, char *why, size_t whylen);

/* Whether a job of spec must run over the overlay: its resources.network is
 * overlay. (Each of its nodes must have a place in it.) */
int br_overlay_wanted(const json_t *spec);

/* Whether a gang of spec on nodes (n of them) runs over the overlay: network
 * overlay; or auto (the default) when it has 2 nodes or more, each with a place in
 * the overlay, and some pair of them answered no direct probe lately (the network
 * map: netmap.h). Else direct. pair (may be NULL, 130 bytes) gets such a pair,
 * "a and b". */
int br_overlay_gang_uses(br_coord_t *c, const json_t *spec, br_node_t *const *nodes, int n,
                         char *pair, size_t pairlen);

/* Whether job's current attempt runs over the overlay: br_overlay_gang_uses over
 * its ranks' nodes, chosen once per attempt for every rank and kept on the job (the
 * overlay's slot, job.h; in memory), with an event saying which pair answered no
 * direct probe when that is why. */
int br_overlay_job_uses(br_coord_t *c, br_job_t *job);

/* For gang placement (netmap.h's br_netmap_relayed_fn, ctx the coordinator): 1 when
 * a and b talk over the overlay through a relay. */
int br_overlay_relayed_pair(void *ctx, const br_node_t *a, const br_node_t *b);

#define BR_OVERLAY_PEERS_MAX 1024  /* peers one node is told of at most */
#define BR_OVERLAY_ENDPOINTS_MAX 6 /* candidate endpoints of each */
#define BR_OVERLAY_PAIRS_SHOWN 200 /* pairs not direct br_overlay_pairs lists */

/* What node n's agent is to hear of its peers, when they changed since it last
 * heard (the version it was told, kept in the overlay's slot on n (nodes.h), against
 * the overlay log's version), else NULL; an object
 * to merge into the answer:
 * - {"overlay_peers": [...]}: the whole list (after its hello, when its agent does
 *   not take changes alone, or when the log no longer reaches back): every other
 *   node with an overlay address and key, by name, at most BR_OVERLAY_PEERS_MAX;
 * - {"overlay_peers_delta": {"set": [...], "gone": [node...]}}: the entries that
 *   changed since, and the nodes gone (overlaylog.h).
 * Each entry: {"node", "pubkey", "address", "endpoints"?: ["HOST:PORT"...] (and
 * "endpoint", the first), "via"?: a relay's pubkey and "via_node" its name,
 * "relay"?: true}. The endpoints are the candidates, the likeliest first: the address
 * the peer advertised, the address and port another node's WireGuard reached it at
 * ("mapped": its router's mapping), the address it connects from, and its LAN
 * addresses (first when both connect from one address: one router), each but
 * "mapped" with the port its hello said. "via": the pair is relayed
 * (br_overlay_path). n counts them heard. NULL too when n has no place in the
 * overlay. */
json_t *br_overlay_peers_news(br_coord_t *c, br_node_t *n);

/* n's agent is told its peers whole at the next br_overlay_peers_news (as after its
 * hello, or when it moved). */
void br_overlay_peers_whole(br_node_t *n);

/* Node n is being removed: its peers drop it (every list changes when it relayed). */
void br_overlay_node_gone(br_coord_t *c, const br_node_t *n);

/* A message of node n's came from addr (a heartbeat): when that is not where its
 * connection came from before (its router got another address, and the agent
 * connected anew without a hello), its peers are told the new one, and it is the
 * node's address too unless the node advertised another. */
void br_overlay_seen_from(br_coord_t *c, br_node_t *n, const char *addr);

/* How two nodes of the overlay reach each other, from what their agents said
 * (br_overlay_reach): */
typedef enum {
    BR_OVERLAY_TRYING = 0,  /* neither said yet */
    BR_OVERLAY_DIRECT = 1,  /* one saw a handshake with the other */
    BR_OVERLAY_RELAYED = 2, /* neither did, and one gave up: through a relay */
    BR_OVERLAY_NONE = 3,    /* ... and no relay (--relay) reaches both */
} br_overlay_path_t;

/* The path between a and b; *via the relay (the first by name that both reached,
 * else one neither failed to reach) when relayed. */
br_overlay_path_t br_overlay_path(br_coord_t *c, const br_node_t *a, const br_node_t *b,
                                  br_node_t **via);
/* "direct", "relayed", "unreachable", "trying". */
const char *br_overlay_path_name(br_overlay_path_t p);

/* A heartbeat's "overlay_reach" ({"reached": [node...], "unreached": [node...],
 * "at"?: {node: "A.B.C.D:PORT"}}): 0 when well formed, else -1 with err. */
int br_overlay_reach_check(const json_t *reach, br_err_t *err);
/* Node n's agent said which peers it reached (checked): kept in the overlay's slot
 * on n (in memory, until its next hello);
 * when a pair's path through a relay changed, every node is told its peers anew.
 * Where it reached a peer from behind another address (its "at"; not a peer
 * behind the same one) is that peer's "mapped" endpoint, a candidate for the
 * others: the first such word stands until the peer moves or says hello. */
void br_overlay_reach(br_coord_t *c, br_node_t *n, const json_t *reach);

/* For `bramble node show`: how node n reaches its peers: {"direct", "trying":
 * counts, "relayed": [{"peer", "via"}], "unreachable": [peer...]} (at most
 * BR_OVERLAY_PAIRS_SHOWN named); NULL when n has no place in the overlay. */
json_t *br_overlay_node_paths(br_coord_t *c, br_node_t *n);

/* For `bramble probe`: {"pairs": [{"a", "b", "path", "via"?}] (the pairs relayed or
 * unreachable, at most BR_OVERLAY_PAIRS_SHOWN), "direct", "relayed",
 * "unreachable", "trying": how many pairs each}. */
json_t *br_overlay_pairs(br_coord_t *c);

#endif
