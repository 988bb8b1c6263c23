/* test_ignore.c - git's ignore rules (proto/ignore.c): wildmatch on a table of
 * patterns with their known results, and the lists' precedence (the last pattern of
 * a list decides, a nearer list before a further one, bramble's after git's). That
 * the whole packer lists what git lists is test_pack.c's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ignore.h"

typedef struct {
    const char *pattern, *text;
    int pathname, want;
} wm_case_t;

static const wm_case_t WM[] = {
    {"foo", "foo", 1, 1},
    {"foo", "bar", 1, 0},
    {"", "", 1, 1},
    {"???", "foo", 1, 1},
    {"??", "foo", 1, 0},
    {"*", "foo", 1, 1},
    {"f*", "foo", 1, 1},
    {"*f", "foo", 1, 0},
    {"*foo*", "foo", 1, 1},
    {"*ob*a*r*", "foobar", 1, 1},
    {"*ab", "aaaaaaabababab", 1, 1},
    {"foo\\*", "foo*", 1, 1},
    {"foo\\*bar", "foobar", 1, 0},
    {"f\\\\oo", "f\\oo", 1, 1},
    {"foo\\", "foo\\", 1, 0}, /* a `\` at the end matches nothing */
    {"*[al]?", "ball", 1, 1},
    {"[ten]", "ten", 1, 0},
    {"**[!te]", "ten", 1, 1},
    {"**[!ten]", "ten", 1, 0},
    {"t[a-g]n", "ten", 1, 1},
    {"t[!a-g]n", "ten", 1, 0},
    {"t[!a-g]n", "ton", 1, 1},
    {"t[^a-g]n", "ton", 1, 1},
    {"a[]]b", "a]b", 1, 1},
    {"a[]-]b", "a-b", 1, 1},
    {"a[]-]b", "a]b", 1, 1},
    {"a[]-]b", "aab", 1, 0},
    {"a[]a-]b", "aab", 1, 1},
    {"]", "]", 1, 1},
    {"[abc", "a", 1, 0}, /* never closed: matches nothing */
    {"[[:alpha:]][[:digit:]][[:upper:]]", "a1B", 1, 1},
    {"[[:digit:][:upper:][:space:]]", "a", 1, 0},
    {"[[:digit:][:upper:][:space:]]", "A", 1, 1},
    {"[[:digit:][:upper:][:space:]]", " ", 1, 1},
    {"[a-c[:digit:]x-z]", "5", 1, 1},
    {"[a-c[:digit:]x-z]", "b", 1, 1},
    {"[a-c[:digit:]x-z]", "y", 1, 1},
    {"[a-c[:digit:]x-z]", "q", 1, 0},
    {"[[:foo:]]", "a", 1, 0}, /* an unknown class matches nothing */
    {"[\\-_]", "-", 1, 1},
    {"[\\]]", "]", 1, 1},
    {"foo*bar", "foo/baz/bar", 1, 0},
    {"foo*bar", "foo/baz/bar", 0, 1},
    {"foo**bar", "foo/baz/bar", 1, 0},
    {"foo?bar", "foo/bar", 1, 0},
    {"foo?bar", "foo/bar", 0, 1},
    {"foo[/]bar", "foo/bar", 1, 0},
    {"foo/**/bar", "foo/bar", 1, 1},
    {"foo/**/bar", "foo/baz/bar", 1, 1},
    {"foo/**/bar", "foo/b/a/z/bar", 1, 1},
    {"foo/**/**/bar", "foo/b/a/z/bar", 1, 1},
    {"**/foo", "foo", 1, 1},
    {"**/foo", "XXX/foo", 1, 1},
    {"**/foo", "bar/baz/foo", 1, 1},
    {"*/foo", "bar/baz/foo", 1, 0},
    {"**/bar*", "foo/bar/baz", 1, 0},
    {"**/bar/*", "deep/foo/bar/baz", 1, 1},
    {"**/bar/*", "deep/foo/bar/baz/", 1, 0},
    {"**/bar/**", "deep/foo/bar/baz/", 1, 1},
    {"**/bar/*", "deep/foo/bar", 1, 0},
    {"**/bar/**", "deep/foo/bar/", 1, 1},
    {"*/bar/**", "foo/bar/baz/x", 1, 1},
    {"*/bar/**", "deep/foo/bar/baz/x", 1, 0},
    {"**/bar/*/*", "deep/foo/bar/baz/x", 1, 1},
    {"a/**", "a/b/c", 1, 1},
    {"a/**", "a", 1, 0},
    {"a**", "a/b", 1, 0}, /* `**` not between slashes is one `*` */
    {"-*-*-*-*-*-*-12-*-*-*-m-*-*-*",
     "-adobe-courier-bold-o-normal--12-120-75-75-m-70-iso8859-1", 1, 1},
    {"XXX/*/*/*/*/*/*/12/*/*/*/m/*/*/*",
     "XXX/adobe/courier/bold/o/normal//12/120/75/75/m/70/iso8859/1", 1, 1},
    {"XXX/*/*/*/*/*/*/12/*/*/*/m/*/*/*",
     "XXX/adobe/courier/bold/o/normal//12/120/75/75/X/70/iso8859/1", 1, 0},
    {"**/*a*b*g*n*t", "abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txt", 1, 1},
    {"**/*a*b*g*n*t", "abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txtz", 1, 0},
    {"*.py", "a.py", 0, 1},
    {"*.py", "a.pyc", 0, 0},
};

