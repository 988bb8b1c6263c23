/* test_wgpeers.c - the overlay's peers on the node's interface (agent/wgpeers.c),
 * against a fake `wg`: a shell script first on PATH that logs its arguments and
 * answers `show ... latest-handshakes` from a file.
 *
 * A new peer is set with its first endpoint, kept alive and sent to at once; an
 * unreached peer moves to its next endpoint every BR_WGPEERS_TRY_MS (sent to at
 * once again), and is said unreached once every endpoint was tried; a handshake
 * makes it reached and stops the moving; a peer that goes through a relay gives
 * its address to the relay's allowed IPs, and gets it back when the pair is direct
 * again; a peer no longer listed is removed; a listed peer whose endpoints did not
 * change is not set again; a bad key or endpoint is refused, naming the peer, and
 * the others are set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"
#include "wgkey.h"
#include "wgpeers.h"

static const char fake_wg[] = "#!/bin/sh\n"
                              "echo \"$*\" >> \"$FAKE_WG_LOG\"\n"
                              "if [ \"$3\" = endpoints ]; then cat \"$FAKE_WG_EP\"; exit 0; fi\n"
                              "if [ \"$1\" = show ]; then cat \"$FAKE_WG_HS\" 2>/dev/null; fi\n"
                              "exit 0\n";

static char tmp[64], log_path[128], hs_path[128], ep_path[128];
static char k1[BR_WGKEY_B64], k2[BR_WGKEY_B64], k3[BR_WGKEY_B64];

static void key(char out[BR_WGKEY_B64])
{
    char priv[BR_WGKEY_B64];
    br_err_t err;
    br_wgkey_private(priv);
    assert_int_equal(br_wgkey_public(priv, out, &err), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof(tmp), "/tmp/test_wgpeers.XXXXXX");
    if (!mkdtemp(tmp))
        return -1;
    char path[256];
    br_err_t err;
    snprintf(path, sizeof(path), "%s/wg", tmp);
    if (br_write_file(path, fake_wg, strlen(fake_wg), 0755, &err) < 0)
        return -1;
    snprintf(log_path, sizeof(log_path), "%s/wg.log", tmp);
    snprintf(hs_path, sizeof(hs_path), "%s/hs", tmp);
    snprintf(ep_path, sizeof(ep_path), "%s/ep", tmp);
    setenv("FAKE_WG_EP", ep_path, 1);
    snprintf(path, sizeof(path), "%s:/usr/bin:/bin", tmp);
    setenv("PATH", path, 1);
    setenv("FAKE_WG_LOG", log_path, 1);
    setenv("FAKE_WG_HS", hs_path, 1);
    key(k1);
    key(k2);
    key(k3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    br_rm_tree(AT_FDCWD, tmp);
    return 0;
}

/* What `wg` was run with since the last call (one line each), and the log emptied. */
static char *ran(void)
{
    size_t len;
    br_err_t err;
    char *text = br_read_file(log_path, 1 << 20, &len, &err);
    unlink(log_path);
    return text ? text : strdup("");
}

static void handshake(const char *k, long long when)
{
    char line[200];
    br_err_t err;
    snprintf(line, sizeof(line), "%s\t%lld\n", k, when);
    assert_int_equal(br_write_file(hs_path, line, strlen(line), 0644, &err), 0);
}

static int has(const char *text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int has(const char *text, const char *fmt, ...)
{
    char want[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof(want), fmt, ap);
    va_end(ap);
    if (strstr(text, want))
        return 1;
    fprintf(stderr, "wanted: %s\nran:\n%s\n", want, text);
    return 0;
}

static int in_list(const json_t *reach, const char *which, const char *node)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(reach, which), i, v) {
        if (strcmp(json_string_value(v), node) == 0)
            return 1;
    }
    return 0;
}

