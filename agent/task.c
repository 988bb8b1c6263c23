/* task.c - one job process: fork/exec as the job user, pipes, and the process tree. */
#include "task.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procstat.h"
#include "util.h"

/*
 * Design notes.
 *
 * Everything that is not async-signal-safe (passwd and group lookups, building the
 * environment, formatting messages) happens in the parent before fork: the agent
 * may have threads (ZeroMQ's I/O threads), and after fork only async-signal-safe
 * calls are allowed in the child. So an unknown user or a non-root agent asked to
 * switch users fails without forking at all; the child only does system calls and
 * reports a failing one (chdir, setuid, exec...) as {stage, errno} through a
 * close-on-exec pipe. The parent blocks on that pipe until exec succeeds (EOF) or
 * the child reports, and reaps a child that failed.
 *
 * The tree is found by scanning /proc: the leader's process group, plus every live
 * process whose initial environment holds "BRAMBLE_TASK=<tag>". A process that
 * execs with a scrubbed environment after leaving the group escapes; a cgroup would
 * not have that hole, and can replace this scan where the agent owns one.
 */

#define TASK_ENV_NAME "BRAMBLE_TASK"
#define WAITER_NAME "bramble-wait" /* its comm, which an adopting agent checks */
#define FREEZE_WAIT_MS 500
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

enum child_stage {
    STAGE_SETUP = 1, /* dup2, signals, session */
    STAGE_GROUPS,
    STAGE_SETGID,
    STAGE_SETUID,
    STAGE_CHDIR,
    STAGE_EXEC,
    STAGE_NS,    /* joining the task's mount namespace */
    STAGE_TTY,   /* taking the terminal */
    STAGE_MOUNT, /* + the mount's index */
};

struct child_report {
    int stage;
    int errnum;
};

struct br_task {
    br_task_t *next; /* the live tasks of this process (br_task_of_pid) */
    pid_t pid;       /* the job's process (its process group and session) */
    pid_t waiter;    /* its waiter, the agent's child (or a previous agent's) */
    int pidfd;       /* adopted: the waiter's pidfd, readable once it is gone; else -1 */
    char *exit_path; /* where the waiter writes the exit status, or NULL */
    uid_t uid;       /* whom it runs as */
    gid_t gid;
    int fds[3]; /* [1] stdout, [2] stderr read ends; [0] unused (-1) */
    int done;
    int exit_code;
    int signal;
    char *tag;
    char *also; /* NULL, or the second entry descendants must carry */
};

/* Everything the child needs, prepared by the parent. */
struct child_plan {
    const char *argv[4];
    char **envp;
    const char *workdir; /* explicit workdir, or NULL */
    const char *home;    /* fallback when workdir is NULL, may be NULL */
    uid_t run_uid;       /* whom the task runs as (switching or not) */
    gid_t run_gid;
    int switch_user;
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    int ngroups;
    int null_fd;
    int out_w, err_w, report_w;
    int out_r, err_r;       /* the read ends the waiter keeps (at fds 3 and 4) */
    const char *exit_path;  /* where the waiter writes the exit status, or NULL */
    const char *const *mounts; /* pairs from, to (br_task_opts_t), or NULL */
    int ns_fd;    /* br_task_join: the task's mount namespace, or -1 */
    int tty;      /* br_task_join: fds in/out/err are a terminal's, to take */
    int in_r;     /* br_task_join: its stdin (out_w and err_w its stdout and stderr) */
    const char **jargv; /* br_task_join: what it runs (any length) */
};

/* ---- environment ---------------------------------------------------------------- */

typedef struct {
    char **v;
    size_t n, cap;
} env_list_t;

static size_t env_name_len(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

static int env_same_name(const char *a, const char *b)
{
    size_t la = env_name_len(a);
    return la == env_name_len(b) && strncmp(a, b, la) == 0;
}

static void env_free(env_list_t *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
    e->v = NULL;
    e->n = e->cap = 0;
}

/* Take ownership of entry (malloc'd "K=V"); replaces an entry of the same name. */
static int env_put(env_list_t *e, char *entry)
{
    if (!entry)
        return -1;
    for (size_t i = 0; i < e->n; i++) {
        if (env_same_name(e->v[i], entry)) {
            free(e->v[i]);
            e->v[i] = entry;
            return 0;
        }
    }
    if (e->n + 1 >= e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        char **v = realloc(e->v, cap * sizeof(*v));
        if (!v) {
            free(entry);
            return -1;
        }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = entry;
    e->v[e->n] = NULL;
    return 0;
}

static int env_set(env_list_t *e, const char *name, const char *value)
{
    char *entry;
    if (asprintf(&entry, "%s=%s", name, value) < 0)
        return -1;
    return env_put(e, entry);
}

/* Whether the agent's variable entry goes on to its jobs: only what locale, time
 * zone, terminal, program search and shared library search need, and bramble's own
 * BRAMBLE_* settings except anything secret. Everything else the agent was started
 * with (SUDO_*, SSH_AUTH_SOCK, cloud keys, proxies) stays with the agent; a job
 * that needs a variable gets it from its spec's env. */
static int env_passes(const char *entry)
{
    static const char *const names[] = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM",
                                        "LD_LIBRARY_PATH"};
    size_t n = env_name_len(entry);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == n && strncmp(entry, names[i], n) == 0)
            return 1;
    if (n > 3 && strncmp(entry, "LC_", 3) == 0)
        return 1;
    if (n > 8 && strncmp(entry, "BRAMBLE_", 8) == 0) {
        static const char *const secret[] = {"CREDENTIAL", "TOKEN", "SECRET", "KEY",
                                             "PASSWORD"};
        char name[256];
        if (n >= sizeof(name))
            return 0;
        memcpy(name, entry, n);
        name[n] = '\0';
        for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++)
            if (strstr(name, secret[i]))
                return 0;
        return 1;
    }
    return 0;
}

/* A login shell worth giving a job as SHELL: nologin and false are not. */
static const char *job_shell(const char *shell)
{
    if (!shell || !*shell || strstr(shell, "nologin") ||
        (strlen(shell) >= 6 && strcmp(shell + strlen(shell) - 6, "/false") == 0))
        return "/bin/sh";
    return shell;
}

