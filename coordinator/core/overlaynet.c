/* overlaynet.c - the overlay's addresses and keys, handed out at each node's hello
 * (overlaynet.h). */
#include "overlaynet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netmap.h"
#include "nodes.h"
#include "overlaylog.h"
#include "probeset.h"
#include "util.h"
#include "wgkey.h"

int br_overlay_net_parse(const char *cidr, br_overlay_net_t *net, br_err_t *err)
{
    char addr[32];
    const char *slash = cidr ? strchr(cidr, '/') : NULL;
    struct in_addr in;
    char *end = NULL;
    long prefix = slash ? strtol(slash + 1, &end, 10) : -1;
    if (!slash || (size_t)(slash - cidr) >= sizeof(addr) || !end || *end || end == slash + 1)
        return br_errf(err, EINVAL, "'%.60s' is not A.B.C.D/N", cidr ? cidr : "");
    memcpy(addr, cidr, (size_t)(slash - cidr));
    addr[slash - cidr] = '\0';
    if (inet_pton(AF_INET, addr, &in) != 1)
        return br_errf(err, EINVAL, "'%.60s': %s is not an IPv4 address", cidr, addr);
    if (prefix < 8 || prefix > 30)
        return br_errf(err, EINVAL, "'%.60s': the prefix must be 8 to 30 (a network of at "
                                    "least 2 nodes)", cidr);
    uint32_t base = ntohl(in.s_addr), mask = prefix == 32 ? ~0u : ~0u << (32 - prefix);
    if (base & ~mask)
        return br_errf(err, EINVAL, "'%.60s' is not a network's first address (did you mean "
                                    "%u.%u.%u.%u/%ld?)", cidr, (base & mask) >> 24,
                       ((base & mask) >> 16) & 255, ((base & mask) >> 8) & 255,
                       base & mask & 255, prefix);
    net->base = base;
    net->prefix = (int)prefix;
    return 0;
}

/* A.B.C.D into *a (host order); -1 when it is not one. */
static int parse_addr(const char *text, uint32_t *a)
{
    struct in_addr in;
    if (!text || inet_pton(AF_INET, text, &in) != 1)
        return -1;
    *a = ntohl(in.s_addr);
    return 0;
}

