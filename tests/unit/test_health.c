/* test_health.c - a replica's health check against a real listening socket on
 * loopback, answered by the test itself: HTTP status codes, garbage, silence, a
 * closed port, the start-up grace, the three-failures rule, and the haste a
 * gateway's word brings. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "health.h"
#include "util.h"

typedef struct {
    int fd, port;
    const char *answer; /* what each connection gets; NULL: nothing, kept open */
    int held;           /* a connection kept open without an answer */
} server_t;

static void server_open(server_t *s, const char *answer)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s->fd >= 0);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s->fd, 8), 0);
    getsockname(s->fd, (struct sockaddr *)&sa, &len);
    s->port = ntohs(sa.sin_port);
    s->answer = answer;
    s->held = -1;
}

static void server_close(server_t *s)
{
    close(s->fd);
    if (s->held >= 0)
        close(s->held);
}

/* Answer whatever connection is waiting. */
static void serve(server_t *s)
{
    struct pollfd p = {s->fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0)
        return;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0)
        return;
    char buf[512];
    struct pollfd q = {c, POLLIN, 0};
    if (poll(&q, 1, 200) > 0)
        (void)read(c, buf, sizeof(buf));
    if (!s->answer) {
        if (s->held >= 0)
            close(s->held);
        s->held = c;
        return;
    }
    (void)write(c, s->answer, strlen(s->answer));
    close(c);
}

/* Poll h (serving s) until it is in state want or ms pass; the state. */
static br_health_state_t run(br_health_t *h, server_t *s, br_health_state_t want, int ms)
{
    int64_t end = br_mono_ms() + ms;
    br_health_state_t st = br_health_state(h);
    while (br_mono_ms() < end && (st = br_health_poll(h, br_mono_ms())) != want) {
        if (s)
            serve(s);
        usleep(5000);
    }
    return st;
}

static void test_http_ok_then_500(void **state)
{
    (void)state;
    server_t s;
    br_err_t err;
    server_open(&s, "HTTP/1.1 204 No Content\r\n\r\n");
    br_health_t *h = br_health_new(s.port, "/health", 50, 0, br_mono_ms(), &err);
    assert_non_null(h);
    assert_int_equal(br_health_state(h), BR_HEALTH_STARTING);
    assert_int_equal(run(h, &s, BR_HEALTH_HEALTHY, 3000), BR_HEALTH_HEALTHY);
    s.answer = "HTTP/1.0 500 Internal Server Error\r\n\r\n";
    assert_int_equal(run(h, &s, BR_HEALTH_UNHEALTHY, 3000), BR_HEALTH_UNHEALTHY);
    assert_string_equal(br_health_why(h), "GET /health: HTTP 500");
    s.answer = "HTTP/1.1 302 Found\r\n\r\n"; /* one success: healthy again */
    assert_int_equal(run(h, &s, BR_HEALTH_HEALTHY, 3000), BR_HEALTH_HEALTHY);
    br_health_destroy(&h);
    server_close(&s);
}

/* Checked once a minute, a replica that fails is found only when a gateway's word
 * (br_health_suspect) hastens the checks: three, 250 ms apart; a healthy answer
 * ends the haste. */
static void test_suspect_hastens(void **state)
{
    (void)state;
    server_t s;
    br_err_t err;
    server_open(&s, "HTTP/1.1 200 OK\r\n\r\n");
    br_health_t *h = br_health_new(s.port, "/health", 60000, 0, br_mono_ms(), &err);
    assert_non_null(h);
    assert_int_equal(run(h, &s, BR_HEALTH_HEALTHY, 3000), BR_HEALTH_HEALTHY);
    br_health_suspect(h, br_mono_ms()); /* it answers well: the haste ends */
    s.answer = "HTTP/1.1 200 OK\r\n\r\n";
    run(h, &s, BR_HEALTH_UNHEALTHY, 600);
    s.answer = "HTTP/1.0 503 Service Unavailable\r\n\r\n";
    assert_int_equal(run(h, &s, BR_HEALTH_UNHEALTHY, 600), BR_HEALTH_HEALTHY);
    br_health_suspect(h, br_mono_ms());
    assert_int_equal(run(h, &s, BR_HEALTH_UNHEALTHY, 5000), BR_HEALTH_UNHEALTHY);
    assert_string_equal(br_health_why(h), "GET /health: HTTP 503");
    br_health_destroy(&h);
    server_close(&s);
}

static void test_garbage_and_silence(void **state)
{
    (void)state;
    server_t s;
    br_err_t err;
    server_open(&s, "SSH-2.0-OpenSSH\r\n");
    br_health_t *h = br_health_new(s.port, "/", 50, 0, br_mono_ms(), &err);
    assert_int_equal(run(h, &s, BR_HEALTH_UNHEALTHY, 3000), BR_HEALTH_UNHEALTHY);
    assert_string_equal(br_health_why(h), "GET /: not an HTTP answer");
    br_health_destroy(&h);
    s.answer = NULL; /* accepts, never answers: each check times out */
    h = br_health_new(s.port, "/", 60, 0, br_mono_ms(), &err);
    assert_int_equal(run(h, &s, BR_HEALTH_UNHEALTHY, 3000), BR_HEALTH_UNHEALTHY);
    assert_string_equal(br_health_why(h), "/: no answer within 60ms");
    br_health_destroy(&h);
    server_close(&s);
}

static void test_tcp_and_grace(void **state)
{
    (void)state;
    server_t s;
    br_err_t err;
    server_open(&s, "");
    br_health_t *h = br_health_new(s.port, NULL, 50, 0, br_mono_ms(), &err);
    assert_int_equal(run(h, &s, BR_HEALTH_HEALTHY, 3000), BR_HEALTH_HEALTHY);
    br_health_destroy(&h);
    int port = s.port;
    server_close(&s); /* nothing listens any more */
    /* in its grace, a replica that never answered stays starting */
    h = br_health_new(port, NULL, 20, 600, br_mono_ms(), &err);
    assert_int_equal(run(h, NULL, BR_HEALTH_UNHEALTHY, 400), BR_HEALTH_STARTING);
    assert_non_null(strstr(br_health_why(h), "Connection refused"));
    /* ... and after it, three failures make it unhealthy */
    assert_int_equal(run(h, NULL, BR_HEALTH_UNHEALTHY, 5000), BR_HEALTH_UNHEALTHY);
    br_health_destroy(&h);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    br_err_t err;
    assert_null(br_health_new(0, NULL, 1000, 0, 0, &err));
    assert_null(br_health_new(80, "health", 1000, 0, 0, &err));
    assert_string_equal(err.text, "health check: bad HTTP path");
    assert_null(br_health_new(80, "/a b", 1000, 0, 0, &err));
    assert_null(br_health_new(80, "/", 0, 0, 0, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_ok_then_500),
        cmocka_unit_test(test_suspect_hastens),
        cmocka_unit_test(test_garbage_and_silence),
        cmocka_unit_test(test_tcp_and_grace),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
