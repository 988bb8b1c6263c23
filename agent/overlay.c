/* overlay.c - this node's side of the overlay: its WireGuard and its key (overlay.h). */
#include "overlay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"
#include "wgif.h"

struct br_overlay {
    char mode[16];     /* "kernel", "userspace" or "" (none) */
    char key_path[4200]; /* DATA_DIR/overlay.key */
    char why[200];     /* when none: why */
    char pub[BR_WGKEY_B64];
    char address[64];  /* given by the coordinator, "" before */
    int relay;
    br_wgif_t *wgif;   /* its interface, once it has an address */
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
    if (o->mode[0]) {
        if (node_key(o->key_path, o->pub, err) < 0) {
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

json_t *br_overlay_hello(const br_overlay_t *o)
{
    if (!o->mode[0])
        return json_pack("{s:n, s:s}", "mode", "why", o->why);
    return json_pack("{s:s, s:s, s:b, s:i}", "mode", o->mode, "pubkey", o->pub, "relay",
                     o->relay, "port", BR_WGIF_PORT);
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
    br_err_t err;
    if (addr && o->mode[0] && (o->wgif || (o->wgif = br_wgif_new())) &&
        br_wgif_up(o->wgif, o->mode, o->key_path, o->pub, addr,
                   (int)json_integer_value(json_object_get(answer, "prefix")), &err) < 0)
        fprintf(stderr, "bramble-agent: %s\n", err.text);
    if (!addr && o->wgif) /* (no place in the overlay: no interface either) */
        br_wgif_destroy(&o->wgif);
}

void br_overlay_peers(br_overlay_t *o, const json_t *peers)
{
    br_err_t err;
    char addr[64];
    int prefix = 0;
    if (o->wgif && !br_wgif_is_up(o->wgif) && o->address[0] &&
        sscanf(o->address, "%63[^/]/%d", addr, &prefix) == 2 && /* (it went down) */
        br_wgif_up(o->wgif, o->mode, o->key_path, o->pub, addr, prefix, &err) < 0)
        fprintf(stderr, "bramble-agent: %s\n", err.text);
    if (o->wgif && br_wgif_peers(o->wgif, peers, &err) < 0)
        fprintf(stderr, "bramble-agent: %s\n", err.text);
    else if (o->wgif)
        fprintf(stderr, "bramble-agent: overlay: %zu peers\n", json_array_size(peers));
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
    o->address[0] = '\0';
    return 0;
}

int br_overlay_reaped(br_overlay_t *o, int pid, int status)
{
    return o && o->wgif && br_wgif_reaped(o->wgif, pid, status);
}

const char *br_overlay_address(const br_overlay_t *o)
{
    return o->address;
}
