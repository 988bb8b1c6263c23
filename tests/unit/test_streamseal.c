/* test_streamseal.c - frames sealed end to end (proto/streamseal.c): what one end
 * seals the other opens, in order, and a frame changed on the way (its payload, its
 * header), replayed, reordered, sent back to its sender, sealed with another
 * stream's key, or not sealed at all is refused, naming the frame; the relay's own
 * unsealed frames pass. Over a real ZeroMQ pair, as the relay's peers send them. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>
#include <cmocka.h>

#include "stream.h"
#include "streamseal.h"

typedef struct {
    void *ctx, *cli, *node;
    br_streamseal_t c, n; /* the CLI's end and the node's */
} ends_t;

static void ends_open(ends_t *e, const char *key)
{
    e->ctx = zmq_ctx_new();
    e->cli = zmq_socket(e->ctx, ZMQ_PAIR);
    e->node = zmq_socket(e->ctx, ZMQ_PAIR);
    assert_int_equal(zmq_bind(e->node, "inproc://seal-test"), 0);
    assert_int_equal(zmq_connect(e->cli, "inproc://seal-test"), 0);
    assert_int_equal(br_streamseal_init(&e->c, key, BR_STREAM_FROM_CLI, NULL), 0);
    assert_int_equal(br_streamseal_init(&e->n, key, BR_STREAM_FROM_NODE, NULL), 0);
}

static void ends_close(ends_t *e)
{
    br_streamseal_fini(&e->c);
    br_streamseal_fini(&e->n);
    zmq_close(e->cli);
    zmq_close(e->node);
    zmq_ctx_term(e->ctx);
}

/* The raw frame waiting on sock: its header and payload as sent. */
static void take(void *sock, br_stream_hdr_t *h, unsigned char *buf, size_t *len)
{
    int has = 0;
    assert_int_equal(br_stream_recv(sock, h, buf, BR_STREAM_CHUNK, len, &has), 1);
}

static void test_key_and_bad_keys(void **state)
{
    (void)state;
    char k1[BR_STREAM_KEY_HEX + 1], k2[BR_STREAM_KEY_HEX + 1];
    br_streamseal_key(k1);
    br_streamseal_key(k2);
    assert_int_equal(strlen(k1), BR_STREAM_KEY_HEX);
    assert_string_not_equal(k1, k2);
    assert_true(br_streamseal_key_ok(k1));
    assert_false(br_streamseal_key_ok(NULL));
    assert_false(br_streamseal_key_ok("abcd"));
    char bad[BR_STREAM_KEY_HEX + 1];
    memcpy(bad, k1, sizeof(bad));
    bad[7] = 'g';
    assert_false(br_streamseal_key_ok(bad));
    br_streamseal_t s;
    br_err_t err;
    assert_int_equal(br_streamseal_init(&s, bad, BR_STREAM_FROM_CLI, &err), -1);
    assert_non_null(strstr(err.text, "64 hex characters"));
}

static void test_round_trip_both_ways_in_order(void **state)
{
    (void)state;
    char key[BR_STREAM_KEY_HEX + 1];
    br_streamseal_key(key);
    ends_t e;
    ends_open(&e, key);
    static unsigned char buf[BR_STREAM_CHUNK];
    br_stream_hdr_t h;
    size_t len;
    br_err_t err;
    for (int i = 0; i < 3; i++) {
        char msg[32];
        int n = snprintf(msg, sizeof(msg), "frame %d", i);
        memcpy(buf, msg, (size_t)n);
        assert_int_equal(br_streamseal_send_buf(&e.c, e.cli, BR_STREAM_DATA, 0, 9, 0, buf,
                                                (size_t)n), 0);
        take(e.node, &h, buf, &len);
        assert_true(h.flags & BR_STREAM_SEALED);
        assert_int_equal(len, (size_t)n + BR_STREAM_SEAL);
        assert_null(memmem(buf, len, msg, (size_t)n)); /* not readable on the way */
        assert_int_equal(br_streamseal_open(&e.n, &h, buf, &len, &err), 0);
        assert_int_equal(len, (size_t)n);
        assert_memory_equal(buf, msg, (size_t)n);
    }
    /* the other way, with an argument and no payload */
    assert_int_equal(br_streamseal_send(&e.n, e.node, BR_STREAM_EXIT, 0, 9, 3, NULL, 0), 0);
    take(e.cli, &h, buf, &len);
    assert_int_equal(br_streamseal_open(&e.c, &h, buf, &len, &err), 0);
    assert_int_equal(h.type, BR_STREAM_EXIT);
    assert_true(h.arg == 3);
    assert_int_equal(len, 0);
    ends_close(&e);
}

