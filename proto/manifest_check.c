/* manifest_check.c - the manifest hash and the checks of a manifest from elsewhere
 * (manifest_check.h). */
#include "manifest_check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HASH_LEN BR_MANIFEST_HASH_LEN
#define MAGIC "bramble-manifest-1"

static void hash_str(crypto_generichash_state *hs, const char *s)
{
    crypto_generichash_update(hs, (const unsigned char *)s, strlen(s) + 1); /* and NUL */
}

void br_manifest_hash_begin(crypto_generichash_state *hs, const char *root)
{
    crypto_generichash_init(hs, NULL, 0, HASH_LEN);
    hash_str(hs, MAGIC);
    hash_str(hs, root);
}

void br_manifest_hash_entry(crypto_generichash_state *hs, const char *path, int link,
                            unsigned mode, int64_t size, const char *content)
{
    char num[32];
    hash_str(hs, path);
    hash_str(hs, link ? "l" : "f");
    snprintf(num, sizeof(num), "%u", mode);
    hash_str(hs, num);
    snprintf(num, sizeof(num), "%lld", (long long)size);
    hash_str(hs, num);
    hash_str(hs, content);
}

const char *br_manifest_path_why(const char *path)
{
    size_t n = strlen(path);
    if (n == 0)
        return "an empty path";
    if (n >= PATH_MAX)
        return "a path of 4096 bytes or more";
    if (path[0] == '/')
        return "an absolute path (it must be relative to the tree's top)";
    for (const char *c = path; *c;) {
        size_t k = strcspn(c, "/");
        if (k == 0)
            return "an empty name between two slashes";
        if (k > NAME_MAX)
            return "a name of more than 255 bytes";
        if (k == 1 && c[0] == '.')
            return "a '.' in the path";
        if (k == 2 && c[0] == '.' && c[1] == '.')
            return "a '..' in the path (it would leave the tree)";
        c += k;
        if (*c == '/' && !*++c)
            return "a slash at its end";
    }
    return NULL;
}

int br_manifest_path_ok(const char *path)
{
    return br_manifest_path_why(path) == NULL;
}

/* path, as a message shows it: at most 100 bytes of it, and its length when longer */
static const char *shown(const char *path, char *buf, size_t len)
{
    size_t n = strlen(path);
    if (n <= 100)
        snprintf(buf, len, "'%s'", path);
    else
        snprintf(buf, len, "'%.100s...' (%zu bytes)", path, n);
    return buf;
}

