/* cache.c - the node's cache of trees, and the attempts' working dirs built from it. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "listing.h"
#include "manifest_check.h"
#include "pull.h"
#include "trash.h"
#include "util.h"

#define COPY_BUF (1 << 20)
#define SEALED_TREES 8 /* trees whose files' seals are kept in memory (the newest;
                        * every tree's are kept in DIR/seals too) */
#define SEALS_MAX (64 << 20) /* a tree's seals file read at most */

struct br_cache {
    char dir[PATH_MAX];
    char listings[PATH_MAX];
    char data_dir[PATH_MAX];
    json_t *seals;  /* manifest hash -> {path: seal}: files verified, as they were then */
    json_t *sealed; /* those manifest hashes, oldest first */
};

/* path made when missing, then given mode (and kept the agent's). */
static int own_dir(const char *path, mode_t mode, br_err_t *err)
{
    struct stat st;
    if (br_mkdir_p(path, mode, err) < 0)
        return -1;
    if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return br_errf(err, EPERM, "%s: not a directory of the agent's own", path);
    if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    return 0;
}

br_cache_t *br_cache_new(const char *dir, const char *listings, const char *data_dir,
                         br_err_t *err)
{
    if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX - 200)
        return br_errp(err, EINVAL, "--cache-dir '%s': an absolute path is needed",
                       dir ? dir : "");
    br_cache_t *c = calloc(1, sizeof(*c));
    if (!c)
        return br_errp(err, ENOMEM, "out of memory");
    br_strlcpy(c->dir, dir, sizeof(c->dir));
    br_strlcpy(c->listings, listings, sizeof(c->listings));
    br_strlcpy(c->data_dir, data_dir ? data_dir : "", sizeof(c->data_dir));
    c->seals = json_object();
    c->sealed = json_array();
    char sub[PATH_MAX];
    int rc = own_dir(dir, 0711, err);
    static const struct {
        const char *name;
        mode_t mode;
    } subs[] = {{"trees", 0700}, {".by-hash", 0700}, {"work", 0711}, {"seals", 0700}};
    for (size_t i = 0; rc == 0 && i < sizeof(subs) / sizeof(subs[0]); i++) {
        snprintf(sub, sizeof(sub), "%s/%s", dir, subs[i].name);
        rc = own_dir(sub, subs[i].mode, err);
    }
    if (rc == 0 && (!c->seals || !c->sealed))
        rc = br_errf(err, ENOMEM, "out of memory");
    if (rc < 0) {
        br_err_prefix(err, "the cache");
        json_decref(c->seals);
        json_decref(c->sealed);
        free(c);
        return NULL;
    }
    return c;
}

void br_cache_destroy(br_cache_t **cp)
{
    if (!cp || !*cp)
        return;
    json_decref((*cp)->seals);
    json_decref((*cp)->sealed);
    free(*cp);
    *cp = NULL;
}

const char *br_cache_dir(const br_cache_t *c)
{
    return c->dir;
}

void br_cache_tree_path(const br_cache_t *c, const char *mhash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/trees/%s", c->dir, mhash);
}

void br_cache_spare_path(const br_cache_t *c, const char *mhash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/work/spare-%s", c->dir, mhash);
}

void br_cache_work_path(const br_cache_t *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s/work", c->dir);
}

