/* keeper.c - a process per agent run that fences its jobs when the agent cannot. */
#include "keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "task.h"
#include "util.h"

#define KEEPER_NAME "bramble-keeper" /* its comm */

/*
 * Design notes.
 *
 * The keeper is forked, not exec'd: it needs nothing but this file. After the first
 * fork (in br_agent_new, before ZeroMQ or NVML start a thread) it would be free to
 * use anything, but a replacement keeper is forked from the running, threaded
 * agent; so the keeper's loop uses system calls only (getdents64 on /proc, read,
 * kill, nanosleep, write), never malloc or stdio.
 *
 * Liveness is a time in shared memory rather than a pipe or a socket: a pipe tells
 * a dead agent from a live one, but not a paused (SIGSTOP) or stuck one from a busy
 * one. The agent writes the time at every pass of its loop, which never blocks (no
 * send waits; see agent.c), at least every second even when idle.
 */

typedef struct {
    int64_t alive_ms; /* the agent's last pass (monotonic ms) */
    int64_t fence_ms, node_timeout_ms;
    int32_t quit;  /* the agent stops on purpose */
    int32_t froze; /* times the keeper froze the jobs */
} shared_t;

struct br_keeper {
    shared_t *sh;
    pid_t pid, agent;
    char run[17];
    char env[sizeof(KEEPER_ENV) + 17];
};

static int64_t get(const int64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void set(int64_t *p, int64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* ---- the keeper process (system calls only) ------------------------------------ */

static void say(const br_keeper_t *k, const char *fmt, ...)
{
    char buf[320];
    int n = snprintf(buf, sizeof(buf), "bramble-agent keeper (run %s): ", k->run);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

static void nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* The state letter of /proc/PID/stat, or 0 when it cannot be read. Deliberately
 * not proto/procstat.c, which parses with sscanf: the keeper's loop keeps to system
 * calls (the design notes above). */
static char proc_state(int dirfd, const char *pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "%s/stat", pid);
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
    return p && p[1] == ' ' ? p[2] : 0;
}

/* Whether /proc/PID/environ holds exactly the entry needle, read in chunks. */
static int environ_has(int dirfd, const char *pid, const char *needle)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "%s/environ", pid);
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t nlen = strlen(needle), pos = 0;
    int ok = 1, found = 0;
    ssize_t n;
    while (!found && (n = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n && !found; i++) {
            if (buf[i] == '\0') {
                found = ok && pos == nlen;
                pos = 0;
                ok = 1;
                continue;
            }
            if (pos >= nlen || needle[pos] != buf[i])
                ok = 0;
            pos++;
        }
    }
    close(fd);
    return found || (ok && pos == nlen);
}

struct dirent64_raw {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* Every live process of the run: SIGSTOP those not stopped (sig SIGSTOP) or stop
 * and kill them all (SIGKILL); the number found. stop_if: keep signalling only
 * while it holds (the agent may come back in the middle). */
static int sweep(const br_keeper_t *k, int sig, int (*stop_if)(const br_keeper_t *))
{
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    char buf[8192];
    pid_t self = getpid();
    int count = 0;
    long n;
    while ((n = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
        for (long off = 0; off < n;) {
            const struct dirent64_raw *d = (const void *)(buf + off);
            off += d->reclen;
            char *end;
            long pid = strtol(d->name, &end, 10);
            if (*end || pid <= 0 || pid == self)
                continue;
            char st = proc_state(dfd, d->name);
            if (!st || st == 'Z' || st == 'X' || !environ_has(dfd, d->name, k->env))
                continue;
            count++;
            if (!stop_if(k))
                continue;
            if (sig == SIGKILL) {
                kill((pid_t)pid, SIGSTOP); /* nothing forks while it dies */
                kill((pid_t)pid, SIGKILL);
            } else if (st != 'T' && st != 't') {
                kill((pid_t)pid, SIGSTOP);
            }
        }
    }
    close(dfd);
    return count;
}

static int64_t silent_ms(const br_keeper_t *k)
{
    return br_mono_ms() - get(&k->sh->alive_ms);
}

static int still_silent(const br_keeper_t *k)
{
    return silent_ms(k) > get(&k->sh->fence_ms);
}

static int always(const br_keeper_t *k)
{
    (void)k;
    return 1;
}

static __attribute__((noreturn)) void keeper_main(br_keeper_t *k)
{
    /* it needs none of the agent's files; the data dir's lock is the agent's alone */
    if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    struct sigaction sa = {.sa_handler = SIG_IGN};
    sigaction(SIGINT, &sa, NULL); /* a terminal's ^C is for the agent */
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_NAME, KEEPER_NAME);
    shared_t *sh = k->sh;
    int dead = 0, frozen = 0, killed = 0;
    for (;; nap(KEEPER_TICK_MS)) {
        if (__atomic_load_n(&sh->quit, __ATOMIC_ACQUIRE))
            _exit(0);
        int64_t silent = silent_ms(k), fence = get(&sh->fence_ms);
        int64_t limit = fence + get(&sh->node_timeout_ms);
        if (!dead && getppid() != k->agent) {
            dead = 1;
            say(k, "the agent (pid %d) is gone; its jobs are frozen %.1fs after its last "
                   "sign of life and killed %.1fs after it",
                (int)k->agent, (double)fence / 1000.0, (double)limit / 1000.0);
        }
        if (silent <= fence) {
            frozen = killed = 0; /* alive: its own fence and the coordinator decide */
            continue;
        }
        if (!frozen) {
            frozen = 1;
            __atomic_add_fetch(&sh->froze, 1, __ATOMIC_ACQ_REL);
            say(k, "no sign of life from the agent (pid %d) for %.1fs: freezing its jobs",
                (int)k->agent, (double)silent / 1000.0);
        }
        int kill_now = silent > limit;
        int n = kill_now ? sweep(k, SIGKILL, always) : sweep(k, SIGSTOP, still_silent);
        if (kill_now && n > 0 && !killed) {
            killed = 1;
            say(k, "the agent has been silent for %.1fs, past fence and node timeout: "
                   "the coordinator has given its attempts away; killing %d process(es)",
                (double)silent / 1000.0, n);
        }
        if (dead && n == 0) {
            say(k, "none of its jobs' processes is left: exiting");
            _exit(0);
        }
    }
}

/* ---- the agent's side ------------------------------------------------------------ */

static int spawn(br_keeper_t *k, br_err_t *err)
{
    pid_t pid = fork();
    if (pid < 0)
        return br_errf(err, errno, "cannot fork the keeper: %s", strerror(errno));
    if (pid == 0)
        keeper_main(k);
    k->pid = pid;
    return 0;
}

br_keeper_t *br_keeper_new(const char *run, int64_t fence_ms, int64_t node_timeout_ms,
                           br_err_t *err)
{
    br_keeper_t *k = calloc(1, sizeof(*k));
    if (!k)
        return br_errp(err, ENOMEM, "out of memory");
    unsigned char id[8];
    if (run && strlen(run) == 16 && strspn(run, "0123456789abcdef") == 16) {
        memcpy(k->run, run, 17);
    } else if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        free(k);
        return br_errp(err, errno, "getrandom: %s", strerror(errno));
    } else {
        for (size_t i = 0; i < sizeof(id); i++)
            snprintf(k->run + 2 * i, 3, "%02x", id[i]);
    }
    snprintf(k->env, sizeof(k->env), "%s=%s", KEEPER_ENV, k->run);
    k->sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
    if (k->sh == MAP_FAILED) {
        free(k);
        return br_errp(err, errno, "keeper: mmap: %s", strerror(errno));
    }
    k->agent = getpid();
    set(&k->sh->alive_ms, br_mono_ms());
    br_keeper_set_times(k, fence_ms, node_timeout_ms);
    if (spawn(k, err) < 0) {
        munmap(k->sh, sizeof(shared_t));
        free(k);
        return NULL;
    }
    return k;
}

