/* worker.h - what the helper threads of the agent and the coordinator share (the
 * agent's manifest.h hashes checkpoints, puller.h pulls them, holder.h serves them;
 * the coordinator's contentw.h writes uploads into the content store): a mutex and
 * a condition for the owner's queues, a stop flag and a cancel flag, an eventfd
 * that the side which waits polls (manifest, puller, contentw: the daemon's loop,
 * for results; holder: its own thread, for changed grants), and a thread that
 * takes no signal, since both daemons read their own from a signalfd. The queue of
 * jobs of the hasher, the puller and the content writer is workq.h, on top of
 * this; holder.h has none. */
#ifndef BRAMBLE_WORKER_H
#define BRAMBLE_WORKER_H

#include <pthread.h>
#include <stdatomic.h>

#include "err.h"

typedef struct {
    pthread_mutex_t mu; /* the owner's queues and stop */
    pthread_cond_t cv;  /* signalled when there is work, or at stop */
    int stop;           /* under mu: the thread returns */
    atomic_int cancel;  /* the work in progress stops (set at stop too) */
    int efd;            /* an eventfd, non-blocking */
    pthread_t thread;
    int started;
    const char *what; /* names it in messages: "manifest", "puller", "replica" */
} br_worker_t;

/* Make the mutex, the condition and the eventfd. 0, or -1 with err; on both,
 * br_worker_fini undoes it. */
int br_worker_init(br_worker_t *w, const char *what, br_err_t *err);
/* Start run(arg) with every signal blocked. 0, or -1 with err. */
int br_worker_start(br_worker_t *w, void *(*run)(void *), void *arg, br_err_t *err);
/* Set stop and cancel, wake the thread (condition and eventfd) and join it; nothing
 * when it never started. */
void br_worker_stop(br_worker_t *w);
/* Close the eventfd, free the mutex and the condition (after br_worker_stop). */
void br_worker_fini(br_worker_t *w);
/* The calling thread (and the threads it starts from then on) yields the CPU to
 * every other: SCHED_IDLE, which a waking thread of normal policy preempts at once
 * (at a nice value, a bulk thread still held the core for up to a scheduler's slice
 * before a daemon's loop got it); nice_fallback where SCHED_IDLE is refused. On a
 * machine with every core busy the thread still runs, only later. */
void br_worker_background(int nice_fallback);
/* Make the eventfd readable / take what it counted (EAGAIN is fine). */
void br_worker_post(br_worker_t *w);
void br_worker_clear(br_worker_t *w);

#endif
