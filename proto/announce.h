/* announce.h - the LAN announcement datagram (PROTOCOL.md section 9): a coordinator
 * started with --announce broadcasts "bramble-announce/1\n" + JSON {"key", "port",
 * "endpoint"} on UDP; an agent whose token endpoint does not answer listens for one
 * carrying its token's server key. The datagram only says where to dial: the CURVE
 * handshake with the token's key is what decides whom to trust. */
#ifndef BRAMBLE_ANNOUNCE_H
#define BRAMBLE_ANNOUNCE_H

#include <stddef.h>

#include "cred.h"
#include "err.h"

#define BR_ANNOUNCE_PORT 7702
#define BR_ANNOUNCE_MAGIC "bramble-announce/1\n"
#define BR_ANNOUNCE_MAX 512 /* bytes in one datagram, magic included */

typedef struct {
    char key[BR_KEY_LEN + 1];       /* the coordinator's CURVE public key, Z85 */
    int port;                       /* its ZeroMQ (TCP) port */
    char endpoint[BR_ENDPOINT_MAX]; /* its advertised endpoint (may say 0.0.0.0) */
} br_announce_t;

/* The datagram for a into buf (at most BR_ANNOUNCE_MAX bytes); its length in *outlen.
 */
int br_announce_encode(const br_announce_t *a, char *buf, size_t len, size_t *outlen,
                       br_err_t *err);

/* Parse a datagram strictly: magic, then exactly one JSON object with exactly the
 * three fields, a valid key, a port 1..65535 and a printable endpoint. Any other
 * input is -1 with a reason (EPROTO), never a crash. */
int br_announce_decode(const void *buf, size_t len, br_announce_t *a, br_err_t *err);

/* "tcp://HOST:PORT" (HOST may be [v6]) -> host (brackets removed) and port. */
int br_announce_split_endpoint(const char *endpoint, char *host, size_t hostlen,
                               int *port, br_err_t *err);

/* A UDP socket bound to 0.0.0.0:port (SO_REUSEADDR, so several agents on one host
 * all hear a broadcast), non-blocking, close-on-exec. The fd, or -1. */
int br_announce_listen(int port, br_err_t *err);

/* Read one pending datagram from fd. 1: a well-formed announcement in *a, its
 * sender's IPv4 address in src; 0: nothing pending; -1: a datagram that was not an
 * announcement (reason in err, sender in src), or a socket error (src ""). */
int br_announce_recv(int fd, br_announce_t *a, char *src, size_t srclen, br_err_t *err);

#endif
