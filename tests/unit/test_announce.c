/* test_announce.c - unit tests for the LAN announcement datagram (proto/announce.c):
 * round trip, and strict decoding of garbage, truncation, wrong magic, oversize. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "announce.h"
#include "cred.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define MAGIC BR_ANNOUNCE_MAGIC

static char key[BR_KEY_LEN + 1];

static int setup(void **state)
{
    char sec[BR_KEY_LEN + 1];
    return sodium_init() < 0 || br_keypair(key, sec, NULL) < 0 ? -1 : 0;
}

static int decode_text(const char *text, br_announce_t *a, br_err_t *err)
{
    return br_announce_decode(text, strlen(text), a, err);
}

static void test_round_trip(void **state)
{
    br_announce_t a = {0}, back;
    br_err_t err = {0};
    char buf[BR_ANNOUNCE_MAX];
    size_t n = 0;
    strcpy(a.key, key);
    a.port = 7700;
    strcpy(a.endpoint, "tcp://0.0.0.0:7700");
    assert_int_equal(br_announce_encode(&a, buf, sizeof(buf), &n, &err), 0);
    assert_true(n > strlen(MAGIC) && n <= BR_ANNOUNCE_MAX);
    assert_memory_equal(buf, MAGIC, strlen(MAGIC));
    assert_int_equal(br_announce_decode(buf, n, &back, &err), 0);
    assert_string_equal(back.key, key);
    assert_int_equal(back.port, 7700);
    assert_string_equal(back.endpoint, "tcp://0.0.0.0:7700");

    /* every proper prefix is refused (truncation), none crashes */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(br_announce_decode(buf, k, &back, &err), -1);
}

static void test_encode_refuses_bad_fields(void **state)
{
    br_announce_t a = {0};
    br_err_t err = {0};
    char buf[BR_ANNOUNCE_MAX];
    size_t n;
    strcpy(a.key, "not a key");
    a.port = 7700;
    strcpy(a.endpoint, "tcp://h:1");
    assert_int_equal(br_announce_encode(&a, buf, sizeof(buf), &n, &err), -1);
    strcpy(a.key, key);
    a.port = 0;
    assert_int_equal(br_announce_encode(&a, buf, sizeof(buf), &n, &err), -1);
    a.port = 1;
    assert_int_equal(br_announce_encode(&a, buf, 10, &n, &err), -1); /* small buffer */
    assert_int_equal(err.errnum, EMSGSIZE);
    /* the longest fields still fit one datagram */
    memset(a.endpoint, 'x', sizeof(a.endpoint) - 1);
    a.endpoint[sizeof(a.endpoint) - 1] = '\0';
    assert_int_equal(br_announce_encode(&a, buf, sizeof(buf), &n, &err), 0);
    assert_true(n <= BR_ANNOUNCE_MAX);
}

static void test_bad_datagrams(void **state)
{
    static const struct {
        const char *body; /* after the magic; NULL: the whole datagram is `raw` */
        const char *raw;
        const char *want; /* in the error text */
    } cases[] = {
        {NULL, "", "wrong magic"},
        {NULL, "hello", "wrong magic"},
        {NULL, "BRAMBLE-ANNOUNCE/1\n{}", "wrong magic"},
        {NULL, "bramble-announce/2\n{}", "another version"},
        {NULL, "bramble-announce/1", "another version"}, /* cut before the newline */
        {"", NULL, "bad JSON"},
        {"{", NULL, "bad JSON"},
        {"[]", NULL, "not a JSON object"},
        {"null", NULL, "bad JSON"},
        {"{\"key\":\"%K\",\"port\":7700}", NULL, "endpoint"},
        {"{\"key\":\"%K\",\"port\":7700,\"endpoint\":\"tcp://h:1\",\"x\":1}", NULL,
         "x"},
        {"{\"key\":\"%K\",\"port\":7700,\"endpoint\":\"tcp://h:1\"} trailing", NULL,
         "bad JSON"},
        {"{\"key\":\"%K\",\"key\":\"%K\",\"port\":7700,\"endpoint\":\"tcp://h:1\"}",
         NULL, "bad JSON"},
        {"{\"key\":\"short\",\"port\":7700,\"endpoint\":\"tcp://h:1\"}", NULL, "key"},
        {"{\"key\":7,\"port\":7700,\"endpoint\":\"tcp://h:1\"}", NULL, "key"},
        {"{\"key\":\"%K\",\"port\":0,\"endpoint\":\"tcp://h:1\"}", NULL, "port"},
        {"{\"key\":\"%K\",\"port\":65536,\"endpoint\":\"tcp://h:1\"}", NULL, "port"},
        {"{\"key\":\"%K\",\"port\":-1,\"endpoint\":\"tcp://h:1\"}", NULL, "port"},
        {"{\"key\":\"%K\",\"port\":99999999999999999999999,\"endpoint\":\"x\"}", NULL,
         "bad JSON"},
        {"{\"key\":\"%K\",\"port\":7700.5,\"endpoint\":\"tcp://h:1\"}", NULL, "port"},
        {"{\"key\":\"%K\",\"port\":\"7700\",\"endpoint\":\"tcp://h:1\"}", NULL, "port"},
        {"{\"key\":\"%K\",\"port\":7700,\"endpoint\":\"\"}", NULL, "endpoint"},
        {"{\"key\":\"%K\",\"port\":7700,\"endpoint\":\"tcp://a b:1\"}", NULL,
         "endpoint"},
        {"{\"key\":\"%K\",\"port\":7700,\"endpoint\":\"tcp://h\\u0000:1\"}", NULL,
         "bad JSON"},
        {"{\"key\":\"%K\",\"port\":7700,\"endpoint\":[]}", NULL, "endpoint"},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        char text[1024], body[900] = "";
        if (cases[i].body) {
            /* %K -> the test key */
            const char *s = cases[i].body;
            size_t j = 0;
            while (*s && j + BR_KEY_LEN + 1 < sizeof(body)) {
                if (s[0] == '%' && s[1] == 'K') {
                    memcpy(body + j, key, BR_KEY_LEN);
                    j += BR_KEY_LEN;
                    s += 2;
                } else {
                    body[j++] = *s++;
                }
            }
            body[j] = '\0';
            snprintf(text, sizeof(text), "%s%s", MAGIC, body);
        } else {
            snprintf(text, sizeof(text), "%s", cases[i].raw);
        }
        br_announce_t a;
        br_err_t err = {0};
        if (decode_text(text, &a, &err) != -1)
            fail_msg("case %zu (%s) was accepted", i, text);
        assert_int_equal(err.errnum, EPROTO);
        if (!strstr(err.text, cases[i].want))
            fail_msg("case %zu: error '%s' does not say '%s'", i, err.text,
                     cases[i].want);
    }
}

