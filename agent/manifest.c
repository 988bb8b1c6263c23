/* manifest.c - checkpoint manifests, hashed on a thread of their own. */
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>

#include "ckpt.h"
#include "util.h"
#include "workq.h"

/*
 * The walk opens everything relative to its parent's descriptor with O_NOFOLLOW:
 * a symlink is read (readlinkat) and never opened, a directory swapped for a link
 * while it is walked is refused, and a file is hashed from the descriptor whose type
 * and inode were checked. Only the checkpoint itself is reached by path, through
 * br_ckpt_open, which keeps it inside the checkpoint dir. All of it runs as the
 * job's user (fsid.h, per thread), so a checkpoint never makes the agent read what
 * the job could not.
 *
 * The entries, their hashes and the manifest's JSON are proto/mfbuild.h's; the
 * manifest hash and the checks of a manifest from elsewhere proto/manifest_check.h's.
 */

typedef struct {
    br_mfbuild_t *b;
    const atomic_int *cancel;
    br_err_t *err;
} walk_t;

/* --- building ------------------------------------------------------------------ */

static int cancelled(const walk_t *w)
{
    return w->cancel && atomic_load(w->cancel);
}

/* Open name in dfd as a regular file, check it is the one fstatat saw, hash it. */
static int add_file(walk_t *w, int dfd, const char *name, const char *rel,
                    const struct stat *seen)
{
    int fd =
        openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return br_errf(w->err, errno, "%s: %s", rel, strerror(errno));
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) < 0)
        br_errf(w->err, errno, "%s: %s", rel, strerror(errno));
    else if (!S_ISREG(st.st_mode) || st.st_ino != seen->st_ino ||
             st.st_dev != seen->st_dev)
        br_errf(w->err, EAGAIN, "%s was replaced while it was hashed", rel);
    else
        rc = br_mfbuild_file(w->b, fd, &st, rel, NULL, w->err);
    close(fd);
    return rc;
}

static int add_link(walk_t *w, int dfd, const char *name, const char *rel,
                    const struct stat *st)
{
    char target[PATH_MAX];
    ssize_t k = readlinkat(dfd, name, target, sizeof(target) - 1);
    if (k < 0)
        return br_errf(w->err, errno, "%s: %s", rel, strerror(errno));
    target[k] = '\0';
    return br_mfbuild_link(w->b, rel, target, st, NULL, w->err);
}

static const char *special_kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a fifo"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
                         : "not a file, link or directory";
}