static void addr_text(uint32_t a, char out[16])
{
    snprintf(out, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

/* Whether a is one of net's host addresses (not its first nor its last). */
static int in_net(const br_overlay_net_t *net, uint32_t a)
{
    uint32_t size = 1u << (32 - net->prefix);
    return a > net->base && a < net->base + size - 1;
}

/* The node other than n whose overlay says key (field "pubkey") or address
 * ("address"), or NULL. */
static br_node_t *holder(br_coord_t *c, const br_node_t *n, const char *field,
                         const char *value)
{
    for (br_node_t *o = br_nodes_first(c->nodes); o; o = o->next) {
        const char *v = json_string_value(json_object_get(json_object_get(o->info, "overlay"),
                                                          field));
        if (o != n && v && strcmp(v, value) == 0)
            return o;
    }
    return NULL;
}

static json_t *place_of(br_coord_t *c, br_node_t *n, const json_t *said,
                        const char *seen_from, json_t **answer);

/* Whether the overlay's view of a node changed between before and now (its place
 * in n->info and the new one): what its peers are told. */
static int view_changed(const json_t *before, const json_t *now)
{
    static const char *const keys[] = {"mode", "pubkey", "address", "port",
                                       "error", "relay", "lan", "seen"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *a = json_object_get(before, keys[i]), *b = json_object_get(now, keys[i]);
        if ((a == NULL) != (b == NULL) || (a && !json_equal(a, b)))
            return 1;
    }
    return 0;
}

const char *br_overlay_node_address(const br_node_t *n, char *why, size_t whylen)
{
    json_t *ov = json_object_get(n->info, "overlay");
    const char *addr = json_string_value(json_object_get(ov, "address"));
    const char *error = json_string_value(json_object_get(ov, "error"));
    const char *not_why = json_string_value(json_object_get(ov, "why"));
    if (addr && !error && json_is_string(json_object_get(ov, "mode")))
        return addr;
    if (why)
        snprintf(why, whylen, "%s", error     ? error
                                    : not_why ? not_why
                                    : !ov     ? "its agent predates the overlay"
                                              : "no address yet");
    return NULL;
}

int br_overlay_wanted(const json_t *spec)
{
    const char *net = json_string_value(json_object_get(json_object_get(spec, "resources"),
                                                        "network"));
    return net && strcmp(net, "overlay") == 0;
}

/* What the overlay keeps of a node in memory (its slot on the node, nodes.h): the
 * overlay log's version its agent has its peers of, plus one (0: never told: the
 * whole list next); whether its agent takes changes to its peers alone
 * ("overlay_peers_delta"); and reach, node name -> whether its agent reached that
 * peer (NULL: it said nothing since its hello). No slot yet: all 0. */
typedef struct {
    uint64_t sent;
    int deltas;
    json_t *reach;
} node_mem_t;

static void node_mem_free(void *data)
{
    node_mem_t *m = data;
    json_decref(m->reach);
    free(m);
}

static int node_slot(void)
{
    static int slot = -1;
    if (slot < 0)
        slot = br_node_aux_slot("overlaynet");
    return slot;
}

/* n's record (NULL: none yet, or out of memory), made first when make. */
static node_mem_t *mem_of(const br_node_t *n, int make)
{
    node_mem_t *m = br_node_aux_get(n, node_slot());
    if (!m && make && node_slot() >= 0 && (m = calloc(1, sizeof(*m))))
        br_node_aux_set((br_node_t *)n, node_slot(), m, node_mem_free);
    return m;
}

/* Whether node n has a working place in the overlay: an address, a key, a mode. */
static int placed(const br_node_t *n)
{
    json_t *ov = json_object_get(n->info, "overlay");
    return json_is_string(json_object_get(ov, "address")) &&
           json_is_string(json_object_get(ov, "pubkey")) && !json_object_get(ov, "error") &&
           json_is_string(json_object_get(ov, "mode"));
}

static int is_relay(const br_node_t *n)
{
    return placed(n) && json_is_true(json_object_get(json_object_get(n->info, "overlay"),
                                                     "relay"));
}

/* What a's agent said of reaching b: 1 reached, -1 reached at none of its
 * endpoints, 0 nothing yet. */
static int said_of(const br_node_t *a, const br_node_t *b)
{
    node_mem_t *m = mem_of(a, 0);
    json_t *v = m ? json_object_get(m->reach, b->name) : NULL;
    return json_is_true(v) ? 1 : json_is_false(v) ? -1 : 0;
}

/* Whether a handshake was seen between a and b (either said so). */
static int reached(const br_node_t *a, const br_node_t *b)
{
    return said_of(a, b) == 1 || said_of(b, a) == 1;
}

/* Whether one of them tried every endpoint of the other in vain, and neither saw a
 * handshake. */
static int failed(const br_node_t *a, const br_node_t *b)
{
    return !reached(a, b) && (said_of(a, b) < 0 || said_of(b, a) < 0);
}

br_overlay_path_t br_overlay_path(br_coord_t *c, const br_node_t *a, const br_node_t *b,
                                  br_node_t **via)
{
    *via = NULL;
    if (reached(a, b))
        return BR_OVERLAY_DIRECT;
    if (!failed(a, b))
        return BR_OVERLAY_TRYING;
    br_node_t *maybe = NULL; /* one neither failed to reach yet */
    for (br_node_t *r = br_nodes_first(c->nodes); r; r = r->next) {
        if (r == a || r == b || !is_relay(r) || failed(a, r) || failed(b, r))
            continue;
        if (reached(a, r) && reached(b, r)) {
            *via = r;
            return BR_OVERLAY_RELAYED;
        }
        if (!maybe)
            maybe = r;
    }
    *via = maybe;
    return maybe ? BR_OVERLAY_RELAYED : BR_OVERLAY_NONE;
}

const char *br_overlay_path_name(br_overlay_path_t p)
{
    switch (p) {
    case BR_OVERLAY_DIRECT:
        return "direct";
    case BR_OVERLAY_RELAYED:
        return "relayed";
    case BR_OVERLAY_NONE:
        return "unreachable";
    default:
        return "trying";
    }
}

/* Whether list holds the string text. */
static int json_array_find_string(const json_t *list, const char *text)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        if (strcmp(json_string_value(v), text) == 0)
            return 1;
    }
    return 0;
}

