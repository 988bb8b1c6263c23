/* test_container.c - the podman command of a container job (agent/container.c).
 *
 * What runs is exactly one `exec podman run` of the image with the job's command:
 * the host's network and process namespace, the job's uid:gid, no capabilities
 * and no new privileges, the job's variables by name (never their values, never
 * a name a shell would read), its directories mounted at the same paths (data
 * sets read-only), and every word quoted for sh whatever it holds. An agent that
 * runs no containers, or a mode it does not know, says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "container.h"

static void test_command(void **state)
{
    (void)state;
    br_err_t err;
    br_container_t *c = br_container_new("auto", &err);
    assert_non_null(c);
    if (!br_container_runtime(c)) { /* (no podman on this machine: nothing to compose) */
        br_container_destroy(&c);
        skip();
    }
    json_t *env = json_pack("{s:s, s:s, s:s}", "BRAMBLE_JOB_ID", "7", "SECRET_VALUE",
                            "v$(id)", "bad name", "x");
    json_t *tasks = json_pack("[{s:{s:s}}]", "env", "RANK", "0");
    const char *rw[] = {"/w/it's", NULL};
    const char *ro[] = {"/cache/trees/ab", "/data", NULL};
    br_container_run_t r = {.image = "localhost/x:1", .command = "echo 'hi'; exit 3",
                            .workdir = "/w/it's", .uid = 1000, .gid = 1001, .env = env,
                            .tasks = tasks, .rw = rw, .ro = ro};
    char *cmd = br_container_command(c, &r, &err);
    assert_non_null(cmd);
    assert_true(strncmp(cmd, "exec podman run --rm --network host --pid host ", 47) == 0);
    assert_non_null(strstr(cmd, "--security-opt no-new-privileges --cap-drop all"));
    assert_non_null(strstr(cmd, " --user '1000:1001'"));
    assert_non_null(strstr(cmd, " -e 'BRAMBLE_JOB_ID'"));
    assert_non_null(strstr(cmd, " -e 'RANK'"));
    assert_non_null(strstr(cmd, " -e 'BRAMBLE_TASK'"));
    assert_non_null(strstr(cmd, " -e 'SECRET_VALUE'"));
    assert_null(strstr(cmd, "v$(id)")); /* (values are not on the command line) */
    assert_null(strstr(cmd, "bad name"));
    assert_non_null(strstr(cmd, " -v '/w/it'\\''s:/w/it'\\''s'"));
    assert_non_null(strstr(cmd, " -v '/cache/trees/ab:/data:ro'"));
    assert_non_null(strstr(cmd, " -w '/w/it'\\''s'"));
    assert_non_null(strstr(cmd, " 'localhost/x:1' /bin/sh -c 'echo '\\''hi'\\''; exit 3'"));
    free(cmd);
    r.image = "x; reboot";
    assert_null(br_container_command(c, &r, &err));
    json_decref(env);
    json_decref(tasks);
    br_container_destroy(&c);
}

static void test_modes(void **state)
{
    (void)state;
    br_err_t err;
    br_container_t *none = br_container_new("none", &err);
    assert_non_null(none);
    assert_null(br_container_runtime(none));
    br_container_run_t r = {.image = "x", .command = "true"};
    assert_null(br_container_command(none, &r, &err));
    assert_non_null(strstr(err.text, "this node runs no containers"));
    assert_int_equal(br_container_calibrate(none, 100), 0);
    br_container_destroy(&none);
    assert_null(br_container_new("docker", &err));
    assert_non_null(strstr(err.text, "--container-runtime docker: expected auto, podman or none"));
    br_container_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_command),
        cmocka_unit_test(test_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
