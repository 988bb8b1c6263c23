/* overlaynet.c - the overlay's addresses and keys, handed out at each node's hello
 * (overlaynet.h). */
#include "overlaynet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodes.h"
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

static json_t *place_of(br_coord_t *c, br_node_t *n, const json_t *said, json_t **answer);

/* Whether the overlay's view of a node changed between before and now (its place
 * in n->info and the new one): what its peers are told. */
static int view_changed(const json_t *before, const json_t *now)
{
    static const char *const keys[] = {"mode", "pubkey", "address", "port", "error"};
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

json_t *br_overlay_peers_news(br_coord_t *c, br_node_t *n)
{
    json_t *own = json_object_get(n->info, "overlay");
    if (n->overlay_sent == c->overlay_version + 1 || !json_is_string(json_object_get(own,
                                                                                    "address")) ||
        json_object_get(own, "error") || !json_is_string(json_object_get(own, "mode")))
        return NULL;
    json_t *list = json_array();
    for (br_node_t *o = br_nodes_first(c->nodes); o; o = o->next) {
        json_t *ov = json_object_get(o->info, "overlay");
        const char *key = json_string_value(json_object_get(ov, "pubkey"));
        const char *addr = json_string_value(json_object_get(ov, "address"));
        if (o == n || !key || !addr || json_object_get(ov, "error") ||
            !json_is_string(json_object_get(ov, "mode")))
            continue;
        if (json_array_size(list) >= BR_OVERLAY_PEERS_MAX)
            break;
        json_t *p = json_pack("{s:s, s:s, s:s}", "node", o->name, "pubkey", key, "address",
                              addr);
        const char *host = json_string_value(json_object_get(o->info, "address"));
        json_int_t port = json_integer_value(json_object_get(ov, "port"));
        if (host && *host && port > 0 && port < 65536) { /* where to reach it */
            char ep[300];
            snprintf(ep, sizeof(ep), strchr(host, ':') ? "[%s]:%lld" : "%s:%lld", host,
                     (long long)port);
            json_object_set_new(p, "endpoint", json_string(ep));
        }
        json_array_append_new(list, p);
    }
    n->overlay_sent = c->overlay_version + 1; /* (0: never told) */
    return list;
}

json_t *br_overlay_node_hello(br_coord_t *c, br_node_t *n, const json_t *said,
                              json_t **answer)
{
    json_t *now = place_of(c, n, said, answer);
    if (view_changed(json_object_get(n->info, "overlay"), now))
        c->overlay_version++; /* every peer is told */
    n->overlay_sent = 0; /* (a hello: its agent is told its peers anew) */
    return now;
}

/* What br_overlay_node_hello says, before the version is looked at. */
static json_t *place_of(br_coord_t *c, br_node_t *n, const json_t *said, json_t **answer)
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
    uint32_t a = 0;
    int keep = had && parse_addr(had, &a) == 0 && in_net(&net, a);
    if (keep) {
        addr_text(a, text);
        keep = !holder(c, n, "address", text);
    }
    if (!keep) {
        /* the lowest address no other node holds */
        uint32_t size = 1u << (32 - net.prefix);
        for (a = net.base + 1; a < net.base + size - 1; a++) {
            addr_text(a, text);
            if (!holder(c, n, "address", text))
                break;
        }
        if (a >= net.base + size - 1) {
            br_errf(&err, ENOSPC, "--overlay-net %s has no address left for it (%u nodes "
                                  "hold all %u)", c->cfg.overlay_net, size - 2, size - 2);
            json_object_del(now, "address");
            json_object_set_new(now, "error", json_string(err.text));
            *answer = json_pack("{s:s}", "error", err.text);
            return now;
        }
    }
    addr_text(a, text);
    json_object_set_new(now, "address", json_string(text));
    *answer = json_pack("{s:s, s:i}", "address", text, "prefix", net.prefix);
    return now;
}
