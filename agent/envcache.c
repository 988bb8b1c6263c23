/* envcache.c - where a job's setup builds its environment, and whether it has
 * (envcache.h). */
#include "envcache.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "setuprun.h"
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
                        uid_t uid, gid_t gid, br_envcache_env_t *env, br_err_t *err)
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
    crypto_generichash_update(&h, (const unsigned char *)"image:", 7); /* (none yet) */
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
