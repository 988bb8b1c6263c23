/* devenv.h - dev environments (kind: dev) that stop when nobody uses them
 * (docs/shell.md, "Dev environments").
 *
 * A running dev environment is in use while a shell or a forward connection to it
 * is open (the relay's streams of the job), and whenever it writes output (its log
 * arrives). Once it has gone its spec's idle_stop with none of these, it is
 * stopped as a cancel stops a job (SIGTERM, SIGKILL after the grace), with an
 * event saying so, and ends cancelled. Its idle clock starts when it runs, and
 * again when the coordinator starts (what it saw before is in memory only, so a
 * restart gives each one its whole idle_stop again). Decided at each tick. */
#ifndef BRAMBLE_DEVENV_H
#define BRAMBLE_DEVENV_H

#include <jansson.h>
#include <stdint.h>

#include "coord.h"

typedef struct br_devenv br_devenv_t;

/* Made with its hooks (a running dev job is watched; a tick stops the idle ones).
 * NULL when out of memory. */
br_devenv_t *br_devenv_new(br_coord_t *c);
void br_devenv_destroy(br_devenv_t **d);

/* Job was used now (its output arrived, a shell or forward opened): no-op unless
 * it is a running dev environment. */
void br_devenv_touch(br_coord_t *c, int64_t job);

/* Stop every dev environment idle for its idle_stop by now_ms (monotonic). */
void br_devenv_run(br_coord_t *c, int64_t now_ms);

/* What job show says of a running dev environment: {"idle_stop" (ms), "idle" (ms
 * since it was last used), "streams" (shells and forward connections open)}; NULL
 * for any other job. */
json_t *br_devenv_show(br_coord_t *c, int64_t job);

#endif
