/* test_stream.c - a stream's frames and credit (proto/stream.c) and one end of a
 * stream over real pipes and a real ZeroMQ pair (proto/streamend.c). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include <cmocka.h>

#include "stream.h"
#include "streamend.h"
#include "streamseal.h"

#define KEY "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static void test_header_round_trip(void **state)
{
    (void)state;
    br_stream_hdr_t h = {BR_STREAM_CREDIT, 2, 0xdeadbeef, 0x0102030405060708ull, 0}, back;
    unsigned char buf[BR_STREAM_HEADER];
    br_err_t err;
    br_stream_hdr_encode(&h, buf);
    assert_int_equal(buf[0], BR_STREAM_VERSION);
    assert_int_equal(br_stream_hdr_decode(buf, sizeof(buf), &back, &err), 0);
    assert_int_equal(back.type, h.type);
    assert_int_equal(back.channel, 2);
    assert_int_equal(back.stream, 0xdeadbeef);
    assert_true(back.arg == h.arg);
    assert_int_equal(back.flags, 0);
    h.flags = BR_STREAM_SEALED;
    br_stream_hdr_encode(&h, buf);
    assert_int_equal(br_stream_hdr_decode(buf, sizeof(buf), &back, &err), 0);
    assert_int_equal(back.flags, BR_STREAM_SEALED);
    buf[3] = 0x80; /* a flag this side does not know */
    assert_int_equal(br_stream_hdr_decode(buf, sizeof(buf), &back, &err), -1);
    assert_non_null(strstr(err.text, "flags"));
}

static void test_bad_headers(void **state)
{
    (void)state;
    br_stream_hdr_t h = {BR_STREAM_DATA, 1, 7, 0, 0}, back;
    unsigned char buf[BR_STREAM_HEADER + 1];
    br_err_t err;
    br_stream_hdr_encode(&h, buf);
    assert_int_equal(br_stream_hdr_decode(buf, BR_STREAM_HEADER - 1, &back, &err), -1);
    assert_non_null(strstr(err.text, "15 bytes"));
    assert_int_equal(br_stream_hdr_decode(buf, BR_STREAM_HEADER + 1, &back, &err), -1);
    buf[0] = 9;
    assert_int_equal(br_stream_hdr_decode(buf, BR_STREAM_HEADER, &back, &err), -1);
    assert_non_null(strstr(err.text, "version 9"));
    buf[0] = BR_STREAM_VERSION;
    buf[1] = BR_STREAM_TYPE_MAX;
    assert_int_equal(br_stream_hdr_decode(buf, BR_STREAM_HEADER, &back, &err), -1);
    assert_non_null(strstr(err.text, "type"));
    buf[1] = 0;
    assert_int_equal(br_stream_hdr_decode(buf, BR_STREAM_HEADER, &back, &err), -1);
    buf[1] = BR_STREAM_DATA;
    buf[2] = 3;
    assert_int_equal(br_stream_hdr_decode(buf, BR_STREAM_HEADER, &back, &err), -1);
    assert_non_null(strstr(err.text, "channel 3"));
}

static void test_credit_and_cost(void **state)
{
    (void)state;
    br_credit_t c;
    br_credit_init(&c);
    assert_int_equal(br_credit_room(&c), BR_STREAM_WINDOW);
    assert_int_equal(br_stream_cost(1), BR_STREAM_FRAME_COST);
    assert_int_equal(br_stream_cost(70000), 70000);
    c.sent = BR_STREAM_WINDOW + 5;
    assert_int_equal(br_credit_room(&c), 0); /* never negative */
    br_owed_t o = {0};
    assert_int_equal(br_owed_take(&o, BR_STREAM_WINDOW / 4 - 1), 0);
    assert_int_equal(br_owed_take(&o, 1), BR_STREAM_WINDOW / 4);
    assert_int_equal(br_owed_take(&o, 10), 0);
}

static void test_endpoint(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(br_stream_endpoint("tcp://host.lan:7700", 7701, out, sizeof(out)), 0);
    assert_string_equal(out, "tcp://host.lan:7701");
    assert_int_equal(br_stream_endpoint("tcp://[::1]:7700", 9, out, sizeof(out)), 0);
    assert_string_equal(out, "tcp://[::1]:9");
    assert_int_equal(br_stream_endpoint("ipc:///x/sock", 9, out, sizeof(out)), -1);
    assert_int_equal(br_stream_endpoint("tcp://host", 9, out, sizeof(out)), -1);
    assert_int_equal(br_stream_endpoint("tcp://a-long-host-name:1", 2, out, 8), -1);
}

