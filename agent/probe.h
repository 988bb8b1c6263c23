/* probe.h - the agent's network probes: round-trip times to the other nodes, for
 * the coordinator's network map and for placing gangs on nodes close together.
 *
 * Each agent answers probes on one UDP port and sends a probe to every peer the
 * coordinator names, once per interval. A probe is 36 bytes: "BRP1", type (ping or
 * pong), sequence number, the sender's clock, and a 16-byte keyed BLAKE2b MAC under
 * the cluster's probe key (handed to agents over their CURVE connection). Pings
 * without a valid MAC are dropped; a pong is never larger than its ping, so the
 * port cannot amplify anything. The reported figure per peer is the median of the
 * last few answers, in milliseconds; a peer that stopped answering reads as lost. */
#ifndef BRAMBLE_PROBE_H
#define BRAMBLE_PROBE_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"

#define BR_PROBE_PORT 7703
#define BR_PROBE_KEY_LEN 32
#define BR_PROBE_PACKET 36

typedef struct br_probe br_probe_t;

/* Listen on UDP port (0: a port the kernel picks). When port is taken, falls back
 * to a kernel-picked one and says so on stderr. */
br_probe_t *br_probe_new(int port, br_err_t *err);
void br_probe_destroy(br_probe_t **p);

int br_probe_fd(const br_probe_t *p);
int br_probe_port(const br_probe_t *p); /* the port it listens on */

/* The key (hex, 64 digits) and interval from the coordinator; until a key is set,
 * nothing is sent or answered. */
int br_probe_set_key(br_probe_t *p, const char *hex, int64_t interval_ms, br_err_t *err);

/* The peers to measure: [{"node", "addr", "port"}]. Measurements of peers that stay
 * (same name and address) are kept. */
void br_probe_set_peers(br_probe_t *p, json_t *peers);

/* Answer and record what has arrived on the socket. */
void br_probe_read(br_probe_t *p);
/* Send the probes that are due. Returns ms until the next one (or -1: none). */
int64_t br_probe_tick(br_probe_t *p, int64_t now_ms);

/* {"peer": ms, ...}: the median of the last answers; null for a peer that has not
 * answered in three intervals. New reference. */
json_t *br_probe_report(const br_probe_t *p, int64_t now_ms);

/* Packet encoding, exposed for the unit test. type: 1 ping, 2 pong. Returns the
 * length written (BR_PROBE_PACKET), or -1 on a short buffer. */
int br_probe_pack(uint8_t *buf, size_t len, int type, uint32_t seq, uint64_t t_ns,
                  const uint8_t key[BR_PROBE_KEY_LEN]);
/* 0 and the fields for a well-formed packet with a valid MAC, else -1. */
int br_probe_unpack(const uint8_t *buf, size_t len, const uint8_t key[BR_PROBE_KEY_LEN],
                    int *type, uint32_t *seq, uint64_t *t_ns);

#endif