static int env_build(env_list_t *e, const br_task_opts_t *opts, const struct passwd *pw,
                     uid_t uid, br_err_t *err)
{
    extern char **environ;
    if (env_set(e, "PATH", "/usr/local/bin:/usr/bin:/bin") < 0)
        goto nomem;
    for (char **p = environ; p && *p; p++) {
        if (!strchr(*p, '=') || !env_passes(*p))
            continue;
        if (env_put(e, strdup(*p)) < 0)
            goto nomem;
    }
    char num[32];
    snprintf(num, sizeof(num), "%u", (unsigned)uid);
    if (pw ? (env_set(e, "HOME", pw->pw_dir) < 0 || env_set(e, "USER", pw->pw_name) < 0 ||
              env_set(e, "LOGNAME", pw->pw_name) < 0 ||
              env_set(e, "SHELL", job_shell(pw->pw_shell)) < 0)
           : (env_set(e, "HOME", "/") < 0 || env_set(e, "USER", num) < 0 ||
              env_set(e, "LOGNAME", num) < 0 || env_set(e, "SHELL", "/bin/sh") < 0))
        goto nomem;
    for (const char *const *p = opts->env; p && *p; p++) {
        if (!strchr(*p, '=') || **p == '=')
            return br_errf(err, EINVAL, "environment entry '%s' needs KEY=VALUE", *p);
        if (env_put(e, strdup(*p)) < 0)
            goto nomem;
    }
    if (env_set(e, TASK_ENV_NAME, opts->tag) < 0)
        goto nomem;
    return 0;
nomem:
    return br_errf(err, ENOMEM, "out of memory building the task environment");
}

/* ---- job user ------------------------------------------------------------------- */

typedef struct {
    struct passwd pw;
    char *buf;
    int found;
} pw_entry_t;

static int pw_lookup(pw_entry_t *p, const char *name, uid_t uid)
{
    size_t size = 4096;
    struct passwd *res = NULL;
    for (;;) {
        char *buf = realloc(p->buf, size);
        if (!buf)
            return -1;
        p->buf = buf;
        int rc = name ? getpwnam_r(name, &p->pw, buf, size, &res)
                      : getpwuid_r(uid, &p->pw, buf, size, &res);
        if (rc == ERANGE && size < (1u << 20)) {
            size *= 2;
            continue;
        }
        p->found = rc == 0 && res != NULL;
        return 0;
    }
}

static int load_groups(struct child_plan *plan, const struct passwd *pw)
{
    int n = 64;
    for (int tries = 0; tries < 8; tries++) {
        gid_t *g = realloc(plan->groups, (size_t)n * sizeof(*g));
        if (!g)
            return -1;
        plan->groups = g;
        int want = n;
        if (getgrouplist(pw->pw_name, pw->pw_gid, g, &want) >= 0) {
            plan->ngroups = want;
            return 0;
        }
        n = want > n ? want : n * 2;
    }
    return -1;
}

/* Decide whose identity the task runs under. pw receives the passwd entry whose
 * HOME/USER/LOGNAME the task gets (job user, else the agent's own, if known). */
/* "#UID:GID" -> 0 and the numbers, else -1. */
static int parse_ids(const char *text, uid_t *uid, gid_t *gid)
{
    char *end;
    if (text[0] != '#' || text[1] < '0' || text[1] > '9')
        return -1;
    unsigned long u = strtoul(text + 1, &end, 10);
    if (*end != ':' || end[1] < '0' || end[1] > '9' || u >= UINT32_MAX)
        return -1;
    unsigned long g = strtoul(end + 1, &end, 10);
    if (*end || g >= UINT32_MAX)
        return -1;
    *uid = (uid_t)u;
    *gid = (gid_t)g;
    return 0;
}

/* The value of HOME among opts->env (the last one), or NULL. */
static const char *opts_home(const br_task_opts_t *opts)
{
    const char *home = NULL;
    for (const char *const *p = opts->env; p && *p; p++)
        if (strncmp(*p, "HOME=", 5) == 0)
            home = *p + 5;
    return home;
}

/* A uid and gid given by number ("#UID:GID"): its passwd entry when there is one
 * (groups, home), else no supplementary group and the home the env gives. */
static int plan_ids(struct child_plan *plan, const br_task_opts_t *opts, pw_entry_t *pw,
                    br_err_t *err)
{
    uid_t uid;
    gid_t gid;
    if (parse_ids(opts->user, &uid, &gid) < 0)
        return br_errf(err, EINVAL, "job user '%s': expected a name or #UID:GID",
                       opts->user);
    if (pw_lookup(pw, NULL, uid) < 0)
        return br_errf(err, ENOMEM, "out of memory looking up uid %u", (unsigned)uid);
    plan->run_uid = uid;
    plan->run_gid = gid;
    plan->home = opts_home(opts);
    if (!plan->home && pw->found)
        plan->home = pw->pw.pw_dir;
    if (uid == geteuid() && gid == getegid())
        return 0;
    if (geteuid() != 0)
        return br_errf(err, EPERM, "switching to uid %u needs a root agent",
                       (unsigned)uid);
    plan->switch_user = 1;
    plan->uid = uid;
    plan->gid = gid;
    if (pw->found && pw->pw.pw_gid == gid)
        return load_groups(plan, &pw->pw) < 0
                   ? br_errf(err, ENOMEM, "cannot list the groups of uid %u", (unsigned)uid)
                   : 0;
    plan->ngroups = 0; /* setgroups(0): none besides gid */
    return 0;
}

static int plan_user(struct child_plan *plan, const br_task_opts_t *opts,
                     pw_entry_t *pw, br_err_t *err)
{
    plan->run_uid = geteuid();
    plan->run_gid = getegid();
    if (!opts->user || !*opts->user) {
        if (pw_lookup(pw, NULL, geteuid()) < 0)
            return br_errf(err, ENOMEM, "out of memory looking up the agent's user");
        plan->home = pw->found ? pw->pw.pw_dir : NULL;
        return 0;
    }
    if (opts->user[0] == '#')
        return plan_ids(plan, opts, pw, err);
    if (pw_lookup(pw, opts->user, 0) < 0)
        return br_errf(err, ENOMEM, "out of memory looking up job user '%s'",
                       opts->user);
    if (!pw->found)
        return br_errf(err, ENOENT, "job user '%s' does not exist", opts->user);
    plan->home = pw->pw.pw_dir;
    plan->run_uid = pw->pw.pw_uid;
    plan->run_gid = pw->pw.pw_gid;
    if (pw->pw.pw_uid == geteuid())
        return 0;
    if (geteuid() != 0)
        return br_errf(err, EPERM, "switching to job user '%s' needs a root agent",
                       opts->user);
    plan->switch_user = 1;
    plan->uid = pw->pw.pw_uid;
    plan->gid = pw->pw.pw_gid;
    if (load_groups(plan, &pw->pw) < 0)
        return br_errf(err, ENOMEM, "cannot list the groups of job user '%s'",
                       opts->user);
    return 0;
}

/* ---- the child (async-signal-safe only) ----------------------------------------- */

static __attribute__((noreturn)) void child_fail(const struct child_plan *plan,
                                                 int stage)
{
    struct child_report r = {stage, errno};
    ssize_t n = write(plan->report_w, &r, sizeof(r));
    (void)n;
    _exit(127);
}

