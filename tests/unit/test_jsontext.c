/* test_jsontext.c - unit tests for proto/jsontext.c: the text is byte for byte
 * what jansson's json_dumps writes, for every kind of value, every escape, UTF-8
 * of every length, sorted and unsorted keys, and thousands of random values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsontext.h"

/* Both writers agree on v, with and without sorted keys (v is taken). */
static void same(json_t *v)
{
    assert_non_null(v);
    for (int sort = 0; sort <= 1; sort++) {
        char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
                                       (sort ? JSON_SORT_KEYS : 0));
        size_t len = 0;
        char *got = br_jsontext(v, sort ? BR_JSONTEXT_SORT_KEYS : 0, &len);
        assert_non_null(want);
        assert_non_null(got);
        assert_string_equal(got, want);
        assert_int_equal(len, strlen(want));
        free(want);
        free(got);
    }
    json_decref(v);
}

static void test_scalars(void **state)
{
    (void)state;
    same(json_null());
    same(json_true());
    same(json_false());
    json_int_t ints[] = {0, 1, -1, 9, 10, -10, 123456789, INT64_MAX, INT64_MIN,
                         INT64_MIN + 1, 1700000000000};
    for (size_t i = 0; i < sizeof(ints) / sizeof(*ints); i++)
        same(json_integer(ints[i]));
    double reals[] = {0.0, -0.0, 1.0, 0.1, 1e20, 1e-5, 3.14159, -2.5e-300, 1e308};
    for (size_t i = 0; i < sizeof(reals) / sizeof(*reals); i++)
        same(json_real(reals[i]));
}

static void test_every_ascii_byte_and_nul(void **state)
{
    (void)state;
    char all[128];
    for (int c = 0; c < 128; c++) {
        char one[1] = {(char)c};
        same(json_stringn(one, 1));
        all[c] = (char)c;
    }
    same(json_stringn(all, sizeof(all))); /* escapes between plain runs */
    same(json_string(""));
    same(json_string("\"quoted\" back\\slash / slash\ttab\r\n"));
}

static void test_utf8(void **state)
{
    (void)state;
    same(json_string("caf\xc3\xa9"));                /* 2 bytes */
    same(json_string("\xe2\x82\xac 20"));            /* 3 bytes */
    same(json_string("\xf0\x9f\x8c\xbf bramble"));   /* 4 bytes */
    same(json_string("\xef\xbf\xbf\xf4\x8f\xbf\xbf")); /* the highest of each */
    same(json_string("a\xc2\x80" "b\xe0\xa0\x80" "c\xf0\x90\x80\x80"));
}

/* What json_dumps refuses (a string that is not UTF-8), this refuses too. */
static void test_invalid_utf8_refused(void **state)
{
    (void)state;
    const char *bad[] = {"\x80", "\xc0\xaf", "\xc3", "\xe0\x80\x80", "\xed\xa0\x80",
                         "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "ok\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        json_t *s = json_stringn_nocheck(bad[i], strlen(bad[i]));
        json_t *o = json_pack("{s:O}", "k", s);
        assert_null(json_dumps(s, JSON_ENCODE_ANY));
        assert_null(br_jsontext(s, 0, NULL));
        assert_null(br_jsontext(o, 0, NULL));
        json_decref(s);
        json_decref(o);
    }
}

static void test_containers_and_key_order(void **state)
{
    (void)state;
    same(json_array());
    same(json_object());
    same(json_pack("[[], {}, [[]], {s:{}}]", "a"));
    /* insertion order kept, or sorted: a key before its longer extensions */
    same(json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "b", 1, "ab", 2, "a", 3, "abc", 4,
                   "B", 5, "", 6));
    json_t *o = json_object();
    json_object_setn_new(o, "k\0z", 3, json_integer(1)); /* a key with a NUL in it */
    json_object_setn_new(o, "k", 1, json_integer(2));
    json_object_set_new(o, "k\n\"", json_string("escaped key"));
    same(o);
    same(json_pack("{s:s, s:s, s:s?, s:s, s:[], s:{s:i, s:i, s:b}, s:{s:i, s:i}}",
                   "name", "train-1", "command", "python3 train.py --lr 0.1", "workdir",
                   NULL, "kind", "train", "after", "resources", "gpus", 2, "cpus", 8,
                   "spread", 1, "preempt", "signal", 10, "grace", 120000));
}

static void test_depth_limit(void **state)
{
    (void)state;
    json_t *v = json_array(), *inner = v;
    for (int i = 0; i < BR_JSONTEXT_MAX_DEPTH + 10; i++) {
        json_t *a = json_array();
        json_array_append_new(inner, a);
        inner = a;
    }
    assert_null(br_jsontext(v, 0, NULL));
    json_decref(v);
    same(json_pack("[[[[[[[[[[i]]]]]]]]]]", 1));
}

static unsigned rnd(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 8) & 0xFFFFFF;
}

/* A string of up to 12 pieces: plain ASCII, escapes, UTF-8 of 1 to 4 bytes. */
static json_t *random_string(unsigned *seed)
{
    static const char *const piece[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\x01",
                                        "\x1f", "\x7f", "\xc3\xa9", "\xe2\x82\xac",
                                        "\xf0\x9f\x8c\xbf", "bramble", "0"};
    char buf[128] = "";
    int n = (int)(rnd(seed) % 13);
    for (int i = 0; i < n; i++)
        strcat(buf, piece[rnd(seed) % (sizeof(piece) / sizeof(*piece))]);
    return json_string(buf);
}

static json_t *random_value(unsigned *seed, int depth)
{
    unsigned kind = rnd(seed) % (depth < 4 ? 9 : 7);
    switch (kind) {
    case 0: return json_null();
    case 1: return json_true();
    case 2: return json_false();
    case 3: return json_integer((json_int_t)rnd(seed) * (rnd(seed) % 2 ? -1 : 1) *
                                (json_int_t)(rnd(seed) % 100000));
    case 4: return json_real((double)rnd(seed) / (double)(rnd(seed) + 1));
    case 5:
    case 6: return random_string(seed);
    case 7: {
        json_t *a = json_array();
        for (int i = (int)(rnd(seed) % 5); i > 0; i--)
            json_array_append_new(a, random_value(seed, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (int i = (int)(rnd(seed) % 6); i > 0; i--) {
            json_t *k = random_string(seed);
            json_object_set_new(o, json_string_value(k), random_value(seed, depth + 1));
            json_decref(k);
        }
        return o;
    }
    }
}

static void test_random_values(void **state)
{
    (void)state;
    unsigned seed = 20261202;
    for (int i = 0; i < 5000; i++)
        same(random_value(&seed, 0));
}

static void test_null_value(void **state)
{
    (void)state;
    size_t len = 77;
    assert_null(br_jsontext(NULL, 0, &len));
    assert_int_equal(len, 77);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_every_ascii_byte_and_nul),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_invalid_utf8_refused),
        cmocka_unit_test(test_containers_and_key_order),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_random_values),
        cmocka_unit_test(test_null_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
