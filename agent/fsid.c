/* fsid.c - a job user's identity for the agent's own file system checks. */
#include "fsid.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * glibc's setgroups() changes every thread of the process (it is one of the
 * "setxid" calls it broadcasts); the raw system call changes only the caller, which
 * is what a check made by one thread needs. setfsuid/setfsgid are per thread
 * already. With a file system uid other than 0 the kernel drops the file
 * capabilities (CAP_DAC_OVERRIDE and friends) from the thread's effective set, and
 * gives them back when it returns to 0.
 */

#define MAX_GROUPS 256

struct br_fsid {
    uid_t uid;
    gid_t gid;
    gid_t groups[MAX_GROUPS];
    int ngroups;
    int active;   /* entered and switched */
    uid_t saved_uid;
    gid_t saved_gid;
    gid_t saved[MAX_GROUPS];
    int nsaved;
};

br_fsid_t *br_fsid_new(uid_t uid, gid_t gid, br_err_t *err)
{
    br_fsid_t *f = calloc(1, sizeof(*f));
    if (!f)
        return br_errp(err, ENOMEM, "out of memory");
    f->uid = uid;
    f->gid = gid;
    f->groups[0] = gid;
    f->ngroups = 1;
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res) {
        int n = MAX_GROUPS;
        if (getgrouplist(pw.pw_name, gid, f->groups, &n) >= 0)
            f->ngroups = n;
        else
            f->ngroups = 1; /* more than MAX_GROUPS: the primary one only */
    }
    return f;
}

void br_fsid_destroy(br_fsid_t **f)
{
    if (f && *f) {
        free(*f);
        *f = NULL;
    }
}

uid_t br_fsid_uid(const br_fsid_t *f)
{
    return f->uid;
}

gid_t br_fsid_gid(const br_fsid_t *f)
{
    return f->gid;
}

static int thread_setgroups(int n, const gid_t *groups)
{
    return (int)syscall(SYS_setgroups, (size_t)n, groups);
}

int br_fsid_enter(br_fsid_t *f, br_err_t *err)
{
    if (!f)
        return 0;
    f->active = 0;
    if (f->uid == geteuid())
        return 0; /* the agent is that user: nothing to change */
    if (geteuid() != 0)
        return br_errf(err, EPERM, "acting as uid %d needs a root agent", (int)f->uid);
    f->nsaved = getgroups(MAX_GROUPS, f->saved);
    if (f->nsaved < 0)
        return br_errf(err, errno, "getgroups: %s", strerror(errno));
    f->saved_uid = (uid_t)setfsuid((uid_t)-1);
    f->saved_gid = (gid_t)setfsgid((gid_t)-1);
    if (thread_setgroups(f->ngroups, f->groups) < 0)
        return br_errf(err, errno, "setgroups: %s", strerror(errno));
    setfsgid(f->gid);
    setfsuid(f->uid);
    f->active = 1;
    if ((uid_t)setfsuid((uid_t)-1) != f->uid || (gid_t)setfsgid((gid_t)-1) != f->gid) {
        br_fsid_leave(f);
        return br_errf(err, EPERM, "cannot act as uid %d gid %d", (int)f->uid,
                       (int)f->gid);
    }
    return 0;
}

void br_fsid_leave(br_fsid_t *f)
{
    if (!f || !f->active)
        return;
    f->active = 0;
    setfsuid(f->saved_uid);
    setfsgid(f->saved_gid);
    if (thread_setgroups(f->nsaved, f->saved) < 0 ||
        (uid_t)setfsuid((uid_t)-1) != f->saved_uid ||
        (gid_t)setfsgid((gid_t)-1) != f->saved_gid) {
        fprintf(stderr, "bramble-agent: cannot return to its own file system identity "
                        "after acting as uid %d; stopping\n", (int)f->uid);
        abort();
    }
}