int br_cache_has(const br_cache_t *c, const char *mhash)
{
    char path[PATH_MAX + 100];
    struct stat st;
    if (!mhash || strlen(mhash) != 2 * BR_MANIFEST_HASH_LEN || strchr(mhash, '/'))
        return 0;
    br_cache_tree_path(c, mhash, path, sizeof(path));
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The dirs above a job's working dir searchable by its user: the data dir, when the
 * cache is inside it (as jobuser.c does for homes). */
static void searchable(const br_cache_t *c, uid_t uid)
{
    size_t n = strlen(c->data_dir);
    struct stat st;
    if (uid == geteuid() || !n || strncmp(c->dir, c->data_dir, n) != 0 || c->dir[n] != '/')
        return;
    if (stat(c->data_dir, &st) == 0 && (st.st_mode & S_IXOTH) == 0)
        chmod(c->data_dir, (st.st_mode & 07777) | S_IXGRP | S_IXOTH);
}

/* Make the parents of rel (a checked manifest path) below the directory dfd. */
static int parents(int dfd, const char *rel, uid_t uid, gid_t gid, br_err_t *err)
{
    char part[PATH_MAX];
    for (const char *s = strchr(rel, '/'); s; s = strchr(s + 1, '/')) {
        snprintf(part, sizeof(part), "%.*s", (int)(s - rel), rel);
        if (mkdirat(dfd, part, 0755) < 0 && errno != EEXIST)
            return br_errf(err, errno, "%s: %s", part, strerror(errno));
        if (fchownat(dfd, part, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != EPERM)
            return br_errf(err, errno, "%s: %s", part, strerror(errno));
    }
    return 0;
}

/* A file's seal: what changes when anything writes to it or replaces it (its inode,
 * size, and its modification and change times to the nanosecond). */
static void seal_of(const struct stat *st, char *buf, size_t len)
{
    snprintf(buf, len, "%llx:%llx:%llx.%lx:%llx.%lx", (unsigned long long)st->st_ino,
             (unsigned long long)st->st_size, (unsigned long long)st->st_mtim.tv_sec,
             st->st_mtim.tv_nsec, (unsigned long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
}

/* DIR/seals/<mhash>: the seals of a tree, kept across the agent's restarts. */
static void seals_path(const br_cache_t *c, const char *mhash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/seals/%s", c->dir, mhash);
}

/* The seals of tree mhash (read from DIR/seals when not in memory; made when missing
 * and make; the oldest tree's leave memory past SEALED_TREES), or NULL. */
static json_t *seals_of(br_cache_t *c, const char *mhash, int make)
{
    json_t *t = json_object_get(c->seals, mhash);
    if (t)
        return t;
    char path[PATH_MAX + 100];
    seals_path(c, mhash, path, sizeof(path));
    json_t *kept = NULL;
    char *text = br_read_file(path, SEALS_MAX, NULL, NULL);
    if (text) /* (one that cannot be read or parsed is no seal: its files are hashed) */
        kept = json_loads(text, 0, NULL);
    free(text);
    if (!json_is_object(kept)) {
        json_decref(kept);
        if (!make)
            return NULL;
        kept = json_object();
    }
    while (json_array_size(c->sealed) >= SEALED_TREES) {
        json_object_del(c->seals, json_string_value(json_array_get(c->sealed, 0)));
        json_array_remove(c->sealed, 0);
    }
    if (!kept || json_object_set_new(c->seals, mhash, kept) < 0 ||
        json_array_append_new(c->sealed, json_string(mhash)) < 0) {
        json_object_del(c->seals, mhash);
        return NULL;
    }
    return kept;
}

/* Keep the seals of tree mhash in DIR/seals (written whole, then renamed in place;
 * not synced: a seal lost is only a file hashed again). */
static void seals_save(br_cache_t *c, const char *mhash)
{
    json_t *t = json_object_get(c->seals, mhash);
    char path[PATH_MAX + 100], tmp[PATH_MAX + 120];
    if (!t)
        return;
    seals_path(c, mhash, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (json_dump_file(t, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0)
        unlink(tmp);
}

static void unseal(br_cache_t *c, const char *mhash)
{
    char path[PATH_MAX + 100];
    json_object_del(c->seals, mhash);
    for (size_t i = 0; i < json_array_size(c->sealed); i++)
        if (strcmp(json_string_value(json_array_get(c->sealed, i)), mhash) == 0)
            json_array_remove(c->sealed, i--);
    seals_path(c, mhash, path, sizeof(path));
    unlink(path);
}

#define GONE_PREFIX ".gone-" /* trees/.gone-MHASH-N: a damaged tree set aside */

/* The file of content hash in tree mhash is damaged: it and the tree leave the
 * cache (to be fetched again). The tree is set aside rather than removed: a running
 * job may mount it, and its other files stay there for it until none does
 * (br_cache_sweep_gone). */
static void damaged(br_cache_t *c, const char *mhash, const char *hash)
{
    char from[PATH_MAX + 100], to[PATH_MAX + 200];
    static unsigned n; /* (one agent, one loop) */
    br_pull_index_drop(c->dir, hash);
    br_cache_tree_path(c, mhash, from, sizeof(from));
    snprintf(to, sizeof(to), "%s/trees/" GONE_PREFIX "%s-%ld-%u", c->dir, mhash,
             (long)time(NULL), n++);
    if (!strchr(mhash, '/') && mhash[0] != '.')
        rename(from, to); /* (failing that, removed in place as any forgotten tree) */
    br_cache_forget(c, mhash);
}

/* Remove the entries of DIR/trees whose name begins with prefix, but those where a
 * manifest hash follows the prefix that keep names as a key. How many went. */
static int sweep_trees(br_cache_t *c, const char *prefix, const json_t *keep)
{
    char trees[PATH_MAX];
    snprintf(trees, sizeof(trees), "%s/trees", c->dir);
    DIR *d = opendir(trees);
    if (!d)
        return 0;
    int n = 0;
    size_t pl = strlen(prefix), hl = 2 * BR_MANIFEST_HASH_LEN;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, pl) != 0)
            continue;
        if (keep && strlen(de->d_name) >= pl + hl) {
            char mhash[2 * BR_MANIFEST_HASH_LEN + 1];
            memcpy(mhash, de->d_name + pl, hl);
            mhash[hl] = '\0';
            if (json_object_get(keep, mhash))
                continue; /* a running job's mount still */
        }
        br_rm_tree(dirfd(d), de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

int br_cache_sweep_gone(br_cache_t *c, const json_t *keep)
{
    int n = sweep_trees(c, GONE_PREFIX, keep);
    if (n)
        br_pull_index_used(c->dir, 1); /* (the files only they held go too) */
    return n;
}

void br_cache_seal(br_cache_t *c, const json_t *summary)
{
    const char *mhash = json_string_value(json_object_get(summary, "hash"));
    char tree[PATH_MAX + 100];
    br_err_t err;
    if (!br_cache_has(c, mhash))
        return;
    json_t *m = br_listings_whole(c->listings, summary, NULL, 0, &err), *seals;
    br_cache_tree_path(c, mhash, tree, sizeof(tree));
    int tfd = m ? open(tree, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (tfd >= 0 && (seals = seals_of(c, mhash, 1))) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(m, "entries"), i, e) {
            const char *path = json_string_value(json_object_get(e, "path"));
            struct stat st;
            char seal[96];
            if (json_object_get(e, "link") ||
                fstatat(tfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                continue;
            seal_of(&st, seal, sizeof(seal));
            json_object_set_new(seals, path, json_string(seal));
        }
        seals_save(c, mhash);
    }
    if (tfd >= 0)
        close(tfd);
    json_decref(m);
}

/* Copy the regular file src (open) into a new file rel below dfd. sealed: its seal
 * is the one it had when its bytes were last verified, so they are copied as they
 * are; else they are hashed on the way, and bytes that are not the manifest's hash
 * are EBADMSG (a damaged cache). */
static int copy_file(int src, int sealed, int dfd, const char *rel, const char *hash,
                     mode_t mode, uid_t uid, gid_t gid, char *buf, br_err_t *err)
{
    int out = openat(dfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0)
        return br_errf(err, errno, "%s: %s", rel, strerror(errno));
    int rc = 0;
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    for (; !sealed;) {
        ssize_t k = read(src, buf, COPY_BUF);
        if (k == 0)
            break;
        if (k < 0 || write(out, buf, (size_t)k) != k) {
            rc = br_errf(err, errno ? errno : EIO, "%s: %s", rel, strerror(errno ? errno : EIO));
            break;
        }
        crypto_generichash_update(&hs, (const unsigned char *)buf, (unsigned long long)k);
    }
    if (sealed && br_copy_all(src, out, buf, COPY_BUF) < 0)
        rc = br_errf(err, errno ? errno : EIO, "%s: %s", rel, strerror(errno ? errno : EIO));
    if (!sealed && rc == 0 && !br_manifest_hashes_to(&hs, hash))
        rc = br_errf(err, EBADMSG, "%s is damaged in the cache (it does not hash to "
                                   "%.16s...)", rel, hash);
    if (rc == 0 && (fchown(out, uid, gid) < 0 && errno != EPERM))
        rc = br_errf(err, errno, "%s: %s", rel, strerror(errno));
    if (rc == 0 && fchmod(out, mode & 0777) < 0)
        rc = br_errf(err, errno, "%s: %s", rel, strerror(errno));
    close(out);
    return rc;
}

/* Make name (below dfd) and everything in it uid:gid's, links too. 0, or -1 with
 * errno. */
static int give_tree(int dfd, const char *name, uid_t uid, gid_t gid)
{
    if (fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != EPERM)
        return -1;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOTDIR || errno == ELOOP ? 0 : -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            rc = give_tree(dirfd(d), de->d_name, uid, gid);
    closedir(d);
    return rc;
}

int br_cache_workdir(br_cache_t *c, int64_t job, int attempt, const json_t *summary,
                     uid_t uid, gid_t gid, char *out, size_t len, br_err_t *err)
{
    const char *mhash = json_string_value(json_object_get(summary, "hash"));
    char tree[PATH_MAX + 100], name[64], work[PATH_MAX];
    if (!br_cache_has(c, mhash))
        return br_errf(err, ENOENT, "the code %.16s... is not in the cache", mhash);
    json_t *m = br_listings_whole(c->listings, summary, NULL, 0, err);
    if (!m)
        return -1;
    br_cache_tree_path(c, mhash, tree, sizeof(tree));
    utimensat(AT_FDCWD, tree, NULL, AT_SYMLINK_NOFOLLOW); /* used now: the last to leave */
    snprintf(name, sizeof(name), "%lld.%d", (long long)job, attempt);
    br_cache_work_path(c, work, sizeof(work));
    int wfd = open(work, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int tfd = open(tree, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char *buf = malloc(COPY_BUF);
    int rc = -1, dfd = -1, resealed = 0;
    if (wfd < 0 || tfd < 0 || !buf) {
        br_errf(err, buf ? errno : ENOMEM, "the cache: %s", strerror(buf ? errno : ENOMEM));
        goto out;
    }
    br_rm_tree(wfd, name); /* an earlier try's, never reused */
    char spare[100];
    snprintf(spare, sizeof(spare), "spare-%s", mhash);
    if (renameat(wfd, spare, wfd, name) == 0) { /* made as the tree came: the job's now */
        if (uid != geteuid() && give_tree(wfd, name, uid, gid) < 0) {
            br_errf(err, errno, "%s/%s: %s", work, name, strerror(errno));
            goto out;
        }
        searchable(c, uid);
        snprintf(out, len, "%s/%s", work, name);
        rc = 0;
        goto out;
    }
    /* made the agent's and closed to others until it is whole, then handed over */
    if (mkdirat(wfd, name, 0700) < 0 ||
        (dfd = openat(wfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        br_errf(err, errno, "%s/%s: %s", work, name, strerror(errno));
        goto out;
    }
    size_t i;
    json_t *e, *seals = seals_of(c, mhash, 0); /* (looked up once: it may be read) */
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *link = json_string_value(json_object_get(e, "link"));
        mode_t mode = (mode_t)json_integer_value(json_object_get(e, "mode"));
        if (parents(dfd, path, uid, gid, err) < 0)
            goto out;
        if (link) {
            if (symlinkat(link, dfd, path) < 0 ||
                (fchownat(dfd, path, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != EPERM)) {
                br_errf(err, errno, "%s: %s", path, strerror(errno));
                goto out;
            }
            continue;
        }
        int src = openat(tfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (src < 0 || fstat(src, &st) < 0) {
            br_errf(err, errno, "the cached %s: %s", path, strerror(errno));
            if (src >= 0)
                close(src);
            goto out;
        }
        char seal[96];
        seal_of(&st, seal, sizeof(seal));
        const char *was = json_string_value(json_object_get(seals, path));
        int sealed = was && strcmp(was, seal) == 0;
        int k = copy_file(src, sealed, dfd, path, json_string_value(json_object_get(e, "hash")),
                          mode, uid, gid, buf, err);
        if (k == 0 && !sealed && (seals || (seals = seals_of(c, mhash, 1)))) { /* verified */
            json_object_set_new(seals, path, json_string(seal));
            resealed = 1;
        }
        if (k < 0 && err->errnum == EBADMSG) { /* never run, fetched again */
            damaged(c, mhash, json_string_value(json_object_get(e, "hash")));
            mhash = NULL; /* (gone: nothing of it is sealed) */
        }
        close(src);
        if (k < 0)
            goto out;
    }
    searchable(c, uid);
    if ((fchown(dfd, uid, gid) < 0 && errno != EPERM) || fchmod(dfd, 0700) < 0) {
        br_errf(err, errno, "%s/%s: %s", work, name, strerror(errno));
        goto out;
    }
    snprintf(out, len, "%s/%s", work, name);
    rc = 0;
out:
    if (resealed && mhash)
        seals_save(c, mhash);
    if (rc < 0 && wfd >= 0)
        br_rm_tree(wfd, name);
    if (rc < 0)
        br_err_prefix(err, "job %lld's code", (long long)job);
    if (dfd >= 0)
        close(dfd);
    if (wfd >= 0)
        close(wfd);
    if (tfd >= 0)
        close(tfd);
    free(buf);
    json_decref(m);
    return rc;
}

void br_cache_forget(br_cache_t *c, const char *mhash)
{
    char spare[PATH_MAX + 100];
    if (mhash && !strchr(mhash, '/')) {
        unseal(c, mhash);
        br_cache_spare_path(c, mhash, spare, sizeof(spare));
        br_rm_tree(AT_FDCWD, spare);
    }
    char trees[PATH_MAX];
    snprintf(trees, sizeof(trees), "%s/trees", c->dir);
    int fd = open(trees, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && mhash && !strchr(mhash, '/') && mhash[0] != '.')
        br_rm_tree(fd, mhash);
    if (fd >= 0)
        close(fd);
}

int64_t br_cache_used(const br_cache_t *c)
{
    return br_pull_index_used(c->dir, 0);
}

typedef struct {
    char name[2 * BR_MANIFEST_HASH_LEN + 1];
    struct timespec used;
} tree_t;

static int older(const void *x, const void *y)
{
    const tree_t *a = x, *b = y;
    if (a->used.tv_sec != b->used.tv_sec)
        return a->used.tv_sec < b->used.tv_sec ? -1 : 1;
    return (a->used.tv_nsec > b->used.tv_nsec) - (a->used.tv_nsec < b->used.tv_nsec);
}

/* nftw: directories searchable and files readable by all (modes kept otherwise). */
static int open_up(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)f;
    if (type == FTW_D && (st->st_mode & 07777) != 0755)
        return chmod(path, 0755) < 0 ? -1 : 0;
    if (type == FTW_F && (st->st_mode & 0444) != 0444)
        return chmod(path, (st->st_mode & 07777 & ~(mode_t)06000) | 0444) < 0 ? -1 : 0;
    return 0;
}

/* Whether the bytes of the open file fd hash to hash (buf: COPY_BUF bytes).
 * 1, 0, or -1 with errno (a read failed). */
static int hashes_to(int fd, const char *hash, char *buf)
{
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    for (;;) {
        ssize_t k = read(fd, buf, COPY_BUF);
        if (k == 0)
            break;
        if (k < 0)
            return -1;
        crypto_generichash_update(&hs, (const unsigned char *)buf, (unsigned long long)k);
    }
    return br_manifest_hashes_to(&hs, hash) ? 1 : 0;
}

/* Check each file of tree mhash (below tfd) against m (its whole listing) and make
 * it readable by all: a file whose seal is what it was when last verified is taken
 * as it is, any other is hashed (and sealed when whole). A tree with no seals at all
 * (cached by an agent that kept none) is sealed as it is, trusted as that agent
 * trusted it. 0, or -1 with err (EBADMSG: a file is damaged, and the tree has left
 * the cache). */
static int verify_tree(br_cache_t *c, const char *mhash, int tfd, const json_t *m,
                       br_err_t *err)
{
    json_t *seals = seals_of(c, mhash, 0), *e;
    int trust = seals == NULL;
    char *buf = NULL;
    int changed = 0, rc = 0;
    size_t i;
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *hash = json_string_value(json_object_get(e, "hash"));
        if (json_object_get(e, "link") || !path || !hash)
            continue;
        int fd = openat(tfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            rc = br_errf(err, errno == ELOOP ? EBADMSG : errno, "the cached %s: %s", path,
                         errno == ELOOP ? "a link, not the file" : strerror(errno));
            if (fd >= 0)
                close(fd);
            if (err->errnum == EBADMSG)
                damaged(c, mhash, hash);
            break;
        }
        if (!S_ISREG(st.st_mode)) {
            rc = br_errf(err, EBADMSG, "the cached %s is not a file", path);
            close(fd);
            damaged(c, mhash, hash);
            break;
        }
        char seal[96];
        seal_of(&st, seal, sizeof(seal));
        const char *was = json_string_value(json_object_get(seals, path));
        int fresh = !(was && strcmp(was, seal) == 0);
        if (fresh && !trust) {
            int ok = (buf || (buf = malloc(COPY_BUF))) ? hashes_to(fd, hash, buf) : -1;
            if (ok <= 0) {
                rc = ok < 0 ? br_errf(err, buf ? errno : ENOMEM, "the cached %s: %s", path,
                                      strerror(buf ? errno : ENOMEM))
                            : br_errf(err, EBADMSG, "%s is damaged in the cache (it does not "
                                                    "hash to %.16s...)", path, hash);
                close(fd);
                if (ok == 0)
                    damaged(c, mhash, hash);
                break;
            }
        }
        if ((st.st_mode & 0444) != 0444) { /* (its change time moves: sealed anew) */
            if (fchmod(fd, (st.st_mode & 07777 & ~(mode_t)06000) | 0444) < 0 ||
                fstat(fd, &st) < 0) {
                rc = br_errf(err, errno, "the cached %s: %s", path, strerror(errno));
                close(fd);
                break;
            }
            seal_of(&st, seal, sizeof(seal));
            fresh = 1;
        }
        close(fd);
        if (fresh && (seals || (seals = seals_of(c, mhash, 1)))) {
            json_object_set_new(seals, path, json_string(seal));
            changed = 1;
        }
    }
    free(buf);
    if (changed && rc == 0)
        seals_save(c, mhash);
    return rc;
}

int br_cache_mount_path(br_cache_t *c, const json_t *summary, char *out, size_t len,
                        br_err_t *err)
{
    const char *mhash = json_string_value(json_object_get(summary, "hash"));
    if (!br_cache_has(c, mhash))
        return br_errf(err, ENOENT, "tree %.16s... is not in the node's cache",
                       mhash ? mhash : "");
    json_t *m = br_listings_whole(c->listings, summary, NULL, 0, err);
    if (!m)
        return -1;
    br_cache_tree_path(c, mhash, out, len);
    int tfd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = tfd < 0 ? br_errf(err, errno, "cache: %s: %s", out, strerror(errno))
                     : verify_tree(c, mhash, tfd, m, err);
    if (tfd >= 0)
        close(tfd);
    json_decref(m);
    if (rc < 0)
        return -1;
    /* the tree is reached only through its mount (DIR/trees stays 0700) */
    if (nftw(out, open_up, 16, FTW_PHYS) != 0)
        return br_errf(err, errno, "cache: cannot open %s to readers: %s", out,
                       strerror(errno));
    utimensat(AT_FDCWD, out, NULL, AT_SYMLINK_NOFOLLOW); /* used now: the last to leave */
    return 0;
}

json_t *br_cache_trees(const br_cache_t *c)
{
    char trees[PATH_MAX];
    snprintf(trees, sizeof(trees), "%s/trees", c->dir);
    json_t *out = json_array();
    DIR *d = opendir(trees);
    struct dirent *de;
    while (out && d && (de = readdir(d)))
        if (de->d_name[0] != '.' && strlen(de->d_name) == 2 * BR_MANIFEST_HASH_LEN)
            json_array_append_new(out, json_string(de->d_name));
    if (d)
        closedir(d);
    return out;
}

int64_t br_cache_trees_stamp(const br_cache_t *c)
{
    char trees[PATH_MAX];
    struct stat st;
    snprintf(trees, sizeof(trees), "%s/trees", c->dir);
    if (stat(trees, &st) < 0)
        return 0;
    uint64_t h = (uint64_t)st.st_ino * 0x9E3779B97F4A7C15ull; /* (mixed, then the time) */
    h ^= (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    return (int64_t)(h >> 1) | 1;
}

int br_cache_room(br_cache_t *c, int64_t quota, int64_t need, const json_t *keep,
                  int64_t *limit, br_err_t *err)
{
    *limit = -1;
    if (quota < 0)
        return 0;
    char qs[32], ns[32];
    if (need > quota)
        return br_errf(err, ENOSPC, "%s do not fit in the node's cache (--cache-quota %s)",
                       br_format_size((uint64_t)need, ns, sizeof(ns)),
                       br_format_size((uint64_t)quota, qs, sizeof(qs)));
    int64_t used = br_pull_index_used(c->dir, 1);
    if (used + need > quota) { /* the trees used longest ago leave first */
        char trees[PATH_MAX];
        snprintf(trees, sizeof(trees), "%s/trees", c->dir);
        DIR *d = opendir(trees);
        tree_t *list = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while (d && (de = readdir(d))) {
            struct stat st;
            if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof(list->name) ||
                fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                !S_ISDIR(st.st_mode))
                continue; /* (a pull's staging dir is hidden) */
            if (n == cap) {
                tree_t *l = realloc(list, (cap = cap ? cap * 2 : 16) * sizeof(*list));
                if (!l)
                    break;
                list = l;
            }
            br_strlcpy(list[n].name, de->d_name, sizeof(list[n].name));
            list[n++].used = st.st_mtim;
        }
        if (d)
            closedir(d);
        qsort(list, n, sizeof(*list), older);
        for (size_t i = 0; i < n && used + need > quota; i++) {
            if (json_object_get(keep, list[i].name))
                continue; /* a running job's mount */
            fprintf(stderr, "bramble-agent: cache: the tree %.16s... leaves the cache "
                            "(used longest ago) to make room\n", list[i].name);
            br_cache_forget(c, list[i].name);
            used = br_pull_index_used(c->dir, 1);
        }
        free(list);
    }
    *limit = quota > used ? quota - used : 0;
    return 0;
}

/* Whether working directory name is one of the attempts in keep. */
static int kept_attempt(const json_t *keep, const char *name)
{
    size_t i;
    const json_t *rec;
    json_array_foreach(keep, i, rec) {
        char n[64];
        snprintf(n, sizeof(n), "%lld.%d",
                 (long long)json_integer_value(json_object_get(rec, "job")),
                 (int)json_integer_value(json_object_get(rec, "attempt")));
        if (strcmp(n, name) == 0)
            return 1;
    }
    return 0;
}

int br_cache_sweep_work(br_cache_t *c, int64_t max_age_s, const json_t *keep)
{
    /* the staging of pulls cut short (a previous agent's, killed or stopped
     * mid-pull), as the replica store's are: the files they had made whole are in
     * .by-hash, where a pull finds them again */
    sweep_trees(c, ".bramble-pull-", NULL);
    char work[PATH_MAX];
    br_cache_work_path(c, work, sizeof(work));
    DIR *d = opendir(work);
    if (!d)
        return 0;
    int n = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (strncmp(de->d_name, BR_TRASH_PREFIX, strlen(BR_TRASH_PREFIX)) == 0) {
            br_rm_tree(dirfd(d), de->d_name); /* an ended attempt's dir a stop left
                                               * aside (trash.h) */
            continue;
        }
        if (de->d_name[0] == '.' ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISDIR(st.st_mode) || now - st.st_mtime < max_age_s ||
            kept_attempt(keep, de->d_name))
            continue;
        br_rm_tree(dirfd(d), de->d_name);
        n++;
    }
    closedir(d);
    return n;
}