static void test_endpoints_tried_and_relays(void **state)
{
    (void)state;
    br_wgpeers_t *p = br_wgpeers_new("bramble0");
    br_err_t err;
    /* p1: two endpoints; p2: none known; p3: through p1, a relay */
    json_t *list = json_pack("[{s:s, s:s, s:s, s:[s, s]}, {s:s, s:s, s:s}, "
                             "{s:s, s:s, s:s, s:[s], s:s}]",
                             "node", "p1", "pubkey", k1, "address", "10.9.0.1", "endpoints",
                             "192.168.7.3:51820", "203.0.113.1:51820", "node", "p2", "pubkey",
                             k2, "address", "10.9.0.2", "node", "p3", "pubkey", k3, "address",
                             "10.9.0.3", "endpoints", "198.51.100.1:51820", "via", k1);
    int64_t t = 100000;
    assert_int_equal(br_wgpeers_set(p, list, t, &err), 0);
    char *text = ran();
    assert_true(has(text, "set bramble0 peer %s persistent-keepalive 0 peer %s allowed-ips "
                          "10.9.0.1/32,10.9.0.3/32 persistent-keepalive 25 endpoint "
                          "192.168.7.3:51820", k1, k1));
    assert_true(has(text, "peer %s allowed-ips 10.9.0.2/32 persistent-keepalive 25", k2));
    assert_true(has(text, "peer %s allowed-ips  persistent-keepalive 25 endpoint "
                          "198.51.100.1:51820", k3)); /* (its own address: the relay's) */
    free(text);
    json_t *reach = br_wgpeers_reach(p);
    assert_int_equal(json_array_size(json_object_get(reach, "reached")) +
                         json_array_size(json_object_get(reach, "unreached")), 0);
    json_decref(reach);

    /* no handshake: nothing moves before BR_WGPEERS_TRY_MS */
    assert_int_equal(br_wgpeers_tick(p, t + 1000, &err), 0);
    text = ran();
    assert_true(has(text, "show bramble0 latest-handshakes"));
    assert_null(strstr(text, "endpoint"));
    free(text);
    /* ... then p1 moves to its next one, sent to at once; p2, with none, is unreached */
    assert_int_equal(br_wgpeers_tick(p, t + BR_WGPEERS_TRY_MS + 10, &err), 1);
    text = ran();
    assert_true(has(text, "peer %s persistent-keepalive 0 peer %s persistent-keepalive 25 "
                          "endpoint 203.0.113.1:51820", k1, k1));
    free(text);
    reach = br_wgpeers_reach(p);
    assert_true(in_list(reach, "unreached", "p2"));
    assert_false(in_list(reach, "unreached", "p1")); /* (still being tried) */
    json_decref(reach);
    /* a handshake with p1: reached, and it moves no more; where WireGuard reaches it
     * is said too */
    handshake(k1, (long long)time(NULL));
    char eps[200];
    snprintf(eps, sizeof(eps), "%s\t203.0.113.1:40123\n%s\t(none)\n", k1, k2);
    assert_int_equal(br_write_file(ep_path, eps, strlen(eps), 0644, &err), 0);
    assert_int_equal(br_wgpeers_tick(p, t + 2 * BR_WGPEERS_TRY_MS + 20, &err), 1);
    reach = br_wgpeers_reach(p);
    assert_true(in_list(reach, "reached", "p1"));
    assert_true(in_list(reach, "unreached", "p3")); /* (its one endpoint failed) */
    assert_string_equal(json_string_value(json_object_get(json_object_get(reach, "at"), "p1")),
                        "203.0.113.1:40123");
    assert_null(json_object_get(json_object_get(reach, "at"), "p2"));
    json_decref(reach);
    text = ran();
    assert_null(strstr(text, "endpoint 192.168.7.3")); /* (p1 stays) */
    free(text);

    /* listed again as it was: nothing set */
    assert_int_equal(br_wgpeers_set(p, list, t + 9000, &err), 0);
    text = ran();
    assert_null(strstr(text, "set bramble0"));
    free(text);
    /* p1, reached, gets another candidate after its first: where it is reached stays;
     * then its first changes (it moved): sent to there at once */
    json_t *p1eps = json_object_get(json_array_get(list, 0), "endpoints");
    json_array_append_new(p1eps, json_string("192.0.2.50:51820"));
    assert_int_equal(br_wgpeers_set(p, list, t + 9100, &err), 0);
    text = ran();
    assert_null(strstr(text, "set bramble0"));
    free(text);
    json_array_set_new(p1eps, 0, json_string("198.51.100.77:51820"));
    assert_int_equal(br_wgpeers_set(p, list, t + 9200, &err), 0);
    text = ran();
    assert_true(has(text, "peer %s persistent-keepalive 0 peer %s allowed-ips "
                          "10.9.0.1/32,10.9.0.3/32 persistent-keepalive 25 endpoint "
                          "198.51.100.77:51820", k1, k1));
    free(text);
    /* p3 direct again, p2 gone: p3's address is its own, p2 removed */
    json_object_del(json_array_get(list, 2), "via");
    json_array_remove(list, 1);
    assert_int_equal(br_wgpeers_set(p, list, t + 9500, &err), 0);
    text = ran();
    assert_true(has(text, "peer %s remove", k2));
    assert_true(has(text, "peer %s allowed-ips 10.9.0.1/32", k1));
    assert_true(has(text, "peer %s allowed-ips 10.9.0.3/32", k3));
    assert_null(strstr(text, "endpoint")); /* (neither moved) */
    free(text);
    assert_int_equal(br_wgpeers_count(p), 2);

    /* a bad key and a bad endpoint are refused, naming the peer; the others are set */
    json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "node", "liar", "pubkey",
                                          "not a key", "address", "10.9.0.9"));
    json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:[s]}", "node", "p2", "pubkey", k2,
                                          "address", "10.9.0.2", "endpoints", "nope:51820"));
    assert_int_equal(br_wgpeers_set(p, list, t + 9600, &err), -1);
    assert_non_null(strstr(err.text, "peer liar: its key is not a WireGuard key"));
    assert_int_equal(br_wgpeers_count(p), 2);
    text = ran();
    assert_null(strstr(text, "remove")); /* p1 and p3 stay */
    free(text);
    json_array_remove(list, 2);
    assert_int_equal(br_wgpeers_set(p, list, t + 9700, &err), -1);
    assert_non_null(strstr(err.text, "peer p2: endpoint 'nope:51820' is not HOST:PORT"));
    json_decref(list);
    br_wgpeers_destroy(&p);
}

