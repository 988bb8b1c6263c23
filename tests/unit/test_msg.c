/* test_msg.c - the wire codec (proto/msg.c), and sockets, ZAP and client over TCP. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "curve_server.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <zmq.h>

#include "client.h"
#include "cred.h"
#include "msg.h"
#include "sock.h"
#include "util.h"
#include "zap.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define WAIT_MS 5000 /* bound on every wait for the network */

/* ---- codec helpers ---- */

typedef struct {
    unsigned char hdr[BR_MSG_HEADER_MIN + BR_MSG_TYPE_MAX];
    size_t hlen;
    char *body;
    size_t blen;
} wire_t;

/* The frames br_msg_send would write for m (header and compact JSON body). */
static void encode(const br_msg_t *m, wire_t *w)
{
    w->hlen = br_msg_encode_header(m, w->hdr);
    w->body = json_dumps(br_msg_body(m), JSON_COMPACT);
    assert_non_null(w->body);
    w->blen = strlen(w->body);
}

/* 1 when a and b carry the same kind, type, seq, body and data. */
static int same_msg(const br_msg_t *a, const br_msg_t *b)
{
    size_t la, lb;
    const void *da = br_msg_data(a, &la), *db = br_msg_data(b, &lb);
    return br_msg_kind(a) == br_msg_kind(b) &&
           strcmp(br_msg_type(a), br_msg_type(b)) == 0 &&
           br_msg_seq(a) == br_msg_seq(b) &&
           json_equal(br_msg_body(a), br_msg_body(b)) && !da == !db && la == lb &&
           (!da || memcmp(da, db, la) == 0);
}

/* ---- encode/decode ---- */

static void test_round_trip(void **state)
{
    static const char *types[] = {"ping", "job.submit", "a", "x_y-z.0",
                                  "abcdefghijklmnopqrstuvwxyz012345"};
    static const uint32_t seqs[] = {0, 1, 0x01020304, 0xdeadbeef, UINT32_MAX};
    size_t big_len = BR_MSG_DATA_MAX;
    unsigned char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (unsigned char)(i * 31);
    /* data: none, empty, bytes with NULs, the largest allowed */
    const struct {
        const void *p;
        size_t len;
        int set;
    } datas[] = {{NULL, 0, 0}, {"", 0, 1}, {"a\0b\0\xff", 5, 1}, {big, big_len, 1}};
    for (br_msg_kind_t kind = BR_MSG_REQUEST; kind <= BR_MSG_EVENT; kind++) {
        for (size_t t = 0; t < NELEM(types); t++) {
            for (size_t d = 0; d < NELEM(datas); d++) {
                uint32_t seq = seqs[(t + d) % NELEM(seqs)];
                br_msg_t *m = br_msg_new(kind, types[t], seq);
                assert_non_null(m);
                br_msg_set_body(m,
                                json_pack("{s:i, s:s, s:{s:[i, f, b, n]}}", "a", 1, "s",
                                          "caf\xc3\xa9 \"q\"", "n", "z", 1, 2.5, 1));
                if (datas[d].set)
                    assert_int_equal(br_msg_set_data(m, datas[d].p, datas[d].len), 0);
                wire_t w;
                encode(m, &w);
                assert_int_equal(w.hlen, BR_MSG_HEADER_MIN + strlen(types[t]));
                assert_int_equal(w.hdr[8], datas[d].set ? 1 : 0);
                br_err_t err = {0};
                const void *dp = datas[d].set ? br_msg_data(m, NULL) : NULL;
                br_msg_t *back = br_msg_decode(w.hdr, w.hlen, w.body, w.blen, dp,
                                               datas[d].len, &err);
                int ok = back && same_msg(m, back);
                if (!ok)
                    print_error("kind %d type %s data %zu: %s\n", kind, types[t], d,
                                back ? "differs" : err.text);
                br_msg_destroy(&back);
                br_msg_destroy(&m);
                free(w.body);
                if (!ok) {
                    free(big);
                    fail();
                }
            }
        }
    }
    free(big);
}

static void test_header_layout(void **state)
{
    br_msg_t *m = br_msg_new(BR_MSG_RESPONSE, "job.show", 0x0a0b0c0d);
    assert_non_null(m);
    unsigned char h[BR_MSG_HEADER_MIN + BR_MSG_TYPE_MAX];
    size_t n = br_msg_encode_header(m, h);
    static const unsigned char want[] = "BR\x01\x02\x0a\x0b\x0c\x0d\x00\x08job.show";
    assert_int_equal(n, sizeof(want) - 1);
    assert_memory_equal(h, want, n);
    assert_int_equal(br_msg_set_data(m, "x", 1), 0);
    br_msg_encode_header(m, h);
    assert_int_equal(h[8], 1);
    br_msg_destroy(&m);
    br_msg_destroy(&m); /* NULL after destroy: harmless */
    br_msg_destroy(NULL);
}

