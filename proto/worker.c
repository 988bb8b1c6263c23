/* worker.c - the daemons' helper threads' common parts (worker.h). */
#include "worker.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

int br_worker_init(br_worker_t *w, const char *what, br_err_t *err)
{
    w->what = what;
    w->stop = w->started = 0;
    atomic_store(&w->cancel, 0);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0)
        return br_errf(err, errno, "%s: eventfd: %s", what, strerror(errno));
    return 0;
}

int br_worker_start(br_worker_t *w, void *(*run)(void *), void *arg, br_err_t *err)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, run, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return br_errf(err, rc, "%s thread: %s", w->what, strerror(rc));
    w->started = 1;
    return 0;
}

void br_worker_stop(br_worker_t *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    atomic_store(&w->cancel, 1);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    br_worker_post(w);
    pthread_join(w->thread, NULL);
    w->started = 0;
}

void br_worker_fini(br_worker_t *w)
{
    if (w->efd >= 0)
        close(w->efd);
    w->efd = -1;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void br_worker_post(br_worker_t *w)
{
    uint64_t one = 1; /* full only after 2^64 - 2 */
    if (w->efd >= 0 && write(w->efd, &one, sizeof(one)) < 0)
        fprintf(stderr, "%s: eventfd: %s\n", w->what, strerror(errno));
}

void br_worker_clear(br_worker_t *w)
{
    uint64_t n;
    if (read(w->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        fprintf(stderr, "%s: eventfd: %s\n", w->what, strerror(errno));
}

void br_worker_background(int nice_fallback)
{
    struct sched_param sp = {0};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_fallback);
}