static void test_what_is_refused(void **state)
{
    (void)state;
    char key[BR_STREAM_KEY_HEX + 1], other[BR_STREAM_KEY_HEX + 1];
    br_streamseal_key(key);
    br_streamseal_key(other);
    ends_t e;
    ends_open(&e, key);
    static unsigned char buf[BR_STREAM_CHUNK], copy[BR_STREAM_CHUNK];
    br_stream_hdr_t h, hc;
    size_t len, clen;
    br_err_t err;

    /* a payload byte changed */
    assert_int_equal(br_streamseal_send(&e.c, e.cli, BR_STREAM_DATA, 0, 9, 0, "ls\n", 3), 0);
    take(e.node, &h, buf, &len);
    memcpy(copy, buf, len);
    clen = len;
    hc = h;
    buf[0] ^= 1;
    assert_int_equal(br_streamseal_open(&e.n, &h, buf, &len, &err), -1);
    assert_non_null(strstr(err.text, "DATA frame failed its check"));
    /* the header changed (another channel; EOF for DATA; another argument) */
    br_stream_hdr_t t = hc;
    t.channel = 2;
    memcpy(buf, copy, clen), len = clen;
    assert_int_equal(br_streamseal_open(&e.n, &t, buf, &len, &err), -1);
    t = hc;
    t.type = BR_STREAM_EOF;
    memcpy(buf, copy, clen), len = clen;
    assert_int_equal(br_streamseal_open(&e.n, &t, buf, &len, &err), -1);
    /* the frame as it was sent opens (nothing was counted for the failures) */
    memcpy(buf, copy, clen), len = clen;
    assert_int_equal(br_streamseal_open(&e.n, &hc, buf, &len, &err), 0);
    assert_memory_equal(buf, "ls\n", 3);
    /* ... once: replayed, it fails */
    memcpy(buf, copy, clen), len = clen;
    assert_int_equal(br_streamseal_open(&e.n, &hc, buf, &len, &err), -1);

    /* out of order: frame 2 before frame 1 */
    assert_int_equal(br_streamseal_send(&e.c, e.cli, BR_STREAM_DATA, 0, 9, 0, "a", 1), 0);
    assert_int_equal(br_streamseal_send(&e.c, e.cli, BR_STREAM_DATA, 0, 9, 0, "b", 1), 0);
    take(e.node, &h, buf, &len); /* (the first, dropped on the way) */
    take(e.node, &h, buf, &len);
    assert_int_equal(br_streamseal_open(&e.n, &h, buf, &len, &err), -1);

    /* sent back to its sender: the CLI's own frame, reflected */
    br_streamseal_t c2;
    assert_int_equal(br_streamseal_init(&c2, key, BR_STREAM_FROM_CLI, NULL), 0);
    assert_int_equal(br_streamseal_send(&c2, e.cli, BR_STREAM_EXIT, 0, 9, 0, NULL, 0), 0);
    take(e.node, &h, buf, &len);
    br_streamseal_t c3;
    assert_int_equal(br_streamseal_init(&c3, key, BR_STREAM_FROM_CLI, NULL), 0);
    assert_int_equal(br_streamseal_open(&c3, &h, buf, &len, &err), -1);

    /* another stream's key */
    br_streamseal_t stranger, n2;
    assert_int_equal(br_streamseal_init(&stranger, other, BR_STREAM_FROM_CLI, NULL), 0);
    assert_int_equal(br_streamseal_init(&n2, key, BR_STREAM_FROM_NODE, NULL), 0);
    assert_int_equal(br_streamseal_send(&stranger, e.cli, BR_STREAM_DATA, 0, 9, 0, "x", 1), 0);
    take(e.node, &h, buf, &len);
    assert_int_equal(br_streamseal_open(&n2, &h, buf, &len, &err), -1);

    /* not sealed: refused, except what the relay itself sends */
    const uint8_t ends_only[] = {BR_STREAM_DATA, BR_STREAM_CREDIT, BR_STREAM_EOF,
                                 BR_STREAM_WINCH, BR_STREAM_EXIT};
    for (size_t i = 0; i < sizeof(ends_only); i++) {
        br_stream_hdr_t u = {ends_only[i], 0, 9, 1, 0};
        len = 1;
        buf[0] = 'x';
        assert_int_equal(br_streamseal_open(&n2, &u, buf, &len, &err), -1);
        assert_non_null(strstr(err.text, "an unsealed"));
    }
    const uint8_t relays[] = {BR_STREAM_ATTACHED, BR_STREAM_PING, BR_STREAM_CLOSE};
    for (size_t i = 0; i < sizeof(relays); i++) {
        br_stream_hdr_t u = {relays[i], 0, 9, 0, 0};
        len = 0;
        assert_int_equal(br_streamseal_open(&n2, &u, buf, &len, &err), 0);
    }
    /* a sealed frame too short to hold its seal */
    br_stream_hdr_t s = {BR_STREAM_DATA, 0, 9, 0, BR_STREAM_SEALED};
    len = BR_STREAM_SEAL - 1;
    assert_int_equal(br_streamseal_open(&n2, &s, buf, &len, &err), -1);
    br_streamseal_fini(&c2);
    br_streamseal_fini(&c3);
    br_streamseal_fini(&stranger);
    br_streamseal_fini(&n2);
    ends_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_and_bad_keys),
        cmocka_unit_test(test_round_trip_both_ways_in_order),
        cmocka_unit_test(test_what_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
