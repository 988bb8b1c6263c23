/* test_cred.c - unit tests for CURVE key pairs and credential files (proto/cred.c). */
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

#include "cred.h"
#include "util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static char tmpdir[] = "/tmp/test_cred.XXXXXX";
static br_cred_t good; /* a valid credential, made once */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    umask(022);
    if (!mkdtemp(tmpdir))
        return -1;
    char spub[41], ssec[41];
    if (br_keypair(spub, ssec, NULL) < 0 ||
        br_keypair(good.public_key, good.secret_key, NULL) < 0)
        return -1;
    br_strlcpy(good.server_public_key, spub, sizeof(good.server_public_key));
    br_strlcpy(good.endpoint, "tcp://10.0.0.1:7700", sizeof(good.endpoint));
    br_strlcpy(good.name, "alice", sizeof(good.name));
    return 0;
}

static int teardown(void **state)
{
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void under(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tmpdir, rel);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* Write text as a credential file with mode 0600. */
static void write_text(const char *path, const char *text)
{
    br_err_t err = {0};
    if (br_write_file(path, text, strlen(text), 0600, &err) != 0)
        fail_msg("%s: %s", path, err.text);
}

/* The YAML of the good credential, with field skip left out and field repl (if
 * not NULL) given value val, then extra appended. */
static void cred_text(char *buf, size_t len, const char *skip, const char *repl,
                      const char *val, const char *extra)
{
    const struct {
        const char *k, *v;
    } f[] = {{"endpoint", good.endpoint},
             {"server_public_key", good.server_public_key},
             {"name", good.name},
             {"public_key", good.public_key},
             {"secret_key", good.secret_key}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NELEM(f); i++) {
        if (skip && strcmp(f[i].k, skip) == 0)
            continue;
        const char *v = repl && strcmp(f[i].k, repl) == 0 ? val : f[i].v;
        n += (size_t)snprintf(buf + n, len - n, "%s: '%s'\n", f[i].k, v);
        assert_true(n < len);
    }
    if (extra)
        snprintf(buf + n, len - n, "%s", extra);
}

/* ---- keys ---- */

static void test_keypair(void **state)
{
    char pub[41], sec[41], pub2[41], sec2[41];
    br_err_t err = {0};
    assert_int_equal(br_keypair(pub, sec, &err), 0);
    assert_int_equal(br_keypair(pub2, sec2, &err), 0);
    assert_int_equal(strlen(pub), BR_KEY_LEN);
    assert_int_equal(strlen(sec), BR_KEY_LEN);
    assert_true(br_key_valid(pub));
    assert_true(br_key_valid(sec));
    assert_string_not_equal(pub, sec);
    assert_string_not_equal(pub, pub2);
    assert_string_not_equal(sec, sec2);
}

static void test_key_valid(void **state)
{
    char key[41], buf[64];
    assert_int_equal(br_keypair(key, buf, NULL), 0);
    static const struct {
        int pos; /* -1: no change */
        char c;  /* replacement at pos */
        int cut; /* length to cut to, 0: none */
        const char *append;
        int ok;
    } cases[] = {
        {-1, 0, 0, NULL, 1},    {0, ' ', 0, NULL, 0},   {5, '~', 0, NULL, 0},
        {39, '"', 0, NULL, 0},  {20, '\'', 0, NULL, 0}, {10, ',', 0, NULL, 0},
        {10, '_', 0, NULL, 0},  {10, '|', 0, NULL, 0},  {10, '\\', 0, NULL, 0},
        {-1, 0, 39, NULL, 0},   {-1, 0, 35, NULL, 0},   {-1, 0, 0, "a", 0},
        {-1, 0, 0, "abcde", 0}, {-1, 0, 1, NULL, 0},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        snprintf(buf, sizeof(buf), "%s%s", key, cases[i].append ? cases[i].append : "");
        if (cases[i].pos >= 0)
            buf[cases[i].pos] = cases[i].c;
        if (cases[i].cut)
            buf[cases[i].cut] = '\0';
        if (br_key_valid(buf) != cases[i].ok)
            fail_msg("br_key_valid(\"%s\") != %d", buf, cases[i].ok);
    }
    assert_false(br_key_valid(NULL));
    assert_false(br_key_valid(""));
    /* Z85 alphabet, but the value of each group of 5 overflows 32 bits */
    memset(buf, '#', 40);
    buf[40] = '\0';
    assert_false(br_key_valid(buf));
    memset(buf, '0', 40); /* all zero bytes: a valid encoding */
    assert_true(br_key_valid(buf));
}

/* ---- save and load ---- */

static void test_save_load(void **state)
{
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "credential");
    mode_t old = umask(0); /* the file must be 0600 whatever the umask */
    int rc = br_cred_save(path, &good, &err);
    umask(old);
    if (rc != 0)
        fail_msg("save: %s", err.text);
    assert_int_equal(mode_of(path), 0600);
    br_cred_t c;
    memset(&c, 'x', sizeof(c));
    if (br_cred_load(path, &c, &err) != 0)
        fail_msg("load: %s", err.text);
    assert_string_equal(c.endpoint, good.endpoint);
    assert_string_equal(c.server_public_key, good.server_public_key);
    assert_string_equal(c.name, good.name);
    assert_string_equal(c.public_key, good.public_key);
    assert_string_equal(c.secret_key, good.secret_key);
    /* saving over a file that is too open makes it 0600 again */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(br_cred_save(path, &good, &err), 0);
    assert_int_equal(mode_of(path), 0600);
    assert_int_equal(br_cred_load(path, &c, &err), 0);
}