static void test_new_and_accessors(void **state)
{
    static const struct {
        int kind;
        const char *type;
    } bad[] = {{0, "ping"},       {4, "ping"}, {-1, "ping"},
               {1, NULL},         {1, ""},     {1, "Ping"},
               {1, "a/b"},        {1, "a b"},  {1, "abcdefghijklmnopqrstuvwxyz0123456"},
               {1, "caf\xc3\xa9"}};
    for (size_t i = 0; i < NELEM(bad); i++) {
        errno = 0;
        br_msg_t *m = br_msg_new((br_msg_kind_t)bad[i].kind, bad[i].type, 1);
        if (m) {
            br_msg_destroy(&m);
            fail_msg("br_msg_new(%d, %s) accepted", bad[i].kind,
                     bad[i].type ? bad[i].type : "NULL");
        }
        assert_int_equal(errno, EINVAL);
    }
    br_msg_t *m = br_msg_new(BR_MSG_EVENT, "job.log", 9);
    assert_non_null(m);
    assert_int_equal(br_msg_kind(m), BR_MSG_EVENT);
    assert_string_equal(br_msg_type(m), "job.log");
    assert_int_equal(br_msg_seq(m), 9);
    assert_true(json_is_object(br_msg_body(m)));
    assert_int_equal(json_object_size(br_msg_body(m)), 0);
    assert_string_equal(br_msg_user(m), "");
    assert_string_equal(br_msg_peer_addr(m), "");
    size_t len = 99;
    assert_null(br_msg_data(m, &len));
    assert_int_equal(len, 0);
    br_msg_route(m, &len);
    assert_int_equal(len, 0);
    /* set_body(NULL) leaves an empty object */
    br_msg_set_body(m, json_pack("{s:i}", "a", 1));
    br_msg_set_body(m, NULL);
    assert_true(json_is_object(br_msg_body(m)));
    assert_int_equal(json_object_size(br_msg_body(m)), 0);
    /* data is copied, replaced, bounded */
    char buf[4] = "abc";
    assert_int_equal(br_msg_set_data(m, buf, 3), 0);
    buf[0] = 'z';
    const char *d = br_msg_data(m, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(d, "abc", 3);
    assert_int_equal(br_msg_set_data(m, "xy", 2), 0);
    d = br_msg_data(m, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(d, "xy", 2);
    errno = 0;
    assert_int_equal(br_msg_set_data(m, buf, (size_t)BR_MSG_DATA_MAX + 1), -1);
    assert_int_equal(errno, EMSGSIZE);
    d = br_msg_data(m, &len); /* unchanged after a refusal */
    assert_int_equal(len, 2);
    /* routes are copied and bounded */
    unsigned char route[BR_MSG_ROUTE_MAX + 1];
    memset(route, 7, sizeof(route));
    assert_int_equal(br_msg_set_route(m, route, BR_MSG_ROUTE_MAX), 0);
    assert_memory_equal(br_msg_route(m, &len), route, BR_MSG_ROUTE_MAX);
    assert_int_equal(len, BR_MSG_ROUTE_MAX);
    errno = 0;
    assert_int_equal(br_msg_set_route(m, route, sizeof(route)), -1);
    assert_int_equal(errno, EMSGSIZE);
    br_msg_destroy(&m);
}

/* ---- malformed input ---- */

#define H(s) (const unsigned char *)(s), sizeof(s) - 1
#define PING_HDR "BR\x01\x01\x00\x00\x00\x01\x00\x04ping"
#define PING_HDR_DATA "BR\x01\x01\x00\x00\x00\x01\x01\x04ping"
#define T33 "abcdefghijklmnopqrstuvwxyz0123456"
/* split: "\x03a/b" would read as the one escape \x03a */
#define SLASH_HDR                        \
    "BR\x01\x01\x00\x00\x00\x01\x00\x03" \
    "a/b"

enum { BODY_TEXT, BODY_TOO_BIG };
enum { NO_DATA, DATA, DATA_TOO_BIG };

typedef struct {
    const char *name;
    const unsigned char *hdr;
    size_t hlen;
    const char *body; /* NULL: "{}" */
    size_t blen;      /* 0: strlen(body) */
    int body_kind;
    int data;
    int errnum;
    const char *needle;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"bad magic", H("XR\x01\x01\x00\x00\x00\x01\x00\x04ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "not a bramble message"},
    {"lower-case magic", H("br\x01\x01\x00\x00\x00\x01\x00\x04ping"), NULL, 0,
     BODY_TEXT, NO_DATA, EPROTO, "not a bramble message"},
    {"empty header", (const unsigned char *)"", 0, NULL, 0, BODY_TEXT, NO_DATA, EPROTO,
     "bad header"},
    {"9-byte header", H("BR\x01\x01\x00\x00\x00\x01\x00"), NULL, 0, BODY_TEXT, NO_DATA,
     EPROTO, "bad header"},
    {"version 2", H("BR\x02\x01\x00\x00\x00\x01\x00\x04ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "protocol version 2 not supported"},
    {"version 0", H("BR\x00\x01\x00\x00\x00\x01\x00\x04ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "protocol version 0 not supported"},
    {"kind 0", H("BR\x01\x00\x00\x00\x00\x01\x00\x04ping"), NULL, 0, BODY_TEXT, NO_DATA,
     EPROTO, "bad message kind 0"},
    {"kind 4", H("BR\x01\x04\x00\x00\x00\x01\x00\x04ping"), NULL, 0, BODY_TEXT, NO_DATA,
     EPROTO, "bad message kind 4"},
    {"kind 255", H("BR\x01\xff\x00\x00\x00\x01\x00\x04ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "bad message kind 255"},
    {"flag bit 1", H("BR\x01\x01\x00\x00\x00\x01\x02\x04ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "unknown header flags 0x02"},
    {"flag bit 7", H("BR\x01\x01\x00\x00\x00\x01\x80\x04ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "unknown header flags 0x80"},
    {"flags data and more", H("BR\x01\x01\x00\x00\x00\x01\x03\x04ping"), NULL, 0,
     BODY_TEXT, DATA, EPROTO, "unknown header flags 0x03"},
    {"type length too long", H("BR\x01\x01\x00\x00\x00\x01\x00\x05ping"), NULL, 0,
     BODY_TEXT, NO_DATA, EPROTO, "bad message type"},
    {"type length too short", H("BR\x01\x01\x00\x00\x00\x01\x00\x03ping"), NULL, 0,
     BODY_TEXT, NO_DATA, EPROTO, "bad message type"},
    {"type upper case", H("BR\x01\x01\x00\x00\x00\x01\x00\x04Ping"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "bad message type"},
    {"type with slash", H(SLASH_HDR), NULL, 0, BODY_TEXT, NO_DATA, EPROTO,
     "bad message type"},
    {"type with NUL", H("BR\x01\x01\x00\x00\x00\x01\x00\x04pi\x00g"), NULL, 0,
     BODY_TEXT, NO_DATA, EPROTO, "bad message type"},
    {"type with space", H("BR\x01\x01\x00\x00\x00\x01\x00\x04pi g"), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "bad message type"},
    {"type high byte", H("BR\x01\x01\x00\x00\x00\x01\x00\x04pi\xc3\xa9"), NULL, 0,
     BODY_TEXT, NO_DATA, EPROTO, "bad message type"},
    {"empty type", H("BR\x01\x01\x00\x00\x00\x01\x00\x00"), NULL, 0, BODY_TEXT, NO_DATA,
     EPROTO, "bad message type"},
    {"33-char type", H("BR\x01\x01\x00\x00\x00\x01\x00\x21" T33), NULL, 0, BODY_TEXT,
     NO_DATA, EPROTO, "bad message type"},
    {"body not JSON", H(PING_HDR), "{", 0, BODY_TEXT, NO_DATA, EPROTO,
     "ping: body is not valid JSON"},
    {"body empty", H(PING_HDR), "", 0, BODY_TEXT, NO_DATA, EPROTO,
     "body is not valid JSON"},
    {"body trailing garbage", H(PING_HDR), "{} x", 0, BODY_TEXT, NO_DATA, EPROTO,
     "body is not valid JSON"},
    {"body with NUL", H(PING_HDR), "{}\0", 3, BODY_TEXT, NO_DATA, EPROTO,
     "body is not valid JSON"},
    {"body bad UTF-8", H(PING_HDR), "{\"a\":\"\xff\"}", 0, BODY_TEXT, NO_DATA, EPROTO,
     "body is not valid JSON"},
    {"body a string", H(PING_HDR), "\"s\"", 0, BODY_TEXT, NO_DATA, EPROTO,
     "ping: body"},
    {"body a number", H(PING_HDR), "3", 0, BODY_TEXT, NO_DATA, EPROTO, "ping: body"},
    {"body a JSON array", H(PING_HDR), "[1, 2]", 0, BODY_TEXT, NO_DATA, EPROTO,
     "ping: body is not a JSON object"},
    {"duplicate keys", H(PING_HDR), "{\"a\": 1, \"a\": 2}", 0, BODY_TEXT, NO_DATA,
     EPROTO, "duplicate"},
    {"body too big", H(PING_HDR), NULL, 0, BODY_TOO_BIG, NO_DATA, EMSGSIZE, "exceeds"},
    {"data without flag", H(PING_HDR), NULL, 0, BODY_TEXT, DATA, EPROTO,
     "ping: data frame not announced"},
    {"flag without data", H(PING_HDR_DATA), NULL, 0, BODY_TEXT, NO_DATA, EPROTO,
     "ping: data frame missing"},
    {"data too big", H(PING_HDR_DATA), NULL, 0, BODY_TEXT, DATA_TOO_BIG, EMSGSIZE,
     "exceeds"},
};

/* A body of exactly len bytes: {"a":"xxx..."}. */
static char *body_of_len(size_t len)
{
    char *b = malloc(len + 1);
    assert_non_null(b);
    memset(b, 'x', len);
    memcpy(b, "{\"a\":\"", 6);
    memcpy(b + len - 2, "\"}", 2);
    b[len] = '\0';
    return b;
}

static void run_bad_case(void **state)
{
    const bad_case_t *c = *state;
    char *big = NULL, *data = NULL;
    const char *body = c->body ? c->body : "{}";
    size_t blen = c->blen ? c->blen : strlen(body);
    if (c->body_kind == BODY_TOO_BIG) {
        big = body_of_len((size_t)BR_MSG_BODY_MAX + 1);
        body = big;
        blen = (size_t)BR_MSG_BODY_MAX + 1;
    }
    size_t dlen = 0;
    if (c->data == DATA) {
        data = strdup("data");
        dlen = 4;
    } else if (c->data == DATA_TOO_BIG) {
        dlen = (size_t)BR_MSG_DATA_MAX + 1;
        data = calloc(1, dlen);
    }
    br_err_t err = {0};
    errno = 0;
    br_msg_t *m = br_msg_decode(c->hdr, c->hlen, body, blen, data, dlen, &err);
    int e = errno;
    free(big);
    free(data);
    if (m) {
        br_msg_destroy(&m);
        fail_msg("accepted");
    }
    assert_int_equal(err.errnum, c->errnum);
    assert_int_equal(e, c->errnum);
    if (!strstr(err.text, c->needle))
        fail_msg("error '%s' lacks '%s'", err.text, c->needle);
}

static void test_largest_body(void **state)
{
    char *body = body_of_len(BR_MSG_BODY_MAX);
    br_err_t err = {0};
    br_msg_t *m = br_msg_decode(H(PING_HDR), body, BR_MSG_BODY_MAX, NULL, 0, &err);
    free(body);
    if (!m)
        fail_msg("refused: %s", err.text);
    assert_int_equal(json_string_length(json_object_get(br_msg_body(m), "a")),
                     BR_MSG_BODY_MAX - 8);
    br_msg_destroy(&m);
    /* err may be NULL */
    assert_null(br_msg_decode(H(PING_HDR), "[", 1, NULL, 0, NULL));
}

/* ---- replies ---- */

/* A refusal whose words were cut at the limit inside a character, or that hold
 * bytes that are not UTF-8, is still a refusal with its words: it never reads as
 * a success. An answer with an errnum alone is a refusal too. */
static void test_reply_error_cut_inside_a_character(void **state)
{
    (void)state;
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, "node.drain", 9);
    char name[2 * BR_ERR_TEXT] = "x";
    for (int i = 0; i < BR_ERR_TEXT / 2 - 5; i++)
        strcat(name, "\xc3\xa9"); /* é */
    br_err_t err;
    br_errf(&err, ENOENT, "no node named '%s'", name);
    assert_true(strlen(err.text) < BR_ERR_TEXT);
    json_t *s = json_string(err.text);
    assert_non_null(s); /* br_errf cut where a character ends */
    json_decref(s);
    br_msg_t *r = br_msg_reply_error(req, ENOENT, "no node named '%s'", name);
    assert_non_null(json_object_get(br_msg_body(r), "error"));
    br_err_t got = {0};
    assert_int_equal(br_msg_check(r, &got), -1);
    assert_int_equal(got.errnum, ENOENT);
    assert_non_null(strstr(got.text, "no node named 'x\xc3\xa9"));
    br_msg_destroy(&r);
    r = br_msg_reply_error(req, EINVAL, "bad \xff byte");
    assert_int_equal(br_msg_check(r, &got), -1);
    assert_string_equal(got.text, "bad ? byte");
    br_msg_destroy(&r);
    r = br_msg_reply(req);
    br_msg_set_body(r, json_pack("{s:i}", "errnum", EPERM));
    assert_int_equal(br_msg_check(r, &got), -1);
    assert_int_equal(got.errnum, EPERM);
    br_msg_destroy(&r);
    br_msg_destroy(&req);
}

static void test_reply(void **state)
{
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, "job.show", 77);
    assert_non_null(req);
    br_msg_set_body(req, json_pack("{s:i}", "id", 1));
    assert_int_equal(br_msg_set_route(req, "\0abc", 4), 0);
    br_msg_t *r = br_msg_reply(req);
    assert_non_null(r);
    assert_int_equal(br_msg_kind(r), BR_MSG_RESPONSE);
    assert_string_equal(br_msg_type(r), "job.show");
    assert_int_equal(br_msg_seq(r), 77);
    size_t len;
    const void *route = br_msg_route(r, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(route, "\0abc", 4);
    assert_int_equal(json_object_size(br_msg_body(r)), 0);
    br_err_t err = {0};
    assert_int_equal(br_msg_check(r, &err), 0);
    br_msg_destroy(&r);

    r = br_msg_reply_error(req, ENOENT, "no job %d", 5);
    assert_non_null(r);
    assert_int_equal(br_msg_kind(r), BR_MSG_RESPONSE);
    assert_int_equal(br_msg_seq(r), 77);
    route = br_msg_route(r, &len);
    assert_int_equal(len, 4);
    json_t *want = json_pack("{s:i, s:s}", "errnum", ENOENT, "error", "no job 5");
    int same = json_equal(br_msg_body(r), want);
    json_decref(want);
    assert_true(same);
    errno = 0;
    assert_int_equal(br_msg_check(r, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(err.text, "no job 5");
    br_msg_destroy(&r);

    /* errnum 0 becomes EINVAL; long texts are cut, not overrun */
    char lng[2 * BR_ERR_TEXT];
    memset(lng, 'w', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    r = br_msg_reply_error(req, 0, "%s", lng);
    assert_int_equal(br_msg_check(r, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(strlen(err.text), BR_ERR_TEXT - 1);
    br_msg_destroy(&r);
    br_msg_destroy(&req);
}

static void test_check(void **state)
{
    static const struct {
        const char *body;
        int rc, errnum;
        const char *text;
    } cases[] = {
        {"{}", 0, 0, NULL},
        {"{\"id\": 3}", 0, 0, NULL},
        {"{\"errnum\": 13}", -1, EACCES, "request failed"}, /* no "error": still refused */
        {"{\"errnum\": 0}", 0, 0, NULL},
        {"{\"errnum\": 13, \"error\": \"not allowed\"}", -1, EACCES, "not allowed"},
        {"{\"error\": \"x\"}", -1, EPROTO, "x"},
        {"{\"errnum\": 0, \"error\": \"x\"}", -1, EPROTO, "x"},
        {"{\"errnum\": -5, \"error\": \"x\"}", -1, EPROTO, "x"},
        {"{\"errnum\": \"13\", \"error\": \"x\"}", -1, EPROTO, "x"},
        {"{\"errnum\": 2, \"error\": 5}", -1, ENOENT, "request failed"},
        {"{\"errnum\": 2, \"error\": null}", -1, ENOENT, "request failed"},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        br_msg_t *m = br_msg_new(BR_MSG_RESPONSE, "x", 1);
        br_msg_set_body(m, json_loads(cases[i].body, 0, NULL));
        br_err_t err = {0};
        int rc = br_msg_check(m, &err);
        br_msg_destroy(&m);
        if (rc != cases[i].rc)
            fail_msg("%s: rc %d", cases[i].body, rc);
        if (rc == 0)
            continue;
        assert_int_equal(err.errnum, cases[i].errnum);
        assert_string_equal(err.text, cases[i].text);
    }
}

/* ---- strict body access ---- */

static br_msg_t *with_body(const char *type, const char *json)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, 1);
    assert_non_null(m);
    json_t *b = json_loads(json, 0, NULL);
    assert_non_null(b);
    br_msg_set_body(m, b);
    return m;
}

static void test_unpack(void **state)
{
    br_msg_t *m = with_body("job.show", "{\"id\": 5, \"name\": \"x\", \"all\": true}");
    int id = 0, all = 0;
    const char *name = NULL;
    br_err_t err = {0};
    assert_int_equal(br_msg_unpack(m, &err, "{s:i, s:s, s:b}", "id", &id, "name", &name,
                                   "all", &all),
                     0);
    assert_int_equal(id, 5);
    assert_string_equal(name, "x");
    assert_true(all);
    /* optional keys may be absent */
    int rank = -1;
    assert_int_equal(br_msg_unpack(m, &err, "{s:i, s:s, s:b, s?i}", "id", &id, "name",
                                   &name, "all", &all, "rank", &rank),
                     0);
    assert_int_equal(rank, -1);
    /* an unknown key is refused, by name */
    memset(&err, 0, sizeof(err));
    errno = 0;
    assert_int_equal(br_msg_unpack(m, &err, "{s:i, s:s}", "id", &id, "name", &name),
                     -1);
    assert_int_equal(err.errnum, EPROTO);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(strncmp(err.text, "job.show: bad body: ", 20), 0);
    assert_non_null(strstr(err.text, "all"));
    /* a missing key is refused, by name */
    assert_int_equal(br_msg_unpack(m, &err, "{s:i, s:s, s:b, s:i}", "id", &id, "name",
                                   &name, "all", &all, "rank", &rank),
                     -1);
    assert_non_null(strstr(err.text, "rank"));
    br_msg_destroy(&m);
    /* a wrong type is refused */
    static const struct {
        const char *body, *fmt;
    } wrong[] = {
        {"{\"id\": \"5\"}", "{s:i}"}, {"{\"id\": 5.5}", "{s:i}"},
        {"{\"id\": null}", "{s:i}"},  {"{\"id\": [5]}", "{s:i}"},
        {"{\"id\": 5}", "{s:s}"},     {"{\"id\": 1}", "{s:b}"},
        {"{\"id\": {}}", "{s:s}"},    {"{\"id\": \"x\"}", "{s:o}"},
    };
    for (size_t i = 0; i < NELEM(wrong); i++) {
        m = with_body("job.show", wrong[i].body);
        json_int_t big;
        const char *s;
        int b;
        json_t *o;
        memset(&err, 0, sizeof(err));
        int rc;
        switch (wrong[i].fmt[3]) {
        case 'i':
            rc = br_msg_unpack(m, &err, "{s:I}", "id", &big);
            break;
        case 's':
            rc = br_msg_unpack(m, &err, "{s:s}", "id", &s);
            break;
        case 'b':
            rc = br_msg_unpack(m, &err, "{s:b}", "id", &b);
            break;
        default: /* "o" accepts anything: a body with an extra key instead */
            rc = br_msg_unpack(m, &err, "{s:o, s:o}", "id", &o, "name", &o);
            break;
        }
        br_msg_destroy(&m);
        if (rc != -1)
            fail_msg("%s with %s accepted", wrong[i].body, wrong[i].fmt);
        assert_int_equal(err.errnum, EPROTO);
        assert_int_equal(strncmp(err.text, "job.show: bad body: ", 20), 0);
    }
}

/* PROTOCOL.md: "a field of the wrong type, is an error naming it". */
static void test_unpack_wrong_type_names_field(void **state)
{
    br_msg_t *m = with_body("job.show", "{\"id\": \"5\", \"after\": 3}");
    int id, after;
    br_err_t err = {0};
    int rc = br_msg_unpack(m, &err, "{s:i, s:i}", "after", &after, "id", &id);
    br_msg_destroy(&m);
    assert_int_equal(rc, -1);
    if (!strstr(err.text, "id"))
        fail_msg("error '%s' does not name the field 'id'", err.text);
}

/* ---- send and receive over inproc sockets (no CURVE) ---- */

typedef struct {
    void *ctx, *a, *b; /* a PAIR pair, or ROUTER a + DEALER b */
} pair_t;

static void pair_open(pair_t *p, int router)
{
    static int n;
    char ep[64];
    snprintf(ep, sizeof(ep), "inproc://test-msg-%d", n++);
    p->ctx = zmq_ctx_new();
    assert_non_null(p->ctx);
    p->a = zmq_socket(p->ctx, router ? ZMQ_ROUTER : ZMQ_PAIR);
    p->b = zmq_socket(p->ctx, router ? ZMQ_DEALER : ZMQ_PAIR);
    assert_non_null(p->a);
    assert_non_null(p->b);
    if (router) {
        int one = 1;
        zmq_setsockopt(p->a, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
        zmq_setsockopt(p->b, ZMQ_ROUTING_ID, "peer-b", 6);
    }
    assert_int_equal(zmq_bind(p->a, ep), 0);
    assert_int_equal(zmq_connect(p->b, ep), 0);
}

static void pair_close(pair_t *p)
{
    br_sock_close(&p->a);
    br_sock_close(&p->b);
    zmq_ctx_term(p->ctx);
}

/* Wait up to WAIT_MS for sock to have input. */
static int readable(void *sock)
{
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    return zmq_poll(&it, 1, WAIT_MS) == 1;
}

typedef struct {
    const void *p;
    size_t len;
} frame_t;
#define F(s)               \
    {                      \
        (s), sizeof(s) - 1 \
    }

/* Send n frames as one message. */
static void send_raw(void *sock, int n, const frame_t *frames)
{
    for (int i = 0; i < n; i++)
        assert_true(zmq_send(sock, frames[i].p, frames[i].len,
                             i + 1 < n ? ZMQ_SNDMORE : 0) >= 0);
}

static void test_send_recv(void **state)
{
    pair_t p;
    pair_open(&p, 0);
    br_msg_t *out = (br_msg_t *)1;
    br_err_t err = {0};
    /* nothing waiting */
    assert_int_equal(br_msg_recv(p.b, 0, ZMQ_DONTWAIT, &out, &err), -1);
    assert_int_equal(err.errnum, EAGAIN);
    assert_int_equal(errno, EAGAIN);
    assert_null(out);
    for (int with_data = 0; with_data < 2; with_data++) {
        br_msg_t *m = br_msg_new(BR_MSG_EVENT, "job.log", 42);
        br_msg_set_body(m, json_pack("{s:i, s:s}", "job", 3, "stream", "out"));
        if (with_data)
            br_msg_set_data(m, "line 1\nline 2\n\0", 15);
        assert_int_equal(br_msg_send(p.a, m, &err), 0);
        assert_true(readable(p.b));
        assert_int_equal(br_msg_recv(p.b, 0, 0, &out, &err), 0);
        int same = same_msg(m, out);
        size_t rlen;
        br_msg_route(out, &rlen);
        br_msg_destroy(&m);
        br_msg_destroy(&out);
        assert_true(same);
        assert_int_equal(rlen, 0);
    }
    pair_close(&p);
}

static void test_recv_bad_frames(void **state)
{
    static const frame_t frames[] = {F(PING_HDR), F("{}"), F("x"), F("y"),
                                     F("z"),      F("w"),  F("v")};
    static const frame_t garbage[] = {F("garbage"), F("{}")};
    static const struct {
        const frame_t *frames;
        int n;
        const char *needle;
    } cases[] = {
        {frames, 1, "1 frames"},    {frames, 4, "4 frames"},
        {frames, 5, "5 frames"},    {frames, 7, "7 frames"},
        {garbage, 2, "bad header"}, {frames, 3, "not announced"},
    };
    pair_t p;
    pair_open(&p, 0);
    for (size_t i = 0; i < NELEM(cases); i++) {
        send_raw(p.a, cases[i].n, cases[i].frames);
        assert_true(readable(p.b));
        br_msg_t *out = (br_msg_t *)1;
        br_err_t err = {0};
        errno = 0;
        assert_int_equal(br_msg_recv(p.b, 0, 0, &out, &err), -1);
        assert_int_equal(errno, EPROTO);
        assert_int_equal(err.errnum, EPROTO);
        assert_null(out); /* not a ROUTER: no stub */
        if (!strstr(err.text, cases[i].needle))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.text, cases[i].needle);
        /* the whole bad message was consumed: a good one comes through next */
        send_raw(p.a, 2, frames);
        assert_true(readable(p.b));
        assert_int_equal(br_msg_recv(p.b, 0, 0, &out, &err), 0);
        assert_string_equal(br_msg_type(out), "ping");
        br_msg_destroy(&out);
    }
    pair_close(&p);
}

static void test_router_stub_and_reply(void **state)
{
    pair_t p;
    pair_open(&p, 1);
    br_err_t err = {0};
    br_msg_t *out = NULL;
    /* a good request: the route is the peer's routing id, the reply goes back */
    static const frame_t ping[] = {F(PING_HDR), F("{\"x\": 1}")};
    send_raw(p.b, 2, ping);
    assert_true(readable(p.a));
    assert_int_equal(br_msg_recv(p.a, 1, 0, &out, &err), 0);
    size_t len;
    const void *route = br_msg_route(out, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(route, "peer-b", 6);
    br_msg_t *r = br_msg_reply(out);
    json_object_set_new(br_msg_body(r), "ok", json_true());
    br_msg_destroy(&out);
    assert_int_equal(br_msg_send(p.a, r, &err), 0);
    br_msg_destroy(&r);
    assert_true(readable(p.b));
    assert_int_equal(br_msg_recv(p.b, 0, 0, &out, &err), 0);
    assert_int_equal(br_msg_kind(out), BR_MSG_RESPONSE);
    assert_int_equal(br_msg_seq(out), 1);
    assert_true(json_is_true(json_object_get(br_msg_body(out), "ok")));
    br_msg_destroy(&out);
    /* garbage: -1, but a stub with the route so the error can be answered */
    static const frame_t garbage[] = {F("xx"), F("yy")};
    send_raw(p.b, 2, garbage);
    assert_true(readable(p.a));
    errno = 0;
    assert_int_equal(br_msg_recv(p.a, 1, 0, &out, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(out);
    route = br_msg_route(out, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(route, "peer-b", 6);
    r = br_msg_reply_error(out, EPROTO, "%s", err.text);
    br_msg_destroy(&out);
    assert_int_equal(br_msg_send(p.a, r, &err), 0);
    br_msg_destroy(&r);
    assert_true(readable(p.b));
    assert_int_equal(br_msg_recv(p.b, 0, 0, &out, &err), 0);
    assert_int_equal(br_msg_check(out, &err), -1);
    assert_int_equal(err.errnum, EPROTO);
    assert_non_null(strstr(err.text, "bad header"));
    br_msg_destroy(&out);
    /* a route nobody has: the send fails and says so */
    r = br_msg_new(BR_MSG_EVENT, "job.kill", 1);
    br_msg_set_route(r, "nobody", 6);
    assert_int_equal(br_msg_send(p.a, r, &err), -1);
    assert_int_equal(err.errnum, EHOSTUNREACH);
    assert_non_null(strstr(err.text, "job.kill"));
    br_msg_destroy(&r);
    pair_close(&p);
}

static void test_send_body_too_big(void **state)
{
    pair_t p;
    pair_open(&p, 0);
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.submit", 1);
    char *s = malloc(BR_MSG_BODY_MAX + 1);
    assert_non_null(s);
    memset(s, 'y', BR_MSG_BODY_MAX);
    s[BR_MSG_BODY_MAX] = '\0';
    json_object_set_new(br_msg_body(m), "spec", json_string(s));
    free(s);
    br_err_t err = {0};
    assert_int_equal(br_msg_send(p.a, m, &err), -1);
    assert_int_equal(err.errnum, EMSGSIZE);
    br_msg_destroy(&m);
    /* nothing half-sent */
    br_msg_t *out = NULL;
    assert_int_equal(br_msg_recv(p.b, 0, ZMQ_DONTWAIT, &out, &err), -1);
    assert_int_equal(err.errnum, EAGAIN);
    pair_close(&p);
}

/* ---- a real CURVE ROUTER with ZAP, over TCP, served by a thread ---- */

typedef struct {
    void *ctx, *router;
    br_zap_t *zap;
    thrd_t thread;
    int running;
    atomic_int stop;
    char endpoint[256];
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
    char refused[BR_KEY_LEN + 1], refused_sec[BR_KEY_LEN + 1];
    /* written by the server thread, read after it stopped */
    int zap_checks, zap_refusals, requests;
    int bad, bad_rc, bad_errno, bad_errnum, bad_route_len, bad_kind;
    char bad_text[BR_ERR_TEXT], bad_user[64], bad_peer[64];
} server_t;

static int check_key(void *arg, const char *key)
{
    server_t *s = arg;
    s->zap_checks++;
    if (strlen(key) != BR_KEY_LEN || strcmp(key, s->refused) == 0) {
        s->zap_refusals++;
        return -1;
    }
    return 0;
}

static void serve_router(void *arg)
{
    server_t *s = arg;
    for (;;) {
        br_msg_t *m = NULL;
        br_err_t err = {0};
        int rc = br_msg_recv(s->router, 1, ZMQ_DONTWAIT, &m, &err);
        int e = errno;
        if (rc < 0 && !m && err.errnum == EAGAIN)
            return;
        br_msg_t *r;
        if (rc < 0) {
            s->bad++;
            s->bad_rc = rc;
            s->bad_errno = e;
            s->bad_errnum = err.errnum;
            br_strlcpy(s->bad_text, err.text, sizeof(s->bad_text));
            if (!m)
                continue;
            size_t len;
            br_msg_route(m, &len);
            s->bad_route_len = (int)len;
            s->bad_kind = br_msg_kind(m);
            br_strlcpy(s->bad_user, br_msg_user(m), sizeof(s->bad_user));
            br_strlcpy(s->bad_peer, br_msg_peer_addr(m), sizeof(s->bad_peer));
            r = br_msg_reply_error(m, EPROTO, "%s", err.text);
        } else if (strcmp(br_msg_type(m), "ping") == 0) {
            s->requests++;
            r = br_msg_reply(m);
            json_object_set_new(br_msg_body(r), "user", json_string(br_msg_user(m)));
            json_object_set_new(br_msg_body(r), "peer",
                                json_string(br_msg_peer_addr(m)));
            json_object_set_new(br_msg_body(r), "body", json_incref(br_msg_body(m)));
        } else {
            s->requests++;
            r = br_msg_reply_error(m, EINVAL, "unknown request '%s'", br_msg_type(m));
        }
        br_msg_destroy(&m);
        if (r)
            br_msg_send(s->router, r, NULL);
        br_msg_destroy(&r);
    }
}

static int server_main(void *arg)
{
    server_t *s = arg;
    curve_server_loop(s->zap, s->router, &s->stop, serve_router, s);
    return 0;
}

static void server_stop(server_t *s)
{
    if (s->running) {
        atomic_store(&s->stop, 1);
        thrd_join(s->thread, NULL);
        s->running = 0;
    }
}

static int server_setup(void **state)
{
    server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    br_err_t err = {0};
    s->ctx = zmq_ctx_new();
    if (!s->ctx || br_keypair(s->pub, s->sec, &err) < 0 ||
        br_keypair(s->refused, s->refused_sec, &err) < 0)
        goto fail;
    s->zap = br_zap_new(s->ctx, check_key, s, &err);
    if (!s->zap)
        goto fail;
    s->router = br_sock_server(s->ctx, "tcp://127.0.0.1:*", s->sec, &err);
    if (!s->router)
        goto fail;
    size_t len = sizeof(s->endpoint);
    if (zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, s->endpoint, &len) < 0)
        goto fail;
    atomic_init(&s->stop, 0);
    if (thrd_create(&s->thread, server_main, s) != thrd_success)
        goto fail;
    s->running = 1;
    *state = s;
    return 0;
fail:
    print_error("server setup: %s\n", err.text);
    br_sock_close(&s->router);
    br_zap_destroy(&s->zap);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    free(s);
    return -1;
}

static int server_teardown(void **state)
{
    server_t *s = *state;
    server_stop(s);
    br_sock_close(&s->router);
    br_zap_destroy(&s->zap);
    zmq_ctx_term(s->ctx);
    free(s);
    return 0;
}

/* A client with a fresh key pair; its public key in pub. */
static br_client_t *new_client(server_t *s, char *pub)
{
    char sec[BR_KEY_LEN + 1];
    assert_int_equal(br_keypair(pub, sec, NULL), 0);
    br_err_t err = {0};
    br_client_t *c = br_client_new(s->endpoint, s->pub, pub, sec, &err);
    if (!c)
        fail_msg("client: %s", err.text);
    return c;
}

/* Ping through c; 1 when the server saw user pub from 127.0.0.1. */
static int ping_ok(br_client_t *c, const char *pub)
{
    br_msg_t *resp = NULL;
    br_err_t err = {0};
    if (br_client_rpc(c, "ping", json_pack("{s:s}", "hello", "there"), WAIT_MS, &resp,
                      &err) != 0) {
        print_error("ping: %s\n", err.text);
        return 0;
    }
    json_t *b = br_msg_body(resp);
    const char *user = json_string_value(json_object_get(b, "user"));
    const char *peer = json_string_value(json_object_get(b, "peer"));
    json_t *echo = json_pack("{s:s}", "hello", "there");
    int ok = br_msg_kind(resp) == BR_MSG_RESPONSE &&
             strcmp(br_msg_type(resp), "ping") == 0 && user && strcmp(user, pub) == 0 &&
             peer && strcmp(peer, "127.0.0.1") == 0 &&
             json_equal(json_object_get(b, "body"), echo);
    if (!ok)
        print_error("ping answered user '%s' peer '%s' (want '%s', 127.0.0.1)\n",
                    user ? user : "(none)", peer ? peer : "(none)", pub);
    json_decref(echo);
    br_msg_destroy(&resp);
    return ok;
}

static void test_zmq_ping(void **state)
{
    server_t *s = *state;
    assert_int_equal(strncmp(s->endpoint, "tcp://127.0.0.1:", 16), 0);
    char pub1[BR_KEY_LEN + 1], pub2[BR_KEY_LEN + 1];
    br_client_t *c1 = new_client(s, pub1);
    br_client_t *c2 = new_client(s, pub2);
    int ok1 = ping_ok(c1, pub1);
    int ok2 = ping_ok(c2, pub2);
    int ok3 = ping_ok(c1, pub1); /* same connection, again */
    /* an error response comes back as -1 with the server's errnum and text */
    br_err_t err = {0};
    int rc = br_client_rpc(c1, "job.list", NULL, WAIT_MS, NULL, &err);
    /* br_client_call hands back the body */
    br_err_t err2 = {0};
    json_t *body = br_client_call(c2, "ping", NULL, WAIT_MS, &err2);
    int call_ok = body && json_is_string(json_object_get(body, "user")) &&
                  strcmp(json_string_value(json_object_get(body, "user")), pub2) == 0;
    json_decref(body);
    br_client_destroy(&c1);
    br_client_destroy(&c2);
    br_client_destroy(&c2);
    assert_true(ok1);
    assert_true(ok2);
    assert_true(ok3);
    assert_int_equal(rc, -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_string_equal(err.text, "unknown request 'job.list'");
    assert_true(call_ok);
    server_stop(s);
    assert_int_equal(s->requests, 5);
    assert_int_equal(s->zap_refusals, 0);
    assert_true(s->zap_checks >= 2);
}

/* The n-th ping's answer through c (body "n": n), by seq; 1 when it is that one. */
static int ping_n_answered(br_client_t *c, uint32_t seq, int n)
{
    br_msg_t *resp = NULL;
    br_err_t err = {0};
    if (br_client_recv(c, seq, WAIT_MS, &resp, &err) != 0) {
        print_error("ping %d: %s\n", n, err.text);
        return 0;
    }
    json_t *body = json_object_get(br_msg_body(resp), "body");
    int ok = br_msg_seq(resp) == seq &&
             json_integer_value(json_object_get(body, "n")) == n;
    br_msg_destroy(&resp);
    return ok;
}

static void test_zmq_in_flight(void **state)
{
    server_t *s = *state;
    char pub[BR_KEY_LEN + 1];
    br_client_t *c = new_client(s, pub);
    br_err_t err = {0};
    uint32_t seq[BR_CLIENT_PENDING + 1];
    /* several requests in flight; their answers taken in another order */
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            br_client_send(c, "ping", json_pack("{s:i}", "n", i), &seq[i], &err), 0);
    int ok2 = ping_n_answered(c, seq[2], 2); /* 0 and 1 came first: kept */
    int ok0 = ping_n_answered(c, seq[0], 0);
    /* a plain request between them is answered as always */
    int ok_rpc = ping_ok(c, pub);
    int ok1 = ping_n_answered(c, seq[1], 1);
    /* an answer already taken is not there twice: a bounded wait, then ETIMEDOUT */
    br_err_t err2 = {0};
    int again = br_client_recv(c, seq[1], 200, NULL, &err2);
    /* at most BR_CLIENT_PENDING in flight; beyond, EBUSY and the body is freed */
    for (int i = 0; i < BR_CLIENT_PENDING; i++)
        assert_int_equal(br_client_send(c, "ping", json_pack("{s:i}", "n", i), &seq[i],
                                        &err), 0);
    br_err_t err3 = {0};
    int busy = br_client_send(c, "ping", json_pack("{s:i}", "n", 99),
                              &seq[BR_CLIENT_PENDING], &err3);
    int ok_last = ping_n_answered(c, seq[BR_CLIENT_PENDING - 1], BR_CLIENT_PENDING - 1);
    br_client_destroy(&c); /* frees the answers kept and never taken */
    assert_true(ok2);
    assert_true(ok0);
    assert_true(ok_rpc);
    assert_true(ok1);
    assert_int_equal(again, -1);
    assert_int_equal(err2.errnum, ETIMEDOUT);
    assert_int_equal(busy, -1);
    assert_int_equal(err3.errnum, EBUSY);
    assert_true(ok_last);
}

/* br_client_try: never waits; an answer not come yet leaves its request in flight,
 * one that came while another was tried is kept for its own try, a refusal is -1. */
static void test_zmq_try(void **state)
{
    server_t *s = *state;
    char pub[BR_KEY_LEN + 1];
    br_client_t *c = new_client(s, pub);
    br_err_t err = {0};
    uint32_t a, b, bad;
    assert_int_equal(br_client_send(c, "ping", json_pack("{s:i}", "n", 1), &a, &err), 0);
    assert_int_equal(br_client_send(c, "ping", json_pack("{s:i}", "n", 2), &b, &err), 0);
    assert_int_equal(br_client_send(c, "nope", NULL, &bad, &err), 0);
    br_msg_t *ra = NULL, *rb = NULL;
    int got_b = 0, got_a = 0, got_bad = 0;
    int64_t deadline = br_mono_ms() + WAIT_MS;
    while ((!got_a || !got_b || !got_bad) && br_mono_ms() < deadline) {
        zmq_pollitem_t it = {br_client_socket(c), 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 50);
        if (!got_b) /* (b's answer comes after a's: a's is kept meanwhile) */
            got_b = br_client_try(c, b, &rb, &err);
        if (got_b && !got_a)
            got_a = br_client_try(c, a, &ra, &err);
        if (got_a && !got_bad) {
            br_err_t e2 = {0};
            got_bad = br_client_try(c, bad, NULL, &e2) == -1 && e2.errnum == EINVAL;
        }
    }
    int na = (int)json_integer_value(json_object_get(json_object_get(br_msg_body(ra), "body"), "n"));
    int nb = (int)json_integer_value(json_object_get(json_object_get(br_msg_body(rb), "body"), "n"));
    br_msg_destroy(&ra);
    br_msg_destroy(&rb);
    /* taken: not there again, and nothing left in flight waits */
    br_err_t e3 = {0};
    int again = br_client_try(c, a, NULL, &e3);
    br_client_destroy(&c);
    assert_int_equal(got_b, 1);
    assert_int_equal(got_a, 1);
    assert_true(got_bad);
    assert_int_equal(na, 1);
    assert_int_equal(nb, 2);
    assert_int_equal(again, 0);
}

static void test_zmq_refused_key(void **state)
{
    server_t *s = *state;
    /* the key pair whose public key the server's check refuses */
    br_err_t err = {0};
    br_client_t *c =
        br_client_new(s->endpoint, s->pub, s->refused, s->refused_sec, &err);
    assert_non_null(c);
    int64_t t0 = br_mono_ms();
    int rc = br_client_rpc(c, "ping", NULL, WAIT_MS, NULL, &err);
    int64_t took = br_mono_ms() - t0;
    br_client_destroy(&c);
    assert_int_equal(rc, -1);
    if (err.errnum != EACCES || !strstr(err.text, "refused"))
        fail_msg("refused key: errnum %d '%s'", err.errnum, err.text);
    assert_true(took < WAIT_MS); /* told, not timed out */
    assert_non_null(strstr(err.text, s->endpoint));
    /* a good key still gets in */
    char pub2[BR_KEY_LEN + 1];
    br_client_t *c2 = new_client(s, pub2);
    int ok = ping_ok(c2, pub2);
    br_client_destroy(&c2);
    assert_true(ok);
    server_stop(s);
    assert_true(s->zap_refusals >= 1);
    assert_int_equal(s->requests, 1);
}

static void test_zmq_garbage(void **state)
{
    server_t *s = *state;
    /* a raw CURVE DEALER sends two frames of garbage */
    void *ctx = zmq_ctx_new();
    assert_non_null(ctx);
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
    assert_int_equal(br_keypair(pub, sec, NULL), 0);
    br_err_t err = {0};
    void *d = br_sock_client(ctx, s->endpoint, s->pub, pub, sec, &err);
    assert_non_null(d);
    assert_int_equal(zmq_send(d, "\x01garbage", 8, ZMQ_SNDMORE), 8);
    assert_int_equal(zmq_send(d, "more garbage", 12, 0), 12);
    /* the server answers with an error response on the stub's route */
    br_msg_t *resp = NULL;
    int got = readable(d) && br_msg_recv(d, 0, 0, &resp, &err) == 0;
    int check_rc = got ? br_msg_check(resp, &err) : 0;
    int kind = got ? (int)br_msg_kind(resp) : 0;
    br_msg_destroy(&resp);
    br_sock_close(&d);
    zmq_ctx_term(ctx);
    assert_true(got);
    assert_int_equal(kind, BR_MSG_RESPONSE);
    assert_int_equal(check_rc, -1);
    assert_int_equal(err.errnum, EPROTO);
    assert_non_null(strstr(err.text, "not a bramble message"));
    /* the next good client is served */
    char pub2[BR_KEY_LEN + 1];
    br_client_t *c = new_client(s, pub2);
    int ok = ping_ok(c, pub2);
    br_client_destroy(&c);
    assert_true(ok);
    server_stop(s);
    assert_int_equal(s->bad, 1);
    assert_int_equal(s->bad_rc, -1);
    assert_int_equal(s->bad_errno, EPROTO);
    assert_int_equal(s->bad_errnum, EPROTO);
    assert_true(s->bad_route_len > 0);
    assert_int_equal(s->bad_kind, BR_MSG_REQUEST); /* answered, with seq 0 */
    assert_non_null(strstr(s->bad_text, "not a bramble message"));
    assert_int_equal(s->requests, 1);
    /* the stub knows who sent it (the connection's metadata is known) */
    assert_string_equal(s->bad_user, pub);
    assert_string_equal(s->bad_peer, "127.0.0.1");
}

static void test_client_no_server(void **state)
{
    /* a port nobody listens on: a bounded wait, then ETIMEDOUT saying so */
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1], spub[BR_KEY_LEN + 1];
    assert_int_equal(br_keypair(pub, sec, NULL), 0);
    assert_int_equal(br_keypair(spub, sec, NULL), 0);
    br_err_t err = {0};
    br_client_t *c = br_client_new("tcp://127.0.0.1:1", spub, pub, sec, &err);
    assert_non_null(c);
    int64_t t0 = br_mono_ms();
    int rc = br_client_rpc(c, "ping", NULL, 300, NULL, &err);
    int64_t took = br_mono_ms() - t0;
    /* a bad request type is refused before anything is sent; the body is freed */
    br_err_t err2 = {0};
    int rc2 =
        br_client_rpc(c, "Bad/Type", json_pack("{s:i}", "a", 1), 300, NULL, &err2);
    br_client_destroy(&c);
    assert_int_equal(rc, -1);
    assert_int_equal(err.errnum, ETIMEDOUT);
    assert_string_equal(err.text,
                        "nothing answers at tcp://127.0.0.1:1 (is brambled running?)");
    assert_true(took >= 250 && took < 3000);
    assert_int_equal(rc2, -1);
    assert_int_equal(err2.errnum, EINVAL);
    assert_non_null(strstr(err2.text, "bad request type"));
    /* a malformed endpoint fails at once */
    c = br_client_new("nonsense", spub, pub, sec, &err);
    assert_null(c);
    assert_int_not_equal(err.errnum, 0);
}

/* A stream socket (a shell's or a forward's, the agent's to the relay) keeps its
 * connection checked by ZMTP heartbeats, open stream or not: an idle one is neither
 * left dead after its peer went nor dropped by a NAT that forgets quiet mappings. */
static void test_stream_client_heartbeats(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    br_err_t err = {0};
    void *s = br_sock_stream_client(ctx, "tcp://127.0.0.1:1", &err);
    assert_non_null(s);
    int mech = -1;
    size_t mlen = sizeof(mech);
    assert_int_equal(zmq_getsockopt(s, ZMQ_MECHANISM, &mech, &mlen), 0);
    assert_int_equal(mech, ZMQ_NULL); /* (the ends seal their frames: streamseal.h) */
    int v = 0;
    size_t len = sizeof(v);
    assert_int_equal(zmq_getsockopt(s, ZMQ_HEARTBEAT_IVL, &v, &len), 0);
    assert_int_equal(v, BR_SOCK_STREAM_HB_MS);
    len = sizeof(v);
    assert_int_equal(zmq_getsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &v, &len), 0);
    assert_int_equal(v, BR_SOCK_STREAM_HB_TIMEOUT_MS);
    br_sock_close(&s);
    zmq_ctx_term(ctx);
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_header_layout),
        cmocka_unit_test(test_new_and_accessors),
        cmocka_unit_test(test_largest_body),
        cmocka_unit_test(test_reply),
        cmocka_unit_test(test_reply_error_cut_inside_a_character),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_unpack),
        cmocka_unit_test(test_unpack_wrong_type_names_field),
        cmocka_unit_test(test_send_recv),
        cmocka_unit_test(test_recv_bad_frames),
        cmocka_unit_test(test_router_stub_and_reply),
        cmocka_unit_test(test_send_body_too_big),
        cmocka_unit_test_setup_teardown(test_zmq_ping, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_zmq_try, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_zmq_in_flight, server_setup,
                                        server_teardown),
        cmocka_unit_test_setup_teardown(test_zmq_refused_key, server_setup,
                                        server_teardown),
        cmocka_unit_test_setup_teardown(test_zmq_garbage, server_setup,
                                        server_teardown),
        cmocka_unit_test(test_client_no_server),
        cmocka_unit_test(test_stream_client_heartbeats),
    };
    size_t nfixed = NELEM(fixed), nbad = NELEM(bad_cases);
    struct CMUnitTest *tests = calloc(nfixed + nbad, sizeof(*tests));
    if (!tests)
        return 1;
    memcpy(tests, fixed, sizeof(fixed));
    for (size_t i = 0; i < nbad; i++)
        tests[nfixed + i] = (struct CMUnitTest){.name = bad_cases[i].name,
                                                .test_func = run_bad_case,
                                                .initial_state = (void *)&bad_cases[i]};
    int rc = _cmocka_run_group_tests("msg", tests, nfixed + nbad, NULL, NULL);
    free(tests);
    return rc;
}