/* Walk the directory open at dfd (taken over), rel its path in the checkpoint. */
static int walk_dir(walk_t *w, int dfd, const char *rel, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return br_errf(w->err, errno, "%s: %s", *rel ? rel : ".", strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while (rc == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        struct stat st;
        if (snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
            (int)sizeof(sub))
            rc = br_errf(w->err, ENAMETOOLONG, "a path in %s is too long", rel);
        else if (cancelled(w))
            rc = br_errf(w->err, ECANCELED, "cancelled");
        else if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            rc = br_errf(w->err, errno, "%s: %s", sub, strerror(errno));
        else if (S_ISREG(st.st_mode))
            rc = add_file(w, dirfd(d), de->d_name, sub, &st);
        else if (S_ISLNK(st.st_mode))
            rc = add_link(w, dirfd(d), de->d_name, sub, &st);
        else if (!S_ISDIR(st.st_mode))
            rc = br_errf(w->err, EINVAL, "special file %s (%s)", sub,
                         special_kind(st.st_mode));
        else if (depth + 1 > BR_MANIFEST_MAX_DEPTH)
            rc = br_errf(w->err, ELOOP, "%s is more than %d directories deep", sub,
                         BR_MANIFEST_MAX_DEPTH);
        else {
            int fd = openat(dirfd(d), de->d_name,
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            rc = fd < 0 ? br_errf(w->err, errno, "%s: %s", sub, strerror(errno))
                        : walk_dir(w, fd, sub, depth + 1);
        }
        errno = 0;
    }
    if (rc == 0 && errno) /* readdir failed */
        rc = br_errf(w->err, errno, "%s: %s", *rel ? rel : ".", strerror(errno));
    closedir(d);
    return rc;
}

static json_t *build_open(walk_t *w, const char *dir, const char *path)
{
    /* O_NONBLOCK: a fifo is opened without waiting for a writer, then refused */
    int fd = br_ckpt_open(dir, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, w->err);
    struct stat st;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) < 0) {
        br_errf(w->err, errno, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) { /* walk_dir takes fd over */
        if (walk_dir(w, fd, "", 0) < 0)
            return NULL;
        return br_mfbuild_json(w->b, "dir", w->err);
    }
    const char *base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    int rc = -1;
    if (!S_ISREG(st.st_mode))
        br_errf(w->err, EINVAL, "special file %s (%s)", path, special_kind(st.st_mode));
    else
        rc = br_mfbuild_file(w->b, fd, &st, base, NULL, w->err);
    close(fd);
    return rc < 0 ? NULL : br_mfbuild_json(w->b, "file", w->err);
}

json_t *br_manifest_build(const char *dir, const char *path, br_fsid_t *fsid,
                          const atomic_int *cancel, br_err_t *err)
{
    walk_t w = {.cancel = cancel, .err = err};
    if (!(w.b = br_mfbuild_new(cancel, err)))
        return NULL;
    json_t *m = NULL;
    if (br_fsid_enter(fsid, err) == 0) {
        /* a file created or changed meanwhile (written after the marker) would be
         * missing from the manifest, or hashed half-written */
        int64_t size[2] = {0}, mtime[2] = {0}, files[2] = {0};
        br_ckpt_signature(path, &size[0], &mtime[0], &files[0]);
        m = build_open(&w, dir, path);
        br_ckpt_signature(path, &size[1], &mtime[1], &files[1]);
        if (m && (size[0] != size[1] || mtime[0] != mtime[1] || files[0] != files[1])) {
            json_decref(m);
            m = br_errp(err, EAGAIN, "it changed while it was hashed");
        }
        br_fsid_leave(fsid);
    }
    br_mfbuild_destroy(&w.b);
    return m;
}

/* --- the hasher thread --------------------------------------------------------- */

typedef struct job {
    br_wqnode_t node;
    char *dir, *path, *group;
    int as_user;
    uid_t uid;
    gid_t gid;
    json_t *tag;
    json_t *result; /* NULL: refused, err says why */
    br_err_t err;
    int dropped; /* cancelled: taken silently */
} job_t;

struct br_manifest {
    br_workq_t q; /* its w.cancel stops building q.busy */
};

static job_t *job_of(br_wqnode_t *n)
{
    return n ? BR_WQ_JOB(n, job_t, node) : NULL;
}

static void job_free(job_t *j)
{
    if (j) {
        free(j->dir);
        free(j->path);
        free(j->group);
        json_decref(j->tag);
        json_decref(j->result);
        free(j);
    }
}

/* A checkpoint that changes while it is hashed (its writer still adds a file after
 * the marker) is hashed again a little later, a few times. */
#define TRIES 4
#define RETRY_MS 250

static void build_job(job_t *j, const atomic_int *cancel)
{
    br_fsid_t *as = j->as_user ? br_fsid_new(j->uid, j->gid, &j->err) : NULL;
    for (int try = 1; (!j->as_user || as) && try <= TRIES; try++) {
        j->result = br_manifest_build(j->dir, j->path, as, cancel, &j->err);
        if (j->result || j->err.errnum != EAGAIN)
            break;
        for (int ms = 0; ms < try * RETRY_MS && !atomic_load(cancel); ms += 10)
            usleep(10000);
    }
    br_fsid_destroy(&as);
}

/* The queue's callbacks (workq.h): a dropped job is not built, and one dropped while
 * it is built is taken silently too. */
static void job_begin(void *owner, br_wqnode_t *n)
{
    br_manifest_t *h = owner;
    if (job_of(n)->dropped)
        atomic_store(&h->q.w.cancel, 1);
}

static void job_work(void *owner, br_wqnode_t *n)
{
    br_manifest_t *h = owner;
    if (!atomic_load(&h->q.w.cancel))
        build_job(job_of(n), &h->q.w.cancel);
}

static int job_finish(void *owner, br_wqnode_t *n)
{
    br_manifest_t *h = owner;
    job_of(n)->dropped |= atomic_load(&h->q.w.cancel);
    return 1;
}

static void job_drop(br_wqnode_t *n)
{
    job_free(job_of(n));
}

static const br_workq_ops_t ops = {job_begin, job_work, job_finish, job_drop};

br_manifest_t *br_manifest_new(br_err_t *err)
{
    /* libsodium picks its implementations here, before any thread hashes */
    if (sodium_init() < 0)
        return br_errp(err, EIO, "libsodium failed to start");
    br_manifest_t *h = calloc(1, sizeof(*h));
    if (!h)
        return br_errp(err, ENOMEM, "out of memory");
    if (br_workq_init(&h->q, "manifest", &ops, h, err) < 0 ||
        br_workq_start(&h->q, err) < 0) {
        br_manifest_destroy(&h);
        return NULL;
    }
    return h;
}

void br_manifest_destroy(br_manifest_t **hp)
{
    br_manifest_t *h = hp ? *hp : NULL;
    if (!h)
        return;
    int saved = errno;
    br_workq_fini(&h->q);
    free(h);
    *hp = NULL;
    errno = saved;
}

int br_manifest_fd(const br_manifest_t *h)
{
    return br_workq_fd(&h->q);
}

static char *dup_or_null(const char *s, int *bad)
{
    char *d = s ? strdup(s) : NULL;
    *bad |= s && !d;
    return d;
}

int br_manifest_submit(br_manifest_t *h, const br_manifest_req_t *r, br_err_t *err)
{
    job_t *j = calloc(1, sizeof(*j));
    int bad = !j;
    if (j) {
        j->dir = dup_or_null(r->dir, &bad);
        j->path = dup_or_null(r->path, &bad);
        j->group = dup_or_null(r->group ? r->group : "", &bad);
        j->as_user = r->as_user;
        j->uid = r->uid;
        j->gid = r->gid;
        j->tag = json_incref(r->tag);
    }
    if (bad || !r->path) {
        job_free(j);
        return br_errf(err, bad ? ENOMEM : EINVAL, bad ? "out of memory" : "no path");
    }
    pthread_mutex_lock(&h->q.w.mu);
    int full = h->q.todo.n >= BR_MANIFEST_QUEUE;
    if (!full)
        br_workq_add(&h->q, NULL, &j->node);
    pthread_mutex_unlock(&h->q.w.mu);
    if (full) {
        job_free(j);
        return br_errf(err, EAGAIN, "%d checkpoints are waiting to be hashed already",
                       BR_MANIFEST_QUEUE);
    }
    return 0;
}

int br_manifest_take(br_manifest_t *h, json_t **tag, json_t **manifest, br_err_t *err)
{
    job_t *j;
    while ((j = job_of(br_workq_take(&h->q))) && j->dropped)
        job_free(j);
    if (!j)
        return 0;
    *tag = j->tag;
    *manifest = j->result;
    if (!j->result && err)
        *err = j->err;
    j->tag = j->result = NULL;
    job_free(j);
    return 1;
}

static int count(const br_wqlist_t *l, const char *group)
{
    int n = 0;
    for (br_wqnode_t *at = l->head; at; at = at->next) {
        const job_t *j = job_of(at);
        n += !j->dropped && strcmp(j->group, group) == 0;
    }
    return n;
}

static void drop(br_wqlist_t *l, const char *group)
{
    for (br_wqnode_t *at = l->head; at; at = at->next) {
        job_t *j = job_of(at);
        j->dropped |= strcmp(j->group, group) == 0;
    }
}

int br_manifest_pending(br_manifest_t *h, const char *group)
{
    pthread_mutex_lock(&h->q.w.mu);
    const job_t *busy = job_of(h->q.busy);
    int n = count(&h->q.todo, group) + count(&h->q.done, group) +
            (busy && !busy->dropped && strcmp(busy->group, group) == 0);
    pthread_mutex_unlock(&h->q.w.mu);
    return n;
}

void br_manifest_cancel(br_manifest_t *h, const char *group)
{
    pthread_mutex_lock(&h->q.w.mu);
    drop(&h->q.todo, group);
    drop(&h->q.done, group);
    job_t *busy = job_of(h->q.busy);
    if (busy && strcmp(busy->group, group) == 0) {
        busy->dropped = 1;
        atomic_store(&h->q.w.cancel, 1);
    }
    pthread_mutex_unlock(&h->q.w.mu);
}