static void test_save_odd_values(void **state)
{
    /* values that need quoting in YAML survive the round trip */
    br_cred_t c = good, back;
    br_strlcpy(c.endpoint, "tcp://[::1]:7700 #x 'q'", sizeof(c.endpoint));
    br_strlcpy(c.name, "- bob: 'x'", sizeof(c.name));
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "odd");
    assert_int_equal(br_cred_save(path, &c, &err), 0);
    if (br_cred_load(path, &back, &err) != 0)
        fail_msg("load: %s", err.text);
    assert_string_equal(back.endpoint, c.endpoint);
    assert_string_equal(back.name, c.name);
    /* many keys: every Z85 character appears in some key, round trip all */
    for (int i = 0; i < 50; i++) {
        assert_int_equal(br_keypair(c.public_key, c.secret_key, NULL), 0);
        assert_int_equal(br_cred_save(path, &c, &err), 0);
        assert_int_equal(br_cred_load(path, &back, &err), 0);
        assert_string_equal(back.public_key, c.public_key);
        assert_string_equal(back.secret_key, c.secret_key);
    }
}

static void test_refuse_modes(void **state)
{
    static const struct {
        mode_t mode;
        int ok;
    } cases[] = {
        {0600, 1}, {0400, 1}, {0700, 1}, {0644, 0}, {0640, 0},
        {0604, 0}, {0660, 0}, {0666, 0}, {0610, 0}, {0601, 0},
    };
    char path[512];
    under(path, sizeof(path), "modes");
    for (size_t i = 0; i < NELEM(cases); i++) {
        br_err_t err = {0};
        assert_int_equal(br_cred_save(path, &good, &err), 0);
        assert_int_equal(chmod(path, cases[i].mode), 0);
        br_cred_t c;
        int rc = br_cred_load(path, &c, &err);
        if (cases[i].ok) {
            if (rc != 0)
                fail_msg("mode %03o refused: %s", cases[i].mode, err.text);
            continue;
        }
        if (rc != -1)
            fail_msg("mode %03o accepted", cases[i].mode);
        assert_int_equal(err.errnum, EPERM);
        assert_non_null(strstr(err.text, "readable by others"));
        assert_non_null(strstr(err.text, path));
        assert_non_null(strstr(err.text, "chmod 600"));
        assert_int_equal(chmod(path, 0600), 0);
    }
}

static void test_missing_fields(void **state)
{
    static const char *fields[] = {"endpoint", "server_public_key", "name",
                                   "public_key", "secret_key"};
    char path[512], text[1024], want[64];
    under(path, sizeof(path), "missing");
    for (size_t i = 0; i < NELEM(fields); i++) {
        for (int empty = 0; empty < 2; empty++) {
            /* left out, then present but empty */
            if (empty)
                cred_text(text, sizeof(text), NULL, fields[i], "", NULL);
            else
                cred_text(text, sizeof(text), fields[i], NULL, NULL, NULL);
            write_text(path, text);
            br_cred_t c;
            br_err_t err = {0};
            if (br_cred_load(path, &c, &err) != -1)
                fail_msg("%s %s: accepted", fields[i], empty ? "empty" : "missing");
            assert_int_equal(err.errnum, EINVAL);
            snprintf(want, sizeof(want), "missing '%s'", fields[i]);
            if (!strstr(err.text, want))
                fail_msg("'%s' lacks \"%s\"", err.text, want);
            assert_non_null(strstr(err.text, path));
        }
    }
}

static void test_unknown_key(void **state)
{
    static const char *extras[] = {"colour: 'blue'\n", "Endpoint: 'x'\n",
                                   "secret: 'x'\n"};
    char path[512], text[1024];
    under(path, sizeof(path), "unknown");
    for (size_t i = 0; i < NELEM(extras); i++) {
        cred_text(text, sizeof(text), NULL, NULL, NULL, extras[i]);
        write_text(path, text);
        br_cred_t c;
        br_err_t err = {0};
        assert_int_equal(br_cred_load(path, &c, &err), -1);
        assert_int_equal(err.errnum, EINVAL);
        char want[64];
        snprintf(want, sizeof(want), "unknown key '%.*s'", (int)strcspn(extras[i], ":"),
                 extras[i]);
        if (!strstr(err.text, want))
            fail_msg("'%s' lacks \"%s\"", err.text, want);
        assert_non_null(strstr(err.text, path));
    }
}