/* The coordinator's changes alone: a peer set anew, another gone; the rest as it was. */
static void test_changes_alone(void **state)
{
    (void)state;
    br_wgpeers_t *p = br_wgpeers_new("bramble0");
    br_err_t err;
    json_t *list = json_pack("[{s:s, s:s, s:s, s:[s]}, {s:s, s:s, s:s}]", "node", "p1",
                             "pubkey", k1, "address", "10.9.0.1", "endpoints",
                             "192.0.2.1:51820", "node", "p2", "pubkey", k2, "address",
                             "10.9.0.2");
    assert_int_equal(br_wgpeers_set(p, list, 1000, &err), 0);
    free(ran());
    json_t *delta = json_pack("{s:[{s:s, s:s, s:s, s:[s]}], s:[s]}", "set", "node", "p3",
                              "pubkey", k3, "address", "10.9.0.3", "endpoints",
                              "192.0.2.3:51820", "gone", "p2");
    assert_int_equal(br_wgpeers_update(p, delta, 2000, &err), 0);
    char *text = ran();
    assert_true(has(text, "peer %s remove", k2));
    assert_true(has(text, "peer %s allowed-ips 10.9.0.3/32 persistent-keepalive 25 endpoint "
                          "192.0.2.3:51820", k3));
    assert_null(strstr(text, k1)); /* (p1 untouched) */
    free(text);
    assert_int_equal(br_wgpeers_count(p), 2);
    json_decref(delta);
    json_decref(list);
    br_wgpeers_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endpoints_tried_and_relays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes_alone, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
