/* test_util.c - the shared helpers (proto/util.c): units, names, files, errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "util.h"

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define TIB (1024ULL * GIB)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static char tmpdir[] = "/tmp/test_util.XXXXXX";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    umask(022);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A path under the test's directory. */
static void under(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tmpdir, rel);
}

/* ---- durations ---- */

static void test_port(void **state)
{
    (void)state;
    br_err_t err;
    int port = -1;
    assert_int_equal(br_parse_port("7703", 1, &port, &err), 0);
    assert_int_equal(port, 7703);
    assert_int_equal(br_parse_port("0", 0, &port, &err), 0);
    assert_int_equal(port, 0);
    assert_int_equal(br_parse_port("65535", 1, &port, &err), 0);
    static const char *const bad[] = {"0", "65536", "-1", "", "12x", " 80", "99999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(br_parse_port(bad[i], 1, &port, &err), -1);
        assert_int_equal(err.errnum, EINVAL);
    }
    assert_string_equal(err.text, "'99999999999999': expected 1..65535");
    assert_int_equal(port, 65535); /* untouched by a refusal */
}

static void test_duration_good(void **state)
{
    static const struct {
        const char *in;
        int64_t ms;
    } cases[] = {
        {"500ms", 500},    {"1s", 1000},    {"1.5m", 90000}, {"12h", 43200000},
        {"2d", 172800000}, {"3", 3000},     {"0", 0},        {"0ms", 0},
        {"0.5s", 500},     {"1e3ms", 1000}, {"10m", 600000}, {"0.25h", 900000},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        int64_t ms = -1;
        br_err_t err = {0};
        int rc = br_parse_duration(cases[i].in, &ms, &err);
        if (rc != 0)
            fail_msg("'%s' refused: %s", cases[i].in, err.text);
        if (ms != cases[i].ms)
            fail_msg("'%s' -> %lld, expected %lld", cases[i].in, (long long)ms,
                     (long long)cases[i].ms);
    }
}

