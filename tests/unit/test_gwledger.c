/* test_gwledger.c - what the gateway counts (gateway/ledger.c) and the tokens it
 * reads from a replica's answer (gateway/exchange.c): rows per user and model;
 * no row without a model; a report kept, and sent again with the same id, until
 * the coordinator takes it, while counting goes on into the next; the /metrics
 * families; "usage" read from the end of a JSON answer and of a stream (the last
 * object wins over earlier nulls, nested details skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exchange.h"
#include "ledger.h"

static void add(gw_ledger_t *l, const char *model, int64_t user, int status, int64_t pt,
                int64_t ct)
{
    gw_answer_t a = {.model = model, .user_id = user, .status = status, .seconds = 0.25,
                     .ttft = status == 200 ? 0.05 : -1, .prompt_tokens = pt,
                     .completion_tokens = ct};
    gw_ledger_add(l, &a);
}

/* The report's row for user and model (borrowed), or NULL. */
static const json_t *row(const json_t *r, int64_t user, const char *model)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r, "usage"), i, v)
        if (json_integer_value(json_object_get(v, "user_id")) == user &&
            strcmp(json_string_value(json_object_get(v, "model")), model) == 0)
            return v;
    return NULL;
}

static json_int_t num(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void test_reports(void **state)
{
    (void)state;
    gw_ledger_t *l = gw_ledger_new();
    assert_null(gw_ledger_report(l)); /* nothing counted */
    add(l, "llama", 2, 200, 5, 7);
    add(l, "llama", 2, 200, 1, 2);
    add(l, "llama", 2, 429, 0, 0);
    add(l, "llama", 0, 401, 0, 0);
    add(l, "", 2, 404, 0, 0); /* no model: /metrics only */
    const json_t *r = gw_ledger_report(l);
    assert_non_null(r);
    char id[64];
    snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(r, "id")));
    assert_int_equal(strlen(id), 24);
    assert_int_equal(json_array_size(json_object_get(r, "usage")), 2);
    const json_t *a = row(r, 2, "llama");
    assert_non_null(a);
    assert_int_equal(num(a, "requests"), 3);
    assert_int_equal(num(a, "errors"), 1);
    assert_int_equal(num(a, "prompt_tokens"), 6);
    assert_int_equal(num(a, "completion_tokens"), 9);
    assert_int_equal(num(a, "ms"), 750);
    assert_int_equal(num(row(r, 0, "llama"), "errors"), 1);
    /* not taken: the same report again, while new counts wait for the next */
    add(l, "mistral", 3, 200, 1, 1);
    assert_ptr_equal(gw_ledger_report(l), r);
    gw_ledger_reported(l, "not-its-id");
    assert_ptr_equal(gw_ledger_report(l), r);
    gw_ledger_reported(l, id);
    r = gw_ledger_report(l);
    assert_non_null(r);
    assert_string_not_equal(json_string_value(json_object_get(r, "id")), id);
    assert_int_equal(json_array_size(json_object_get(r, "usage")), 1);
    assert_int_equal(num(row(r, 3, "mistral"), "requests"), 1);
    gw_ledger_reported(l, json_string_value(json_object_get(r, "id")));
    assert_null(gw_ledger_report(l));

    br_metrics_t *m = br_metrics_new();
    gw_ledger_metrics(l, m);
    size_t len;
    const char *page = br_metrics_text(m, &len);
    assert_non_null(strstr(page, "bramble_gateway_requests_total{model=\"llama\",code=\"200\"} 2\n"));
    assert_non_null(strstr(page, "bramble_gateway_requests_total{model=\"\",code=\"404\"} 1\n"));
    assert_non_null(strstr(page, "bramble_gateway_request_seconds_count{model=\"llama\"} 4\n"));
    assert_non_null(strstr(page, "bramble_gateway_ttft_seconds_count{model=\"llama\"} 2\n"));
    assert_non_null(
        strstr(page, "bramble_gateway_tokens_total{model=\"llama\",kind=\"completion\"} 9\n"));
    br_metrics_destroy(&m);
    gw_ledger_destroy(&l);
    assert_null(l);
}

static void usage_of(const char *answer, int64_t *pt, int64_t *ct)
{
    gw_exchange_t *x = calloc(1, sizeof(*x));
    size_t n = strlen(answer);
    const char *p = n > GW_EXCHANGE_TAIL ? answer + n - GW_EXCHANGE_TAIL : answer;
    x->tail_len = strlen(p);
    memcpy(x->tail, p, x->tail_len);
    gw_exchange_usage(x, pt, ct);
    free(x);
}

static void test_usage_read(void **state)
{
    (void)state;
    int64_t pt, ct;
    usage_of("{\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,"
             "\"prompt_tokens_details\":{\"cached_tokens\":3},\"completion_tokens\":34,"
             "\"total_tokens\":46}}",
             &pt, &ct);
    assert_int_equal(pt, 12);
    assert_int_equal(ct, 34);
    usage_of("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
             "data: {\"choices\":[],\"usage\": {\"prompt_tokens\": 3, \"completion_tokens\": 9}}\n\n"
             "data: [DONE]\n\n",
             &pt, &ct);
    assert_int_equal(pt, 3);
    assert_int_equal(ct, 9);
    usage_of("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
             "data: [DONE]\n\n",
             &pt, &ct);
    assert_int_equal(pt + ct, 0);
    usage_of("{\"usage\":{\"prompt_tokens\":5,\"completion_tok", &pt, &ct); /* cut off */
    assert_int_equal(pt + ct, 0);
    /* a long answer: only its end is kept, where the usage is */
    size_t big = 3 * GW_EXCHANGE_TAIL;
    char *text = malloc(big + 200);
    memset(text, 'x', big);
    strcpy(text + big, "\",\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":8}}");
    usage_of(text, &pt, &ct);
    assert_int_equal(pt, 7);
    assert_int_equal(ct, 8);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reports),
        cmocka_unit_test(test_usage_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
