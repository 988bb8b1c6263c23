/* test_gwkeys.c - the gateway's API keys (gateway/keys.c) and each user's requests
 * a minute (gateway/ratelimit.c): a key is found by its text through the hash the
 * coordinator sends, never by the hash itself; a malformed list of keys changes
 * nothing; the Authorization header's scheme; the token bucket (full at first,
 * one request per 60/rpm s after, a lowered limit at once, users apart). Time is
 * passed in: nothing here sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "keys.h"
#include "ratelimit.h"
#include "token.h"

/* Keys as the coordinator sends them: for each text, its hash, user and models. */
static int update(gw_keys_t *k, const char *const *texts, const char *const *users,
                  const char *models, int rpm)
{
    json_t *arr = json_array();
    for (int i = 0; texts[i]; i++) {
        char hash[BR_TOKEN_HASH_HEX + 1];
        br_token_hash(texts[i], hash, NULL);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:i, s:o, s:i}", "hash", hash,
                                             "user", users[i], "user_id", i + 2, "models",
                                             json_loads(models, 0, NULL), "rpm", rpm));
    }
    int rc = gw_keys_update(k, arr);
    json_decref(arr);
    return rc;
}

static void test_found_by_text(void **state)
{
    (void)state;
    gw_keys_t *k = gw_keys_new();
    static const char *const texts[] = {"brk-aaa", "brk-bbb", "brk-ccc", NULL};
    static const char *const users[] = {"ann", "bob", "cy", NULL};
    assert_null(gw_keys_find(k, "brk-aaa")); /* none yet */
    assert_int_equal(update(k, texts, users, "[\"llama\"]", 5), 0);
    assert_int_equal(gw_keys_count(k), 3);
    for (int i = 0; texts[i]; i++) {
        const gw_key_t *key = gw_keys_find(k, texts[i]);
        assert_non_null(key);
        assert_string_equal(key->user, users[i]);
        assert_int_equal(key->user_id, i + 2);
        assert_int_equal(key->rpm, 5);
        assert_string_equal(json_string_value(json_array_get(key->models, 0)), "llama");
    }
    char hash[BR_TOKEN_HASH_HEX + 1];
    br_token_hash("brk-aaa", hash, NULL);
    assert_null(gw_keys_find(k, hash)); /* the hash is no key */
    assert_null(gw_keys_find(k, "brk-aab"));
    assert_null(gw_keys_find(k, ""));
    assert_null(gw_keys_find(k, NULL));
    /* a new list replaces the old: a key left out (revoked) is found no more */
    static const char *const fewer[] = {"brk-bbb", NULL};
    static const char *const fewer_users[] = {"bob", NULL};
    assert_int_equal(update(k, fewer, fewer_users, "[]", 0), 0);
    assert_null(gw_keys_find(k, "brk-aaa"));
    assert_non_null(gw_keys_find(k, "brk-bbb"));
    assert_int_equal(json_array_size(gw_keys_find(k, "brk-bbb")->models), 0);
    gw_keys_destroy(&k);
    assert_null(k);
}

static void test_malformed_changes_nothing(void **state)
{
    (void)state;
    gw_keys_t *k = gw_keys_new();
    static const char *const texts[] = {"brk-aaa", NULL};
    static const char *const users[] = {"ann", NULL};
    assert_int_equal(update(k, texts, users, "[]", 0), 0);
    static const char *const bad[] = {
        "{}",
        "[{\"hash\": \"abc\", \"user\": \"x\", \"user_id\": 1, \"models\": []}]",
        "[{\"user\": \"x\", \"user_id\": 1, \"models\": []}]",
        "[{\"hash\": \"" "0123456789012345678901234567890123456789012345678901234567890123"
        "\", \"user\": \"x\", \"user_id\": 1, \"models\": [1]}]",
        "[{\"hash\": \"" "0123456789012345678901234567890123456789012345678901234567890123"
        "\", \"user\": \"x\", \"user_id\": 1, \"models\": [], \"rpm\": -1}]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *v = json_loads(bad[i], 0, NULL);
        assert_non_null(v);
        assert_int_equal(gw_keys_update(k, v), -1);
        json_decref(v);
        assert_non_null(gw_keys_find(k, "brk-aaa"));
        assert_int_equal(gw_keys_count(k), 1);
    }
    gw_keys_destroy(&k);
}

