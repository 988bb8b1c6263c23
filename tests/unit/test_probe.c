/* test_probe.c - round-trip probes: the packet, its MAC, and two probers measuring
 * each other over real UDP sockets on loopback. */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>
#include <sodium.h>

#include "probe.h"
#include "util.h"

static const char *KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

static void test_pack_unpack(void **state)
{
    (void)state;
    uint8_t key[BR_PROBE_KEY_LEN], other[BR_PROBE_KEY_LEN], buf[64];
    for (int i = 0; i < BR_PROBE_KEY_LEN; i++) {
        key[i] = (uint8_t)i;
        other[i] = (uint8_t)(i + 1);
    }
    assert_int_equal(br_probe_pack(buf, 10, 1, 7, 99, key), -1);
    assert_int_equal(br_probe_pack(buf, sizeof(buf), 1, 0xdeadbeef, 0x0123456789abcdefULL, key),
                     BR_PROBE_PACKET);
    int type;
    uint32_t seq;
    uint64_t t;
    assert_int_equal(br_probe_unpack(buf, BR_PROBE_PACKET, key, &type, &seq, &t), 0);
    assert_int_equal(type, 1);
    assert_int_equal(seq, 0xdeadbeef);
    assert_true(t == 0x0123456789abcdefULL);
    /* another key, a flipped bit, a wrong length, a wrong type: all refused */
    assert_int_equal(br_probe_unpack(buf, BR_PROBE_PACKET, other, &type, &seq, &t), -1);
    for (size_t i = 0; i < BR_PROBE_PACKET; i++) {
        buf[i] ^= 0x10;
        assert_int_equal(br_probe_unpack(buf, BR_PROBE_PACKET, key, &type, &seq, &t), -1);
        buf[i] ^= 0x10;
    }
    assert_int_equal(br_probe_unpack(buf, BR_PROBE_PACKET - 1, key, &type, &seq, &t), -1);
    assert_int_equal(br_probe_unpack(buf, BR_PROBE_PACKET + 1, key, &type, &seq, &t), -1);
    br_probe_pack(buf, sizeof(buf), 3, 1, 1, key);
    assert_int_equal(br_probe_unpack(buf, BR_PROBE_PACKET, key, &type, &seq, &t), -1);
}

static void test_bad_key(void **state)
{
    (void)state;
    br_err_t err;
    br_probe_t *p = br_probe_new(0, &err);
    assert_non_null(p);
    assert_int_equal(br_probe_set_key(p, "abc", 1000, &err), -1);
    assert_non_null(strstr(err.text, "64 hex digits"));
    assert_int_equal(br_probe_tick(p, br_mono_ms()), -1); /* no key: sends nothing */
    br_probe_destroy(&p);
}

static json_t *peer(const char *name, int port)
{
    return json_pack("[{s:s, s:s, s:i}]", "node", name, "addr", "127.0.0.1", "port", port);
}

/* Pump both sockets until a's report of b is a number, or give up after ms. */
static json_t *measured(br_probe_t *a, br_probe_t *b, const char *name, int64_t ms)
{
    int64_t end = br_mono_ms() + ms;
    while (br_mono_ms() < end) {
        br_probe_tick(a, br_mono_ms());
        br_probe_tick(b, br_mono_ms());
        struct pollfd fds[2] = {{br_probe_fd(a), POLLIN, 0}, {br_probe_fd(b), POLLIN, 0}};
        poll(fds, 2, 50);
        br_probe_read(a);
        br_probe_read(b);
        json_t *r = br_probe_report(a, br_mono_ms());
        if (json_is_number(json_object_get(r, name)))
            return r;
        json_decref(r);
    }
    return NULL;
}

static void test_two_probers(void **state)
{
    (void)state;
    br_err_t err;
    br_probe_t *a = br_probe_new(0, &err), *b = br_probe_new(0, &err);
    br_probe_t *stranger = br_probe_new(0, &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(stranger);
    assert_int_equal(br_probe_set_key(a, KEY, 200, &err), 0);
    assert_int_equal(br_probe_set_key(b, KEY, 200, &err), 0);
    json_t *pa = peer("b", br_probe_port(b)), *pb = peer("a", br_probe_port(a));
    br_probe_set_peers(a, pa);
    br_probe_set_peers(b, pb);
    json_t *r = measured(a, b, "b", 5000);
    assert_non_null(r);
    double ms = json_number_value(json_object_get(r, "b"));
    assert_true(ms > 0 && ms < 1000);
    json_decref(r);

    /* a prober with another key is never answered: reported lost, not measured */
    char other[65];
    memcpy(other, KEY, sizeof(other));
    other[0] = 'f';
    assert_int_equal(br_probe_set_key(stranger, other, 100, &err), 0);
    json_t *ps = peer("a", br_probe_port(a));
    br_probe_set_peers(stranger, ps);
    r = measured(stranger, a, "a", 1000); /* ten intervals */
    assert_null(r);
    r = br_probe_report(stranger, br_mono_ms());
    assert_true(json_is_null(json_object_get(r, "a")));
    json_decref(r);

    json_decref(pa);
    json_decref(pb);
    json_decref(ps);
    br_probe_destroy(&a);
    br_probe_destroy(&b);
    br_probe_destroy(&stranger);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_unpack),
        cmocka_unit_test(test_bad_key),
        cmocka_unit_test(test_two_probers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