/* Append text to list unless it is there, or the list is full. */
static void add_text(json_t *list, const char *text)
{
    if (text && json_array_size(list) < BR_OVERLAY_ENDPOINTS_MAX &&
        !json_array_find_string(list, text))
        json_array_append_new(list, json_string(text));
}

/* Append "HOST:PORT" to list unless it is there. */
static void add_endpoint(json_t *list, const char *host, json_int_t port)
{
    char ep[300];
    if (!host || !*host)
        return;
    snprintf(ep, sizeof(ep), strchr(host, ':') ? "[%s]:%lld" : "%s:%lld", host,
             (long long)port);
    add_text(list, ep);
}

/* Where n may reach o's WireGuard, the likeliest first: the address o advertised,
 * where another node's WireGuard reached it ("mapped": its router's mapping), the
 * address the coordinator sees it connect from, then its LAN addresses; its LAN
 * addresses first when both connect from the same address (behind one router). */
static json_t *endpoints_of(const br_node_t *n, const br_node_t *o)
{
    json_t *ov = json_object_get(o->info, "overlay"), *lan = json_object_get(ov, "lan"), *v;
    json_int_t port = json_integer_value(json_object_get(ov, "port"));
    const char *seen = json_string_value(json_object_get(ov, "seen"));
    const char *mine = json_string_value(json_object_get(json_object_get(n->info, "overlay"),
                                                         "seen"));
    json_t *list = json_array();
    size_t i;
    if (port <= 0 || port >= 65536)
        return list;
    int one_site = seen && mine && strcmp(seen, mine) == 0;
    const char *mapped = json_string_value(json_object_get(ov, "mapped"));
    const char *host = json_string_value(json_object_get(o->info, "address"));
    for (int pass = 0; pass < 2; pass++) {
        if (pass == (one_site ? 1 : 0)) {
            if (host && (!seen || strcmp(host, seen) != 0)) /* (one it advertised) */
                add_endpoint(list, host, port);
            add_text(list, mapped); /* (as a peer saw it: its own port) */
            add_endpoint(list, seen, port);
        } else {
            json_array_foreach(lan, i, v) {
                add_endpoint(list, json_string_value(v), port);
            }
        }
    }
    return list;
}

int br_overlay_gang_uses(br_coord_t *c, const json_t *spec, br_node_t *const *nodes, int n,
                         char *pair, size_t pairlen)
{
    const char *net = json_string_value(json_object_get(json_object_get(spec, "resources"),
                                                        "network"));
    if (net && strcmp(net, "overlay") == 0)
        return 1;
    if ((net && strcmp(net, "auto") != 0) || n < 2)
        return 0;
    for (int i = 0; i < n; i++)
        if (!nodes[i] || !placed(nodes[i]))
            return 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(nodes[i]->name, nodes[j]->name) != 0 &&
                br_netmap_rtt(c->netmap, nodes[i]->name, nodes[j]->name) == -2) {
                if (pair)
                    snprintf(pair, pairlen, "%s and %s", nodes[i]->name, nodes[j]->name);
                return 1;
            }
    return 0;
}