static void test_oversized_and_garbage(void **state)
{
    br_announce_t a;
    br_err_t err = {0};
    char big[BR_ANNOUNCE_MAX + 64];
    /* a valid-looking datagram padded with spaces past the limit */
    int n = snprintf(big, sizeof(big),
                     "%s{\"key\":\"%s\",\"port\":1,\"endpoint\":\"x\"", MAGIC, key);
    memset(big + n, ' ', sizeof(big) - (size_t)n - 1);
    big[sizeof(big) - 2] = '}';
    assert_int_equal(br_announce_decode(big, sizeof(big) - 1, &a, &err), -1);
    assert_non_null(strstr(err.text, "more than"));

    /* random bytes, with and without the magic in front: refused, never a crash */
    unsigned char junk[BR_ANNOUNCE_MAX];
    for (int round = 0; round < 2000; round++) {
        size_t len = randombytes_uniform(sizeof(junk) + 1);
        randombytes_buf(junk, len);
        if (round % 2 && len >= strlen(MAGIC))
            memcpy(junk, MAGIC, strlen(MAGIC));
        assert_int_equal(br_announce_decode(junk, len, &a, &err), -1);
    }
}

static void test_split_endpoint(void **state)
{
    char host[256];
    int port;
    br_err_t err;
    assert_int_equal(br_announce_split_endpoint("tcp://10.0.0.1:7700", host,
                                                sizeof(host), &port, &err),
                     0);
    assert_string_equal(host, "10.0.0.1");
    assert_int_equal(port, 7700);
    assert_int_equal(
        br_announce_split_endpoint("tcp://[::1]:1", host, sizeof(host), &port, &err),
        0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 1);
    static const char *bad[] = {"ipc:///x",      "tcp://",     "tcp://h",
                                "tcp://h:",      "tcp://:1",   "tcp://h:0",
                                "tcp://h:65536", "tcp://h:1x", "tcp://[]:1"};
    for (size_t i = 0; i < NELEM(bad); i++)
        if (br_announce_split_endpoint(bad[i], host, sizeof(host), &port, &err) != -1)
            fail_msg("'%s' was accepted", bad[i]);
}

/* Over loopback: a datagram sent to the listening port comes back decoded, with the
 * sender's address; garbage comes back as -1 with its sender. */
static void test_listen_recv(void **state)
{
    br_err_t err = {0};
    int fd = br_announce_listen(0, &err); /* port 0: any free one */
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &salen), 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    br_announce_t a = {0}, got;
    char buf[BR_ANNOUNCE_MAX], src[64];
    size_t n;
    strcpy(a.key, key);
    a.port = 7700;
    strcpy(a.endpoint, "tcp://0.0.0.0:7700");
    assert_int_equal(br_announce_encode(&a, buf, sizeof(buf), &n, &err), 0);
    assert_int_equal(br_announce_recv(fd, &got, src, sizeof(src), &err),
                     0); /* nothing */

    int out = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(out >= 0);
    assert_int_equal(sendto(out, "garbage", 7, 0, (struct sockaddr *)&sa, sizeof(sa)),
                     7);
    assert_int_equal(sendto(out, buf, n, 0, (struct sockaddr *)&sa, sizeof(sa)),
                     (ssize_t)n);
    int rc;
    while ((rc = br_announce_recv(fd, &got, src, sizeof(src), &err)) == 0)
        usleep(1000);
    assert_int_equal(rc, -1);
    assert_string_equal(src, "127.0.0.1");
    while ((rc = br_announce_recv(fd, &got, src, sizeof(src), &err)) == 0)
        usleep(1000);
    assert_int_equal(rc, 1);
    assert_string_equal(src, "127.0.0.1");
    assert_string_equal(got.key, key);
    assert_int_equal(got.port, 7700);
    close(out);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_encode_refuses_bad_fields),
        cmocka_unit_test(test_bad_datagrams),
        cmocka_unit_test(test_oversized_and_garbage),
        cmocka_unit_test(test_split_endpoint),
        cmocka_unit_test(test_listen_recv),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
