/* test_setuprun.c - a job's setup step (agent/setuprun.c) and where its environment
 * is kept (agent/envcache.c), in a temporary directory, with real /bin/sh.
 *
 * The runner's line quotes what it names for sh; a setup that succeeds leaves its
 * directory whole (.bramble-ready) and its output marked "[setup] "; a second run
 * finds it built and runs nothing; one that fails leaves nothing of it and its
 * last lines in the note the agent reads; one stopped by SIGTERM ends at once and
 * says so; a wrong call says how it is meant.
 * The environment's key follows the setup's text and setup_files' contents, a
 * setup file missing from the code dir or reached through a symlink is refused,
 * and a built one is found again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envcache.h"
#include "setuprun.h"
#include "spec.h"
#include "util.h"

static char tmp[64];

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof(tmp), "/tmp/test_setuprun.XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    br_rm_tree(AT_FDCWD, tmp);
    return 0;
}

static void put(const char *path, const char *text)
{
    br_err_t err;
    assert_int_equal(br_write_file(path, text, strlen(text), 0644, &err), 0);
}

static char *get(const char *path)
{
    size_t len;
    br_err_t err;
    return br_read_file(path, 1 << 20, &len, &err);
}

/* The scratch paths a test of the runner uses: its environment's directory, the
 * failure note and the runner's output (each 128 bytes). */
static void scratch(char *dir, char *failed, char *out)
{
    snprintf(dir, 128, "%s/env", tmp);
    snprintf(failed, 128, "%s/failed", tmp);
    snprintf(out, 128, "%s/out", tmp);
}

/* Run the runner in a child, its stdout and stderr into out (one file): its exit
 * status. */
static int run(const char *dir, const char *failed, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char *argv[] = {(char *)dir, (char *)failed, NULL};
        _exit(br_setuprun_main(2, argv));
    }
    int status;
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_line_quotes(void **state)
{
    (void)state;
    char line[512];
    assert_int_equal(br_setuprun_line("/usr/bin/bramble-agent", "/c/envs/0/ab", "/c/f", NULL, line,
                                      sizeof(line)),
                     0);
    assert_string_equal(line, "'/usr/bin/bramble-agent' --setup-run '/c/envs/0/ab' '/c/f' "
                              "|| exit $?\n");
    assert_int_equal(br_setuprun_line("/a'b", "/d", "/f", NULL, line, sizeof(line)), 0);
    assert_string_equal(line, "'/a'\\''b' --setup-run '/d' '/f' || exit $?\n");
    assert_int_equal(br_setuprun_line("/usr/bin/bramble-agent", "/d", "/f", NULL, line, 20), -1);
    /* in a container: the podman line that runs it, quoted as one word */
    assert_int_equal(br_setuprun_line("/b", "/d", "/f", "exec podman run 'x'", line,
                                      sizeof(line)), 0);
    assert_string_equal(line, "'/b' --setup-run '/d' '/f' 'exec podman run '\\''x'\\''' "
                              "|| exit $?\n");
}

static void test_builds_once(void **state)
{
    (void)state;
    char dir[128], path[256], failed[128], out[128];
    scratch(dir, failed, out);
    snprintf(path, sizeof(path), "%s.setup", dir);
    put(path, "echo one; echo two >&2; echo built > \"$BRAMBLE_ENV_DIR/made\"; "
              "echo x >> \"$BRAMBLE_ENV_DIR/../runs\"");
    assert_int_equal(run(dir, failed, out), 0);
    char *said = get(out);
    assert_non_null(strstr(said, "[setup] one\n"));
    assert_non_null(strstr(said, "[setup] two\n"));
    assert_non_null(strstr(said, "[setup] done in "));
    free(said);
    snprintf(path, sizeof(path), "%s/%s", dir, BR_SETUP_READY);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/made", dir);
    char *made = get(path);
    assert_string_equal(made, "built\n");
    free(made);
    /* again: found built, nothing run */
    assert_int_equal(run(dir, failed, out), 0);
    said = get(out);
    assert_non_null(strstr(said, "done by another job meanwhile"));
    free(said);
    snprintf(path, sizeof(path), "%s/runs", tmp);
    char *runs = get(path);
    assert_string_equal(runs, "x\n");
    free(runs);
    assert_int_equal(access(failed, F_OK), -1);
}

