/* overlay.h - this node's side of the WireGuard overlay bramble runs between its
 * nodes (docs/overlay.md): which WireGuard it can run (--overlay
 * auto|kernel|userspace|off) and its key pair.
 *
 * The private key is made here (libsodium's X25519, clamped as WireGuard's are),
 * kept in DATA_DIR/overlay.key (0600, base64 as `wg` writes it) and never leaves
 * the node; the public half goes to the coordinator in the hello, over CURVE,
 * which hands out the node's overlay address from its --overlay-net.
 *
 * Which WireGuard (for an agent running as root: making an interface needs it):
 * kernel where the kernel has its module (/sys/module/wireguard) and `ip` is
 * here; user space where Debian's `wireguard-go` is on PATH and /dev/net/tun
 * opens; auto takes the kernel's, else user space's, else none (the
 * node then runs no overlay, and says why). */
#ifndef BRAMBLE_OVERLAY_H
#define BRAMBLE_OVERLAY_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"
#include "wgkey.h"

typedef struct br_overlay br_overlay_t;

/* mode: "auto", "kernel", "userspace" or "off" (NULL: auto); data_dir holds its
 * key (made when missing). NULL with err: a mode that is not one of those, one
 * asked for by name that this node cannot run (naming what is missing), a key file
 * that is not a key. */
br_overlay_t *br_overlay_new(const char *mode, const char *data_dir, int relay,
                             br_err_t *err);
void br_overlay_destroy(br_overlay_t **o);
/* Destroy, leaving the interface up (and wireguard-go running) for the next agent,
 * which takes it over: the agent stops for another (SIGUSR2) and its jobs go on. */
void br_overlay_leave(br_overlay_t **o);

/* "kernel", "userspace", or NULL when this node runs no overlay. */
const char *br_overlay_mode(const br_overlay_t *o);

/* Why it runs none ("off", or what auto found missing), or NULL when it runs one. */
const char *br_overlay_why_not(const br_overlay_t *o);

/* What the hello says of it: {"mode", "pubkey", "relay"} (new), or {"mode": null,
 * "why"} when it runs none. */
json_t *br_overlay_hello(const br_overlay_t *o);

/* The hello's answer said: {"address": "A.B.C.D", "prefix": N} (this node's
 * address in the overlay), or {"error"}; kept, said on stderr when it changed, and
 * its interface brought up with it (wgif.h), or taken down when it has none. */
void br_overlay_assigned(br_overlay_t *o, const json_t *answer);

/* A new key pair (`bramble node rotate-key`), the old private key replaced on
 * disk; nothing when the node runs no overlay. 0, or -1 with err (the old key
 * stays). The next hello says the new public key (br_overlay_hello). */
int br_overlay_rotate(br_overlay_t *o, br_err_t *err);

/* The peers the coordinator says this node has: all of them (an array, its
 * "overlay_peers") or what changed since (an object, its "overlay_peers_delta"):
 * its interface's, from now on (wgpeers.h). */
void br_overlay_peers(br_overlay_t *o, const json_t *peers);

/* The agent reaped pid: 1 when it was the overlay's (its wireguard-go). */
int br_overlay_reaped(br_overlay_t *o, int pid, int status);

/* Look at the peers' handshakes and try the unreached ones' next endpoints
 * (wgpeers.h); now: monotonic ms. Called from the agent's loop. */
void br_overlay_tick(br_overlay_t *o, int64_t now);

/* For a heartbeat: {"reached", "unreached", "at"} (wgpeers.h) when it changed
 * since the last one (or a hello was answered), else NULL. */
json_t *br_overlay_reach_news(br_overlay_t *o);

#endif