/* What the overlay keeps of a job in memory (its slot on the job, job.h): the
 * attempt whose network was chosen (0: none yet), and whether it runs over the
 * overlay. */
typedef struct {
    int attempt;
    int on;
} job_mem_t;

static int job_slot(void)
{
    static int slot = -1;
    if (slot < 0)
        slot = br_job_aux_slot("overlaynet");
    return slot;
}

int br_overlay_job_uses(br_coord_t *c, br_job_t *job)
{
    job_mem_t *m = br_job_aux_get(job, job_slot());
    if (m && m->attempt == job->attempt)
        return m->on;
    br_node_t **gang = calloc((size_t)job->nranks + 1, sizeof(br_node_t *));
    char pair[130] = "";
    for (int k = 0; gang && k < job->nranks; k++)
        gang[k] = br_nodes_find(c->nodes, job->ranks[k].node);
    int on = gang &&
             br_overlay_gang_uses(c, job->spec, gang, job->nranks, pair, sizeof(pair));
    free(gang);
    if (!m && job_slot() >= 0 && (m = calloc(1, sizeof(*m))))
        br_job_aux_set(job, job_slot(), m, free);
    if (m) {
        m->attempt = job->attempt;
        m->on = on;
    }
    if (on && pair[0])
        br_coord_event(c, job->id, NULL, "overlay",
                       "attempt %d runs over the overlay: %s answer no direct probe",
                       job->attempt, pair);
    return on;
}

int br_overlay_relayed_pair(void *ctx, const br_node_t *a, const br_node_t *b)
{
    br_node_t *via = NULL;
    return a != b && placed(a) && placed(b) &&
           br_overlay_path(ctx, a, b, &via) == BR_OVERLAY_RELAYED;
}

void br_overlay_seen_from(br_coord_t *c, br_node_t *n, const char *addr)
{
    json_t *ov = json_object_get(n->info, "overlay");
    const char *seen = json_string_value(json_object_get(ov, "seen"));
    if (!addr || !*addr || !seen || strcmp(seen, addr) == 0 || !placed(n))
        return;
    const char *host = json_string_value(json_object_get(n->info, "address"));
    if (host && strcmp(host, seen) == 0) { /* (not one it advertised: where it is now) */
        json_object_set_new(n->info, "address", json_string(addr));
        br_probeset_changed(c->probeset); /* its probes too */
    }
    json_object_set_new(ov, "seen", json_string(addr)); /* (in memory: a hello saves it) */
    json_object_del(ov, "mapped"); /* (its router's mapping went with its old address) */
    br_overlay_log_changed(c->overlay_log, n->name); /* its peers reach it there now */
    br_overlay_peers_whole(n); /* (and its own list is ordered by where it is) */
}

/* o's entry in n's list of peers. */
static json_t *entry_of(br_coord_t *c, br_node_t *n, br_node_t *o)
{
    json_t *ov = json_object_get(o->info, "overlay");
    json_t *p = json_pack("{s:s, s:O, s:O}", "node", o->name, "pubkey",
                          json_object_get(ov, "pubkey"), "address",
                          json_object_get(ov, "address"));
    json_t *eps = endpoints_of(n, o);
    if (json_array_size(eps)) { /* where to reach it (the first: as agents before
                                 * "endpoints" read it) */
        json_object_set(p, "endpoint", json_array_get(eps, 0));
        json_object_set(p, "endpoints", eps);
    }
    json_decref(eps);
    br_node_t *via = NULL;
    if (br_overlay_path(c, n, o, &via) == BR_OVERLAY_RELAYED && via) {
        json_object_set(p, "via", json_object_get(json_object_get(via->info, "overlay"),
                                                  "pubkey"));
        json_object_set_new(p, "via_node", json_string(via->name));
    }
    if (is_relay(o))
        json_object_set_new(p, "relay", json_true());
    return p;
}

