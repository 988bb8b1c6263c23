/* ociarchive.c - the image an archive from `podman save` holds, checked without
 * reading its layers (ociarchive.h). One pass over the tar's headers lists its
 * entries (name, type, link, where its data lies); the JSON files are then read
 * from where that list says they lie. */
#include "ociarchive.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define BLOCK 512
#define PAX_MAX (1 << 20)    /* one pax extended header's records */
#define NAMES_MAX (16 << 20) /* all entries' names and links together */
#define LINK_HOPS 8          /* links followed from one name */
#define SHA256_HEX (2 * crypto_hash_sha256_BYTES)

#define OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

struct entry {
    char *name;   /* cleaned: no "./", no empty or "." component */
    char *link;   /* a symbolic or hard link's target, else NULL */
    int64_t off;  /* where its data begins */
    int64_t size; /* its data's bytes */
    char type;    /* the header's typeflag ('0' for '\0' and '7') */
};

struct archive {
    const char *path;
    int fd;
    int64_t bytes;
    struct entry *e;
    size_t n, cap;
    size_t name_bytes;
};

/* What a header that names the next entry left for it (GNU 'L'/'K', pax 'x'). */
struct pending {
    char *name, *link;
    int64_t size; /* pax "size", -1 when none */
};

static void pending_clear(struct pending *p)
{
    free(p->name);
    free(p->link);
    p->name = p->link = NULL;
    p->size = -1;
}

/* Read n bytes at off; a short read is EIO. */
static int read_at(struct archive *a, void *buf, size_t n, int64_t off, br_err_t *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(a->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            return br_errf(err, e, "%s: cannot read at byte %lld: %s", a->path,
                           (long long)(off + got), strerror(e));
        }
        got += (size_t)r;
    }
    return 0;
}

/* ---- tar headers ---- */

/* An octal field (leading and trailing spaces and NULs allowed; empty is 0), or
 * GNU's base-256 form (first byte 0x80, positive only). -1 when neither. */
static int64_t parse_num(const unsigned char *f, size_t len)
{
    int64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80)
            return -1; /* negative, or a form we do not know */
        for (size_t i = 1; i < len; i++) {
            if (v > (INT64_MAX >> 8))
                return -1;
            v = (v << 8) | f[i];
        }
        return v;
    }
    size_t i = 0;
    while (i < len && (f[i] == ' ' || f[i] == '\0'))
        i++;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (INT64_MAX >> 3))
            return -1;
        v = (v << 3) | (f[i] - '0');
    }
    for (; i < len; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    return v;
}

/* The checksum: the header's bytes summed with its checksum field as spaces, as
 * unsigned bytes (POSIX) or signed ones (some old tars). */
static int checksum_ok(const unsigned char *h)
{
    int64_t want = parse_num(h + 148, 8);
    int64_t u = 0, s = 0;
    for (int i = 0; i < BLOCK; i++) {
        unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
        u += c;
        s += (signed char)c;
    }
    return want > 0 && (want == u || want == s);
}

