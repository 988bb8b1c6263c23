/* steprun.c - one step run inside a job's task, its output passed on (steprun.h). */
#include "steprun.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define WAIT_TICK_MS 100 /* how often an ended stream's child is looked at */

static volatile sig_atomic_t stopped; /* the signal that asked the job to stop */

static void on_stop(int sig)
{
    stopped = sig;
}

void br_steprun_catch_stop(void)
{
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int br_steprun_stopped(void)
{
    return (int)stopped;
}

int br_steprun_quote(const char *s, char *out, size_t len, size_t *at)
{
    size_t need = 2;
    for (const char *p = s; *p; p++)
        need += *p == '\'' ? 4 : 1;
    if (*at + need + 2 > len)
        return -1;
    out[(*at)++] = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(out + *at, "'\\''", 4);
            *at += 4;
        } else {
            out[(*at)++] = *p;
        }
    }
    out[(*at)++] = '\'';
    out[*at] = '\0';
    return 0;
}

void br_steprun_say(int fd, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        br_write_all(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static void tail_add(br_steprun_tail_t *t, const char *p, size_t n)
{
    if (n >= sizeof(t->buf)) {
        memcpy(t->buf, p + n - sizeof(t->buf), sizeof(t->buf));
        t->len = sizeof(t->buf);
        return;
    }
    if (t->len + n > sizeof(t->buf)) {
        size_t drop = t->len + n - sizeof(t->buf);
        memmove(t->buf, t->buf + drop, t->len - drop);
        t->len -= drop;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
}

/* Pass what came on one of the child's streams to ours, each line marked. */
static void pass_on(int to, const char *mark, int *line_start, const char *p, size_t n)
{
    size_t mark_len = strlen(mark);
    while (n > 0) {
        if (*line_start)
            br_write_all(to, mark, mark_len);
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) + 1 : n;
        br_write_all(to, p, k);
        *line_start = nl != NULL;
        p += k;
        n -= k;
    }
}

/* The child, after fork: its own group, our streams' ends, its environment. */
static void child(const char *const *argv, const int *out, const int *err,
                  const char *env_name, const char *env_value, const sigset_t *mask)
{
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, mask, NULL);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (env_name && setenv(env_name, env_value ? env_value : "", 1) < 0)
        _exit(127);
    execvp(argv[0], (char *const *)argv);
    br_steprun_say(2, "%s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Read what one stream has (fd at *fd, closed and -1 at its end). */
static void take(int *fd, int to, const char *mark, int *line_start,
                 br_steprun_tail_t *tail)
{
    char buf[16384];
    ssize_t n = read(*fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close(*fd);
        *fd = -1;
        return;
    }
    if (mark)
        pass_on(to, mark, line_start, buf, (size_t)n);
    tail_add(tail, buf, (size_t)n);
}

/* Watch the child's streams and the stop signal until the child has ended and its
 * streams are closed (or, once stopped, the child has ended). Its wait status. */
static int watch(pid_t pid, struct pollfd *fds, const char *mark,
                 br_steprun_tail_t *tail, const sigset_t *mask)
{
    int starts[2] = {1, 1}, signalled = 0, status = 0, ended = 0;
    int64_t kill_at = 0;
    for (;;) {
        int sig = (int)stopped;
        if (sig && !signalled) {
            kill(-pid, sig);
            signalled = 1;
            kill_at = br_mono_ms() + BR_STEP_GRACE_MS;
        }
        if (signalled == 1 && br_mono_ms() >= kill_at) {
            kill(-pid, SIGKILL);
            signalled = 2;
        }
        int open = fds[0].fd >= 0 || fds[1].fd >= 0;
        if (!ended && (signalled || !open)) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid || (w < 0 && errno != EINTR))
                ended = 1;
            if (w < 0 && errno != EINTR)
                status = -1;
        }
        if (ended && (!open || signalled))
            break;
        int timeout = -1;
        if (!open || signalled == 2)
            timeout = WAIT_TICK_MS;
        else if (signalled == 1) {
            int64_t left = kill_at - br_mono_ms();
            timeout = left < 0 ? 0 : left < WAIT_TICK_MS ? (int)left : WAIT_TICK_MS;
        }
        struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000L};
        int n = ppoll(fds, open ? 2 : 0, timeout < 0 ? NULL : &ts, mask);
        if (n <= 0)
            continue; /* (EINTR: a stop signal, looked at above) */
        for (int i = 0; i < 2; i++)
            if (fds[i].fd >= 0 && fds[i].revents)
                take(&fds[i].fd, i + 1, mark, &starts[i], tail);
    }
    /* stopped: what the group wrote before it went, without waiting for more */
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 64 && fds[i].fd >= 0 && poll(&fds[i], 1, 0) > 0; k++)
            take(&fds[i].fd, i + 1, mark, &starts[i], tail);
        if (fds[i].fd >= 0)
            close(fds[i].fd);
        fds[i].fd = -1;
    }
    return status;
}