/* --- one end over pipes and an inproc pair ---------------------------------------- */

typedef struct {
    void *ctx, *a, *b; /* a: the end's socket; b: the other side */
} pair_t;

static void pair_open(pair_t *p)
{
    p->ctx = zmq_ctx_new();
    p->a = zmq_socket(p->ctx, ZMQ_PAIR);
    p->b = zmq_socket(p->ctx, ZMQ_PAIR);
    assert_int_equal(zmq_bind(p->b, "inproc://stream-test"), 0);
    assert_int_equal(zmq_connect(p->a, "inproc://stream-test"), 0);
}

static void pair_close(pair_t *p)
{
    zmq_close(p->a);
    zmq_close(p->b);
    zmq_ctx_term(p->ctx);
}

/* The next frame on b: 1 with h and payload, 0 when none. */
static int next(pair_t *p, br_stream_hdr_t *h, unsigned char *buf, size_t *len)
{
    int has;
    return br_stream_recv(p->b, h, buf, BR_STREAM_CHUNK, len, &has);
}

static void test_source_stops_at_the_window(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p);
    int src[2];
    assert_int_equal(pipe(src), 0);
    fcntl(src[1], F_SETFL, O_NONBLOCK);
    br_streamend_t *e = br_streamend_new(p.a, 42, KEY, BR_STREAM_FROM_CLI, NULL);
    br_streamend_source(e, 1, src[0]);
    static unsigned char big[BR_STREAM_CHUNK], buf[BR_STREAM_CHUNK];
    memset(big, 'x', sizeof(big));
    assert_int_equal(br_streamend_turn(e), 0); /* not attached: nothing read */
    assert_true(write(src[1], big, 1000) == 1000);
    assert_int_equal(br_streamend_turn(e), 0);
    br_stream_hdr_t h;
    size_t len;
    assert_int_equal(next(&p, &h, buf, &len), 0);
    br_stream_hdr_t att = {BR_STREAM_ATTACHED, 0, 42, 0, 0};
    br_err_t err;
    assert_int_equal(br_streamend_frame(e, &att, NULL, 0, &err), 0);
    /* keep the pipe full: exactly one window's worth goes, then it waits */
    int64_t got = 0;
    for (int round = 0; round < 64; round++) {
        while (write(src[1], big, sizeof(big)) > 0)
            ;
        assert_int_equal(br_streamend_turn(e), 0);
        while (next(&p, &h, buf, &len) == 1) {
            assert_int_equal(h.type, BR_STREAM_DATA);
            assert_int_equal(h.stream, 42);
            assert_int_equal(h.channel, 1);
            got += br_stream_cost(len);
        }
    }
    assert_true(got <= BR_STREAM_WINDOW);
    assert_true(got > BR_STREAM_WINDOW - BR_STREAM_FRAME_COST);
    /* a credit lets more go */
    br_stream_hdr_t cr = {BR_STREAM_CREDIT, 0, 42, 100000, 0};
    assert_int_equal(br_streamend_frame(e, &cr, NULL, 0, &err), 0);
    assert_int_equal(br_streamend_turn(e), 0);
    int64_t more = 0;
    while (next(&p, &h, buf, &len) == 1)
        more += br_stream_cost(len);
    assert_true(more > 0 && more <= 100000 + BR_STREAM_WINDOW - got);
    /* the source's end is an EOF on its channel */
    close(src[1]);
    for (int i = 0; i < 200 && !br_streamend_sources_done(e); i++) {
        br_stream_hdr_t c2 = {BR_STREAM_CREDIT, 0, 42, BR_STREAM_WINDOW, 0};
        br_streamend_frame(e, &c2, NULL, 0, &err);
        br_streamend_turn(e);
        while (next(&p, &h, buf, &len) == 1)
            ;
    }
    assert_true(br_streamend_sources_done(e));
    assert_int_equal(h.type, BR_STREAM_EOF);
    assert_int_equal(h.channel, 1);
    br_streamend_destroy(&e);
    pair_close(&p);
}

