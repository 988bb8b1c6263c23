/* content.c - the content store: files by hash, written whole or not at all. */
#include "content.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jsontext.h"
#include "manifest_check.h"
#include "util.h"

#define HEX_LEN (2 * BR_MANIFEST_HASH_LEN)
#define PARTIAL_KEEP_S (24 * 3600) /* partials untouched this long go at a start */
#define PROOF_KEEP_S (24 * 3600)   /* a user's proof of a content lasts this long */
#define MANIFEST_TEXT_MAX (128 << 20)

/* A partial open for writing, with the hash of what it holds so far. */
typedef struct {
    char hash[HEX_LEN + 1];
    int64_t who; /* the user whose own upload it is (0: the shared one) */
    int fd;
    int64_t held;
    crypto_generichash_state hs;
    uint64_t used; /* when it was last written (a counter): the oldest is closed */
} open_t;

typedef struct {
    char hash[HEX_LEN + 1];
    int manifest;
} doubt_t;



struct br_content {
    pthread_mutex_t mu; /* the partials open and used: the writer (contentw.h) and
                         * the loop both get at them */
    char dir[PATH_MAX];
    uint64_t quota, used;
    open_t open[BR_CONTENT_OPEN];
    uint64_t clock;
    doubt_t *doubts;
    size_t ndoubts, doubts_cap;
    json_t *proofs; /* "WHO.HASH": when user WHO sent every byte of content HASH,
                     * which hashed to its name (they hold it) */
    time_t pruned;  /* when proofs past PROOF_KEEP_S were last let go */
    char durable[HEX_LEN + 1]; /* the content the writer makes durable now, without
                                * the lock (make_durable): a sweep leaves it be */
};

static int hex_ok(const char *h)
{
    if (!h || strlen(h) != HEX_LEN)
        return 0;
    for (const char *p = h; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static void object_path(const br_content_t *c, const char *hash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/objects/%.2s/%s", c->dir, hash, hash);
}

static void partial_path(const br_content_t *c, const char *hash, int64_t who, char *buf,
                         size_t len)
{
    if (who)
        snprintf(buf, len, "%s/partial/%s.%lld", c->dir, hash, (long long)who);
    else
        snprintf(buf, len, "%s/partial/%s", c->dir, hash);
}

static void manifest_path(const br_content_t *c, const char *mhash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/manifests/%s.json", c->dir, mhash);
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Add up what a directory's regular files hold (and below it: objects/HH/). Files
 * in partial/ older than a day are removed on the way. */
static uint64_t dir_bytes(const char *path, int depth, int expire)
{
    DIR *d = opendir(path);
    uint64_t sum = 0;
    if (!d)
        return 0;
    struct dirent *de;
    time_t now = time(NULL);
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth > 0) {
            char sub[PATH_MAX + 260];
            snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
            sum += dir_bytes(sub, depth - 1, expire);
        } else if (S_ISREG(st.st_mode)) {
            if (expire && now - st.st_mtime > PARTIAL_KEEP_S &&
                unlinkat(dirfd(d), de->d_name, 0) == 0)
                continue;
            sum += (uint64_t)st.st_size;
        }
    }
    closedir(d);
    return sum;
}

br_content_t *br_content_open(const char *dir, uint64_t quota, br_err_t *err)
{
    br_content_t *c = calloc(1, sizeof(*c));
    if (!c)
        return br_errp(err, ENOMEM, "out of memory");
    br_strlcpy(c->dir, dir, sizeof(c->dir));
    c->quota = quota;
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < BR_CONTENT_OPEN; i++)
        c->open[i].fd = -1;
    const char *subs[] = {"objects", "partial", "manifests"};
    for (size_t i = 0; i < 3; i++) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%s", dir, subs[i]);
        if (br_mkdir_p(path, 0700, err) < 0) {
            br_err_prefix(err, "--store-dir %s", dir);
            pthread_mutex_destroy(&c->mu);
            free(c);
            return NULL;
        }
    }
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/objects", dir);
    c->used = dir_bytes(path, 1, 0);
    snprintf(path, sizeof(path), "%s/partial", dir);
    c->used += dir_bytes(path, 0, 1);
    return c;
}

static void close_open(open_t *o)
{
    if (o->fd >= 0)
        close(o->fd);
    memset(o, 0, sizeof(*o));
    o->fd = -1;
}