static void test_failure_leaves_nothing(void **state)
{
    (void)state;
    char dir[128], path[256], failed[128], out[128];
    scratch(dir, failed, out);
    snprintf(path, sizeof(path), "%s.setup", dir);
    put(path, "echo half > \"$BRAMBLE_ENV_DIR/half\"; i=0; while [ $i -lt 100 ]; do "
              "echo line-$i; i=$((i+1)); done; echo 'no such package' >&2; exit 7");
    assert_int_equal(run(dir, failed, out), BR_SETUP_FAILED);
    assert_int_equal(access(dir, F_OK), -1); /* nothing of it is kept */
    char *note = get(failed);
    assert_non_null(note);
    assert_non_null(strstr(note, "exit code 7 after "));
    if (!strstr(note, "line-99 / no such package"))
        fail_msg("note: %s", note);
    assert_true(strstr(note, ": line-") != NULL); /* from a whole line */
    assert_null(strstr(note, "line-0 /")); /* only the end */
    assert_true(strlen(note) < BR_SETUP_TAIL + 100);
    free(note);
    char *said = get(out);
    assert_non_null(strstr(said, "[setup] failed (exit code 7); nothing of it is kept"));
    free(said);
    /* a wrong call */
    char *none[] = {NULL};
    assert_int_equal(br_setuprun_main(0, none), 2);
}

/* SIGTERM while the setup runs: the setup (its process group) ends at once, nothing
 * of it is kept, and the note says why. */
static void test_stopped(void **state)
{
    (void)state;
    char dir[128], path[256], failed[128], out[128];
    scratch(dir, failed, out);
    snprintf(path, sizeof(path), "%s.setup", dir);
    put(path, "echo started; sleep 30; echo late");
    int64_t t0 = br_mono_ms();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char *argv[] = {dir, failed, NULL};
        _exit(br_setuprun_main(2, argv));
    }
    for (int i = 0; i < 500; i++) { /* until the setup runs */
        char *said = get(out);
        int started = said && strstr(said, "[setup] started\n");
        free(said);
        if (started)
            break;
        usleep(10000);
    }
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status;
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 128 + SIGTERM);
    assert_true(br_mono_ms() - t0 < 10000);
    assert_int_equal(access(dir, F_OK), -1);
    char *note = get(failed);
    assert_non_null(note);
    if (!strstr(note, "stopped by signal 15 after ") || !strstr(note, ": started"))
        fail_msg("note: %s", note);
    free(note);
}

