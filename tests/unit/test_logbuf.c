/* test_logbuf.c - the bounded output queue: chunking per (task, stream), readiness
 * (full, aged, forced), and dropping the OLDEST bytes with an exact count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "logbuf.h"

/* Everything that waits, shipped in order (force), concatenated into out. */
static size_t drain(br_logbuf_t *b, char *out, size_t max)
{
    br_logchunk_t c;
    size_t n = 0;
    while (br_logbuf_peek(b, 0, 100, 1, &c)) {
        assert_true(n + c.len <= max);
        memcpy(out + n, c.data, c.len);
        n += c.len;
        br_logbuf_pop(b);
    }
    assert_int_equal(br_logbuf_bytes(b), 0);
    return n;
}

static void test_chunks_and_readiness(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(1024, 8);
    br_logchunk_t c;
    assert_non_null(b);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 0);
    assert_int_equal(br_logbuf_put(b, 0, 1, "abc", 3, 1000), 0);
    assert_int_equal(br_logbuf_peek(b, 1050, 100, 0, &c), 0); /* young, not full */
    assert_int_equal(br_logbuf_peek(b, 1100, 100, 0, &c), 1); /* aged */
    assert_int_equal(c.len, 3);
    assert_int_equal(br_logbuf_put(b, 0, 1, "defghij", 7, 1060), 0); /* fills chunk 1 */
    assert_int_equal(br_logbuf_peek(b, 1060, 100, 0, &c), 1);        /* full: ready */
    assert_int_equal(c.len, 8);
    assert_memory_equal(c.data, "abcdefgh", 8);
    assert_int_equal(c.task, 0);
    assert_int_equal(c.stream, 1);
    br_logbuf_pop(b);
    assert_int_equal(br_logbuf_bytes(b), 2);
    /* another stream gets its own chunk; each keeps its order */
    assert_int_equal(br_logbuf_put(b, 1, 2, "XY", 2, 1070), 0);
    assert_int_equal(br_logbuf_put(b, 0, 1, "k", 1, 1071), 0);
    assert_int_equal(br_logbuf_peek(b, 1071, 100, 1, &c), 1);
    assert_int_equal(c.len, 3);
    assert_memory_equal(c.data, "ijk", 3);
    br_logbuf_pop(b);
    assert_int_equal(br_logbuf_peek(b, 1071, 100, 1, &c), 1);
    assert_int_equal(c.task, 1);
    assert_int_equal(c.stream, 2);
    assert_memory_equal(c.data, "XY", 2);
    br_logbuf_pop(b);
    assert_int_equal(br_logbuf_dropped(b), 0);
    br_logbuf_destroy(&b);
    assert_null(b);
}

static void test_drops_oldest_and_counts(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(10, 4);
    char out[64];
    assert_int_equal(br_logbuf_put(b, 0, 1, "0123456789", 10, 0), 0);
    assert_int_equal(br_logbuf_dropped(b), 0);
    assert_int_equal(br_logbuf_put(b, 0, 1, "abcd", 4, 0), 0);
    assert_int_equal(br_logbuf_bytes(b), 10);
    assert_int_equal(br_logbuf_dropped(b), 4); /* "0123" went */
    assert_int_equal(br_logbuf_put(b, 0, 1, "efg", 3, 0), 0);
    assert_int_equal(br_logbuf_dropped(b), 7); /* and "456": part of a chunk */
    size_t n = drain(b, out, sizeof(out));
    assert_int_equal(n, 10);
    assert_memory_equal(out, "789abcdefg", 10);
    /* a single put larger than the bound keeps its newest bytes */
    char big[100];
    for (int i = 0; i < 100; i++)
        big[i] = (char)('A' + i % 26);
    assert_int_equal(br_logbuf_put(b, 0, 2, big, sizeof(big), 0), 0);
    assert_int_equal(br_logbuf_dropped(b), 7 + 90);
    n = drain(b, out, sizeof(out));
    assert_int_equal(n, 10);
    assert_memory_equal(out, big + 90, 10);
    br_logbuf_destroy(&b);
}

static void test_drops_across_streams_oldest_first(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(6, 32);
    char out[16];
    br_logbuf_put(b, 0, 1, "aaa", 3, 0);
    br_logbuf_put(b, 0, 2, "bbb", 3, 1);
    br_logbuf_put(b, 1, 1, "cc", 2, 2); /* the two oldest "a"s go */
    assert_int_equal(br_logbuf_dropped(b), 2);
    size_t n = drain(b, out, sizeof(out));
    assert_int_equal(n, 6);
    assert_memory_equal(out, "abbbcc", 6);
    br_logbuf_destroy(&b);
    br_logbuf_destroy(&b); /* NULL: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_and_readiness),
        cmocka_unit_test(test_drops_oldest_and_counts),
        cmocka_unit_test(test_drops_across_streams_oldest_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
