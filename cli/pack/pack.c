/* pack.c - the packer: a walk with git's ignore rules, hashed into a manifest. */
#include "pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gitrepo.h"
#include "ignore.h"
#include "mfbuild.h"

struct br_pack {
    br_mfbuild_t *b;
    json_t *manifest;
    char *left[BR_PACK_LEFT_OUT];
    size_t left_n;
    int in_git;
};

br_pack_t *br_pack_new(const atomic_int *cancel, br_err_t *err)
{
    br_pack_t *p = calloc(1, sizeof(*p));
    if (!p)
        return br_errp(err, ENOMEM, "out of memory");
    if (!(p->b = br_mfbuild_new(cancel, err))) {
        free(p);
        return NULL;
    }
    return p;
}

void br_pack_destroy(br_pack_t **pp)
{
    if (!pp || !*pp)
        return;
    int saved = errno;
    br_pack_t *p = *pp;
    br_mfbuild_destroy(&p->b);
    json_decref(p->manifest);
    for (size_t i = 0; i < p->left_n && i < BR_PACK_LEFT_OUT; i++)
        free(p->left[i]);
    free(p);
    *pp = NULL;
    errno = saved;
}

/* --- the walk ---------------------------------------------------------------------- */

typedef struct {
    br_pack_t *p;
    br_ignore_t *ig;
    br_gitrepo_t *repo; /* NULL outside a work tree */
    char root[PATH_MAX]; /* the directory packed, a real path */
    const char *shown;   /* ... as the user named it, for messages */
    const char *prefix;  /* root relative to the work tree's top ("": the top) */
    const char *to;      /* where root goes in the manifest ("": its root) */
    br_err_t *err;
} walk_t;

/* a/b made of a and b, either of which may be "" */
static int join(char *out, size_t len, const char *a, const char *b)
{
    int n = snprintf(out, len, "%s%s%s", a, *a && *b ? "/" : "", b);
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

static void left_out(walk_t *w, const char *rel, int is_dir)
{
    br_pack_t *p = w->p;
    if (p->left_n < BR_PACK_LEFT_OUT) {
        char *s = NULL;
        if (asprintf(&s, "%s%s", rel, is_dir ? "/" : "") < 0)
            s = NULL;
        p->left[p->left_n] = s;
    }
    p->left_n++;
}

static const char *special_kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a fifo"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
                         : "not a file, link or directory";
}

/* Whether the link at rel (relative to root), whose target is target, leads to a
 * place inside root: by the real path when the target exists, else by its text
 * (a link to nothing, or to itself, goes nowhere outside). */
static int link_inside(const walk_t *w, const char *rel, const char *target)
{
    if (target[0] == '/')
        return 0;
    char at[PATH_MAX * 2], real[PATH_MAX];
    const char *slash = strrchr(rel, '/');
    int dir_len = slash ? (int)(slash - rel) : 0;
    snprintf(at, sizeof(at), "%s/%.*s%s%s", w->root, dir_len, rel, dir_len ? "/" : "",
             target);
    size_t root_len = strlen(w->root);
    if (realpath(at, real))
        return strncmp(real, w->root, root_len) == 0 &&
               (real[root_len] == '\0' || real[root_len] == '/' ||
                strcmp(w->root, "/") == 0);
    int depth = 0; /* a link to nothing (yet), or a loop: by its text */
    char text[PATH_MAX * 2];
    snprintf(text, sizeof(text), "%.*s%s%s", dir_len, rel, dir_len ? "/" : "", target);
    for (char *save = NULL, *c = strtok_r(text, "/", &save); c;
         c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, "..") == 0) {
            if (--depth < 0)
                return 0;
        } else if (strcmp(c, ".") != 0)
            depth++;
    }
    return 1;
}

static int add_file(walk_t *w, int dfd, const char *name, const char *rel,
                    const char *out, const struct stat *seen)
{
    char src[PATH_MAX * 2];
    snprintf(src, sizeof(src), "%s/%s", w->root, rel);
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return br_errf(w->err, errno, "%s/%s cannot be read: %s", w->shown, rel,
                       strerror(errno));
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) < 0)
        br_errf(w->err, errno, "%s/%s: %s", w->shown, rel, strerror(errno));
    else if (!S_ISREG(st.st_mode) || st.st_ino != seen->st_ino ||
             st.st_dev != seen->st_dev)
        br_errf(w->err, EAGAIN, "%s/%s was replaced while it was packed", w->shown, rel);
    else if ((rc = br_mfbuild_file(w->p->b, fd, &st, out, src, w->err)) < 0 &&
             w->err && w->err->errnum == EAGAIN)
        br_errf(w->err, EAGAIN, "%s/%s changed while it was hashed (is it still being "
                "written?)", w->shown, rel);
    close(fd);
    return rc;
}

