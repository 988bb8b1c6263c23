/* local.c - the processes of a local cluster: finding binaries, daemonizing with a
 * log file, pid files, liveness through /proc, stopping with SIGTERM then SIGKILL. */
#include "local.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procstat.h"
#include "util.h"

int local_path(char *out, size_t len, const char *dir, const char *name, br_err_t *err)
{
    int n = snprintf(out, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len)
        return br_errf(err, ENAMETOOLONG, "path too long: %s/%s", dir, name);
    return 0;
}

static int executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int local_find_bin(const char *name, char *out, size_t len, br_err_t *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            if (local_path(out, len, self, name, NULL) == 0 && executable(out))
                return 0;
        }
    }
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t k = strcspn(path, ":");
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%.*s", (int)(k < sizeof(dir) ? k : 0), path);
        if (k && local_path(out, len, dir, name, NULL) == 0 && executable(out))
            return 0;
        path += k + (path[k] == ':');
    }
    return br_errf(err, ENOENT, "cannot find %s next to bramble or on PATH", name);
}

/* In the child, before exec: own session, quiet stdin, output to the log, no fd of
 * ours (the parent's ZeroMQ sockets) left open. Never returns. */
static void child_exec(char *const argv[], const char *log, int detach)
{
    if (detach)
        setsid();
    int in = open("/dev/null", O_RDONLY);
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(127);
    long max = sysconf(_SC_OPEN_MAX);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0) < 0)
#endif
        for (long fd = 3; fd < (max > 0 ? max : 1024); fd++)
            close((int)fd);
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], argv);
    dprintf(2, "bramble: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static pid_t spawn(char *const argv[], const char *log, int detach, br_err_t *err)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return br_errf(err, errno, "fork: %s", strerror(errno));
    if (pid == 0)
        child_exec(argv, log, detach);
    return pid;
}

pid_t local_spawn(char *const argv[], const char *log, br_err_t *err)
{
    return spawn(argv, log, 1, err);
}

int local_run(char *const argv[], const char *log, br_err_t *err)
{
    int status;
    pid_t pid = spawn(argv, log, 0, err);
    if (pid < 0)
        return -1;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return br_errf(err, errno, "waitpid: %s", strerror(errno));
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

int local_write_pid(const char *path, pid_t pid, br_err_t *err)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%ld\n", (long)pid);
    return br_write_file(path, buf, (size_t)n, 0600, err);
}

pid_t local_read_pid(const char *path)
{
    char *text = br_read_file(path, 64, NULL, NULL);
    if (!text)
        return 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    int ok = end != text && (*end == '\n' || *end == 0) && v > 1 && v < INT_MAX;
    free(text);
    return ok ? (pid_t)v : 0;
}

/* The state letter of /proc/PID/stat ('R', 'S', 'Z', ...), 0 when gone. */
static char proc_state(pid_t pid)
{
    br_procstat_t ps;
    return br_procstat_read(-1, pid, &ps) == 0 ? ps.state : 0;
}

static int is_bramble(pid_t pid)
{
    char path[64], buf[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1; /* cannot tell: trust the pid file */
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    if (!buf[0])
        return 1; /* in the middle of execve, cmdline reads empty */
    const char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    return strncmp(base, "bramble", 7) == 0;
}

int local_alive(pid_t pid)
{
    if (pid <= 1)
        return 0;
    if (waitpid(pid, NULL, WNOHANG) == pid)
        return 0; /* our child, and it just ended */
    if (kill(pid, 0) < 0 && errno != EPERM)
        return 0;
    char st = proc_state(pid);
    if (st == 'Z' || st == 'X')
        return 0;
    return is_bramble(pid);
}

static int any_alive(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (local_alive(pids[i]))
            return 1;
    return 0;
}

void local_stop(const pid_t *pids, int n, int timeout_ms, int *killed)
{
    for (int i = 0; i < n; i++) {
        if (killed)
            killed[i] = 0;
        if (local_alive(pids[i]))
            kill(pids[i], SIGTERM);
    }
    int64_t deadline = br_mono_ms() + timeout_ms;
    while (any_alive(pids, n) && br_mono_ms() < deadline) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < n; i++) {
        if (!local_alive(pids[i]))
            continue;
        kill(pids[i], SIGKILL);
        if (killed)
            killed[i] = 1;
        for (int k = 0; k < 40 && local_alive(pids[i]); k++) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
}

void local_log_tail(const char *path, int lines)
{
    size_t len = 0;
    char *text = br_read_file(path, 16 << 20, &len, NULL);
    if (!text) {
        fprintf(stderr, "  (no log at %s)\n", path);
        return;
    }
    size_t start = len;
    if (start && text[start - 1] == '\n')
        start--;
    for (int seen = 0; start > 0; start--)
        if (text[start - 1] == '\n' && ++seen == lines)
            break;
    fprintf(stderr, "--- last lines of %s ---\n%s%s", path, text + start,
            len && text[len - 1] != '\n' ? "\n" : "");
    free(text);
}

int local_free_port(br_err_t *err)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return br_errf(err, errno, "socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
        int e = errno;
        close(fd);
        return br_errf(err, e, "cannot find a free port: %s", strerror(e));
    }
    close(fd);
    return ntohs(a.sin_port);
}
