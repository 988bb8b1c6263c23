/* quietrun.c - a short command run and waited for (quietrun.h). */
#include "quietrun.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* Keep the end of what came: buf holds at most len - 1 bytes. */
static void keep(char *buf, size_t len, size_t *at, const char *p, size_t n)
{
    if (!buf || len < 2)
        return;
    size_t cap = len - 1;
    if (n >= cap) {
        memcpy(buf, p + n - cap, cap);
        *at = cap;
        return;
    }
    if (*at + n > cap) {
        size_t drop = *at + n - cap;
        memmove(buf, buf + drop, *at - drop);
        *at -= drop;
    }
    memcpy(buf + *at, p, n);
    *at += n;
}

int br_quietrun(char *const *argv, int timeout_ms, char *out, size_t len)
{
    int fds[2] = {-1, -1};
    size_t at = 0;
    if (out && len)
        out[0] = '\0';
    if (out && pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(out ? fds[1] : null, 1); /* (dropped: no pipe a daemon it starts holds) */
        dup2(out ? fds[1] : null, 2);
        setpgid(0, 0);
        execvp(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (fds[1] >= 0)
        close(fds[1]);
    if (pid < 0) {
        if (fds[0] >= 0)
            close(fds[0]);
        return -1;
    }
    int64_t until = br_mono_ms() + timeout_ms;
    int status = 0, late = 0, reaped = 0;
    char buf[4096];
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    while (p.fd >= 0) { /* its output, until it ends (it exited, or closed it) */
        int64_t left = until - br_mono_ms();
        if (left <= 0) {
            late = 1;
            break;
        }
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n > 0)
            keep(out, len, &at, buf, (size_t)n);
        else if (n == 0 || errno != EINTR)
            p.fd = -1;
    }
    while (!late && !reaped) { /* its end */
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            reaped = 1;
        else if (r < 0 && errno != EINTR)
            break;
        else if (br_mono_ms() > until)
            late = 1;
        else
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    if (fds[0] >= 0)
        close(fds[0]);
    if (late) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
    if (!reaped)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    if (out && len) {
        while (at > 0 && (out[at - 1] == '\n' || out[at - 1] == '\r'))
            at--;
        out[at] = '\0';
        if (late)
            snprintf(out, len, "%s did not end within %d ms", argv[0], timeout_ms);
    }
    return late || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}
