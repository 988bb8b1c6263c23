/* test_cache.c - the node's cache (agent/cache.c) at an agent's start: the working
 * directories of ended attempts left more than a day are removed, but not those of
 * the attempts still running, which the new agent takes over (a long run's top
 * directory can be older than a day: its files change, not its entries), nor the
 * recent ones; what a pull cut short left in trees/ goes. The stamp of trees/ tells
 * a tree that came or went, by hand too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "util.h"

/* Make DIR/work/name, its times age_s in the past, with a file in it. */
static void workdir(const char *dir, const char *name, int64_t age_s)
{
    char path[PATH_MAX], file[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/work/%s", dir, name);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(file, sizeof(file), "%s/ckpt", path);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("step 9000\n", f);
    fclose(f);
    struct timespec t[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static int present(const char *dir, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/work/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* A cache at DIR/cache, DIR made from its template (cache: PATH_MAX bytes). */
static br_cache_t *new_cache(char *dir, char *cache)
{
    char listings[PATH_MAX];
    assert_non_null(mkdtemp(dir));
    snprintf(cache, PATH_MAX, "%s/cache", dir);
    snprintf(listings, sizeof(listings), "%s/listings", dir);
    br_err_t err = {0};
    br_cache_t *c = br_cache_new(cache, listings, dir, &err);
    if (!c)
        fail_msg("cache: %s", err.text);
    return c;
}

static void test_sweep_keeps_the_running(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_cache.XXXXXX", cache[PATH_MAX];
    br_cache_t *c = new_cache(dir, cache);
    const int64_t day = 24 * 3600;
    workdir(cache, "7.1", 3 * day); /* still running: taken over by the new agent */
    workdir(cache, "7.2", 3 * day); /* another attempt of the same job, ended */
    workdir(cache, "8.1", 2 * day); /* ended */
    workdir(cache, "9.1", 60);      /* ended a minute ago */
    /* a pull cut short (its agent killed): its staging and its files on their way */
    char stage[PATH_MAX + 64];
    snprintf(stage, sizeof(stage), "%s/trees/.bramble-pull-abc", cache);
    assert_int_equal(mkdir(stage, 0700), 0);
    snprintf(stage, sizeof(stage), "%s/trees/.bramble-pull-abc.tmp", cache);
    assert_int_equal(mkdir(stage, 0700), 0);
    json_t *keep = json_pack("[{s:i, s:i}]", "job", 7, "attempt", 1);
    assert_non_null(keep);
    assert_int_equal(br_cache_sweep_work(c, day, keep), 2);
    assert_true(present(cache, "7.1"));
    assert_false(present(cache, "7.2"));
    assert_false(present(cache, "8.1"));
    assert_true(present(cache, "9.1"));
    assert_int_equal(access(stage, F_OK), -1);
    stage[strlen(stage) - 4] = '\0';
    assert_int_equal(access(stage, F_OK), -1);
    assert_int_equal(br_cache_sweep_work(c, day, NULL), 1); /* none running: it goes */
    assert_false(present(cache, "7.1"));
    json_decref(keep);
    br_cache_destroy(&c);
    br_rm_tree(AT_FDCWD, dir);
}

/* DIR/trees' times set age_s in the past (so that what follows changes them, however
 * coarse the clock). */
static void age_trees(const char *cache, int64_t age_s)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/trees", cache);
    struct timespec t[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void test_trees_stamp_tells_a_change_by_hand(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_cache.XXXXXX", cache[PATH_MAX];
    char tree[PATH_MAX + 80], trees[PATH_MAX + 8];
    br_cache_t *c = new_cache(dir, cache);
    age_trees(cache, 100);
    int64_t s0 = br_cache_trees_stamp(c);
    assert_true(s0 != 0);
    assert_true(br_cache_trees_stamp(c) == s0); /* nothing changed */

    snprintf(tree, sizeof(tree), "%s/trees/%064d", cache, 7); /* a tree put there */
    assert_int_equal(mkdir(tree, 0700), 0);
    int64_t s1 = br_cache_trees_stamp(c);
    assert_true(s1 != s0);
    json_t *listed = br_cache_trees(c);
    assert_int_equal(json_array_size(listed), 1);
    json_decref(listed);

    age_trees(cache, 50);
    int64_t s2 = br_cache_trees_stamp(c);
    assert_int_equal(rmdir(tree), 0); /* removed by hand */
    assert_true(br_cache_trees_stamp(c) != s2);

    /* the whole of trees/ removed and made again (rm -r, mkdir) */
    age_trees(cache, 100);
    int64_t s3 = br_cache_trees_stamp(c);
    snprintf(trees, sizeof(trees), "%s/trees", cache);
    br_rm_tree(AT_FDCWD, trees);
    assert_int_equal(br_cache_trees_stamp(c), 0); /* (none: unreadable) */
    assert_int_equal(mkdir(trees, 0700), 0);
    assert_true(br_cache_trees_stamp(c) != s3);
    br_cache_destroy(&c);
    br_rm_tree(AT_FDCWD, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_keeps_the_running),
        cmocka_unit_test(test_trees_stamp_tells_a_change_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
