/* test_workq.c - the work queue the hasher and the puller share (agent/workq.c): its
 * FIFO lists, the thread taking jobs in order and finishing them, a job put back and
 * done again, a job its begin skips, the eventfd posted for each one done, and a
 * stop with work left. Nothing sleeps: every wait is a poll with a deadline. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util.h"
#include "workq.h"

#define DEADLINE_MS 10000
#define NJOBS 8

typedef struct {
    br_wqnode_t node;
    int id;
    int again;      /* finish puts it back this many times more */
    int again_head; /* ... at the head of todo (else at the tail) */
    int skip;       /* begin sets w.cancel */
    int block;      /* work waits until w.cancel is set */
    int runs;       /* times work ran it */
    int saw_cancel; /* w.cancel was set when work returned */
    int busy_ok;    /* q.busy was this job in begin and work, NULL in finish */
    int freed;
} job_t;

typedef struct {
    br_workq_t q;
    int began[2 * NJOBS]; /* ids in the order begin saw them */
    int nbegan;
    int started; /* an eventfd: work posts it when a blocking job begins */
} fix_t;

static job_t jobs[NJOBS];

static job_t *job_of(br_wqnode_t *n)
{
    return n ? BR_WQ_JOB(n, job_t, node) : NULL;
}

/* --- the callbacks ------------------------------------------------------------ */

static void t_begin(void *owner, br_wqnode_t *n)
{
    fix_t *f = owner;
    job_t *j = job_of(n);
    j->busy_ok = f->q.busy == n && !atomic_load(&f->q.w.cancel);
    if (f->nbegan < 2 * NJOBS)
        f->began[f->nbegan++] = j->id;
    if (j->skip)
        atomic_store(&f->q.w.cancel, 1);
}

static void t_work(void *owner, br_wqnode_t *n)
{
    fix_t *f = owner;
    job_t *j = job_of(n);
    j->runs++;
    j->busy_ok &= f->q.busy == n; /* only this thread writes busy */
    if (j->block) {
        uint64_t one = 1; /* (no cmocka asserts off the test's thread) */
        if (write(f->started, &one, sizeof(one)) != sizeof(one))
            j->busy_ok = 0;
        /* the stop posts the worker's eventfd after setting cancel; nothing else
         * posts it while this job is the first */
        int64_t until = br_mono_ms() + DEADLINE_MS;
        while (!atomic_load(&f->q.w.cancel) && br_mono_ms() < until) {
            struct pollfd p = {f->q.w.efd, POLLIN, 0};
            poll(&p, 1, (int)(until - br_mono_ms()));
        }
    }
    j->saw_cancel = atomic_load(&f->q.w.cancel);
}

static int t_finish(void *owner, br_wqnode_t *n)
{
    fix_t *f = owner;
    job_t *j = job_of(n);
    j->busy_ok &= f->q.busy == NULL;
    if (j->again <= 0)
        return 1;
    j->again--;
    br_wqlist_insert(&f->q.todo, j->again_head ? &f->q.todo.head : f->q.todo.tail, n);
    return 0;
}

static void t_free(br_wqnode_t *n)
{
    job_of(n)->freed++;
}

static const br_workq_ops_t ops = {t_begin, t_work, t_finish, t_free};

/* --- helpers ------------------------------------------------------------------ */

static int setup(void **state)
{
    static fix_t f;
    memset(&f, 0, sizeof(f));
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < NJOBS; i++)
        jobs[i].id = i;
    br_err_t err = {0};
    assert_int_equal(br_workq_init(&f.q, "test", &ops, &f, &err), 0);
    f.started = eventfd(0, EFD_CLOEXEC);
    assert_true(f.started >= 0);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    close(f->started);
    return 0;
}

/* Queue jobs ids[0..n) at the tail, in one go. */
static void add(fix_t *f, const int *ids, int n)
{
    pthread_mutex_lock(&f->q.w.mu);
    for (int i = 0; i < n; i++)
        br_workq_add(&f->q, NULL, &jobs[ids[i]].node);
    pthread_mutex_unlock(&f->q.w.mu);
}

