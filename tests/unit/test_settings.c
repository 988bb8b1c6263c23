/* test_settings.c - the agent's replica and cost settings (agent/settings.c): the
 * flags' values, good and bad, the defaults, and a round trip through agent.yaml
 * in which flags given at a restart win. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cred.h"
#include "holder.h"
#include "settings.h"
#include "util.h"

static void test_values(void **state)
{
    (void)state;
    static const struct {
        int which; /* 0 quota, 1 bandwidth, 2 port */
        const char *text;
        int ok;
        int64_t want;
    } cases[] = {
        {0, "200GiB", 1, 200LL << 30},
        {0, "0", 1, 0},
        {0, "none", 1, -1},
        {0, "lots", 0, 0},
        {0, "-1", 0, 0},
        {1, "40MB/s", 1, 40000000},
        {1, "40MiB", 1, 40 << 20},
        {1, "0", 1, 0},
        {1, "fast", 0, 0},
        {1, "/s", 0, 0},
        {2, "7704", 1, 7704},
        {2, "0", 1, 0},
        {2, "off", 1, -1},
        {2, "70000", 0, 0},
        {2, "x", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_settings_t s;
        br_err_t err = {0};
        br_settings_init(&s);
        int rc = cases[i].which == 0
                     ? br_settings_replica_quota(&s, cases[i].text, &err)
                 : cases[i].which == 1
                     ? br_settings_replica_bandwidth(&s, cases[i].text, &err)
                     : br_settings_replica_port(&s, cases[i].text, &err);
        if ((rc == 0) != cases[i].ok)
            fail_msg("'%s': %s", cases[i].text, rc ? err.text : "taken");
        int64_t got = cases[i].which == 0   ? s.replica_quota
                      : cases[i].which == 1 ? s.replica_bandwidth
                                            : s.replica_port;
        if (rc == 0)
            assert_int_equal(got, cases[i].want);
        else
            assert_non_null(strstr(err.text, cases[i].text));
        br_settings_free(&s);
    }
}

/* --cost-per-hour, --power-price, --idle-watts: plain numbers, 0 or more. */
static void test_amounts(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int ok;
        double want;
    } cases[] = {
        {"0.30", 1, 0.30}, {"0", 1, 0},      {"50", 1, 50},    {".5", 1, 0.5},
        {"1e3", 1, 1000},  {"-1", 0, 0},     {"+1", 0, 0},     {"", 0, 0},
        {"abc", 0, 0},     {"0.3kWh", 0, 0}, {"nan", 0, 0},    {"inf", 0, 0},
        {"0x10", 0, 0},    {"1e999", 0, 0},  {" 1", 0, 0},     {".", 0, 0},
    };
    int (*parse[])(br_settings_t *, const char *, br_err_t *) = {
        br_settings_cost_per_hour, br_settings_power_price, br_settings_idle_watts};
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            br_settings_t s;
            br_err_t err = {0};
            br_settings_init(&s);
            int rc = parse[k](&s, cases[i].text, &err);
            if ((rc == 0) != cases[i].ok)
                fail_msg("'%s': %s", cases[i].text, rc ? err.text : "taken");
            double got = k == 0 ? s.cost_per_hour : k == 1 ? s.power_price : s.idle_watts;
            if (rc == 0)
                assert_true(got == cases[i].want);
            else
                assert_non_null(strstr(err.text, "expected a number, 0 or more"));
            br_settings_free(&s);
        }
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void test_saved(void **state)
{
    (void)state;
    char root[] = "/tmp/test_settings.XXXXXX";
    assert_non_null(mkdtemp(root));
    br_settings_t s;
    br_err_t err;
    int joined;
    br_settings_init(&s);
    br_strlcpy(s.data_dir, root, sizeof(s.data_dir));
    br_strlcpy(s.name, "node-1", sizeof(s.name));
    br_strlcpy(s.cred.name, "node-1", sizeof(s.cred.name));
    br_strlcpy(s.cred.endpoint, "tcp://127.0.0.1:7700", sizeof(s.cred.endpoint));
    assert_int_equal(br_keypair(s.cred.server_public_key, s.cred.secret_key, &err), 0);
    assert_int_equal(br_keypair(s.cred.public_key, s.cred.secret_key, &err), 0);
    br_settings_finish(&s);
    char def[1100];
    snprintf(def, sizeof(def), "%s/replicas", root);
    assert_string_equal(s.replica_dir, def);
    assert_int_equal(s.replica_quota, -1);
    assert_int_equal(s.replica_bandwidth, 0);
    assert_int_equal(s.replica_port, BR_REPLICA_PORT);
    assert_true(s.power_price == 0 && s.idle_watts == 0); /* none said: electricity free */
    assert_int_equal(br_settings_power_price(&s, "0.30", &err), 0);
    assert_int_equal(br_settings_idle_watts(&s, "50", &err), 0);
    assert_int_equal(br_settings_cost_per_hour(&s, "0.5", &err), 0);
    assert_int_equal(br_settings_replica_quota(&s, "0", &err), 0);
    assert_int_equal(br_settings_replica_bandwidth(&s, "40MB/s", &err), 0);
    assert_int_equal(br_settings_replica_port(&s, "off", &err), 0);
    br_strlcpy(s.replica_dir, "/srv/replicas", sizeof(s.replica_dir));
    assert_int_equal(br_settings_save(&s, &err), 0);
    br_settings_free(&s);

    /* a restart with --replica-quota 10GiB: that flag wins, the rest is kept */
    br_settings_init(&s);
    br_strlcpy(s.data_dir, root, sizeof(s.data_dir));
    assert_int_equal(br_settings_replica_quota(&s, "10GiB", &err), 0);
    assert_int_equal(br_settings_idle_watts(&s, "80", &err), 0);
    if (br_settings_load(&s, &joined, &err) < 0)
        fail_msg("load: %s", err.text);
    br_settings_finish(&s);
    assert_true(joined);
    assert_int_equal(s.replica_quota, 10LL << 30);
    assert_int_equal(s.replica_bandwidth, 40000000);
    assert_int_equal(s.replica_port, -1);
    assert_string_equal(s.replica_dir, "/srv/replicas");
    assert_true(s.power_price == 0.30);
    assert_true(s.idle_watts == 80);
    assert_true(s.cost_per_hour == 0.5);
    assert_int_equal(br_settings_save(&s, &err), 0);
    br_settings_free(&s);

    /* a bad figure written into agent.yaml by hand: named, with the file */
    char path[1100];
    snprintf(path, sizeof(path), "%s/agent.yaml", root);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "name: node-1\npower_price: \"-2\"\n");
    fclose(f);
    br_settings_init(&s);
    br_strlcpy(s.data_dir, root, sizeof(s.data_dir));
    assert_int_equal(br_settings_load(&s, &joined, &err), -1);
    if (!strstr(err.text, "power_price"))
        fail_msg("%s", err.text);
    assert_non_null(strstr(err.text, "'-2': expected a number, 0 or more"));
    br_settings_free(&s);
    nftw(root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_amounts),
        cmocka_unit_test(test_saved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