void br_overlay_peers_whole(br_node_t *n)
{
    node_mem_t *m = mem_of(n, 0);
    if (m)
        m->sent = 0; /* (no record: never told) */
}

json_t *br_overlay_peers_news(br_coord_t *c, br_node_t *n)
{
    uint64_t version = br_overlay_log_version(c->overlay_log);
    node_mem_t *m = mem_of(n, 0);
    if ((m && m->sent == version + 1) || !placed(n))
        return NULL;
    if (!m && !(m = mem_of(n, 1)))
        return NULL; /* (out of memory: the next heartbeat) */
    /* what changed since it was told, when its agent takes that alone */
    json_t *names =
        m->sent && m->deltas ? br_overlay_log_since(c->overlay_log, m->sent - 1) : NULL;
    m->sent = version + 1; /* (0: never told) */
    if (names) {
        json_t *set = json_array(), *gone = json_array(), *v;
        size_t i;
        json_array_foreach(names, i, v) {
            br_node_t *o = br_nodes_find(c->nodes, json_string_value(v));
            if (o == n)
                continue;
            if (o && placed(o))
                json_array_append_new(set, entry_of(c, n, o));
            else
                json_array_append(gone, v);
        }
        json_decref(names);
        if (!json_array_size(set) && !json_array_size(gone)) {
            json_decref(set);
            json_decref(gone);
            return NULL;
        }
        return json_pack("{s:{s:o, s:o}}", "overlay_peers_delta", "set", set, "gone", gone);
    }
    json_t *list = json_array();
    for (br_node_t *o = br_nodes_first(c->nodes); o; o = o->next) {
        if (o == n || !placed(o))
            continue;
        if (json_array_size(list) >= BR_OVERLAY_PEERS_MAX)
            break;
        json_array_append_new(list, entry_of(c, n, o));
    }
    return json_pack("{s:o}", "overlay_peers", list);
}

void br_overlay_node_gone(br_coord_t *c, const br_node_t *n)
{
    /* a relay's peers route pairs through it: every list changes */
    br_overlay_log_changed(c->overlay_log, is_relay(n) ? NULL : n->name);
}

/* Each pair's path with n (and, when n relays, every pair's) in a new object, to
 * tell whether it changed. */
static json_t *paths_of(br_coord_t *c, const br_node_t *n)
{
    json_t *out = json_object();
    if (!placed(n))
        return out;
    int all = is_relay(n); /* (few nodes relay, and their word changes seldom) */
    for (br_node_t *a = all ? br_nodes_first(c->nodes) : (br_node_t *)n; a;
         a = all ? a->next : NULL) {
        if (all && !placed(a))
            continue;
        for (br_node_t *b = br_nodes_first(c->nodes); b; b = b->next) {
            if (b == a || (all && strcmp(a->name, b->name) > 0) || !placed(b))
                continue;
            br_node_t *via = NULL;
            br_overlay_path_t p = br_overlay_path(c, a, b, &via);
            if (p == BR_OVERLAY_RELAYED || p == BR_OVERLAY_NONE) {
                char key[140];
                snprintf(key, sizeof(key), "%s\t%s", a->name, b->name);
                json_object_set_new(out, key, json_string(via ? via->name : ""));
            }
        }
    }
    return out;
}

/* n's agent's word of the peers it reached is now reach (a new reference, or NULL:
 * none). Every node is told its peers anew when a pair's path through a relay
 * changed. */
