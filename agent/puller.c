/* puller.c - pulls, one at a time, on a thread of their own (puller.h). */
#include "puller.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <zmq.h>

#include "workq.h"

/* --- the pulling thread ----------------------------------------------------------- */

typedef struct job {
    br_wqnode_t node;
    br_pull_req_t r; /* its strings and manifest are the job's own */
    char *strs[10];  /* the request's strings */
    json_t *manifest, *tag, *result;
    br_err_t err;
    br_pull_stats_t st; /* of its last run */
} job_t;

struct br_puller {
    void *ctx;
    br_workq_t q;  /* q.busy: the pull in progress; q.w.cancel stops it (destroy, or
                    * preempted) */
    int preempted; /* under q.w.mu: q.busy was stopped for a restore: it waits again */
    br_pull_stats_t st;         /* under q.w.mu */
    _Atomic long long progress; /* q.busy's bytes in place so far */
};

static job_t *job_of(br_wqnode_t *n)
{
    return n ? BR_WQ_JOB(n, job_t, node) : NULL;
}

static void job_free(job_t *j)
{
    if (j) {
        for (size_t i = 0; i < sizeof(j->strs) / sizeof(j->strs[0]); i++)
            if (j->strs[i]) {
                sodium_memzero(j->strs[i], strlen(j->strs[i]));
                free(j->strs[i]);
            }
        json_decref(j->manifest);
        json_decref(j->tag);
        json_decref(j->result);
        free(j);
    }
}

/* Under q.w.mu: the place in todo after the urgent pulls waiting (restores). */
static br_wqnode_t **after_urgent(br_puller_t *pl)
{
    br_wqnode_t **at = &pl->q.todo.head;
    while (*at && job_of(*at)->r.urgent)
        at = &(*at)->next;
    return at;
}

/* The queue's callbacks (workq.h). */
static void job_begin(void *owner, br_wqnode_t *n)
{
    br_puller_t *pl = owner;
    pl->preempted = 0;
    atomic_store(&pl->progress, 0);
    job_of(n)->r.progress = &pl->progress;
}

static void job_work(void *owner, br_wqnode_t *n)
{
    br_puller_t *pl = owner;
    job_t *j = job_of(n);
    j->st = (br_pull_stats_t){0};
    j->result = br_pull_run(pl->ctx, &j->r, &pl->q.w.cancel, &j->st, &j->err);
}

static int job_finish(void *owner, br_wqnode_t *n)
{
    br_puller_t *pl = owner;
    job_t *j = job_of(n);
    /* what came over the link counts, also for a run a restore stopped */
    pl->st.bytes_received += j->st.bytes_received;
    pl->st.bytes_deduped += j->st.bytes_deduped;
    pl->st.files_fetched += j->st.files_fetched;
    pl->st.files_deduped += j->st.files_deduped;
    pl->st.resumes += j->st.resumes;
    if (j->result || !pl->preempted || pl->q.w.stop)
        return 1;
    /* a restore came (a job waits for it): this replica's pull waits again, first
     * of the others, and picks up from the bytes it has */
    br_wqlist_insert(&pl->q.todo, after_urgent(pl), n);
    j->err = (br_err_t){0};
    return 0;
}

static void job_drop(br_wqnode_t *n)
{
    job_free(job_of(n));
}

static const br_workq_ops_t ops = {job_begin, job_work, job_finish, job_drop};

br_puller_t *br_puller_new(br_err_t *err)
{
    if (sodium_init() < 0)
        return br_errp(err, EIO, "libsodium failed to start");
    br_puller_t *pl = calloc(1, sizeof(*pl));
    if (!pl)
        return br_errp(err, ENOMEM, "out of memory");
    int rc = br_workq_init(&pl->q, "puller", &ops, pl, err);
    if (rc == 0 && !(pl->ctx = zmq_ctx_new()))
        rc = br_errf(err, errno, "puller: %s", strerror(errno));
    if (rc < 0 || br_workq_start(&pl->q, err) < 0) {
        br_puller_destroy(&pl);
        return NULL;
    }
    return pl;
}

void br_puller_destroy(br_puller_t **pp)
{
    br_puller_t *pl = pp ? *pp : NULL;
    if (!pl)
        return;
    int saved = errno;
    br_workq_fini(&pl->q);
    if (pl->ctx)
        zmq_ctx_term(pl->ctx);
    free(pl);
    *pp = NULL;
    errno = saved;
}

int br_puller_fd(const br_puller_t *pl)
{
    return br_workq_fd(&pl->q);
}

static const char *keep(job_t *j, int i, const char *s, int *bad)
{
    if (!s)
        return NULL;
    j->strs[i] = strdup(s);
    *bad |= !j->strs[i];
    return j->strs[i];
}