static void test_duration_bad(void **state)
{
    static const char *cases[] = {
        "",    "-1s",      "1x",     "s",     "1 s",  "nan",  "0x10",
        "inf", " 1s",      "+1s",    "1S",    "1sec", "1ms ", "1..5s",
        "NaN", "infinity", "1e999s", "1e20d", "1s1",  "ms",
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        int64_t ms = 12345;
        br_err_t err = {0};
        errno = 0;
        if (br_parse_duration(cases[i], &ms, &err) != -1)
            fail_msg("'%s' accepted as %lld ms", cases[i], (long long)ms);
        assert_int_equal(err.errnum, EINVAL);
        assert_int_equal(errno, EINVAL);
        assert_non_null(strstr(err.text, "bad duration"));
        assert_int_equal(ms, 12345); /* untouched on failure */
    }
    br_err_t err = {0};
    int64_t ms;
    assert_int_equal(br_parse_duration(NULL, &ms, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_parse_duration("x", &ms, NULL), -1); /* err may be NULL */
}

/* ---- sizes ---- */

static void test_size_good(void **state)
{
    static const struct {
        const char *in;
        uint64_t bytes;
    } cases[] = {
        {"24GiB", 24 * GIB},
        {"512MiB", 512 * MIB},
        {"16GB", 16000000000ULL},
        {"1024", 1024},
        {"1.5TiB", 3 * TIB / 2},
        {"24gib", 24 * GIB},
        {"24GIB", 24 * GIB},
        {"512mib", 512 * MIB},
        {"16gb", 16000000000ULL},
        {"1KiB", KIB},
        {"2k", 2000},
        {"2KB", 2000},
        {"3M", 3000000},
        {"3g", 3000000000ULL},
        {"1t", 1000000000000ULL},
        {"7b", 7},
        {"0", 0},
        {"0.5KiB", 512},
        {"1e3", 1000},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        uint64_t b = 1;
        br_err_t err = {0};
        if (br_parse_size(cases[i].in, &b, &err) != 0)
            fail_msg("'%s' refused: %s", cases[i].in, err.text);
        if (b != cases[i].bytes)
            fail_msg("'%s' -> %llu, expected %llu", cases[i].in, (unsigned long long)b,
                     (unsigned long long)cases[i].bytes);
    }
}

/* Sizes must fit a signed 64-bit integer (the store and JSON carry them so): larger
 * ones are refused, never wrapped or clamped. */
static void test_size_above_int64(void **state)
{
    static const char *cases[] = {"9.5e18", "10000000TB", "16000000tib"};
    for (size_t i = 0; i < NELEM(cases); i++) {
        uint64_t b = 1;
        br_err_t err = {0};
        if (br_parse_size(cases[i], &b, &err) == 0)
            fail_msg("'%s' accepted as %llu", cases[i], (unsigned long long)b);
        assert_non_null(strstr(err.text, "bad size"));
        assert_int_equal(b, 1);
    }
    uint64_t b = 0;
    assert_int_equal(br_parse_size("8EB", &b, NULL) == 0 || br_parse_size("8000000TB", &b,
                                                                           NULL) == 0,
                     1);
    assert_int_equal(b, 8000000000000000000ULL);
}

/* Values past a limit name the limit, so that the user knows what to give. */
static void test_limits_named(void **state)
{
    (void)state;
    br_err_t err = {0};
    int64_t ms;
    uint64_t b;
    double c;
    assert_int_equal(br_parse_duration("1e20d", &ms, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_non_null(strstr(err.text, "too long (at most 11574074 days)"));
    assert_int_equal(br_parse_size("1e30", &b, &err), -1);
    assert_non_null(strstr(err.text, "too large (less than 8EiB"));
    assert_int_equal(br_parse_count("1e17", &c, &err), -1);
    assert_non_null(strstr(err.text, "too large (at most 1e16"));
    /* a malformed value is not called too large */
    assert_int_equal(br_parse_size("1XB", &b, &err), -1);
    assert_null(strstr(err.text, "too large"));
}

static void test_size_bad(void **state)
{
    static const char *cases[] = {
        "",     "-1",   "-1GiB",      "GiB",    "1 GiB", "nan",    "inf",
        "0x10", "1XB",  "1EiB",       "1gi",    "1iB",   "+5",     " 5",
        "5 ",   "1e30", "20000000TB", "1.5.5G", "1,5G",  "NaNGiB",
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        uint64_t b = 77;
        br_err_t err = {0};
        if (br_parse_size(cases[i], &b, &err) != -1)
            fail_msg("'%s' accepted as %llu", cases[i], (unsigned long long)b);
        assert_int_equal(err.errnum, EINVAL);
        assert_non_null(strstr(err.text, "bad size"));
        assert_int_equal(b, 77);
    }
}

/* ---- counts ---- */

static void test_count_good(void **state)
{
    static const struct {
        const char *in;
        double count;
    } cases[] = {
        {"8B", 8e9},  {"70B", 70e9},   {"350M", 350e6}, {"1.5B", 1.5e9},
        {"7e9", 7e9}, {"125K", 125e3}, {"8b", 8e9},     {"350m", 350e6},
        {"2T", 2e12}, {"3G", 3e9},     {"42", 42},      {"0", 0},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        double c = -1;
        br_err_t err = {0};
        if (br_parse_count(cases[i].in, &c, &err) != 0)
            fail_msg("'%s' refused: %s", cases[i].in, err.text);
        if (c != cases[i].count)
            fail_msg("'%s' -> %g, expected %g", cases[i].in, c, cases[i].count);
    }
}

static void test_count_bad(void **state)
{
    static const char *cases[] = {
        "",    "-8B", "B",    "8 B",    "8X",  "8BB", "nan",
        "inf", "0x8", "1e17", "20000T", " 8B", "8Bn",
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        double c = 0;
        br_err_t err = {0};
        if (br_parse_count(cases[i], &c, &err) != -1)
            fail_msg("'%s' accepted as %g", cases[i], c);
        assert_int_equal(err.errnum, EINVAL);
        assert_non_null(strstr(err.text, "bad count"));
    }
}

/* ---- formatting ---- */

static void test_format_size(void **state)
{
    static const struct {
        uint64_t bytes;
        const char *out;
    } cases[] = {
        {0, "0B"},
        {1, "1B"},
        {1023, "1023B"},
        {1024, "1.0KiB"},
        {1536, "1.5KiB"},
        {512 * MIB, "512.0MiB"},
        {24 * GIB, "24.0GiB"},
        {3 * TIB / 2, "1.5TiB"},
        {1024 * TIB, "1.0PiB"},
        {1024 * 1024 * TIB, "1024.0PiB"},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        char buf[32];
        assert_ptr_equal(br_format_size(cases[i].bytes, buf, sizeof(buf)), buf);
        assert_string_equal(buf, cases[i].out);
    }
    char small[4];
    br_format_size(24 * GIB, small, sizeof(small)); /* truncated, still terminated */
    assert_string_equal(small, "24.");
}

static void test_format_duration(void **state)
{
    static const struct {
        int64_t ms;
        const char *out;
    } cases[] = {
        {0, "0s"},         {1, "1ms"},         {250, "250ms"},   {1000, "1s"},
        {1500, "1500ms"},  {59000, "59s"},     {60000, "1m"},    {90000, "90s"},
        {300000, "5m"},    {3600000, "1h"},    {5400000, "90m"}, {43200000, "12h"},
        {86400000, "24h"}, {3601000, "3601s"},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        char buf[32];
        assert_ptr_equal(br_format_duration(cases[i].ms, buf, sizeof(buf)), buf);
        assert_string_equal(buf, cases[i].out);
    }
    /* what it writes parses back to the same value */
    for (size_t i = 0; i < NELEM(cases); i++) {
        int64_t ms;
        assert_int_equal(br_parse_duration(cases[i].out, &ms, NULL), 0);
        assert_int_equal(ms, cases[i].ms);
    }
}

/* ---- names ---- */

static void test_valid_name(void **state)
{
    char max[64], over[65];
    memset(max, 'a', 63);
    max[63] = '\0';
    memset(over, 'a', 64);
    over[64] = '\0';
    static const struct {
        const char *s;
        int ok;
    } cases[] = {
        {"a", 1},   {"node-1", 1},      {"0", 1},      {"gpu01", 1},
        {"a-", 1},  {"a--b", 1},        {"9lives", 1}, {"", 0},
        {"-a", 0},  {"A", 0},           {"Node", 0},   {"a_b", 0},
        {"a.b", 0}, {"a b", 0},         {"a/b", 0},    {" a", 0},
        {"a\n", 0}, {"caf\xc3\xa9", 0}, {"a:b", 0},    {"..", 0},
    };
    for (size_t i = 0; i < NELEM(cases); i++)
        if (br_valid_name(cases[i].s) != cases[i].ok)
            fail_msg("br_valid_name(\"%s\") != %d", cases[i].s, cases[i].ok);
    assert_int_equal(br_valid_name(max), 1);
    assert_int_equal(br_valid_name(over), 0);
    assert_int_equal(br_valid_name(NULL), 0);
}

static void test_strlcpy(void **state)
{
    char buf[4];
    assert_ptr_equal(br_strlcpy(buf, "abcdef", sizeof(buf)), buf);
    assert_string_equal(buf, "abc");
    br_strlcpy(buf, "x", sizeof(buf));
    assert_string_equal(buf, "x");
    buf[0] = 'q';
    br_strlcpy(buf, "abc", 0); /* n 0: nothing written */
    assert_int_equal(buf[0], 'q');
}

/* ---- files ---- */

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

static void test_mkdir_p(void **state)
{
    char path[512], part[512];
    br_err_t err = {0};
    under(path, sizeof(path), "a/b/c");
    assert_int_equal(br_mkdir_p(path, 0700, &err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(mode_of(path), 0700);
    under(part, sizeof(part), "a");
    assert_int_equal(mode_of(part), 0700);
    under(part, sizeof(part), "a/b");
    assert_int_equal(mode_of(part), 0700);
    /* again: existing directories are fine and keep their mode */
    assert_int_equal(br_mkdir_p(path, 0755, &err), 0);
    assert_int_equal(mode_of(path), 0700);
    /* a trailing slash, and a new leaf under an existing parent */
    under(path, sizeof(path), "a/b/d/");
    assert_int_equal(br_mkdir_p(path, 0750, &err), 0);
    under(path, sizeof(path), "a/b/d");
    assert_int_equal(mode_of(path), 0750);
    under(part, sizeof(part), "a/b");
    assert_int_equal(mode_of(part), 0700);
}

static void test_mkdir_p_errors(void **state)
{
    char path[512];
    br_err_t err = {0};
    /* a component that is a regular file */
    under(path, sizeof(path), "file");
    assert_int_equal(br_write_file(path, "x", 1, 0644, &err), 0);
    under(path, sizeof(path), "file/sub");
    assert_int_equal(br_mkdir_p(path, 0700, &err), -1);
    assert_int_equal(err.errnum, ENOTDIR);
    assert_non_null(strstr(err.text, "file"));
    /* too long */
    char *lng = malloc(5000);
    assert_non_null(lng);
    memset(lng, 'x', 4999);
    lng[0] = '/';
    lng[4999] = '\0';
    assert_int_equal(br_mkdir_p(lng, 0700, &err), -1);
    assert_int_equal(err.errnum, ENAMETOOLONG);
    free(lng);
}

/* mkdir -p refuses a path whose last component exists and is not a directory. */
static void test_mkdir_p_over_file(void **state)
{
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "plain");
    assert_int_equal(br_write_file(path, "x", 1, 0644, &err), 0);
    int rc = br_mkdir_p(path, 0700, &err);
    if (rc != -1)
        fail_msg("br_mkdir_p over a regular file returned %d, expected -1", rc);
    assert_int_not_equal(err.errnum, 0);
}

static void test_file_round_trip(void **state)
{
    static const struct {
        const char *rel;
        mode_t mode;
        size_t len;
    } cases[] = {
        {"f/secret", 0600, 40}, {"f/public", 0644, 1},  {"f/empty", 0600, 0},
        {"f/page", 0640, 4096}, {"f/big", 0600, 10000}, {"f/odd", 0400, 4097},
    };
    char dir[512];
    br_err_t err = {0};
    under(dir, sizeof(dir), "f");
    assert_int_equal(br_mkdir_p(dir, 0700, &err), 0);
    for (size_t i = 0; i < NELEM(cases); i++) {
        char path[512];
        under(path, sizeof(path), cases[i].rel);
        unsigned char *data = malloc(cases[i].len + 1);
        assert_non_null(data);
        for (size_t j = 0; j < cases[i].len; j++)
            data[j] = (unsigned char)(j * 7 + i); /* includes NUL bytes */
        if (br_write_file(path, data, cases[i].len, cases[i].mode, &err) != 0)
            fail_msg("%s: %s", path, err.text);
        assert_int_equal(mode_of(path), cases[i].mode);
        size_t len = 999999;
        char *back = br_read_file(path, cases[i].len, &len, &err);
        if (!back)
            fail_msg("%s: %s", path, err.text);
        assert_int_equal(len, cases[i].len);
        assert_memory_equal(back, data, cases[i].len);
        assert_int_equal(back[len], '\0');
        free(back);
        free(data);
    }
    /* overwriting replaces content and mode, leaving no temp file behind */
    char path[512];
    under(path, sizeof(path), "f/secret");
    assert_int_equal(br_write_file(path, "new", 3, 0640, &err), 0);
    assert_int_equal(mode_of(path), 0640);
    char *back = br_read_file(path, 100, NULL, &err);
    assert_non_null(back);
    assert_string_equal(back, "new");
    free(back);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    assert_int_equal(access(tmp, F_OK), -1);
}

static void test_read_file_limits(void **state)
{
    static const struct {
        size_t len, max;
        int ok;
    } cases[] = {
        {100, 50, 0},     {100, 99, 0},     {100, 100, 1},     {0, 0, 1},
        {1, 0, 0},        {4096, 4095, 0},  {4096, 4096, 1},   {4097, 4096, 0},
        {10000, 5000, 0}, {10000, 9999, 0}, {10000, 10000, 1}, {20000, 100000, 1},
    };
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "limit");
    for (size_t i = 0; i < NELEM(cases); i++) {
        char *data = calloc(1, cases[i].len + 1);
        assert_non_null(data);
        memset(data, 'z', cases[i].len);
        assert_int_equal(br_write_file(path, data, cases[i].len, 0600, &err), 0);
        free(data);
        memset(&err, 0, sizeof(err));
        size_t len = 4242;
        char *back = br_read_file(path, cases[i].max, &len, &err);
        if (cases[i].ok) {
            if (!back)
                fail_msg("len %zu max %zu refused: %s", cases[i].len, cases[i].max,
                         err.text);
            assert_int_equal(len, cases[i].len);
            free(back);
        } else {
            if (back)
                fail_msg("len %zu max %zu accepted", cases[i].len, cases[i].max);
            assert_int_equal(err.errnum, EFBIG);
            assert_int_equal(errno, EFBIG);
            assert_non_null(strstr(err.text, "larger than"));
            assert_int_equal(len, 4242);
        }
    }
}

static void test_read_file_missing(void **state)
{
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "no/such/file");
    assert_null(br_read_file(path, 100, NULL, &err));
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.text, path));
    /* a write into a missing directory fails and names the path */
    assert_int_equal(br_write_file(path, "x", 1, 0600, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.text, "no/such/file"));
}

