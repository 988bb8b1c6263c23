/* runstate.c - the attempts an agent runs, saved for the agent started after it. */
#include "runstate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/*
 * Design notes.
 *
 * The files are there for an agent process that died, not for a machine that did:
 * after a reboot no process is left to adopt. So nothing is fsynced (an attempt's
 * start must not wait for a slow SD card); a write is whole or absent thanks to the
 * rename. An agent started on a fresh boot finds records whose waiters are gone and
 * drops them.
 */

#define RECORD_MAX (4 << 20) /* an order carries the job's env: bounded by the message */

struct br_runstate {
    char dir[PATH_MAX];
};

br_runstate_t *br_runstate_new(const char *data_dir, br_err_t *err)
{
    br_runstate_t *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return br_errp(err, ENOMEM, "out of memory");
    if ((size_t)snprintf(rs->dir, sizeof(rs->dir), "%s/run", data_dir) >= sizeof(rs->dir)) {
        free(rs);
        return br_errp(err, ENAMETOOLONG, "data dir %s: path too long", data_dir);
    }
    if (br_mkdir_p(rs->dir, 0700, err) < 0) {
        free(rs);
        return NULL;
    }
    return rs;
}

void br_runstate_destroy(br_runstate_t **rsp)
{
    if (!rsp || !*rsp)
        return;
    free(*rsp);
    *rsp = NULL;
}

const char *br_runstate_dir(const br_runstate_t *rs)
{
    return rs->dir;
}

/* Write name in the directory whole (temp file, rename), without fsync. */
static int put(br_runstate_t *rs, const char *name, const char *text, br_err_t *err)
{
    char path[PATH_MAX + 64], tmp[PATH_MAX + 80];
    snprintf(path, sizeof(path), "%s/%s", rs->dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", rs->dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return br_errf(err, errno, "%s: %s", tmp, strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return br_errf(err, e, "%s: %s", tmp, strerror(e));
        }
        off += (size_t)n;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return br_errf(err, e, "%s: %s", path, strerror(e));
    }
    return 0;
}

int br_runstate_save(br_runstate_t *rs, int64_t job, int attempt, json_t *record,
                     br_err_t *err)
{
    char name[64];
    snprintf(name, sizeof(name), "%" PRId64 ".%d.json", job, attempt);
    char *text = json_dumps(record, JSON_COMPACT);
    if (!text)
        return br_errf(err, ENOMEM, "out of memory saving job %" PRId64, job);
    int rc = put(rs, name, text, err);
    free(text);
    return rc;
}

/* "JOB.ATTEMPT." of a file name: 0 and the numbers, else -1. */
static int parse_name(const char *name, int64_t *job, int *attempt, const char **rest)
{
    char *end;
    if (name[0] < '1' || name[0] > '9')
        return -1;
    long long j = strtoll(name, &end, 10);
    if (*end != '.' || end[1] < '1' || end[1] > '9')
        return -1;
    long at = strtol(end + 1, &end, 10);
    if (*end != '.' || at > INT_MAX)
        return -1;
    *job = j;
    *attempt = (int)at;
    *rest = end + 1;
    return 0;
}

/* Remove the files of one attempt. */
static void remove_files(br_runstate_t *rs, int64_t job, int attempt)
{
    DIR *d = opendir(rs->dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t j;
        int at;
        const char *rest;
        if (parse_name(de->d_name, &j, &at, &rest) < 0 || j != job || at != attempt)
            continue;
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

void br_runstate_forget(br_runstate_t *rs, int64_t job, int attempt)
{
    if (rs && job > 0)
        remove_files(rs, job, attempt);
}

json_t *br_runstate_load(br_runstate_t *rs)
{
    json_t *all = json_array();
    DIR *d = opendir(rs->dir);
    if (!d)
        return all;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t job;
        int attempt;
        const char *rest;
        if (parse_name(de->d_name, &job, &attempt, &rest) < 0 || strcmp(rest, "json") != 0)
            continue;
        char path[PATH_MAX + 64];
        snprintf(path, sizeof(path), "%s/%s", rs->dir, de->d_name);
        br_err_t err;
        char *text = br_read_file(path, RECORD_MAX, NULL, &err);
        json_error_t jerr;
        json_t *rec = text ? json_loads(text, 0, &jerr) : NULL;
        if (!text)
            fprintf(stderr, "bramble-agent: %s\n", err.text);
        else if (!json_is_object(rec))
            fprintf(stderr, "bramble-agent: %s: not a saved attempt\n", path);
        free(text);
        if (!json_is_object(rec)) {
            json_decref(rec);
            unlink(path);
            continue;
        }
        json_object_set_new(rec, "job", json_integer(job));
        json_object_set_new(rec, "attempt", json_integer(attempt));
        json_array_append_new(all, rec);
    }
    /* exit files of attempts with no record: written after the agent that stopped
     * its jobs had forgotten them */
    rewinddir(d);
    while ((de = readdir(d))) {
        int64_t job;
        int attempt, known = 0;
        const char *rest;
        if (parse_name(de->d_name, &job, &attempt, &rest) < 0 || strcmp(rest, "json") == 0)
            continue;
        size_t i;
        json_t *rec;
        json_array_foreach(all, i, rec) {
            known |= json_integer_value(json_object_get(rec, "job")) == job &&
                     json_integer_value(json_object_get(rec, "attempt")) == attempt;
        }
        if (!known)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    return all;
}

int br_runstate_keeper(br_runstate_t *rs, pid_t *pid, uint64_t *start, char run[17])
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/keeper", rs->dir);
    br_err_t err;
    char *text = br_read_file(path, 256, NULL, &err);
    int p = 0;
    unsigned long long st = 0;
    char id[17] = "";
    int ok = text && sscanf(text, "%d %llu %16[0-9a-f]", &p, &st, id) == 3 && p > 0 &&
             strlen(id) == 16;
    free(text);
    if (!ok)
        return -1;
    *pid = p;
    *start = st;
    memcpy(run, id, 17);
    return 0;
}

int br_runstate_save_keeper(br_runstate_t *rs, pid_t pid, uint64_t start, const char *run,
                            br_err_t *err)
{
    char text[96];
    snprintf(text, sizeof(text), "%d %" PRIu64 " %s\n", (int)pid, start, run);
    return put(rs, "keeper", text, err);
}
