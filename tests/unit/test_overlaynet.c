/* test_overlaynet.c - the overlay's network, keys and addresses (overlaynet.h,
 * wgkey.h): a node keeps its address for good, no node gets another's key or
 * address, a net that is full refuses the next node and disturbs no other, and
 * keys are WireGuard's; each peer's candidate endpoints come in the order most
 * likely to work, and a pair whose agents reached neither each other goes through
 * a relay that both reached, until one of them reaches the other; a job's attempt
 * chooses once whether it runs over the overlay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <sodium.h>

#include "coord_fixture.h"
#include "netmap.h"
#include "overlaylog.h"
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
    json_t *place = br_overlay_node_hello(c, n, s, "203.0.113.7", &answer);
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
    json_t *place = br_overlay_node_hello(c, a, none, NULL, &answer);
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

/* A node's hello from seen_from, with lan its LAN address, relay or not: placed. */
static void join(br_coord_t *c, br_node_t *n, const char *seen_from, const char *lan,
                 int relay)
{
    char priv[BR_WGKEY_B64], pub[BR_WGKEY_B64];
    br_err_t err;
    br_wgkey_private(priv);
    assert_int_equal(br_wgkey_public(priv, pub, &err), 0);
    json_t *s = json_pack("{s:s, s:s, s:b, s:i, s:[s, s]}", "mode", "userspace", "pubkey",
                          pub, "relay", relay, "port", 51820, "lan", lan, "not an address");
    json_t *answer = NULL, *place = br_overlay_node_hello(c, n, s, seen_from, &answer);
    assert_null(json_object_get(answer, "error"));
    json_object_set_new(n->info, "overlay", place);
    json_object_set_new(n->info, "address", json_string(seen_from));
    json_decref(s);
    json_decref(answer);
}

/* The entry for node name in n's peers (told anew). */
static json_t *peer_of(br_coord_t *c, br_node_t *n, const char *name, json_t **list)
{
    br_overlay_peers_whole(n);
    json_decref(*list);
    json_t *news = br_overlay_peers_news(c, n);
    *list = json_incref(json_object_get(news, "overlay_peers"));
    json_decref(news);
    size_t i;
    json_t *p;
    json_array_foreach(*list, i, p) {
        if (strcmp(json_string_value(json_object_get(p, "node")), name) == 0)
            return p;
    }
    return NULL;
}

static void said_reach(br_coord_t *c, br_node_t *n, const char *yes, const char *no)
{
    json_t *r = json_pack("{s:[], s:[]}", "reached", "unreached");
    if (yes)
        json_array_append_new(json_object_get(r, "reached"), json_string(yes));
    if (no)
        json_array_append_new(json_object_get(r, "unreached"), json_string(no));
    br_err_t err;
    assert_int_equal(br_overlay_reach_check(r, &err), 0);
    br_overlay_reach(c, n, r);
    json_decref(r);
}

/* How many "overlay" events job has. */
static int overlay_events(br_coord_t *c, int64_t job)
{
    json_t *ev = br_store_event_list(c->store, job, 0, 0, NULL), *e;
    size_t i;
    int count = 0;
    json_array_foreach(ev, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "state")), "overlay") == 0)
            count++;
    }
    json_decref(ev);
    return count;
}

