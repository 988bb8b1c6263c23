/* nodes.h - the coordinator's registry of nodes in memory: who is connected on which
 * route, when each was last heard from, and what its running jobs hold (CPUs,
 * memory, GPUs). The store keeps the durable part of each node (node.info). */
#ifndef BRAMBLE_NODES_H
#define BRAMBLE_NODES_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "aux.h"
#include "cred.h"
#include "msg.h"

#define BR_NODE_MAX_GPUS 64

/* A node's state: ready (takes jobs), draining (an admin said no new jobs),
 * unhealthy (a GPU failed: no new jobs until an admin clears it), lost (silent
 * past the node timeout, or never heard from since it joined). */
typedef enum {
    BR_NODE_READY,
    BR_NODE_DRAINING,
    BR_NODE_UNHEALTHY,
    BR_NODE_LOST,
    BR_NODE_STATES
} br_node_state_t;

/* "ready" ... "lost"; the state of a name (-1: none such). */
const char *br_node_state_name(br_node_state_t s);
int br_node_state_parse(const char *name);
/* 1 when a node may go from state from to state to (nodelife.h's br_node_post):
 * ready <-> draining, unhealthy from ready or draining, back to ready from
 * unhealthy (cleared) or lost (heard again), lost from any, and any state to itself
 * (an event that changes nothing, as a reconnect or a new key). */
int br_node_state_move_ok(br_node_state_t from, br_node_state_t to);

/* A module's own data on a node (aux.h), as on a job (job.h): the module takes a
 * slot once (br_node_aux_slot) and hangs what it keeps of each node there (the
 * probe peers its agent was sent: probeset.h; its overlay peers and what it
 * reached: overlaynet.h), freed when the node goes. The registry never looks
 * inside. */
#define BR_NODE_AUX_MAX 8

#define BR_NODE_TREES_MAX 4096 /* trees a heartbeat says the node's cache holds */
#define BR_NODE_ENVS_MAX 1024  /* environments a heartbeat says the node keeps */

typedef struct br_node {
    char name[64];
    char pubkey[BR_KEY_LEN + 1];
    br_node_state_t state;
    json_t *info;          /* stored object: inventory, gpus, labels, cost... */
    unsigned char route[256];
    size_t route_len;      /* 0 until the agent says hello */
    int new_route;         /* the last message came on a new connection */
    int64_t last_seen_mono; /* ms, monotonic: set by br_nodes_seen only */
    int64_t last_seen_ms;   /* wall clock, for display */
    int cpus_used;
    int attempts;          /* ranks placed on it: at most BR_NODE_MAX_ATTEMPTS */
    uint64_t memory_used;
    int gpu_jobs[BR_NODE_MAX_GPUS];            /* jobs holding each GPU */
    int gpu_whole[BR_NODE_MAX_GPUS];           /* ... of them, jobs with no VRAM need */
    uint64_t gpu_vram_used[BR_NODE_MAX_GPUS];  /* VRAM the sharing ones reserved */
    int64_t answered_at; /* monotonic ms its agent last had an answer to a hello or a
                            heartbeat (api_agent.c) */
    br_aux_t aux[BR_NODE_AUX_MAX]; /* the modules' own data (br_node_aux_slot) */
    struct br_node *next;
    struct br_node *seen_prev, *seen_next; /* by last_seen_mono, oldest first */
    int seen_linked;
} br_node_t;

/* The slot of the module named owner (a string literal; the same slot each time it
 * asks; -1 when all BR_NODE_AUX_MAX are taken). */
int br_node_aux_slot(const char *owner);
/* What the module of slot keeps of node n (NULL: nothing yet); set it, freeing what
 * was there (free may be NULL). What is set is freed with the node. */
void *br_node_aux_get(const br_node_t *n, int slot);
void br_node_aux_set(br_node_t *n, int slot, void *data, void (*free)(void *data));

typedef struct br_nodes br_nodes_t;

br_nodes_t *br_nodes_new(void);
void br_nodes_destroy(br_nodes_t **nodes);

/* Add a node from its stored object ({"name","pubkey","state",...}); info is
 * borrowed and copied. Returns the node, or the existing one with that name. */
br_node_t *br_nodes_add(br_nodes_t *nodes, json_t *info);
void br_nodes_remove(br_nodes_t *nodes, const char *name);
br_node_t *br_nodes_find(br_nodes_t *nodes, const char *name);
br_node_t *br_nodes_first(br_nodes_t *nodes); /* then node->next; ordered by name */

/* The node was heard from at mono (ms, monotonic, never less than the last call's):
 * it goes to the end of the nodes by last heard from. */
void br_nodes_seen(br_nodes_t *nodes, br_node_t *n, int64_t mono);
/* The node heard from longest ago (then node->seen_next), so that finding the silent
 * ones looks at them alone; a node is in this order from its add until
 * br_nodes_unseen (lost), and again from its next br_nodes_seen. */
br_node_t *br_nodes_oldest(br_nodes_t *nodes);
void br_nodes_unseen(br_nodes_t *nodes, br_node_t *n);

/* Node resources from its info. */
int br_node_cpus(const br_node_t *n);
uint64_t br_node_memory(const br_node_t *n);
int br_node_gpu_count(const br_node_t *n);
/* Why the node's agent refuses every job (its hello said so: a root agent with no
 * one else to run jobs as), or NULL. Nothing is placed there meanwhile. */
const char *br_node_refuses(const br_node_t *n);
/* Whether the node's cache holds the tree of manifest hash, as its agent last listed
 * them ("trees" in its info: {manifest hash: true}) or as it said since. */
int br_node_holds_tree(const br_node_t *n, const char *hash);
/* The trees of data (a job spec's "data": {name: {"hash", "bytes"...}}) are in the
 * node's cache now (it said it has them), until its agent lists its cache again. */
void br_node_trees_add(br_node_t *n, const json_t *data);
/* Bytes of the trees data names that are not in the node's cache: what placing the
 * job there has to fetch. */
uint64_t br_node_trees_missing(const br_node_t *n, const json_t *data);
/* What the node costs per hour now, as its agent last said (0: free). */
double br_node_cost_per_hour(const br_node_t *n);
json_t *br_node_gpu(const br_node_t *n, int i); /* borrowed, or NULL */

/* Reserve (sign 1) or give back (sign -1) a rank's share on n: {"cpus", "memory",
 * "gpus": [index...], "vram"?} ("vram": what it reserves on each of its GPUs,
 * which it shares; none: the GPUs are its alone). n NULL: nothing. */
void br_node_hold(br_node_t *n, json_t *share, int sign);

/* The GPUs and CPUs a share ({"cpus","memory","gpus"...}) holds. */
void br_node_share_size(const json_t *share, int *gpus, int *cpus);

/* Give back everything n holds (before holds are counted again from the store). */
void br_node_release_all(br_node_t *n);

/* Set state and mirror it into info (nodelife.h's br_node_post does, on the one
 * path of a node's changes). */
void br_node_set_state(br_node_t *n, br_node_state_t state);

#endif
