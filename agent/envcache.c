/* envcache.c - where a job's setup builds its environment, and whether it has
 * (envcache.h). */
#include "envcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "setuprun.h"
#include "spec.h"
#include "util.h"

/* A directory at path owned by uid:gid with mode, made when missing; a symlink or
 * anything else there is refused. */
static int own_dir(const char *path, mode_t mode, uid_t uid, gid_t gid, br_err_t *err)
{
    struct stat st;
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    if (lstat(path, &st) < 0)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return br_errf(err, ENOTDIR, "%s: not a directory", path);
    if ((st.st_uid != uid || st.st_gid != gid) && geteuid() == 0 && chown(path, uid, gid) < 0)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    return 0;
}

/* Hash the file rel of the code dir (no symlink followed on the way), its path
 * first. */
static int hash_file(crypto_generichash_state *h, const char *code_dir, const char *rel,
                     br_err_t *err)
{
    int dfd = code_dir ? open(code_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd < 0)
        return br_errf(err, ENOENT, "setup_files: %s: the job has no code dir", rel);
    char part[4200];
    const char *p = rel;
    int fd = -1;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n >= sizeof(part))
            break;
        memcpy(part, p, n);
        part[n] = '\0';
        int next = openat(dfd, part, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
                                         (slash ? O_DIRECTORY : 0));
        close(dfd);
        if (next < 0) {
            dfd = -1;
            break;
        }
        if (!slash) {
            fd = next;
            break;
        }
        dfd = next;
        p = slash + 1;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return br_errf(err, ENOENT, "setup_files: %s is not a file of the job's code dir",
                       rel);
    }
    if (st.st_size > BR_SPEC_SETUP_FILE_MAX) {
        close(fd);
        return br_errf(err, EFBIG, "setup_files: %s is %lld bytes, more than %d: name a "
                                   "small file (a requirements list), not data",
                       rel, (long long)st.st_size, BR_SPEC_SETUP_FILE_MAX);
    }
    crypto_generichash_update(h, (const unsigned char *)rel, strlen(rel) + 1);
    unsigned char buf[65536];
    ssize_t got;
    while ((got = read(fd, buf, sizeof(buf))) > 0)
        crypto_generichash_update(h, buf, (size_t)got);
    close(fd);
    if (got < 0)
        return br_errf(err, errno, "setup_files: %s: %s", rel, strerror(errno));
    crypto_generichash_update(h, (const unsigned char *)"", 1);
    return 0;
}

int br_envcache_prepare(const char *cache, const json_t *setup, const char *code_dir,
                        const char *image, uid_t uid, gid_t gid, br_envcache_env_t *env,
                        br_err_t *err)
{
    const char *text = json_string_value(json_object_get(setup, "command"));
    json_t *files = json_object_get(setup, "files");
    memset(env, 0, sizeof(*env));
    if (!text)
        return br_errf(err, EPROTO, "setup: no command");
    crypto_generichash_state h;
    unsigned char key[16];
    char hex[2 * sizeof(key) + 1], uidtext[32], path[4300];
    snprintf(uidtext, sizeof(uidtext), "uid %u", (unsigned)uid);
    crypto_generichash_init(&h, NULL, 0, sizeof(key));
    crypto_generichash_update(&h, (const unsigned char *)uidtext, strlen(uidtext) + 1);
    crypto_generichash_update(&h, (const unsigned char *)text, strlen(text) + 1);
    crypto_generichash_update(&h, (const unsigned char *)"image:", 7);
    if (image) /* (none: the key bare jobs' environments always had) */
        crypto_generichash_update(&h, (const unsigned char *)image, strlen(image) + 1);
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f)
        if (hash_file(&h, code_dir, json_string_value(f) ? json_string_value(f) : "", err) < 0)
            return -1;
    crypto_generichash_final(&h, key, sizeof(key));
    sodium_bin2hex(hex, sizeof(hex), key, sizeof(key));
    snprintf(path, sizeof(path), "%s/envs", cache);
    if (own_dir(path, 0711, geteuid(), getegid(), err) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/envs/%u", cache, (unsigned)uid);
    if (own_dir(path, 0700, uid, gid, err) < 0)
        return -1;
    br_strlcpy(env->user_dir, path, sizeof(env->user_dir));
    if ((size_t)snprintf(env->dir, sizeof(env->dir), "%s/%s", path, hex) >= sizeof(env->dir))
        return br_errf(err, ENAMETOOLONG, "%s: too long a path", path);
    snprintf(path, sizeof(path), "%s/%s", env->dir, BR_SETUP_READY);
    if (access(path, F_OK) == 0) {
        env->ready = 1;
        utimensat(AT_FDCWD, path, NULL, 0); /* (used now) */
        return 0;
    }
    snprintf(path, sizeof(path), "%s.setup", env->dir);
    if (br_write_file(path, text, strlen(text), 0644, err) < 0)
        return -1;
    return 0;
}

/* --- what is kept ------------------------------------------------------------------ */

