/* attempt.h - one attempt of a job on this node, as the agent tracks it: its tasks
 * (task.h; one per rank the node runs, several when tasks_per_node > 1), their
 * stdout/stderr batched into numbered log chunks per rank, the checkpoint watcher,
 * and the attempt's exit, kept until the coordinator acknowledges the report. When
 * one task fails, the attempt's other tasks on this node are stopped: the node's
 * part of a gang lives and dies together. */
#ifndef BRAMBLE_ATTEMPT_H
#define BRAMBLE_ATTEMPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"
#include "err.h"
#include "hang.h"
#include "health.h"
#include "spec.h"
#include "task.h"

#define BR_LOG_CHUNK (32 * 1024) /* flush a stream's buffer at this size */
#define BR_LOG_BUFFER (1024 * 1024) /* output kept per attempt while it cannot be
                                       shipped; beyond it the oldest is dropped */
#define BR_LOG_DELAY_MS 100      /* ... or this long after its first byte */
#define BR_ATTEMPT_MAX_TASKS BR_MAX_TASKS_PER_NODE /* processes per attempt per node */

typedef struct br_attempt br_attempt_t;

#define BR_LOG_RETRY_MS 1000  /* output the coordinator could not store goes again */
#define BR_LOG_ANSWER_MS 5000 /* ... as does output it did not answer for this long */

/* Called with each chunk ready to ship: rank is the task's rank in the job, seq its
 * number (the same when it is sent again). Returns the tag its answer will carry
 * (> 0), 0 when it went with no answer to wait for (an event, to a coordinator that
 * takes no other), or -1 when it could not be sent (the queue to the coordinator is
 * full): the chunk then waits for the next try, as does everything after it. */
typedef int64_t (*br_attempt_log_fn)(void *arg, br_attempt_t *a, int rank, int stream,
                                     int64_t seq, const void *data, size_t len);

typedef struct {
    int64_t job;
    int attempt;
    const char *command;
    const char *workdir;
    json_t *env;   /* object of strings, common to every task */
    json_t *tasks; /* array of {"rank": r, "env": {...}} (each task's own variables on
                      top of env), or NULL for one task of rank default_rank */
    int default_rank;
    const char *user;
    const char *node;   /* for the task tag */
    json_t *checkpoint; /* {"dir","pattern","complete_file"} or NULL: what to watch */
    const char *exit_dir; /* NULL, or where each task's waiter writes its exit status
                             (JOB.ATTEMPT.RANK.exit), for an agent started again */
    const char *const *mounts; /* NULL, or pairs from, to shown read-only to every
                                  task (br_task_opts_t) */
} br_attempt_opts_t;

#define BR_CKPT_STABLE_MS 2000 /* an unmarked checkpoint is complete after this quiet */

/* Start every task. NULL with err when one could not start (those already started
 * are killed again: all or nothing). */
br_attempt_t *br_attempt_start(const br_attempt_opts_t *o, br_err_t *err);
void br_attempt_destroy(br_attempt_t **a);

/* What an agent started again needs to adopt the attempt's tasks (task.h): an array
 * of {"rank","tag","pid","waiter","waiter_start","uid","gid","also"?,"exit"?}. */
json_t *br_attempt_saved(const br_attempt_t *a);
/* Take over an attempt a previous agent started, from o (job, attempt, node,
 * checkpoint) and what br_attempt_saved said. Its log chunks are numbered on from
 * above any number the previous agent used. NULL with err when one of its tasks
 * cannot be adopted (its processes are then the caller's to kill). */
br_attempt_t *br_attempt_adopt(const br_attempt_opts_t *o, json_t *saved, br_err_t *err);

int64_t br_attempt_job(const br_attempt_t *a);
int br_attempt_number(const br_attempt_t *a);
int br_attempt_ntasks(const br_attempt_t *a);
pid_t br_attempt_pid(const br_attempt_t *a); /* the first task's */
/* The task of the job's rank rank on this node, or NULL (not here). */
br_task_t *br_attempt_task_of_rank(br_attempt_t *a, int rank);
/* The job's rank that its task i (0 .. br_attempt_ntasks - 1) runs. */
int br_attempt_rank_at(const br_attempt_t *a, int i);

/* The port this node chose: a gang's rendezvous port (rank 0), or a service
 * replica's PORT; 0 otherwise. */
void br_attempt_set_port(br_attempt_t *a, int port);
int br_attempt_port(const br_attempt_t *a);

/* Whether the attempt is a service's replica: it keeps serving while the agent
 * hears nothing from the coordinator (docs/services.md, "Serving on"). */
void br_attempt_set_replica(br_attempt_t *a, int replica);
int br_attempt_is_replica(const br_attempt_t *a);

/* A service replica's health check (taken over; destroyed with the attempt), or
 * NULL. */
void br_attempt_set_health(br_attempt_t *a, br_health_t *h);
br_health_t *br_attempt_health(br_attempt_t *a);

/* Hang detection (hang.h: the spec's progress.timeout; taken over, destroyed with
 * the attempt), or NULL. Output read from any of the attempt's tasks counts as
 * activity, and frozen time does not count. */
void br_attempt_set_hang(br_attempt_t *a, br_hang_t *h);
br_hang_t *br_attempt_hang(br_attempt_t *a);