static void child_close_fds(const struct child_plan *plan)
{
    /* Mark rather than close, so the report pipe stays usable until exec. */
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    struct rlimit rl;
    int max = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)max)
        max = (int)rl.rlim_cur;
    for (int fd = 3; fd < max; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static void child_stdio(struct child_plan *plan)
{
    /* An agent started with 0-2 closed gets pipes there: move them out of the way. */
    if (plan->report_w < 3 &&
        (plan->report_w = fcntl(plan->report_w, F_DUPFD_CLOEXEC, 3)) < 0)
        _exit(127);
    int src[3] = {plan->null_fd, plan->out_w, plan->err_w};
    for (int i = 0; i < 3; i++) {
        if (src[i] < 3 && (src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 3)) < 0)
            child_fail(plan, STAGE_SETUP);
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(src[i], i) < 0)
            child_fail(plan, STAGE_SETUP);
    }
    child_close_fds(plan);
}

static void child_signals(const struct child_plan *plan)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &sa, NULL); /* EINVAL for KILL, STOP and libc's own: fine */
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        child_fail(plan, STAGE_SETUP);
}

static void child_identity(const struct child_plan *plan)
{
    if (!plan->switch_user)
        return;
    if (setgroups((size_t)plan->ngroups, plan->ngroups ? plan->groups : NULL) < 0)
        child_fail(plan, STAGE_GROUPS);
    if (setgid(plan->gid) < 0)
        child_fail(plan, STAGE_SETGID);
    if (setuid(plan->uid) < 0)
        child_fail(plan, STAGE_SETUID);
}

/* The task's own mount namespace, where nothing it mounts reaches the host (and
 * the host's later mounts still reach it), with each tree read-only at its place;
 * and no privileges to gain from then on. */
static void child_mounts(const struct child_plan *plan)
{
    if (!plan->mounts || !plan->mounts[0])
        return;
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        child_fail(plan, STAGE_MOUNT);
    for (int i = 0; plan->mounts[2 * i]; i++) {
        const char *from = plan->mounts[2 * i], *to = plan->mounts[2 * i + 1];
        if (mount(from, to, NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, to, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                  NULL) < 0)
            child_fail(plan, STAGE_MOUNT + i);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_fail(plan, STAGE_MOUNT);
}

static __attribute__((noreturn)) void child_run(struct child_plan *plan)
{
    if (setsid() < 0)
        child_fail(plan, STAGE_SETUP);
    child_stdio(plan);
    child_mounts(plan);
    child_identity(plan);
    if (plan->workdir) {
        if (chdir(plan->workdir) < 0)
            child_fail(plan, STAGE_CHDIR);
    } else if (!plan->home || chdir(plan->home) < 0) {
        if (chdir("/") < 0)
            child_fail(plan, STAGE_CHDIR);
    }
    /* Last: with the mask cleared a signal may now kill us, which is its meaning. */
    child_signals(plan);
    execve("/bin/sh", (char *const *)plan->argv, plan->envp);
    child_fail(plan, STAGE_EXEC);
}

/* Write v in decimal and a newline to fd. */
static void write_int(int fd, int v)
{
    char buf[16];
    int n = (int)sizeof(buf);
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    buf[--n] = '\n';
    do {
        buf[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u && n > 1);
    if (v < 0)
        buf[--n] = '-';
    ssize_t w = write(fd, buf + n, sizeof(buf) - (size_t)n);
    (void)w;
}

/* The waiter: forks the job, keeps a read end of its stdout and stderr (at fds 3
 * and 4, where an agent started again opens them through /proc), reaps it (and
 * whatever of its tree is orphaned meanwhile), writes its wait status to
 * plan->exit_path and ends the way the job ended, so that its parent's waitpid
 * reads the job's status. */
static __attribute__((noreturn)) void waiter_run(struct child_plan *plan, int report_r)
{
    close(report_r);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_NAME, WAITER_NAME);
    struct rlimit no_core = {0, 0}; /* it ends by the job's signal: no core of its own */
    setrlimit(RLIMIT_CORE, &no_core);
    pid_t job = fork();
    if (job < 0)
        child_fail(plan, STAGE_SETUP);
    if (job == 0)
        child_run(plan);
    struct child_report r = {0, (int)job}; /* the job's pid first */
    if (write(plan->report_w, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(127);
    /* keep only the read ends (3, 4), /dev/null on 0-2 and the exit file (5):
     * nothing of the agent's (its lock, its sockets) and no write end of the
     * report pipe, whose EOF tells the agent that the job's exec succeeded */
    int out = fcntl(plan->out_r, F_DUPFD, 10), err = fcntl(plan->err_r, F_DUPFD, 10);
    int null = fcntl(plan->null_fd, F_DUPFD, 10);
    if (out < 0 || err < 0 || null < 0 || dup2(out, 3) < 0 || dup2(err, 4) < 0)
        _exit(127);
    for (int i = 0; i < 3; i++)
        dup2(null, i);
    int exit_fd = plan->exit_path ? open(plan->exit_path, O_WRONLY | O_CREAT | O_TRUNC, 0600)
                                  : -1;
    if (exit_fd >= 0 && exit_fd != 5)
        exit_fd = dup2(exit_fd, 5);
    if (close_range(6, ~0U, 0) < 0)
        for (int fd = 6; fd < 1024; fd++)
            close(fd);
    if (exit_fd < 0)
        close(5);
    int status;
    pid_t got;
    do {
        got = waitpid(-1, &status, 0);
    } while (got != job && (got > 0 || errno == EINTR));
    if (got != job)
        _exit(127);
    if (exit_fd >= 0)
        write_int(exit_fd, status);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_DFL;
        sigaction(sig, &sa, NULL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        kill(getpid(), sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        _exit(128 + sig);
    }
    _exit(WEXITSTATUS(status));
}

/* ---- the parent ----------------------------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static int report_error(const struct child_report *r, const br_task_opts_t *opts,
                        const char *workdir, br_err_t *err)
{
    const char *what = strerror(r->errnum);
    switch (r->stage) {
    case STAGE_CHDIR:
        return br_errf(err, r->errnum, "workdir %s: %s", workdir, what);
    case STAGE_EXEC:
        return br_errf(err, r->errnum, "cannot run /bin/sh: %s", what);
    case STAGE_GROUPS:
    case STAGE_SETGID:
    case STAGE_SETUID:
        return br_errf(err, r->errnum, "switching to job user '%s': %s", opts->user,
                       what);
    default:
        if (r->stage >= STAGE_MOUNT && opts->mounts) {
            int i = r->stage - STAGE_MOUNT;
            for (int k = 0; k <= i; k++)
                if (!opts->mounts[2 * k])
                    i = -1;
            if (i >= 0)
                return br_errf(err, r->errnum, "mounting %s read-only: %s",
                               opts->mounts[2 * i + 1], what);
        }
        return br_errf(err, r->errnum, "setting up the task process: %s", what);
    }
}

/* Wait for the waiter's word: the job's pid first, then EOF once the job's exec
 * succeeded or the report of the step that failed. On failure the waiter is reaped
 * (it ends once it has reaped the job). */
static int await_exec(pid_t waiter, int report_r, pid_t *job, const br_task_opts_t *opts,
                      const char *workdir, br_err_t *err)
{
    struct child_report r;
    ssize_t n;
    *job = -1;
    for (;;) {
        do {
            n = read(report_r, &r, sizeof(r));
        } while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof(r) && r.stage == 0 && *job < 0) {
            *job = (pid_t)r.errnum;
            continue;
        }
        break;
    }
    if (n == 0 && *job > 0)
        return 0;
    if (n != (ssize_t)sizeof(r) || r.stage == 0)
        r = (struct child_report){STAGE_SETUP, n < 0 ? errno : EIO};
    while (waitpid(waiter, NULL, 0) < 0 && errno == EINTR)
        ;
    return report_error(&r, opts, workdir, err);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static pid_t spawn(struct child_plan *plan, int report_r)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0)
        waiter_run(plan, report_r);
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = saved;
    return pid;
}

static int open_pipes(int out[2], int errp[2], int report[2], int *null_fd)
{
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
        pipe2(report, O_CLOEXEC) < 0)
        return -1;
    if (set_nonblock(out[0]) < 0 || set_nonblock(errp[0]) < 0)
        return -1;
    *null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    return *null_fd < 0 ? -1 : 0;
}

static br_task_t *task_alloc(const char *tag)
{
    br_task_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->tag = strdup(tag);
    if (!t->tag) {
        free(t);
        return NULL;
    }
    t->pid = t->waiter = -1;
    t->pidfd = -1;
    t->fds[0] = t->fds[1] = t->fds[2] = -1;
    t->exit_code = t->signal = -1;
    return t;
}

static int launch(br_task_t *t, struct child_plan *plan, const br_task_opts_t *opts,
                  br_err_t *err)
{
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, report[2] = {-1, -1};
    int rc = -1;
    plan->null_fd = -1;
    if (open_pipes(out, errp, report, &plan->null_fd) < 0) {
        br_errf(err, errno, "cannot create task pipes: %s", strerror(errno));
        goto out;
    }
    plan->out_w = out[1];
    plan->err_w = errp[1];
    plan->report_w = report[1];
    plan->out_r = out[0];
    plan->err_r = errp[0];
    plan->exit_path = opts->exit_path;
    pid_t waiter = spawn(plan, report[0]), job;
    if (waiter < 0) {
        br_errf(err, errno, "cannot fork the task: %s", strerror(errno));
        goto out;
    }
    close_fd(&out[1]);
    close_fd(&errp[1]);
    close_fd(&report[1]);
    if (await_exec(waiter, report[0], &job, opts, opts->workdir ? opts->workdir : "/",
                   err) < 0) {
        if (opts->exit_path)
            unlink(opts->exit_path);
        goto out;
    }
    t->pid = job;
    t->waiter = waiter;
    t->fds[1] = out[0];
    t->fds[2] = errp[0];
    out[0] = errp[0] = -1;
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        close_fd(&out[i]);
        close_fd(&errp[i]);
        close_fd(&report[i]);
    }
    close_fd(&plan->null_fd);
    return rc;
}

