/* nodes.c - the coordinator's registry of nodes in memory. */
#include "nodes.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The nodes in a list sorted by name (for listing), and indexed by name in an
 * open-addressing hash table (for the lookup every message of a node makes). */
struct br_nodes {
    br_node_t *head;
    br_node_t *seen_head, *seen_tail; /* by last heard from, oldest first */
    br_node_t **slot; /* cap entries: NULL (free), TOMB (removed) or a node */
    size_t cap, used; /* used counts nodes and tombstones */
};

static br_node_t tomb_node;
#define TOMB (&tomb_node)

static size_t name_hash(const char *s)
{
    size_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The slot holding name, or (when absent) the free slot where it would go. */
static br_node_t **slot_of(const br_nodes_t *nodes, const char *name)
{
    size_t mask = nodes->cap - 1, i = name_hash(name) & mask;
    br_node_t **free_slot = NULL;
    for (;; i = (i + 1) & mask) {
        br_node_t *n = nodes->slot[i];
        if (!n)
            return free_slot ? free_slot : &nodes->slot[i];
        if (n == TOMB) {
            if (!free_slot)
                free_slot = &nodes->slot[i];
        } else if (strcmp(n->name, name) == 0) {
            return &nodes->slot[i];
        }
    }
}

/* Rebuild the table with room for twice the nodes (tombstones dropped). */
static int grow(br_nodes_t *nodes)
{
    size_t count = 0;
    for (br_node_t *n = nodes->head; n; n = n->next)
        count++;
    size_t cap = 64;
    while (cap < 4 * (count + 1))
        cap *= 2;
    br_node_t **slot = calloc(cap, sizeof(*slot));
    if (!slot)
        return -1;
    free(nodes->slot);
    nodes->slot = slot;
    nodes->cap = cap;
    nodes->used = count;
    for (br_node_t *n = nodes->head; n; n = n->next)
        *slot_of(nodes, n->name) = n;
    return 0;
}

br_nodes_t *br_nodes_new(void)
{
    br_nodes_t *nodes = calloc(1, sizeof(br_nodes_t));
    if (nodes && grow(nodes) < 0) {
        free(nodes);
        return NULL;
    }
    return nodes;
}

static const char *aux_owners[BR_NODE_AUX_MAX]; /* the modules' names, by slot */

int br_node_aux_slot(const char *owner)
{
    return br_aux_slot(aux_owners, BR_NODE_AUX_MAX, owner);
}

void *br_node_aux_get(const br_node_t *n, int slot)
{
    return slot >= 0 && slot < BR_NODE_AUX_MAX ? n->aux[slot].data : NULL;
}

void br_node_aux_set(br_node_t *n, int slot, void *data, void (*free_fn)(void *data))
{
    if (slot >= 0 && slot < BR_NODE_AUX_MAX)
        br_aux_set(&n->aux[slot], data, free_fn);
}

static void node_free(br_node_t *n)
{
    for (int i = 0; i < BR_NODE_AUX_MAX; i++)
        br_node_aux_set(n, i, NULL, NULL);
    json_decref(n->info);
    free(n);
}

void br_nodes_destroy(br_nodes_t **nodes)
{
    if (nodes && *nodes) {
        br_node_t *n = (*nodes)->head;
        while (n) {
            br_node_t *next = n->next;
            node_free(n);
            n = next;
        }
        free((*nodes)->slot);
        free(*nodes);
        *nodes = NULL;
    }
}

br_node_t *br_nodes_find(br_nodes_t *nodes, const char *name)
{
    br_node_t *n = *slot_of(nodes, name);
    return n == TOMB ? NULL : n;
}

br_node_t *br_nodes_add(br_nodes_t *nodes, json_t *info)
{
    const char *name = json_string_value(json_object_get(info, "name"));
    const char *key = json_string_value(json_object_get(info, "pubkey"));
    const char *state = json_string_value(json_object_get(info, "state"));
    if (!name || !key)
        return NULL;
    br_node_t *n = br_nodes_find(nodes, name);
    if (n)
        return n;
    if (2 * (nodes->used + 1) > nodes->cap && grow(nodes) < 0) /* at most half full */
        return NULL;
    n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    br_strlcpy(n->name, name, sizeof(n->name));
    br_strlcpy(n->pubkey, key, sizeof(n->pubkey));
    n->info = json_deep_copy(info);
    int known = br_node_state_parse(state);
    br_node_set_state(n, known >= 0 ? (br_node_state_t)known : BR_NODE_LOST);
    br_node_t **pp = &nodes->head;
    while (*pp && strcmp((*pp)->name, name) < 0)
        pp = &(*pp)->next;
    n->next = *pp;
    *pp = n;
    n->seen_next = nodes->seen_head; /* never heard from yet: the oldest */
    if (nodes->seen_head)
        nodes->seen_head->seen_prev = n;
    else
        nodes->seen_tail = n;
    nodes->seen_head = n;
    n->seen_linked = 1;
    br_node_t **slot = slot_of(nodes, name);
    if (!*slot)
        nodes->used++; /* a free slot, not a reused tombstone */
    *slot = n;
    return n;
}

void br_nodes_remove(br_nodes_t *nodes, const char *name)
{
    for (br_node_t **pp = &nodes->head; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            br_node_t *n = *pp;
            *pp = n->next;
            br_nodes_unseen(nodes, n);
            *slot_of(nodes, name) = TOMB;
            node_free(n);
            return;
        }
    }
}

