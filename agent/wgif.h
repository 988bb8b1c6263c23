/* wgif.h - this node's WireGuard interface, BR_WGIF_NAME (docs/overlay.md): made in
 * the kernel (`ip link add ... type wireguard`) or by Debian's wireguard-go (a
 * child of the agent, in the foreground, with
 * WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 where the kernel has no
 * module), configured with `wg` (the node's private key from its file, the listen
 * port, its peers) and `ip` (its overlay address, up), and removed when the agent
 * stops. One left by an agent that was killed is removed before a new one is made.
 *
 * Each step is a short command the agent waits for (quietrun.h), and only when
 * something changed (the node's address, a hello's answer). Its peers are
 * wgpeers.h's. */
#ifndef BRAMBLE_WGIF_H
#define BRAMBLE_WGIF_H

#include <jansson.h>

#include "err.h"
#include "wgkey.h"

#define BR_WGIF_NAME BR_OVERLAY_IFNAME
#define BR_WGIF_PORT 51820 /* the UDP port it listens on (WireGuard's usual) */

typedef struct br_wgif br_wgif_t;

br_wgif_t *br_wgif_new(void);
/* Removes the interface (and stops wireguard-go) when it made one. */
void br_wgif_destroy(br_wgif_t **w);
/* Forget it, leaving the interface up and wireguard-go running (the next agent
 * takes them over: br_wgif_up finds the interface with this node's key). */
void br_wgif_leave(br_wgif_t **w);

/* Bring the interface up, or change its address: mode "kernel" or "userspace",
 * key_file the node's private key and pub its public half (an interface already
 * there with it is taken over as it is), address "A.B.C.D", prefix its net's. 0 (it
 * was up), 1 (made anew: no peers), 2 (taken over, with the peers it had), or -1
 * with err naming the step that failed and what it said. */
int br_wgif_up(br_wgif_t *w, const char *mode, const char *key_file, const char *pub,
               const char *address, int prefix, br_err_t *err);

/* The agent reaped pid (status): when it was this interface's wireguard-go, the
 * interface is gone; 1 then (said on stderr), else 0. */
int br_wgif_reaped(br_wgif_t *w, int pid, int status);

/* Whether it is up. */
int br_wgif_is_up(const br_wgif_t *w);

/* As a relay (net: the overlay's "A.B.C.D/N"): forward what comes in on the
 * interface for another of net's addresses back out to that peer, and nothing
 * else (a rule that looks up what comes in on it in a table of net alone, and
 * the interface's forwarding on, its redirects off); net NULL: not a relay (what
 * an agent that was one left is removed). 0, or -1 with err. */
int br_wgif_relay(br_wgif_t *w, const char *net, br_err_t *err);
#endif
