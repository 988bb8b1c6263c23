/* test_runstate.c - the attempts an agent saves for the next one: records written
 * whole, loaded back with their job and attempt, forgotten with their exit files,
 * leftovers and broken records cleaned up, and the keeper's pid and run id. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runstate.h"

static char g_dir[64];

static void touch(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/run/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/run/%s", g_dir, name);
    return access(path, F_OK) == 0;
}

static void test_save_load_forget(void **state)
{
    br_err_t err = {0};
    br_runstate_t *rs = br_runstate_new(g_dir, &err);
    assert_non_null(rs);
    struct stat st;
    assert_int_equal(stat(br_runstate_dir(rs), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    json_t *rec = json_pack("{s:i, s:[{s:i}]}", "port", 4242, "tasks", "rank", 0);
    assert_int_equal(br_runstate_save(rs, 12, 3, rec, &err), 0);
    assert_int_equal(br_runstate_save(rs, 7, 1, rec, &err), 0);
    json_decref(rec);
    touch("12.3.0.exit", "0\n");
    touch("7.1.0.exit", "256\n");
    touch("99.1.0.exit", "0\n");       /* no record: a leftover */
    touch("8.1.json", "{not json");    /* broken: dropped */
    touch("notes.txt", "left alone");  /* not ours to judge */
    json_t *all = br_runstate_load(rs);
    assert_int_equal(json_array_size(all), 2);
    int seen = 0;
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r) {
        json_int_t job = json_integer_value(json_object_get(r, "job"));
        int attempt = (int)json_integer_value(json_object_get(r, "attempt"));
        assert_true((job == 12 && attempt == 3) || (job == 7 && attempt == 1));
        assert_int_equal(json_integer_value(json_object_get(r, "port")), 4242);
        seen |= job == 12 ? 1 : 2;
    }
    assert_int_equal(seen, 3);
    json_decref(all);
    assert_false(exists("99.1.0.exit"));
    assert_false(exists("8.1.json"));
    assert_true(exists("notes.txt"));
    assert_true(exists("12.3.0.exit"));
    br_runstate_forget(rs, 12, 3);
    assert_false(exists("12.3.json"));
    assert_false(exists("12.3.0.exit"));
    assert_true(exists("7.1.json") && exists("7.1.0.exit"));
    all = br_runstate_load(rs);
    assert_int_equal(json_array_size(all), 1);
    json_decref(all);
    br_runstate_forget(rs, 7, 1);
    br_runstate_destroy(&rs);
    assert_null(rs);
}

static void test_keeper_record(void **state)
{
    br_err_t err = {0};
    br_runstate_t *rs = br_runstate_new(g_dir, &err);
    assert_non_null(rs);
    pid_t pid;
    uint64_t start;
    char run[17];
    unlink(strcat(strcpy((char[128]){0}, g_dir), "/run/keeper"));
    assert_int_equal(br_runstate_keeper(rs, &pid, &start, run), -1);
    assert_int_equal(br_runstate_save_keeper(rs, 4321, 987654321ULL, "0123456789abcdef",
                                             &err), 0);
    assert_int_equal(br_runstate_keeper(rs, &pid, &start, run), 0);
    assert_int_equal(pid, 4321);
    assert_int_equal(start, 987654321ULL);
    assert_string_equal(run, "0123456789abcdef");
    touch("keeper", "12 34 not-hex\n");
    assert_int_equal(br_runstate_keeper(rs, &pid, &start, run), -1);
    br_runstate_destroy(&rs);
}

static int setup(void **state)
{
    strcpy(g_dir, "/tmp/bramble-runstate-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load_forget),
        cmocka_unit_test(test_keeper_record),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
