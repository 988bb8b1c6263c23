/* workq.h - a work queue on a helper thread (worker.h), shared by the agent's hasher
 * (manifest.h) and puller (puller.h) and the coordinator's content writer
 * (contentw.h): jobs wait on a FIFO list (todo), the thread does them one at a
 * time, always the head of todo first, and puts each on a second FIFO list (done),
 * posting the eventfd, for the daemon's loop to take. Jobs
 * are the owner's structs, linked through a br_wqnode_t inside them. What stays the
 * owner's: where in todo a job goes (it inserts under w.mu), what it does around
 * each job (the callbacks, br_workq_ops_t), what a cancel drops, and the limits. */
#ifndef BRAMBLE_WORKQ_H
#define BRAMBLE_WORKQ_H

#include <stddef.h>

#include "err.h"
#include "worker.h"

/* The link in a job. */
typedef struct br_wqnode {
    struct br_wqnode *next;
} br_wqnode_t;

/* A FIFO list of jobs, with its length. */
typedef struct {
    br_wqnode_t *head, **tail; /* tail: the last node's next, or &head when empty */
    int n;
} br_wqlist_t;

/* The job (of type, linked by its member) that node is in; node must not be NULL. */
#define BR_WQ_JOB(node, type, member) ((type *)((char *)(node)-offsetof(type, member)))

void br_wqlist_init(br_wqlist_t *l);
/* Add n at the tail. */
void br_wqlist_push(br_wqlist_t *l, br_wqnode_t *n);
/* Take the head; NULL when empty. */
br_wqnode_t *br_wqlist_pop(br_wqlist_t *l);
/* Put n before *at, where at is &l->head or the next of one of l's nodes (so *at
 * NULL puts it at the tail). Walk to a place with
 * for (br_wqnode_t **at = &l->head; *at && ...; at = &(*at)->next). */
void br_wqlist_insert(br_wqlist_t *l, br_wqnode_t **at, br_wqnode_t *n);
/* Take *at (not NULL) out of l and return it; at is then the place after it. */
br_wqnode_t *br_wqlist_unlink(br_wqlist_t *l, br_wqnode_t **at);

typedef struct br_workq br_workq_t;

/* What the owner does for each job (owner: as given to br_workq_init). */
typedef struct {
    /* Under w.mu, when job is taken off todo (it is q->busy now, w.cancel is 0):
     * the owner's bookkeeping, setting w.cancel to skip it. May be NULL. */
    void (*begin)(void *owner, br_wqnode_t *job);
    /* Without the lock: do it; stop early once w.cancel is set. */
    void (*work)(void *owner, br_wqnode_t *job);
    /* Under w.mu, once it is done (q->busy is NULL again): 1 to put it on done and
     * post the eventfd; 0 when the owner took it back itself: put it on todo again
     * (it is done again later), or freed it (nobody waits for it). May be NULL:
     * always done. */
    int (*finish)(void *owner, br_wqnode_t *job);
    /* Free a job that br_workq_fini finds on todo or done. */
    void (*free)(br_wqnode_t *job);
} br_workq_ops_t;

struct br_workq {
    br_worker_t w;          /* mu guards the lists and busy (and the owner's state) */
    br_wqlist_t todo, done; /* under w.mu */
    br_wqnode_t *busy;      /* under w.mu: the job in progress, or NULL */
    const br_workq_ops_t *ops;
    void *owner;
};

/* Make the lists empty and the worker (worker.h). 0, or -1 with err; on both,
 * br_workq_fini undoes it. */
int br_workq_init(br_workq_t *q, const char *what, const br_workq_ops_t *ops,
                  void *owner, br_err_t *err);
/* Start the thread that does the jobs. 0, or -1 with err. */
int br_workq_start(br_workq_t *q, br_err_t *err);
/* Stop at once: the job in progress is cancelled (w.cancel) and the thread joined,
 * what is left on todo is never done; then free every job on todo and done
 * (ops->free) and the worker. */
void br_workq_fini(br_workq_t *q);

/* Readable when a job can be taken (an eventfd). */
int br_workq_fd(const br_workq_t *q);
/* Under w.mu: queue job before *at (as br_wqlist_insert; at NULL: at the tail) and
 * wake the thread. */
void br_workq_add(br_workq_t *q, br_wqnode_t **at, br_wqnode_t *job);
/* Take the oldest done job (the caller's now), after clearing the eventfd; NULL when
 * none is done. Take until NULL: the eventfd was cleared for all of them. */
br_wqnode_t *br_workq_take(br_workq_t *q);

#endif