static br_task_t *live_tasks; /* every task started and not destroyed yet */

/* Where the mounts go: made (0755, as the agent) when missing, and each a directory;
 * a root agent's alone, since mounting needs one. Walked a part at a time without
 * following symlinks, so that no link sends the making of a directory elsewhere. */
static int mount_points(const br_task_opts_t *opts, br_err_t *err)
{
    if (!opts->mounts || !opts->mounts[0])
        return 0;
    if (geteuid() != 0)
        return br_errf(err, EPERM, "mounting %s read-only needs an agent running as root",
                       opts->mounts[1]);
    for (int i = 0; opts->mounts[2 * i]; i++) {
        const char *to = opts->mounts[2 * i + 1];
        char path[PATH_MAX];
        if (strlen(to) >= sizeof(path) || to[0] != '/')
            return br_errf(err, EINVAL, "mount point '%.80s': not an absolute path", to);
        strcpy(path, to);
        int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char *save = NULL;
        for (char *part = strtok_r(path, "/", &save); part && fd >= 0;
             part = strtok_r(NULL, "/", &save)) {
            if (mkdirat(fd, part, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                return br_errf(err, e, "mount point %s: cannot make %s: %s", to, part,
                               strerror(e));
            }
            int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            close(fd);
            if (next < 0)
                return br_errf(err, ENOTDIR, "mount point %s: %s is not a directory (or is "
                                             "a symlink)", to, part);
            fd = next;
        }
        if (fd < 0)
            return br_errf(err, errno, "mount point %s: %s", to, strerror(errno));
        close(fd);
    }
    return 0;
}

br_task_t *br_task_start(const br_task_opts_t *opts, br_err_t *err)
{
    if (!opts || !opts->command || !opts->tag || !*opts->tag)
        return br_errp(err, EINVAL, "a task needs a command and a tag");
    struct child_plan plan = {.argv = {"/bin/sh", "-c", opts->command, NULL},
                              .workdir = opts->workdir,
                              .mounts = opts->mounts};
    pw_entry_t pw = {0};
    env_list_t env = {0};
    br_task_t *t = NULL;
    if (mount_points(opts, err) < 0 || plan_user(&plan, opts, &pw, err) < 0 ||
        env_build(&env, opts, pw.found ? &pw.pw : NULL, plan.run_uid, err) < 0)
        goto out;
    plan.envp = env.v;
    t = task_alloc(opts->tag);
    if (t && ((opts->also && !(t->also = strdup(opts->also))) ||
              (opts->exit_path && !(t->exit_path = strdup(opts->exit_path))))) {
        br_task_destroy(&t);
        br_errf(err, ENOMEM, "out of memory starting a task");
        goto out;
    }
    if (!t) {
        br_errf(err, ENOMEM, "out of memory starting a task");
        goto out;
    }
    t->uid = plan.run_uid;
    t->gid = plan.run_gid;
    if (launch(t, &plan, opts, err) < 0) {
        int saved = errno;
        br_task_destroy(&t);
        errno = saved;
    } else {
        t->next = live_tasks;
        live_tasks = t;
    }
out:;
    int saved = errno;
    env_free(&env);
    free(plan.groups);
    free(pw.buf);
    errno = saved;
    return t;
}


/* ---- a process joined to a running task (br_task_join) ---------------------------- */

/* The shell br_task_join runs without a command: the job user's, unless it is
 * none or one that refuses logins. */
#define JOIN_SHELL                                                                      \
    "case \"${SHELL:-}\" in ''|*/nologin|*/false) exec /bin/sh ;; *) exec \"$SHELL\" ;; " \
    "esac"

static __attribute__((noreturn)) void joiner_run(struct child_plan *plan)
{
    if (setsid() < 0)
        child_fail(plan, STAGE_SETUP);
    if (plan->tty && ioctl(plan->in_r, TIOCSCTTY, 0) < 0)
        child_fail(plan, STAGE_TTY);
    if (plan->report_w < 3 &&
        (plan->report_w = fcntl(plan->report_w, F_DUPFD_CLOEXEC, 3)) < 0)
        _exit(127);
    int src[3] = {plan->in_r, plan->out_w, plan->err_w};
    for (int i = 0; i < 3; i++)
        if (src[i] < 3 && (src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 3)) < 0)
            child_fail(plan, STAGE_SETUP);
    for (int i = 0; i < 3; i++)
        if (dup2(src[i], i) < 0)
            child_fail(plan, STAGE_SETUP);
    if (plan->ns_fd >= 0 && setns(plan->ns_fd, CLONE_NEWNS) < 0)
        child_fail(plan, STAGE_NS);
    child_close_fds(plan);
    child_identity(plan);
    if (!plan->workdir || chdir(plan->workdir) < 0) /* (gone: home, as a login would) */
        if (!plan->home || chdir(plan->home) < 0)
            if (chdir("/") < 0)
                child_fail(plan, STAGE_CHDIR);
    child_signals(plan);
    execve("/bin/sh", (char *const *)plan->jargv, plan->envp);
    child_fail(plan, STAGE_EXEC);
}

