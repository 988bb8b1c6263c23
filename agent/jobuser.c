/* jobuser.c - whom a job runs as on this node. */
#include "jobuser.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsid.h"
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

/* --- a job's checkpoint dir ------------------------------------------------------- */

/* mkdir -p path (mode 0755 less the umask) as the thread is now: 0 or an errno. */
static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof(buf))
        return ENAMETOOLONG;
    br_strlcpy(buf, path, sizeof(buf));
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char was = *p;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return errno;
        if (!was)
            break;
        *p = was;
    }
    struct stat st;
    if (stat(path, &st) < 0)
        return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* mkdir_p as the job's uid and gid: 0, an errno, or -1 with err (cannot act so). */
static int mkdir_p_as(const br_jobuser_t *who, const char *path, br_err_t *err)
{
    br_fsid_t *f = br_fsid_new(who->uid, who->gid, err);
    if (!f || br_fsid_enter(f, err) < 0) {
        br_fsid_destroy(&f);
        return -1;
    }
    int rc = mkdir_p(path);
    br_fsid_leave(f);
    br_fsid_destroy(&f);
    return rc;
}

/* The system tree (or "/" itself) that real (a real path, "" for /) is in, where
 * root makes no dir for a job; NULL: none. */
static const char *system_tree(const char *real)
{
    static const char *const trees[] = {"/bin",   "/boot",  "/dev",    "/etc",  "/lib",
                                        "/lib32", "/lib64", "/libx32", "/opt",  "/proc",
                                        "/root",  "/run",   "/sbin",   "/snap", "/sys",
                                        "/usr",   "/var",   NULL};
    if (!real[0])
        return "/";
    for (int i = 0; trees[i]; i++) {
        size_t n = strlen(trees[i]);
        if (strncmp(real, trees[i], n) == 0 && (real[n] == '/' || real[n] == '\0'))
            return trees[i];
    }
    return NULL;
}

/* A walk from / that root makes: where it is (real: its path, "" for /; fd: open
 * on it; made: made by this walk, so the job's), and why it stopped. */
typedef struct {
    const br_jobuser_t *who;
    char real[PATH_MAX];
    int fd, made, hops;
    char why[PATH_MAX + 80];
} walk_t;

