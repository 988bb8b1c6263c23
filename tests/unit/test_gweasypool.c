/* test_gweasypool.c - the gateway's easy handles kept for reuse
 * (gateway/easypool.c): a handle given back is handed out again, reset (an option
 * set before does not survive); the pool keeps at most its bound and cleans up the
 * rest; the shared request headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "easypool.h"

static void test_reuse_and_bound(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    gw_easypool_t *p = gw_easypool_new(2);
    assert_non_null(p);
    CURL *a = gw_easypool_get(p), *b = gw_easypool_get(p), *c = gw_easypool_get(p);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(gw_easypool_kept(p), 0);
    /* an option of the last use is gone when the handle comes back */
    char *priv = NULL;
    curl_easy_setopt(a, CURLOPT_PRIVATE, (void *)p);
    gw_easypool_put(p, a);
    gw_easypool_put(p, b);
    gw_easypool_put(p, c); /* over the bound: cleaned up (ASan would see a leak) */
    gw_easypool_put(p, NULL);
    assert_int_equal(gw_easypool_kept(p), 2);
    CURL *again = gw_easypool_get(p);
    assert_true(again == b); /* the last kept first */
    again = gw_easypool_get(p);
    assert_true(again == a);
    curl_easy_getinfo(again, CURLINFO_PRIVATE, &priv);
    assert_null(priv);
    gw_easypool_put(p, again);
    gw_easypool_put(p, b);
    /* the headers every try sends */
    const struct curl_slist *h = gw_easypool_headers(p);
    assert_string_equal(h->data, "Content-Type: application/json");
    assert_string_equal(h->next->data, "Expect:");
    assert_null(h->next->next);
    gw_easypool_destroy(&p); /* (the two kept go with it) */
    assert_null(p);
    curl_global_cleanup();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_and_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