static int hex_ok(const char *s)
{
    if (!s || strlen(s) != 2 * HASH_LEN)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* One entry's fields, checked; its text fields must hold no NUL. */
static int entry_ok(json_t *e, const char **path, const char **content, int *link,
                    json_int_t *size, int *mode, br_err_t *err)
{
    json_t *p, *h = NULL, *l = NULL;
    json_error_t je;
    if (json_unpack_ex(e, &je, JSON_STRICT, "{s:o, s:I, s:i, s?o, s?o}", "path", &p,
                       "size", size, "mode", mode, "hash", &h, "link", &l) < 0)
        return br_errf(err, EPROTO, "manifest entry: %s", je.text);
    json_t *c = h ? h : l;
    char at[160];
    if (!json_is_string(p) || !c || (h && l) || !json_is_string(c))
        return br_errf(err, EPROTO, "manifest entry: a path with a hash or a link");
    *path = json_string_value(p);
    *content = json_string_value(c);
    *link = l != NULL;
    if (strlen(*path) != json_string_length(p))
        return br_errf(err, EPROTO, "manifest entry %s: its path holds a NUL byte",
                       shown(*path, at, sizeof(at)));
    if (strlen(*content) != json_string_length(c))
        return br_errf(err, EPROTO, "manifest entry %s: its %s holds a NUL byte",
                       shown(*path, at, sizeof(at)), l ? "link" : "hash");
    const char *why = br_manifest_path_why(*path);
    if (why)
        return br_errf(err, EPROTO, "manifest entry %s: not allowed: %s",
                       shown(*path, at, sizeof(at)), why);
    if (*size < 0 || *mode < 0 || *mode > 07777 || (h && !hex_ok(*content)) ||
        (l && *size != (json_int_t)strlen(*content)))
        return br_errf(err, EPROTO, "manifest entry %s: bad size, mode or hash",
                       shown(*path, at, sizeof(at)));
    return 0;
}

int br_manifest_verify(const json_t *mj, br_err_t *err)
{
    json_t *m = (json_t *)mj, *entries;
    const char *hash, *root;
    json_int_t files, bytes;
    int truncated = 0;
    json_error_t je;
    json_t *listing = NULL;
    if (!m || json_unpack_ex(m, &je, JSON_STRICT, "{s:s, s:s, s:I, s:I, s:o, s?b, s?o}",
                             "hash", &hash, "root", &root, "files", &files, "bytes",
                             &bytes, "entries", &entries, "truncated", &truncated,
                             "listing", &listing) < 0)
        return br_errf(err, EPROTO, "manifest: %s", m ? je.text : "none");
    if (!json_is_array(entries) || !hex_ok(hash) ||
        strlen(hash) != json_string_length(json_object_get(m, "hash")) ||
        (strcmp(root, "dir") != 0 && strcmp(root, "file") != 0) ||
        strlen(root) != json_string_length(json_object_get(m, "root")))
        return br_errf(err, EPROTO, "manifest: bad hash, root or entries");
    if (truncated || (json_int_t)json_array_size(entries) != files)
        return br_errf(err, ENOTSUP, "manifest lists %zu of its %lld files",
                       json_array_size(entries), (long long)files);
    if (strcmp(root, "file") == 0 && files != 1)
        return br_errf(err, EPROTO, "manifest: a one-file checkpoint with %lld entries",
                       (long long)files);
    crypto_generichash_state hs;
    unsigned char h[HASH_LEN];
    char hex[2 * HASH_LEN + 1];
    const char *prev = NULL;
    json_int_t sum = 0;
    br_manifest_hash_begin(&hs, root);
    for (size_t i = 0; i < json_array_size(entries); i++) {
        const char *path = NULL, *content = NULL;
        int link = 0, mode = 0;
        json_int_t size = 0;
        if (entry_ok(json_array_get(entries, i), &path, &content, &link, &size, &mode,
                     err) < 0)
            return -1;
        if (prev && strcmp(prev, path) >= 0)
            return br_errf(err, EPROTO, "manifest: entries out of order at %.64s",
                           path);
        if (strcmp(root, "file") == 0 && (link || strchr(path, '/')))
            return br_errf(err, EPROTO, "manifest: a one-file checkpoint holds %.64s",
                           path);
        prev = path;
        sum += link ? 0 : size;
        br_manifest_hash_entry(&hs, path, link, (unsigned)mode, size, content);
    }
    crypto_generichash_final(&hs, h, HASH_LEN);
    sodium_bin2hex(hex, sizeof(hex), h, HASH_LEN);
    if (sum != bytes)
        return br_errf(err, EPROTO, "manifest: bytes %lld, its files hold %lld",
                       (long long)bytes, (long long)sum);
    if (strcmp(hex, hash) != 0)
        return br_errf(err, EPROTO, "manifest: its entries do not hash to %.16s...",
                       hash);
    return 0;
}

/* 1 when the link at path (a checked manifest path) to target stays inside the tree:
 * target relative, and its ".." never climbing above the tree's top. */
static int link_inside(const char *path, const char *target)
{
    if (!*target || target[0] == '/')
        return 0;
    long depth = 0; /* the link's own directory, below the top */
    for (const char *c = path; (c = strchr(c, '/')); c++)
        depth++;
    for (const char *c = target; *c;) {
        size_t k = strcspn(c, "/");
        if (k == 2 && c[0] == '.' && c[1] == '.') {
            if (--depth < 0)
                return 0;
        } else if (k && !(k == 1 && c[0] == '.')) {
            depth++;
        }
        c += k + (c[k] == '/');
    }
    return 1;
}

int br_manifest_tree_links_ok(const json_t *m, br_err_t *err)
{
    json_t *links = json_object(), *e;
    size_t i;
    int rc = links ? 0 : br_errf(err, ENOMEM, "out of memory");
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        if (rc < 0)
            break;
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *target = json_string_value(json_object_get(e, "link"));
        if (!path)
            continue;
        char up[PATH_MAX];
        for (const char *s = strchr(path, '/'); s && rc == 0; s = strchr(s + 1, '/')) {
            snprintf(up, sizeof(up), "%.*s", (int)(s - path), path);
            if (json_object_get(links, up))
                rc = br_errf(err, EPROTO, "%.200s: inside %.200s, which is a link", path, up);
        }
        if (rc == 0 && target && !link_inside(path, target))
            rc = br_errf(err, EPROTO, "%.200s: a link out of the tree (to %.200s)", path,
                         target);
        if (rc == 0 && target && json_object_set_new(links, path, json_true()) < 0)
            rc = br_errf(err, ENOMEM, "out of memory");
    }
    json_decref(links);
    return rc;
}

