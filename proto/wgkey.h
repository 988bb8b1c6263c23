/* wgkey.h - WireGuard keys as `wg` writes them (Curve25519, 32 bytes, standard
 * base64 of 44 characters): made, derived and checked, for the overlay's agents
 * and for the coordinator that hands their public halves to each other. */
#ifndef BRAMBLE_WGKEY_H
#define BRAMBLE_WGKEY_H

#include "err.h"

#define BR_WGKEY_B64 45 /* a key in base64, with its NUL */
#define BR_OVERLAY_IFNAME "bramble0" /* each node's WireGuard interface, which jobs
                                      * that run over the overlay talk through */
#define BR_OVERLAY_LAN_MAX 4 /* a node's own addresses it says peers on its LAN may
                              * reach it at */

/* Whether text is a key: exactly 44 characters of standard base64 ending in '='
 * whose 32 bytes decode back to the same text. */
int br_wgkey_ok(const char *text);

/* A new private key (random, clamped as WireGuard's are), in base64. */
void br_wgkey_private(char out[BR_WGKEY_B64]);

/* The public key of private key priv (base64). 0, or -1 with err when priv is not
 * a key. */
int br_wgkey_public(const char *priv, char out[BR_WGKEY_B64], br_err_t *err);

#endif
