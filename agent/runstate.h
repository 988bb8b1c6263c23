/* runstate.h - what this agent runs, saved in DATA_DIR/run so that an agent started
 * again (after a crash, an OOM kill or an upgrade) adopts its predecessor's running
 * attempts instead of killing them. Per attempt, JOB.ATTEMPT.json holds the
 * coordinator's job.run order (what to watch, the service's health check), how
 * to find its tasks again (attempt.h, br_attempt_saved) and what else the agent
 * knew of it (its data sets, its container, where its setup's and image's runners
 * write why they failed); each task's waiter writes
 * JOB.ATTEMPT.RANK.exit when its job ends. keeper holds the keeper's pid, start time
 * and run id, so that the next agent retires that keeper and gives its own the same
 * run id. Files are written whole and renamed into place; the directory is 0700. */
#ifndef BRAMBLE_RUNSTATE_H
#define BRAMBLE_RUNSTATE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

typedef struct br_runstate br_runstate_t;

/* DATA_DIR/run, created when missing. */
br_runstate_t *br_runstate_new(const char *data_dir, br_err_t *err);
void br_runstate_destroy(br_runstate_t **rs);

/* The directory itself (for the tasks' exit files). */
const char *br_runstate_dir(const br_runstate_t *rs);

/* Save (replace) one attempt's record: {"order": ..., "port": N, "tasks": [...]}. */
int br_runstate_save(br_runstate_t *rs, int64_t job, int attempt, json_t *record,
                     br_err_t *err);
/* Forget an attempt: its record and its tasks' exit files. */
void br_runstate_forget(br_runstate_t *rs, int64_t job, int attempt);
/* Every saved record, each with "job" and "attempt" set; unreadable ones are said
 * on stderr and removed, as are exit files of attempts with no record. */
json_t *br_runstate_load(br_runstate_t *rs);

/* The keeper of the agent run that saved these attempts: 0 and its pid, start time
 * and run id (17 bytes), or -1 when none was saved. */
int br_runstate_keeper(br_runstate_t *rs, pid_t *pid, uint64_t *start, char run[17]);
int br_runstate_save_keeper(br_runstate_t *rs, pid_t pid, uint64_t start, const char *run,
                            br_err_t *err);

#endif