br_node_t *br_nodes_first(br_nodes_t *nodes)
{
    return nodes->head;
}

void br_nodes_unseen(br_nodes_t *nodes, br_node_t *n)
{
    if (!n->seen_linked)
        return;
    if (n->seen_prev)
        n->seen_prev->seen_next = n->seen_next;
    else
        nodes->seen_head = n->seen_next;
    if (n->seen_next)
        n->seen_next->seen_prev = n->seen_prev;
    else
        nodes->seen_tail = n->seen_prev;
    n->seen_prev = n->seen_next = NULL;
    n->seen_linked = 0;
}

void br_nodes_seen(br_nodes_t *nodes, br_node_t *n, int64_t mono)
{
    n->last_seen_mono = mono;
    if (n->seen_linked && n == nodes->seen_tail)
        return;
    br_nodes_unseen(nodes, n);
    n->seen_prev = nodes->seen_tail;
    if (nodes->seen_tail)
        nodes->seen_tail->seen_next = n;
    else
        nodes->seen_head = n;
    nodes->seen_tail = n;
    n->seen_linked = 1;
}

br_node_t *br_nodes_oldest(br_nodes_t *nodes)
{
    return nodes->seen_head;
}

void br_node_release_all(br_node_t *n)
{
    n->cpus_used = 0;
    n->attempts = 0;
    n->memory_used = 0;
    memset(n->gpu_jobs, 0, sizeof(n->gpu_jobs));
    memset(n->gpu_whole, 0, sizeof(n->gpu_whole));
    memset(n->gpu_vram_used, 0, sizeof(n->gpu_vram_used));
}

int br_node_cpus(const br_node_t *n)
{
    return (int)json_integer_value(json_object_get(n->info, "cpus"));
}

void br_node_share_size(const json_t *share, int *gpus, int *cpus)
{
    *gpus = (int)json_array_size(json_object_get(share, "gpus"));
    *cpus = (int)json_integer_value(json_object_get(share, "cpus"));
}

double br_node_cost_per_hour(const br_node_t *n)
{
    return json_number_value(json_object_get(n->info, "cost_per_hour"));
}

const char *br_node_refuses(const br_node_t *n)
{
    return json_string_value(json_object_get(n->info, "refuses"));
}

int br_node_holds_tree(const br_node_t *n, const char *hash)
{
    return hash && json_object_get(json_object_get(n->info, "trees"), hash) != NULL;
}