int br_manifest_listing(const json_t *m, const char **hash, int64_t *size, br_err_t *err)
{
    if (!json_is_true(json_object_get(m, "truncated")))
        return 0;
    json_t *l = json_object_get(m, "listing");
    json_int_t n = 0;
    if (!l || json_unpack(l, "{s:s, s:I}", "hash", hash, "size", &n) < 0 ||
        !hex_ok(*hash) || n < 2 || n > BR_MANIFEST_LISTING_MAX ||
        !hex_ok(json_string_value(json_object_get(m, "hash")))) /* names its file */
        return br_errf(err, ENOTSUP, "manifest lists %zu of its %lld files, and names "
                                     "no whole listing",
                       json_array_size(json_object_get(m, "entries")),
                       (long long)json_integer_value(json_object_get(m, "files")));
    *size = n;
    return 1;
}

json_t *br_manifest_parse_listing(const char *text, size_t len, br_err_t *err)
{
    json_error_t je;
    /* (a NUL is let through the parse, to be refused naming its entry) */
    json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!m)
        return br_errp(err, EPROTO, "manifest listing: %s", je.text);
    if (json_object_get(m, "truncated") || br_manifest_verify(m, err) < 0) {
        if (json_object_get(m, "truncated"))
            br_errf(err, EPROTO, "manifest listing: truncated itself");
        json_decref(m);
        return NULL;
    }
    return m;
}

json_t *br_manifest_summary(const json_t *m)
{
    return json_pack("{s:O, s:O, s:O, s:O}", "hash", json_object_get(m, "hash"), "root",
                     json_object_get(m, "root"), "files", json_object_get(m, "files"),
                     "bytes", json_object_get(m, "bytes"));
}

json_t *br_manifest_from_listing(const json_t *summary, const char *text, size_t len,
                                 br_err_t *err)
{
    json_t *m = br_manifest_parse_listing(text, len, err);
    if (!m)
        return NULL;
    static const char *const same[] = {"hash", "root", "files", "bytes"};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        if (!json_equal(json_object_get(m, same[i]), json_object_get(summary, same[i]))) {
            json_decref(m);
            return br_errp(err, EPROTO, "manifest listing: its %s is not the checkpoint's",
                           same[i]);
        }
    return m;
}

json_t *br_manifest_find(const json_t *m, const char *path)
{
    json_t *entries = json_object_get(m, "entries");
    size_t lo = 0, hi = json_array_size(entries);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        json_t *e = json_array_get(entries, mid);
        int c = strcmp(json_string_value(json_object_get(e, "path")), path);
        if (c == 0)
            return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}


int br_manifest_hashes_to(crypto_generichash_state *hs, const char *hex)
{
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char got[2 * BR_MANIFEST_HASH_LEN + 1];
    crypto_generichash_final(hs, h, sizeof(h));
    sodium_bin2hex(got, sizeof(got), h, sizeof(h));
    return strcmp(got, hex) == 0;
}

int br_manifest_file_holds(int dfd, const char *leaf, int64_t size, const char *hex)
{
    int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return 0;
    int same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == size;
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    unsigned char buf[65536];
    ssize_t n;
    while (same && (n = read(fd, buf, sizeof(buf))) > 0)
        crypto_generichash_update(&hs, buf, (size_t)n);
    close(fd);
    return br_manifest_hashes_to(&hs, hex) && same;
}