static int add_link(walk_t *w, int dfd, const char *name, const char *rel,
                    const char *out, const struct stat *st)
{
    char target[PATH_MAX], src[PATH_MAX * 2];
    ssize_t k = readlinkat(dfd, name, target, sizeof(target) - 1);
    if (k < 0)
        return br_errf(w->err, errno, "%s/%s: %s", w->shown, rel, strerror(errno));
    target[k] = '\0';
    if (!link_inside(w, rel, target))
        return br_errf(w->err, EXDEV,
                       "%s/%s: a link out of the tree (to %s), which a job could not "
                       "follow (leave it out with .brambleignore)",
                       w->shown, rel, target);
    snprintf(src, sizeof(src), "%s/%s", w->root, rel);
    return br_mfbuild_link(w->p->b, out, target, st, src, w->err);
}

/* The ignore files of the directory rel: git's (unless git left the directory out
 * and so never reads them), then bramble's. */
static int push_rules(walk_t *w, const char *rel, const char *git_rel, int excluded)
{
    char path[PATH_MAX * 2];
    if (!excluded) {
        snprintf(path, sizeof(path), "%s%s%s/.gitignore", w->root, *rel ? "/" : "", rel);
        if (br_ignore_push_file(w->ig, git_rel, path, 0, w->err) < 0)
            return -1;
    }
    snprintf(path, sizeof(path), "%s%s%s/.brambleignore", w->root, *rel ? "/" : "", rel);
    return br_ignore_push_file(w->ig, git_rel, path, 1, w->err);
}

static int walk_dir(walk_t *w, int dfd, const char *rel, int excluded, int depth);

/* One entry of a directory: rel its path below root, git_rel below the work
 * tree's top, out in the manifest. excluded: its directory is one git leaves out. */
static int walk_entry(walk_t *w, int dfd, const char *name, const char *rel,
                      const char *git_rel, const char *out, int excluded, int depth)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return br_errf(w->err, errno, "%s/%s: %s", w->shown, rel, strerror(errno));
    int is_dir = S_ISDIR(st.st_mode);
    if (br_ignore_match(w->ig, git_rel, is_dir, 1)) { /* bramble's rules: never sent */
        if (!excluded)
            left_out(w, rel, is_dir);
        return 0;
    }
    int tracked = w->repo && (is_dir ? br_gitrepo_tracks_below(w->repo, git_rel)
                                     : br_gitrepo_tracks(w->repo, git_rel));
    int git_out = excluded || br_ignore_match(w->ig, git_rel, is_dir, 0);
    if (git_out && !tracked) {
        if (!excluded)
            left_out(w, rel, is_dir);
        return 0;
    }
    if (S_ISREG(st.st_mode))
        return add_file(w, dfd, name, rel, out, &st);
    if (S_ISLNK(st.st_mode))
        return add_link(w, dfd, name, rel, out, &st);
    if (!is_dir)
        return br_errf(w->err, EINVAL,
                       "%s/%s is %s, which cannot be sent (leave it out with "
                       ".brambleignore)",
                       w->shown, rel, special_kind(st.st_mode));
    if (depth + 1 > BR_MANIFEST_MAX_DEPTH)
        return br_errf(w->err, ELOOP, "%s/%s is more than %d directories deep", w->shown,
                       rel, BR_MANIFEST_MAX_DEPTH);
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return br_errf(w->err, errno, "%s/%s cannot be read: %s", w->shown, rel,
                       strerror(errno));
    return walk_dir(w, fd, rel, git_out, depth + 1);
}

/* Walk the directory open at dfd (taken over), rel its path below root. */
static int walk_dir(walk_t *w, int dfd, const char *rel, int excluded, int depth)
{
    char git_rel[PATH_MAX];
    if (join(git_rel, sizeof(git_rel), w->prefix, rel) < 0) {
        close(dfd);
        return br_errf(w->err, ENAMETOOLONG, "a path in %s/%s is too long", w->shown, rel);
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return br_errf(w->err, errno, "%s/%s: %s", w->shown, rel, strerror(errno));
    }
    size_t mark = br_ignore_depth(w->ig);
    int rc = push_rules(w, rel, git_rel, excluded);
    struct dirent *de;
    errno = 0;
    while (rc == 0 && (de = readdir(d))) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, ".git") == 0)
            continue;
        char sub[PATH_MAX], git_sub[PATH_MAX], out[PATH_MAX];
        if (join(sub, sizeof(sub), rel, name) < 0 ||
            join(git_sub, sizeof(git_sub), git_rel, name) < 0 ||
            join(out, sizeof(out), w->to, sub) < 0)
            rc = br_errf(w->err, ENAMETOOLONG, "a path in %s/%s is too long", w->shown,
                         rel);
        else
            rc = walk_entry(w, dirfd(d), name, sub, git_sub, out, excluded, depth);
        errno = 0;
    }
    if (rc == 0 && errno) /* readdir failed */
        rc = br_errf(w->err, errno, "%s/%s: %s", w->shown, rel, strerror(errno));
    closedir(d);
    br_ignore_pop_to(w->ig, mark);
    return rc;
}

