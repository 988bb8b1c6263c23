/* mfbuild.c - a manifest built entry by entry. */
#include "mfbuild.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sodium.h>

#define HASH_LEN BR_MANIFEST_HASH_LEN

typedef struct {
    char *path; /* relative to the manifest's root */
    char *link; /* a symlink's target, or NULL for a regular file */
    char *src;  /* the caller's, or NULL */
    int64_t size;
    unsigned mode;
    unsigned char hash[HASH_LEN];
} ent_t;

struct br_mfbuild {
    ent_t *e;
    size_t n, cap;
    int64_t bytes;
    int sorted;
    unsigned char *buf;
    const atomic_int *cancel;
};

br_mfbuild_t *br_mfbuild_new(const atomic_int *cancel, br_err_t *err)
{
    br_mfbuild_t *b = calloc(1, sizeof(*b));
    if (!b || !(b->buf = malloc(BR_MANIFEST_BUF))) {
        free(b);
        return br_errp(err, ENOMEM, "out of memory");
    }
    b->cancel = cancel;
    return b;
}

void br_mfbuild_destroy(br_mfbuild_t **bp)
{
    if (!bp || !*bp)
        return;
    int saved = errno;
    br_mfbuild_t *b = *bp;
    for (size_t i = 0; i < b->n; i++) {
        free(b->e[i].path);
        free(b->e[i].link);
        free(b->e[i].src);
    }
    free(b->e);
    free(b->buf);
    free(b);
    *bp = NULL;
    errno = saved;
}

static int valid_text(const char *s)
{
    json_t *j = json_string(s); /* NULL for text that is not UTF-8 */
    json_decref(j);
    return j != NULL;
}

static ent_t *add_entry(br_mfbuild_t *b, const char *rel, const struct stat *st,
                        const char *src, br_err_t *err)
{
    if (b->n == BR_MANIFEST_MAX_FILES)
        return br_errp(err, EFBIG, "more than %d files", BR_MANIFEST_MAX_FILES);
    if (!valid_text(rel))
        return br_errp(err, EILSEQ, "file name %s is not UTF-8", rel);
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        ent_t *e = realloc(b->e, cap * sizeof(*e));
        if (!e)
            return br_errp(err, ENOMEM, "out of memory");
        b->e = e;
        b->cap = cap;
    }
    ent_t *e = &b->e[b->n];
    memset(e, 0, sizeof(*e));
    if (!(e->path = strdup(rel)) || (src && !(e->src = strdup(src)))) {
        free(e->path);
        return br_errp(err, ENOMEM, "out of memory");
    }
    b->n++;
    b->sorted = 0;
    e->size = st->st_size;
    e->mode = st->st_mode & 07777;
    return e;
}

/* Drop the entry just added (its file could not be hashed). */
static void drop_last(br_mfbuild_t *b)
{
    ent_t *e = &b->e[--b->n];
    free(e->path);
    free(e->link);
    free(e->src);
}

static int hash_fd(br_mfbuild_t *b, int fd, const struct stat *st, const char *rel,
                   ent_t *e, br_err_t *err)
{
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, HASH_LEN);
    int fl = fcntl(fd, F_GETFL); /* opened without waiting: a regular file reads plainly */
    if (fl >= 0 && (fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (st->st_size > BR_MANIFEST_BUF)
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    int64_t got = 0;
    for (;;) {
        if (b->cancel && atomic_load(b->cancel))
            return br_errf(err, ECANCELED, "cancelled");
        ssize_t k = read(fd, b->buf, BR_MANIFEST_BUF);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return br_errf(err, errno, "%s: %s", rel, strerror(errno));
        if (k == 0)
            break;
        crypto_generichash_update(&hs, b->buf, (unsigned long long)k);
        got += k;
    }
    struct stat after;
    if (fstat(fd, &after) < 0 || got != st->st_size || after.st_size != st->st_size ||
        after.st_mtim.tv_sec != st->st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != st->st_mtim.tv_nsec)
        return br_errf(err, EAGAIN, "%s changed while it was hashed", rel);
    crypto_generichash_final(&hs, e->hash, HASH_LEN);
    b->bytes += got;
    return 0;
}

int br_mfbuild_file(br_mfbuild_t *b, int fd, const struct stat *st, const char *rel,
                    const char *src, br_err_t *err)
{
    ent_t *e = add_entry(b, rel, st, src, err);
    if (!e)
        return -1;
    if (hash_fd(b, fd, st, rel, e, err) < 0) {
        drop_last(b);
        return -1;
    }
    return 0;
}

int br_mfbuild_link(br_mfbuild_t *b, const char *rel, const char *target,
                    const struct stat *st, const char *src, br_err_t *err)
{
    if (!valid_text(target))
        return br_errf(err, EILSEQ, "the target of link %s is not UTF-8", rel);
    ent_t *e = add_entry(b, rel, st, src, err);
    if (!e)
        return -1;
    e->size = (int64_t)strlen(target); /* what was read, should the link change */
    if (!(e->link = strdup(target))) {
        drop_last(b);
        return br_errf(err, ENOMEM, "out of memory");
    }
    return 0;
}

size_t br_mfbuild_count(const br_mfbuild_t *b)
{
    return b->n;
}

int64_t br_mfbuild_bytes(const br_mfbuild_t *b)
{
    return b->bytes;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const ent_t *)a)->path, ((const ent_t *)b)->path);
}