typedef struct {
    char path[4200]; /* CACHE/envs/UID/KEY */
    char key[64];
    unsigned uid;
    int64_t bytes, built, used;
    double seconds;
} kept_t;

/* Every environment built under cache: a new array (free it) of *n. */
static kept_t *kept(const char *cache, size_t *n)
{
    char envs[4200];
    snprintf(envs, sizeof(envs), "%s/envs", cache);
    kept_t *v = NULL;
    size_t len = 0, cap = 0;
    DIR *top = opendir(envs);
    struct dirent *u, *e;
    while (top && (u = readdir(top))) {
        char *end;
        unsigned long uid = strtoul(u->d_name, &end, 10);
        if (u->d_name[0] < '0' || u->d_name[0] > '9' || *end)
            continue;
        char udir[4300];
        snprintf(udir, sizeof(udir), "%s/%s", envs, u->d_name);
        DIR *d = opendir(udir);
        while (d && (e = readdir(d))) {
            struct stat st;
            char ready[4400];
            if (e->d_name[0] == '.' || strchr(e->d_name, '.') ||
                strlen(e->d_name) >= sizeof(v->key))
                continue;
            snprintf(ready, sizeof(ready), "%s/%s/%s", udir, e->d_name, BR_SETUP_READY);
            if (lstat(ready, &st) < 0 || !S_ISREG(st.st_mode))
                continue; /* (being built, or left by a run that was killed) */
            if (len == cap) {
                kept_t *nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof(*v));
                if (!nv)
                    break;
                v = nv;
            }
            kept_t *k = &v[len++];
            memset(k, 0, sizeof(*k));
            snprintf(k->path, sizeof(k->path), "%s/%s", udir, e->d_name);
            br_strlcpy(k->key, e->d_name, sizeof(k->key));
            k->uid = (unsigned)uid;
            k->used = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
            json_t *note = json_load_file(ready, 0, NULL);
            k->bytes = json_integer_value(json_object_get(note, "bytes"));
            k->built = json_integer_value(json_object_get(note, "built"));
            k->seconds = json_number_value(json_object_get(note, "seconds"));
            json_decref(note);
        }
        if (d)
            closedir(d);
    }
    if (top)
        closedir(top);
    *n = len;
    return v;
}

static int newer_first(const void *a, const void *b)
{
    const kept_t *x = a, *y = b;
    return x->used < y->used ? 1 : x->used > y->used ? -1 : 0;
}

json_t *br_envcache_list(const char *cache)
{
    size_t n;
    kept_t *v = kept(cache, &n);
    json_t *out = json_array();
    if (v)
        qsort(v, n, sizeof(*v), newer_first);
    for (size_t i = 0; i < n && i < BR_ENVCACHE_LISTED; i++)
        json_array_append_new(out, json_pack("{s:s, s:I, s:I, s:f, s:I, s:I}", "key", v[i].key,
                                             "uid", (json_int_t)v[i].uid, "bytes",
                                             (json_int_t)v[i].bytes, "seconds", v[i].seconds,
                                             "built", (json_int_t)v[i].built, "used",
                                             (json_int_t)v[i].used));
    free(v);
    return out;
}

int64_t br_envcache_bytes(const char *cache)
{
    size_t n;
    kept_t *v = kept(cache, &n);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i].bytes;
    free(v);
    return sum;
}

/* Remove k unless it is in use or being built: 0, or -1 (EBUSY). */
static int drop(const kept_t *k, const json_t *in_use)
{
    char lock[4300];
    if (json_object_get(in_use, k->path))
        return -1;
    snprintf(lock, sizeof(lock), "%s.lock", k->path);
    int fd = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return -1; /* a setup builds it again now */
    }
    br_rm_tree(AT_FDCWD, k->path);
    char setup[4300];
    snprintf(setup, sizeof(setup), "%s.setup", k->path);
    unlink(setup);
    unlink(lock);
    if (fd >= 0)
        close(fd);
    return 0;
}

int br_envcache_remove(const char *cache, const char *key, const json_t *in_use,
                       br_err_t *err)
{
    size_t n;
    kept_t *v = kept(cache, &n);
    int rc = br_errf(err, ENOENT, "this node keeps no environment %s", key);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].key, key) == 0)
            rc = drop(&v[i], in_use) == 0
                     ? 0
                     : br_errf(err, EBUSY, "environment %s is in use by a running job", key);
    free(v);
    return rc;
}

int br_envcache_trim(const char *cache, int64_t keep, const json_t *in_use)
{
    size_t n;
    kept_t *v = kept(cache, &n);
    int64_t sum = 0;
    int removed = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i].bytes;
    if (v)
        qsort(v, n, sizeof(*v), newer_first);
    for (size_t i = n; i-- > 0 && sum > keep;)
        if (drop(&v[i], in_use) == 0) {
            fprintf(stderr, "bramble-agent: cache: environment %s (uid %u, %lld bytes) "
                            "leaves the cache (used longest ago) to make room\n",
                    v[i].key, v[i].uid, (long long)v[i].bytes);
            sum -= v[i].bytes;
            removed++;
        }
    free(v);
    return removed;
}
