/* overlay.c - this node's side of the overlay: its WireGuard and its key (overlay.h). */
#include "overlay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"
#include "wgif.h"
#include "wgpeers.h"

struct br_overlay {
    char mode[16];     /* "kernel", "userspace" or "" (none) */
    char key_path[4200]; /* DATA_DIR/overlay.key */
    char why[200];     /* when none: why */
    char pub[BR_WGKEY_B64];
    char address[64];  /* given by the coordinator, "" before */
    int relay;
    br_wgif_t *wgif;   /* its interface, once it has an address */
    br_wgpeers_t *peers; /* its peers on it */
    int reach_news;    /* which peers it reached changed since the last heartbeat */
};

/* What running WireGuard in the kernel, or in user space, lacks here: NULL when
 * nothing. */
static const char *kernel_lacks(void)
{
    if (geteuid() != 0)
        return "the agent does not run as root (making an interface needs it)";
    if (access("/sys/module/wireguard", F_OK) != 0)
        return "the kernel has no wireguard module";
    if (!br_on_path("ip"))
        return "no `ip` on PATH (apt-get install iproute2)";
    return NULL;
}

static const char *userspace_lacks(void)
{
    if (geteuid() != 0)
        return "the agent does not run as root (making an interface needs it)";
    if (!br_on_path("wireguard-go"))
        return "no wireguard-go on PATH (apt-get install wireguard-go)";
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return "/dev/net/tun cannot be opened (no TUN devices here)";
    close(fd);
    return NULL;
}

/* The node's key: read from path, or made there. The public half into pub. */
static int node_key(const char *path, char pub[BR_WGKEY_B64], br_err_t *err)
{
    char priv[BR_WGKEY_B64 + 8];
    size_t len = 0;
    br_err_t rerr;
    char *text = br_read_file(path, 256, &len, &rerr);
    if (text) {
        while (len && (text[len - 1] == '\n' || text[len - 1] == '\r'))
            text[--len] = '\0';
        int rc = br_wgkey_public(text, pub, err);
        memset(text, 0, len);
        free(text);
        if (rc < 0)
            return br_errf(err, EINVAL, "%s: not a WireGuard private key (remove it, and "
                                        "a new one is made)", path);
        return 0;
    }
    if (rerr.errnum != ENOENT)
        return br_errf(err, rerr.errnum, "%s", rerr.text);
    br_wgkey_private(priv);
    strcat(priv, "\n");
    if (br_write_file(path, priv, strlen(priv), 0600, err) < 0)
        return -1;
    priv[BR_WGKEY_B64 - 1] = '\0';
    int rc = br_wgkey_public(priv, pub, err);
    memset(priv, 0, sizeof(priv));
    return rc;
}

br_overlay_t *br_overlay_new(const char *mode, const char *data_dir, int relay,
                             br_err_t *err)
{
    br_overlay_t *o = calloc(1, sizeof(*o));
    if (!o)
        return br_errp(err, ENOMEM, "out of memory");
    o->relay = relay;
    mode = mode && *mode ? mode : "auto";
    const char *kernel = NULL, *user = NULL;
    if (strcmp(mode, "off") == 0) {
        br_strlcpy(o->why, "off (--overlay off)", sizeof(o->why));
    } else if (strcmp(mode, "kernel") == 0) {
        if ((kernel = kernel_lacks())) {
            free(o);
            return br_errp(err, ENOTSUP, "--overlay kernel: %s", kernel);
        }
        br_strlcpy(o->mode, "kernel", sizeof(o->mode));
    } else if (strcmp(mode, "userspace") == 0) {
        if ((user = userspace_lacks())) {
            free(o);
            return br_errp(err, ENOTSUP, "--overlay userspace: %s", user);
        }
        br_strlcpy(o->mode, "userspace", sizeof(o->mode));
    } else if (strcmp(mode, "auto") == 0) {
        if (!(kernel = kernel_lacks()))
            br_strlcpy(o->mode, "kernel", sizeof(o->mode));
        else if (!(user = userspace_lacks()))
            br_strlcpy(o->mode, "userspace", sizeof(o->mode));
        else
            snprintf(o->why, sizeof(o->why), "none here: %s; %s", kernel, user);
    } else {
        free(o);
        return br_errp(err, EINVAL, "--overlay '%s': expected auto, kernel, userspace or off",
                       mode);
    }
    snprintf(o->key_path, sizeof(o->key_path), "%s/overlay.key", data_dir);
    if (o->mode[0] && !(o->peers = br_wgpeers_new(BR_WGIF_NAME))) {
        free(o);
        return br_errp(err, ENOMEM, "out of memory");
    }
    if (o->mode[0]) {
        if (node_key(o->key_path, o->pub, err) < 0) {
            br_wgpeers_destroy(&o->peers);
            free(o);
            return NULL;
        }
    }
    return o;
}