void br_content_destroy(br_content_t **cp)
{
    if (!cp || !*cp)
        return;
    int saved = errno;
    br_content_t *c = *cp;
    for (int i = 0; i < BR_CONTENT_OPEN; i++)
        close_open(&c->open[i]);
    free(c->doubts);
    json_decref(c->proofs);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
    errno = saved;
}

const char *br_content_dir(const br_content_t *c)
{
    return c->dir;
}

uint64_t br_content_quota(const br_content_t *c)
{
    return c->quota;
}

uint64_t br_content_used(br_content_t *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t used = c->used;
    pthread_mutex_unlock(&c->mu);
    return used;
}

int br_content_has(br_content_t *c, const char *hash)
{
    char path[PATH_MAX + 160];
    if (!hex_ok(hash))
        return 0;
    object_path(c, hash, path, sizeof(path));
    return access(path, F_OK) == 0;
}

ssize_t br_content_read(br_content_t *c, const char *hash, int64_t offset, void *buf,
                        size_t len, int64_t *size, br_err_t *err)
{
    char path[PATH_MAX + 160];
    struct stat st;
    if (!hex_ok(hash))
        return br_errf(err, EINVAL, "'%.70s' is not a content hash", hash);
    object_path(c, hash, path, sizeof(path));
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return br_errf(err, errno == ENOENT ? ENOENT : EIO, "content %.16s...: %s", hash,
                       strerror(errno));
    ssize_t k = -1;
    if (fstat(fd, &st) < 0)
        br_errf(err, EIO, "content %.16s...: %s", hash, strerror(errno));
    else if (offset < 0 || offset > st.st_size)
        br_errf(err, ERANGE, "offset %lld is past the %lld bytes of %.16s...",
                (long long)offset, (long long)st.st_size, hash);
    else if ((k = pread(fd, buf, len < (size_t)(st.st_size - offset)
                                       ? len : (size_t)(st.st_size - offset),
                        offset)) < 0)
        br_errf(err, EIO, "content %.16s...: %s", hash, strerror(errno));
    *size = st.st_size;
    close(fd);
    return k;
}