void br_node_trees_add(br_node_t *n, const json_t *data)
{
    json_t *held = json_object_get(n->info, "trees"), *d;
    const char *k;
    if (!held)
        json_object_set_new(n->info, "trees", held = json_object());
    json_object_foreach((json_t *)data, k, d)
        json_object_set_new(held, json_string_value(json_object_get(d, "hash")), json_true());
}

uint64_t br_node_trees_missing(const br_node_t *n, const json_t *data)
{
    json_t *d;
    const char *k;
    uint64_t sum = 0;
    json_object_foreach((json_t *)data, k, d)
        if (!br_node_holds_tree(n, json_string_value(json_object_get(d, "hash"))))
            sum += (uint64_t)json_integer_value(json_object_get(d, "bytes"));
    return sum;
}

uint64_t br_node_memory(const br_node_t *n)
{
    return (uint64_t)json_integer_value(json_object_get(n->info, "memory"));
}

int br_node_gpu_count(const br_node_t *n)
{
    size_t c = json_array_size(json_object_get(n->info, "gpus"));
    return c > BR_NODE_MAX_GPUS ? BR_NODE_MAX_GPUS : (int)c;
}

json_t *br_node_gpu(const br_node_t *n, int i)
{
    return json_array_get(json_object_get(n->info, "gpus"), (size_t)i);
}

static const char *const state_names[BR_NODE_STATES] = {
    [BR_NODE_READY] = "ready",
    [BR_NODE_DRAINING] = "draining",
    [BR_NODE_UNHEALTHY] = "unhealthy",
    [BR_NODE_LOST] = "lost",
};

const char *br_node_state_name(br_node_state_t s)
{
    return (unsigned)s < BR_NODE_STATES ? state_names[s] : "unknown";
}

int br_node_state_parse(const char *name)
{
    for (int i = 0; name && i < BR_NODE_STATES; i++)
        if (strcmp(name, state_names[i]) == 0)
            return i;
    return -1;
}

#define TO(s) (1u << (s))
static const unsigned moves[BR_NODE_STATES] = {
    [BR_NODE_READY] = TO(BR_NODE_DRAINING) | TO(BR_NODE_UNHEALTHY) | TO(BR_NODE_LOST),
    [BR_NODE_DRAINING] = TO(BR_NODE_READY) | TO(BR_NODE_UNHEALTHY) | TO(BR_NODE_LOST),
    [BR_NODE_UNHEALTHY] = TO(BR_NODE_READY) | TO(BR_NODE_LOST),
    [BR_NODE_LOST] = TO(BR_NODE_READY),
};

int br_node_state_move_ok(br_node_state_t from, br_node_state_t to)
{
    if ((unsigned)from >= BR_NODE_STATES || (unsigned)to >= BR_NODE_STATES)
        return 0;
    return from == to || (moves[from] & TO(to)) != 0;
}

void br_node_set_state(br_node_t *n, br_node_state_t state)
{
    n->state = state;
    json_object_set_new(n->info, "state", json_string(br_node_state_name(state)));
}

void br_node_hold(br_node_t *n, json_t *share, int sign)
{
    if (!n || !json_is_object(share))
        return;
    n->cpus_used += sign * (int)json_integer_value(json_object_get(share, "cpus"));
    n->attempts += sign;
    if (n->attempts < 0)
        n->attempts = 0;
    n->memory_used += (uint64_t)(sign * json_integer_value(json_object_get(share, "memory")));
    json_int_t vram = json_integer_value(json_object_get(share, "vram"));
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(share, "gpus"), i, g) {
        json_int_t idx = json_integer_value(g);
        if (idx < 0 || idx >= BR_NODE_MAX_GPUS)
            continue;
        n->gpu_jobs[idx] += sign;
        if (vram > 0)
            n->gpu_vram_used[idx] += (uint64_t)(sign * vram);
        else
            n->gpu_whole[idx] += sign;
    }
    if (n->cpus_used < 0)
        n->cpus_used = 0;
}
