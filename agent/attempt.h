/* attempt.h - one attempt of a job on this node, as the agent tracks it: the task
 * (task.h) that runs it, its stdout/stderr batched into numbered log chunks, and its
 * exit, kept until the coordinator acknowledges the report. */
#ifndef BRAMBLE_ATTEMPT_H
#define BRAMBLE_ATTEMPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "err.h"
#include "task.h"

#define BR_LOG_CHUNK (32 * 1024) /* flush a stream's buffer at this size */
#define BR_LOG_DELAY_MS 100      /* ... or this long after its first byte */

typedef struct br_attempt br_attempt_t;

/* Called with each chunk ready to ship. */
typedef void (*br_attempt_log_fn)(void *arg, br_attempt_t *a, int stream, int64_t seq,
                                  const void *data, size_t len);

typedef struct {
    int64_t job;
    int attempt;
    int rank;
    const char *command;
    const char *workdir;
    json_t *env; /* object of strings */
    const char *user;
    const char *node; /* for the task tag */
    json_t *checkpoint; /* {"dir","pattern","complete_file"} or NULL: what to watch */
} br_attempt_opts_t;

#define BR_CKPT_STABLE_MS 2000 /* an unmarked checkpoint is complete after this quiet */

/* Start it. NULL with err when the task could not start. */
br_attempt_t *br_attempt_start(const br_attempt_opts_t *o, br_err_t *err);
void br_attempt_destroy(br_attempt_t **a);

int64_t br_attempt_job(const br_attempt_t *a);
int br_attempt_number(const br_attempt_t *a);
int br_attempt_rank(const br_attempt_t *a);
pid_t br_attempt_pid(const br_attempt_t *a);
br_task_t *br_attempt_task(br_attempt_t *a);

/* Read what is ready on stream (1 or 2) and call fn for full chunks. */
void br_attempt_read(br_attempt_t *a, int stream, br_attempt_log_fn fn, void *arg);
/* Ship buffered output older than BR_LOG_DELAY_MS (all of it when force). */
void br_attempt_flush(br_attempt_t *a, int force, br_attempt_log_fn fn, void *arg);

/* 1 once the leader exited and both pipes reached EOF: ready to report. */
int br_attempt_finished(const br_attempt_t *a);

/* The checkpoint watcher, or NULL when the job declared no checkpoint dir. */
br_ckpt_t *br_attempt_ckpt(br_attempt_t *a);

/* Fencing: frozen while the coordinator is out of reach (SIGSTOP to the tree). */
int br_attempt_frozen(const br_attempt_t *a);
int br_attempt_freeze(br_attempt_t *a);
int br_attempt_thaw(br_attempt_t *a);

/* Exit report state: the seq of the job.exited request in flight (0 none). */
uint32_t br_attempt_report_seq(const br_attempt_t *a);
void br_attempt_set_report_seq(br_attempt_t *a, uint32_t seq);

/* Override the reason reported (e.g. "killed on request"). */
void br_attempt_set_reason(br_attempt_t *a, const char *reason);
const char *br_attempt_reason(const br_attempt_t *a);

#endif
