/* setuprun.c - a job's setup step, run inside its task (setuprun.h); the running
 * itself, its output marked and its end kept, is steprun.c's. */
#include "setuprun.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spec.h"
#include "steprun.h"
#include "util.h"

int br_setuprun_line(const char *exe, const char *dir, const char *failed, const char *via,
                     char *out, size_t len)
{
    const char *args[] = {dir, failed, via};
    return br_steprun_line(exe, "--setup-run", args, via ? 3 : 2, out, len);
}

/* Bytes on disk under the directory dfd (taken), no symlink followed. */
static int64_t disk_use(int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    int64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        sum += (int64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd(d), de->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                sum += disk_use(sub);
        }
    }
    closedir(d);
    return sum;
}

int br_setuprun_main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "bramble-agent --setup-run DIR FAILED [VIA]: run by the agent "
                        "inside a job, not by hand\n");
        return 2;
    }
    const char *dir = argv[0], *failed = argv[1], *via = argc == 3 ? argv[2] : NULL;
    char path[4200];
    br_steprun_catch_stop();
    unlink(failed);
    snprintf(path, sizeof(path), "%s.lock", dir);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0) {
        br_steprun_say(2, "[setup] %s: %s\n", path, strerror(errno));
        return BR_SETUP_FAILED;
    }
    if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
        br_steprun_say(1,
                       "[setup] another job is running this setup on this node: "
                       "waiting for it\n");
        while (flock(lock, LOCK_EX) < 0)
            if (errno != EINTR || br_steprun_stopped())
                return 128 + (br_steprun_stopped() ? br_steprun_stopped() : SIGTERM);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, BR_SETUP_READY);
    if (access(path, F_OK) == 0) {
        br_steprun_say(1, "[setup] done by another job meanwhile; using %s\n", dir);
        return 0;
    }
    br_err_t err;
    size_t len;
    snprintf(path, sizeof(path), "%s.setup", dir);
    char *setup = br_read_file(path, BR_SPEC_MAX_SETUP + 1, &len, &err);
    if (!setup) {
        br_steprun_say(2, "[setup] %s\n", err.text);
        return BR_SETUP_FAILED;
    }
    br_rm_tree(AT_FDCWD, dir); /* (what a run that was killed left) */
    if (mkdir(dir, 0755) < 0) {
        br_steprun_say(2, "[setup] %s: %s\n", dir, strerror(errno));
        free(setup);
        return BR_SETUP_FAILED;
    }
    /* run as root (a container job's task runs podman as root), the directory is
     * still the job's user's, as the directory of theirs it is in */
    char parent[4200];
    struct stat st;
    br_strlcpy(parent, dir, sizeof(parent));
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = '\0';
    if (geteuid() == 0 && slash && stat(parent, &st) == 0 && st.st_uid != 0 &&
        chown(dir, st.st_uid, st.st_gid) < 0) {
        br_steprun_say(2, "[setup] %s: %s\n", dir, strerror(errno));
        free(setup);
        return BR_SETUP_FAILED;
    }
    br_steprun_say(1,
                   "[setup] running the setup; it is kept in %s for later jobs with "
                   "the same one\n",
                   dir);
    int64_t t0 = br_mono_ms();
    br_steprun_tail_t tail = {.len = 0};
    const char *cmd[] = {"/bin/sh", "-c", via ? via : setup, NULL};
    int status = br_steprun_run(cmd, "[setup] ", "BRAMBLE_ENV_DIR", dir, &tail);
    free(setup);
    double took = (double)(br_mono_ms() - t0) / 1000.0;
    int stopped = br_steprun_stopped();
    if (status == 0 && !stopped) {
        char note[160];
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int n = snprintf(note, sizeof(note), "{\"seconds\": %.3f, \"bytes\": %lld, \"built\": %lld}\n",
                         took, (long long)(fd >= 0 ? disk_use(fd) : 0), (long long)br_now_ms());
        snprintf(path, sizeof(path), "%s/%s", dir, BR_SETUP_READY);
        if (br_write_file(path, note, (size_t)n, 0644, &err) == 0) {
            br_steprun_say(1, "[setup] done in %.1f s\n", took);
            return 0;
        }
        br_steprun_say(2, "[setup] %s\n", err.text);
        status = -1;
    }
    br_rm_tree(AT_FDCWD, dir); /* the node keeps nothing of a failed run */
    char how[64], line[BR_SETUP_TAIL + 200];
    if (stopped)
        snprintf(how, sizeof(how), "stopped by signal %d", stopped);
    else if (status < 0)
        snprintf(how, sizeof(how), "could not run: %s", strerror(errno));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof(how), "exit code %d", WEXITSTATUS(status));
    char last[BR_SETUP_TAIL / 2];
    br_steprun_tail_line(&tail, last, sizeof(last));
    int n = snprintf(line, sizeof(line), "%s after %.1f s: %s", how, took, last);
    br_write_file(failed, line, n > 0 ? strnlen(line, sizeof(line)) : 0, 0644, &err);
    br_steprun_say(2, "[setup] failed (%s); nothing of it is kept\n", how);
    return stopped ? 128 + stopped : BR_SETUP_FAILED;
}