/* The rules from above root: the user's excludes, info/exclude, and the .gitignore
 * of every directory from the work tree's top down to root's parent. */
static int push_outer_rules(walk_t *w)
{
    const char *global = br_gitrepo_excludes_file(w->repo);
    if ((global && br_ignore_push_file(w->ig, "", global, 0, w->err) < 0) ||
        br_ignore_push_file(w->ig, "", br_gitrepo_info_exclude(w->repo), 0, w->err) < 0)
        return -1;
    const char *top = br_gitrepo_top(w->repo), *pre = w->prefix;
    if (strcmp(top, "/") == 0)
        top = "";
    for (size_t i = 0; *pre; i++) { /* "" (the top), then "a", "a/b" for "a/b/c" */
        if (i == 0 || pre[i] == '/') {
            char base[PATH_MAX], path[PATH_MAX * 2];
            snprintf(base, sizeof(base), "%.*s", (int)i, pre);
            snprintf(path, sizeof(path), "%s/%s%s.gitignore", top, base, i ? "/" : "");
            if (br_ignore_push_file(w->ig, base, path, 0, w->err) < 0)
                return -1;
        }
        if (!pre[i])
            break;
    }
    return 0;
}

int br_pack_dir(br_pack_t *p, const char *dir, const char *to, br_err_t *err)
{
    walk_t w = {.p = p, .shown = dir, .to = to, .err = err};
    json_decref(p->manifest);
    p->manifest = NULL;
    if (!realpath(dir, w.root))
        return br_errf(err, errno, "%s: %s", dir, strerror(errno));
    int fd = open(w.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return br_errf(err, errno, "%s: %s", dir, strerror(errno));
    if (br_gitrepo_open(w.root, &w.repo, err) < 0 || !(w.ig = br_ignore_new(err))) {
        close(fd);
        br_gitrepo_destroy(&w.repo);
        return -1;
    }
    p->in_git = w.repo != NULL;
    w.prefix = "";
    if (w.repo) {
        const char *top = br_gitrepo_top(w.repo);
        size_t n = strlen(top);
        w.prefix = strcmp(top, "/") == 0 ? w.root + 1
                   : w.root[n] == '/'    ? w.root + n + 1
                                         : "";
    }
    int rc = w.repo ? push_outer_rules(&w) : 0;
    if (rc == 0)
        rc = walk_dir(&w, fd, "", 0, 0);
    else
        close(fd);
    br_ignore_destroy(&w.ig);
    br_gitrepo_destroy(&w.repo);
    return rc;
}

int br_pack_file(br_pack_t *p, const char *file, const char *to, br_err_t *err)
{
    json_decref(p->manifest);
    p->manifest = NULL;
    char real[PATH_MAX];
    struct stat st;
    int fd = realpath(file, real) ? open(real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0)
        return br_errf(err, errno, "%s: %s", file, strerror(errno));
    int rc = fstat(fd, &st) < 0 ? br_errf(err, errno, "%s: %s", file, strerror(errno))
             : !S_ISREG(st.st_mode)
                 ? br_errf(err, EINVAL, "%s: not a regular file or a directory", file)
                 : br_mfbuild_file(p->b, fd, &st, to, real, err);
    close(fd);
    return rc;
}

/* --- what was packed -------------------------------------------------------------- */

const json_t *br_pack_manifest(br_pack_t *p, br_err_t *err)
{
    if (!p->manifest)
        p->manifest = br_mfbuild_json(p->b, "dir", err);
    return p->manifest;
}

const char *br_pack_source(const br_pack_t *p, const char *path)
{
    return br_mfbuild_src(p->b, path);
}

size_t br_pack_left_out(const br_pack_t *p, const char *const **names)
{
    *names = (const char *const *)p->left;
    return p->left_n;
}

int br_pack_in_git(const br_pack_t *p)
{
    return p->in_git;
}

size_t br_pack_largest(const br_pack_t *p, size_t n, const char **path, int64_t *size)
{
    return br_mfbuild_largest(p->b, n, path, size);
}