static void test_endpoints_and_relays(void **state)
{
    (void)state;
    coord_fixture_t f = {0};
    assert_int_equal(fixture_open(&f, "test_overlaynet_paths", 0), 0);
    br_coord_t *c = &f.c;
    br_strlcpy(c->cfg.overlay_net, "10.9.0.0/24", sizeof(c->cfg.overlay_net));
    br_node_t *a1 = fixture_node(c, "a1", 2, 0), *a2 = fixture_node(c, "a2", 2, 0);
    br_node_t *b1 = fixture_node(c, "b1", 2, 0), *r = fixture_node(c, "r", 2, 0);
    join(c, a1, "203.0.113.1", "192.168.7.2", 0); /* two behind one router */
    join(c, a2, "203.0.113.1", "192.168.7.3", 0);
    join(c, b1, "198.51.100.1", "192.168.7.2", 0); /* another home */
    join(c, r, "192.0.2.9", "192.0.2.9", 1);       /* a rented box: the relay */
    json_t *list = NULL, *p;
    /* behind one router: its LAN address first; from elsewhere: its router's */
    p = peer_of(c, a1, "a2", &list);
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "endpoints"), 0)),
                        "192.168.7.3:51820");
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "endpoints"), 1)),
                        "203.0.113.1:51820");
    assert_int_equal(json_array_size(json_object_get(p, "endpoints")), 2); /* (not the bad one) */
    p = peer_of(c, b1, "a2", &list);
    assert_string_equal(json_string_value(json_object_get(p, "endpoint")), "203.0.113.1:51820");
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "endpoints"), 1)),
                        "192.168.7.3:51820");
    assert_null(json_object_get(p, "via"));
    assert_true(json_is_true(json_object_get(peer_of(c, a2, "r", &list), "relay")));
    /* a2 reached none of b1's endpoints: relayed through r, which neither failed */
    br_node_t *via = NULL;
    br_err_t err;
    assert_int_equal(br_overlay_path(c, a2, b1, &via), BR_OVERLAY_TRYING);
    uint64_t v = br_overlay_log_version(c->overlay_log);
    said_reach(c, a2, "r", "b1");
    assert_true(br_overlay_log_version(c->overlay_log) > v); /* everyone is told */
    assert_int_equal(br_overlay_path(c, a2, b1, &via), BR_OVERLAY_RELAYED);
    assert_ptr_equal(via, r);
    p = peer_of(c, a2, "b1", &list);
    assert_string_equal(json_string_value(json_object_get(p, "via_node")), "r");
    assert_string_equal(json_string_value(json_object_get(p, "via")),
                        json_string_value(json_object_get(json_object_get(r->info, "overlay"),
                                                          "pubkey")));
    p = peer_of(c, b1, "a2", &list); /* both ends route through it */
    assert_string_equal(json_string_value(json_object_get(p, "via_node")), "r");
    assert_null(json_object_get(peer_of(c, a2, "a1", &list), "via"));
    /* the relay failed to reach b1: no path then */
    said_reach(c, r, "a2", "b1");
    assert_int_equal(br_overlay_path(c, a2, b1, &via), BR_OVERLAY_NONE);
    json_t *pairs = br_overlay_pairs(c);
    assert_int_equal(json_integer_value(json_object_get(pairs, "unreachable")), 2); /* +r-b1 */
    json_decref(pairs);
    said_reach(c, r, NULL, NULL);
    said_reach(c, b1, "r", NULL);
    assert_int_equal(br_overlay_path(c, a2, b1, &via), BR_OVERLAY_RELAYED);
    pairs = br_overlay_pairs(c);
    assert_int_equal(json_integer_value(json_object_get(pairs, "relayed")), 1);
    p = json_array_get(json_object_get(pairs, "pairs"), 0);
    assert_string_equal(json_string_value(json_object_get(p, "via")), "r");
    json_decref(pairs);
    /* then b1 reaches a2 after all: direct, and told so */
    v = br_overlay_log_version(c->overlay_log);
    said_reach(c, b1, "a2", NULL);
    assert_true(br_overlay_log_version(c->overlay_log) > v);
    assert_int_equal(br_overlay_path(c, a2, b1, &via), BR_OVERLAY_DIRECT);
    assert_null(json_object_get(peer_of(c, a2, "b1", &list), "via"));
    /* a new hello forgets what a2 said */
    said_reach(c, b1, NULL, NULL);
    join(c, a2, "203.0.113.1", "192.168.7.3", 0);
    assert_int_equal(br_overlay_path(c, a2, b1, &via), BR_OVERLAY_TRYING);
    /* where the relay's WireGuard reached a2 (its router's mapping of a2's port) is a
     * candidate for the others; what a1, behind the same router, saw is not */
    json_t *r2 = json_pack("{s:[s], s:[], s:{s:s}}", "reached", "a2", "unreached", "at", "a2",
                           "203.0.113.1:40123");
    assert_int_equal(br_overlay_reach_check(r2, &err), 0);
    v = br_overlay_log_version(c->overlay_log);
    br_overlay_reach(c, r, r2);
    assert_true(br_overlay_log_version(c->overlay_log) > v);
    json_decref(r2);
    p = peer_of(c, b1, "a2", &list);
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "endpoints"), 0)),
                        "203.0.113.1:40123"); /* (first: it answered there) */
    r2 = json_pack("{s:[s], s:[], s:{s:s}}", "reached", "a2", "unreached", "at", "a2",
                   "192.168.7.3:51820");
    br_overlay_reach(c, a1, r2);
    json_decref(r2);
    p = peer_of(c, b1, "a2", &list);
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "endpoints"), 0)),
                        "203.0.113.1:40123"); /* (first: it answered there) */
    r2 = json_pack("{s:[], s:[], s:{s:s}}", "reached", "unreached", "at", "a2", "nope");
    assert_int_equal(br_overlay_reach_check(r2, &err), -1);
    assert_non_null(strstr(err.text, "overlay_reach.at.a2 is not A.B.C.D:PORT"));
    json_decref(r2);
    /* resources.network auto: over the overlay once the network map found a pair
     * that answers no direct probe; direct: never; overlay: always */
    br_node_t *gang[2] = {a2, b1};
    char pair[130];
    json_t *spec = json_pack("{s:{s:i}}", "resources", "nodes", 2);
    assert_int_equal(br_overlay_gang_uses(c, spec, gang, 2, pair, sizeof(pair)), 0);
    json_t *rtt = json_pack("{s:{s:n}}", "peers", "b1");
    br_netmap_report(c->netmap, "a2", rtt);
    json_decref(rtt);
    assert_int_equal(br_overlay_gang_uses(c, spec, gang, 2, pair, sizeof(pair)), 1);
    assert_string_equal(pair, "a2 and b1");
    json_object_set_new(json_object_get(spec, "resources"), "network", json_string("direct"));
    assert_int_equal(br_overlay_gang_uses(c, spec, gang, 2, NULL, 0), 0);
    json_object_set_new(json_object_get(spec, "resources"), "network", json_string("overlay"));
    assert_int_equal(br_overlay_gang_uses(c, spec, gang, 1, NULL, 0), 1);
    json_decref(spec);
    /* a job's attempt chooses once, for every rank, kept on the job (the overlay's
     * slot) and said in one event; its next attempt chooses anew */
    json_t *jspec = json_pack("{s:s, s:{s:i}}", "command", "true", "resources", "nodes", 2);
    br_job_t *stored = fixture_add_job(c, json_deep_copy(jspec));
    json_t *jrow = json_pack("{s:s, s:s, s:s, s:s, s:i, s:O}", "name", "t", "kind", "job",
                             "owner", "ann", "state", "running", "attempt", 1, "spec", jspec);
    br_job_t *job = br_job_from_row_id(jrow, stored->id, &err);
    json_decref(jrow);
    json_decref(jspec);
    assert_non_null(job);
    const char *const on[2] = {"a2", "b1"};
    json_t *share = json_pack("{s:i}", "cpus", 1);
    json_t *const shares[2] = {share, share};
    assert_int_equal(br_job_set_ranks(job, on, shares, 2), 0);
    json_decref(share);
    assert_int_equal(br_overlay_job_uses(c, job), 1);
    assert_int_equal(overlay_events(c, job->id), 1);
    br_netmap_forget(c->netmap, "a2"); /* no pair found failing now: this attempt holds */
    assert_int_equal(br_overlay_job_uses(c, job), 1);
    assert_int_equal(overlay_events(c, job->id), 1);
    job->attempt = 2;
    assert_int_equal(br_overlay_job_uses(c, job), 0);
    assert_int_equal(br_overlay_job_uses(c, job), 0);
    assert_int_equal(overlay_events(c, job->id), 1);
    br_job_destroy(&job); /* (and what the overlay kept of it) */
    /* an agent that takes changes alone is told those: b1 moved, then was removed */
    json_t *said_d = json_pack("{s:s, s:s, s:b, s:i, s:b}", "mode", "userspace", "pubkey",
                               json_string_value(json_object_get(json_object_get(a1->info,
                                                                                 "overlay"),
                                                                 "pubkey")),
                               "relay", 0, "port", 51820, "deltas", 1);
    json_t *ans = NULL, *pl = br_overlay_node_hello(c, a1, said_d, "203.0.113.1", &ans);
    json_object_set_new(a1->info, "overlay", pl);
    json_decref(ans);
    json_decref(said_d);
    json_t *news = br_overlay_peers_news(c, a1); /* after a hello: the whole list */
    assert_int_equal(json_array_size(json_object_get(news, "overlay_peers")), 3);
    json_decref(news);
    assert_null(br_overlay_peers_news(c, a1)); /* (nothing new) */
    br_overlay_seen_from(c, b1, "198.51.100.99");
    news = br_overlay_peers_news(c, a1);
    json_t *delta = json_object_get(news, "overlay_peers_delta");
    assert_int_equal(json_array_size(json_object_get(delta, "set")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(delta, "set"), 0), "endpoint")),
                        "198.51.100.99:51820");
    json_decref(news);
    br_overlay_node_gone(c, b1);
    news = br_overlay_peers_news(c, a1);
    delta = json_object_get(news, "overlay_peers_delta");
    assert_int_equal(json_array_size(json_object_get(delta, "set")), 1); /* (b1, still here) */
    json_decref(news);
    /* bad words are refused */
    json_t *bad = json_pack("{s:[i]}", "reached", 3);
    assert_int_equal(br_overlay_reach_check(bad, &err), -1);
    assert_non_null(strstr(err.text, "overlay_reach.reached[0] is not a node name"));
    json_decref(bad);
    bad = json_pack("{s:s}", "unreached", "x");
    assert_int_equal(br_overlay_reach_check(bad, &err), -1);
    json_decref(bad);
    json_decref(list);
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
        cmocka_unit_test(test_endpoints_and_relays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