/* The task leader's environment, as it was exec'd: NULL-terminated entries in one
 * block (entries point into *block), plus room for two more. NULL with err. */
static char **leader_env(pid_t pid, char **block, br_err_t *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    size_t len = 0;
    *block = br_read_file(path, 1 << 20, &len, err);
    if (!*block)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += (*block)[i] == '\0';
    char **v = calloc(n + 3, sizeof(*v));
    if (!v) {
        free(*block);
        *block = NULL;
        return br_errp(err, ENOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < len && k < n; i += strlen(*block + i) + 1)
        if ((*block)[i])
            v[k++] = *block + i;
    return v;
}

/* Set name=value in env (an array with room for one more), replacing it. */
static void env_replace(char **env, char *entry)
{
    size_t i = 0;
    for (; env[i]; i++)
        if (env_same_name(env[i], entry)) {
            env[i] = entry;
            return;
        }
    env[i] = entry;
    env[i + 1] = NULL;
}

/* A terminal: its master (returned) and its slave (*slave), sized; the slave owned
 * by uid when the agent may give it. -1 with err. */
static int open_tty(const br_task_join_opts_t *o, uid_t uid, int *slave, br_err_t *err)
{
    char name[128];
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0 ||
        (*slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        int e = errno;
        if (m >= 0)
            close(m);
        return br_errf(err, e, "cannot make a terminal: %s", strerror(e));
    }
    struct winsize ws = {.ws_row = o->rows ? o->rows : 24, .ws_col = o->cols ? o->cols : 80};
    ioctl(m, TIOCSWINSZ, &ws);
    if (geteuid() == 0 && uid != 0 && fchown(*slave, uid, (gid_t)-1) < 0) {
        int e = errno;
        close(m);
        close(*slave);
        return br_errf(err, e, "cannot give the terminal to uid %u: %s", (unsigned)uid,
                       strerror(e));
    }
    return m;
}

/* The task's mount namespace when it has one of its own (data sets), else -1. */
static int task_ns(pid_t pid)
{
    char path[64];
    struct stat mine, its;
    snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
    if (stat("/proc/self/ns/mnt", &mine) < 0 || stat(path, &its) < 0 ||
        (mine.st_ino == its.st_ino && mine.st_dev == its.st_dev))
        return -1;
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* The stdio of the joined process, its ends for the caller in fds. */
static int join_stdio(struct child_plan *plan, const br_task_join_opts_t *o, uid_t uid,
                      int fds[3], int mine[3], br_err_t *err)
{
    if (o->tty) {
        int slave = -1;
        if ((fds[0] = open_tty(o, uid, &slave, err)) < 0)
            return -1;
        plan->in_r = plan->out_w = plan->err_w = mine[0] = slave;
        return set_nonblock(fds[0]);
    }
    int p[3][2];
    for (int i = 0; i < 3; i++) {
        if (pipe2(p[i], O_CLOEXEC) < 0)
            return br_errf(err, errno, "cannot make pipes: %s", strerror(errno));
        int keep = i == 0 ? 1 : 0; /* the caller writes stdin and reads the others */
        fds[i] = p[i][keep];
        mine[i] = p[i][!keep];
        if (set_nonblock(fds[i]) < 0)
            return br_errf(err, errno, "cannot make pipes: %s", strerror(errno));
    }
    plan->in_r = mine[0];
    plan->out_w = mine[1];
    plan->err_w = mine[2];
    return 0;
}

pid_t br_task_join(br_task_t *task, const br_task_join_opts_t *o, int fds[3], br_err_t *err)
{
    fds[0] = fds[1] = fds[2] = -1;
    if (!task || task->done || task->pid <= 0)
        return br_errf(err, ESRCH, "the job's process has ended");
    struct child_plan plan = {.ns_fd = -1, .tty = o->tty, .report_w = -1};
    int mine[3] = {-1, -1, -1}, report[2] = {-1, -1};
    char *block = NULL, cwd[PATH_MAX], link[64], idtext[48], term[80], mark[96];
    pw_entry_t pw = {0};
    pid_t pid = -1;
    size_t nargs = 0;
    for (; o->argv && o->argv[nargs]; nargs++)
        ;
    const char **argv = calloc(nargs + 5, sizeof(*argv));
    char **env = leader_env(task->pid, &block, err);
    if (!argv || !env) {
        if (!argv)
            br_errf(err, ENOMEM, "out of memory");
        goto out;
    }
    argv[0] = "sh";
    argv[1] = "-c";
    argv[2] = nargs ? "exec \"$@\"" : JOIN_SHELL;
    argv[3] = "sh";
    for (size_t i = 0; i < nargs; i++)
        argv[4 + i] = o->argv[i];
    if (o->term) {
        snprintf(term, sizeof(term), "TERM=%s", o->term);
        env_replace(env, term);
    }
    if (o->mark && strchr(o->mark, '=') && strlen(o->mark) < sizeof(mark)) {
        memcpy(mark, o->mark, strlen(o->mark) + 1);
        env_replace(env, mark);
    }
    plan.jargv = argv;
    plan.envp = env;
    snprintf(link, sizeof(link), "/proc/%d/cwd", (int)task->pid);
    ssize_t cl = readlink(link, cwd, sizeof(cwd) - 1);
    if (cl > 0) {
        cwd[cl] = '\0';
        plan.workdir = cwd;
    }
    snprintf(idtext, sizeof(idtext), "#%u:%u", (unsigned)task->uid, (unsigned)task->gid);
    br_task_opts_t ids = {.user = idtext};
    if (plan_ids(&plan, &ids, &pw, err) < 0)
        goto out;
    if (!plan.home)
        for (size_t i = 0; env[i]; i++)
            if (strncmp(env[i], "HOME=", 5) == 0)
                plan.home = env[i] + 5;
    plan.ns_fd = task_ns(task->pid);
    if (join_stdio(&plan, o, task->uid, fds, mine, err) < 0 ||
        pipe2(report, O_CLOEXEC) < 0) {
        if (report[0] < 0 && fds[0] >= 0)
            br_errf(err, errno, "cannot make a pipe: %s", strerror(errno));
        goto fail;
    }
    plan.report_w = report[1];
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0)
        joiner_run(&plan);
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        br_errf(err, saved, "cannot fork: %s", strerror(saved));
        goto fail;
    }
    close_fd(&report[1]);
    struct child_report r;
    ssize_t n;
    do {
        n = read(report[0], &r, sizeof(r));
    } while (n < 0 && errno == EINTR);
    if (n != 0) { /* it reported a step that failed, and ended */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        pid = -1;
        if (n != (ssize_t)sizeof(r))
            r = (struct child_report){STAGE_SETUP, EIO};
        const char *what = strerror(r.errnum);
        if (r.stage == STAGE_EXEC)
            br_errf(err, r.errnum, "cannot run /bin/sh: %s", what);
        else if (r.stage == STAGE_NS)
            br_errf(err, r.errnum, "cannot enter the job's mount namespace: %s", what);
        else if (r.stage == STAGE_TTY)
            br_errf(err, r.errnum, "cannot take the terminal: %s", what);
        else if (r.stage >= STAGE_GROUPS && r.stage <= STAGE_SETUID)
            br_errf(err, r.errnum, "switching to uid %u: %s", (unsigned)task->uid, what);
        else
            br_errf(err, r.errnum, "setting up the process: %s", what);
        goto fail;
    }
    goto out;
fail:
    for (int i = 0; i < 3; i++)
        close_fd(&fds[i]);
out:
    for (int i = 0; i < 3; i++)
        if (mine[i] >= 0 && (i == 0 || mine[i] != mine[0]))
            close(mine[i]);
    close_fd(&report[0]);
    close_fd(&report[1]);
    close_fd(&plan.ns_fd);
    free(plan.groups);
    free(pw.buf);
    free(env);
    free(block);
    free(argv);
    return pid;
}

