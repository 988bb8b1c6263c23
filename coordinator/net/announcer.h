/* announcer.h - the coordinator's LAN announcer (brambled --announce / --teaching): a
 * thread of its own that broadcasts the announcement datagram (proto/announce.h)
 * every 2 s to 255.255.255.255 and to each interface's broadcast address, so agents
 * whose token endpoint is stale find it. The server's poll loop never sees it. */
#ifndef BRAMBLE_COORD_ANNOUNCER_H
#define BRAMBLE_COORD_ANNOUNCER_H

#include "err.h"

#define BR_ANNOUNCE_INTERVAL_MS 2000

typedef struct br_announcer br_announcer_t;

/* Start announcing key (Z85), the port of listen (tcp://HOST:PORT) and advertise on
 * UDP port udp_port. Fails (nothing started) on a listen endpoint with no TCP port or
 * when the socket or thread cannot be made. */
br_announcer_t *br_announcer_new(const char *key, const char *listen,
                                 const char *advertise, int udp_port, br_err_t *err);

/* Stop the thread (joined) and close the socket; accepts NULL, keeps errno. */
void br_announcer_destroy(br_announcer_t **an);

#endif
