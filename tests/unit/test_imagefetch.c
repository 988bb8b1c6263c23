/* test_imagefetch.c - a container job's image made sure of inside its task
 * (agent/imagefetch.c), against a fake podman: a shell script first on PATH that
 * logs its arguments and answers as its environment says.
 *
 * The runner's line quotes what it names for sh and is refused when it does not
 * fit; an image already there costs one `podman image exists` and no output; a
 * pull that fails leaves the registry's answer in the note the agent reads and
 * exits BR_IMAGE_FAILED; one that works says so in lines marked "[image] "; an
 * archive is loaded with `podman load -i`, and one that held another image fails;
 * a stop signal while podman runs ends it; no podman, a REF that podman would take
 * for an option and a wrong call are each refused in words. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "imagefetch.h"
#include "util.h"

#define REGISTRY_SAYS                                                               \
    "Error: initializing source docker://nope:1: pinging container registry nope: " \
    "dial tcp: lookup nope: no such host"

/* The fake podman: "$*" to FAKE_PODMAN_LOG; `image exists` answers yes with
 * FAKE_PODMAN_EXISTS=1 or once FAKE_PODMAN_STATE is there (a pull or load that
 * worked makes it, a load with FAKE_PODMAN_LOAD_OTHER set does not); a pull fails
 * with FAKE_PODMAN_PULL_FAIL's text, or sleeps FAKE_PODMAN_SLEEP seconds first. */
static const char fake_podman[] =
    "#!/bin/sh\n"
    "echo \"$*\" >> \"$FAKE_PODMAN_LOG\"\n"
    "case \"$1\" in\n"
    "image)\n"
    "  [ \"$FAKE_PODMAN_EXISTS\" = 1 ] && exit 0\n"
    "  [ -e \"$FAKE_PODMAN_STATE\" ] && exit 0\n"
    "  echo \"not here\" >&2\n"
    "  exit 1 ;;\n"
    "pull)\n"
    "  echo \"Trying to pull $2...\" >&2\n"
    "  if [ -n \"$FAKE_PODMAN_PULL_FAIL\" ]; then\n"
    "    echo \"$FAKE_PODMAN_PULL_FAIL\" >&2; exit 125\n"
    "  fi\n"
    "  if [ -n \"$FAKE_PODMAN_SLEEP\" ]; then sleep \"$FAKE_PODMAN_SLEEP\"; fi\n"
    "  echo \"Getting image source signatures\" >&2\n"
    "  echo \"Writing manifest to image destination\" >&2\n"
    "  echo 0123456789abcdef\n"
    "  : > \"$FAKE_PODMAN_STATE\"; exit 0 ;;\n"
    "load)\n"
    "  echo \"Getting image source signatures\" >&2\n"
    "  [ -n \"$FAKE_PODMAN_LOAD_OTHER\" ] || : > \"$FAKE_PODMAN_STATE\"\n"
    "  echo \"Loaded image: sha256:0123456789abcdef\"\n"
    "  exit 0 ;;\n"
    "esac\n"
    "exit 125\n";

static char tmp[64];
static char failed[128], out[128], log_path[128], archive[128];

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof(tmp), "/tmp/test_imagefetch.XXXXXX");
    if (!mkdtemp(tmp))
        return -1;
    char path[256];
    snprintf(path, sizeof(path), "%s/bin", tmp);
    br_err_t err;
    if (mkdir(path, 0755) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/bin/podman", tmp);
    if (br_write_file(path, fake_podman, strlen(fake_podman), 0755, &err) < 0)
        return -1;
    snprintf(failed, sizeof(failed), "%s/failed", tmp);
    snprintf(out, sizeof(out), "%s/out", tmp);
    snprintf(log_path, sizeof(log_path), "%s/podman.log", tmp);
    snprintf(archive, sizeof(archive), "%s/image.tar", tmp);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    br_rm_tree(AT_FDCWD, tmp);
    return 0;
}

static char *get(const char *path)
{
    size_t len;
    br_err_t err;
    return br_read_file(path, 1 << 20, &len, &err);
}

/* Start the runner on ref (and archive, when not NULL) in a child, its stdout and
 * stderr into out (one file), the fake podman first on PATH and env ("NAME=VALUE",
 * NULL at the end) in its environment: its pid. */
