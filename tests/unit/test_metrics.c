/* test_metrics.c - the Prometheus text page (coordinator/http/metrics.c): numbers,
 * escaping, families and histograms, table-driven. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"

static void test_numbers(void **state)
{
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0, "0"},
        {1, "1"},
        {-3, "-3"},
        {2.5, "2.5"},
        {0.1, "0.1"},
        {0.0005, "0.0005"},
        {1e-9, "1e-09"},
        {123456789012, "123456789012"},
        {1e20, "1e+20"},
        {1.0 / 3, "0.3333333333333333"},
        {1796128666.973, "1796128666.973"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(br_metrics_number(cases[i].v, buf, sizeof(buf)),
                            cases[i].want);
    assert_string_equal(br_metrics_number(INFINITY, buf, sizeof(buf)), "+Inf");
    assert_string_equal(br_metrics_number(-INFINITY, buf, sizeof(buf)), "-Inf");
    assert_string_equal(br_metrics_number(NAN, buf, sizeof(buf)), "NaN");
}

static void test_families_and_escaping(void **state)
{
    br_metrics_t *m = br_metrics_new();
    assert_non_null(m);
    br_metrics_family(m, "x_total", "counter", "Help with a \\ and a\nnewline.");
    const char *labels[] = {"user", "a\"b\\c\nd", "state", "ok", NULL};
    br_metrics_sample(m, "x_total", labels, 3);
    br_metrics_sample(m, "x_total", NULL, 0.25);
    const char *empty[] = {"user", NULL, NULL}; /* a missing value is "" */
    br_metrics_sample(m, "x_total", empty, 1);
    size_t len = 0;
    const char *text = br_metrics_text(m, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    assert_string_equal(text,
                        "# HELP x_total Help with a \\\\ and a\\nnewline.\n"
                        "# TYPE x_total counter\n"
                        "x_total{user=\"a\\\"b\\\\c\\nd\",state=\"ok\"} 3\n"
                        "x_total 0.25\n"
                        "x_total{user=\"\"} 1\n");
    br_metrics_reset(m);
    assert_string_equal(br_metrics_text(m, &len), "");
    assert_int_equal(len, 0);
    br_metrics_destroy(&m);
    assert_null(m);
    br_metrics_destroy(&m); /* NULL is fine */
    br_metrics_destroy(NULL);
}

static void test_histogram(void **state)
{
    static const double le[] = {0.5, 1, 5};
    br_histogram_t h;
    br_histogram_init(&h, le, 3);
    static const double obs[] = {0.25, 0.5, 0.75, 1, 4, 100, -2, NAN};
    for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++)
        br_histogram_observe(&h, obs[i]);
    assert_int_equal(h.count, 7); /* NaN ignored, -2 counted as 0 */
    br_metrics_t *m = br_metrics_new();
    const char *labels[] = {"node", "n1", NULL};
    br_metrics_family(m, "w_seconds", "histogram", "Waits.");
    br_metrics_histogram(m, "w_seconds", labels, &h);
    assert_string_equal(br_metrics_text(m, NULL),
                        "# HELP w_seconds Waits.\n"
                        "# TYPE w_seconds histogram\n"
                        "w_seconds_bucket{node=\"n1\",le=\"0.5\"} 3\n"
                        "w_seconds_bucket{node=\"n1\",le=\"1\"} 5\n"
                        "w_seconds_bucket{node=\"n1\",le=\"5\"} 6\n"
                        "w_seconds_bucket{node=\"n1\",le=\"+Inf\"} 7\n"
                        "w_seconds_sum{node=\"n1\"} 106.5\n"
                        "w_seconds_count{node=\"n1\"} 7\n");
    br_metrics_reset(m);
    br_histogram_t empty;
    br_histogram_init(&empty, le, 0);
    br_metrics_histogram(m, "e", NULL, &empty);
    assert_string_equal(br_metrics_text(m, NULL),
                        "e_bucket{le=\"+Inf\"} 0\ne_sum 0\ne_count 0\n");
    br_metrics_destroy(&m);
}

/* More bounds than a histogram holds: the first BR_HISTOGRAM_MAX are kept. */
static void test_histogram_bounds_capped(void **state)
{
    double le[BR_HISTOGRAM_MAX + 4];
    for (int i = 0; i < BR_HISTOGRAM_MAX + 4; i++)
        le[i] = i + 1;
    br_histogram_t h;
    br_histogram_init(&h, le, BR_HISTOGRAM_MAX + 4);
    assert_int_equal(h.n, BR_HISTOGRAM_MAX);
    br_histogram_observe(&h, 1000);
    assert_int_equal(h.counts[BR_HISTOGRAM_MAX], 1);
}

/* A big page grows its buffer and stays whole. */
static void test_big_page(void **state)
{
    br_metrics_t *m = br_metrics_new();
    char name[32];
    br_metrics_family(m, "n", "gauge", "Many.");
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "node-%d", i);
        const char *labels[] = {"node", name, NULL};
        br_metrics_sample(m, "n", labels, i);
    }
    size_t len;
    const char *text = br_metrics_text(m, &len);
    assert_non_null(strstr(text, "n{node=\"node-4999\"} 4999\n"));
    assert_int_equal(text[len], '\0');
    br_metrics_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_families_and_escaping),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_histogram_bounds_capped),
        cmocka_unit_test(test_big_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
