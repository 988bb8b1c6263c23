/* test_jobuser.c - whom a job runs as: the owner's own uid from --job-uids, a mapped
 * account, --job-user, the agent's user; never root by accident. */
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

#include "jobuser.h"

static char dir[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_jobuser.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int resolve(const br_jobusers_opts_t *o, int64_t owner, const char *unix_user,
                   br_jobuser_t *who, br_err_t *err)
{
    br_jobusers_t *u = br_jobusers_new(o, err);
    assert_non_null(u);
    int rc = br_jobusers_resolve(u, owner, unix_user, who, err);
    br_jobusers_destroy(&u);
    return rc;
}

static void test_parse_range(void **state)
{
    (void)state;
    uint32_t a, b;
    br_err_t err;
    assert_int_equal(br_jobusers_parse_range("70000-79999", &a, &b, &err), 0);
    assert_int_equal(a, 70000);
    assert_int_equal(b, 79999);
    static const char *const bad[] = {"", "70000", "-5", "5-", "9-3", "0-10", "1-x",
                                      "1-2147483647", "+1-5", "1--5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (br_jobusers_parse_range(bad[i], &a, &b, &err) == 0)
            fail_msg("'%s' accepted", bad[i]);
}

static void test_owner_uids(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* makes homes owned by other uids */
    br_jobusers_opts_t o = {.first = 70000, .last = 70010, .data_dir = dir, .agent_uid = 0};
    br_jobuser_t who;
    br_err_t err = {0};
    assert_int_equal(resolve(&o, 7, NULL, &who, &err), 0);
    assert_int_equal(who.uid, 70007);
    assert_int_equal(who.gid, 70007);
    assert_string_equal(who.user, "#70007:70007");
    struct stat st;
    char home[256];
    snprintf(home, sizeof(home), "%s/homes/70007", dir);
    assert_string_equal(who.home, home);
    assert_int_equal(lstat(home, &st), 0);
    assert_int_equal(st.st_uid, 70007);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(resolve(&o, 7, NULL, &who, &err), 0); /* again: the same home */
    /* past the end of the range */
    assert_int_equal(resolve(&o, 11, NULL, &who, &err), -1);
    assert_non_null(strstr(err.text, "past the end of --job-uids 70000-70010"));
    /* a home taken by someone else is not handed over */
    snprintf(home, sizeof(home), "%s/homes/70003", dir);
    assert_int_equal(mkdir(home, 0700), 0);
    assert_int_equal(resolve(&o, 3, NULL, &who, &err), -1);
    assert_non_null(strstr(err.text, "not a directory owned by uid 70003"));
    /* a mapped account that exists wins; one that does not falls back to the range */
    assert_int_equal(resolve(&o, 5, "nobody", &who, &err), 0);
    assert_string_equal(who.user, "nobody");
    assert_int_equal(resolve(&o, 5, "no-such-user-here", &who, &err), 0);
    assert_int_equal(who.uid, 70005);
}

static void test_fallbacks_and_root(void **state)
{
    (void)state;
    br_jobuser_t who;
    br_err_t err = {0};
    /* no owner (an older coordinator): --job-user, as before */
    br_jobusers_opts_t o = {.job_user = "nobody", .first = 70000, .last = 70010,
                            .data_dir = dir, .agent_uid = 0};
    assert_int_equal(resolve(&o, 0, NULL, &who, &err), 0);
    assert_string_equal(who.user, "nobody");
    /* a root agent with nobody else to run as refuses */
    br_jobusers_opts_t root = {.data_dir = dir, .agent_uid = 0};
    assert_int_equal(resolve(&root, 0, NULL, &who, &err), -1);
    assert_int_equal(err.errnum, EPERM);
    assert_non_null(strstr(err.text, "refusing to run the job as root"));
    br_jobusers_t *u = br_jobusers_new(&root, &err);
    assert_non_null(br_jobusers_warning(u));
    br_jobusers_destroy(&u);
    br_jobusers_opts_t named_root = {.job_user = "root", .data_dir = dir, .agent_uid = 0};
    assert_int_equal(resolve(&named_root, 0, NULL, &who, &err), -1);
    assert_int_equal(resolve(&root, 4, "root", &who, &err), -1);
    /* unless told so */
    root.allow_root = 1;
    assert_int_equal(resolve(&root, 0, NULL, &who, &err), 0);
    assert_string_equal(who.user, "");
    u = br_jobusers_new(&root, &err);
    assert_null(br_jobusers_warning(u));
    br_jobusers_destroy(&u);
    /* a non-root agent runs jobs as itself */
    br_jobusers_opts_t plain = {.data_dir = dir, .agent_uid = 1234};
    assert_int_equal(resolve(&plain, 0, NULL, &who, &err), 0);
    assert_int_equal(who.uid, 1234);
    assert_string_equal(who.user, "");
    /* an unknown --job-user */
    br_jobusers_opts_t unknown = {.job_user = "no-such-user-here", .data_dir = dir,
                                  .agent_uid = 0};
    assert_int_equal(resolve(&unknown, 0, NULL, &who, &err), -1);
    assert_non_null(strstr(err.text, "does not exist"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_range),
        cmocka_unit_test(test_owner_uids),
        cmocka_unit_test(test_fallbacks_and_root),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