static void test_env_key_and_files(void **state)
{
    (void)state;
    char cache[128], code[128], path[256];
    snprintf(cache, sizeof(cache), "%s/cache", tmp);
    snprintf(code, sizeof(code), "%s/code", tmp);
    assert_int_equal(mkdir(cache, 0755), 0);
    assert_int_equal(mkdir(code, 0755), 0);
    snprintf(path, sizeof(path), "%s/req.txt", code);
    put(path, "torch\n");
    json_t *s = json_pack("{s:s, s:[s]}", "command", "make", "files", "req.txt");
    br_envcache_env_t a, b, c;
    br_err_t err;
    uid_t uid = geteuid();
    gid_t gid = getegid();
    assert_int_equal(br_envcache_prepare(cache, s, code, NULL, uid, gid, &a, &err), 0);
    assert_int_equal(a.ready, 0);
    snprintf(path, sizeof(path), "%s.setup", a.dir);
    char *text = get(path);
    assert_string_equal(text, "make");
    free(text);
    /* the same again: the same place */
    assert_int_equal(br_envcache_prepare(cache, s, code, NULL, uid, gid, &b, &err), 0);
    assert_string_equal(a.dir, b.dir);
    /* the file changed: another */
    snprintf(path, sizeof(path), "%s/req.txt", code);
    put(path, "torch==2.1\n");
    assert_int_equal(br_envcache_prepare(cache, s, code, NULL, uid, gid, &c, &err), 0);
    assert_string_not_equal(a.dir, c.dir);
    /* built: found */
    assert_int_equal(mkdir(c.dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s", c.dir, BR_SETUP_READY);
    put(path, "built\n");
    assert_int_equal(br_envcache_prepare(cache, s, code, NULL, uid, gid, &b, &err), 0);
    assert_int_equal(b.ready, 1);
    assert_string_equal(b.dir, c.dir);
    /* the image counts: the same setup in an image is another environment */
    assert_int_equal(br_envcache_prepare(cache, s, code, "sha256img", uid, gid, &b, &err), 0);
    assert_string_not_equal(b.dir, c.dir);
    assert_int_equal(b.ready, 0);
    /* the setup's text counts; another uid's is its own */
    json_object_set_new(s, "command", json_string("make all"));
    assert_int_equal(br_envcache_prepare(cache, s, code, NULL, uid, gid, &b, &err), 0);
    assert_string_not_equal(b.dir, c.dir);
    /* a file that is not there, or a symlink out of the code dir */
    json_t *bad = json_pack("{s:s, s:[s]}", "command", "make", "files", "nope.txt");
    assert_int_equal(br_envcache_prepare(cache, bad, code, NULL, uid, gid, &b, &err), -1);
    assert_non_null(strstr(err.text, "setup_files: nope.txt is not a file of the job's code"));
    snprintf(path, sizeof(path), "%s/link.txt", code);
    assert_int_equal(symlink("/etc/hostname", path), 0);
    json_array_set_new(json_object_get(bad, "files"), 0, json_string("link.txt"));
    assert_int_equal(br_envcache_prepare(cache, bad, code, NULL, uid, gid, &b, &err), -1);
    assert_non_null(strstr(err.text, "link.txt is not a file"));
    assert_int_equal(br_envcache_prepare(cache, bad, NULL, NULL, uid, gid, &b, &err), -1);
    assert_non_null(strstr(err.text, "the job has no code dir"));
    /* data named as a setup file: refused before it is read (the agent's loop
     * hashes it) */
    snprintf(path, sizeof(path), "%s/big.bin", code);
    FILE *big = fopen(path, "w");
    assert_non_null(big);
    assert_int_equal(ftruncate(fileno(big), BR_SPEC_SETUP_FILE_MAX + 1), 0);
    fclose(big);
    json_array_set_new(json_object_get(bad, "files"), 0, json_string("big.bin"));
    assert_int_equal(br_envcache_prepare(cache, bad, code, NULL, uid, gid, &b, &err), -1);
    assert_int_equal(err.errnum, EFBIG);
    assert_non_null(strstr(err.text, "setup_files: big.bin is 16777217 bytes, more than"));
    json_decref(bad);
    json_decref(s);
}

/* Built environments listed (newest use first), removed on request unless in use,
 * and trimmed from the one used longest ago. */
static void test_list_remove_trim(void **state)
{
    (void)state;
    char cache[128], path[256], out[128], failed[128], dir[128];
    snprintf(cache, sizeof(cache), "%s/cache", tmp);
    scratch(dir, failed, out);
    assert_int_equal(mkdir(cache, 0755), 0);
    br_envcache_env_t e[2];
    br_err_t err;
    for (int i = 0; i < 2; i++) {
        json_t *s = json_pack("{s:s, s:[]}", "command",
                              i ? "head -c 200000 /dev/zero > \"$BRAMBLE_ENV_DIR/b\""
                                : "head -c 100000 /dev/zero > \"$BRAMBLE_ENV_DIR/a\"",
                              "files");
        assert_int_equal(br_envcache_prepare(cache, s, NULL, NULL, geteuid(), getegid(), &e[i], &err),
                         0);
        json_decref(s);
        assert_int_equal(run(e[i].dir, failed, out), 0);
        usleep(20000); /* (their last use differs) */
    }
    json_t *list = br_envcache_list(cache);
    assert_int_equal(json_array_size(list), 2);
    json_t *newest = json_array_get(list, 0), *oldest = json_array_get(list, 1);
    assert_string_equal(json_string_value(json_object_get(newest, "key")),
                        strrchr(e[1].dir, '/') + 1);
    assert_true(json_integer_value(json_object_get(newest, "bytes")) >= 200000);
    assert_true(json_integer_value(json_object_get(oldest, "bytes")) >= 100000);
    assert_int_equal(json_integer_value(json_object_get(newest, "uid")), (json_int_t)geteuid());
    int64_t all = br_envcache_bytes(cache);
    assert_true(all >= 300000);
    /* in use: kept */
    json_t *in_use = json_pack("{s:b}", e[0].dir, 1);
    const char *key0 = strrchr(e[0].dir, '/') + 1;
    assert_int_equal(br_envcache_remove(cache, key0, in_use, &err), -1);
    assert_int_equal(err.errnum, EBUSY);
    assert_int_equal(br_envcache_trim(cache, 0, in_use), 1); /* the other one went */
    assert_int_equal(access(e[1].dir, F_OK), -1);
    assert_int_equal(access(e[0].dir, F_OK), 0);
    /* not in use any more: trimmed to what the newest holds, the oldest leaves */
    assert_int_equal(br_envcache_remove(cache, key0, NULL, &err), 0);
    assert_int_equal(access(e[0].dir, F_OK), -1);
    snprintf(path, sizeof(path), "%s.setup", e[0].dir);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(br_envcache_remove(cache, key0, NULL, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    json_t *none = br_envcache_list(cache);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    json_decref(in_use);
    json_decref(list);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_quotes),
        cmocka_unit_test_setup_teardown(test_builds_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_key_and_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_remove_trim, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