/* Under q.w.mu: end the waiting pulls that j supersedes (see br_puller_submit). */
static void supersede(br_puller_t *pl, const job_t *j)
{
    if (j->r.urgent || j->r.group <= 0)
        return;
    int ended = 0;
    for (br_wqnode_t **at = &pl->q.todo.head; *at;) {
        job_t *o = job_of(*at);
        if (o->r.urgent || o->r.group != j->r.group || o->r.order >= j->r.order) {
            at = &(*at)->next;
            continue;
        }
        br_wqlist_unlink(&pl->q.todo, at);
        br_errf(&o->err, ECANCELED, "superseded: a newer checkpoint (step %lld) is to be "
                                    "pulled instead, and was queued before this began",
                (long long)j->r.order);
        br_wqlist_push(&pl->q.done, &o->node);
        ended++;
    }
    if (ended)
        br_worker_post(&pl->q.w);
}

int br_puller_submit(br_puller_t *pl, const br_pull_req_t *r, br_err_t *err)
{
    job_t *j = calloc(1, sizeof(*j));
    int bad = !j;
    if (j) {
        j->r = *r;
        j->r.endpoint = keep(j, 0, r->endpoint, &bad);
        j->r.server_key = keep(j, 1, r->server_key, &bad);
        j->r.public_key = keep(j, 2, r->public_key, &bad);
        j->r.secret_key = keep(j, 3, r->secret_key, &bad);
        j->r.peer_name = keep(j, 4, r->peer_name, &bad);
        j->r.grant = keep(j, 5, r->grant, &bad);
        j->r.dest = keep(j, 6, r->dest, &bad);
        j->r.store = keep(j, 7, r->store, &bad);
        j->r.listings = keep(j, 8, r->listings, &bad);
        j->r.spare = keep(j, 9, r->spare, &bad);
        j->r.manifest = j->manifest = r->manifest ? json_deep_copy(r->manifest) : NULL;
        bad |= r->manifest && !j->manifest;
        j->r.tag = j->tag = json_incref(r->tag);
    }
    if (bad) {
        job_free(j);
        return br_errf(err, ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&pl->q.w.mu);
    int full = pl->q.todo.n >= BR_PULL_QUEUE;
    job_t *busy = job_of(pl->q.busy);
    if (!full && r->urgent) { /* after the urgent ones already waiting */
        br_workq_add(&pl->q, after_urgent(pl), &j->node);
        if (busy && !busy->r.urgent) { /* a replica's pull must not hold a job up */
            pl->preempted = 1;
            atomic_store(&pl->q.w.cancel, 1);
        }
    } else if (!full) {
        supersede(pl, j);
        br_workq_add(&pl->q, NULL, &j->node);
    }
    pthread_mutex_unlock(&pl->q.w.mu);
    if (full) {
        job_free(j);
        return br_errf(err, EAGAIN, "%d pulls are waiting already", BR_PULL_QUEUE);
    }
    return 0;
}

void br_puller_hurry(br_puller_t *pl, const char *dest)
{
    pthread_mutex_lock(&pl->q.w.mu);
    job_t *busy = job_of(pl->q.busy);
    int here = busy && strcmp(busy->r.dest, dest) == 0;
    for (br_wqnode_t **at = &pl->q.todo.head; *at && !here;) {
        job_t *o = job_of(*at);
        if (o->r.urgent || strcmp(o->r.dest, dest) != 0) {
            at = &(*at)->next;
            continue;
        }
        br_wqlist_unlink(&pl->q.todo, at);
        o->r.urgent = 1;
        br_wqlist_insert(&pl->q.todo, after_urgent(pl), &o->node);
        if (busy && !busy->r.urgent) { /* as an urgent pull submitted now would */
            pl->preempted = 1;
            atomic_store(&pl->q.w.cancel, 1);
        }
        break;
    }
    if (here)
        busy->r.urgent = 1; /* (no restore stops it now) */
    pthread_mutex_unlock(&pl->q.w.mu);
}

int br_puller_take(br_puller_t *pl, json_t **tag, json_t **result, br_err_t *err)
{
    job_t *j = job_of(br_workq_take(&pl->q));
    if (!j)
        return 0;
    *tag = j->tag;
    *result = j->result;
    if (!j->result && err)
        *err = j->err;
    j->tag = j->result = NULL;
    job_free(j);
    return 1;
}

void br_puller_stats(br_puller_t *pl, br_pull_stats_t *st)
{
    pthread_mutex_lock(&pl->q.w.mu);
    *st = pl->st;
    pthread_mutex_unlock(&pl->q.w.mu);
}

json_t *br_puller_progress(br_puller_t *pl, long long *done)
{
    pthread_mutex_lock(&pl->q.w.mu);
    job_t *busy = job_of(pl->q.busy);
    json_t *tag = busy ? json_incref(busy->tag) : NULL;
    *done = atomic_load(&pl->progress);
    pthread_mutex_unlock(&pl->q.w.mu);
    return tag;
}
