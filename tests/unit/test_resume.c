/* test_resume.c - a resuming attempt takes a newer complete checkpoint (agent/resume.c)
 * on a real directory, as the agent's own user. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resume.h"
#include "util.h"

typedef struct {
    char root[64]; /* mkdtemp: the checkpoint dir */
    json_t *ckpt;  /* the order's checkpoint section */
    json_t *env;
} fix_t;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    snprintf(f->root, sizeof(f->root), "/tmp/test_resume.XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    f->ckpt = json_pack("{s:s, s:s, s:s, s:I}", "dir", f->root, "pattern", "checkpoint-*",
                        "complete_file", "DONE", "resume_after",
                        (json_int_t)(br_now_ms() - 10000));
    f->env = json_pack("{s:s, s:s, s:s}", "BRAMBLE_RESUME_FROM", "", "BRAMBLE_RESUME_STEP",
                       "", "OTHER", "kept");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    nftw(f->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    json_decref(f->ckpt);
    json_decref(f->env);
    free(f);
    return 0;
}

/* A complete checkpoint-step (with its marker written) in the dir. */
static void ckpt(const fix_t *f, int step, int marker)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/checkpoint-%d", f->root, step);
    assert_int_equal(mkdir(p, 0755), 0);
    if (!marker)
        return;
    snprintf(p, sizeof(p), "%s/checkpoint-%d/DONE", f->root, step);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs("done", fp);
    assert_int_equal(fclose(fp), 0);
}

static void ordered(fix_t *f, int step)
{
    char p[PATH_MAX], s[32];
    snprintf(p, sizeof(p), "%s/checkpoint-%d", f->root, step);
    snprintf(s, sizeof(s), "%d", step);
    json_object_set_new(f->env, "BRAMBLE_RESUME_FROM", json_string(p));
    json_object_set_new(f->env, "BRAMBLE_RESUME_STEP", json_string(s));
}

static const char *env(const fix_t *f, const char *name)
{
    return json_string_value(json_object_get(f->env, name));
}

static int resume(fix_t *f, br_ckpt_found_t *got)
{
    br_err_t err = {0};
    int rc = br_resume_newer(f->ckpt, f->env, getuid(), getgid(), got, &err);
    if (rc < 0)
        fail_msg("br_resume_newer: %s", err.text);
    return rc;
}

static void test_takes_the_newest(void **state)
{
    fix_t *f = *state;
    ckpt(f, 20, 1);
    ckpt(f, 30, 1);
    ckpt(f, 40, 0); /* torn */
    ordered(f, 20);
    br_ckpt_found_t got;
    assert_int_equal(resume(f, &got), 1);
    char want[PATH_MAX];
    snprintf(want, sizeof(want), "%s/checkpoint-30", f->root);
    assert_string_equal(got.path, want);
    assert_int_equal(got.step, 30);
    assert_string_equal(env(f, "BRAMBLE_RESUME_FROM"), want);
    assert_string_equal(env(f, "BRAMBLE_RESUME_STEP"), "30");
    assert_string_equal(env(f, "OTHER"), "kept");
}

static void test_nothing_newer_leaves_the_order(void **state)
{
    fix_t *f = *state;
    ckpt(f, 20, 1);
    ckpt(f, 30, 0);
    ordered(f, 20);
    br_ckpt_found_t got;
    assert_int_equal(resume(f, &got), 0);
    char want[PATH_MAX];
    snprintf(want, sizeof(want), "%s/checkpoint-20", f->root);
    assert_string_equal(env(f, "BRAMBLE_RESUME_FROM"), want);
    assert_string_equal(env(f, "BRAMBLE_RESUME_STEP"), "20");
}

/* Nothing counted yet: a complete one the previous attempt wrote is taken. */
static void test_none_counted(void **state)
{
    fix_t *f = *state;
    ckpt(f, 3, 1);
    br_ckpt_found_t got;
    assert_int_equal(resume(f, &got), 1);
    assert_int_equal(got.step, 3);
    assert_string_equal(env(f, "BRAMBLE_RESUME_STEP"), "3");
}

