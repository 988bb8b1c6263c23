/* test_procstat.c - /proc/PID/stat read as the kernel writes it: a command name
 * with spaces and parentheses, the ids and start time of a real child, and a
 * process that is gone. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "procstat.h"

/* A child in a session of its own, named "a) b (c": the fields come after the
 * last ')', however the name reads. */
static void test_child_with_a_tricky_name(void **state)
{
    (void)state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setsid();
        prctl(PR_SET_NAME, "a) b (c", 0, 0, 0);
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    br_procstat_t ps, again;
    assert_int_equal(br_procstat_read(-1, pid, &ps), 0);
    assert_string_equal(ps.comm, "a) b (c");
    assert_int_equal(ps.ppid, getpid());
    assert_int_equal(ps.pgrp, pid);
    assert_int_equal(ps.sid, pid);
    assert_true(ps.state == 'S' || ps.state == 'R');
    assert_true(ps.start > 0);
    /* the same through an open /proc/PID */
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(dfd >= 0);
    assert_int_equal(br_procstat_read(dfd, 0, &again), 0);
    assert_int_equal(again.start, ps.start);
    assert_int_equal(again.pgrp, ps.pgrp);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_int_equal(br_procstat_read(-1, pid, &ps), -1); /* reaped: gone */
    assert_int_equal(br_procstat_read(dfd, 0, &ps), -1);
    close(dfd);
    close(ready[0]);
    close(ready[1]);
}

/* This process: its own parent is the shell that started it, and its start time
 * is before a child's. */
static void test_self_and_a_later_child(void **state)
{
    (void)state;
    br_procstat_t me, kid;
    assert_int_equal(br_procstat_read(-1, getpid(), &me), 0);
    assert_int_equal(me.ppid, getppid());
    assert_int_equal(me.state, 'R');
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        pause();
        _exit(0);
    }
    assert_int_equal(br_procstat_read(-1, pid, &kid), 0);
    assert_true(kid.start >= me.start);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_with_a_tricky_name),
        cmocka_unit_test(test_self_and_a_later_child),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
