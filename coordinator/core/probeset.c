/* probeset.c - the peers each agent probes (probeset.h). */
#include "probeset.h"

#include <sodium.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netmap.h"
#include "util.h"

typedef struct {
    char node[64];
    char addr[64];
    char overlay[16]; /* its overlay address, "" none */
    int port;
} peer_t;

struct br_probeset {
    peer_t *peers; /* in name order, as the registry lists nodes */
    size_t len, cap;
    int version;   /* what the peers reflect */
    int wanted;    /* what they are to reflect */
    int64_t built_at;
    char key[65];  /* hex: the key agents' probes are signed with */
};

br_probeset_t *br_probeset_new(const char *secret_key)
{
    br_probeset_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->version = -1;
    unsigned char pk[32];
    crypto_generichash(pk, sizeof(pk), (const unsigned char *)"bramble probe key", 17,
                       (const unsigned char *)secret_key, strlen(secret_key));
    sodium_bin2hex(p->key, sizeof(p->key), pk, sizeof(pk));
    sodium_memzero(pk, sizeof(pk));
    return p;
}

const char *br_probeset_key(const br_probeset_t *p)
{
    return p->key;
}

void br_probeset_changed(br_probeset_t *p)
{
    p->wanted++;
}

int br_probeset_wanted(const br_probeset_t *p)
{
    return p->wanted;
}

void br_probeset_destroy(br_probeset_t **p)
{
    if (p && *p) {
        free((*p)->peers);
        free(*p);
        *p = NULL;
    }
}

static int add(br_probeset_t *p, const br_node_t *n, const char *addr, int port)
{
    if (p->len == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        peer_t *np = realloc(p->peers, cap * sizeof(*np));
        if (!np)
            return -1;
        p->peers = np;
        p->cap = cap;
    }
    peer_t *q = &p->peers[p->len++];
    br_strlcpy(q->node, n->name, sizeof(q->node));
    br_strlcpy(q->addr, addr, sizeof(q->addr));
    q->port = port;
    /* its overlay address when it has a working place in the overlay (overlaynet.h) */
    json_t *ov = json_object_get(n->info, "overlay");
    const char *oaddr = json_string_value(json_object_get(ov, "address"));
    q->overlay[0] = '\0';
    if (oaddr && json_is_string(json_object_get(ov, "mode")) && !json_object_get(ov, "error"))
        br_strlcpy(q->overlay, oaddr, sizeof(q->overlay));
    return 0;
}

int br_probeset_refresh(br_probeset_t *p, br_nodes_t *nodes, int64_t now_ms)
{
    int version = p->wanted;
    if (version == p->version ||
        (p->version >= 0 && now_ms - p->built_at < BR_PROBESET_REBUILD_MS))
        return p->version;
    p->len = 0;
    for (br_node_t *n = br_nodes_first(nodes); n; n = n->next) {
        if (!n->route_len) /* not connected */
            continue;
        json_t *port = json_object_get(n->info, "probe_port");
        const char *addr = json_string_value(json_object_get(n->info, "address"));
        if (json_is_integer(port) && addr && *addr &&
            add(p, n, addr, (int)json_integer_value(port)) < 0) {
            p->len = 0; /* out of memory: built again at the next call */
            return p->version;
        }
    }
    p->version = version;
    p->built_at = now_ms;
    return p->version;
}

size_t br_probeset_size(const br_probeset_t *p)
{
    return p->len;
}

static uint64_t mix(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL; /* FNV-1a */
    return (h ^ 0xff) * 1099511628211ULL;                /* a separator */
}