int64_t br_content_partial(br_content_t *c, const char *hash, int64_t who)
{
    char path[PATH_MAX + 160];
    struct stat st;
    if (!hex_ok(hash))
        return 0;
    partial_path(c, hash, who, path, sizeof(path));
    return stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* The partial of hash open for writing, its hash state caught up with what it holds
 * (read again after a restart). NULL with err. */
static open_t *open_partial(br_content_t *c, const char *hash, int64_t who, br_err_t *err)
{
    open_t *o = NULL, *oldest = &c->open[0];
    for (int i = 0; i < BR_CONTENT_OPEN && !o; i++) {
        if (c->open[i].fd >= 0 && strcmp(c->open[i].hash, hash) == 0 && c->open[i].who == who)
            o = &c->open[i];
        else if (c->open[i].used < oldest->used)
            oldest = &c->open[i];
    }
    if (o)
        return o;
    close_open(oldest);
    o = oldest;
    char path[PATH_MAX + 160];
    partial_path(c, hash, who, path, sizeof(path));
    o->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (o->fd < 0)
        return br_errp(err, errno, "the store's %s: %s", path, strerror(errno));
    br_strlcpy(o->hash, hash, sizeof(o->hash));
    o->who = who;
    crypto_generichash_init(&o->hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    unsigned char buf[65536];
    for (;;) { /* what an earlier upload left */
        ssize_t k = read(o->fd, buf, sizeof(buf));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            br_errf(err, errno, "the store's %s: %s", path, strerror(errno));
            close_open(o);
            return NULL;
        }
        if (k == 0)
            break;
        crypto_generichash_update(&o->hs, buf, (unsigned long long)k);
        o->held += k;
    }
    return o;
}

static void proof_key(const char *hash, int64_t who, char *buf, size_t len)
{
    snprintf(buf, len, "%lld.%s", (long long)who, hash);
}

/* Whether user who sent all of content hash within PROOF_KEEP_S (c->mu held). */
static int proved_locked(br_content_t *c, const char *hash, int64_t who)
{
    char key[HEX_LEN + 32];
    proof_key(hash, who, key, sizeof(key));
    json_t *at = json_object_get(c->proofs, key);
    return at && json_integer_value(at) >= (json_int_t)(time(NULL) - PROOF_KEEP_S);
}

/* User who sent all of content hash, whole and right (c->mu held); the proofs past
 * PROOF_KEEP_S go, once an hour. (Out of memory: not kept, and they send it again.) */
static void prove(br_content_t *c, const char *hash, int64_t who)
{
    time_t now = time(NULL);
    char key[HEX_LEN + 32];
    if (!c->proofs && !(c->proofs = json_object()))
        return;
    if (now - c->pruned >= 3600) {
        const char *k;
        json_t *v, *tmp;
        json_object_foreach_safe(c->proofs, tmp, k, v)
            if (json_integer_value(v) < (json_int_t)(now - PROOF_KEEP_S))
                json_object_del(c->proofs, k);
        c->pruned = now;
    }
    proof_key(hash, who, key, sizeof(key));
    json_object_set_new(c->proofs, key, json_integer((json_int_t)now));
}

int br_content_proved(br_content_t *c, const char *hash, int64_t who)
{
    pthread_mutex_lock(&c->mu);
    int rc = hex_ok(hash) && proved_locked(c, hash, who);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* The whole partial o is checked (c->mu held): 0 when it is done with (a user's own
 * copy of a content the store holds already is only checked, then let go, and the
 * user's proof kept), 1 when it is to be made durable and put in place
 * (make_durable, without the lock), -1 with err when it hashed to another name. */
static int check_whole(br_content_t *c, open_t *o, br_err_t *err)
{
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char hex[HEX_LEN + 1], from[PATH_MAX + 160];
    crypto_generichash_final(&o->hs, h, sizeof(h));
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    partial_path(c, o->hash, o->who, from, sizeof(from));
    if (strcmp(hex, o->hash) != 0) {
        unlink(from);
        c->used -= (uint64_t)o->held;
        close_open(o);
        return br_errf(err, EBADMSG, "the bytes sent hash to %.16s..., not to their name "
                                     "%.16s...: sent again from the start",
                       hex, o->hash);
    }
    if (o->who && br_content_has(c, o->hash)) { /* held already: a proof, not a copy */
        unlink(from);
        c->used -= (uint64_t)o->held < c->used ? (uint64_t)o->held : c->used;
        prove(c, o->hash, o->who);
        close_open(o);
        return 0;
    }
    return 1;
}

/* A whole and checked partial, taken out of the open ones (o: its copy, fd and all),
 * made durable and put in place: the fsyncs, which can take tens of milliseconds on
 * a slow disk, run without c->mu, so that the loop's looks at the store
 * (br_content_proved, at each chunk it is handed) never wait on them. The user's
 * proof is kept under the lock after. */
static int make_durable(br_content_t *c, open_t *o, br_err_t *err)
{
    char from[PATH_MAX + 160], to[PATH_MAX + 160], dir[PATH_MAX + 32];
    partial_path(c, o->hash, o->who, from, sizeof(from));
    object_path(c, o->hash, to, sizeof(to));
    snprintf(dir, sizeof(dir), "%s/objects/%.2s", c->dir, o->hash);
    int rc = fsync(o->fd);
    if (rc == 0 && mkdir(dir, 0700) < 0 && errno != EEXIST)
        rc = -1;
    if (rc == 0)
        rc = rename(from, to);
    if (rc == 0)
        rc = fsync_dir(dir);
    int e = errno;
    char hash[HEX_LEN + 1];
    int64_t who = o->who;
    br_strlcpy(hash, o->hash, sizeof(hash));
    close_open(o);
    pthread_mutex_lock(&c->mu);
    c->durable[0] = '\0';
    if (rc == 0 && who)
        prove(c, hash, who);
    pthread_mutex_unlock(&c->mu);
    if (rc < 0)
        return br_errf(err, e, "storing %.16s...: %s", hash, strerror(e));
    return 0;
}

/* br_content_write's part under c->mu; *durable (set): a partial made whole and
 * checked, taken out of the open ones, that the caller makes durable without the
 * lock (make_durable; *whole once it is). */
static int write_locked(br_content_t *c, const char *hash, int64_t who, int64_t size,
                        int64_t offset, const void *data, size_t len, int64_t *held,
                        int *whole, open_t *durable, br_err_t *err)
{
    *whole = 0;
    *held = 0;
    if (!hex_ok(hash))
        return br_errf(err, EINVAL, "'%.70s' is not a content hash", hash);
    if (br_content_has(c, hash) && (!who || proved_locked(c, hash, who))) {
        *held = size;
        *whole = 1;
        return 0;
    }
    if (offset < 0 || size < 0 || (int64_t)len > size - offset)
        return br_errf(err, EINVAL, "%zu bytes at %lld go past the %lld of the content",
                       len, (long long)offset, (long long)size);
    if (c->quota && c->used + len > c->quota) {
        char q[32];
        return br_errf(err, EDQUOT, "the store is full (its quota, --store-quota, is %s)",
                       br_format_size(c->quota, q, sizeof(q)));
    }
    open_t *o = open_partial(c, hash, who, err);
    if (!o)
        return -1;
    o->used = ++c->clock;
    if (o->held > size) { /* a partial that cannot be this content's */
        c->used -= (uint64_t)o->held;
        if (ftruncate(o->fd, 0) < 0)
            return br_errf(err, errno, "the store: %s", strerror(errno));
        close_open(o);
        if (!(o = open_partial(c, hash, who, err)))
            return -1;
    }
    *held = o->held;
    if (offset != o->held)
        return br_errf(err, ERANGE, "the store holds %lld bytes of it, not %lld",
                       (long long)o->held, (long long)offset);
    if (len) {
        ssize_t k = pwrite(o->fd, data, len, offset);
        if (k != (ssize_t)len) {
            int e = k < 0 ? errno : ENOSPC;
            if (e == ENOSPC || e == EDQUOT || e == EFBIG) {
                /* the disk is full: the file cannot be finished, and what it holds of
                 * it would keep every other upload out too; it goes */
                char part[PATH_MAX + 160];
                partial_path(c, hash, who, part, sizeof(part));
                c->used -= (uint64_t)o->held < c->used ? (uint64_t)o->held : c->used;
                close_open(o);
                unlink(part);
                return br_errf(err, e, "the coordinator's store (--store-dir) has no room "
                                       "on its disk: %s (what was sent of this file is let "
                                       "go; free space there and send it again)",
                               strerror(e));
            }
            if (ftruncate(o->fd, offset) < 0) /* no half chunk stays */
                close_open(o);
            return br_errf(err, e, "the store could not write: %s", strerror(e));
        }
        crypto_generichash_update(&o->hs, data, len);
        o->held += (int64_t)len;
        c->used += len;
    }
    *held = o->held;
    if (o->held < size)
        return 0;
    int rc = check_whole(c, o, err);
    if (rc < 0)
        return -1;
    if (rc == 1) { /* (its slot is free for others meanwhile) */
        br_strlcpy(c->durable, o->hash, sizeof(c->durable));
        *durable = *o;
        memset(o, 0, sizeof(*o));
        o->fd = -1;
        return 0;
    }
    *whole = 1;
    return 0;
}

int br_content_write(br_content_t *c, const char *hash, int64_t who, int64_t size,
                     int64_t offset, const void *data, size_t len, int64_t *held, int *whole,
                     br_err_t *err)
{
    open_t durable = {.fd = -1};
    pthread_mutex_lock(&c->mu);
    int rc = write_locked(c, hash, who, size, offset, data, len, held, whole, &durable, err);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && durable.fd >= 0) {
        if (make_durable(c, &durable, err) < 0)
            return -1;
        *whole = 1;
    }
    return rc;
}

int br_content_put_manifest(br_content_t *c, const json_t *manifest, br_err_t *err)
{
    const char *mhash = json_string_value(json_object_get(manifest, "hash"));
    char path[PATH_MAX + 160];
    if (!hex_ok(mhash))
        return br_errf(err, EINVAL, "a manifest without its hash");
    manifest_path(c, mhash, path, sizeof(path));
    if (access(path, F_OK) == 0)
        return 0;
    char *text = json_dumps(manifest, JSON_COMPACT);
    if (!text)
        return br_errf(err, ENOMEM, "out of memory");
    int rc = br_write_file(path, text, strlen(text), 0600, err);
    if (rc == 0) {
        char dir[PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/manifests", c->dir);
        fsync_dir(dir);
        pthread_mutex_lock(&c->mu); /* (the writer's thread counts its chunks in it) */
        c->used += strlen(text);
        pthread_mutex_unlock(&c->mu);
    }
    free(text);
    return rc;
}

json_t *br_content_get_manifest(br_content_t *c, const char *mhash, br_err_t *err)
{
    char path[PATH_MAX + 160];
    if (!hex_ok(mhash))
        return br_errp(err, EINVAL, "'%.70s' is not a manifest hash", mhash);
    manifest_path(c, mhash, path, sizeof(path));
    size_t len = 0;
    char *text = br_read_file(path, MANIFEST_TEXT_MAX, &len, err);
    if (!text)
        return NULL;
    json_error_t je;
    json_t *m = json_loadb(text, len, 0, &je);
    free(text);
    return m ? m : br_errp(err, EBADMSG, "the store's manifest %.16s... is damaged", mhash);
}

int br_content_doubt(br_content_t *c, const char *hash, int manifest)
{
    if (!hex_ok(hash))
        return 0;
    if (c->ndoubts == c->doubts_cap) {
        size_t cap = c->doubts_cap ? 2 * c->doubts_cap : 64;
        doubt_t *d = realloc(c->doubts, cap * sizeof(*d));
        if (!d)
            return -1;
        c->doubts = d;
        c->doubts_cap = cap;
    }
    br_strlcpy(c->doubts[c->ndoubts].hash, hash, sizeof(c->doubts[0].hash));
    c->doubts[c->ndoubts++].manifest = manifest;
    return 0;
}

static uint64_t remove_file(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || unlink(path) < 0)
        return 0;
    return (uint64_t)st.st_size;
}

int br_content_sweep(br_content_t *c, br_store_t *s)
{
    int n = 0;
    if (!c->ndoubts) /* (the doubts are the loop's own: no wait on the writer) */
        return 0;
    pthread_mutex_lock(&c->mu);
    size_t kept = 0;
    for (size_t i = 0; i < c->ndoubts; i++) {
        const doubt_t *d = &c->doubts[i];
        br_err_t err;
        if (!d->manifest && strcmp(d->hash, c->durable) == 0) {
            c->doubts[kept++] = *d; /* being made durable: looked at by the next sweep */
            continue;
        }
        int used = d->manifest ? br_store_data_manifest_used(s, d->hash, &err)
                               : br_store_content_refs(s, d->hash, &err);
        if (used != 0) /* held, or the store could not say: kept */
            continue;
        char path[PATH_MAX + 160];
        if (d->manifest)
            manifest_path(c, d->hash, path, sizeof(path));
        else
            object_path(c, d->hash, path, sizeof(path));
        uint64_t freed = remove_file(path);
        if (!d->manifest) { /* and a partial, should one be there */
            for (int k = 0; k < BR_CONTENT_OPEN; k++)
                if (c->open[k].fd >= 0 && strcmp(c->open[k].hash, d->hash) == 0)
                    close_open(&c->open[k]);
            char part[PATH_MAX + 160];
            partial_path(c, d->hash, 0, part, sizeof(part));
            freed += remove_file(part); /* (users' own go with their age) */
        }
        c->used -= freed < c->used ? freed : c->used;
        n += freed > 0;
    }
    c->ndoubts = kept;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int br_content_collect(br_content_t *c, br_store_t *s, int64_t max_age_s)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/objects", c->dir);
    DIR *top = opendir(path);
    if (!top)
        return 0;
    int n = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(top))) {
        if (strlen(de->d_name) != 2)
            continue;
        char sub[PATH_MAX + 32];
        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        DIR *d = opendir(sub);
        struct dirent *fe;
        while (d && (fe = readdir(d))) {
            struct stat st;
            br_err_t err;
            if (!hex_ok(fe->d_name) ||
                fstatat(dirfd(d), fe->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                !S_ISREG(st.st_mode) || now - st.st_mtime < max_age_s ||
                br_store_content_refs(s, fe->d_name, &err) != 0)
                continue;
            if (unlinkat(dirfd(d), fe->d_name, 0) == 0) {
                pthread_mutex_lock(&c->mu);
                c->used -= (uint64_t)st.st_size < c->used ? (uint64_t)st.st_size : c->used;
                pthread_mutex_unlock(&c->mu);
                n++;
            }
        }
        if (d)
            closedir(d);
    }
    closedir(top);
    return n;
}