static void reach_now(br_coord_t *c, br_node_t *n, json_t *reach)
{
    node_mem_t *m = mem_of(n, reach != NULL);
    if (!m) { /* nothing said before, and nothing now (or out of memory) */
        json_decref(reach);
        return;
    }
    json_t *before = paths_of(c, n);
    json_decref(m->reach);
    m->reach = reach;
    json_t *after = paths_of(c, n);
    for (int k = 0; k < 2; k++) { /* the pairs whose path changed: both ends' entries */
        const char *key;
        json_t *v, *other = k ? before : after;
        json_object_foreach(k ? after : before, key, v) {
            if (json_equal(v, json_object_get(other, key)))
                continue;
            char a[140];
            br_strlcpy(a, key, sizeof(a));
            char *tab = strchr(a, '\t');
            if (!tab)
                continue;
            *tab = '\0';
            br_overlay_log_changed(c->overlay_log, a);
            br_overlay_log_changed(c->overlay_log, tab + 1);
        }
    }
    json_decref(before);
    json_decref(after);
}

/* Whether text is "A.B.C.D:PORT". */
static int ipv4_endpoint(const char *text)
{
    char host[20];
    unsigned port;
    char tail;
    struct in_addr in;
    return text && sscanf(text, "%19[0-9.]:%u%c", host, &port, &tail) == 2 && port > 0 &&
           port < 65536 && inet_pton(AF_INET, host, &in) == 1;
}

int br_overlay_reach_check(const json_t *reach, br_err_t *err)
{
    static const char *const keys[] = {"reached", "unreached"};
    if (!json_is_object(reach))
        return br_errf(err, EPROTO, "node.heartbeat: overlay_reach must be an object");
    for (size_t k = 0; k < 2; k++) {
        json_t *list = json_object_get(reach, keys[k]), *v;
        size_t i;
        if (list && (!json_is_array(list) || json_array_size(list) > BR_OVERLAY_PEERS_MAX))
            return br_errf(err, EPROTO, "node.heartbeat: overlay_reach.%s must be an array "
                                        "of at most %d node names", keys[k],
                           BR_OVERLAY_PEERS_MAX);
        json_array_foreach(list, i, v) {
            if (!json_is_string(v) || json_string_length(v) >= 64)
                return br_errf(err, EPROTO, "node.heartbeat: overlay_reach.%s[%zu] is not a "
                                            "node name", keys[k], i);
        }
    }
    json_t *at = json_object_get(reach, "at"), *v;
    const char *name;
    if (at && (!json_is_object(at) || json_object_size(at) > BR_OVERLAY_PEERS_MAX))
        return br_errf(err, EPROTO, "node.heartbeat: overlay_reach.at must be an object of "
                                    "at most %d endpoints", BR_OVERLAY_PEERS_MAX);
    json_object_foreach(at, name, v) {
        if (!ipv4_endpoint(json_string_value(v)))
            return br_errf(err, EPROTO, "node.heartbeat: overlay_reach.at.%.60s is not "
                                        "A.B.C.D:PORT", name);
    }
    return 0;
}

void br_overlay_reach(br_coord_t *c, br_node_t *n, const json_t *reach)
{
    json_t *now = json_object(), *v;
    size_t i;
    const char *name;
    const char *mine = json_string_value(json_object_get(json_object_get(n->info, "overlay"),
                                                         "seen"));
    json_object_foreach(json_object_get(reach, "at"), name, v) {
        /* where n's WireGuard reaches a peer from across a router: that router's
         * mapping for it, a candidate for the others */
        br_node_t *o = br_nodes_find(c->nodes, name);
        json_t *ov = o ? json_object_get(o->info, "overlay") : NULL;
        const char *seen = json_string_value(json_object_get(ov, "seen"));
        const char *had = json_string_value(json_object_get(ov, "mapped"));
        if (!o || o == n || !placed(o) || (seen && mine && strcmp(seen, mine) == 0) || had)
            continue; /* (the first word stands until it moves or says hello: a router
                       * that maps each destination apart would have peers report
                       * another each, and its peers' first candidate would flap) */
        json_object_set(ov, "mapped", v); /* (in memory) */
        br_overlay_log_changed(c->overlay_log, o->name);
    }
    json_array_foreach(json_object_get(reach, "unreached"), i, v) {
        json_object_set_new(now, json_string_value(v), json_false());
    }
    json_array_foreach(json_object_get(reach, "reached"), i, v) {
        json_object_set_new(now, json_string_value(v), json_true());
    }
    reach_now(c, n, now);
}

