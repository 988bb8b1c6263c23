/* test_logbuf.c - the bounded output queue: chunking per (task, stream), readiness
 * (full, aged, forced), dropping the OLDEST bytes with an exact count, and chunks
 * kept from their sending until taken, sent again under their numbers when not. */
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

/* A chunk sent stays until it is taken; put back in line, it goes again first,
 * under the number it had, and nothing more joins it. */
static void test_sent_chunks_wait_to_be_taken(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(1024, 8);
    br_logchunk_t c;
    assert_int_equal(br_logbuf_put(b, 0, 1, "one", 3, 0), 0);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 1);
    assert_int_equal(c.seq, -1);
    br_logbuf_sent(b, 0, 41, 10);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 0); /* nothing else waits */
    assert_int_equal(br_logbuf_bytes(b), 3);               /* but it is kept */
    assert_int_equal(br_logbuf_oldest_sent(b), 10);
    /* what follows does not join the chunk sent: it gets one of its own */
    assert_int_equal(br_logbuf_put(b, 0, 1, "two", 3, 20), 0);
    assert_int_equal(br_logbuf_peek(b, 20, 100, 1, &c), 1);
    assert_memory_equal(c.data, "two", 3);
    br_logbuf_sent(b, 1, 42, 30);
    assert_true(br_logbuf_holds(b, 41) && br_logbuf_holds(b, 42));
    /* refused: both go again, oldest first, as 0 and 1 */
    br_logbuf_resend(b);
    assert_int_equal(br_logbuf_oldest_sent(b), -1);
    assert_int_equal(br_logbuf_holds(b, 41), 0);
    assert_int_equal(br_logbuf_peek(b, 30, 100, 0, &c), 1); /* young, but sent before */
    assert_int_equal(c.seq, 0);
    assert_memory_equal(c.data, "one", 3);
    br_logbuf_sent(b, c.seq, 43, 40);
    assert_int_equal(br_logbuf_peek(b, 40, 100, 0, &c), 1);
    assert_int_equal(c.seq, 1);
    br_logbuf_sent(b, c.seq, 44, 40);
    /* answers out of order are taken each; an unknown tag changes nothing */
    assert_int_equal(br_logbuf_taken(b, 44), 1);
    assert_int_equal(br_logbuf_taken(b, 41), 0);
    assert_int_equal(br_logbuf_bytes(b), 3);
    assert_int_equal(br_logbuf_taken(b, 43), 1);
    assert_int_equal(br_logbuf_bytes(b), 0);
    assert_int_equal(br_logbuf_dropped(b), 0);
    br_logbuf_destroy(&b);
}

/* Beyond the bound the oldest go first. A chunk sent is on its way already: its copy
 * goes whole, uncounted until its answer, and stored + dropped stays what was put. */
static void test_bound_lets_sent_chunks_go(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(6, 4);
    br_logchunk_t c;
    br_logbuf_put(b, 0, 1, "abcd", 4, 0);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 0, &c), 1);
    br_logbuf_sent(b, 0, 7, 0);
    br_logbuf_put(b, 0, 1, "efgh", 4, 0); /* the copy of "abcd" goes */
    assert_int_equal(br_logbuf_bytes(b), 4);
    assert_int_equal(br_logbuf_let_go(b), 4);
    assert_int_equal(br_logbuf_dropped(b), 0); /* not yet known */
    assert_true(br_logbuf_holds(b, 7));
    /* stored after all: nothing was dropped */
    assert_int_equal(br_logbuf_taken(b, 7), 1);
    assert_int_equal(br_logbuf_let_go(b), 0);
    assert_int_equal(br_logbuf_dropped(b), 0);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 0, &c), 1);
    assert_memory_equal(c.data, "efgh", 4);
    br_logbuf_sent(b, 1, 8, 0);
    /* never answered: on resending it does not go again; it waits for its answer
     * (in limbo) through one more resend, then counts as dropped */
    br_logbuf_put(b, 0, 1, "ijklmn", 6, 0); /* "efgh"'s copy goes */
    assert_int_equal(br_logbuf_let_go(b), 4);
    assert_int_equal(br_logbuf_oldest_sent(b), 0);
    br_logbuf_resend(b);
    assert_int_equal(br_logbuf_let_go(b), 4);
    assert_int_equal(br_logbuf_dropped(b), 0);
    assert_true(br_logbuf_holds(b, 8));
    assert_int_equal(br_logbuf_oldest_sent(b), 0); /* (its answer still awaited) */
    br_logbuf_resend(b);
    assert_int_equal(br_logbuf_let_go(b), 0);
    assert_int_equal(br_logbuf_dropped(b), 4);
    assert_false(br_logbuf_holds(b, 8));
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 1);
    assert_int_equal(c.seq, -1);
    assert_memory_equal(c.data, "ijkl", 4);
    /* giving up drops (and counts) what is kept and what waits for an answer */
    br_logbuf_sent(b, 2, 9, 0);
    br_logbuf_put(b, 0, 1, "opqrs", 5, 0); /* "ijkl" let go, "mn" not sent yet */
    br_logbuf_drop_all(b);
    assert_int_equal(br_logbuf_bytes(b), 0);
    assert_int_equal(br_logbuf_let_go(b), 0);
    assert_int_equal(br_logbuf_dropped(b), 4 + 4 + 2 + 5);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 0);
    br_logbuf_destroy(&b);
}

