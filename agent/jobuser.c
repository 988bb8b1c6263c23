/* jobuser.c - whom a job runs as on this node. */
#include "jobuser.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

struct br_jobusers {
    char job_user[64];
    uint32_t first, last;
    int allow_root;
    char data_dir[1024];
    uid_t agent_uid;
};

br_jobusers_t *br_jobusers_new(const br_jobusers_opts_t *o, br_err_t *err)
{
    br_jobusers_t *u = calloc(1, sizeof(*u));
    if (!u)
        return br_errp(err, ENOMEM, "out of memory");
    br_strlcpy(u->job_user, o->job_user ? o->job_user : "", sizeof(u->job_user));
    u->first = o->first;
    u->last = o->last;
    u->allow_root = o->allow_root;
    br_strlcpy(u->data_dir, o->data_dir ? o->data_dir : "", sizeof(u->data_dir));
    u->agent_uid = o->agent_uid;
    return u;
}

void br_jobusers_destroy(br_jobusers_t **u)
{
    if (u && *u) {
        free(*u);
        *u = NULL;
    }
}

int br_jobusers_parse_range(const char *text, uint32_t *first, uint32_t *last,
                            br_err_t *err)
{
    char *end;
    unsigned long a, b;
    errno = 0;
    a = strtoul(text, &end, 10);
    if (end == text || *end != '-' || text[0] == '-' || text[0] == '+')
        return br_errf(err, EINVAL, "'%s': expected FIRST-LAST, e.g. 70000-79999", text);
    const char *second = end + 1;
    b = strtoul(second, &end, 10);
    if (end == second || *end || second[0] == '-' || second[0] == '+' || errno)
        return br_errf(err, EINVAL, "'%s': expected FIRST-LAST, e.g. 70000-79999", text);
    if (a < 1 || b < a || b >= 0x7fffffffUL)
        return br_errf(err, EINVAL, "'%s': need 1 <= FIRST <= LAST < 2147483647", text);
    *first = (uint32_t)a;
    *last = (uint32_t)b;
    return 0;
}

static int lookup(const char *name, uid_t *uid, gid_t *gid)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || !res)
        return -1;
    *uid = pw.pw_uid;
    *gid = pw.pw_gid;
    return 0;
}

/* mkdir path (mode) unless it is there; a directory owned by uid. */
static int private_dir(const char *path, mode_t mode, uid_t uid, gid_t gid, br_err_t *err)
{
    struct stat st;
    if (mkdir(path, mode) == 0) {
        if (chown(path, uid, gid) < 0 || chmod(path, mode) < 0)
            return br_errf(err, errno, "%s: %s", path, strerror(errno));
        return 0;
    }
    if (errno != EEXIST)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    if (lstat(path, &st) < 0)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
        return br_errf(err, EEXIST, "%s: not a directory owned by uid %u", path,
                       (unsigned)uid);
    return 0;
}

/* DATA_DIR/homes/UID: the agent's data dir and homes/ searchable (not listable) by
 * others, so that the uid reaches its own home and nothing else. */
static int make_home(const br_jobusers_t *u, uid_t uid, gid_t gid, char *out,
                     size_t len, br_err_t *err)
{
    char homes[1100];
    struct stat st;
    snprintf(homes, sizeof(homes), "%s/homes", u->data_dir);
    if (snprintf(out, len, "%s/%u", homes, (unsigned)uid) >= (int)len)
        return br_errf(err, ENAMETOOLONG, "data dir path too long for a job's home");
    if (stat(u->data_dir, &st) == 0 && !(st.st_mode & S_IXOTH) &&
        chmod(u->data_dir, (st.st_mode & 07777) | S_IXGRP | S_IXOTH) < 0)
        return br_errf(err, errno, "%s: %s", u->data_dir, strerror(errno));
    if (private_dir(homes, 0711, u->agent_uid, 0, err) < 0 ||
        private_dir(out, 0700, uid, gid, err) < 0) {
        br_err_prefix(err, "home of uid %u", (unsigned)uid);
        return -1;
    }
    return 0;
}

int br_jobusers_resolve(const br_jobusers_t *u, int64_t owner_id, const char *unix_user,
                        br_jobuser_t *out, br_err_t *err)
{
    memset(out, 0, sizeof(*out));
    out->uid = u->agent_uid;
    out->gid = getegid();
    if (unix_user && *unix_user &&
        lookup(unix_user, &out->uid, &out->gid) == 0) {
        br_strlcpy(out->user, unix_user, sizeof(out->user));
    } else if (owner_id >= 1 && u->last) {
        if ((uint64_t)owner_id > (uint64_t)(u->last - u->first))
            return br_errf(err, ERANGE,
                           "owner %lld has no uid on this node: %u+%lld is past the end "
                           "of --job-uids %u-%u",
                           (long long)owner_id, u->first, (long long)owner_id, u->first,
                           u->last);
        out->uid = (uid_t)(u->first + (uint64_t)owner_id);
        out->gid = (gid_t)out->uid;
        snprintf(out->user, sizeof(out->user), "#%u:%u", (unsigned)out->uid,
                 (unsigned)out->gid);
        struct passwd pw, *res = NULL;
        char buf[4096];
        if ((getpwuid_r(out->uid, &pw, buf, sizeof(buf), &res) != 0 || !res) &&
            make_home(u, out->uid, out->gid, out->home, sizeof(out->home), err) < 0)
            return -1;
    } else if (u->job_user[0]) {
        if (lookup(u->job_user, &out->uid, &out->gid) < 0)
            return br_errf(err, ENOENT, "job user '%s' does not exist", u->job_user);
        br_strlcpy(out->user, u->job_user, sizeof(out->user));
    }
    if (out->uid == 0 && u->agent_uid == 0 && !u->allow_root)
        return br_errf(err, EPERM,
                       "refusing to run the job as root: start the agent with --job-uids "
                       "FIRST-LAST or --job-user USER (or --allow-root-jobs)");
    return 0;
}

#define REFUSES_ALL                                                                     \
    "running as root without --job-uids or --job-user: every job is refused rather "      \
    "than run as root (give --job-uids FIRST-LAST, --job-user USER or --allow-root-jobs)"

const char *br_jobusers_warning(const br_jobusers_t *u)
{
    if (u->agent_uid != 0 || u->allow_root)
        return NULL;
    uid_t uid;
    gid_t gid;
    if (u->job_user[0] && lookup(u->job_user, &uid, &gid) == 0 && uid != 0)
        return NULL;
    if (u->last)
        return "jobs without an owner from the coordinator would run as root and are "
               "refused (give --job-user too, or --allow-root-jobs)";
    return REFUSES_ALL;
}

const char *br_jobusers_refuses_all(const br_jobusers_t *u)
{
    /* (a --job-user that does not exist fails each start instead, naming it: the
     * node is then excluded for that job, a fault of the node's setup) */
    return u->agent_uid == 0 && !u->allow_root && !u->job_user[0] && !u->last
               ? REFUSES_ALL
               : NULL;
}