static void test_bearer(void **state)
{
    (void)state;
    assert_string_equal(gw_keys_bearer("Bearer brk-x"), "brk-x");
    assert_string_equal(gw_keys_bearer("bearer  brk-x"), "brk-x");
    assert_null(gw_keys_bearer("Basic dXNlcjpwYXNz"));
    assert_null(gw_keys_bearer("Bearer "));
    assert_null(gw_keys_bearer("Bearerbrk-x"));
    assert_null(gw_keys_bearer(NULL));
}

static void test_bucket(void **state)
{
    (void)state;
    gw_ratelimit_t *rl = gw_ratelimit_new();
    int wait;
    /* full at first: 3 at once, then the 4th waits 20 s (60 / 3) */
    for (int i = 0; i < 3; i++)
        assert_int_equal(gw_ratelimit_take(rl, 7, 3, 1000, &wait), 1);
    assert_int_equal(gw_ratelimit_take(rl, 7, 3, 1000, &wait), 0);
    assert_int_equal(wait, 20);
    assert_int_equal(gw_ratelimit_take(rl, 7, 3, 11000, &wait), 0); /* half-way */
    assert_int_equal(wait, 10);
    assert_int_equal(gw_ratelimit_take(rl, 7, 3, 21000, &wait), 1);
    assert_int_equal(gw_ratelimit_take(rl, 7, 3, 21000, &wait), 0);
    /* another user has their own bucket; no limit is no limit */
    assert_int_equal(gw_ratelimit_take(rl, 9, 1, 21000, &wait), 1);
    assert_int_equal(gw_ratelimit_take(rl, 9, 1, 21000, &wait), 0);
    assert_int_equal(wait, 60);
    for (int i = 0; i < 100; i++)
        assert_int_equal(gw_ratelimit_take(rl, 11, 0, 21000, &wait), 1);
    assert_int_equal(gw_ratelimit_users(rl), 2);
    /* a quiet while fills the bucket to its limit, no more */
    for (int i = 0; i < 3; i++)
        assert_int_equal(gw_ratelimit_take(rl, 7, 3, 10000000, &wait), 1);
    assert_int_equal(gw_ratelimit_take(rl, 7, 3, 10000000, &wait), 0);
    /* a limit lowered holds at once */
    for (int i = 0; i < 1000; i++)
        gw_ratelimit_take(rl, 12, 600, 0, &wait);
    assert_int_equal(gw_ratelimit_take(rl, 12, 600, 0, &wait), 0);
    assert_int_equal(gw_ratelimit_take(rl, 12, 2, 60000, &wait), 1);
    assert_int_equal(gw_ratelimit_take(rl, 12, 2, 60000, &wait), 1);
    assert_int_equal(gw_ratelimit_take(rl, 12, 2, 60000, &wait), 0);
    /* many users stay apart (kept sorted, whatever order they come in) */
    for (int u = 0; u < 1000; u++)
        assert_int_equal(gw_ratelimit_take(rl, 1000 + u * 7919 % 1000, 1, 0, &wait), 1);
    for (int u = 0; u < 1000; u++)
        assert_int_equal(gw_ratelimit_take(rl, 1000 + u, 1, 0, &wait), 0);
    assert_int_equal(gw_ratelimit_users(rl), 1003);
    gw_ratelimit_destroy(&rl);
    assert_null(rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_found_by_text),
        cmocka_unit_test(test_malformed_changes_nothing),
        cmocka_unit_test(test_bearer),
        cmocka_unit_test(test_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
