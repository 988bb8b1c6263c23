/* test_overlaynet.c - the overlay's network, keys and addresses (overlaynet.h,
 * wgkey.h): a node keeps its address for good, no node gets another's key or
 * address, a net that is full refuses the next node and disturbs no other, and
 * keys are WireGuard's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <sodium.h>

#include "coord_fixture.h"
#include "overlaynet.h"
#include "wgkey.h"

static json_t *said(const char *key)
{
    return json_pack("{s:s, s:s, s:b}", "mode", "userspace", "pubkey", key, "relay", 0);
}

/* hello of n with key: the node's place (kept in its info, as the hello does) and
 * the answer's address ("" when none; err gets the answer's error). */
static const char *hello(br_coord_t *c, br_node_t *n, const char *key, char *err,
                         size_t len)
{
    json_t *s = said(key), *answer = NULL;
    json_t *place = br_overlay_node_hello(c, n, s, &answer);
    json_decref(s);
    json_object_set_new(n->info, "overlay", place);
    snprintf(err, len, "%s",
             json_string_value(json_object_get(answer, "error"))
                 ? json_string_value(json_object_get(answer, "error")) : "");
    json_decref(answer);
    const char *a = json_string_value(json_object_get(place, "address"));
    return a && !json_object_get(place, "error") ? a : "";
}

static void test_net_parse(void **state)
{
    (void)state;
    br_overlay_net_t net;
    br_err_t err;
    assert_int_equal(br_overlay_net_parse(BR_OVERLAY_NET_DEFAULT, &net, &err), 0);
    assert_int_equal(net.prefix, 16);
    assert_int_equal(net.base, (10u << 24) | (213u << 16));
    assert_int_equal(br_overlay_net_parse("10.213.0.5/16", &net, &err), -1);
    assert_non_null(strstr(err.text, "did you mean 10.213.0.0/16?"));
    assert_int_equal(br_overlay_net_parse("10.0.0.0/31", &net, &err), -1);
    assert_non_null(strstr(err.text, "the prefix must be 8 to 30"));
    assert_int_equal(br_overlay_net_parse("10.0.0.0", &net, &err), -1);
    assert_int_equal(br_overlay_net_parse("fd00::/64", &net, &err), -1);
    assert_int_equal(br_overlay_net_parse("10.0.0.0/x", &net, &err), -1);
    assert_int_equal(br_overlay_net_parse(NULL, &net, &err), -1);
}

static void test_keys(void **state)
{
    (void)state;
    char priv[BR_WGKEY_B64], pub[BR_WGKEY_B64], again[BR_WGKEY_B64];
    br_err_t err;
    br_wgkey_private(priv);
    assert_true(br_wgkey_ok(priv));
    assert_int_equal(br_wgkey_public(priv, pub, &err), 0);
    assert_true(br_wgkey_ok(pub));
    assert_int_equal(br_wgkey_public(priv, again, &err), 0);
    assert_string_equal(pub, again);
    /* RFC 7748's test vector (Alice's), as `wg pubkey` gives it */
    assert_int_equal(br_wgkey_public("dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=", pub, &err),
                     0);
    assert_string_equal(pub, "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=");
    assert_false(br_wgkey_ok("hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo")); /* cut */
    assert_false(br_wgkey_ok("hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmp=")); /* stray bits */
    assert_false(br_wgkey_ok("not a key at all, not a key at all, not a ke="));
    assert_false(br_wgkey_ok(NULL));
    assert_int_equal(br_wgkey_public("nope", pub, &err), -1);
}

static void test_addresses_are_the_nodes_for_good(void **state)
{
    (void)state;
    coord_fixture_t f = {0};
    assert_int_equal(fixture_open(&f, "test_overlaynet", 0), 0);
    br_coord_t *c = &f.c;
    br_strlcpy(c->cfg.overlay_net, "10.9.0.0/30", sizeof(c->cfg.overlay_net)); /* 2 hosts */
    char k[3][BR_WGKEY_B64], pub[3][BR_WGKEY_B64], why[300];
    br_err_t err;
    for (int i = 0; i < 3; i++) {
        br_wgkey_private(k[i]);
        assert_int_equal(br_wgkey_public(k[i], pub[i], &err), 0);
    }
    br_node_t *a = fixture_node(c, "a", 2, 0), *b = fixture_node(c, "b", 2, 0);
    br_node_t *x = fixture_node(c, "x", 2, 0);
    assert_string_equal(hello(c, a, pub[0], why, sizeof(why)), "10.9.0.1");
    assert_string_equal(hello(c, b, pub[1], why, sizeof(why)), "10.9.0.2");
    /* the net is full: x gets none, and says so; a and b keep theirs */
    assert_string_equal(hello(c, x, pub[2], why, sizeof(why)), "");
    assert_non_null(strstr(why, "--overlay-net 10.9.0.0/30 has no address left"));
    /* a node that reports another's key gets none, and the other keeps its own */
    assert_string_equal(hello(c, x, pub[0], why, sizeof(why)), "");
    assert_non_null(strstr(why, "it reported the overlay key of node a"));
    assert_string_equal(hello(c, a, pub[0], why, sizeof(why)), "10.9.0.1");
    /* a key that is not one */
    assert_string_equal(hello(c, x, "nope", why, sizeof(why)), "");
    assert_non_null(strstr(why, "not a WireGuard key"));
    /* a new key (node rotate-key): the same address */
    assert_string_equal(hello(c, b, pub[2], why, sizeof(why)), "10.9.0.2");
    /* a node that runs none keeps its address for when it does again */
    json_t *none = json_pack("{s:n, s:s}", "mode", "why", "off (--overlay off)"), *answer;
    json_t *place = br_overlay_node_hello(c, a, none, &answer);
    assert_null(answer);
    assert_string_equal(json_string_value(json_object_get(place, "address")), "10.9.0.1");
    assert_string_equal(json_string_value(json_object_get(place, "why")), "off (--overlay off)");
    json_object_set_new(a->info, "overlay", place);
    json_decref(none);
    assert_string_equal(hello(c, x, pub[1], why, sizeof(why)), ""); /* (still full) */
    assert_string_equal(hello(c, a, pub[0], why, sizeof(why)), "10.9.0.1");
    /* an address out of a changed net is given anew */
    br_strlcpy(c->cfg.overlay_net, "10.10.0.0/24", sizeof(c->cfg.overlay_net));
    assert_string_equal(hello(c, b, pub[2], why, sizeof(why)), "10.10.0.1");
    assert_string_equal(hello(c, x, pub[1], why, sizeof(why)), "10.10.0.2");
    fixture_close(&f);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_net_parse),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_addresses_are_the_nodes_for_good),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
