/* puller.c - pulls, one at a time, on a thread of their own (puller.h). */
#include "puller.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <zmq.h>

#include "worker.h"

/* --- the pulling thread ----------------------------------------------------------- */

typedef struct job {
    struct job *next;
    br_pull_req_t r; /* its strings and manifest are the job's own */
    char *strs[10]; /* the request's strings */
    json_t *manifest, *tag, *result;
    br_err_t err;
} job_t;

struct br_puller {
    void *ctx;
    br_worker_t w; /* its cancel stops the pull in progress (destroy, or preempted) */
    int ntodo;
    job_t *todo, *done; /* FIFO lists (appended at the tail) */
    int running;        /* a pull is in progress: 1 a replica's, 2 a restore's */
    int preempted;     /* it was stopped for a restore: it waits again */
    br_pull_stats_t st;
    job_t *current;            /* the pull in progress (under w.mu), or NULL */
    _Atomic long long progress; /* its bytes in place so far */
};

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

static void append(job_t **l, job_t *j)
{
    while (*l)
        l = &(*l)->next;
    j->next = NULL;
    *l = j;
}

static job_t *take_first(job_t **l)
{
    job_t *j = *l;
    if (j)
        *l = j->next;
    return j;
}

static void *run(void *arg)
{
    br_puller_t *pl = arg;
    pthread_mutex_lock(&pl->w.mu);
    for (;;) {
        while (!pl->w.stop && !pl->todo)
            pthread_cond_wait(&pl->w.cv, &pl->w.mu);
        if (pl->w.stop)
            break;
        job_t *j = take_first(&pl->todo);
        pl->ntodo--;
        pl->running = j->r.urgent ? 2 : 1;
        pl->preempted = 0;
        pl->current = j;
        atomic_store(&pl->progress, 0);
        j->r.progress = &pl->progress;
        atomic_store(&pl->w.cancel, 0);
        pthread_mutex_unlock(&pl->w.mu);
        br_pull_stats_t st = {0};
        j->result = br_pull_run(pl->ctx, &j->r, &pl->w.cancel, &st, &j->err);
        pthread_mutex_lock(&pl->w.mu);
        pl->running = 0;
        pl->current = NULL;
        /* what came over the link counts, also for a run a restore stopped */
        pl->st.bytes_received += st.bytes_received;
        pl->st.bytes_deduped += st.bytes_deduped;
        pl->st.files_fetched += st.files_fetched;
        pl->st.files_deduped += st.files_deduped;
        pl->st.resumes += st.resumes;
        if (!j->result && pl->preempted && !pl->w.stop) {
            /* a restore came (a job waits for it): this replica's pull waits again,
             * first of the others, and picks up from the bytes it has */
            job_t **at = &pl->todo;
            while (*at && (*at)->r.urgent)
                at = &(*at)->next;
            j->next = *at;
            *at = j;
            pl->ntodo++;
            j->err = (br_err_t){0};
            continue;
        }
        append(&pl->done, j);
        br_worker_post(&pl->w);
    }
    pthread_mutex_unlock(&pl->w.mu);
    return NULL;
}

br_puller_t *br_puller_new(br_err_t *err)
{
    if (sodium_init() < 0)
        return br_errp(err, EIO, "libsodium failed to start");
    br_puller_t *pl = calloc(1, sizeof(*pl));
    if (!pl)
        return br_errp(err, ENOMEM, "out of memory");
    int rc = br_worker_init(&pl->w, "puller", err);
    if (rc == 0 && !(pl->ctx = zmq_ctx_new()))
        rc = br_errf(err, errno, "puller: %s", strerror(errno));
    if (rc < 0 || br_worker_start(&pl->w, run, pl, err) < 0) {
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
    br_worker_stop(&pl->w);
    job_t *j;
    while ((j = take_first(&pl->todo)))
        job_free(j);
    while ((j = take_first(&pl->done)))
        job_free(j);
    if (pl->ctx)
        zmq_ctx_term(pl->ctx);
    br_worker_fini(&pl->w);
    free(pl);
    *pp = NULL;
    errno = saved;
}

int br_puller_fd(const br_puller_t *pl)
{
    return pl->w.efd;
}

static const char *keep(job_t *j, int i, const char *s, int *bad)
{
    if (!s)
        return NULL;
    j->strs[i] = strdup(s);
    *bad |= !j->strs[i];
    return j->strs[i];
}

/* Under pl->w.mu: end the waiting pulls that j supersedes (see br_puller_submit). */
static void supersede(br_puller_t *pl, const job_t *j)
{
    if (j->r.urgent || j->r.group <= 0)
        return;
    int ended = 0;
    for (job_t **at = &pl->todo; *at;) {
        job_t *o = *at;
        if (o->r.urgent || o->r.group != j->r.group || o->r.order >= j->r.order) {
            at = &o->next;
            continue;
        }
        *at = o->next;
        pl->ntodo--;
        br_errf(&o->err, ECANCELED, "superseded: a newer checkpoint (step %lld) is to be "
                                    "pulled instead, and was queued before this began",
                (long long)j->r.order);
        append(&pl->done, o);
        ended++;
    }
    if (ended)
        br_worker_post(&pl->w);
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
        j->r.manifest = j->manifest = r->manifest ? json_deep_copy(r->manifest) : NULL;
        bad |= r->manifest && !j->manifest;
        j->r.tag = j->tag = json_incref(r->tag);
    }
    if (bad) {
        job_free(j);
        return br_errf(err, ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&pl->w.mu);
    int full = pl->ntodo >= BR_PULL_QUEUE;
    if (!full && r->urgent) { /* after the urgent ones already waiting */
        job_t **at = &pl->todo;
        while (*at && (*at)->r.urgent)
            at = &(*at)->next;
        j->next = *at;
        *at = j;
        pl->ntodo++;
        if (pl->running == 1) { /* a replica's pull must not hold a job up */
            pl->preempted = 1;
            atomic_store(&pl->w.cancel, 1);
        }
        pthread_cond_signal(&pl->w.cv);
    } else if (!full) {
        supersede(pl, j);
        append(&pl->todo, j);
        pl->ntodo++;
        pthread_cond_signal(&pl->w.cv);
    }
    pthread_mutex_unlock(&pl->w.mu);
    if (full) {
        job_free(j);
        return br_errf(err, EAGAIN, "%d pulls are waiting already", BR_PULL_QUEUE);
    }
    return 0;
}

int br_puller_take(br_puller_t *pl, json_t **tag, json_t **result, br_err_t *err)
{
    br_worker_clear(&pl->w);
    pthread_mutex_lock(&pl->w.mu);
    job_t *j = take_first(&pl->done);
    pthread_mutex_unlock(&pl->w.mu);
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
    pthread_mutex_lock(&pl->w.mu);
    *st = pl->st;
    pthread_mutex_unlock(&pl->w.mu);
}

json_t *br_puller_progress(br_puller_t *pl, long long *done)
{
    pthread_mutex_lock(&pl->w.mu);
    json_t *tag = pl->current ? json_incref(pl->current->tag) : NULL;
    *done = atomic_load(&pl->progress);
    pthread_mutex_unlock(&pl->w.mu);
    return tag;
}
