/* test_task.c - job processes: output capture, exit status, environment, workdir,
 * user errors, and finding, freezing and killing the whole process tree. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "task.h"
#include "util.h"

#define DEADLINE_MS 10000

typedef struct {
    char out[8192];
    size_t nout;
    char err[8192];
    size_t nerr;
} capture_t;

static const char *new_tag(void)
{
    static char tag[64];
    static int seq;
    snprintf(tag, sizeof(tag), "test-task-%d-%d", (int)getpid(), ++seq);
    return tag;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Reap every exited child (we are a subreaper, as the agent is). */
static void reap(br_task_t *t)
{
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (t)
            br_task_reaped(t, p, st);
    }
}

static void drain(br_task_t *t, int stream, capture_t *c)
{
    char *buf = stream == 1 ? c->out : c->err;
    size_t *n = stream == 1 ? &c->nout : &c->nerr;
    size_t cap = sizeof(c->out) - 1;
    char scratch[512];
    ssize_t r;
    while (br_task_fd(t, stream) >= 0) {
        size_t room = cap - *n;
        r = br_task_read(t, stream, room ? buf + *n : scratch,
                         room ? room : sizeof(scratch));
        if (r <= 0)
            break;
        if (room)
            *n += (size_t)r;
        buf[*n] = '\0';
    }
}

/* Collect output until both streams reach EOF and the leader has been reaped. */
static int run_to_end(br_task_t *t, capture_t *c)
{
    memset(c, 0, sizeof(*c));
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    while (br_mono_ms() < deadline) {
        struct pollfd p[2] = {{br_task_fd(t, 1), POLLIN, 0},
                              {br_task_fd(t, 2), POLLIN, 0}};
        poll(p, 2, 10);
        drain(t, 1, c);
        drain(t, 2, c);
        reap(t);
        if (br_task_fd(t, 1) < 0 && br_task_fd(t, 2) < 0 && br_task_done(t, NULL, NULL))
            return 0;
    }
    return -1;
}

/* The test's current task: a failed assertion leaves it to teardown, which kills
 * its tree, so one failure does not leave processes that break the next tests. */
static br_task_t *g_task;

static void cleanup_task(void)
{
    int st;
    if (g_task)
        br_task_kill_tree(g_task, 5000);
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    pid_t p;
    while (br_mono_ms() < deadline && (p = waitpid(-1, &st, WNOHANG)) >= 0) {
        if (p == 0)
            sleep_ms(5);
    }
    br_task_destroy(&g_task);
}

static br_task_t *start(const char *command, const char *const *env,
                        const char *workdir, const char *user, br_err_t *err)
{
    br_task_opts_t o = {.command = command,
                        .env = env,
                        .workdir = workdir,
                        .user = user,
                        .tag = new_tag()};
    cleanup_task();
    g_task = br_task_start(&o, err);
    return g_task;
}

static br_task_t *start_ok(const char *command, const char *const *env,
                           const char *workdir)
{
    br_err_t err = {0};
    br_task_t *t = start(command, env, workdir, NULL, &err);
    if (!t)
        print_error("br_task_start: %s\n", err.text);
    assert_non_null(t);
    return t;
}

