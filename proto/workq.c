/* workq.c - a FIFO of jobs done on a helper thread (workq.h). */
#include "workq.h"

/* --- lists ------------------------------------------------------------------------ */

void br_wqlist_init(br_wqlist_t *l)
{
    l->head = NULL;
    l->tail = &l->head;
    l->n = 0;
}

void br_wqlist_push(br_wqlist_t *l, br_wqnode_t *n)
{
    br_wqlist_insert(l, l->tail, n);
}

br_wqnode_t *br_wqlist_pop(br_wqlist_t *l)
{
    return l->head ? br_wqlist_unlink(l, &l->head) : NULL;
}

void br_wqlist_insert(br_wqlist_t *l, br_wqnode_t **at, br_wqnode_t *n)
{
    n->next = *at;
    *at = n;
    if (!n->next)
        l->tail = &n->next;
    l->n++;
}

br_wqnode_t *br_wqlist_unlink(br_wqlist_t *l, br_wqnode_t **at)
{
    br_wqnode_t *n = *at;
    *at = n->next;
    if (l->tail == &n->next)
        l->tail = at;
    n->next = NULL;
    l->n--;
    return n;
}

/* --- the thread ------------------------------------------------------------------- */

static void *run(void *arg)
{
    br_workq_t *q = arg;
    pthread_mutex_lock(&q->w.mu);
    for (;;) {
        while (!q->w.stop && !q->todo.head)
            pthread_cond_wait(&q->w.cv, &q->w.mu);
        if (q->w.stop)
            break;
        br_wqnode_t *j = q->busy = br_wqlist_pop(&q->todo);
        atomic_store(&q->w.cancel, 0); /* not stopped: stop sets both under w.mu */
        if (q->ops->begin)
            q->ops->begin(q->owner, j);
        pthread_mutex_unlock(&q->w.mu);
        q->ops->work(q->owner, j);
        pthread_mutex_lock(&q->w.mu);
        q->busy = NULL;
        if (!q->ops->finish || q->ops->finish(q->owner, j)) {
            br_wqlist_push(&q->done, j);
            br_worker_post(&q->w);
        }
    }
    pthread_mutex_unlock(&q->w.mu);
    return NULL;
}

/* --- the queue -------------------------------------------------------------------- */

int br_workq_init(br_workq_t *q, const char *what, const br_workq_ops_t *ops,
                  void *owner, br_err_t *err)
{
    br_wqlist_init(&q->todo);
    br_wqlist_init(&q->done);
    q->busy = NULL;
    q->ops = ops;
    q->owner = owner;
    return br_worker_init(&q->w, what, err);
}

int br_workq_start(br_workq_t *q, br_err_t *err)
{
    return br_worker_start(&q->w, run, q, err);
}

void br_workq_fini(br_workq_t *q)
{
    br_worker_stop(&q->w);
    br_wqnode_t *j;
    while ((j = br_wqlist_pop(&q->todo)))
        q->ops->free(j);
    while ((j = br_wqlist_pop(&q->done)))
        q->ops->free(j);
    br_worker_fini(&q->w);
}

int br_workq_fd(const br_workq_t *q)
{
    return q->w.efd;
}

void br_workq_add(br_workq_t *q, br_wqnode_t **at, br_wqnode_t *job)
{
    br_wqlist_insert(&q->todo, at ? at : q->todo.tail, job);
    pthread_cond_signal(&q->w.cv);
}

br_wqnode_t *br_workq_take(br_workq_t *q)
{
    br_worker_clear(&q->w);
    pthread_mutex_lock(&q->w.mu);
    br_wqnode_t *j = br_wqlist_pop(&q->done);
    pthread_mutex_unlock(&q->w.mu);
    return j;
}