int br_steprun_run(const char *const *argv, const char *mark, const char *env_name,
                   const char *env_value, br_steprun_tail_t *tail)
{
    if (stopped) {
        errno = EINTR;
        return -1;
    }
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(err, O_CLOEXEC) < 0) {
        int saved = errno;
        close(out[0]);
        close(out[1]);
        errno = saved;
        return -1;
    }
    /* the stop signals wait until ppoll, which takes them as it starts waiting */
    sigset_t stops, mask;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGHUP);
    sigaddset(&stops, SIGINT);
    sigprocmask(SIG_BLOCK, &stops, &mask);
    pid_t pid = fork();
    if (pid == 0)
        child(argv, out, err, env_name, env_value, &mask);
    int saved = errno;
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        sigprocmask(SIG_SETMASK, &mask, NULL);
        errno = saved;
        return -1;
    }
    setpgid(pid, pid); /* (as the child does: a kill of its group cannot come first) */
    struct pollfd fds[2] = {{.fd = out[0], .events = POLLIN},
                            {.fd = err[0], .events = POLLIN}};
    int status = watch(pid, fds, mark, tail, &mask);
    saved = errno;
    sigprocmask(SIG_SETMASK, &mask, NULL);
    errno = saved;
    return status;
}

void br_steprun_tail_line(const br_steprun_tail_t *t, char *out, size_t len)
{
    size_t end = t->len;
    while (end > 0 && (t->buf[end - 1] == '\n' || t->buf[end - 1] == '\r'))
        end--;
    /* back from the end while it fits, then forward to a line's start */
    size_t start = end, cost = 0;
    while (start > 0 && cost + (t->buf[start - 1] == '\n' ? 3 : 1) < len) {
        cost += t->buf[start - 1] == '\n' ? 3 : 1;
        start--;
    }
    if (start > 0 || t->len == sizeof(t->buf)) { /* cut short: from a whole line */
        const char *nl = memchr(t->buf + start, '\n', end - start);
        if (nl)
            start = (size_t)(nl - t->buf) + 1;
    }
    size_t o = 0;
    for (size_t i = start; i < end && o + 4 < len; i++) {
        char ch = t->buf[i];
        if (ch == '\n') {
            memcpy(out + o, " / ", 3);
            o += 3;
        } else if (ch != '\r') {
            out[o++] = (unsigned char)ch < 0x20 && ch != '\t' ? '?' : ch;
        }
    }
    out[o] = '\0';
    if (!o)
        br_strlcpy(out, "(no output)", len);
}

int br_steprun_line(const char *exe, const char *flag, const char *const *args, size_t n,
                    char *out, size_t len)
{
    size_t at = 0;
    if (len == 0)
        return -1;
    out[0] = '\0';
    if (br_steprun_quote(exe, out, len, &at) < 0)
        return -1;
    int k = snprintf(out + at, len - at, " %s", flag);
    if (k < 0 || (size_t)k >= len - at)
        return -1;
    at += (size_t)k;
    for (size_t i = 0; i < n; i++) {
        if (at + 2 >= len)
            return -1;
        out[at++] = ' ';
        out[at] = '\0';
        if (br_steprun_quote(args[i], out, len, &at) < 0)
            return -1;
    }
    k = snprintf(out + at, len - at, " || exit $?\n");
    return k < 0 || (size_t)k >= len - at ? -1 : 0;
}
