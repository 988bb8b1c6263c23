/* test_jobuser.c - whom a job runs as: the owner's own uid from --job-uids, a mapped
 * account, --job-user, the agent's user; never root by accident. And its checkpoint
 * dir, made for that uid, by root only where that is safe. */
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

/* path (under dir) made with mode and owner. */
static void made_dir(const char *path, mode_t mode, uid_t uid)
{
    assert_int_equal(mkdir(path, mode), 0);
    assert_int_equal(chown(path, uid, uid), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static uid_t owner_of(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return st.st_uid;
}

/* make_dir must refuse path saying want, and leave gone (or path) absent. */
static void refused(const br_jobuser_t *who, const char *path, const char *want,
                    const char *gone)
{
    br_err_t err = {0};
    char head[400];
    snprintf(head, sizeof(head), "checkpoint.dir %s: cannot be made for uid %u: ", path,
             (unsigned)who->uid);
    if (br_jobuser_make_dir(who, path, &err) == 0)
        fail_msg("%s was made", path);
    if (!strstr(err.text, head) || !strstr(err.text, want))
        fail_msg("%s: '%s' wanted, got: %s", path, want, err.text);
    if (access(gone ? gone : path, F_OK) == 0)
        fail_msg("%s was made", gone ? gone : path);
}

static void test_checkpoint_dir_as_the_agent(void **state)
{
    (void)state;
    br_jobuser_t me = {.uid = geteuid(), .gid = getegid()};
    char path[256];
    br_err_t err = {0};
    snprintf(path, sizeof(path), "%s/mine/a/b", dir);
    assert_int_equal(br_jobuser_make_dir(&me, path, &err), 0);
    assert_int_equal(access(path, W_OK), 0);
    assert_int_equal(br_jobuser_make_dir(&me, path, &err), 0); /* there already */
    assert_int_equal(br_jobuser_make_dir(&me, NULL, &err), 0);
    snprintf(path, sizeof(path), "%s/file", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/file/x", dir);
    refused(&me, path, "Not a directory", NULL);
}

static void test_checkpoint_dir_for_a_job_uid(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* makes dirs for other uids */
    assert_int_equal(chmod(dir, 0755), 0);
    br_jobuser_t who = {.uid = 70007, .gid = 70007};
    char base[128], path[256], other[256];
    br_err_t err = {0};
    /* under root's 0755 dir, which the uid may not write: made by root, the uid's */
    snprintf(base, sizeof(base), "%s/ckpts", dir);
    made_dir(base, 0755, 0);
    snprintf(path, sizeof(path), "%s/run/1", base);
    assert_int_equal(br_jobuser_make_dir(&who, path, &err), 0);
    assert_int_equal(owner_of(path), 70007);
    snprintf(other, sizeof(other), "%s/run", base);
    assert_int_equal(owner_of(other), 70007);
    assert_int_equal(br_jobuser_make_dir(&who, path, &err), 0);
    /* along root's own symlink in a dir only root may write */
    snprintf(other, sizeof(other), "%s/real", dir);
    made_dir(other, 0755, 0);
    snprintf(path, sizeof(path), "%s/via", base);
    assert_int_equal(symlink(other, path), 0);
    snprintf(path, sizeof(path), "%s/via/2", base);
    assert_int_equal(br_jobuser_make_dir(&who, path, &err), 0);
    snprintf(path, sizeof(path), "%s/real/2", dir);
    assert_int_equal(owner_of(path), 70007);
    /* not in another user's dir */
    snprintf(other, sizeof(other), "%s/nobodys", dir);
    made_dir(other, 0755, 65534);
    snprintf(path, sizeof(path), "%s/x", other);
    refused(&who, path, "Permission denied (", NULL);
    refused(&who, path, "(nobodys is uid 65534's)", NULL);
    /* nor along a symlink someone else planted (to a dir only root may write) */
    snprintf(path, sizeof(path), "%s/planted", base);
    snprintf(other, sizeof(other), "%s/real", dir);
    assert_int_equal(symlink(other, path), 0);
    assert_int_equal(lchown(path, 70008, 70008), 0);
    snprintf(path, sizeof(path), "%s/planted/x", base);
    snprintf(other, sizeof(other), "%s/real/x", dir);
    refused(&who, path,
            "Permission denied (planted is a symlink the agent does not follow)",
            other);
    /* nor in a dir others than root may write, nor in the system's trees */
    snprintf(other, sizeof(other), "%s/group", dir);
    made_dir(other, 0775, 0);
    snprintf(path, sizeof(path), "%s/x", other);
    refused(&who, path, "(group is writable by others than root)", NULL);
    refused(&who, "/etc/bramble-test-jobuser/x",
            "the agent makes no dir for a job in /etc", "/etc/bramble-test-jobuser");
    refused(&who, "/bramble-test-jobuser", "in /)", NULL);
    /* made below a dir the uid cannot pass: said so */
    snprintf(other, sizeof(other), "%s/private", dir);
    made_dir(other, 0700, 0);
    snprintf(path, sizeof(path), "%s/x", other);
    assert_int_equal(br_jobuser_make_dir(&who, path, &err), -1);
    assert_non_null(strstr(err.text, "not within reach of uid 70007"));
    /* where the uid may write, it makes the dir itself */
    snprintf(other, sizeof(other), "%s/open", dir);
    made_dir(other, 01777, 0);
    snprintf(path, sizeof(path), "%s/mine", other);
    assert_int_equal(br_jobuser_make_dir(&who, path, &err), 0);
    assert_int_equal(owner_of(path), 70007);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_range),
        cmocka_unit_test(test_owner_uids),
        cmocka_unit_test(test_fallbacks_and_root),
        cmocka_unit_test(test_checkpoint_dir_as_the_agent),
        cmocka_unit_test(test_checkpoint_dir_for_a_job_uid),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