static void test_clocks(void **state)
{
    int64_t now = br_now_ms();
    assert_true(now > 1600000000000LL); /* after 2020 */
    int64_t a = br_mono_ms(), b = br_mono_ms();
    assert_true(b >= a);
    br_raise_nofile(); /* must not fail or crash */
}

static void test_err(void **state)
{
    br_err_t err = {0};
    errno = 0;
    assert_int_equal(br_errf(&err, EINVAL, "bad %s %d", "thing", 7), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(err.errnum, EINVAL);
    assert_string_equal(err.text, "bad thing 7");
    assert_null(br_errp(&err, ENOENT, "gone"));
    assert_int_equal(errno, ENOENT);
    br_err_prefix(&err, "file %d", 3);
    assert_string_equal(err.text, "file 3: gone");
    assert_int_equal(err.errnum, ENOENT);
    assert_int_equal(br_errf(NULL, EPERM, "x"), -1);
    assert_int_equal(errno, EPERM);
    br_err_prefix(NULL, "x");
    /* long texts are cut, never overrun */
    char lng[2 * BR_ERR_TEXT];
    memset(lng, 'y', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    br_errf(&err, EIO, "%s", lng);
    assert_int_equal(strlen(err.text), BR_ERR_TEXT - 1);
    br_err_prefix(&err, "%s", lng);
    assert_int_equal(strlen(err.text), BR_ERR_TEXT - 1);
}

/* br_rm_tree removes a tree, and a symlink in it as a link: what it points to stays. */
static void test_rm_tree(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_rm_tree.XXXXXX", path[256], keep[256];
    assert_non_null(mkdtemp(dir));
    snprintf(keep, sizeof(keep), "%s/keep", dir);
    assert_int_equal(mkdir(keep, 0700), 0);
    snprintf(path, sizeof(path), "%s/keep/precious", dir);
    assert_int_equal(br_write_file(path, "x", 1, 0600, NULL), 0);
    snprintf(path, sizeof(path), "%s/t/a/b", dir);
    assert_int_equal(br_mkdir_p(path, 0700, NULL), 0);
    snprintf(path, sizeof(path), "%s/t/a/b/f", dir);
    assert_int_equal(br_write_file(path, "y", 1, 0600, NULL), 0);
    snprintf(path, sizeof(path), "%s/t/a/link", dir);
    assert_int_equal(symlink(keep, path), 0);
    snprintf(path, sizeof(path), "%s/t", dir);
    br_rm_tree(AT_FDCWD, path);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/keep/precious", dir);
    assert_int_equal(access(path, F_OK), 0); /* not followed */
    br_rm_tree(AT_FDCWD, dir);
    assert_int_equal(access(dir, F_OK), -1);
    br_rm_tree(AT_FDCWD, dir); /* gone already: nothing to do */
}

int main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_port),
        cmocka_unit_test(test_duration_good),
        cmocka_unit_test(test_duration_bad),
        cmocka_unit_test(test_size_good),
        cmocka_unit_test(test_size_above_int64),
        cmocka_unit_test(test_size_bad),
        cmocka_unit_test(test_limits_named),
        cmocka_unit_test(test_count_good),
        cmocka_unit_test(test_count_bad),
        cmocka_unit_test(test_format_size),
        cmocka_unit_test(test_format_duration),
        cmocka_unit_test(test_valid_name),
        cmocka_unit_test(test_strlcpy),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_mkdir_p_errors),
        cmocka_unit_test(test_mkdir_p_over_file),
        cmocka_unit_test(test_rm_tree),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_read_file_limits),
        cmocka_unit_test(test_read_file_missing),
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_err),
    };
    return cmocka_run_group_tests_name("util", tests, setup, teardown);
}
