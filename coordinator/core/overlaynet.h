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
                              json_t **answer);

/* Node n's overlay address ("A.B.C.D") when it has one and runs the overlay, else
 * NULL; why (may be NULL) then gets why not. */
const char *br_overlay_node_address(const br_node_t *n, char *why, size_t whylen);

/* Whether a job of spec runs over the overlay: its resources.network is overlay.
 * (auto runs direct for now: docs/overlay.md.) */
int br_overlay_wanted(const json_t *spec);

#define BR_OVERLAY_PEERS_MAX 1024 /* peers one node is told of at most */

/* The peers node n's interface is to have, when they changed since its agent last
 * heard them (n->overlay_sent against c->overlay_version), else NULL: every other
 * node with an overlay address and key, by name, at most BR_OVERLAY_PEERS_MAX:
 * [{"node", "pubkey", "address", "endpoint"?: "HOST:PORT"}] (the address the node
 * advertised, else the one it connects from, and the port its hello said). n
 * counts them heard. NULL too when n has no place in the overlay. */
json_t *br_overlay_peers_news(br_coord_t *c, br_node_t *n);

#endif
