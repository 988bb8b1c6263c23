/* relay.h - the coordinator's stream relay: a thread of its own with a ROUTER of
 * its own (the coordinator's port + 1, or any free one), which joins the two ends
 * of each shell or forward (proto/stream.h) - the CLI that asked and the agent of
 * the job's node, both of which dial in, since nodes accept nothing - and passes
 * their frames between them, off the coordinator's loop.
 *
 * The ends seal what they send each other with the stream's key, which the loop
 * gave each over its CURVE connection and the relay never holds
 * (proto/streamseal.h): the relay's socket does no CURVE of its own, and passes
 * bytes it can neither read nor change. The loop grants each stream
 * (br_relay_open) after it checked who may; the relay admits to a stream only the
 * end that shows its ticket (as secret as the key, and given with it), each end
 * once. It holds the credit of both directions and closes a
 * stream whose sender goes beyond it, so a client that floods or never reads
 * stalls its own stream and nothing else. An end silent for BR_STREAM_GONE_MS (the
 * CLI's and the agent's pings stop) closes the stream, telling the other end; the
 * relay pings each attached end twice a second, so that each end knows it is there
 * and so that an end whose connection closed is found at once (its route is gone). */
#ifndef BRAMBLE_COORD_RELAY_H
#define BRAMBLE_COORD_RELAY_H

#include <stdint.h>

#include "err.h"
#include "stream.h"

#define BR_RELAY_ATTACH_MS 15000 /* both ends attach within this, or it closes */

typedef struct br_relay br_relay_t;

/* Listen next to listen (tcp://HOST:PORT: PORT + 1, or any free port on HOST when
 * that is taken or PORT is 0) and start the thread. per_user and total bound the
 * streams open at once. The relay has a ZeroMQ context of its own, and its threads
 * (its loop and the context's I/O thread, which moves every frame) run as
 * SCHED_IDLE (nice 10 where that is refused): on a busy machine a forward's bytes
 * wait, not the heartbeats. */
br_relay_t *br_relay_new(const char *listen, int per_user, int total, br_err_t *err);
void br_relay_destroy(br_relay_t **r);
int br_relay_port(const br_relay_t *r);

/* One stream, as the loop grants it. */
typedef struct {
    int64_t user_id;          /* whose (the per-user bound) */
    int64_t job;
    char cli_key[41];         /* the CURVE key of the CLI that asked (br_relay_cut) */
    char node_key[41];        /* ... and of the job's node */
    /* filled by br_relay_open: */
    uint32_t id;
    char cli_ticket[BR_STREAM_TICKET + 1], node_ticket[BR_STREAM_TICKET + 1];
} br_relay_grant_t;

/* Grant a stream: its id and tickets are filled in. -1 with err (EBUSY) naming the
 * bound when the user or the coordinator has as many open as they may. */
int br_relay_open(br_relay_t *r, br_relay_grant_t *g, br_err_t *err);

/* Close the streams of user user_id (when > 0) and those granted to key (either
 * end's; NULL: none by key), telling both ends why: a key revoked, a user
 * removed. The relay's thread closes them at once (the agent's end then ends its
 * processes as when the CLI vanishes). How many were open. */
int br_relay_cut(br_relay_t *r, int64_t user_id, const char *key, const char *why);

/* How many streams of job are open now: granted, and not yet closed. */
int br_relay_job_streams(br_relay_t *r, int64_t job);
/* When job's last stream ended (monotonic ms; 0: none remembered), so that what
 * waits for its streams' end counts from then, not from its next look. */
int64_t br_relay_job_closed(br_relay_t *r, int64_t job);

#endif