static int all_zero(const unsigned char *h)
{
    for (int i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* Typeflags that carry no data blocks whatever their size says (as Go reads). */
static int header_only(char type)
{
    return type == '1' || type == '2' || type == '3' || type == '4' || type == '5' ||
           type == '6';
}

/* A header's text field, at most len bytes, NUL-terminated into out. */
static void field(char *out, const unsigned char *f, size_t len)
{
    size_t n = strnlen((const char *)f, len);
    memcpy(out, f, n);
    out[n] = '\0';
}

/* The name a header gives (POSIX ustar: prefix/name), into buf (257 bytes). */
static char *header_name(const unsigned char *h, char *buf)
{
    buf[0] = '\0';
    if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) {
        field(buf, h + 345, 155);
        strcat(buf, "/");
    }
    field(buf + strlen(buf), h, 100);
    return buf;
}

/* Clean a name in place: drop leading "/", "./", empty and "." components and a
 * trailing "/"; resolve "..". 0, or -1 when ".." would climb out of the archive. */
static int clean_name(char *s)
{
    char *w = s;
    const char *r = s;
    while (*r) {
        size_t k = strcspn(r, "/");
        if (k == 0 || (k == 1 && r[0] == '.')) {
            /* nothing to keep */
        } else if (k == 2 && r[0] == '.' && r[1] == '.') {
            if (w == s)
                return -1;
            while (w > s && w[-1] != '/')
                w--;
            if (w > s)
                w--; /* the '/' before the dropped component */
        } else {
            if (w > s)
                *w++ = '/';
            memmove(w, r, k);
            w += k;
        }
        r += k;
        if (*r == '/')
            r++;
    }
    *w = '\0';
    return 0;
}

/* A GNU long name or link ('L', 'K'): the data, up to its first NUL. */
static char *read_long(struct archive *a, int64_t off, int64_t size, int64_t hdr,
                       br_err_t *err)
{
    if (size > BR_OCIARCHIVE_NAME_MAX)
        return br_errp(
            err, EINVAL, "%s: the long name at byte %lld has %lld bytes (at most %d)",
            a->path, (long long)hdr, (long long)size, BR_OCIARCHIVE_NAME_MAX);
    char *s = malloc((size_t)size + 1);
    if (!s)
        return br_errp(err, ENOMEM, "%s: out of memory", a->path);
    if (read_at(a, s, (size_t)size, off, err) < 0) {
        free(s);
        return NULL;
    }
    s[size] = '\0';
    return s;
}

/* Replace *dst with a copy of the n bytes at v; refused when they hold a NUL. */
static int set_text(char **dst, const char *v, size_t n)
{
    if (memchr(v, '\0', n) || n > BR_OCIARCHIVE_NAME_MAX)
        return -1;
    char *s = strndup(v, n);
    if (!s)
        return -1;
    free(*dst);
    *dst = s;
    return 0;
}

/* A pax extended header's records ("LEN key=value\n"): path, linkpath and size are
 * kept for the next entry, the rest ignored. */
static int read_pax(struct archive *a, int64_t off, int64_t size, int64_t hdr,
                    struct pending *p, br_err_t *err)
{
    if (size > PAX_MAX)
        return br_errf(err, EINVAL,
                       "%s: the pax header at byte %lld has %lld bytes "
                       "(at most %d)",
                       a->path, (long long)hdr, (long long)size, PAX_MAX);
    char *b = malloc((size_t)size + 1);
    if (!b)
        return br_errf(err, ENOMEM, "%s: out of memory", a->path);
    if (read_at(a, b, (size_t)size, off, err) < 0) {
        free(b);
        return -1;
    }
    size_t pos = 0, n = (size_t)size;
    int bad = 0;
    while (pos < n && !bad) {
        size_t len = 0, i = pos;
        while (i < n && b[i] >= '0' && b[i] <= '9' && len <= n)
            len = len * 10 + (size_t)(b[i++] - '0');
        if (i == pos || i >= n || b[i] != ' ' || len > n - pos || len <= i - pos + 1 ||
            b[pos + len - 1] != '\n') {
            bad = 1;
            break;
        }
        const char *end = b + pos + len;
        const char *key = b + i + 1;
        const char *eq = memchr(key, '=', (size_t)(end - key));
        if (!eq) {
            bad = 1;
            break;
        }
        size_t klen = (size_t)(eq - key), vlen = (size_t)(end - 1 - (eq + 1));
        const char *v = eq + 1;
        if (klen == 4 && memcmp(key, "path", 4) == 0)
            bad = set_text(&p->name, v, vlen) < 0;
        else if (klen == 8 && memcmp(key, "linkpath", 8) == 0)
            bad = set_text(&p->link, v, vlen) < 0;
        else if (klen == 4 && memcmp(key, "size", 4) == 0) {
            int64_t s = 0;
            bad = vlen == 0 || vlen > 18;
            for (size_t k = 0; k < vlen && !bad; k++) {
                bad = v[k] < '0' || v[k] > '9';
                s = s * 10 + (v[k] - '0');
            }
            p->size = s;
        }
        pos += len;
    }
    free(b);
    if (bad)
        return br_errf(err, EINVAL,
                       "%s is damaged at byte %lld (a pax header that "
                       "cannot be read)",
                       a->path, (long long)hdr);
    return 0;
}

static int add_entry(struct archive *a, char *name, char *link, int64_t off,
                     int64_t size, char type, br_err_t *err)
{
    size_t nb = strlen(name) + (link ? strlen(link) : 0);
    if (a->n == BR_OCIARCHIVE_ENTRIES_MAX || a->name_bytes + nb > NAMES_MAX) {
        free(name);
        free(link);
        return br_errf(err, EINVAL,
                       "%s is not an image archive: more than %d entries "
                       "or %d MiB of names",
                       a->path, BR_OCIARCHIVE_ENTRIES_MAX, NAMES_MAX >> 20);
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        struct entry *e = realloc(a->e, cap * sizeof(*e));
        if (!e) {
            free(name);
            free(link);
            return br_errf(err, ENOMEM, "%s: out of memory", a->path);
        }
        a->e = e;
        a->cap = cap;
    }
    a->e[a->n++] = (struct entry){name, link, off, size, type};
    a->name_bytes += nb;
    return 0;
}

/* One entry's header at hdr (its checksum right, type its typeflag): its name, link
 * and data. p holds what headers before it left for it, and takes what a 'L', 'K'
 * or 'x' leaves. */
static int take_header(struct archive *a, const unsigned char *h, char type,
                       int64_t hdr, int64_t data, int64_t size, struct pending *p,
                       br_err_t *err)
{
    if (type == 'L' || type == 'K') {
        char *s = read_long(a, data, size, hdr, err);
        if (!s)
            return -1;
        char **dst = type == 'L' ? &p->name : &p->link;
        free(*dst);
        *dst = s;
        return 0;
    }
    if (type == 'x')
        return read_pax(a, data, size, hdr, p, err);
    if (type == 'g')
        return 0; /* global pax records: nothing this reads */
    char buf[256 + 1];
    char *name = p->name, *link = p->link;
    p->name = p->link = NULL;
    if (!name)
        name = strdup(header_name(h, buf));
    if (!link && (type == '1' || type == '2')) {
        field(buf, h + 157, 100);
        link = strdup(buf);
    }
    if (!name || ((type == '1' || type == '2') && !link)) {
        free(name);
        free(link);
        return br_errf(err, ENOMEM, "%s: out of memory", a->path);
    }
    if (clean_name(name) < 0)
        name[0] = '\0'; /* climbs out: kept, never found */
    return add_entry(a, name, link, data, size, type, err);
}

/* Old GNU sparse files ('S') may have extension headers after theirs: where the
 * data begins then, or -1 when they run past the end. */
static int64_t sparse_data(struct archive *a, const unsigned char *h, int64_t data,
                           br_err_t *err)
{
    unsigned char x[BLOCK];
    int more = h[482] != 0;
    while (more) {
        if (a->bytes - data < BLOCK)
            return -1;
        if (read_at(a, x, BLOCK, data, err) < 0)
            return -2;
        more = x[504] != 0;
        data += BLOCK;
    }
    return data;
}

/* Walk every header, up to the first all-zero block, listing the entries. */
static int walk(struct archive *a, br_err_t *err)
{
    struct pending p = {NULL, NULL, -1};
    unsigned char h[BLOCK];
    int64_t off = 0;
    int rc = -1;
    for (;;) {
        if (a->bytes - off < BLOCK) {
            if (off == 0)
                br_errf(err, EINVAL, "%s is not an image archive (not a tar file)",
                        a->path);
            else if (off == a->bytes)
                br_errf(err, EINVAL, "%s is cut short: no end-of-archive blocks",
                        a->path);
            else
                br_errf(err, EINVAL,
                        "%s is cut short: a header at byte %lld ends "
                        "past its end (%lld bytes)",
                        a->path, (long long)off, (long long)a->bytes);
            break;
        }
        if (read_at(a, h, BLOCK, off, err) < 0)
            break;
        if (all_zero(h)) {
            if (p.name || p.link || p.size >= 0)
                br_errf(err, EINVAL,
                        "%s is damaged at byte %lld (an extended header "
                        "with no entry after it)",
                        a->path, (long long)off);
            else
                rc = 0;
            break;
        }
        int64_t size = parse_num(h + 124, 12);
        if (!checksum_ok(h) || size < 0) {
            if (off == 0)
                br_errf(err, EINVAL, "%s is not an image archive (not a tar file)",
                        a->path);
            else
                br_errf(err, EINVAL, "%s is damaged at byte %lld (not a tar header)",
                        a->path, (long long)off);
            break;
        }
        char name[257], type = (char)h[156];
        if (type == '\0' || type == '7') { /* v7 marks a directory by its name */
            const char *nm = p.name ? p.name : header_name(h, name);
            size_t len = strlen(nm);
            type = type == '\0' && len && nm[len - 1] == '/' ? '5' : '0';
        }
        int ext = type == 'L' || type == 'K' || type == 'x' || type == 'g';
        if (!ext && p.size >= 0)
            size = p.size;
        if (!ext && header_only(type))
            size = 0;
        int64_t data = off + BLOCK;
        if (type == 'S' && (data = sparse_data(a, h, data, err)) < 0) {
            if (data == -1)
                br_errf(err, EINVAL,
                        "%s is cut short: a sparse header at byte %lld "
                        "ends past its end",
                        a->path, (long long)off);
            break;
        }
        int64_t end = size > INT64_MAX - data - BLOCK
                          ? INT64_MAX
                          : data + ((size + BLOCK - 1) / BLOCK) * BLOCK;
        if (end > a->bytes) {
            br_errf(err, EINVAL, "%s is cut short: %.200s ends at byte %lld of %lld",
                    a->path, p.name && !ext ? p.name : header_name(h, name),
                    (long long)end, (long long)a->bytes);
            break;
        }
        if (!ext)
            p.size = -1;
        if (take_header(a, h, type, off, data, size, &p, err) < 0)
            break;
        off = end;
    }
    pending_clear(&p);
    return rc;
}

/* ---- entries by name ---- */

static int by_name(const void *x, const void *y)
{
    return strcmp(((const struct entry *)x)->name, ((const struct entry *)y)->name);
}

/* The first entry called cur (cleaned), or a->n. */
static size_t lookup(struct archive *a, const char *cur)
{
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(a->e[mid].name, cur) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < a->n && strcmp(a->e[lo].name, cur) == 0 ? lo : a->n;
}

/* The entry called name (cleaned here), links followed: NULL with err when none, a
 * name two entries share, or links that lead nowhere. "FILE: WHAT NAME BY is
 * missing": what and by name it for the words. */
static struct entry *find(struct archive *a, const char *name, const char *what,
                          const char *by, br_err_t *err)
{
    char cur[2 * BR_OCIARCHIVE_NAME_MAX + 2];
    int hop = 0;
    if (strlen(name) <= BR_OCIARCHIVE_NAME_MAX)
        br_strlcpy(cur, name, sizeof(cur));
    else
        hop = LINK_HOPS + 1;
    for (; hop <= LINK_HOPS; hop++) {
        size_t i;
        if (clean_name(cur) < 0 || !cur[0] || (i = lookup(a, cur)) == a->n)
            break;
        struct entry *e = &a->e[i];
        if (i + 1 < a->n && strcmp(a->e[i + 1].name, cur) == 0)
            return br_errp(err, EINVAL,
                           "%s: %s %.200s%s: two entries are called "
                           "%.200s",
                           a->path, what, name, by, cur);
        if (e->type == '0')
            return e;
        if (e->type == '1') {
            br_strlcpy(cur, e->link, sizeof(cur));
        } else if (e->type == '2') {
            char *slash = strrchr(cur, '/');
            if (e->link[0] == '/' || !slash)
                br_strlcpy(cur, e->link, sizeof(cur));
            else
                snprintf(slash + 1, sizeof(cur) - (size_t)(slash + 1 - cur), "%s",
                         e->link);
        } else {
            return br_errp(err, EINVAL, "%s: %s %.200s%s is not a file", a->path, what,
                           name, by);
        }
    }
    return br_errp(err, EINVAL, "%s: %s %.200s%s is missing", a->path, what, name, by);
}

/* Whether some entry is called name (a plain name, already clean). */
static int has(struct archive *a, const char *name)
{
    return lookup(a, name) < a->n;
}

/* An entry's bytes (at most BR_OCIARCHIVE_JSON_MAX), NUL-terminated; *len its size. */
static char *read_small(struct archive *a, struct entry *e, const char *name,
                        size_t *len, br_err_t *err)
{
    if (e->size > BR_OCIARCHIVE_JSON_MAX)
        return br_errp(err, EINVAL,
                       "%s: %.200s is too large for an image's manifest "
                       "(%lld bytes, at most %d MiB)",
                       a->path, name, (long long)e->size, BR_OCIARCHIVE_JSON_MAX >> 20);
    char *b = malloc((size_t)e->size + 1);
    if (!b)
        return br_errp(err, ENOMEM, "%s: out of memory", a->path);
    if (read_at(a, b, (size_t)e->size, e->off, err) < 0) {
        free(b);
        return NULL;
    }
    b[e->size] = '\0';
    *len = (size_t)e->size;
    return b;
}

/* The JSON in entry name; bytes/len (may be NULL) keep its text. */
static json_t *read_json(struct archive *a, const char *name, const char *what,
                         const char *by, char **bytes, size_t *len, br_err_t *err)
{
    struct entry *e = find(a, name, what, by, err);
    size_t n = 0;
    char *b = e ? read_small(a, e, name, &n, err) : NULL;
    if (!b)
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(b, n, 0, &je);
    if (!j)
        br_errf(err, EINVAL, "%s: %s %.200s is not JSON: %s (line %d)", a->path, what,
                name, je.text, je.line);
    if (j && bytes) {
        *bytes = b;
        *len = n;
    } else {
        free(b);
    }
    return j;
}

/* ---- the image ---- */

static void sha256_hex(const char *b, size_t n, char hex[SHA256_HEX + 1])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)b, n);
    sodium_bin2hex(hex, SHA256_HEX + 1, h, sizeof(h));
}