json_t *br_overlay_node_paths(br_coord_t *c, br_node_t *n)
{
    if (!placed(n))
        return NULL;
    json_int_t direct = 0, trying = 0;
    json_t *relayed = json_array(), *none = json_array();
    for (br_node_t *o = br_nodes_first(c->nodes); o; o = o->next) {
        if (o == n || !placed(o))
            continue;
        br_node_t *via = NULL;
        br_overlay_path_t p = br_overlay_path(c, n, o, &via);
        if (p == BR_OVERLAY_DIRECT)
            direct++;
        else if (p == BR_OVERLAY_TRYING)
            trying++;
        else if (json_array_size(relayed) + json_array_size(none) >= BR_OVERLAY_PAIRS_SHOWN)
            continue;
        else if (p == BR_OVERLAY_RELAYED && via)
            json_array_append_new(relayed, json_pack("{s:s, s:s}", "peer", o->name, "via",
                                                     via->name));
        else
            json_array_append_new(none, json_string(o->name));
    }
    return json_pack("{s:I, s:I, s:o, s:o}", "direct", direct, "trying", trying, "relayed",
                     relayed, "unreachable", none);
}

json_t *br_overlay_pairs(br_coord_t *c)
{
    json_t *pairs = json_array();
    json_int_t counts[4] = {0};
    for (br_node_t *a = br_nodes_first(c->nodes); a; a = a->next) {
        if (!placed(a))
            continue;
        for (br_node_t *b = a->next; b; b = b->next) {
            if (!placed(b))
                continue;
            br_node_t *via = NULL;
            br_overlay_path_t p = br_overlay_path(c, a, b, &via);
            counts[p]++;
            if (p == BR_OVERLAY_DIRECT || p == BR_OVERLAY_TRYING ||
                json_array_size(pairs) >= BR_OVERLAY_PAIRS_SHOWN)
                continue;
            json_t *e = json_pack("{s:s, s:s, s:s}", "a", a->name, "b", b->name, "path",
                                  br_overlay_path_name(p));
            if (via)
                json_object_set_new(e, "via", json_string(via->name));
            json_array_append_new(pairs, e);
        }
    }
    return json_pack("{s:o, s:I, s:I, s:I, s:I}", "pairs", pairs, "direct",
                     counts[BR_OVERLAY_DIRECT], "relayed", counts[BR_OVERLAY_RELAYED],
                     "unreachable", counts[BR_OVERLAY_NONE], "trying",
                     counts[BR_OVERLAY_TRYING]);
}

json_t *br_overlay_node_hello(br_coord_t *c, br_node_t *n, const json_t *said,
                              const char *seen_from, json_t **answer)
{
    json_t *now = place_of(c, n, said, seen_from, answer);
    json_t *was = json_object_get(n->info, "overlay");
    if (view_changed(was, now)) /* every peer is told (every list, when it relays: the
                                 * pairs through it name its key) */
        br_overlay_log_changed(c->overlay_log,
                               json_is_true(json_object_get(was, "relay")) ||
                                       json_is_true(json_object_get(now, "relay"))
                                   ? NULL
                                   : n->name);
    node_mem_t *m = mem_of(n, 1);
    if (m) {
        m->deltas = json_is_true(json_object_get(said, "deltas"));
        m->sent = 0; /* (a hello: its agent is told its peers anew) */
    }
    reach_now(c, n, NULL); /* (and says anew which it reaches) */
    return now;
}