static void test_sink_grants_only_what_it_wrote(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p);
    int dst[2];
    assert_int_equal(pipe(dst), 0);
    fcntl(dst[0], F_SETFL, O_NONBLOCK);
    br_streamend_t *e = br_streamend_new(p.a, 5, KEY, BR_STREAM_FROM_NODE, NULL);
    br_streamend_sink(e, 0, dst[1], 0);
    br_err_t err;
    static unsigned char data[BR_STREAM_CHUNK], buf[BR_STREAM_CHUNK];
    memset(data, 'd', sizeof(data));
    /* a window's worth (each frame's cost counts its seal): the pipe (64 KiB) takes
     * part, the rest waits, queued */
    const size_t each = BR_STREAM_CHUNK - BR_STREAM_SEAL;
    const int64_t frames = BR_STREAM_WINDOW / BR_STREAM_CHUNK;
    for (int i = 0; i < frames; i++) {
        br_stream_hdr_t d = {BR_STREAM_DATA, 0, 5, 0, 0};
        assert_int_equal(br_streamend_frame(e, &d, data, each, &err), 0);
    }
    br_stream_hdr_t over = {BR_STREAM_DATA, 0, 5, 0, 0};
    assert_int_equal(br_streamend_frame(e, &over, data, 1, &err), -1);
    assert_non_null(strstr(err.text, "beyond the window"));
    assert_int_equal(br_streamend_turn(e), 0);
    assert_true(br_streamend_queued(e) > 0);
    br_stream_hdr_t h;
    size_t len;
    int64_t granted = 0;
    while (next(&p, &h, buf, &len) == 1)
        if (h.type == BR_STREAM_CREDIT)
            granted += (int64_t)h.arg;
    assert_true(granted < BR_STREAM_WINDOW); /* not all of it was written yet */
    /* the reader drains the pipe: everything is written, and granted back */
    int64_t read_bytes = 0;
    for (int i = 0; i < 100 && read_bytes < frames * (int64_t)each; i++) {
        ssize_t n;
        while ((n = read(dst[0], buf, sizeof(buf))) > 0)
            read_bytes += n;
        br_streamend_turn(e);
        while (next(&p, &h, buf, &len) == 1)
            if (h.type == BR_STREAM_CREDIT)
                granted += (int64_t)h.arg;
    }
    assert_int_equal(read_bytes, frames * (int64_t)each);
    assert_int_equal(granted, BR_STREAM_WINDOW);
    assert_int_equal(br_streamend_queued(e), 0);
    /* its EOF closes the pipe once written out */
    br_stream_hdr_t eof = {BR_STREAM_EOF, 0, 5, 0, 0};
    assert_int_equal(br_streamend_frame(e, &eof, NULL, 0, &err), 0);
    assert_true(br_streamend_sinks_done(e));
    assert_int_equal(read(dst[0], buf, 1), 0); /* the writer's end is closed */
    /* data on a channel with no sink is the other end's fault */
    br_stream_hdr_t stray = {BR_STREAM_DATA, 2, 5, 0, 0};
    assert_int_equal(br_streamend_frame(e, &stray, data, 10, &err), -1);
    assert_non_null(strstr(err.text, "channel 2"));
    br_streamend_destroy(&e);
    close(dst[0]);
    pair_close(&p);
}

/* A frame of a stream this end no longer has is answered CLOSE, saying why; a
 * connection's own frames (stream 0), and a CLOSE or an EXIT, are not. */
static void test_a_stream_let_go_of_is_disowned(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p);
    static unsigned char buf[BR_STREAM_CHUNK];
    br_stream_hdr_t h, got;
    size_t len;
    const uint8_t quiet[] = {BR_STREAM_CLOSE, BR_STREAM_EXIT};
    for (size_t i = 0; i < sizeof(quiet); i++) {
        h = (br_stream_hdr_t){quiet[i], 0, 7, 0, 0};
        br_stream_disown(p.a, &h, "gone", 0);
    }
    h = (br_stream_hdr_t){BR_STREAM_PING, 0, 0, 0, 0};
    br_stream_disown(p.a, &h, "gone", 0);
    assert_int_equal(next(&p, &got, buf, &len), 0);
    h = (br_stream_hdr_t){BR_STREAM_PING, 0, 7, 0, 0};
    br_stream_disown(p.a, &h, "gone", 0);
    assert_int_equal(next(&p, &got, buf, &len), 1);
    assert_int_equal(got.type, BR_STREAM_CLOSE);
    assert_int_equal(got.stream, 7);
    assert_int_equal(len, 4);
    assert_memory_equal(buf, "gone", 4);
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_credit_and_cost),
        cmocka_unit_test(test_endpoint),
        cmocka_unit_test(test_source_stops_at_the_window),
        cmocka_unit_test(test_sink_grants_only_what_it_wrote),
        cmocka_unit_test(test_a_stream_let_go_of_is_disowned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
