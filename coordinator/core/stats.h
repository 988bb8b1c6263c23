/* stats.h - what the coordinator measures for /metrics (docs/metrics.md): the
 * histograms and counters its loop feeds as things happen (queue wait, time from
 * node loss to running again, heartbeats, refused requests, hung attempts), and the page made
 * from them and from the current state (nodes, jobs, store, HTTP side). Used by
 * the loop's thread only; the HTTP side gets a copy of the page (http.h). */
#ifndef BRAMBLE_STATS_H
#define BRAMBLE_STATS_H

#include <stddef.h>
#include <stdint.h>

struct br_coord;
typedef struct br_stats br_stats_t;

/* The histograms. */
typedef enum {
    BR_STAT_QUEUE_WAIT,         /* submit -> first running, seconds */
    BR_STAT_RECOVERY,           /* node lost -> the job it ran running again, seconds */
    BR_STAT_HEARTBEAT_RTT,      /* an agent's heartbeat round trip, seconds */
    BR_STAT_HEARTBEAT_HANDLING, /* the loop's time on one heartbeat, seconds */
    BR_STAT_COUNT
} br_stat_t;

br_stats_t *br_stats_new(void);
void br_stats_destroy(br_stats_t **s);

void br_stats_observe(br_stats_t *s, br_stat_t which, double seconds);
/* A request was refused with errnum (an error response left the coordinator). */
void br_stats_refused(br_stats_t *s, int errnum);
/* A CURVE handshake was refused (a key the coordinator does not admit). */
void br_stats_handshake_refused(br_stats_t *s);
/* An agent ended an attempt as hung (the spec's progress.timeout passed). */
void br_stats_hung(br_stats_t *s);
/* Messages the loop dropped so far (their peer's queue was full): the loop counts
 * each (or sets the count), the ping and the metrics read it. */
void br_stats_send_dropped(br_stats_t *s);
void br_stats_set_sends_dropped(br_stats_t *s, uint64_t n);
uint64_t br_stats_sends_dropped(const br_stats_t *s);
/* A checkpoint pull ended well: bytes that came over the network and bytes the
 * node had already (by hash); restore: to resume a job, else a replica. */
void br_stats_pulled(br_stats_t *s, int restore, long long received, long long deduped);

/* The label of a refusal's errnum: "not_allowed", "invalid", ... "other". */
const char *br_stats_reason(int errnum);

/* The whole page in Prometheus's text format, from s and the coordinator's state
 * now; valid until the next call. NULL when memory ran out. A part that cannot be
 * read (the store failing) is left out and said in the daemon's log. */
const char *br_stats_page(br_stats_t *s, struct br_coord *c, size_t *len);

#endif