static pid_t start(const char *ref, const char *arch, const char *const *env)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char path[256], state[160];
        snprintf(path, sizeof(path), "%s/bin:/usr/bin:/bin", tmp);
        snprintf(state, sizeof(state), "%s/podman.state", tmp);
        setenv("PATH", path, 1);
        setenv("FAKE_PODMAN_LOG", log_path, 1);
        setenv("FAKE_PODMAN_STATE", state, 1);
        for (size_t i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        char *argv[] = {failed, (char *)ref, (char *)arch, NULL};
        _exit(br_imagefetch_main(arch ? 3 : 2, argv));
    }
    assert_true(pid > 0);
    return pid;
}

static int finish(pid_t pid)
{
    int status;
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static int run(const char *ref, const char *arch, const char *const *env)
{
    return finish(start(ref, arch, env));
}

/* Each line of text starts with "[image] ". */
static void all_marked(const char *text)
{
    for (const char *p = text; *p;) {
        if (strncmp(p, "[image] ", 8) != 0)
            fail_msg("a line not marked in: %s", text);
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
}

static void test_line_quotes(void **state)
{
    (void)state;
    char line[512];
    assert_int_equal(
        br_imagefetch_line("/usr/bin/bramble-agent", "/c/f",
                           "docker.io/library/alpine:3", NULL, line, sizeof(line)),
        0);
    assert_string_equal(line,
                        "'/usr/bin/bramble-agent' --image-fetch '/c/f' "
                        "'docker.io/library/alpine:3' || exit $?\n");
    assert_int_equal(br_imagefetch_line("/a", "/f", "ab12", "/c/images/ab12.tar", line,
                                        sizeof(line)),
                     0);
    assert_string_equal(line,
                        "'/a' --image-fetch '/f' 'ab12' '/c/images/ab12.tar' "
                        "|| exit $?\n");
    /* a quote in REF stays inside the word */
    assert_int_equal(
        br_imagefetch_line("/a", "/f", "x'; rm -rf / #", NULL, line, sizeof(line)), 0);
    assert_string_equal(line,
                        "'/a' --image-fetch '/f' 'x'\\''; rm -rf / #' || exit $?\n");
    /* too short, by any amount: refused */
    char whole[512];
    assert_int_equal(br_imagefetch_line("/a", "/f", "r", "/z", whole, sizeof(whole)),
                     0);
    size_t need = strlen(whole) + 1;
    for (size_t len = 0; len < need; len++)
        assert_int_equal(br_imagefetch_line("/a", "/f", "r", "/z", line, len), -1);
    assert_int_equal(br_imagefetch_line("/a", "/f", "r", "/z", line, need), 0);
    assert_string_equal(line, whole);
}

/* There already: one question to podman, nothing said, no note. */
static void test_exists_is_silent(void **state)
{
    (void)state;
    br_err_t err;
    assert_int_equal(br_write_file(failed, "old", 3, 0644, &err), 0);
    const char *env[] = {"FAKE_PODMAN_EXISTS=1", NULL};
    assert_int_equal(run("alpine:3", NULL, env), 0);
    char *said = get(out), *asked = get(log_path);
    assert_string_equal(said, "");
    assert_string_equal(asked, "image exists alpine:3\n");
    assert_int_equal(access(failed, F_OK), -1);
    free(said);
    free(asked);
}

static void test_pull_fails(void **state)
{
    (void)state;
    const char *env[] = {"FAKE_PODMAN_PULL_FAIL=" REGISTRY_SAYS, NULL};
    assert_int_equal(run("nope:1", NULL, env), BR_IMAGE_FAILED);
    char *note = get(failed);
    assert_non_null(note);
    if (!strstr(note, "pulling nope:1: exit 125 after ") ||
        !strstr(note, REGISTRY_SAYS))
        fail_msg("note: %s", note);
    free(note);
    char *said = get(out);
    assert_non_null(strstr(said, "[image] pulling nope:1\n"));
    assert_non_null(strstr(said, "[image] " REGISTRY_SAYS "\n"));
    assert_non_null(strstr(said, "[image] pulling nope:1 failed (exit 125)\n"));
    all_marked(said);
    free(said);
    char *asked = get(log_path);
    assert_string_equal(asked, "image exists nope:1\npull nope:1\n");
    free(asked);
}

static void test_pull_works(void **state)
{
    (void)state;
    assert_int_equal(run("alpine:3", NULL, NULL), 0);
    char *said = get(out);
    assert_non_null(strstr(said, "[image] pulling alpine:3\n"));
    assert_non_null(strstr(said, "[image] Getting image source signatures\n"));
    assert_non_null(strstr(said, "[image] 0123456789abcdef\n"));
    assert_non_null(strstr(said, "[image] pulled in "));
    all_marked(said);
    free(said);
    char *asked = get(log_path);
    assert_string_equal(
        asked, "image exists alpine:3\npull alpine:3\nimage exists alpine:3\n");
    free(asked);
    assert_int_equal(access(failed, F_OK), -1);
}

static void test_load(void **state)
{
    (void)state;
    br_err_t err;
    assert_int_equal(br_write_file(archive, "not really a tar", 16, 0644, &err), 0);
    const char *id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_int_equal(run(id, archive, NULL), 0);
    char *said = get(out);
    assert_non_null(strstr(said, "[image] loading the image from the node's cache ("));
    assert_non_null(strstr(said, "[image] Loaded image: sha256:0123456789abcdef\n"));
    assert_non_null(strstr(said, "[image] loaded in "));
    all_marked(said);
    free(said);
    char *asked = get(log_path), want[512];
    snprintf(want, sizeof(want), "image exists %s\nload -i %s\nimage exists %s\n", id,
             archive, id);
    assert_string_equal(asked, want);
    free(asked);
}

/* Loaded, but the archive held another image: a failure, with podman's words. */
static void test_load_other_image(void **state)
{
    (void)state;
    br_err_t err;
    assert_int_equal(br_write_file(archive, "x", 1, 0644, &err), 0);
    const char *env[] = {"FAKE_PODMAN_LOAD_OTHER=1", NULL};
    assert_int_equal(run("feedface", archive, env), BR_IMAGE_FAILED);
    char *note = get(failed);
    assert_non_null(note);
    if (!strstr(note, "loading image: exit 0 after ") ||
        !strstr(note,
                " s, but feedface is not there (the archive held another image): ") ||
        !strstr(note, "Loaded image: sha256:0123456789abcdef"))
        fail_msg("note: %s", note);
    free(note);
    /* no archive at all: said so, podman not asked to load */
    unlink(archive);
    assert_int_equal(run("feedface", archive, NULL), BR_IMAGE_FAILED);
    note = get(failed);
    assert_non_null(strstr(note, "loading image: "));
    assert_non_null(strstr(note, "No such file or directory"));
    free(note);
    char *asked = get(log_path);
    assert_null(strstr(strstr(asked, "load -i") + 1, "load -i"));
    free(asked);
}

/* SIGTERM while the pull runs: the pull ends at once, the note says why. */
static void test_stopped(void **state)
{
    (void)state;
    const char *env[] = {"FAKE_PODMAN_SLEEP=30", NULL};
    int64_t t0 = br_mono_ms();
    pid_t pid = start("slow:1", NULL, env);
    for (int i = 0; i < 500; i++) { /* until podman pulls */
        char *asked = get(log_path);
        int pulling = asked && strstr(asked, "pull slow:1");
        free(asked);
        if (pulling)
            break;
        usleep(10000);
    }
    usleep(100000);
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(finish(pid), 128 + SIGTERM);
    assert_true(br_mono_ms() - t0 < 10000);
    char *note = get(failed);
    assert_non_null(note);
    if (!strstr(note, "pulling slow:1: stopped by signal 15 after "))
        fail_msg("note: %s", note);
    free(note);
}

static void test_refused(void **state)
{
    (void)state;
    /* no podman on PATH: the note says so */
    const char *env[] = {"PATH=/nonexistent", NULL};
    assert_int_equal(run("alpine:3", NULL, env), BR_IMAGE_FAILED);
    char *note = get(failed);
    if (!strstr(note, "pulling alpine:3: exit 127 after ") ||
        !strstr(note, "podman: No such file or directory"))
        fail_msg("note: %s", note);
    free(note);
    /* an option for a name: podman is not run */
    assert_int_equal(run("--help", NULL, NULL), BR_IMAGE_FAILED);
    note = get(failed);
    assert_non_null(
        strstr(note, "image: '--help' is not an image's name (it starts with '-')"));
    free(note);
    assert_int_equal(access(log_path, F_OK), -1);
    /* a wrong call */
    char *none[] = {NULL};
    assert_int_equal(br_imagefetch_main(0, none), 2);
    char *empty[] = {failed, "", NULL};
    assert_int_equal(br_imagefetch_main(2, empty), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_quotes),
        cmocka_unit_test_setup_teardown(test_exists_is_silent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_works, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_other_image, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
