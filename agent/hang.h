/* hang.h - hang detection for one attempt on this node (the spec's `progress:
 * {timeout: T}`): the attempt counts as hung once, for T, none of its tasks on this
 * node has written output, reported a checkpoint (seen by the watcher or through
 * `bramble checkpoint`) or run `bramble progress [STEP]`. The agent then kills the
 * attempt's whole tree and reports its exit with fault "hung" (agent.c).
 *
 * Pure timer logic, no I/O: every call takes the monotonic time. Time while the
 * attempt is frozen (fencing) does not count: the clock starts again when it thaws.
 * Only the node that runs a gang's rank 0 watches it (docs/spec.md, "progress"). */
#ifndef BRAMBLE_HANG_H
#define BRAMBLE_HANG_H

#include <stddef.h>
#include <stdint.h>


typedef enum {
    BR_HANG_OUTPUT,     /* bytes on stdout or stderr */
    BR_HANG_CHECKPOINT, /* a complete checkpoint */
    BR_HANG_PROGRESS,   /* `bramble progress [STEP]` */
} br_hang_what_t;

typedef struct br_hang br_hang_t;

/* timeout_ms > 0; now: monotonic ms when the attempt started (or was adopted).
 * NULL when out of memory. */
br_hang_t *br_hang_new(int64_t timeout_ms, int64_t now);
void br_hang_destroy(br_hang_t **h);

int64_t br_hang_timeout(const br_hang_t *h);

/* Something happened at now (step: what `bramble progress STEP` said, or -1). */
void br_hang_activity(br_hang_t *h, br_hang_what_t what, int64_t step, int64_t now);

/* Frozen (1) or running (0) at now: while frozen the attempt cannot hang; thawed,
 * it gets a whole timeout again. */
void br_hang_frozen(br_hang_t *h, int frozen, int64_t now);

/* 1 once, the first time the timeout has passed since the last activity (the
 * caller then kills the attempt); 0 otherwise, and after it fired. */
int br_hang_check(br_hang_t *h, int64_t now);
/* 1 once br_hang_check said so. */
int br_hang_fired(const br_hang_t *h);

/* Milliseconds since the last activity (0 while frozen). */
int64_t br_hang_idle(const br_hang_t *h, int64_t now);

/* The exit's reason once it fired: "hung: no output, checkpoint or progress for
 * 15m (last progress: step 120, 16m ago)". Returns buf. */
char *br_hang_reason(const br_hang_t *h, int64_t now, char *buf, size_t len);

#endif