void br_task_destroy(br_task_t **task)
{
    if (!task || !*task)
        return;
    int saved = errno;
    br_task_t *t = *task;
    for (br_task_t **p = &live_tasks; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    close_fd(&t->fds[1]);
    close_fd(&t->fds[2]);
    close_fd(&t->pidfd);
    free(t->tag);
    free(t->also);
    free(t->exit_path);
    free(t);
    *task = NULL;
    errno = saved;
}

pid_t br_task_pid(const br_task_t *task)
{
    return task ? task->pid : -1;
}

const char *br_task_tag(const br_task_t *task)
{
    return task ? task->tag : NULL;
}

const char *br_task_also(const br_task_t *task)
{
    return task ? task->also : NULL;
}

const char *br_task_exit_path(const br_task_t *task)
{
    return task ? task->exit_path : NULL;
}

uid_t br_task_uid(const br_task_t *task)
{
    return task->uid;
}

gid_t br_task_gid(const br_task_t *task)
{
    return task->gid;
}

int br_task_fd(const br_task_t *task, int stream)
{
    if (!task || (stream != 1 && stream != 2))
        return -1;
    return task->fds[stream];
}

ssize_t br_task_read(br_task_t *task, int stream, void *buf, size_t len)
{
    if (!task || (stream != 1 && stream != 2)) {
        errno = EINVAL;
        return -1;
    }
    if (task->fds[stream] < 0)
        return 0;
    ssize_t n;
    do {
        n = read(task->fds[stream], buf, len);
    } while (n < 0 && errno == EINTR);
    if (n == 0)
        close_fd(&task->fds[stream]);
    return n;
}

static void record_exit(br_task_t *task, int wait_status)
{
    if (WIFEXITED(wait_status)) {
        task->exit_code = WEXITSTATUS(wait_status);
        task->signal = -1;
    } else if (WIFSIGNALED(wait_status)) {
        task->exit_code = -1;
        task->signal = WTERMSIG(wait_status);
    } else {
        return; /* stopped or continued: still alive */
    }
    task->done = 1;
}

int br_task_reaped(br_task_t *task, pid_t pid, int wait_status)
{
    if (!task || task->done || pid <= 0 || pid != task->waiter)
        return 0;
    record_exit(task, wait_status);
    return 1;
}

/* The wait status the waiter wrote to path: 0, or -1 when there is none. */
static int read_exit_file(const char *path, int *status)
{
    char buf[32];
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 1 || buf[n - 1] != '\n')
        return -1;
    buf[n] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    if (*end != '\n' || v < INT_MIN || v > INT_MAX)
        return -1;
    *status = (int)v;
    return 0;
}

int br_proc_start(pid_t pid, uint64_t *start, char *comm, size_t commlen)
{
    br_procstat_t ps;
    if (br_procstat_read(-1, pid, &ps) < 0)
        return -1;
    if (comm && commlen)
        br_strlcpy(comm, ps.comm, commlen);
    *start = ps.start;
    return 0;
}

uint64_t br_task_waiter_start(const br_task_t *task)
{
    uint64_t start = 0;
    if (task && task->waiter > 0 && br_proc_start(task->waiter, &start, NULL, 0) < 0)
        start = 0;
    return start;
}

pid_t br_task_waiter(const br_task_t *task)
{
    return task ? task->waiter : -1;
}

/* Open what the waiter keeps at fd n: a read end of the job's pipe. */
static int open_kept(pid_t waiter, int n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)waiter, n);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode))) {
        close(fd);
        errno = EBADF;
        return -1;
    }
    return fd;
}

static int pidfd_gone(int pidfd)
{
    struct pollfd p = {pidfd, POLLIN, 0};
    return poll(&p, 1, 0) != 0;
}

br_task_t *br_task_adopt(const br_task_saved_t *sv, br_err_t *err)
{
    if (!sv || !sv->tag || !*sv->tag || sv->pid <= 0 || sv->waiter <= 0)
        return br_errp(err, EINVAL, "an adopted task needs a tag, a pid and a waiter");
    br_task_t *t = task_alloc(sv->tag);
    if (!t || (sv->also && !(t->also = strdup(sv->also))) ||
        (sv->exit_path && !(t->exit_path = strdup(sv->exit_path)))) {
        br_task_destroy(&t);
        return br_errp(err, ENOMEM, "out of memory adopting a task");
    }
    t->pid = sv->pid;
    t->waiter = sv->waiter;
    t->uid = sv->uid;
    t->gid = sv->gid;
    uint64_t start;
    char comm[32];
    int alive = br_proc_start(sv->waiter, &start, comm, sizeof(comm)) == 0 &&
                start == sv->waiter_start && strcmp(comm, WAITER_NAME) == 0;
    if (alive)
        t->pidfd = (int)syscall(SYS_pidfd_open, sv->waiter, 0);
    /* the same process still, now that its pidfd holds it: its pipes */
    if (alive && t->pidfd >= 0 && br_proc_start(sv->waiter, &start, NULL, 0) == 0 &&
        start == sv->waiter_start) {
        t->fds[1] = open_kept(sv->waiter, 3);
        t->fds[2] = open_kept(sv->waiter, 4);
        if (t->fds[1] >= 0 && t->fds[2] >= 0 && !pidfd_gone(t->pidfd)) {
            t->next = live_tasks;
            live_tasks = t;
            return t;
        }
        int saved = errno;
        close_fd(&t->fds[1]);
        close_fd(&t->fds[2]);
        if (!pidfd_gone(t->pidfd)) {
            br_errf(err, saved, "task %s: cannot open its output through its waiter "
                                "(pid %d): %s", sv->tag, (int)sv->waiter, strerror(saved));
            br_task_destroy(&t);
            return NULL;
        }
    }
    close_fd(&t->pidfd);
    /* the waiter is gone: the job ended while no agent watched, and it said how */
    int status;
    if (read_exit_file(sv->exit_path, &status) == 0) {
        record_exit(t, status);
        if (t->done) {
            t->next = live_tasks;
            live_tasks = t;
            return t;
        }
    }
    br_errf(err, ESRCH, "task %s: its waiter (pid %d) is gone and left no exit status",
            sv->tag, (int)sv->waiter);
    br_task_destroy(&t);
    return NULL;
}

