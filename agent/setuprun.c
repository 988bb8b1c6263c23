/* setuprun.c - a job's setup step, run inside its task (setuprun.h). */
#include "setuprun.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spec.h"
#include "util.h"

static volatile sig_atomic_t stopped; /* the signal that asked the job to stop */

static void on_stop(int sig)
{
    stopped = sig;
}

/* Append s (len bytes, shell-quoted) to out at *at. */
static int quote(const char *s, char *out, size_t len, size_t *at)
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

int br_setuprun_line(const char *exe, const char *dir, const char *failed, char *out,
                     size_t len)
{
    size_t at = 0;
    if (len == 0)
        return -1;
    out[0] = '\0';
    if (quote(exe, out, len, &at) < 0)
        return -1;
    int n = snprintf(out + at, len - at, " --setup-run ");
    if (n < 0 || (size_t)n >= len - at)
        return -1;
    at += (size_t)n;
    if (quote(dir, out, len, &at) < 0 || at + 1 >= len)
        return -1;
    out[at++] = ' ';
    if (quote(failed, out, len, &at) < 0)
        return -1;
    n = snprintf(out + at, len - at, " || exit $?\n");
    return n < 0 || (size_t)n >= len - at ? -1 : 0;
}

/* Bytes on disk under the directory dfd (taken), no symlink followed. */
static int64_t disk_use(int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    int64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        sum += (int64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd(d), de->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                sum += disk_use(sub);
        }
    }
    closedir(d);
    return sum;
}

/* The output's end, kept for a failure's reason. */
typedef struct {
    char buf[BR_SETUP_TAIL];
    size_t len;
} tail_t;

static void tail_add(tail_t *t, const char *p, size_t n)
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

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Pass what came on one of the setup's streams to ours, each line marked. */
static void pass_on(int to, int *line_start, const char *p, size_t n)
{
    static const char mark[] = "[setup] ";
    while (n > 0) {
        if (*line_start)
            write_all(to, mark, sizeof(mark) - 1);
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) + 1 : n;
        write_all(to, p, k);
        *line_start = nl != NULL;
        p += k;
        n -= k;
    }
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        write_all(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* Run setup in dir, its output passed on; its wait status (or -1). */
static int run(const char *setup, const char *dir, tail_t *tail)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(err, O_CLOEXEC) < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        setenv("BRAMBLE_ENV_DIR", dir, 1);
        execl("/bin/sh", "sh", "-c", setup, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        return -1;
    }
    struct pollfd fds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
    int starts[2] = {1, 1};
    char buf[16384];
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !fds[i].revents)
                continue;
            ssize_t n = read(fds[i].fd, buf, sizeof(buf));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                continue;
            }
            pass_on(i + 1, &starts[i], buf, (size_t)n);
            tail_add(tail, buf, (size_t)n);
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return status;
}

/* The tail as one line of at most len - 1 bytes: its last lines (whole where they
 * fit), newlines as " / ". */
static void tail_line(const tail_t *t, char *out, size_t len)
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

int br_setuprun_main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "bramble-agent --setup-run DIR FAILED: run by the agent inside a "
                        "job, not by hand\n");
        return 2;
    }
    const char *dir = argv[0], *failed = argv[1];
    char path[4200];
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    unlink(failed);
    snprintf(path, sizeof(path), "%s.lock", dir);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0) {
        say(2, "[setup] %s: %s\n", path, strerror(errno));
        return BR_SETUP_FAILED;
    }
    if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
        say(1, "[setup] another job is running this setup on this node: waiting for it\n");
        while (flock(lock, LOCK_EX) < 0)
            if (errno != EINTR || stopped)
                return 128 + (stopped ? stopped : SIGTERM);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, BR_SETUP_READY);
    if (access(path, F_OK) == 0) {
        say(1, "[setup] done by another job meanwhile; using %s\n", dir);
        return 0;
    }
    br_err_t err;
    size_t len;
    snprintf(path, sizeof(path), "%s.setup", dir);
    char *setup = br_read_file(path, BR_SPEC_MAX_SETUP + 1, &len, &err);
    if (!setup) {
        say(2, "[setup] %s\n", err.text);
        return BR_SETUP_FAILED;
    }
    br_rm_tree(AT_FDCWD, dir); /* (what a run that was killed left) */
    if (mkdir(dir, 0755) < 0) {
        say(2, "[setup] %s: %s\n", dir, strerror(errno));
        free(setup);
        return BR_SETUP_FAILED;
    }
    say(1, "[setup] running the setup; it is kept in %s for later jobs with the same one\n",
        dir);
    int64_t t0 = br_mono_ms();
    tail_t tail = {.len = 0};
    int status = run(setup, dir, &tail);
    free(setup);
    double took = (double)(br_mono_ms() - t0) / 1000.0;
    if (status == 0 && !stopped) {
        char note[160];
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int n = snprintf(note, sizeof(note), "{\"seconds\": %.3f, \"bytes\": %lld, \"built\": %lld}\n",
                         took, (long long)(fd >= 0 ? disk_use(fd) : 0), (long long)br_now_ms());
        snprintf(path, sizeof(path), "%s/%s", dir, BR_SETUP_READY);
        if (br_write_file(path, note, (size_t)n, 0644, &err) == 0) {
            say(1, "[setup] done in %.1f s\n", took);
            return 0;
        }
        say(2, "[setup] %s\n", err.text);
        status = -1;
    }
    br_rm_tree(AT_FDCWD, dir); /* the node keeps nothing of a failed run */
    char how[64], line[BR_SETUP_TAIL + 200];
    if (stopped)
        snprintf(how, sizeof(how), "stopped by signal %d", (int)stopped);
    else if (status < 0)
        snprintf(how, sizeof(how), "could not run: %s", strerror(errno));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof(how), "exit code %d", WEXITSTATUS(status));
    char last[BR_SETUP_TAIL / 2];
    tail_line(&tail, last, sizeof(last));
    int n = snprintf(line, sizeof(line), "%s after %.1f s: %s", how, took, last);
    br_write_file(failed, line, n > 0 ? strnlen(line, sizeof(line)) : 0, 0644, &err);
    say(2, "[setup] failed (%s); nothing of it is kept\n", how);
    return stopped ? 128 + stopped : BR_SETUP_FAILED;
}
