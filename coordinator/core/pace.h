/* pace.h - how long the coordinator's loop lets messages gather before a wake,
 * when it is busy. Each wake costs the same whatever it reads (a transaction, the
 * checks after it, and libzmq's wake-up of the loop for each message that found
 * it asleep), so at thousands of messages a second a wake that reads two or three
 * spends most of its time on that. Once the last whole second brought more than
 * BR_PACE_BUSY messages, the loop waits BR_PACE_GATHER_US after a message arrives
 * before it reads: a wake then reads many (at 10,000 heartbeats a second, about
 * fifty), and no answer waits more than that longer. Below that rate a message is
 * read at once, and so it is after a wake that read BR_PACE_BACKLOG or more: the
 * messages were waiting already (a client with many requests in flight), and the
 * loop is behind, not early. docs/benchmarks.md has the figures. */
#ifndef BRAMBLE_PACE_H
#define BRAMBLE_PACE_H

#include <stdint.h>

#define BR_PACE_BUSY 3000      /* messages in a second that make the loop busy */
#define BR_PACE_GATHER_US 5000 /* then: how long messages gather before a wake */
#define BR_PACE_BACKLOG 64     /* read by one wake: the next one does not gather */

typedef struct br_pace br_pace_t;

br_pace_t *br_pace_new(void);
void br_pace_destroy(br_pace_t **p);

/* n more messages were read, at monotonic time now_us. */
void br_pace_count(br_pace_t *p, int64_t now_us, int64_t n);

/* The last wake read n messages. */
void br_pace_woke(br_pace_t *p, int64_t n);

/* Microseconds to let messages gather before the next wake reads them, at now_us
 * (0: read at once): BR_PACE_GATHER_US while the last whole second was busy,
 * unless the last wake read BR_PACE_BACKLOG or more. */
int64_t br_pace_gather_us(br_pace_t *p, int64_t now_us);

#endif
