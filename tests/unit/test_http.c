/* test_http.c - the HTTP side's pure parts (coordinator/http/http.c): the --http
 * address forms and metrics tokens, table-driven; and that a build without
 * libmicrohttpd says so instead of serving. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "token.h"

static void test_addresses(void **state)
{
    static const struct {
        const char *in, *text;
        int family, loopback;
    } good[] = {
        {"7780", "127.0.0.1:7780", AF_INET, 1},
        {":7780", "127.0.0.1:7780", AF_INET, 1},
        {"localhost:80", "127.0.0.1:80", AF_INET, 1},
        {"127.0.0.1:7780", "127.0.0.1:7780", AF_INET, 1},
        {"127.1.2.3:65535", "127.1.2.3:65535", AF_INET, 1},
        {"0.0.0.0:7780", "0.0.0.0:7780", AF_INET, 0},
        {"192.168.1.5:7780", "192.168.1.5:7780", AF_INET, 0},
        {"[::1]:7780", "[::1]:7780", AF_INET6, 1},
        {"[::]:1", "[::]:1", AF_INET6, 0},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        br_http_addr_t a;
        br_err_t err = {0};
        if (br_http_parse_addr(good[i].in, &a, &err) < 0)
            fail_msg("%s: %s", good[i].in, err.text);
        assert_string_equal(a.text, good[i].text);
        assert_int_equal(a.ss.ss_family, good[i].family);
        assert_int_equal(a.loopback, good[i].loopback);
        assert_int_equal(a.len, good[i].family == AF_INET
                                    ? sizeof(struct sockaddr_in)
                                    : sizeof(struct sockaddr_in6));
    }
    static const struct {
        const char *in, *words;
    } bad[] = {
        {"", "empty"},
        {"0", "'0' is not a port (1..65535)"},
        {"65536", "not a port"},
        {"x", "not a port"},
        {"host.example:7780", "not an IP address"},
        {"127.0.0.1:", "port"},
        {"::1:7780", "brackets"},
        {"[::1]", "expected [ADDRESS:]PORT"},
        {"[nope]:80", "not an IPv6 address"},
        {"1.2.3.4.5:80", "not an IP address"},
        {"127.0.0.1:80x", "port"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1",
         "too long"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        br_http_addr_t a;
        br_err_t err = {0};
        if (br_http_parse_addr(bad[i].in, &a, &err) == 0)
            fail_msg("'%s' was taken as %s", bad[i].in, a.text);
        assert_int_equal(err.errnum, EINVAL);
        if (!strstr(err.text, bad[i].words))
            fail_msg("'%s': '%s' does not say '%s'", bad[i].in, err.text, bad[i].words);
    }
    br_http_addr_t a;
    assert_int_equal(br_http_parse_addr(NULL, &a, NULL), -1);
}

static void test_tokens(void **state)
{
    char text[BR_HTTP_TOKEN_MAX], hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
    char again[BR_TOKEN_HASH_HEX + 1], other[BR_HTTP_TOKEN_MAX];
    br_http_token_make(text, hash, id);
    assert_int_equal(strncmp(text, BR_HTTP_TOKEN_PREFIX, strlen(BR_HTTP_TOKEN_PREFIX)),
                     0);
    assert_int_equal(strlen(text), strlen(BR_HTTP_TOKEN_PREFIX) + BR_TOKEN_SECRET_HEX);
    assert_int_equal(strlen(hash), BR_TOKEN_HASH_HEX);
    assert_int_equal(strncmp(hash, id, BR_TOKEN_ID_LEN), 0);
    assert_int_equal(br_http_token_hash(text, again), 0);
    assert_string_equal(again, hash);
    br_http_token_make(other, again, id);
    assert_string_not_equal(other, text); /* fresh secrets */
    assert_string_not_equal(again, hash);

    char bad[BR_HTTP_TOKEN_MAX + 8];
    static const char *const refused[] = {"", "brm1.", "brt1.abc", "Bearer x", NULL};
    for (int i = 0; refused[i]; i++)
        assert_int_equal(br_http_token_hash(refused[i], again), -1);
    assert_int_equal(br_http_token_hash(NULL, again), -1);
    strcpy(bad, text);
    bad[strlen(bad) - 1] = 'G'; /* not lower-case hex */
    assert_int_equal(br_http_token_hash(bad, again), -1);
    strcpy(bad, text);
    strcat(bad, "0"); /* one digit too many */
    assert_int_equal(br_http_token_hash(bad, again), -1);
}

static void test_labels(void **state)
{
    assert_int_equal(br_http_code(BR_HTTP_OK), 200);
    assert_int_equal(br_http_code(BR_HTTP_UNAUTHORIZED), 401);
    assert_int_equal(br_http_code(BR_HTTP_CODES), 0);
    assert_string_equal(br_http_reason(BR_HTTP_NO_TOKEN), "no_token");
    assert_string_equal(br_http_reason(-1), "");
}

/* A loopback port that was free a moment ago. */
static int free_port(void)
{
    struct sockaddr_in in = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(in);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&in, &len), 0);
    close(fd);
    return ntohs(in.sin_port);
}

/* Without libmicrohttpd the constructor refuses with words; with it, a port in use
 * is refused with the system's reason. */
static void test_new(void **state)
{
    br_http_addr_t a;
    br_err_t err = {0};
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
    assert_int_equal(br_http_parse_addr(addr, &a, &err), 0);
    if (!br_http_available()) {
        assert_null(br_http_new(&a, NULL, &err));
        assert_non_null(strstr(err.text, "built without HTTP"));
        return;
    }
    br_http_t *h = br_http_new(&a, NULL, &err);
    if (!h)
        fail_msg("%s", err.text);
    assert_true(br_http_fd(h) >= 0);
    assert_int_equal(br_http_wanted(h), 0);
    br_http_publish(h, "x 1\n", 4);
    br_http_token_t t = {"id", "hash", 0, 0};
    assert_int_equal(br_http_set_tokens(h, &t, 1), 0);
    br_http_counts_t c;
    br_http_counts(h, &c);
    assert_int_equal(c.answers[BR_HTTP_OK], 0);
    br_http_t *dup = br_http_new(&a, NULL, &err); /* the same port again */
    assert_null(dup);
    assert_non_null(strstr(err.text, "Address already in use"));
    br_http_destroy(&h);
    assert_null(h);
    br_http_destroy(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_new),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
