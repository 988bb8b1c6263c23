/* nodes.c - the coordinator's registry of nodes in memory. */
#include "nodes.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

struct br_nodes {
    br_node_t *head; /* sorted by name */
};

br_nodes_t *br_nodes_new(void)
{
    return calloc(1, sizeof(br_nodes_t));
}

static void node_free(br_node_t *n)
{
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
        free(*nodes);
        *nodes = NULL;
    }
}

br_node_t *br_nodes_find(br_nodes_t *nodes, const char *name)
{
    for (br_node_t *n = nodes->head; n; n = n->next)
        if (strcmp(n->name, name) == 0)
            return n;
    return NULL;
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
    n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    br_strlcpy(n->name, name, sizeof(n->name));
    br_strlcpy(n->pubkey, key, sizeof(n->pubkey));
    n->info = json_deep_copy(info);
    br_node_set_state(n, state ? state : "lost");
    br_node_t **pp = &nodes->head;
    while (*pp && strcmp((*pp)->name, name) < 0)
        pp = &(*pp)->next;
    n->next = *pp;
    *pp = n;
    return n;
}

void br_nodes_remove(br_nodes_t *nodes, const char *name)
{
    for (br_node_t **pp = &nodes->head; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            br_node_t *n = *pp;
            *pp = n->next;
            node_free(n);
            return;
        }
    }
}

br_node_t *br_nodes_first(br_nodes_t *nodes)
{
    return nodes->head;
}

int br_node_cpus(const br_node_t *n)
{
    return (int)json_integer_value(json_object_get(n->info, "cpus"));
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

void br_node_set_state(br_node_t *n, const char *state)
{
    br_strlcpy(n->state, state, sizeof(n->state));
    json_object_set_new(n->info, "state", json_string(state));
}