static int readable(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Take n done jobs, waiting on the eventfd (it must become readable) before the
 * first and whenever none is done yet; their ids into ids. */
static void take(fix_t *f, int *ids, int n)
{
    int64_t until = br_mono_ms() + DEADLINE_MS;
    int fd = br_workq_fd(&f->q);
    for (int got = 0; got < n;) {
        int64_t left = until - br_mono_ms();
        assert_true(left > 0);
        assert_true(readable(fd, (int)left));
        br_wqnode_t *j;
        while (got < n && (j = br_workq_take(&f->q)))
            ids[got++] = job_of(j)->id;
    }
    /* everything taken, so nothing is left to post the eventfd */
    assert_null(br_workq_take(&f->q));
    assert_false(readable(fd, 0));
}

/* --- the tests ---------------------------------------------------------------- */

static void test_lists(void **state)
{
    fix_t *f = *state;
    br_workq_fini(&f->q); /* (unused here) */
    br_wqlist_t l;
    br_wqlist_init(&l);
    assert_null(br_wqlist_pop(&l));
    assert_int_equal(l.n, 0);
    br_wqlist_push(&l, &jobs[1].node);
    br_wqlist_push(&l, &jobs[3].node);
    br_wqlist_insert(&l, &l.head, &jobs[0].node);             /* at the head */
    br_wqlist_insert(&l, &l.head->next->next, &jobs[2].node); /* before 3 */
    br_wqlist_insert(&l, l.tail, &jobs[5].node);              /* at the tail */
    br_wqnode_t **at = &l.head;
    while (*at && job_of(*at)->id != 5)
        at = &(*at)->next;
    br_wqlist_insert(&l, at, &jobs[4].node); /* before 5 */
    assert_int_equal(l.n, 6);
    /* out of the middle, then the last one: the tail follows */
    assert_ptr_equal(br_wqlist_unlink(&l, &l.head->next), &jobs[1].node);
    at = &l.head;
    while ((*at)->next)
        at = &(*at)->next;
    assert_ptr_equal(br_wqlist_unlink(&l, at), &jobs[5].node);
    assert_ptr_equal(l.tail, at);
    br_wqlist_push(&l, &jobs[6].node);
    assert_int_equal(l.n, 5);
    const int want[] = {0, 2, 3, 4, 6};
    for (int i = 0; i < 5; i++)
        assert_int_equal(job_of(br_wqlist_pop(&l))->id, want[i]);
    assert_null(br_wqlist_pop(&l));
    assert_int_equal(l.n, 0);
    assert_ptr_equal(l.tail, &l.head);
    br_wqlist_push(&l, &jobs[7].node); /* empty again: usable again */
    assert_ptr_equal(l.head, &jobs[7].node);
    assert_null(jobs[7].node.next);
}

/* Jobs are begun, worked and finished in order, each posting the eventfd. */
static void test_fifo(void **state)
{
    fix_t *f = *state;
    br_err_t err = {0};
    const int ids[] = {0, 1, 2, 3, 4};
    add(f, ids, 5);
    assert_int_equal(f->q.todo.n, 5);
    assert_false(readable(br_workq_fd(&f->q), 0));
    assert_int_equal(br_workq_start(&f->q, &err), 0);
    int got[5];
    take(f, got, 5);
    assert_memory_equal(got, ids, sizeof(ids));
    assert_int_equal(f->nbegan, 5);
    assert_memory_equal(f->began, ids, sizeof(ids));
    for (int i = 0; i < 5; i++) {
        assert_int_equal(jobs[i].runs, 1);
        assert_true(jobs[i].busy_ok);
        assert_false(jobs[i].saw_cancel);
    }
    /* once idle, another job still gets done */
    add(f, (int[]){5}, 1);
    take(f, got, 1);
    assert_int_equal(got[0], 5);
    br_workq_fini(&f->q);
    for (int i = 0; i < NJOBS; i++)
        assert_int_equal(jobs[i].freed, 0); /* every one was taken */
}

/* A job finish puts back is done again where it was put, and only then done. */
static void test_put_back(void **state)
{
    fix_t *f = *state;
    br_err_t err = {0};
    jobs[1].again = 1; /* at the tail: after 2 */
    add(f, (int[]){0, 1, 2}, 3);
    assert_int_equal(br_workq_start(&f->q, &err), 0);
    int got[3];
    take(f, got, 3);
    assert_memory_equal(got, ((int[]){0, 2, 1}), 3 * sizeof(int));
    assert_int_equal(f->nbegan, 4);
    assert_memory_equal(f->began, ((int[]){0, 1, 2, 1}), 4 * sizeof(int));
    assert_int_equal(jobs[1].runs, 2);
    jobs[4].again = 2; /* at the head: before 5, twice */
    jobs[4].again_head = 1;
    add(f, (int[]){3, 4, 5}, 3);
    take(f, got, 3);
    assert_memory_equal(got, ((int[]){3, 4, 5}), 3 * sizeof(int));
    assert_int_equal(f->nbegan, 9);
    assert_memory_equal(f->began + 4, ((int[]){3, 4, 4, 4, 5}), 5 * sizeof(int));
    assert_int_equal(jobs[4].runs, 3);
    assert_int_equal(f->q.todo.n, 0);
    br_workq_fini(&f->q);
}

/* A job its begin cancels is still worked (the owner's work skips it) and done;
 * the next one starts uncancelled. */
static void test_skip(void **state)
{
    fix_t *f = *state;
    br_err_t err = {0};
    jobs[0].skip = 1;
    add(f, (int[]){0, 1}, 2);
    assert_int_equal(br_workq_start(&f->q, &err), 0);
    int got[2];
    take(f, got, 2);
    assert_memory_equal(got, ((int[]){0, 1}), sizeof(got));
    assert_true(jobs[0].saw_cancel);
    assert_false(jobs[1].saw_cancel);
    assert_true(jobs[1].busy_ok);
    br_workq_fini(&f->q);
}

/* Fini cancels the job in progress, never begins what waits, and frees it all. */
static void test_stop_with_work_left(void **state)
{
    fix_t *f = *state;
    br_err_t err = {0};
    jobs[0].block = 1;
    add(f, (int[]){0, 1, 2}, 3);
    assert_int_equal(br_workq_start(&f->q, &err), 0);
    assert_true(readable(f->started, DEADLINE_MS)); /* job 0 is in progress */
    int64_t t0 = br_mono_ms();
    br_workq_fini(&f->q);
    assert_true(br_mono_ms() - t0 < DEADLINE_MS);
    assert_int_equal(jobs[0].runs, 1);
    assert_true(jobs[0].saw_cancel);
    assert_true(jobs[0].busy_ok);
    assert_int_equal(f->nbegan, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(jobs[i].freed, 1); /* 0 off done, 1 and 2 off todo */
    assert_int_equal(jobs[1].runs + jobs[2].runs, 0);
}

/* A queue whose thread never started frees what waits. */
static void test_fini_unstarted(void **state)
{
    fix_t *f = *state;
    add(f, (int[]){0, 1}, 2);
    br_workq_fini(&f->q);
    assert_int_equal(jobs[0].freed + jobs[1].freed, 2);
    assert_int_equal(jobs[0].runs + jobs[1].runs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_lists),
        T(test_fifo),
        T(test_put_back),
        T(test_skip),
        T(test_stop_with_work_left),
        T(test_fini_unstarted),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