/* 1 when the process whose BRAMBLE_TASK tag is tag belongs to this attempt. */
int br_attempt_has_tag(const br_attempt_t *a, const char *tag);

/* pid was reaped with status: 1 when it was the waiter of one of this attempt's
 * tasks, which ends as the task did (the task's tree is then killed, and, when it
 * failed, the other tasks too), else 0. */
int br_attempt_reaped(br_attempt_t *a, pid_t pid, int status);

/* Tasks whose leader ended in a stop's grace while their tree still ran (see
 * br_attempt_stop): those whose tree has ended since are over now, as
 * br_attempt_reaped would have ended them; returns how many. */
int br_attempt_check_lingering(br_attempt_t *a);

/* Adopted tasks whose waiter ended are handled as br_attempt_reaped does; returns
 * how many ended. */
int br_attempt_check_adopted(br_attempt_t *a);
/* The pidfds of adopted tasks still running (at most max), to wake up on. */
int br_attempt_wait_fds(const br_attempt_t *a, int *fds, int max);

/* The open output fds of every task (at most max), to wait on. */
int br_attempt_fds(const br_attempt_t *a, int *fds, int max);
/* Read what is ready on every task's streams into the attempt's bounded log buffer
 * (logbuf.h; it never blocks: beyond BR_LOG_BUFFER the oldest output is dropped),
 * then ship what is ready. */
void br_attempt_read(br_attempt_t *a, br_attempt_log_fn fn, void *arg);
/* Ship full chunks and output older than BR_LOG_DELAY_MS (all of it when force),
 * oldest first, until fn cannot send. A chunk is kept until its answer says it was
 * taken (br_attempt_log_answered); chunks that got no answer in BR_LOG_ANSWER_MS go
 * again. */
void br_attempt_flush(br_attempt_t *a, int force, br_attempt_log_fn fn, void *arg);
/* The answer to the chunk sent with tag: errnum 0 (stored), EPERM or ENOENT (not
 * wanted: never sent again), or another (not stored: every chunk not taken goes again
 * after BR_LOG_RETRY_MS from now). 1 when the chunk was this attempt's. */
int br_attempt_log_answered(br_attempt_t *a, uint32_t tag, int errnum, int64_t now);
/* Every chunk sent and not answered goes again at the next flush (the coordinator
 * restarted: its answers will not come). */
void br_attempt_log_resend(br_attempt_t *a);
/* Output bytes dropped so far (the oldest, when the buffer was full, and not stored
 * by the coordinator). */
int64_t br_attempt_log_dropped(const br_attempt_t *a);
/* An ended attempt's output not taken yet holds its exit report back, for at most
 * max_ms from the first call: then what is kept is dropped, counted. 1 while it
 * holds. */
int br_attempt_log_holds_exit(br_attempt_t *a, int64_t now, int64_t max_ms);
/* 1 when more was dropped since the previous call (to say so once in a while). */
int br_attempt_log_dropped_news(br_attempt_t *a);

/* 1 once every task leader has exited (and, in a stop's grace, its whole tree). */
int br_attempt_done(const br_attempt_t *a);
/* 1 once done and every pipe reached EOF: ready to report. */
int br_attempt_finished(const br_attempt_t *a);
/* The outcome once done: exit code 0 and signal -1 when every task exited 0; else
 * the first failure's exit code or signal (the other -1). */
void br_attempt_status(const br_attempt_t *a, int *exit_code, int *signal);

/* Stop every task's whole tree (see br_task_kill_tree). */
int br_attempt_kill(br_attempt_t *a, int timeout_ms);
/* Ask every task's whole tree to stop: sig to each process (SIGTERM, or the job's
 * own preemption signal), then, once grace_ms have passed from now (monotonic
 * ms), br_attempt_stop_due says it is time for br_attempt_kill. Meanwhile a task
 * whose leader ends (the wrapping /bin/sh, which does not exec the command and dies
 * of a signal it does not trap) is not over while its tree still runs: the job's own
 * processes get the whole grace to handle the signal (br_attempt_check_lingering).
 * The number of processes signalled. */
int br_attempt_stop(br_attempt_t *a, int sig, int64_t grace_ms, int64_t now);
int br_attempt_stop_due(const br_attempt_t *a, int64_t now);

/* The checkpoint watcher, or NULL when the job declared no checkpoint dir. */
br_ckpt_t *br_attempt_ckpt(br_attempt_t *a);

/* Fencing: frozen while the coordinator is out of reach (SIGSTOP to the trees). */
int br_attempt_frozen(const br_attempt_t *a);
int br_attempt_freeze(br_attempt_t *a);
int br_attempt_thaw(br_attempt_t *a);

/* Exit report state: the seq of the job.exited request in flight (0 none). */
uint32_t br_attempt_report_seq(const br_attempt_t *a);
void br_attempt_set_report_seq(br_attempt_t *a, uint32_t seq);

/* The reason reported with the exit ("killed on request", "rank 3: exit code 1"):
 * the first one set stays. */
void br_attempt_set_reason(br_attempt_t *a, const char *reason);
const char *br_attempt_reason(const br_attempt_t *a);

#endif