/* Only an order that says when the previous attempt started is looked at: a first
 * attempt, or an old coordinator's order, runs as ordered. */
static void test_without_resume_after(void **state)
{
    fix_t *f = *state;
    ckpt(f, 30, 1);
    ordered(f, 20);
    json_object_del(f->ckpt, "resume_after");
    br_ckpt_found_t got;
    assert_int_equal(resume(f, &got), 0);
    assert_string_equal(env(f, "BRAMBLE_RESUME_STEP"), "20");
    assert_int_equal(resume(f, &got), 0);
}

/* The previous attempt started after every checkpoint there was written: they are
 * another run's leftovers. */
static void test_leftovers_of_an_older_run(void **state)
{
    fix_t *f = *state;
    ckpt(f, 30, 1);
    ordered(f, 20);
    json_object_set_new(f->ckpt, "resume_after", json_integer(br_now_ms() + 60000));
    br_ckpt_found_t got;
    assert_int_equal(resume(f, &got), 0);
    assert_string_equal(env(f, "BRAMBLE_RESUME_STEP"), "20");
}

/* A step that is not one: the order is left as it is. */
static void test_odd_step(void **state)
{
    fix_t *f = *state;
    ckpt(f, 30, 1);
    ordered(f, 20);
    json_object_set_new(f->env, "BRAMBLE_RESUME_STEP", json_string("twenty"));
    br_ckpt_found_t got;
    assert_int_equal(resume(f, &got), 0);
    assert_string_equal(env(f, "BRAMBLE_RESUME_STEP"), "twenty");
}

static void test_check(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"dir\": \"/x\", \"resume_after\": \"yesterday\"}",
        "{\"dir\": \"/x\", \"resume_after\": -5}",
        "{\"dir\": \"/x\", \"resume_after\": 1.5}",
        "{\"dir\": \"/x\", \"resume_after\": null}",
    };
    static const char *const good[] = {
        "{\"dir\": \"/x\"}",
        "{\"dir\": \"/x\", \"resume_after\": 0}",
        "{\"dir\": \"/x\", \"resume_after\": 1764633600000}",
    };
    br_err_t err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *c = json_loads(bad[i], 0, NULL);
        assert_non_null(c);
        assert_int_equal(br_resume_check(c, &err), -1);
        assert_int_equal(err.errnum, EPROTO);
        assert_non_null(strstr(err.text, "resume_after"));
        json_decref(c);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        json_t *c = json_loads(good[i], 0, NULL);
        assert_int_equal(br_resume_check(c, &err), 0);
        json_decref(c);
    }
    assert_int_equal(br_resume_check(NULL, &err), 0);
}

/* A bad order's section is refused before anything is looked at. */
static void test_bad_section(void **state)
{
    fix_t *f = *state;
    ckpt(f, 30, 1);
    json_object_set_new(f->ckpt, "resume_after", json_string("soon"));
    br_ckpt_found_t got;
    br_err_t err = {0};
    assert_int_equal(br_resume_newer(f->ckpt, f->env, getuid(), getgid(), &got, &err), -1);
    assert_int_equal(err.errnum, EPROTO);
    assert_string_equal(env(f, "BRAMBLE_RESUME_FROM"), "");
    json_object_set_new(f->ckpt, "resume_after", json_integer(0));
    json_object_set_new(f->ckpt, "dir", json_string("not/absolute"));
    assert_int_equal(br_resume_newer(f->ckpt, f->env, getuid(), getgid(), &got, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_string_equal(env(f, "BRAMBLE_RESUME_FROM"), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_takes_the_newest),
        T(test_nothing_newer_leaves_the_order),
        T(test_none_counted),
        T(test_without_resume_after),
        T(test_leftovers_of_an_older_run),
        T(test_odd_step),
        T(test_bad_section),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