/* No child of ours is left, not even a zombie. */
static void assert_no_children(void)
{
    int st;
    errno = 0;
    assert_int_equal(waitpid(-1, &st, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* Reap until no child is left (orphans of killed trees come to us). */
static void reap_all(br_task_t *t)
{
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    int st;
    pid_t p;
    while (br_mono_ms() < deadline) {
        p = waitpid(-1, &st, WNOHANG);
        if (p < 0 && errno == ECHILD)
            return;
        if (p > 0 && t)
            br_task_reaped(t, p, st);
        if (p == 0)
            sleep_ms(5);
    }
    fail_msg("children left after %d ms", DEADLINE_MS);
}

static int wait_count_at_least(const char *tag, int n)
{
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    while (br_mono_ms() < deadline) {
        if (br_task_count_tagged(tag) >= n)
            return 0;
        sleep_ms(5);
    }
    return -1;
}

static void test_output_and_exit(void **state)
{
    br_task_t *t = start_ok("echo out; echo err >&2; echo more; exit 3", NULL, NULL);
    assert_true(br_task_pid(t) > 0);
    assert_true(br_task_fd(t, 1) >= 0 && br_task_fd(t, 2) >= 0);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    assert_string_equal(c.out, "out\nmore\n");
    assert_string_equal(c.err, "err\n");
    int code = 99, sig = 99;
    assert_int_equal(br_task_done(t, &code, &sig), 1);
    assert_int_equal(code, 3);
    assert_int_equal(sig, -1);
    char buf[8];
    assert_int_equal(br_task_read(t, 1, buf, sizeof(buf)), 0);
    errno = EBUSY;
    br_task_destroy(&g_task);
    assert_null(g_task);
    assert_int_equal(errno, EBUSY);
    assert_no_children();
}

static void test_signal_reported(void **state)
{
    br_task_t *t = start_ok("kill -TERM $$; sleep 5", NULL, NULL);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    int code = 99, sig = 99;
    assert_int_equal(br_task_done(t, &code, &sig), 1);
    assert_int_equal(code, -1);
    assert_int_equal(sig, SIGTERM);
}

static void test_not_done_while_running(void **state)
{
    br_task_t *t = start_ok("read x", NULL, NULL); /* stdin is /dev/null: EOF */
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    int code;
    assert_int_equal(br_task_done(t, &code, NULL), 1);
    assert_int_equal(code, 1);

    t = start_ok("sleep 1000", NULL, NULL);
    assert_int_equal(br_task_done(t, NULL, NULL), 0);
    char buf[8];
    errno = 0;
    assert_int_equal(br_task_read(t, 1, buf, sizeof(buf)), -1);
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(wait_count_at_least(br_task_tag(t), 1), 0);
    assert_int_equal(br_task_kill_tree(t, 5000), 0);
    assert_int_equal(run_to_end(t, &c), 0);
    int sig;
    assert_int_equal(br_task_done(t, NULL, &sig), 1);
    assert_int_equal(sig, SIGKILL);
}

static void test_environment(void **state)
{
    setenv("BRAMBLE_CREDENTIAL", "/secret/credential", 1);
    setenv("BRAMBLE_TEST_INHERITED", "yes", 1);
    const char *env[] = {"FOO=one", "BAR=two=2", "FOO=three", NULL};
    br_task_t *t = start_ok(
        "printf '%s|%s|%s|%s|%s' \"$FOO\" \"$BAR\" \"$BRAMBLE_TASK\" "
        "\"${BRAMBLE_CREDENTIAL-unset}\" \"$BRAMBLE_TEST_INHERITED\"",
        env, NULL);
    char want[256];
    snprintf(want, sizeof(want), "three|two=2|%s|unset|yes", br_task_tag(t));
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    assert_string_equal(c.out, want);
    unsetenv("BRAMBLE_CREDENTIAL");
    unsetenv("BRAMBLE_TEST_INHERITED");
}

static void test_bad_env_entry(void **state)
{
    const char *env[] = {"NOEQUALS", NULL};
    br_err_t err = {0};
    assert_null(start("true", env, NULL, NULL, &err));
    assert_non_null(strstr(err.text, "'NOEQUALS' needs KEY=VALUE"));
    assert_no_children();
}

static void test_workdir(void **state)
{
    char dir[] = "/tmp/bramble-task-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char real[PATH_MAX];
    assert_non_null(realpath(dir, real));
    br_task_t *t = start_ok("pwd -P", NULL, dir);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    strcat(real, "\n");
    assert_string_equal(c.out, real);
    rmdir(dir);
}

static void test_bad_workdir(void **state)
{
    br_err_t err = {0};
    assert_null(start("true", NULL, "/nope", NULL, &err));
    assert_string_equal(err.text, "workdir /nope: No such file or directory");
    assert_int_equal(err.errnum, ENOENT);
    assert_no_children();
}

/* An agent started with fds 0-2 closed: the task's pipes land there and must still
 * work, failures included. Checked in a child, which reports through its status. */
static void test_closed_stdio(void **state)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(0);
        close(1);
        close(2);
        br_err_t err = {0};
        capture_t c;
        int bad = start("true", NULL, "/nope", NULL, &err) == NULL &&
                  strcmp(err.text, "workdir /nope: No such file or directory") == 0;
        int good = start("echo hi; echo ho >&2", NULL, NULL, NULL, &err) != NULL &&
                   run_to_end(g_task, &c) == 0 && strcmp(c.out, "hi\n") == 0 &&
                   strcmp(c.err, "ho\n") == 0;
        _exit(bad && good ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_unknown_user(void **state)
{
    br_err_t err = {0};
    assert_null(start("true", NULL, NULL, "bramble-no-such-user", &err));
    assert_string_equal(err.text, "job user 'bramble-no-such-user' does not exist");
    assert_no_children();
}

static void test_same_user(void **state)
{
    struct passwd *pw = getpwuid(geteuid());
    if (!pw)
        skip();
    char name[256], want[300];
    snprintf(name, sizeof(name), "%s", pw->pw_name);
    snprintf(want, sizeof(want), "%d %s\n", (int)geteuid(), name);
    br_err_t err = {0};
    br_task_t *t = start("echo $(id -u) $USER", NULL, "/", name, &err);
    assert_non_null(t);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    assert_string_equal(c.out, want);
}

/* A non-root agent cannot switch users: run the check in a child that gave up root. */
static void test_switch_needs_root(void **state)
{
    struct passwd *root = getpwuid(0);
    if (!root)
        skip();
    char name[256];
    snprintf(name, sizeof(name), "%s", root->pw_name);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
            _exit(2);
        br_err_t err = {0};
        br_task_t *t = start("true", NULL, NULL, name, &err);
        char want[300];
        snprintf(want, sizeof(want), "switching to job user '%s' needs a root agent",
                 name);
        _exit(!t && strcmp(err.text, want) == 0 && waitpid(-1, NULL, WNOHANG) < 0 ? 0
                                                                                  : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_switch_user(void **state)
{
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw)
        skip();
    char want[512];
    snprintf(want, sizeof(want), "%d %d nobody nobody %s\n", (int)pw->pw_uid,
             (int)pw->pw_gid, pw->pw_dir);
    br_err_t err = {0};
    br_task_t *t =
        start("echo $(id -u) $(id -g) $USER $LOGNAME $HOME", NULL, "/", "nobody", &err);
    assert_non_null(t);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    assert_string_equal(c.out, want);

    /* No workdir and a home that does not exist: the task starts in "/". */
    t = start("pwd", NULL, NULL, "nobody", &err);
    assert_non_null(t);
    assert_int_equal(run_to_end(t, &c), 0);
    if (access(pw->pw_dir, X_OK) != 0)
        assert_string_equal(c.out, "/\n");

    /* Unenterable workdir for the job user: the message says so. */
    char dir[] = "/tmp/bramble-task-XXXXXX";
    assert_non_null(mkdtemp(dir)); /* 0700, owned by root */
    assert_null(start("true", NULL, dir, "nobody", &err));
    char msg[300];
    snprintf(msg, sizeof(msg), "workdir %s: Permission denied", dir);
    assert_string_equal(err.text, msg);
    assert_no_children();
    rmdir(dir);
}

static void test_kill_tree(void **state)
{
    br_task_t *t = start_ok("sleep 1000 & setsid sleep 1000 & wait", NULL, NULL);
    const char *tag = br_task_tag(t);
    assert_int_equal(wait_count_at_least(tag, 3), 0);
    assert_int_equal(br_task_kill_tree(t, 5000), 0);
    assert_int_equal(br_task_count_tagged(tag), 0);
    reap_all(t);
    int sig;
    assert_int_equal(br_task_done(t, NULL, &sig), 1);
    assert_int_equal(sig, SIGKILL);
    assert_int_equal(br_task_count_tagged(tag), 0);
}

/* The wrapping shell dies of a signal that its child traps: the tree still counts
 * the child until it has handled the signal and exited (attempt.c waits on this in
 * a stop's grace). */
static void test_tree_outlives_its_shell(void **state)
{
    char dir[] = "/tmp/bramble-tree-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[512], done[600];
    snprintf(done, sizeof(done), "%s/handled", dir);
    snprintf(cmd, sizeof(cmd),
             "X=1 /bin/bash -c 'trap \"sleep 0.3; touch %s; exit 0\" TERM; "
             "while :; do sleep 0.05; done'", done);
    br_task_t *t = start_ok(cmd, NULL, NULL);
    const char *tag = br_task_tag(t);
    assert_int_equal(wait_count_at_least(tag, 3), 0); /* sh, bash, sleep */
    assert_true(br_task_tree_count(t) >= 3);
    /* as a stop does: the signal to every process, the shell first */
    kill(br_task_pid(t), SIGTERM);
    assert_true(br_task_signal(t, SIGTERM) >= 1);
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    int st;
    while (!br_task_done(t, NULL, NULL) && br_mono_ms() < deadline) {
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0)
            br_task_reaped(t, p, st);
        else
            sleep_ms(5);
    }
    int sig = -1;
    assert_int_equal(br_task_done(t, NULL, &sig), 1);
    assert_int_equal(sig, SIGTERM); /* the shell died of it */
    /* its child still runs its handler, or has just finished it */
    while (br_task_tree_count(t) > 0 && br_mono_ms() < deadline) {
        waitpid(-1, &st, WNOHANG);
        sleep_ms(5);
    }
    assert_int_equal(br_task_tree_count(t), 0);
    assert_int_equal(access(done, F_OK), 0); /* the handler ran to its end */
    reap_all(NULL);
    unlink(done);
    rmdir(dir);
}

/* A fork bomb-ish tree that keeps spawning is still brought down. */
static void test_kill_forking_tree(void **state)
{
    br_task_t *t = start_ok(
        "while :; do sleep 1000 & setsid sh -c 'sleep 1000' & "
        "sleep 0.01; done",
        NULL, NULL);
    const char *tag = br_task_tag(t);
    assert_int_equal(wait_count_at_least(tag, 6), 0);
    assert_int_equal(br_task_kill_tree(t, 5000), 0);
    assert_int_equal(br_task_count_tagged(tag), 0);
    reap_all(t);
}

static long read_counter(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static int wait_counter_above(const char *path, long v)
{
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    while (br_mono_ms() < deadline) {
        if (read_counter(path) > v)
            return 0;
        sleep_ms(5);
    }
    return -1;
}

static void test_freeze_thaw(void **state)
{
    char dir[] = "/tmp/bramble-task-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[PATH_MAX], env_f[PATH_MAX + 8];
    snprintf(path, sizeof(path), "%s/counter", dir);
    snprintf(env_f, sizeof(env_f), "F=%s", path);
    const char *env[] = {env_f, NULL};
    br_task_t *t = start_ok(
        "i=0; while :; do i=$((i+1)); echo $i > \"$F.tmp\"; "
        "mv \"$F.tmp\" \"$F\"; sleep 0.01; done",
        env, NULL);
    assert_int_equal(wait_counter_above(path, 2), 0);

    assert_true(br_task_freeze(t) >= 1);
    long frozen = read_counter(path);
    assert_true(frozen > 2);
    /* Once frozen it can never advance; watch a while to catch one that does. */
    int64_t until = br_mono_ms() + 300;
    while (br_mono_ms() < until) {
        assert_int_equal(read_counter(path), frozen);
        sleep_ms(10);
    }
    assert_int_equal(br_task_done(t, NULL, NULL), 0);

    assert_true(br_task_thaw(t) >= 1);
    assert_int_equal(wait_counter_above(path, frozen), 0);

    assert_int_equal(br_task_kill_tree(t, 5000), 0);
    reap_all(t);
    unlink(path);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(tmp);
    rmdir(dir);
}

static void test_kill_frozen_tree(void **state)
{
    br_task_t *t = start_ok("sleep 1000 & setsid sleep 1000 & wait", NULL, NULL);
    assert_int_equal(wait_count_at_least(br_task_tag(t), 3), 0);
    assert_true(br_task_freeze(t) >= 3);
    assert_int_equal(br_task_kill_tree(t, 5000), 0);
    assert_int_equal(br_task_count_tagged(br_task_tag(t)), 0);
    reap_all(t);
}

static void test_misc(void **state)
{
    br_task_destroy(NULL);
    br_task_t *none = NULL;
    errno = EBUSY;
    br_task_destroy(&none);
    assert_int_equal(errno, EBUSY);
    assert_int_equal(br_task_count_tagged("bramble-no-such-tag"), 0);
    br_err_t err = {0};
    br_task_opts_t o = {.command = "true"};
    assert_null(br_task_start(&o, &err));
    assert_int_equal(err.errnum, EINVAL);
}


/* Only the allowlisted part of the agent's environment reaches a job. */
static void test_environment_allowlist(void **state)
{
    static const char *const leaky[] = {"SUDO_USER", "SSH_AUTH_SOCK",
                                        "AWS_SECRET_ACCESS_KEY", "BRAMBLE_JOIN_TOKEN",
                                        "BRAMBLE_SECRET_THING", "HTTPS_PROXY"};
    for (size_t i = 0; i < sizeof(leaky) / sizeof(leaky[0]); i++)
        setenv(leaky[i], "leaked", 1);
    setenv("LC_TIME", "C", 1);
    br_task_t *t = start_ok("env; echo END", NULL, NULL);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    assert_null(strstr(c.out, "leaked"));
    assert_non_null(strstr(c.out, "LC_TIME=C\n"));
    assert_non_null(strstr(c.out, "\nPATH=") ? "" : (strncmp(c.out, "PATH=", 5) ? NULL : ""));
    assert_non_null(strstr(c.out, "SHELL="));
    for (size_t i = 0; i < sizeof(leaky) / sizeof(leaky[0]); i++)
        unsetenv(leaky[i]);
    unsetenv("LC_TIME");
}

/* Which task a process belongs to: by the kernel's process tree, not its
 * environment. */
static void test_task_of_pid(void **state)
{
    br_task_t *t = start_ok("sleep 30 & setsid sleep 30 & echo started; wait", NULL, NULL);
    assert_ptr_equal(br_task_of_pid(br_task_pid(t)), t);
    assert_null(br_task_of_pid(getpid()));
    assert_int_equal(br_task_uid(t), geteuid());
    /* children (one in its own session, found by its parent) */
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    int found = 0;
    while (found < 2 && br_mono_ms() < deadline) {
        found = 0;
        char path[64], buf[256];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)br_task_pid(t),
                 (int)br_task_pid(t));
        FILE *f = fopen(path, "re");
        if (f && fgets(buf, sizeof(buf), f)) {
            char *p = buf, *end;
            long pid;
            while ((pid = strtol(p, &end, 10)) > 0 && end != p) {
                found += br_task_of_pid((pid_t)pid) == t;
                p = end;
            }
        }
        if (f)
            fclose(f);
        if (found < 2)
            sleep_ms(10);
    }
    assert_int_equal(found, 2);
    /* a process outside it, even with the task's tag in its environment */
    char entry[200];
    snprintf(entry, sizeof(entry), "BRAMBLE_TASK=%s", br_task_tag(t));
    pid_t other = fork();
    if (other == 0) {
        char *argv[] = {"sleep", "30", NULL}, *envp[] = {entry, NULL};
        execve("/bin/sleep", argv, envp);
        _exit(127);
    }
    assert_true(other > 0);
    sleep_ms(50);
    assert_null(br_task_of_pid(other));
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
}

/* "#UID:GID": a uid with no passwd entry, HOME from the env. */
static void test_numeric_user(void **state)
{
    if (geteuid() != 0)
        skip();
    const char *env[] = {"HOME=/tmp", NULL};
    br_err_t err = {0};
    br_task_t *t = start("echo $(id -u) $(id -g) $(id -G) $USER $HOME $PWD", env, NULL,
                         "#70123:70124", &err);
    if (!t)
        fail_msg("%s", err.text);
    assert_int_equal(br_task_uid(t), 70123);
    assert_int_equal(br_task_gid(t), 70124);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    assert_string_equal(c.out, "70123 70124 70124 70123 /tmp /tmp\n");
    assert_null(start("true", NULL, NULL, "#70123", &err));
    assert_non_null(strstr(err.text, "#UID:GID"));
}

/* A second handle on a running task, as an agent started again makes from what the
 * first one saved: it reads the job's output through the waiter, and learns the
 * job's end from the waiter's pidfd and exit file. */
static void test_adopt(void **state)
{
    char dir[] = "/tmp/bramble-adopt-XXXXXX", exit_path[64], go[64];
    assert_non_null(mkdtemp(dir));
    snprintf(exit_path, sizeof(exit_path), "%s/1.1.0.exit", dir);
    snprintf(go, sizeof(go), "%s/go", dir);
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "echo first; while [ ! -e %s ]; do sleep 0.02; done; echo second; exit 5", go);
    br_task_opts_t o = {.command = cmd, .tag = new_tag(), .exit_path = exit_path};
    br_err_t err = {0};
    cleanup_task();
    g_task = br_task_start(&o, &err);
    assert_non_null(g_task);
    br_task_t *t = g_task;
    assert_true(br_task_waiter(t) > 0 && br_task_waiter(t) != br_task_pid(t));
    assert_true(br_task_waiter_start(t) > 0);
    char comm[32];
    uint64_t start;
    assert_int_equal(br_proc_start(br_task_waiter(t), &start, comm, sizeof(comm)), 0);
    assert_string_equal(comm, "bramble-wait");
    char tag[64];
    snprintf(tag, sizeof(tag), "%s", br_task_tag(t)); /* the handle goes below */
    br_task_saved_t sv = {.tag = tag,
                          .exit_path = exit_path,
                          .pid = br_task_pid(t),
                          .waiter = br_task_waiter(t),
                          .waiter_start = br_task_waiter_start(t),
                          .uid = br_task_uid(t),
                          .gid = br_task_gid(t)};
    /* a reused pid (another start time) is not the waiter */
    br_task_saved_t wrong = sv;
    wrong.waiter_start++;
    assert_null(br_task_adopt(&wrong, &err));
    assert_non_null(strstr(err.text, "left no exit status"));
    br_task_t *ad = br_task_adopt(&sv, &err);
    if (!ad)
        print_error("br_task_adopt: %s\n", err.text);
    assert_non_null(ad);
    assert_int_equal(br_task_pid(ad), br_task_pid(t));
    assert_true(br_task_wait_fd(ad) >= 0);
    /* the first handle goes, as the first agent did: its pipes close */
    br_task_destroy(&g_task);
    g_task = ad;
    FILE *f = fopen(go, "w");
    assert_non_null(f);
    fclose(f);
    capture_t c = {0};
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    while (!br_task_check_adopted(ad) && br_mono_ms() < deadline) {
        drain(ad, 1, &c);
        drain(ad, 2, &c);
        sleep_ms(5);
    }
    drain(ad, 1, &c);
    int code = -1, sig = -1;
    assert_int_equal(br_task_done(ad, &code, &sig), 1);
    assert_int_equal(code, 5);
    assert_int_equal(sig, -1);
    assert_non_null(strstr(c.out, "second\n")); /* read through the waiter's pipe */
    assert_int_equal(br_task_wait_fd(ad), -1);
    reap_all(NULL);
    /* the waiter gone, its exit file still says how the job ended */
    br_task_t *late = br_task_adopt(&sv, &err);
    assert_non_null(late);
    assert_int_equal(br_task_done(late, &code, &sig), 1);
    assert_int_equal(code, 5);
    br_task_destroy(&late);
    unlink(exit_path);
    assert_null(br_task_adopt(&sv, &err));
    assert_non_null(strstr(err.text, "is gone and left no exit status"));
    unlink(go);
    rmdir(dir);
}

/* The waiter ends the way the job did, so the agent's waitpid reads the job's end. */
static void test_waiter_mirrors_signal(void **state)
{
    br_task_t *t = start_ok("kill -KILL $$", NULL, NULL);
    capture_t c;
    assert_int_equal(run_to_end(t, &c), 0);
    int code = 0, sig = 0;
    assert_int_equal(br_task_done(t, &code, &sig), 1);
    assert_int_equal(sig, SIGKILL);
    assert_int_equal(code, -1);
}

static int setup(void **state)
{
    return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    cleanup_task();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_output_and_exit, teardown),
        cmocka_unit_test_teardown(test_signal_reported, teardown),
        cmocka_unit_test_teardown(test_not_done_while_running, teardown),
        cmocka_unit_test_teardown(test_environment, teardown),
        cmocka_unit_test_teardown(test_bad_env_entry, teardown),
        cmocka_unit_test_teardown(test_workdir, teardown),
        cmocka_unit_test_teardown(test_bad_workdir, teardown),
        cmocka_unit_test_teardown(test_closed_stdio, teardown),
        cmocka_unit_test_teardown(test_unknown_user, teardown),
        cmocka_unit_test_teardown(test_same_user, teardown),
        cmocka_unit_test_teardown(test_switch_needs_root, teardown),
        cmocka_unit_test_teardown(test_switch_user, teardown),
        cmocka_unit_test_teardown(test_kill_tree, teardown),
        cmocka_unit_test_teardown(test_tree_outlives_its_shell, teardown),
        cmocka_unit_test_teardown(test_kill_forking_tree, teardown),
        cmocka_unit_test_teardown(test_freeze_thaw, teardown),
        cmocka_unit_test_teardown(test_kill_frozen_tree, teardown),
        cmocka_unit_test_teardown(test_misc, teardown),
        cmocka_unit_test_teardown(test_environment_allowlist, teardown),
        cmocka_unit_test_teardown(test_task_of_pid, teardown),
        cmocka_unit_test_teardown(test_numeric_user, teardown),
        cmocka_unit_test_teardown(test_adopt, teardown),
        cmocka_unit_test_teardown(test_waiter_mirrors_signal, teardown),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