void br_overlay_destroy(br_overlay_t **o)
{
    if (o && *o) {
        br_wgif_destroy(&(*o)->wgif);
        br_wgpeers_destroy(&(*o)->peers);
        free(*o);
        *o = NULL;
    }
}

void br_overlay_leave(br_overlay_t **o)
{
    if (o && *o && (*o)->wgif)
        br_wgif_leave(&(*o)->wgif);
    br_overlay_destroy(o);
}

const char *br_overlay_mode(const br_overlay_t *o)
{
    return o && o->mode[0] ? o->mode : NULL;
}

const char *br_overlay_why_not(const br_overlay_t *o)
{
    return o && !o->mode[0] ? o->why : NULL;
}

/* Whether interface name is one whose addresses are no way to this host from
 * another (the overlay's own, containers' bridges and their ends). */
static int not_a_way_in(const char *name)
{
    static const char *const skip[] = {BR_WGIF_NAME, "docker", "podman", "cni", "veth",
                                       "br-", "virbr", "flannel", "cali", "lxc"};
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
        if (strncmp(name, skip[i], strlen(skip[i])) == 0)
            return 1;
    return 0;
}

/* The host's IPv4 addresses a peer on its LAN may reach it at (at most
 * BR_OVERLAY_LAN_MAX). */
static json_t *lan_addresses(void)
{
    json_t *out = json_array();
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) < 0)
        return out;
    for (struct ifaddrs *i = all; i && json_array_size(out) < BR_OVERLAY_LAN_MAX;
         i = i->ifa_next) {
        char text[INET_ADDRSTRLEN];
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK) || not_a_way_in(i->ifa_name) ||
            !inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, text,
                       sizeof(text)))
            continue;
        json_array_append_new(out, json_string(text));
    }
    freeifaddrs(all);
    return out;
}

json_t *br_overlay_hello(const br_overlay_t *o)
{
    if (!o->mode[0])
        return json_pack("{s:n, s:s}", "mode", "why", o->why);
    return json_pack("{s:s, s:s, s:b, s:i, s:o, s:b}", "mode", o->mode, "pubkey", o->pub,
                     "relay", o->relay, "port", BR_WGIF_PORT, "lan", lan_addresses(), "deltas",
                     1);
}

/* The interface up with address/prefix; its peers forgotten when it was made
 * anew, and forwarding for the others when this node is a relay. */
static void bring_up(br_overlay_t *o, const char *addr, int prefix)
{
    br_err_t err;
    int made = br_wgif_up(o->wgif, o->mode, o->key_path, o->pub, addr, prefix, &err);
    if (made < 0) {
        fprintf(stderr, "bramble-agent: %s\n", err.text);
        return;
    }
    if (made == 0)
        return;
    if (made == 2) /* (taken over: the peers it reached stay as they are) */
        br_wgpeers_adopt(o->peers);
    else
        br_wgpeers_forget(o->peers);
    struct in_addr in;
    char net[64];
    uint32_t a = inet_pton(AF_INET, addr, &in) == 1 ? ntohl(in.s_addr) : 0;
    uint32_t mask = prefix <= 0 ? 0 : prefix >= 32 ? ~0u : ~0u << (32 - prefix);
    a &= mask;
    snprintf(net, sizeof(net), "%u.%u.%u.%u/%d", a >> 24, (a >> 16) & 255, (a >> 8) & 255,
             a & 255, prefix);
    if (br_wgif_relay(o->wgif, o->relay ? net : NULL, &err) < 0)
        fprintf(stderr, "bramble-agent: overlay: this node cannot relay: %s\n", err.text);
    else if (o->relay)
        fprintf(stderr, "bramble-agent: overlay: this node relays between peers of %s\n",
                net);
}