static void test_wildmatch_table(void **state)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof(WM) / sizeof(WM[0]); i++) {
        const wm_case_t *c = &WM[i];
        int got = br_wildmatch(c->pattern, c->text, c->pathname);
        if (got != c->want) {
            printf("wildmatch(\"%s\", \"%s\", pathname=%d) = %d, want %d\n", c->pattern,
                   c->text, c->pathname, got, c->want);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

static br_ignore_t *rules(const char *base, const char *text, int bramble)
{
    br_ignore_t *ig = br_ignore_new(NULL);
    assert_non_null(ig);
    assert_int_equal(br_ignore_push(ig, base, text, strlen(text), bramble, NULL), 0);
    return ig;
}

/* The last pattern that matches decides; a `/` makes a pattern match from its
 * file's directory only; a trailing `/` matches directories only. */
static void test_one_list(void **state)
{
    br_ignore_t *ig = rules("", "# a comment\n\n*.log\n!keep.log\n/top\nbuild/\n"
                            "docs/*.md\ntrailing   \nkept\\ \n\\#hash\n\\!bang\r\n",
                            0);
    assert_int_equal(br_ignore_match(ig, "x.log", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "a/b/x.log", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "a/keep.log", 0, 0), 0);
    assert_int_equal(br_ignore_match(ig, "top", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "a/top", 0, 0), 0);
    assert_int_equal(br_ignore_match(ig, "build", 1, 0), 1);
    assert_int_equal(br_ignore_match(ig, "a/build", 1, 0), 1);
    assert_int_equal(br_ignore_match(ig, "build", 0, 0), 0); /* a file named build */
    assert_int_equal(br_ignore_match(ig, "docs/a.md", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "docs/x/a.md", 0, 0), 0);
    assert_int_equal(br_ignore_match(ig, "trailing", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "kept ", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "kept", 0, 0), 0);
    assert_int_equal(br_ignore_match(ig, "#hash", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "!bang", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "# a comment", 0, 0), 0);
    br_ignore_destroy(&ig);
    assert_null(ig);
}

/* A list read in a directory speaks only of paths below it, and before the lists
 * above it; bramble's lists are the only ones asked with bramble_only. */
static void test_lists_stack(void **state)
{
    br_ignore_t *ig = rules("", "*.bin\nsub/x\n", 0);
    assert_int_equal(br_ignore_push(ig, "sub", "!*.bin\n", 7, 0, NULL), 0);
    assert_int_equal(br_ignore_match(ig, "a.bin", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "sub/a.bin", 0, 0), 0);
    assert_int_equal(br_ignore_match(ig, "subway/a.bin", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "sub/x", 0, 0), 1);
    size_t mark = br_ignore_depth(ig);
    assert_int_equal(br_ignore_push(ig, "sub", "!x\nbig/\n", 8, 1, NULL), 0);
    assert_int_equal(br_ignore_match(ig, "sub/x", 0, 0), 0);   /* bramble's wins */
    assert_int_equal(br_ignore_match(ig, "sub/big", 1, 1), 1); /* bramble's alone */
    assert_int_equal(br_ignore_match(ig, "sub/a.bin", 0, 1), 0);
    br_ignore_pop_to(ig, mark);
    assert_int_equal(br_ignore_match(ig, "sub/x", 0, 0), 1);
    assert_int_equal(br_ignore_match(ig, "sub/big", 1, 1), 0);
    br_ignore_pop_to(ig, 0);
    assert_int_equal(br_ignore_match(ig, "a.bin", 0, 0), 0);
    br_ignore_destroy(&ig);
}

/* A file that is not there is an empty list; a byte order mark is not a pattern. */
static void test_files(void **state)
{
    br_ignore_t *ig = br_ignore_new(NULL);
    assert_int_equal(br_ignore_push_file(ig, "", "/nonexistent/.gitignore", 0, NULL), 0);
    assert_int_equal(br_ignore_depth(ig), 1);
    assert_int_equal(br_ignore_push(ig, "", "\xEF\xBB\xBF*.o\n", 7, 0, NULL), 0);
    assert_int_equal(br_ignore_match(ig, "a.o", 0, 0), 1);
    br_ignore_destroy(&ig);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wildmatch_table),
        cmocka_unit_test(test_one_list),
        cmocka_unit_test(test_lists_stack),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