int br_task_wait_fd(const br_task_t *task)
{
    return task && !task->done ? task->pidfd : -1;
}

int br_task_check_adopted(br_task_t *task)
{
    if (!task || task->done || task->pidfd < 0 || !pidfd_gone(task->pidfd))
        return 0;
    int status;
    if (read_exit_file(task->exit_path, &status) < 0)
        status = SIGKILL; /* it left no word: count it killed */
    close_fd(&task->pidfd);
    record_exit(task, status);
    if (!task->done) { /* a status that is no end: count it killed */
        task->done = 1;
        task->exit_code = -1;
        task->signal = SIGKILL;
    }
    return 1;
}

int br_task_done(const br_task_t *task, int *exit_code, int *signal)
{
    if (!task || !task->done)
        return 0;
    if (exit_code)
        *exit_code = task->exit_code;
    if (signal)
        *signal = task->signal;
    return 1;
}

/* ---- finding the tree ----------------------------------------------------------- */

typedef struct {
    pid_t pid;
    char state;
} proc_t;

typedef struct {
    proc_t *v;
    size_t n, cap;
} proc_list_t;

static int proc_add(proc_list_t *l, pid_t pid, char state)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        proc_t *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (proc_t){pid, state};
    return 0;
}

/* State and process group from /proc/PID/stat. */
static int read_stat(int dirfd, char *state, pid_t *pgrp)
{
    br_procstat_t ps;
    if (br_procstat_read(dirfd, 0, &ps) < 0)
        return -1;
    *state = ps.state;
    *pgrp = ps.pgrp;
    return 0;
}

/* Whether /proc/PID/environ holds exactly the entry needle (with prefix: an entry
 * that starts with needle), streamed in chunks. */
static int environ_has(int dirfd, const char *needle, int prefix)
{
    int fd = openat(dirfd, "environ", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t nlen = strlen(needle), pos = 0;
    int ok = 1, found = 0;
    char buf[4096];
    ssize_t n;
    while (!found && (n = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n && !found; i++) {
            if (buf[i] == '\0') {
                found = ok && (prefix ? pos >= nlen : pos == nlen);
                pos = 0;
                ok = 1;
                continue;
            }
            if (pos < nlen ? needle[pos] != buf[i] : !prefix)
                ok = 0;
            pos++;
        }
    }
    close(fd);
    return found || (ok && (prefix ? pos >= nlen : pos == nlen));
}

static int parse_pid(const char *name, pid_t *pid)
{
    char *end;
    if (name[0] < '1' || name[0] > '9')
        return -1;
    long v = strtol(name, &end, 10);
    if (*end || v <= 0 || v > INT_MAX)
        return -1;
    *pid = (pid_t)v;
    return 0;
}

/* Whether the process carries one of the entries of skip (NULL-terminated). */
static int carries_any(int dirfd, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (environ_has(dirfd, *skip, 0))
            return 1;
    return 0;
}

/* Live (non-zombie) processes in process group pgid (if > 0) or carrying needle (an
 * environment entry, or its start with prefix) and, when also is given, that exact
 * entry too; none that carries an entry of skip. */
static int scan_procs(pid_t pgid, const char *needle, int prefix, const char *also,
                      const char *const *skip, proc_list_t *out)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    pid_t self = getpid();
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        pid_t pid, pgrp;
        char state;
        if (parse_pid(de->d_name, &pid) < 0 || pid == self)
            continue;
        int dfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            continue;
        if (read_stat(dfd, &state, &pgrp) == 0 && state != 'Z' && state != 'X' &&
            ((pgid > 0 && pgrp == pgid) ||
             (environ_has(dfd, needle, prefix) && (!also || environ_has(dfd, also, 0)))) &&
            !carries_any(dfd, skip))
            rc = proc_add(out, pid, state);
        close(dfd);
    }
    closedir(d);
    return rc;
}

static int scan_tree(pid_t pgid, const char *needle, proc_list_t *out)
{
    return scan_procs(pgid, needle, 0, NULL, NULL, out);
}

static char *tag_entry(const char *tag)
{
    char *s;
    return asprintf(&s, "%s=%s", TASK_ENV_NAME, tag) < 0 ? NULL : s;
}

static int task_scan(const br_task_t *task, proc_list_t *out)
{
    char *needle = tag_entry(task->tag);
    if (!needle)
        return -1;
    out->n = 0;
    int rc = scan_procs(task->pid, needle, 0, task->also, NULL, out);
    free(needle);
    return rc;
}

static int signal_list(const proc_list_t *l, int sig)
{
    int count = 0;
    for (size_t i = 0; i < l->n; i++)
        count += kill(l->v[i].pid, sig) == 0;
    return count;
}

int br_task_signal(br_task_t *task, int sig)
{
    if (!task) {
        errno = EINVAL;
        return -1;
    }
    proc_list_t l = {0};
    int rc = task_scan(task, &l);
    if (rc == 0)
        rc = signal_list(&l, sig);
    free(l.v);
    return rc;
}

