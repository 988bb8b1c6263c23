/* test_textbuf.c - the growing text buffer (proto/textbuf.c): appends across
 * growth stay NUL-terminated and whole, a failed buffer takes nothing more,
 * reset empties it and keeps its memory, free gives it back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "textbuf.h"

static void test_appends_across_growth(void **state)
{
    (void)state;
    br_textbuf_t b = {0};
    char want[5000];
    for (int i = 0; i < 1000; i++) { /* past several doublings */
        br_textbuf_put(&b, "abcd", i % 5);
        br_textbuf_putc(&b, 'x');
    }
    size_t n = 0;
    for (int i = 0; i < 1000; i++) {
        memcpy(want + n, "abcd", (size_t)(i % 5));
        n += (size_t)(i % 5);
        want[n++] = 'x';
    }
    want[n] = '\0';
    assert_int_equal(b.len, n);
    assert_string_equal(b.p, want);
    assert_false(b.failed);
    size_t cap = b.cap;
    br_textbuf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.p, "");
    assert_int_equal(b.cap, cap); /* its memory kept */
    br_textbuf_put(&b, "again", 5);
    assert_string_equal(b.p, "again");
    br_textbuf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void test_failed_takes_nothing(void **state)
{
    (void)state;
    br_textbuf_t b = {0};
    br_textbuf_put(&b, "kept", 4);
    b.failed = 1; /* as after running out of memory */
    br_textbuf_put(&b, "lost", 4);
    br_textbuf_putc(&b, '!');
    assert_int_equal(br_textbuf_grow(&b, 1), -1);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.p, "kept");
    br_textbuf_reset(&b); /* usable again */
    br_textbuf_putc(&b, 'y');
    assert_string_equal(b.p, "y");
    br_textbuf_free(&b);
    br_textbuf_free(&b); /* (twice: nothing to give back) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends_across_growth),
        cmocka_unit_test(test_failed_takes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