/* What br_overlay_node_hello says, before the version is looked at. */
static json_t *place_of(br_coord_t *c, br_node_t *n, const json_t *said,
                        const char *seen_from, json_t **answer)
{
    *answer = NULL;
    json_t *before = json_object_get(n->info, "overlay");
    const char *had = json_string_value(json_object_get(before, "address"));
    const char *mode = json_string_value(json_object_get(said, "mode"));
    const char *key = json_string_value(json_object_get(said, "pubkey"));
    json_t *now = json_object();
    if (had) /* the node's address is its own, whatever it runs now */
        json_object_set_new(now, "address", json_string(had));
    if (!mode) { /* it runs none: why, as it said */
        json_object_set_new(now, "mode", json_null());
        const char *why = json_string_value(json_object_get(said, "why"));
        json_object_set_new(now, "why", json_string(why ? why : "its agent predates the "
                                                                 "overlay"));
        return now;
    }
    br_overlay_net_t net;
    br_err_t err = {0};
    char text[16];
    br_node_t *other = NULL;
    json_object_set_new(now, "mode", json_string(strcmp(mode, "kernel") == 0 ? "kernel"
                                                                              : "userspace"));
    json_object_set_new(now, "relay", json_boolean(json_is_true(json_object_get(said,
                                                                                "relay"))));
    if (!br_wgkey_ok(key))
        br_errf(&err, EINVAL, "its overlay key is not a WireGuard key");
    else if ((other = holder(c, n, "pubkey", key)))
        br_errf(&err, EEXIST, "it reported the overlay key of node %s", other->name);
    else if (br_overlay_net_parse(c->cfg.overlay_net, &net, &err) < 0)
        br_err_prefix(&err, "--overlay-net");
    if (err.errnum) {
        json_object_set_new(now, "error", json_string(err.text));
        *answer = json_pack("{s:s}", "error", err.text);
        return now;
    }
    json_object_set_new(now, "pubkey", json_string(key));
    json_int_t port = json_integer_value(json_object_get(said, "port"));
    if (port > 0 && port < 65536) /* where its WireGuard listens */
        json_object_set_new(now, "port", json_integer(port));
    if (seen_from && *seen_from) /* the address it connects from (its router's) */
        json_object_set_new(now, "seen", json_string(seen_from));
    json_t *lan = json_array(), *v;
    size_t i;
    json_array_foreach(json_object_get(said, "lan"), i, v) { /* its own addresses */
        struct in_addr in;
        if (json_array_size(lan) < BR_OVERLAY_LAN_MAX && json_is_string(v) &&
            inet_pton(AF_INET, json_string_value(v), &in) == 1)
            json_array_append(lan, v);
    }
    json_object_set_new(now, "lan", lan);
    uint32_t a = 0;
    json_t *held = json_object(); /* the others' addresses, looked at once */
    for (br_node_t *o = br_nodes_first(c->nodes); o; o = o->next) {
        const char *oa = json_string_value(json_object_get(json_object_get(o->info,
                                                                           "overlay"),
                                                           "address"));
        if (o != n && oa)
            json_object_set_new(held, oa, json_true());
    }
    int keep = had && parse_addr(had, &a) == 0 && in_net(&net, a);
    if (keep) {
        addr_text(a, text);
        keep = !json_object_get(held, text);
    }
    if (!keep) {
        /* the lowest address no other node holds */
        uint32_t size = 1u << (32 - net.prefix);
        for (a = net.base + 1; a < net.base + size - 1; a++) {
            addr_text(a, text);
            if (!json_object_get(held, text))
                break;
        }
        if (a >= net.base + size - 1) {
            br_errf(&err, ENOSPC, "--overlay-net %s has no address left for it (%u nodes "
                                  "hold all %u)", c->cfg.overlay_net, size - 2, size - 2);
            json_object_del(now, "address");
            json_object_set_new(now, "error", json_string(err.text));
            *answer = json_pack("{s:s}", "error", err.text);
            json_decref(held);
            return now;
        }
    }
    json_decref(held);
    addr_text(a, text);
    json_object_set_new(now, "address", json_string(text));
    *answer = json_pack("{s:s, s:i}", "address", text, "prefix", net.prefix);
    return now;
}