int br_task_tree_count(br_task_t *task)
{
    return br_task_signal(task, 0); /* (signal 0: each live one answers, nothing sent) */
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int br_task_kill_tree(br_task_t *task, int timeout_ms)
{
    if (!task) {
        errno = EINVAL;
        return -1;
    }
    int64_t deadline = br_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    proc_list_t l = {0};
    int rc = -1;
    for (;;) {
        if (task_scan(task, &l) < 0)
            break;
        if (l.n == 0) {
            rc = 0;
            break;
        }
        signal_list(&l, SIGSTOP); /* nothing forks while we kill */
        signal_list(&l, SIGKILL);
        if (br_mono_ms() >= deadline) {
            errno = ETIMEDOUT;
            break;
        }
        sleep_ms(10);
    }
    int saved = errno;
    free(l.v);
    errno = saved;
    return rc;
}

/* Whether SIGSTOP is pending for pid (SigPnd or ShdPnd in /proc/PID/status). */
static int stop_pending(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    unsigned long long mask, bit = 1ULL << (SIGSTOP - 1);
    int pending = 0;
    if (!f)
        return 0;
    while (!pending && fgets(line, sizeof(line), f)) {
        if ((sscanf(line, "SigPnd: %llx", &mask) == 1 ||
             sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
            (mask & bit))
            pending = 1;
    }
    fclose(f);
    return pending;
}

/* Stopped, or can run no user code before it stops: a process in uninterruptible
 * sleep with SIGSTOP pending (dash's vfork parent waits so while its child is
 * stopped before exec; it stops when the wait ends). */
static int is_frozen(const proc_t *p)
{
    return p->state == 'T' || p->state == 't' ||
           (p->state == 'D' && stop_pending(p->pid));
}

/* SIGSTOP every process until a scan finds all of them frozen, so children forked
 * meanwhile are caught. Returns the number of processes, -1 (ETIMEDOUT) when some
 * did not stop within FREEZE_WAIT_MS (the signal stays pending for them). */
int br_task_freeze(br_task_t *task)
{
    if (!task) {
        errno = EINVAL;
        return -1;
    }
    int64_t deadline = br_mono_ms() + FREEZE_WAIT_MS;
    proc_list_t l = {0};
    int rc = -1;
    for (;;) {
        if (task_scan(task, &l) < 0)
            break;
        int running = 0;
        for (size_t i = 0; i < l.n; i++) {
            if (!is_frozen(&l.v[i])) {
                running++;
                kill(l.v[i].pid, SIGSTOP);
            }
        }
        if (!running) {
            rc = (int)l.n;
            break;
        }
        if (br_mono_ms() >= deadline) {
            errno = ETIMEDOUT;
            break;
        }
        sleep_ms(1);
    }
    int saved = errno;
    free(l.v);
    errno = saved;
    return rc;
}

int br_task_thaw(br_task_t *task)
{
    return br_task_signal(task, SIGCONT);
}

int br_task_count_tagged(const char *tag)
{
    if (!tag || !*tag) {
        errno = EINVAL;
        return -1;
    }
    char *needle = tag_entry(tag);
    if (!needle)
        return -1;
    proc_list_t l = {0};
    int rc = scan_tree(0, needle, &l);
    free(needle);
    if (rc == 0)
        rc = (int)l.n;
    free(l.v);
    return rc;
}

int br_task_signal_marked(const char *mark, int sig)
{
    if (!mark || !strchr(mark, '=')) {
        errno = EINVAL;
        return -1;
    }
    proc_list_t l = {0};
    int rc = scan_tree(0, mark, &l);
    if (rc == 0)
        rc = signal_list(&l, sig);
    free(l.v);
    return rc;
}

int br_task_kill_tag_prefix(const char *prefix, const char *also, const char *const *keep,
                            int timeout_ms)
{
    char *needle = prefix && *prefix ? tag_entry(prefix) : NULL;
    if (!needle) {
        errno = EINVAL;
        return -1;
    }
    size_t nkeep = 0;
    while (keep && keep[nkeep])
        nkeep++;
    char **skip = calloc(nkeep + 1, sizeof(char *));
    for (size_t i = 0; skip && i < nkeep; i++)
        if (!(skip[i] = tag_entry(keep[i]))) {
            env_free(&(env_list_t){skip, i, nkeep + 1});
            skip = NULL;
        }
    if (!skip) {
        free(needle);
        errno = ENOMEM;
        return -1;
    }
    proc_list_t l = {0};
    int64_t deadline = br_mono_ms() + timeout_ms;
    int killed = 0, rc = 0;
    for (;;) {
        l.n = 0;
        if (scan_procs(0, needle, 1, also, (const char *const *)skip, &l) < 0) {
            rc = -1;
            break;
        }
        if (l.n == 0)
            break;
        signal_list(&l, SIGSTOP);
        killed += signal_list(&l, SIGKILL);
        if (br_mono_ms() >= deadline) {
            errno = ETIMEDOUT;
            rc = -1;
            break;
        }
        sleep_ms(5);
    }
    int saved = errno;
    free(l.v);
    free(needle);
    env_free(&(env_list_t){skip, nkeep, nkeep + 1});
    errno = saved;
    return rc < 0 ? -1 : killed;
}

/* Parent, process group and session of pid from /proc/PID/stat. */
static int read_ids(pid_t pid, pid_t *ppid, pid_t *pgrp, pid_t *sid)
{
    br_procstat_t ps;
    if (br_procstat_read(-1, pid, &ps) < 0)
        return -1;
    *ppid = ps.ppid;
    *pgrp = ps.pgrp;
    *sid = ps.sid;
    return 0;
}

/* The value of option opt ("-n") in the NUL-separated cmdline of pid: into out, 0;
 * -1 when it has none. */
static int cmdline_opt(pid_t pid, const char *opt, char *out, size_t len)
{
    char path[64], buf[8192];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    for (char *p = buf; p < buf + n; p += strlen(p) + 1)
        if (strcmp(p, opt) == 0 && p + strlen(p) + 1 < buf + n) {
            br_strlcpy(out, p + strlen(p) + 1, len);
            return 0;
        }
    return -1;
}

/* Whether pid is a conmon (podman's container monitor) run by this agent's user. */
static int is_conmon(pid_t pid)
{
    char path[64], comm[32] = "";
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    if (stat(path, &st) < 0 || st.st_uid != geteuid())
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, comm, sizeof(comm) - 1) : -1;
    if (fd >= 0)
        close(fd);
    return n > 0 && strncmp(comm, "conmon\n", 7) == 0;
}

br_task_t *br_task_of_container(pid_t pid, void (*name_of)(const char *tag, char *out,
                                                           size_t len))
{
    pid_t self = getpid();
    for (int depth = 0; depth < 64 && pid > 1 && pid != self; depth++) {
        pid_t ppid, pgrp, sid;
        char name[300], want[300];
        if (read_ids(pid, &ppid, &pgrp, &sid) < 0)
            return NULL;
        if (is_conmon(pid)) { /* the container's: whose, by its name */
            if (cmdline_opt(pid, "-n", name, sizeof(name)) < 0)
                return NULL;
            for (br_task_t *t = live_tasks; t; t = t->next) {
                if (t->done || !t->tag)
                    continue;
                name_of(t->tag, want, sizeof(want));
                if (strcmp(want, name) == 0)
                    return t;
            }
            return NULL;
        }
        pid = ppid;
    }
    return NULL;
}

br_task_t *br_task_of_pid(pid_t pid)
{
    pid_t self = getpid();
    for (int depth = 0; depth < 64 && pid > 1 && pid != self; depth++) {
        pid_t ppid, pgrp, sid;
        if (read_ids(pid, &ppid, &pgrp, &sid) < 0)
            return NULL;
        for (br_task_t *t = live_tasks; t; t = t->next)
            if (!t->done && t->pid > 0 &&
                (pid == t->pid || pgrp == t->pid || sid == t->pid))
                return t;
        pid = ppid;
    }
    return NULL;
}
