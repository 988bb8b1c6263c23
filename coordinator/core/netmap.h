/* netmap.h - the coordinator's network map: the round-trip times agents measure to
 * each other and to the coordinator (reported with their heartbeats; kept in
 * memory), shown by `bramble probe`, and used to place a gang on nodes close
 * together: among the node sets that fit, the one whose worst pair is nearest, and
 * never one that mixes sites (different `site` labels, or a pair farther apart than
 * BR_SITE_RTT_MS) while a set within one site fits, unless the spec says
 * `spread: any`. */
#ifndef BRAMBLE_NETMAP_H
#define BRAMBLE_NETMAP_H

#include <jansson.h>
#include <stddef.h>

#include "nodes.h"

#define BR_SITE_RTT_MS 10.0        /* a pair farther apart is taken to be two sites */
#define BR_PROBE_INTERVAL_MS 5000 /* how often agents probe each peer */

typedef struct br_netmap br_netmap_t;

br_netmap_t *br_netmap_new(void);
void br_netmap_destroy(br_netmap_t **m);

/* Node's latest report: {"coordinator": ms, "peers": {"name": ms|null}}; one
 * without "coordinator" keeps the last round trip to the coordinator reported. */
void br_netmap_report(br_netmap_t *m, const char *node, json_t *rtt);
void br_netmap_forget(br_netmap_t *m, const char *node);

/* Round trip between a and b in ms: the larger of the two directions measured;
 * -1 when neither has been measured, -2 when measured and lost (no answer). */
double br_netmap_rtt(const br_netmap_t *m, const char *a, const char *b);
/* Node's round trip to the coordinator (its heartbeats), or -1. */
double br_netmap_coordinator_rtt(const br_netmap_t *m, const char *node);

/* The matrix for `bramble probe --json`: {"nodes": [names], "rtt_ms": [[from i to
 * j, null unknown]], "coordinator_ms": [...], "no_answer": [[a, b]...] (the pairs
 * probed in vain lately, neither reaching the other directly), "overlay_rtt_ms"?:
 * [[...]] (the same over the overlay, when some pair was measured so)}; diagonal
 * 0. New reference. */
json_t *br_netmap_matrix(const br_netmap_t *m, br_nodes_t *nodes);

/* Whether a pair of nodes talks only through a relay (overlaynet.h), for a gang
 * that may run over the overlay. */
typedef int (*br_netmap_relayed_fn)(void *ctx, const br_node_t *a, const br_node_t *b);

/* How a gang to place may reach its peers: */
typedef struct {
    int overlay;                 /* 1: over the overlay (its round trips weigh, where
                                    measured); 0: auto, over it where a pair answers no
                                    direct probe */
    br_netmap_relayed_fn relayed; /* counts the pairs relayed (NULL: none is) */
    void *ctx;
} br_netmap_via_t;

/* The overlay's round trip between a and b (probed at their overlay addresses:
 * probeset.h), as br_netmap_rtt says the direct one. */
double br_netmap_overlay_rtt(const br_netmap_t *m, const char *a, const char *b);

/* Choose want of the ncand candidate nodes for a gang (chosen[] gets their
 * indexes, in candidate order): the fewest pairs across sites (unless spread_any:
 * sites may mix freely), then the fewest pairs relayed (via, when not NULL: a set
 * with a relayed pair is taken only when no other fits), then the fewest not
 * measured, then the smallest worst round trip: the direct one, or with via the
 * overlay's where the gang runs over it. via NULL: the gang runs direct. why gets
 * the explanation ("max rtt 0.31 ms; c not chosen: 41.2 ms to a"). */
void br_netmap_choose(const br_netmap_t *m, br_node_t *const *cand, int ncand, int want,
                      int spread_any, const br_netmap_via_t *via, int *chosen, char *why,
                      size_t whylen);

#endif