json_t *br_mfbuild_json(br_mfbuild_t *b, const char *root, br_err_t *err)
{
    if (b->n && !b->sorted) /* an empty manifest has no array to sort */
        qsort(b->e, b->n, sizeof(ent_t), by_path);
    b->sorted = 1;
    for (size_t i = 1; i < b->n; i++)
        if (strcmp(b->e[i - 1].path, b->e[i].path) == 0)
            return br_errp(err, EEXIST, "%s is named twice", b->e[i].path);
    crypto_generichash_state hs;
    unsigned char h[HASH_LEN];
    char hex[2 * HASH_LEN + 1];
    json_t *entries = json_array(), *m = NULL;
    br_manifest_hash_begin(&hs, root);
    for (size_t i = 0; entries && i < b->n; i++) {
        const ent_t *e = &b->e[i];
        if (!e->link)
            sodium_bin2hex(hex, sizeof(hex), e->hash, HASH_LEN);
        br_manifest_hash_entry(&hs, e->path, e->link != NULL, e->mode, e->size,
                               e->link ? e->link : hex);
        if (json_array_append_new(entries,
                                  json_pack("{s:s, s:I, s:i, s:s}", "path", e->path,
                                            "size", (json_int_t)e->size, "mode",
                                            (int)e->mode, e->link ? "link" : "hash",
                                            e->link ? e->link : hex)) < 0) {
            json_decref(entries);
            entries = NULL;
        }
    }
    crypto_generichash_final(&hs, h, HASH_LEN);
    sodium_bin2hex(hex, sizeof(hex), h, HASH_LEN);
    if (entries)
        m = json_pack("{s:s, s:s, s:I, s:I, s:O}", "hash", hex, "root", root, "files",
                      (json_int_t)b->n, "bytes", (json_int_t)b->bytes, "entries",
                      entries);
    json_decref(entries);
    return m ? m : br_errp(err, ENOMEM, "out of memory");
}

const char *br_mfbuild_src(const br_mfbuild_t *b, const char *path)
{
    if (!b->sorted || !b->n)
        return NULL;
    ent_t key = {.path = (char *)path};
    const ent_t *e = bsearch(&key, b->e, b->n, sizeof(ent_t), by_path);
    return e ? e->src : NULL;
}

size_t br_mfbuild_largest(const br_mfbuild_t *b, size_t n, const char **path,
                          int64_t *size)
{
    size_t k = 0;
    if (n > 16)
        n = 16;
    for (size_t i = 0; i < b->n; i++) {
        const ent_t *e = &b->e[i];
        if (e->link)
            continue;
        size_t at = k < n ? k : n; /* where it goes: after every larger one */
        while (at > 0 && size[at - 1] < e->size)
            at--;
        if (at >= n)
            continue;
        size_t last = k < n ? k : n - 1;
        for (size_t j = last; j > at; j--) {
            path[j] = path[j - 1];
            size[j] = size[j - 1];
        }
        path[at] = e->path;
        size[at] = e->size;
        if (k < n)
            k++;
    }
    return k;
}
