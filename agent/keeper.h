/* keeper.h - the fencing promise kept when the agent itself fails. Each agent run
 * forks one keeper process (before it starts any thread) that outlives it. The two
 * share one page of memory: the agent writes the monotonic time of each pass of its
 * loop, and the fence and node timeouts the coordinator gave it. The keeper looks
 * every KEEPER_TICK_MS and, when the agent has shown no life for fence_ms (it died,
 * was SIGKILLed as by the OOM killer, is paused with SIGSTOP or stuck), freezes
 * every process of the jobs this run started (SIGSTOP, as the agent's own fence);
 * once the agent has been silent for fence_ms + node_timeout_ms, by which time the
 * coordinator has declared the node lost and requeued its attempts, it kills them.
 * The jobs are found by the run's id, an entry BRAMBLE_AGENT_RUN=<id> in their
 * environment (br_keeper_env), so a keeper never touches the jobs of a later run.
 * A keeper whose agent is dead exits once none of those processes is left; one
 * whose agent stops on purpose (br_keeper_destroy) exits at once. The keeper never
 * thaws: an agent that comes back sees br_keeper_froze() move, counts its attempts
 * as frozen, and the coordinator's word thaws or kills them as after a partition. */
#ifndef BRAMBLE_KEEPER_H
#define BRAMBLE_KEEPER_H

#include <stdint.h>
#include <sys/types.h>

#include "err.h"

#define KEEPER_TICK_MS 20
#define KEEPER_ENV "BRAMBLE_AGENT_RUN"

typedef struct br_keeper br_keeper_t;

/* Fork the keeper; it closes every descriptor but 0-2 (the data dir's lock stays
 * the agent's). run: the run id (16 hex digits) of a previous run whose jobs this
 * run adopts, or NULL for a new one. fence_ms, node_timeout_ms: until the
 * coordinator says otherwise. */
br_keeper_t *br_keeper_new(const char *run, int64_t fence_ms, int64_t node_timeout_ms,
                           br_err_t *err);
/* The agent stops on purpose (it stops its jobs itself): the keeper exits. */
void br_keeper_destroy(br_keeper_t **k);
/* The agent stops and leaves its jobs to the next agent (an upgrade): the keeper
 * goes on guarding them as if the agent had died, until that agent retires it. */
void br_keeper_leave(br_keeper_t **k);

/* A previous run's keeper, still there when its agent died, and whose jobs the new
 * run adopts: SIGKILLed, if pid still names it (its start time and name match), so
 * that it does not fence jobs that now have a live agent. 1 when it was killed, 0
 * when it was not there. */
int br_keeper_retire(pid_t pid, uint64_t start);

/* The keeper process's start time (br_proc_start), to save with its pid. */
uint64_t br_keeper_start(const br_keeper_t *k);

/* "BRAMBLE_AGENT_RUN=<id>": the entry every job of this run carries. */
const char *br_keeper_env(const br_keeper_t *k);
const char *br_keeper_run_id(const br_keeper_t *k);
pid_t br_keeper_pid(const br_keeper_t *k);

/* The agent is alive at now_ms (monotonic): once per pass of its loop. */
void br_keeper_beat(br_keeper_t *k, int64_t now_ms);
/* The coordinator's timeouts (from the hello reply). */
void br_keeper_set_times(br_keeper_t *k, int64_t fence_ms, int64_t node_timeout_ms);
/* How many times the keeper froze this run's jobs; it only grows. */
int br_keeper_froze(const br_keeper_t *k);

/* pid (reaped by the agent) was its keeper: 1, and a new keeper is forked for the
 * same run (a lost keeper is said and replaced); else 0. */
int br_keeper_reaped(br_keeper_t *k, pid_t pid, int status);

#endif
