/* test_array.c - unit tests for job array ranges (proto/array.c) and the spec's
 * array: field (proto/spec.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "spec.h"

static void test_good(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int count, max, first, last;
        const char *range;
    } cases[] = {
        {"0-99", 100, 0, 0, 99, "0-99"},
        {"0-99%8", 100, 8, 0, 99, "0-99"},
        {"5", 1, 0, 5, 5, "5"},
        {"1,3,5-9%2", 7, 2, 1, 9, "1,3,5-9"},
        {"0-9999", 10000, 0, 0, 9999, "0-9999"},
        {"7-7%1", 1, 1, 7, 7, "7"},
        {"0-3%99", 4, 99, 0, 3, "0-3"},
        {"990000-999999", 10000, 0, 990000, 999999, "990000-999999"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_array_t a;
        br_err_t err = {0};
        char buf[BR_ARRAY_TEXT_MAX];
        int rc = br_array_parse(cases[i].text, &a, &err);
        if (rc != 0)
            fail_msg("%s: %s", cases[i].text, err.text);
        assert_int_equal(a.count, cases[i].count);
        assert_int_equal(a.max, cases[i].max);
        assert_int_equal(br_array_index(&a, 0), cases[i].first);
        assert_int_equal(br_array_index(&a, a.count - 1), cases[i].last);
        assert_int_equal(br_array_index(&a, a.count), -1);
        assert_int_equal(br_array_index(&a, -1), -1);
        assert_string_equal(br_array_range_text(&a, buf, sizeof(buf)), cases[i].range);
    }
    br_array_t a;
    assert_int_equal(br_array_parse("1,3,5-9", &a, NULL), 0);
    int want[] = {1, 3, 5, 6, 7, 8, 9};
    for (int k = 0; k < 7; k++)
        assert_int_equal(br_array_index(&a, k), want[k]);
}

static void test_bad(void **state)
{
    (void)state;
    static const struct {
        const char *text, *words;
    } cases[] = {
        {"", "expected a range"},
        {"abc", "expected a range like 0-99"},
        {"-1-5", "not negative"},
        {"0--5", "not negative"},
        {"9-3", "9-3: the start is above the end"},
        {"0-99%0", "%0"},
        {"0-99%-2", "N is at least 1"},
        {"0-99%", "expected a range"},
        {"0-99%8x", "expected a range"},
        {"0-10000", "10001 tasks, more than 10000"},
        {"0-999999", "more than 10000"},
        {"0-1000000", "at most 999999"},
        {"99999999999999999999", "at most 999999"},
        {"0-9%99999999999999999999", "N is 1 to 10000"},
        {"0-9%10001", "N is 1 to 10000"},
        {"5,3", "must rise"},
        {"0-5,5-9", "must rise"},
        {"1,", "expected a range"},
        {",1", "expected a range"},
        {"0-99 %8", "expected a range"},
        {"1.5", "expected a range"},
        {"0x10", "expected a range"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_array_t a;
        br_err_t err = {0};
        if (br_array_parse(cases[i].text, &a, &err) == 0)
            fail_msg("'%s' was taken", cases[i].text);
        if (!strstr(err.text, cases[i].words))
            fail_msg("'%s': '%s' lacks '%s'", cases[i].text, err.text, cases[i].words);
    }
    /* more pieces than allowed */
    char many[4 * BR_ARRAY_MAX_PIECES + 8] = "";
    for (int i = 0; i <= BR_ARRAY_MAX_PIECES; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s%d", i ? "," : "",
                 i);
    br_array_t a;
    br_err_t err = {0};
    assert_int_equal(br_array_parse(many, &a, &err), -1);
    assert_non_null(strstr(err.text, "pieces"));
}

static br_spec_t *parse(const char *yaml, br_err_t *err)
{
    return br_spec_parse(yaml, strlen(yaml), NULL, 0, err);
}

static void test_spec_field(void **state)
{
    (void)state;
    br_err_t err = {0};
    br_spec_t *s =
        parse("name: sweep\ncommand: echo $BRAMBLE_ARRAY_INDEX\narray: 0-99%8\n", &err);
    assert_non_null(s);
    assert_int_equal(s->array.count, 100);
    assert_int_equal(s->array.max, 8);
    json_t *j = br_spec_to_json(s);
    json_t *arr = json_object_get(j, "array");
    assert_string_equal(json_string_value(json_object_get(arr, "range")), "0-99");
    assert_int_equal(json_integer_value(json_object_get(arr, "count")), 100);
    assert_int_equal(json_integer_value(json_object_get(arr, "max")), 8);
    json_decref(j);
    br_spec_destroy(&s);

    s = parse("name: one\ncommand: true\n", &err); /* no array: no key */
    j = br_spec_to_json(s);
    assert_null(json_object_get(j, "array"));
    assert_int_equal(s->array.count, 0);
    json_decref(j);
    br_spec_destroy(&s);

    s = parse("name: q\ncommand: true\narray: \"1,3,5-9%2\"\n", &err);
    assert_non_null(s);
    assert_int_equal(s->array.count, 7);
    br_spec_destroy(&s);

    static const char *const set[] = {"array=0-9%3"};
    s = br_spec_parse("name: q\ncommand: true\n", 22, set, 1, &err);
    assert_non_null(s);
    assert_int_equal(s->array.count, 10);
    br_spec_destroy(&s);
}

static void test_spec_errors(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *want;
    } cases[] = {
        {"name: a\ncommand: true\n\narray: 0-100000\n",
         "line 4: array: 100001 tasks, more than 10000"},
        {"name: a\ncommand: true\narray: -3-5\n",
         "line 3: array: indices are not negative"},
        {"name: a\ncommand: true\narray: 9-3\n",
         "line 3: array: 9-3: the start is above"},
        {"name: a\ncommand: true\narray: lots\n",
         "line 3: array: expected a range like"},
        {"name: a\ncommand: true\narray: 0-9%0\n", "line 3: array: %0"},
        {"name: a\ncommand: true\narray: [1, 2]\n",
         "line 3: array: expected a range like 0-99%8, got a list"},
        {"name: a\nkind: service\ncommand: true\narray: 0-3\n",
         "line 4: array: only for kind: train"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_err_t err = {0};
        br_spec_t *s = parse(cases[i].yaml, &err);
        if (s)
            fail_msg("case %zu was taken", i);
        if (strncmp(err.text, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: '%s', wanted '%s'", i, err.text, cases[i].want);
    }
    br_err_t err = {0};
    static const char *const set[] = {"array=0-99%"};
    assert_null(br_spec_parse("name: q\ncommand: true\n", 22, set, 1, &err));
    assert_non_null(strstr(err.text, "--set"));
    assert_non_null(strstr(err.text, "array: expected a range"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_spec_field),
        cmocka_unit_test(test_spec_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
