/* listing.c - the whole manifests of checkpoints too big for a report (listing.h). */
#include "listing.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "manifest.h"
#include "manifest_check.h"
#include "util.h"

#define HASH_LEN BR_MANIFEST_HASH_LEN
#define TMP_KEEP_S (24 * 3600) /* a pull's half-fetched listing */

struct br_listings {
    char dir[PATH_MAX];
};

/* Listings unused for BR_LISTING_KEEP_DAYS, and temporary files older than a day. */
static void prune(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    time_t now = time(NULL);
    while (d && (de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        size_t n = strlen(de->d_name);
        int listing = n > 5 && strcmp(de->d_name + n - 5, ".json") == 0;
        time_t keep = listing ? (time_t)BR_LISTING_KEEP_DAYS * 86400 : TMP_KEEP_S;
        if (S_ISREG(st.st_mode) && now - st.st_mtime > keep)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    if (d)
        closedir(d);
}

br_listings_t *br_listings_new(const char *dir, br_err_t *err)
{
    if (strlen(dir) >= PATH_MAX - 80)
        return br_errp(err, ENAMETOOLONG, "%s: too long", dir);
    if (br_mkdir_p(dir, 0700, err) < 0)
        return NULL;
    br_listings_t *l = calloc(1, sizeof(*l));
    if (!l)
        return br_errp(err, ENOMEM, "out of memory");
    br_strlcpy(l->dir, dir, sizeof(l->dir));
    prune(l->dir);
    return l;
}

void br_listings_destroy(br_listings_t **l)
{
    if (l) {
        free(*l);
        *l = NULL;
    }
}

const char *br_listings_dir(const br_listings_t *l)
{
    return l->dir;
}

void br_listings_path(const char *dir, const char *mhash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s.json", dir, mhash);
}

static void hex_of(const char *text, size_t len, char *hex)
{
    unsigned char h[HASH_LEN];
    crypto_generichash(h, HASH_LEN, (const unsigned char *)text, len, NULL, 0);
    sodium_bin2hex(hex, 2 * HASH_LEN + 1, h, HASH_LEN);
}

json_t *br_listings_report(br_listings_t *l, const json_t *whole, br_err_t *err)
{
    json_t *entries = json_object_get(whole, "entries");
    size_t listed = 0, n = 0;
    *err = (br_err_t){0};
    for (; n < json_array_size(entries); n++) {
        size_t len = json_dumpb(json_array_get(entries, n), NULL, 0, JSON_COMPACT) + 1;
        if (listed + len > BR_MANIFEST_LIST_MAX)
            break;
        listed += len;
    }
    if (n == json_array_size(entries))
        return json_incref((json_t *)whole);
    json_t *part = json_array(), *cut = json_deep_copy(whole), *ref = NULL;
    for (size_t i = 0; part && i < n; i++)
        json_array_append(part, json_array_get(entries, i));
    if (!part || !cut || json_object_set(cut, "entries", part) < 0 ||
        json_object_set_new(cut, "truncated", json_true()) < 0) {
        json_decref(part);
        json_decref(cut);
        return br_errp(err, ENOMEM, "out of memory");
    }
    json_decref(part);
    char *text = json_dumps(whole, JSON_COMPACT);
    size_t len = text ? strlen(text) : 0;
    char hex[2 * HASH_LEN + 1], path[PATH_MAX];
    br_listings_path(l->dir, json_string_value(json_object_get(whole, "hash")), path,
                     sizeof(path));
    if (!text)
        br_errf(err, ENOMEM, "out of memory");
    else if (len > BR_MANIFEST_LISTING_MAX)
        br_errf(err, EFBIG, "its manifest takes %zu bytes, more than %d", len,
                BR_MANIFEST_LISTING_MAX);
    else if (br_write_file(path, text, len, 0600, err) == 0) {
        hex_of(text, len, hex);
        ref = json_pack("{s:s, s:I}", "hash", hex, "size", (json_int_t)len);
        if (!ref || json_object_set_new(cut, "listing", ref) < 0)
            br_errf(err, ENOMEM, "out of memory");
    }
    free(text);
    return cut;
}

json_t *br_listings_whole(const char *dir, const json_t *m, char *path, size_t plen,
                          br_err_t *err)
{
    const char *lhash;
    int64_t lsize;
    int rc = br_manifest_listing(m, &lhash, &lsize, err);
    if (path && plen)
        path[0] = '\0';
    if (rc <= 0)
        return rc < 0 ? NULL : json_incref((json_t *)m);
    char file[PATH_MAX], hex[2 * HASH_LEN + 1];
    br_listings_path(dir, json_string_value(json_object_get(m, "hash")), file,
                     sizeof(file));
    size_t len = 0;
    br_err_t e2;
    char *text = br_read_file(file, (size_t)lsize + 1, &len, &e2);
    if (!text)
        return br_errp(err, e2.errnum == ENOENT ? ENOENT : e2.errnum,
                       "the manifest's whole listing is not kept on this node (%s)",
                       e2.text);
    hex_of(text, len, hex);
    json_t *whole = NULL;
    if ((int64_t)len != lsize || strcmp(hex, lhash) != 0)
        br_errf(err, EBADMSG, "the manifest's whole listing kept here is damaged");
    else
        whole = br_manifest_from_listing(m, text, len, err);
    free(text);
    if (!whole) {
        unlink(file);
        return NULL;
    }
    utimensat(AT_FDCWD, file, NULL, 0); /* used: kept another BR_LISTING_KEEP_DAYS */
    if (path)
        br_strlcpy(path, file, plen);
    return whole;
}