static void test_malformed_keys(void **state)
{
    static const char *fields[] = {"server_public_key", "public_key", "secret_key"};
    char bad39[41], badchar[41];
    memcpy(bad39, good.public_key, 39);
    bad39[39] = '\0';
    memcpy(badchar, good.public_key, 41);
    badchar[7] = '~';
    const char *values[] = {bad39, badchar, "not a key"};
    char path[512], text[1024];
    under(path, sizeof(path), "malformed");
    for (size_t i = 0; i < NELEM(fields); i++) {
        for (size_t j = 0; j < NELEM(values); j++) {
            cred_text(text, sizeof(text), NULL, fields[i], values[j], NULL);
            write_text(path, text);
            br_cred_t c;
            br_err_t err = {0};
            if (br_cred_load(path, &c, &err) != -1)
                fail_msg("%s = '%s' accepted", fields[i], values[j]);
            assert_int_equal(err.errnum, EINVAL);
            assert_non_null(strstr(err.text, path));
            char want[64];
            snprintf(want, sizeof(want), "'%s'", fields[i]);
            if (!strstr(err.text, want))
                fail_msg("%s = '%s': error '%s' does not name the field", fields[i],
                         values[j], err.text);
        }
    }
}

static void test_other_refusals(void **state)
{
    char path[512], text[2048], lng[300];
    br_cred_t c;
    br_err_t err = {0};
    under(path, sizeof(path), "other");
    /* endpoint too long for the struct */
    memset(lng, 'e', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    cred_text(text, sizeof(text), NULL, "endpoint", lng, NULL);
    write_text(path, text);
    assert_int_equal(br_cred_load(path, &c, &err), -1);
    assert_non_null(strstr(err.text, "'endpoint' is too long"));
    /* a field that is not a string */
    cred_text(text, sizeof(text), "name", NULL, NULL, "name: {first: bob}\n");
    write_text(path, text);
    assert_int_equal(br_cred_load(path, &c, &err), -1);
    assert_non_null(strstr(err.text, "'name'"));
    /* not YAML of a mapping */
    write_text(path, "- a\n- b\n");
    assert_int_equal(br_cred_load(path, &c, &err), -1);
    assert_non_null(strstr(err.text, path));
    /* no such file */
    under(path, sizeof(path), "absent");
    assert_int_equal(br_cred_load(path, &c, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.text, path));
    /* save into a missing directory */
    under(path, sizeof(path), "no/dir/cred");
    assert_int_equal(br_cred_save(path, &good, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
}

/* ---- where the credential is ---- */

static void test_cred_path(void **state)
{
    char buf[512], want[600];
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char *old_env =
        getenv("BRAMBLE_CREDENTIAL") ? strdup(getenv("BRAMBLE_CREDENTIAL")) : NULL;
    setenv("HOME", "/home/tester", 1);
    setenv("BRAMBLE_CREDENTIAL", "/etc/env-cred", 1);
    static const struct {
        const char *flag, *env, *want;
    } cases[] = {
        {"/flag/cred", "/env/cred", "/flag/cred"},
        {"/flag/cred", NULL, "/flag/cred"},
        {"/flag/cred", "", "/flag/cred"},
        {"", "/env/cred", "/env/cred"},
        {NULL, "/env/cred", "/env/cred"},
        {NULL, "", "/home/tester/.config/bramble/credential"},
        {NULL, NULL, "/home/tester/.config/bramble/credential"},
        {"", NULL, "/home/tester/.config/bramble/credential"},
        {"relative/cred", NULL, "relative/cred"},
    };
    int failed = -1;
    for (size_t i = 0; i < NELEM(cases) && failed < 0; i++) {
        if (cases[i].env)
            setenv("BRAMBLE_CREDENTIAL", cases[i].env, 1);
        else
            unsetenv("BRAMBLE_CREDENTIAL");
        const char *got = br_cred_path(cases[i].flag, buf, sizeof(buf));
        if (got != buf || strcmp(buf, cases[i].want) != 0)
            failed = (int)i;
    }
    unsetenv("BRAMBLE_CREDENTIAL");
    setenv("HOME", "/other", 1);
    br_cred_path(NULL, buf, sizeof(buf));
    snprintf(want, sizeof(want), "/other/.config/bramble/credential");
    int home_ok = strcmp(buf, want) == 0;
    char small[8];
    br_cred_path("/a/very/long/path", small, sizeof(small)); /* cut, terminated */
    int small_ok = strcmp(small, "/a/very") == 0;
    if (old_home)
        setenv("HOME", old_home, 1);
    else
        unsetenv("HOME");
    if (old_env)
        setenv("BRAMBLE_CREDENTIAL", old_env, 1);
    free(old_home);
    free(old_env);
    if (failed >= 0)
        fail_msg("case %d: got '%s', want '%s'", failed, buf, cases[failed].want);
    assert_true(home_ok);
    assert_true(small_ok);
}

int main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keypair),        cmocka_unit_test(test_key_valid),
        cmocka_unit_test(test_save_load),      cmocka_unit_test(test_save_odd_values),
        cmocka_unit_test(test_refuse_modes),   cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_unknown_key),    cmocka_unit_test(test_malformed_keys),
        cmocka_unit_test(test_other_refusals), cmocka_unit_test(test_cred_path),
    };
    return cmocka_run_group_tests_name("cred", tests, setup, teardown);
}
