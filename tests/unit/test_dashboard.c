/* test_dashboard.c - the dashboard object without its HTTP side: login links have
 * their form and are bounded, the dashboard's routing ids are told from every
 * ZeroMQ peer's, answers and news for nobody are dropped, and the built-in assets
 * are there, hold the page's CSRF mark and load nothing from elsewhere; a log's
 * bytes reach the page as JSON text, invalid UTF-8 replaced. (Sessions,
 * cookies, CSRF and streams are tested through real HTTP in
 * tests/integration/test_dashboard.py.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

#include "dash_assets.h"
#include "dash_int.h"
#include "dashboard.h"
#include "util.h"

static void test_login_links(void **state)
{
    (void)state;
    br_dash_t *d = br_dash_new("127.0.0.1:7780", 0);
    assert_non_null(d);
    char a[200], b[200];
    int64_t exp = 0, now = br_now_ms();
    assert_int_equal(br_dash_login_new(d, "key", "admin", 1, a, sizeof(a), &exp), 0);
    assert_int_equal(br_dash_login_new(d, "key", "admin", 1, b, sizeof(b), &exp), 0);
    regex_t re;
    assert_int_equal(
        regcomp(&re, "^http://127\\.0\\.0\\.1:7780/login\\?t=[0-9a-f]{64}$",
                REG_EXTENDED | REG_NOSUB),
        0);
    assert_int_equal(regexec(&re, a, 0, NULL, 0), 0);
    assert_int_equal(regexec(&re, b, 0, NULL, 0), 0);
    regfree(&re);
    assert_string_not_equal(a, b);
    /* served over HTTPS, the links say so */
    br_dash_t *tls = br_dash_new("[::1]:7780", 1);
    assert_non_null(tls);
    assert_int_equal(br_dash_login_new(tls, "key", "u", 0, b, sizeof(b), &exp), 0);
    assert_int_equal(strncmp(b, "https://[::1]:7780/login?t=", 27), 0);
    br_dash_destroy(&tls);
    assert_true(exp >= now + BR_DASH_LOGIN_TTL_MS - 1000 &&
                exp <= br_now_ms() + BR_DASH_LOGIN_TTL_MS);
    /* bounded: the oldest links make room */
    for (int i = 0; i < 3 * BR_DASH_LOGINS_MAX; i++)
        assert_int_equal(br_dash_login_new(d, "key", "u", 0, a, sizeof(a), &exp), 0);
    br_dash_counts_t n;
    br_dash_counts(d, &n);
    assert_int_equal(n.logins, BR_DASH_LOGINS_MAX);
    assert_int_equal(n.sessions, 0);
    br_dash_destroy(&d);
    assert_null(d);
    br_dash_destroy(&d); /* NULL is fine */
    br_dash_destroy(NULL);
}

static void test_routes_and_strays(void **state)
{
    (void)state;
    br_dash_t *d = br_dash_new("[::1]:7780", 0);
    unsigned char ours[BR_DASH_ROUTE_LEN] = {0};
    memcpy(ours, BR_DASH_ROUTE_PREFIX, BR_DASH_ROUTE_PREFIX_LEN);
    ours[BR_DASH_ROUTE_LEN - 1] = 7;
    const unsigned char zmq_auto[5] = {0, 0x80, 0, 0, 1}; /* a ROUTER's own ids */
    assert_true(br_dash_is_route(ours, sizeof(ours)));
    assert_false(br_dash_is_route(zmq_auto, sizeof(zmq_auto)));
    assert_false(br_dash_is_route("dash:12345678", 13)); /* a peer's chosen id */
    assert_false(br_dash_is_route(ours, sizeof(ours) - 1));
    assert_false(br_dash_is_route(NULL, 0));
    /* nothing queued; answers and news for nobody are dropped */
    br_dash_req_t reqs[4];
    assert_int_equal(br_dash_take(d, reqs, 4), 0);
    json_t *body = json_pack("{s:i}", "errnum", ENOENT);
    br_dash_answer(d, ours, sizeof(ours), body, "x", 1);
    br_dash_answer(d, zmq_auto, sizeof(zmq_auto), body, NULL, 0);
    json_decref(body);
    assert_int_equal(br_dash_news(d, ours, sizeof(ours), 1), -1);
    assert_int_equal(br_dash_news(d, zmq_auto, sizeof(zmq_auto), 1), -1);
    br_dash_stop(d);
    br_dash_destroy(&d);
}

/* An answer with a data frame (job.logs): the bytes come as "text", each byte that
 * is not valid UTF-8 (here a stray one and a character cut short) as U+FFFD, and
 * the loop's body is left as it was. */
static void test_log_text(void **state)
{
    (void)state;
    br_dash_t *d = br_dash_new("127.0.0.1:7780", 0);
    pthread_mutex_lock(&d->lock);
    req_t *r = dash_enqueue(d, 5, "key", "job.logs", json_object(), 0);
    pthread_mutex_unlock(&d->lock);
    assert_non_null(r);
    br_dash_req_t got[2];
    assert_int_equal(br_dash_take(d, got, 2), 1);
    assert_string_equal(got[0].type, "job.logs");
    json_decref(got[0].body);
    json_t *body = json_pack("{s:I}", "next", 3);
    static const char data[] = "ok \xc3\xa9 \xff\xe2\x82";
    br_dash_answer(d, got[0].route, sizeof(got[0].route), body, data, sizeof(data) - 1);
    assert_null(json_object_get(body, "text"));
    json_decref(body);
    pthread_mutex_lock(&d->lock);
    assert_true(r->answered);
    assert_int_equal(r->errnum, 0);
    json_t *a = json_loads(r->answer, 0, NULL);
    dash_unlink_req(d, r);
    pthread_mutex_unlock(&d->lock);
    assert_non_null(a);
    assert_string_equal(json_string_value(json_object_get(a, "text")),
                        "ok \xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    assert_int_equal(json_integer_value(json_object_get(a, "next")), 3);
    json_decref(a);
    dash_req_free(r);
    br_dash_destroy(&d);
}

static const br_dash_asset_t *find(const char *path)
{
    for (size_t i = 0; br_dash_assets[i].path; i++)
        if (strcmp(br_dash_assets[i].path, path) == 0)
            return &br_dash_assets[i];
    return NULL;
}

static void test_assets(void **state)
{
    (void)state;
    const char *paths[] = {"/index.html", "/app.js", "/app.css"};
    for (size_t i = 0; i < 3; i++) {
        const br_dash_asset_t *a = find(paths[i]);
        assert_non_null(a);
        assert_true(a->len > 100);
        assert_int_equal(strlen((const char *)a->data), a->len); /* NUL-terminated */
        /* nothing from elsewhere: no CDN, no remote script, style or font */
        assert_null(strstr((const char *)a->data, "https://"));
        assert_null(strstr((const char *)a->data, "src=\"http"));
        assert_null(strstr((const char *)a->data, "href=\"http"));
        assert_null(strstr((const char *)a->data, "@import"));
    }
    assert_non_null(
        strstr((const char *)find("/index.html")->data, "content=\"{{csrf}}\""));
    assert_string_equal(find("/app.js")->type, "text/javascript; charset=utf-8");
    assert_null(find("/nope"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_login_links),
        cmocka_unit_test(test_routes_and_strays),
        cmocka_unit_test(test_log_text),
        cmocka_unit_test(test_assets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