void br_overlay_assigned(br_overlay_t *o, const json_t *answer)
{
    const char *addr = json_string_value(json_object_get(answer, "address"));
    const char *error = json_string_value(json_object_get(answer, "error"));
    char now[64] = "";
    if (addr)
        snprintf(now, sizeof(now), "%s/%lld", addr,
                 (long long)json_integer_value(json_object_get(answer, "prefix")));
    if (strcmp(now, o->address) != 0 || (error && o->address[0])) {
        if (addr)
            fprintf(stderr, "bramble-agent: overlay (%s): this node is %s\n", o->mode, now);
        else
            fprintf(stderr, "bramble-agent: overlay: the coordinator gave no address: %s\n",
                    error ? error : "(it runs no overlay)");
        br_strlcpy(o->address, now, sizeof(o->address));
    }
    o->reach_news = 1; /* (a hello: the coordinator hears which peers it reached anew) */
    if (addr && o->mode[0] && (o->wgif || (o->wgif = br_wgif_new())))
        bring_up(o, addr, (int)json_integer_value(json_object_get(answer, "prefix")));
    if (!addr && o->wgif) { /* (no place in the overlay: no interface either) */
        br_wgif_destroy(&o->wgif);
        br_wgpeers_forget(o->peers);
    }
}

void br_overlay_peers(br_overlay_t *o, const json_t *peers)
{
    br_err_t err;
    char addr[64];
    int prefix = 0;
    if (o->wgif && !br_wgif_is_up(o->wgif) && o->address[0] &&
        sscanf(o->address, "%63[^/]/%d", addr, &prefix) == 2) /* (it went down) */
        bring_up(o, addr, prefix);
    if (!o->wgif || !br_wgif_is_up(o->wgif))
        return;
    size_t had = br_wgpeers_count(o->peers);
    if ((json_is_array(peers) ? br_wgpeers_set(o->peers, peers, br_mono_ms(), &err)
                              : br_wgpeers_update(o->peers, peers, br_mono_ms(), &err)) < 0)
        fprintf(stderr, "bramble-agent: %s\n", err.text);
    if (had != br_wgpeers_count(o->peers))
        fprintf(stderr, "bramble-agent: overlay: %zu peers\n", br_wgpeers_count(o->peers));
    o->reach_news = 1;
}

void br_overlay_tick(br_overlay_t *o, int64_t now)
{
    br_err_t err;
    if (!o || !o->wgif || !br_wgif_is_up(o->wgif))
        return;
    int rc = br_wgpeers_tick(o->peers, now, &err);
    if (rc < 0)
        fprintf(stderr, "bramble-agent: %s\n", err.text);
    else if (rc > 0)
        o->reach_news = 1;
}

json_t *br_overlay_reach_news(br_overlay_t *o)
{
    if (!o || !o->reach_news || !o->wgif || !br_wgif_is_up(o->wgif))
        return NULL;
    o->reach_news = 0;
    return br_wgpeers_reach(o->peers);
}

int br_overlay_rotate(br_overlay_t *o, br_err_t *err)
{
    if (!o->mode[0])
        return 0;
    char next[4300], priv[BR_WGKEY_B64 + 1], pub[BR_WGKEY_B64];
    snprintf(next, sizeof(next), "%s.new", o->key_path);
    br_wgkey_private(priv);
    int rc = br_wgkey_public(priv, pub, err);
    strcat(priv, "\n");
    if (rc == 0 && br_write_file(next, priv, strlen(priv), 0600, err) < 0)
        rc = -1;
    if (rc == 0 && rename(next, o->key_path) < 0)
        rc = br_errf(err, errno, "%s: %s", o->key_path, strerror(errno));
    memset(priv, 0, sizeof(priv));
    if (rc < 0) {
        unlink(next);
        return -1;
    }
    br_strlcpy(o->pub, pub, sizeof(o->pub));
    br_wgif_destroy(&o->wgif); /* (made again with the new key at the next hello) */
    br_wgpeers_forget(o->peers);
    o->address[0] = '\0';
    return 0;
}

int br_overlay_reaped(br_overlay_t *o, int pid, int status)
{
    if (!o || !o->wgif || !br_wgif_reaped(o->wgif, pid, status))
        return 0;
    br_wgpeers_forget(o->peers); /* (the interface went with them) */
    return 1;
}