void br_keeper_destroy(br_keeper_t **kp)
{
    br_keeper_t *k = kp ? *kp : NULL;
    if (!k)
        return;
    __atomic_store_n(&k->sh->quit, 1, __ATOMIC_RELEASE);
    /* it goes within a tick; reap it so it is not left a zombie */
    for (int i = 0; i < 50 && k->pid > 0; i++) {
        pid_t r = waitpid(k->pid, NULL, WNOHANG);
        if (r == k->pid || (r < 0 && errno == ECHILD))
            break;
        nap(KEEPER_TICK_MS / 2);
    }
    munmap(k->sh, sizeof(shared_t));
    free(k);
    *kp = NULL;
}

int br_keeper_retire(pid_t pid, uint64_t start)
{
    uint64_t now_start;
    char comm[32];
    if (pid <= 0 || br_proc_start(pid, &now_start, comm, sizeof(comm)) < 0 ||
        now_start != start || strcmp(comm, KEEPER_NAME) != 0)
        return 0;
    kill(pid, SIGKILL);
    return 1;
}

uint64_t br_keeper_start(const br_keeper_t *k)
{
    uint64_t start = 0;
    if (k->pid > 0 && br_proc_start(k->pid, &start, NULL, 0) < 0)
        start = 0;
    return start;
}

void br_keeper_leave(br_keeper_t **kp)
{
    br_keeper_t *k = kp ? *kp : NULL;
    if (!k)
        return;
    munmap(k->sh, sizeof(shared_t));
    free(k);
    *kp = NULL;
}

const char *br_keeper_env(const br_keeper_t *k)
{
    return k->env;
}

const char *br_keeper_run_id(const br_keeper_t *k)
{
    return k->run;
}

pid_t br_keeper_pid(const br_keeper_t *k)
{
    return k->pid;
}

void br_keeper_beat(br_keeper_t *k, int64_t now_ms)
{
    set(&k->sh->alive_ms, now_ms);
}

void br_keeper_set_times(br_keeper_t *k, int64_t fence_ms, int64_t node_timeout_ms)
{
    set(&k->sh->fence_ms, fence_ms);
    set(&k->sh->node_timeout_ms, node_timeout_ms > 0 ? node_timeout_ms : fence_ms * 5 / 3);
}

int br_keeper_froze(const br_keeper_t *k)
{
    return __atomic_load_n(&k->sh->froze, __ATOMIC_ACQUIRE);
}

int br_keeper_reaped(br_keeper_t *k, pid_t pid, int status)
{
    if (!k || pid != k->pid)
        return 0;
    br_err_t err;
    fprintf(stderr, "bramble-agent: the keeper (pid %d) ended (%s %d); starting another\n",
            (int)pid, WIFSIGNALED(status) ? "signal" : "exit code",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    k->pid = -1;
    if (spawn(k, &err) < 0)
        fprintf(stderr, "bramble-agent: %s: jobs are not fenced if this agent dies\n",
                err.text);
    return 1;
}
