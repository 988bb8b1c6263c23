/* test_jobsock.c - the decoder of the requests jobs send to their agent: what it
 * accepts, and a clear refusal for everything else. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "jobsock.h"

static int decode(const char *text, br_jobsock_req_t *req, br_err_t *err)
{
    return br_jobsock_decode(text, strlen(text), req, err);
}

static void test_good_request(void **state)
{
    (void)state;
    br_jobsock_req_t req;
    br_err_t err = {0};
    assert_int_equal(
        decode("{\"type\":\"checkpoint\",\"path\":\"/srv/ckpt/checkpoint-7\",\"step\":7}",
               &req, &err),
        0);
    assert_string_equal(req.type, "checkpoint");
    assert_string_equal(req.path, "/srv/ckpt/checkpoint-7");
    assert_int_equal(req.step, 7);
}

/* bramble progress [STEP]: the step is optional. */
static void test_progress_request(void **state)
{
    (void)state;
    br_jobsock_req_t req;
    br_err_t err = {0};
    assert_int_equal(decode("{\"type\":\"progress\",\"step\":120}", &req, &err), 0);
    assert_string_equal(req.type, "progress");
    assert_string_equal(req.path, "");
    assert_int_equal(req.step, 120);
    assert_int_equal(decode("{\"type\":\"progress\"}", &req, &err), 0);
    assert_string_equal(req.type, "progress");
    assert_int_equal(req.step, -1);
}

static void refused(const char *text, const char *words)
{
    br_jobsock_req_t req;
    br_err_t err = {0};
    assert_int_equal(decode(text, &req, &err), -1);
    if (!strstr(err.text, words))
        fail_msg("decoding %s: wanted '%s' in '%s'", text, words, err.text);
    assert_int_not_equal(err.errnum, 0);
}

static void test_bad_requests(void **state)
{
    (void)state;
    refused("", "empty");
    refused("not json", "expected one JSON object");
    refused("[1]", "expected one JSON object");
    refused("{\"type\":1}", "\"type\" must be a string");
    refused("{\"type\":\"alive\",\"step\":1}", "unknown type");
    refused("{\"type\":\"progress\",\"step\":-1}", "step must be >= 0");
    refused("{\"type\":\"progress\",\"step\":\"7\"}", "bad request");
    refused("{\"type\":\"progress\",\"path\":\"/a\"}", "bad request");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a\",\"step\":1,\"job\":3}", "bad request");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a\"}", "bad request");
    refused("{\"type\":\"checkpoint\",\"type\":\"checkpoint\",\"path\":\"/a\",\"step\":1}",
            "expected one JSON object");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a\",\"step\":-1}", "step must be >= 0");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a\",\"step\":\"1\"}", "bad request");
    refused("{\"type\":\"checkpoint\",\"path\":\"a/b\",\"step\":1}", "absolute");
    refused("{\"type\":\"checkpoint\",\"path\":\"/\",\"step\":1}", "must not be /");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a//b\",\"step\":1}", "//");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a/b/\",\"step\":1}", "end in '/'");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a/../etc/shadow\",\"step\":1}", "\"..\"");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a/./b\",\"step\":1}", "\"..\"");
    refused("{\"type\":\"checkpoint\",\"path\":\"/a\\u0000b\",\"step\":1}", "bad request");
}

static void test_sizes(void **state)
{
    (void)state;
    static char text[BR_LOCAL_MSG_MAX + 64], path[BR_JOBSOCK_PATH_MAX + 8];
    br_jobsock_req_t req;
    br_err_t err = {0};
    memset(path, 'a', sizeof(path) - 1);
    path[0] = '/';
    path[sizeof(path) - 1] = '\0';
    snprintf(text, sizeof(text), "{\"type\":\"checkpoint\",\"path\":\"%s\",\"step\":1}", path);
    assert_int_equal(decode(text, &req, &err), -1);
    assert_non_null(strstr(err.text, "too long"));
    memset(text, ' ', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    assert_int_equal(decode(text, &req, &err), -1);
    assert_int_equal(err.errnum, EMSGSIZE);
    assert_int_equal(br_jobsock_decode(NULL, 0, &req, &err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_request),
        cmocka_unit_test(test_progress_request),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