/* Whether the dir at w (st: its stat) is root's and only root may write it. */
static int roots_only(const struct stat *st)
{
    return st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* mkdirat as the job's uid and gid: 0, or -1 (errno). */
static int mkdirat_as(const br_jobuser_t *who, int fd, const char *name)
{
    br_err_t err;
    br_fsid_t *f = br_fsid_new(who->uid, who->gid, &err);
    if (!f || br_fsid_enter(f, &err) < 0) {
        br_fsid_destroy(&f);
        errno = err.errnum;
        return -1;
    }
    int rc = mkdirat(fd, name, 0755), e = errno;
    br_fsid_leave(f);
    br_fsid_destroy(&f);
    errno = e;
    return rc;
}

/* Make name in w's dir for the job: in a dir this walk made (the job's), as the job;
 * else in a dir that is root's and only root's to write, outside the system's
 * trees, by root, then handed to the job (nobody else could swap it meanwhile).
 * The new dir's fd, or -1 (errno). */
static int make_one(walk_t *w, const char *name)
{
    struct stat st;
    const char *tree = w->made ? NULL : system_tree(w->real);
    const char *parent = strrchr(w->real, '/') ? strrchr(w->real, '/') + 1 : "/";
    if (!w->made && fstat(w->fd, &st) < 0)
        return -1;
    if (!w->made && (tree || !roots_only(&st))) {
        if (tree)
            snprintf(w->why, sizeof(w->why), "the agent makes no dir for a job in %s",
                     tree);
        else if (st.st_uid != 0)
            snprintf(w->why, sizeof(w->why), "%s is uid %u's", parent,
                     (unsigned)st.st_uid);
        else
            snprintf(w->why, sizeof(w->why), "%s is writable by others than root",
                     parent);
        errno = EACCES;
        return -1;
    }
    if (w->made ? mkdirat_as(w->who, w->fd, name) < 0 : mkdirat(w->fd, name, 0755) < 0)
        return -1;
    int fd = openat(w->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && !w->made && fchown(fd, w->who->uid, w->who->gid) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* A symlink name in w's dir: followed only when it is root's in a dir only root may
 * write, its target put ahead of rest (a buffer of PATH_MAX). 0, or -1 (errno). */
static int follow(walk_t *w, const char *name, const struct stat *link, char *rest)
{
    struct stat st;
    char target[PATH_MAX], next[PATH_MAX];
    ssize_t n;
    if (fstat(w->fd, &st) < 0)
        return -1;
    if (link->st_uid != 0 || !roots_only(&st)) {
        snprintf(w->why, sizeof(w->why), "%s is a symlink the agent does not follow",
                 name);
        errno = EACCES;
        return -1;
    }
    if (++w->hops > 40) {
        errno = ELOOP;
        return -1;
    }
    if ((n = readlinkat(w->fd, name, target, sizeof(target) - 1)) < 0)
        return -1;
    target[n] = '\0';
    if (snprintf(next, sizeof(next), "%s/%s", target, rest) >= (int)sizeof(next)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(rest, next, sizeof(next));
    if (target[0] == '/') { /* from / again */
        int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        close(w->fd);
        w->fd = fd;
        w->real[0] = '\0';
        w->made = 0;
    }
    return 0;
}

/* One step of the walk: into name (made when missing), or along a symlink. 0, or -1
 * (errno; w->why may say more). */
static int walk_step(walk_t *w, const char *name, char *rest)
{
    struct stat st;
    int fd = -1, made = 0;
    if (strcmp(name, "..") == 0) {
        snprintf(w->why, sizeof(w->why),
                 "the agent makes dirs only along a path "
                 "without '..'");
        errno = EINVAL;
        return -1;
    }
    if (fstatat(w->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT || (fd = make_one(w, name)) < 0)
            return -1;
        made = 1;
    } else if (S_ISLNK(st.st_mode)) {
        return follow(w, name, &st, rest);
    } else if (!S_ISDIR(st.st_mode)) {
        snprintf(w->why, sizeof(w->why), "%s is not a directory", name);
        errno = ENOTDIR;
        return -1;
    } else if ((fd = openat(w->fd, name,
                            O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        return -1;
    }
    size_t at = strlen(w->real);
    snprintf(w->real + at, sizeof(w->real) - at, "/%s", name);
    close(w->fd);
    w->fd = fd;
    w->made = made;
    return 0;
}

/* As root: dir made along real directories from /, each dir made handed to the job's
 * uid (jobuser.h). 0, or an errno with why. */
static int root_make(const br_jobuser_t *who, const char *dir, char *why, size_t len)
{
    walk_t w = {.who = who, .fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)};
    char rest[PATH_MAX], name[NAME_MAX + 1];
    int rc = 0;
    if (strlen(dir) >= sizeof(rest))
        rc = ENAMETOOLONG;
    br_strlcpy(rest, dir, sizeof(rest));
    while (!rc && w.fd >= 0) {
        const char *p = rest + strspn(rest, "/");
        size_t n = strcspn(p, "/");
        if (!n)
            break;
        if (n > NAME_MAX) {
            rc = ENAMETOOLONG;
            break;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        memmove(rest, p + n, strlen(p + n) + 1);
        if (strcmp(name, ".") != 0 && walk_step(&w, name, rest) < 0)
            rc = errno;
    }
    if (w.fd < 0 && !rc)
        rc = errno;
    if (w.fd >= 0)
        close(w.fd);
    br_strlcpy(why, w.why, len);
    return rc;
}

int br_jobuser_make_dir(const br_jobuser_t *who, const char *dir, br_err_t *err)
{
    if (!dir || !*dir)
        return 0;
    char why[PATH_MAX + 80] = "";
    int rc = mkdir_p_as(who, dir, err);
    if (rc == EACCES && geteuid() == 0 && who->uid != 0 &&
        (rc = root_make(who, dir, why, sizeof(why))) == 0 &&
        (rc = mkdir_p_as(who, dir, err)) > 0) /* made: can the job reach it? */
        snprintf(why, sizeof(why), "it is there, but not within reach of uid %u",
                 (unsigned)who->uid);
    if (rc < 0)
        br_err_prefix(err, "checkpoint.dir %s: cannot be made for uid %u", dir,
                      (unsigned)who->uid);
    else if (rc > 0)
        br_errf(err, rc, "checkpoint.dir %s: cannot be made for uid %u: %s%s%s%s", dir,
                (unsigned)who->uid, strerror(rc), why[0] ? " (" : "", why,
                why[0] ? ")" : "");
    return rc ? -1 : 0;
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
