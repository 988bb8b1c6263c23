/* test_localsock.c - the job socket: who is answered, and what idle connections
 * cost (agent/localsock.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "localsock.h"
#include "util.h"

#define DEADLINE_MS 20000

typedef struct {
    int calls;
    br_task_t *task;
    char path[256];
} seen_t;

static json_t *answer(void *arg, br_task_t *task, const br_jobsock_req_t *req,
                      br_err_t *err)
{
    (void)err;
    seen_t *s = arg;
    s->calls++;
    s->task = task;
    br_strlcpy(s->path, req->path, sizeof(s->path));
    return json_pack("{s:b}", "ok", 1);
}

static int dial(const char *address)
{
    struct sockaddr_un sa;
    socklen_t len = br_local_addr(address, &sa);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
    return fd;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A process outside every task is refused, whatever its environment says. */
static void test_outsider_refused(void **state)
{
    (void)state;
    br_err_t err = {0};
    br_localsock_t *l = br_localsock_new("unit-outsider", &err);
    assert_non_null(l);
    seen_t seen = {0};
    int fd = dial(br_localsock_address(l));
    const char *req = "{\"type\":\"checkpoint\",\"path\":\"/tmp/x\",\"step\":1}";
    assert_int_equal(send(fd, req, strlen(req), 0), (ssize_t)strlen(req));
    br_localsock_serve(l, answer, &seen);
    char buf[1024] = "";
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    assert_true(n > 0);
    assert_non_null(strstr(buf, "not inside a running job"));
    assert_int_equal(seen.calls, 0);
    assert_int_equal(br_localsock_nconns(l), 0);
    close(fd);
    br_localsock_destroy(&l);
}

/* Idle connections are kept up to the cap, the oldest dropped for new ones, and
 * serving never waits for them. */
static void test_idle_connections_bounded(void **state)
{
    (void)state;
    br_err_t err = {0};
    br_localsock_t *l = br_localsock_new("unit-idle", &err);
    assert_non_null(l);
    seen_t seen = {0};
    int fds[BR_LOCALSOCK_MAX_CONNS + 16];
    int64_t t0 = br_mono_ms();
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS + 16; i++) {
        fds[i] = dial(br_localsock_address(l));
        br_localsock_serve(l, answer, &seen);
    }
    assert_true(br_mono_ms() - t0 < 2000);
    assert_int_equal(br_localsock_nconns(l), BR_LOCALSOCK_MAX_CONNS);
    int poll_fds[BR_LOCALSOCK_FDS_MAX];
    assert_int_equal(br_localsock_fds(l, poll_fds, BR_LOCALSOCK_FDS_MAX),
                     1 + BR_LOCALSOCK_MAX_CONNS);
    assert_int_equal(poll_fds[0], br_localsock_fd(l));
    /* the first ones were dropped: they read EOF */
    char c;
    assert_int_equal(recv(fds[0], &c, 1, MSG_DONTWAIT), 0);
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS + 16; i++)
        close(fds[i]);
    br_localsock_serve(l, answer, &seen); /* peers gone: closed */
    assert_int_equal(br_localsock_nconns(l), 0);
    br_localsock_destroy(&l);
}

/* A process inside a task (the task's child) is answered, and the callback is told
 * which task. */
static void test_task_member_answered(void **state)
{
    (void)state;
    br_err_t err = {0};
    br_localsock_t *l = br_localsock_new("unit-member", &err);
    assert_non_null(l);
    char cmd[512], tag[64];
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX,"
             "socket.SOCK_SEQPACKET); s.connect(\"\\0\"+sys.argv[1][1:]); "
             "s.send(b\"{\\\"type\\\":\\\"checkpoint\\\",\\\"path\\\":\\\"/tmp/ck-3\\\","
             "\\\"step\\\":3}\"); print(s.recv(100))' '%s'",
             br_localsock_address(l));
    snprintf(tag, sizeof(tag), "unit-localsock-%d", (int)getpid());
    br_task_opts_t o = {.command = cmd, .tag = tag};
    br_task_t *t = br_task_start(&o, &err);
    if (!t)
        fail_msg("%s", err.text);
    seen_t seen = {0};
    int64_t deadline = br_mono_ms() + DEADLINE_MS;
    while (!seen.calls && br_mono_ms() < deadline) {
        br_localsock_serve(l, answer, &seen);
        sleep_ms(10);
    }
    assert_int_equal(seen.calls, 1);
    assert_ptr_equal(seen.task, t);
    assert_string_equal(seen.path, "/tmp/ck-3");
    br_task_kill_tree(t, 5000);
    int st;
    waitpid(br_task_waiter(t), &st, 0);
    br_task_destroy(&t);
    br_localsock_destroy(&l);
}

int main(void)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outsider_refused),
        cmocka_unit_test(test_idle_connections_bounded),
        cmocka_unit_test(test_task_member_answered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
