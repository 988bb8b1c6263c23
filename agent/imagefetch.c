/* imagefetch.c - a container job's image pulled or loaded inside its task
 * (imagefetch.h); podman is run by steprun.c. */
#include "imagefetch.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "steprun.h"
#include "util.h"

#define MARK "[image] "
#define REF_SHOWN 200 /* bytes of a REF that a note names */

int br_imagefetch_line(const char *exe, const char *failed, const char *ref,
                       const char *archive, char *out, size_t len)
{
    const char *args[] = {failed, ref, archive};
    return br_steprun_line(exe, "--image-fetch", args, archive ? 3 : 2, out, len);
}

/* Whether `podman image exists ref` says so; what it says goes nowhere. */
static int exists(const char *ref)
{
    const char *cmd[] = {"podman", "image", "exists", ref, NULL};
    br_steprun_tail_t quiet = {.len = 0};
    return br_steprun_run(cmd, NULL, NULL, NULL, &quiet) == 0 && !br_steprun_stopped();
}

/* Write FAILED: what (the step), how it ended, and when podman ran (tail: what it
 * said) how long, but (when not NULL: what went wrong although it exited 0) and its
 * last lines; say it on stderr. The runner's exit status. */
static int failed_note(const char *failed, const char *what, const char *how,
                       double took, const char *but, const br_steprun_tail_t *tail)
{
    char last[BR_STEP_TAIL / 2], line[BR_STEP_TAIL + 2 * REF_SHOWN + 200];
    int n;
    if (tail) {
        br_steprun_tail_line(tail, last, sizeof(last));
        n = snprintf(line, sizeof(line), "%s: %s after %.1f s%s%s: %s", what, how, took,
                     but ? ", but " : "", but ? but : "", last);
    } else {
        n = snprintf(line, sizeof(line), "%s: %s", what, how);
    }
    br_err_t err;
    br_write_file(failed, line, n > 0 ? strnlen(line, sizeof(line)) : 0, 0644, &err);
    br_steprun_say(2, MARK "%s failed (%s%s%s)\n", what, how, but ? ", but " : "",
                   but ? but : "");
    int sig = br_steprun_stopped();
    return sig ? 128 + sig : BR_IMAGE_FAILED;
}

/* Load archive (ref its image's ID) or pull ref, its output passed on marked. */
static int fetch(const char *failed, const char *ref, const char *archive)
{
    char what[REF_SHOWN + 32], how[REF_SHOWN + 64], but[REF_SHOWN + 64];
    const char *load[] = {"podman", "load", "-i", archive, NULL};
    const char *pull[] = {"podman", "pull", ref, NULL};
    br_steprun_tail_t tail = {.len = 0};
    if (archive) {
        struct stat st;
        snprintf(what, sizeof(what), "loading image");
        if (stat(archive, &st) < 0) {
            snprintf(how, sizeof(how), "%.*s: %s", REF_SHOWN, archive, strerror(errno));
            return failed_note(failed, what, how, 0, NULL, NULL);
        }
        char size[32];
        br_steprun_say(1, MARK "loading the image from the node's cache (%s)\n",
                       br_format_size((uint64_t)st.st_size, size, sizeof(size)));
    } else {
        snprintf(what, sizeof(what), "pulling %.*s", REF_SHOWN, ref);
        br_steprun_say(1, MARK "pulling %.*s\n", REF_SHOWN, ref);
    }
    int64_t t0 = br_mono_ms();
    int status = br_steprun_run(archive ? load : pull, MARK, NULL, NULL, &tail);
    int saved = errno;
    int there = status == 0 && !br_steprun_stopped() && exists(ref);
    double took = (double)(br_mono_ms() - t0) / 1000.0;
    if (there) {
        br_steprun_say(1, MARK "%s in %.1f s\n", archive ? "loaded" : "pulled", took);
        return 0;
    }
    int sig = br_steprun_stopped();
    const char *absent = NULL; /* (it worked, by podman's word, but left no REF) */
    if (sig) {
        snprintf(how, sizeof(how), "stopped by signal %d", sig);
    } else if (status < 0) {
        snprintf(how, sizeof(how), "could not run podman: %s", strerror(saved));
    } else if (WIFSIGNALED(status)) {
        snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
    } else {
        snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(status));
        if (status == 0) {
            snprintf(
                but, sizeof(but), "%.*s is not there (%s)", REF_SHOWN, ref,
                archive ? "the archive held another image" : "podman did not keep it");
            absent = but;
        }
    }
    return failed_note(failed, what, how, took, absent, &tail);
}

int br_imagefetch_main(int argc, char **argv)
{
    if ((argc != 2 && argc != 3) || !argv[0][0] || !argv[1][0] ||
        (argc == 3 && !argv[2][0])) {
        fprintf(stderr,
                "bramble-agent --image-fetch FAILED REF [ARCHIVE]: run by the agent "
                "inside a job, not by hand\n");
        return 2;
    }
    const char *failed = argv[0], *ref = argv[1], *archive = argc == 3 ? argv[2] : NULL;
    br_steprun_catch_stop();
    unlink(failed);
    char how[REF_SHOWN + 64];
    if (ref[0] == '-') { /* (podman would take it for an option) */
        snprintf(how, sizeof(how), "'%.*s' is not an image's name (it starts with '-')",
                 REF_SHOWN, ref);
        return failed_note(failed, "image", how, 0, NULL, NULL);
    }
    if (exists(ref))
        return 0;
    if (br_steprun_stopped()) {
        snprintf(how, sizeof(how), "stopped by signal %d", br_steprun_stopped());
        return failed_note(failed, "looking for the image", how, 0, NULL, NULL);
    }
    return fetch(failed, ref, archive);
}
