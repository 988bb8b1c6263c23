/* test_keeper.c - the keeper against real processes: while its agent (this test)
 * beats, it touches nothing; once the beats stop it stops every process carrying the
 * run's entry within the fence time, leaves others alone, and kills them once the
 * fence and node timeouts have passed; it goes when told. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "keeper.h"
#include "util.h"

/* A child that sleeps, with entry (or nothing) in its environment. */
static pid_t sleeper(const char *entry)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = {"sleep", "30", NULL};
        char *envp[] = {(char *)entry, NULL};
        execve("/bin/sleep", argv, entry ? envp : argv + 2);
        _exit(127);
    }
    return pid;
}

static char state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p ? p[2] : 0;
}

static void nap(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait up to ms for pid's state to be one of want; the state seen. */
static char wait_state(pid_t pid, const char *want, int ms, br_keeper_t *beat)
{
    int64_t end = br_mono_ms() + ms;
    char st;
    while (!strchr(want, st = state(pid)) && br_mono_ms() < end) {
        if (beat)
            br_keeper_beat(beat, br_mono_ms());
        nap(10);
    }
    return st;
}

static void test_freezes_then_kills_only_its_run(void **state_)
{
    (void)state_;
    br_err_t err;
    br_keeper_t *k = br_keeper_new(NULL, 300, 600, &err);
    assert_non_null(k);
    assert_true(br_keeper_pid(k) > 0);
    assert_int_equal(strncmp(br_keeper_env(k), KEEPER_ENV "=", strlen(KEEPER_ENV) + 1), 0);
    assert_string_equal(br_keeper_env(k) + strlen(KEEPER_ENV) + 1, br_keeper_run_id(k));
    pid_t ours = sleeper(br_keeper_env(k)), other = sleeper("BRAMBLE_AGENT_RUN=other");
    /* beating: left alone for several fence times */
    assert_int_equal(wait_state(ours, "T", 1000, k), 'S');
    assert_int_equal(br_keeper_froze(k), 0);
    /* silent: stopped within the fence time and a few ticks */
    int64_t t0 = br_mono_ms();
    assert_int_equal(wait_state(ours, "Tt", 300 + 500, NULL), 'T');
    int64_t stopped = br_mono_ms() - t0;
    assert_true(stopped < 300 + 500);
    assert_int_equal(br_keeper_froze(k), 1);
    assert_int_equal(state(other), 'S');
    /* past fence + node timeout: killed (a zombie until reaped here) */
    assert_int_equal(wait_state(ours, "Z", 2000, NULL), 'Z');
    int status;
    assert_int_equal(waitpid(ours, &status, 0), ours);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(state(other), 'S');
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
    br_keeper_destroy(&k);
    assert_null(k);
}

static void test_goes_when_told_and_is_replaced(void **state_)
{
    (void)state_;
    br_err_t err;
    br_keeper_t *k = br_keeper_new(NULL, 5000, 0, &err);
    assert_non_null(k);
    pid_t first = br_keeper_pid(k);
    kill(first, SIGKILL);
    int status;
    assert_int_equal(waitpid(first, &status, 0), first);
    assert_int_equal(br_keeper_reaped(k, first + 100000, status), 0);
    assert_int_equal(br_keeper_reaped(k, first, status), 1); /* and a new one */
    assert_true(br_keeper_pid(k) > 0 && br_keeper_pid(k) != first);
    pid_t second = br_keeper_pid(k);
    br_keeper_destroy(&k); /* quits and is reaped */
    assert_int_equal(waitpid(second, NULL, WNOHANG), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_freezes_then_kills_only_its_run),
        cmocka_unit_test(test_goes_when_told_and_is_replaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