/* A chunk refused puts those sent after it back in line; one of them whose copy
 * was let go waits for its own answer: stored (taken) counts nothing dropped,
 * refused counts its bytes at once. */
static void test_let_go_chunk_after_a_refused_one_waits_for_its_answer(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(8, 4);
    br_logchunk_t c;
    for (int i = 0; i < 3; i++) { /* three chunks sent: tags 1, 2, 3 */
        br_logbuf_put(b, 0, 1, "abcd", 4, 0);
        assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 1);
        br_logbuf_sent(b, i, (uint32_t)i + 1, 0);
    }
    /* the bound (8) lets the copy of tag 1 go (4 + 4 + 4 kept > 8) */
    assert_int_equal(br_logbuf_let_go(b), 4);
    /* tag 2 is refused first (answers may come in any order here): 1 waits in limbo */
    assert_int_equal(br_logbuf_refused(b, 2), 0); /* (not let go: sent again) */
    br_logbuf_resend(b);
    assert_true(br_logbuf_holds(b, 1));
    assert_int_equal(br_logbuf_dropped(b), 0);
    /* then 1's answer: stored after all */
    assert_int_equal(br_logbuf_taken(b, 1), 1);
    assert_int_equal(br_logbuf_let_go(b), 0);
    assert_int_equal(br_logbuf_dropped(b), 0);
    /* the same with a refusal of the one in limbo: its bytes are dropped at once */
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 1); /* 2, again */
    br_logbuf_sent(b, c.seq, 12, 0);
    assert_int_equal(br_logbuf_peek(b, 0, 100, 1, &c), 1); /* 3, again */
    br_logbuf_sent(b, c.seq, 13, 0);
    br_logbuf_put(b, 0, 1, "efghijkl", 8, 0); /* both copies go */
    assert_int_equal(br_logbuf_let_go(b), 8);
    br_logbuf_resend(b);
    assert_int_equal(br_logbuf_refused(b, 12), 1);
    assert_int_equal(br_logbuf_dropped(b), 4);
    assert_int_equal(br_logbuf_taken(b, 13), 1);
    assert_int_equal(br_logbuf_dropped(b), 4);
    assert_int_equal(br_logbuf_let_go(b), 0);
    br_logbuf_drop_all(b);
    assert_int_equal(br_logbuf_dropped(b), 4 + 8);
    br_logbuf_destroy(&b);
}

/* Random puts, sends, answers and losses: every byte put ends up taken or dropped,
 * exactly once, and what is kept never exceeds the bound. */
static void test_every_byte_taken_or_dropped(void **state)
{
    (void)state;
    br_logbuf_t *b = br_logbuf_new(100, 16);
    unsigned r = 12345;
    int64_t put = 0, taken = 0;
    uint32_t tags[64];
    size_t lens[64];
    int ntags = 0;
    char data[40];
    memset(data, 'x', sizeof(data));
    for (int step = 0; step < 20000; step++) {
        r = r * 1103515245u + 12345u;
        unsigned op = (r >> 16) % 10;
        if (op < 4) {
            size_t n = 1 + (r >> 8) % sizeof(data);
            br_logbuf_put(b, (int)(r % 3), 1 + (int)((r >> 4) % 2), data, n, step);
            put += (int64_t)n;
        } else if (op < 7 && ntags < 64) {
            br_logchunk_t c;
            if (br_logbuf_peek(b, step, 5, 0, &c)) {
                tags[ntags] = (uint32_t)step + 1;
                lens[ntags++] = c.len;
                br_logbuf_sent(b, c.seq >= 0 ? c.seq : step, (uint32_t)step + 1, step);
            }
        } else if (op < 9 && ntags > 0) {
            int k = (int)((r >> 8) % (unsigned)ntags);
            if (br_logbuf_taken(b, tags[k]))
                taken += (int64_t)lens[k];
            tags[k] = tags[--ntags];
            lens[k] = lens[ntags];
        } else { /* a refusal or no answer: answers to what was sent may still come */
            br_logbuf_resend(b);
            if ((r >> 12) % 2)
                ntags = 0; /* (or not) */
        }
        assert_true(br_logbuf_bytes(b) <= 100);
    }
    /* the rest is sent and taken (what waits for an answer, none comes: the second
     * resend counts it) */
    br_logbuf_resend(b);
    br_logbuf_resend(b);
    br_logchunk_t c;
    while (br_logbuf_peek(b, 1 << 30, 5, 1, &c)) {
        taken += (int64_t)c.len;
        br_logbuf_pop(b);
    }
    assert_int_equal(br_logbuf_bytes(b), 0);
    assert_int_equal(taken + br_logbuf_dropped(b), put);
    br_logbuf_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_and_readiness),
        cmocka_unit_test(test_drops_oldest_and_counts),
        cmocka_unit_test(test_drops_across_streams_oldest_first),
        cmocka_unit_test(test_sent_chunks_wait_to_be_taken),
        cmocka_unit_test(test_bound_lets_sent_chunks_go),
        cmocka_unit_test(test_let_go_chunk_after_a_refused_one_waits_for_its_answer),
        cmocka_unit_test(test_every_byte_taken_or_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