/* The first index after self's name (the set is in name order). */
static size_t after(const br_probeset_t *p, const char *self)
{
    size_t lo = 0, hi = p->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(p->peers[mid].node, self) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

json_t *br_probeset_peers(const br_probeset_t *p, const char *self, uint64_t last,
                          uint64_t *hash)
{
    size_t len = p->len, count = 0, a = after(p, self);
    int in_set = a > 0 && strcmp(p->peers[a - 1].node, self) == 0;
    size_t others = len - (size_t)in_set;
    size_t first = others > BR_PROBE_PEERS_MAX ? a : 0; /* too many: the ones after self */
    int overlay = in_set && p->peers[a - 1].overlay[0]; /* it probes overlay paths too */
    uint64_t h = 1469598103934665603ULL;
    char port[16];
    for (size_t k = 0; k < len && count < BR_PROBE_PEERS_MAX; k++) {
        const peer_t *q = &p->peers[(first + k) % len];
        if (strcmp(q->node, self) == 0)
            continue;
        snprintf(port, sizeof(port), "%d", q->port);
        h = mix(mix(mix(h, q->node), q->addr), port);
        if (overlay)
            h = mix(h, q->overlay);
        count++;
    }
    *hash = h ? h : 1;
    if (*hash == last)
        return NULL;
    json_t *peers = json_array();
    count = 0;
    for (size_t k = 0; k < len && count < BR_PROBE_PEERS_MAX; k++) {
        const peer_t *q = &p->peers[(first + k) % len];
        if (strcmp(q->node, self) == 0)
            continue;
        json_array_append_new(peers, json_pack("{s:s, s:s, s:i}", "node", q->node, "addr",
                                               q->addr, "port", q->port));
        if (overlay && q->overlay[0]) { /* the same peer over the overlay */
            char name[80];
            snprintf(name, sizeof(name), "%s" BR_PROBE_OVERLAY_SUFFIX, q->node);
            json_array_append_new(peers, json_pack("{s:s, s:s, s:i}", "node", name, "addr",
                                                   q->overlay, "port", q->port));
        }
        count++;
    }
    return peers;
}

/* What a node's agent was sent (its slot on the node): the version of the set it
 * heard of, the digest of the list it was sent (0: none since its hello), and when
 * (monotonic ms). No slot yet: all 0. */
typedef struct {
    int sent;
    uint64_t hash;
    int64_t at;
} told_t;

static int told_slot(void)
{
    static int slot = -1;
    if (slot < 0)
        slot = br_node_aux_slot("probeset");
    return slot;
}

/* n's record, made when make (NULL: none, or out of memory). */
static told_t *told_of(br_node_t *n, int make)
{
    told_t *t = br_node_aux_get(n, told_slot());
    if (!t && make && told_slot() >= 0 && (t = calloc(1, sizeof(*t))))
        br_node_aux_set(n, told_slot(), t, free);
    return t;
}

void br_probeset_hello(br_probeset_t *p, br_node_t *n)
{
    br_probeset_changed(p);
    told_t *t = told_of(n, 1);
    if (t) {
        t->sent = br_probeset_wanted(p) - 1;
        t->hash = 0; /* a new agent, or one that reconnected: its next heartbeat says */
    }
}

json_t *br_probeset_news(br_probeset_t *p, br_nodes_t *nodes, br_node_t *n,
                         int64_t now_ms)
{
    told_t none = {0}, *t = told_of(n, 0);
    if ((t ? t : &none)->sent == br_probeset_wanted(p))
        return NULL;
    int version = br_probeset_refresh(p, nodes, now_ms);
    if (version < 0 || (t ? t : &none)->sent == version)
        return NULL;
    if (!t && !(t = told_of(n, 1)))
        return NULL; /* (out of memory: the next heartbeat) */
    if (t->hash && br_probeset_size(p) > BR_PROBE_PEERS_MAX &&
        now_ms - t->at < BR_PROBE_INTERVAL_MS)
        return NULL;
    uint64_t hash;
    json_t *peers = br_probeset_peers(p, n->name, t->hash, &hash);
    t->sent = version;
    if (peers) {
        t->hash = hash;
        t->at = now_ms;
    }
    return peers;
}