/* v's text when it is a string holding no NUL, else NULL. */
static const char *jstr(json_t *v)
{
    const char *s = json_string_value(v);
    return s && strlen(s) == json_string_length(v) ? s : NULL;
}

static int is_hex64(const char *s, size_t n)
{
    if (n != SHA256_HEX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* A string member of o, copied into out (size n): 0, or -1 with err. */
static int config_text(struct archive *a, json_t *o, const char *key, int need,
                       char *out, size_t n, br_err_t *err)
{
    json_t *v = json_object_get(o, key);
    out[0] = '\0';
    if (!v && !need)
        return 0;
    const char *s = json_string_value(v);
    if (!s || (need && !s[0]) || strlen(s) >= n || strlen(s) != json_string_length(v))
        return br_errf(err, EINVAL, "%s: its config's \"%s\" is %s", a->path, key,
                       !v      ? "missing"
                       : !s    ? "not a string"
                       : !s[0] ? "empty"
                               : "too long or not text");
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* The config at name: its ID (checked against want, a hex digest, when given), its
 * architecture, variant and OS. */
static int take_config(struct archive *a, const char *name, const char *want,
                       const char *by, br_ociarchive_t *out, br_err_t *err)
{
    char *b = NULL;
    size_t n = 0;
    json_t *c = read_json(a, name, "its config", by, &b, &n, err);
    if (!c)
        return -1;
    int rc = -1;
    sha256_hex(b, n, out->id);
    if (want && strcmp(want, out->id) != 0)
        br_errf(err, EINVAL,
                "%s: its config does not match its digest (%.200s hashes to "
                "sha256:%s, not sha256:%s)",
                a->path, name, out->id, want);
    else if (!json_is_object(c))
        br_errf(err, EINVAL, "%s: its config %.200s is not a JSON object", a->path,
                name);
    else if (config_text(a, c, "architecture", 1, out->arch, sizeof(out->arch), err) ==
                 0 &&
             config_text(a, c, "os", 1, out->os, sizeof(out->os), err) == 0 &&
             config_text(a, c, "variant", 0, out->variant, sizeof(out->variant), err) ==
                 0)
        rc = 0;
    json_decref(c);
    free(b);
    return rc;
}

static int docker_archive(struct archive *a, br_ociarchive_t *out, br_err_t *err)
{
    json_t *m = read_json(a, "manifest.json", "its", "", NULL, NULL, err);
    if (!m)
        return -1;
    int rc = -1;
    json_t *img = json_array_get(m, 0), *layers = json_object_get(img, "Layers");
    const char *config = jstr(json_object_get(img, "Config"));
    if (!json_is_array(m)) {
        br_errf(err, EINVAL, "%s: its manifest.json is not a JSON list", a->path);
    } else if (json_array_size(m) != 1) {
        if (json_array_size(m) == 0)
            br_errf(err, EINVAL,
                    "%s holds no image: its manifest.json is an empty "
                    "list",
                    a->path);
        else
            br_errf(err, EINVAL, "%s holds %zu images: save one image per archive",
                    a->path, json_array_size(m));
    } else if (!config || !json_is_array(layers)) {
        br_errf(err, EINVAL, "%s: its manifest.json names no Config or no Layers",
                a->path);
    } else {
        /* "HEX.json" (podman, docker before 25) or "blobs/sha256/HEX" (docker 25) */
        const char *base = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
        size_t bl = strlen(base);
        char want[SHA256_HEX + 1];
        int named = 0;
        if (bl > 5 && strcmp(base + bl - 5, ".json") == 0)
            bl -= 5;
        if (is_hex64(base, bl)) {
            memcpy(want, base, SHA256_HEX);
            want[SHA256_HEX] = '\0';
            named = 1;
        }
        size_t i;
        json_t *l;
        rc = take_config(a, config, named ? want : NULL, " named by its manifest", out,
                         err);
        json_array_foreach (layers, i, l) {
            if (rc < 0)
                break;
            const char *ln = jstr(l);
            struct entry *e =
                ln ? find(a, ln, "layer", " named by its manifest", err) : NULL;
            if (!ln)
                rc = br_errf(err, EINVAL,
                             "%s: its manifest.json names a layer that "
                             "is not a string of text",
                             a->path);
            else if (!e)
                rc = -1;
            else
                out->layer_bytes += e->size;
        }
        out->layers = (int)json_array_size(layers);
        br_strlcpy(out->format, "docker-archive", sizeof(out->format));
    }
    json_decref(m);
    return rc;
}

/* A descriptor's "sha256:HEX" and size: the blob's name (blobs/sha256/HEX) and its
 * entry, its size checked. hex (SHA256_HEX + 1) may be NULL. */
static struct entry *blob(struct archive *a, json_t *desc, const char *what,
                          const char *by, char *hex, br_err_t *err)
{
    const char *d = jstr(json_object_get(desc, "digest"));
    json_t *sz = json_object_get(desc, "size");
    if (!d || !json_is_integer(sz))
        return br_errp(err, EINVAL, "%s: %s has no \"digest\" or no \"size\"", a->path,
                       what);
    if (strncmp(d, "sha256:", 7) != 0 || !is_hex64(d + 7, strlen(d + 7)))
        return br_errp(err, EINVAL, "%s: %s's digest '%.100s' is not sha256:HEX",
                       a->path, what, d);
    char name[32 + SHA256_HEX];
    snprintf(name, sizeof(name), "blobs/sha256/%s", d + 7);
    struct entry *e = find(a, name, what, by, err);
    if (e && e->size != json_integer_value(sz))
        return br_errp(err, EINVAL,
                       "%s: %s %s has %lld bytes, its descriptor says "
                       "%lld",
                       a->path, what, name, (long long)e->size,
                       (long long)json_integer_value(sz));
    if (e && hex)
        memcpy(hex, d + 7, SHA256_HEX + 1);
    return e;
}

static int is_index(json_t *o)
{
    const char *mt = json_string_value(json_object_get(o, "mediaType"));
    return (mt && (strcmp(mt, OCI_INDEX) == 0 || strcmp(mt, DOCKER_LIST) == 0)) ||
           json_object_get(o, "manifests");
}

static int oci_archive(struct archive *a, br_ociarchive_t *out, br_err_t *err)
{
    if (!has(a, "oci-layout"))
        return br_errf(err, EINVAL,
                       "%s is not an image archive: index.json but no "
                       "oci-layout (oci-archive)",
                       a->path);
    json_t *idx = read_json(a, "index.json", "its", "", NULL, NULL, err), *m = NULL;
    if (!idx)
        return -1;
    int rc = -1;
    json_t *ms = json_object_get(idx, "manifests"), *desc = json_array_get(ms, 0);
    char *b = NULL, mhex[SHA256_HEX + 1], chex[SHA256_HEX + 1], got[SHA256_HEX + 1];
    size_t n = 0;
    struct entry *e;
    if (!json_is_array(ms)) {
        br_errf(err, EINVAL, "%s: its index.json has no \"manifests\" list", a->path);
    } else if (json_array_size(ms) != 1) {
        if (json_array_size(ms) == 0)
            br_errf(err, EINVAL, "%s holds no image: its index.json lists no manifest",
                    a->path);
        else
            br_errf(err, EINVAL,
                    "%s holds %zu images (an index of several "
                    "architectures?): save one image per archive",
                    a->path, json_array_size(ms));
    } else if (is_index(desc)) {
        br_errf(err, EINVAL,
                "%s holds an index of images where one image's manifest "
                "should be: save one image per archive",
                a->path);
    } else if ((e = blob(a, desc, "its manifest", " named by its index.json", mhex,
                         err)) &&
               (b = read_small(a, e, "its manifest", &n, err))) {
        json_error_t je;
        json_t *cfg, *layers;
        size_t i;
        sha256_hex(b, n, got);
        m = json_loadb(b, n, 0, &je);
        if (strcmp(got, mhex) != 0) {
            br_errf(err, EINVAL, "%s: its manifest does not match its digest", a->path);
        } else if (!json_is_object(m)) {
            br_errf(err, EINVAL,
                    "%s: its manifest blobs/sha256/%s is not a JSON "
                    "object",
                    a->path, mhex);
        } else if (is_index(m)) {
            size_t k = json_array_size(json_object_get(m, "manifests"));
            if (k != 1)
                br_errf(err, EINVAL,
                        "%s holds %zu images (an index of several "
                        "architectures?): save one image per archive",
                        a->path, k);
            else
                br_errf(err, EINVAL,
                        "%s holds an index of images where one image's "
                        "manifest should be: save one image per archive",
                        a->path);
        } else if (!json_is_object(cfg = json_object_get(m, "config")) ||
                   !json_is_array(layers = json_object_get(m, "layers"))) {
            br_errf(err, EINVAL, "%s: its manifest has no \"config\" or no \"layers\"",
                    a->path);
        } else if ((e = blob(a, cfg, "its config", " named by its manifest", chex,
                             err))) {
            char name[32 + SHA256_HEX];
            snprintf(name, sizeof(name), "blobs/sha256/%s", chex);
            rc = take_config(a, name, chex, " named by its manifest", out, err);
            json_t *l;
            json_array_foreach (layers, i, l) {
                if (rc < 0)
                    break;
                if (!(e = blob(a, l, "layer", " named by its manifest", NULL, err)))
                    rc = -1;
                else
                    out->layer_bytes += e->size;
            }
            out->layers = (int)json_array_size(layers);
            br_strlcpy(out->format, "oci-archive", sizeof(out->format));
        }
    }
    free(b);
    json_decref(m);
    json_decref(idx);
    return rc;
}

int br_ociarchive_read(const char *path, br_ociarchive_t *out, br_err_t *err)
{
    struct archive a = {.path = path, .fd = -1};
    struct stat st;
    int rc = -1;
    memset(out, 0, sizeof(*out));
    a.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (a.fd < 0)
        return br_errf(err, errno, "cannot open %s: %s", path, strerror(errno));
    if (fstat(a.fd, &st) < 0) {
        br_errf(err, errno, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        br_errf(err, EINVAL, "%s is not an image archive (not a file)", path);
        goto done;
    }
    a.bytes = st.st_size;
    if (walk(&a, err) < 0)
        goto done;
    if (a.n > 1)
        qsort(a.e, a.n, sizeof(*a.e), by_name);
    if (has(&a, "manifest.json"))
        rc = docker_archive(&a, out, err);
    else if (has(&a, "index.json"))
        rc = oci_archive(&a, out, err);
    else
        br_errf(err, EINVAL,
                "%s is not an image archive: no manifest.json "
                "(docker-archive) nor index.json (oci-archive)",
                path);
    out->bytes = a.bytes;
done:
    for (size_t i = 0; i < a.n; i++) {
        free(a.e[i].name);
        free(a.e[i].link);
    }
    free(a.e);
    close(a.fd);
    if (rc < 0)
        memset(out, 0, sizeof(*out));
    return rc;
}

/* ---- machines ---- */

static const struct {
    const char *machine, *arch;
} machines[] = {
    {"x86_64", "amd64"},
    {"amd64", "amd64"},
    {"aarch64", "arm64"},
    {"arm64", "arm64"},
    {"armv8l", "arm"},
    {"armv7l", "arm"},
    {"armv7", "arm"},
    {"armv6l", "arm"},
    {"armv5tel", "arm"},
    {"armv5tejl", "arm"},
    {"arm", "arm"},
    {"riscv64", "riscv64"},
    {"ppc64le", "ppc64le"},
    {"s390x", "s390x"},
    {"i686", "386"},
    {"i586", "386"},
    {"i486", "386"},
    {"i386", "386"},
    {"loongarch64", "loong64"},
    {"mips64", "mips64"},
    {"ppc64", "ppc64"},
};

const char *br_ociarchive_arch_of_machine(const char *machine)
{
    for (size_t i = 0; machine && i < sizeof(machines) / sizeof(*machines); i++)
        if (strcmp(machine, machines[i].machine) == 0)
            return machines[i].arch;
    return machine;
}

/* An arm machine's level from uname -m ("armv7l": 7; "armv8l": 8), an arm image's
 * from its variant ("v6": 6); 0 when none is said. */
static int arm_level(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] < '5' || s[n] > '9')
        return 0;
    return s[n] - '0';
}

int br_ociarchive_runs_on(const char *arch, const char *variant, const char *machine)
{
    if (!arch || !machine)
        return 0;
    if (!variant)
        variant = "";
    const char *m = br_ociarchive_arch_of_machine(machine);
    if (strcmp(arch, m) != 0)
        return 0;
    if (strcmp(arch, "arm") != 0 || !variant[0])
        return 1;
    int want = arm_level(variant, "v"), have = arm_level(machine, "armv");
    if (!want || strlen(variant) != 2)
        return 0;                           /* a variant of arm this does not know */
    return have ? want <= have : want <= 7; /* "arm": taken as armv7 */
}
