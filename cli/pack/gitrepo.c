/* gitrepo.c - a git work tree's top, index and excludes, read from its files. */
#include "gitrepo.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define GIT_FILE_MAX (1 << 20)      /* a config or .git file */
#define GIT_INDEX_MAX (1LL << 31)   /* an index file */

struct br_gitrepo {
    char top[PATH_MAX];
    char gitdir[PATH_MAX];
    char common[PATH_MAX]; /* where config and info/ are: gitdir, or a worktree's */
    char info_exclude[PATH_MAX];
    char *excludes_file;
    int sha256;
    char **paths; /* tracked, sorted by bytes, no duplicates */
    size_t n;
};

/* --- finding the git dir ---------------------------------------------------------- */

/* path relative to base made absolute into out. */
static void resolve(const char *base, const char *path, char *out, size_t len)
{
    if (path[0] == '/')
        snprintf(out, len, "%s", path);
    else
        snprintf(out, len, "%s/%s", base, path);
}

/* The first line of the file at path, trailing whitespace gone; NULL when it cannot
 * be read. */
static char *first_line(const char *path)
{
    size_t len = 0;
    char *s = br_read_file(path, GIT_FILE_MAX, &len, NULL);
    if (!s)
        return NULL;
    s[strcspn(s, "\n")] = '\0';
    for (size_t n = strlen(s); n && isspace((unsigned char)s[n - 1]);)
        s[--n] = '\0';
    return s;
}

static int is_git_dir(const char *p)
{
    char head[PATH_MAX + 8];
    struct stat st;
    snprintf(head, sizeof(head), "%s/HEAD", p);
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode) && access(head, F_OK) == 0;
}

/* Whether dir holds a .git that makes it a work tree's top: its git dir into r. */
static int git_dir_at(br_gitrepo_t *r, const char *dir)
{
    char dotgit[PATH_MAX];
    struct stat st;
    if (snprintf(dotgit, sizeof(dotgit), "%s/.git", dir) >= (int)sizeof(dotgit) ||
        lstat(dotgit, &st) < 0)
        return 0;
    if (S_ISDIR(st.st_mode)) {
        if (!is_git_dir(dotgit))
            return 0;
        snprintf(r->gitdir, sizeof(r->gitdir), "%s", dotgit);
    } else if (S_ISREG(st.st_mode)) { /* "gitdir: PATH" (a worktree, a submodule) */
        char *line = first_line(dotgit);
        int ok = line && strncmp(line, "gitdir: ", 8) == 0;
        if (ok)
            resolve(dir, line + 8, r->gitdir, sizeof(r->gitdir));
        free(line);
        if (!ok || !is_git_dir(r->gitdir))
            return 0;
    } else
        return 0;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/commondir", r->gitdir);
    char *common = first_line(path);
    if (common && *common)
        resolve(r->gitdir, common, r->common, sizeof(r->common));
    else
        snprintf(r->common, sizeof(r->common), "%s", r->gitdir);
    free(common);
    snprintf(r->top, sizeof(r->top), "%s", dir);
    return 1;
}

/* --- config ------------------------------------------------------------------------ */

/* A config value starting at *pp (after `=`), unquoted and unescaped into out; *pp
 * is left after its line. */
static void config_value(const char **pp, char *out, size_t len)
{
    const char *p = *pp;
    size_t n = 0, keep = 0;
    int quoted = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    for (; *p && *p != '\n'; p++) {
        char c = *p;
        if (c == '"') {
            quoted = !quoted;
            continue;
        }
        if (!quoted && (c == '#' || c == ';'))
            break;
        if (c == '\\' && p[1]) {
            c = *++p;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'b' ? '\b' : c;
            if (c == '\n') /* a line that goes on */
                continue;
        } else if (!quoted && (c == ' ' || c == '\t')) {
            if (n + 1 < len)
                out[n++] = c;
            continue;
        }
        if (n + 1 < len)
            out[n++] = c;
        keep = n;
    }
    out[keep < len ? keep : len - 1] = '\0';
    while (*p && *p != '\n')
        p++;
    *pp = p;
}

/* Read core.excludesFile and extensions.objectFormat from one config file. */
static void read_config(br_gitrepo_t *r, const char *path)
{
    size_t len = 0;
    char *text = br_read_file(path, GIT_FILE_MAX, &len, NULL);
    if (!text)
        return;
    char section[64] = "";
    for (const char *p = text; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (*p == '[') {
            size_t n = 0;
            for (p++; *p && *p != ']' && *p != '\n'; p++)
                if (n + 1 < sizeof(section))
                    section[n++] = (char)tolower((unsigned char)*p);
            section[n] = '\0';
        } else if (isalpha((unsigned char)*p)) {
            char key[64];
            size_t n = 0;
            for (; isalnum((unsigned char)*p) || *p == '-'; p++)
                if (n + 1 < sizeof(key))
                    key[n++] = (char)tolower((unsigned char)*p);
            key[n] = '\0';
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p != '=')
                continue; /* a key with no value: true, and no key wanted here */
            p++;
            char value[PATH_MAX];
            config_value(&p, value, sizeof(value));
            if (strcmp(section, "core") == 0 && strcmp(key, "excludesfile") == 0) {
                char *v = NULL;
                const char *home = getenv("HOME");
                if (strncmp(value, "~/", 2) == 0 && home) {
                    if (asprintf(&v, "%s/%s", home, value + 2) < 0)
                        v = NULL;
                } else
                    v = strdup(value);
                if (v) {
                    free(r->excludes_file);
                    r->excludes_file = v;
                }
            } else if (strcmp(section, "extensions") == 0 &&
                       strcmp(key, "objectformat") == 0)
                r->sha256 = strcasecmp(value, "sha256") == 0;
        }
        while (*p && *p != '\n') /* the rest of the line: a comment, or unread */
            p++;
    }
    free(text);
}

/* The config files git reads, in its order (a later one wins). */
static void read_configs(br_gitrepo_t *r)
{
    const char *home = getenv("HOME"), *xdg = getenv("XDG_CONFIG_HOME");
    const char *global = getenv("GIT_CONFIG_GLOBAL");
    char path[PATH_MAX + 32];
    if (!getenv("GIT_CONFIG_NOSYSTEM"))
        read_config(r, getenv("GIT_CONFIG_SYSTEM") ? getenv("GIT_CONFIG_SYSTEM")
                                                   : "/etc/gitconfig");
    if (global)
        read_config(r, global);
    else {
        if (xdg && *xdg) {
            snprintf(path, sizeof(path), "%s/git/config", xdg);
            read_config(r, path);
        } else if (home) {
            snprintf(path, sizeof(path), "%s/.config/git/config", home);
            read_config(r, path);
        }
        if (home) {
            snprintf(path, sizeof(path), "%s/.gitconfig", home);
            read_config(r, path);
        }
    }
    snprintf(path, sizeof(path), "%s/config", r->common);
    read_config(r, path);
    if (!r->excludes_file) { /* git's default */
        char *v = NULL;
        if (xdg && *xdg ? asprintf(&v, "%s/git/ignore", xdg) < 0
                        : home && asprintf(&v, "%s/.config/git/ignore", home) < 0)
            v = NULL;
        r->excludes_file = v;
    }
}

/* --- the index --------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* git's offset varint (index format 4): the bytes to drop from the last path. */
static int varint(const unsigned char **pp, const unsigned char *end, uint64_t *v)
{
    const unsigned char *p = *pp;
    if (p >= end)
        return -1;
    unsigned char c = *p++;
    uint64_t val = c & 127;
    while (c & 128) {
        if (p >= end || val >= (UINT64_MAX >> 8))
            return -1;
        c = *p++;
        val = ((val + 1) << 7) | (c & 127);
    }
    *pp = p;
    *v = val;
    return 0;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_path(br_gitrepo_t *r, size_t *cap, const char *path, size_t len)
{
    if (r->n == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        char **np = realloc(r->paths, c * sizeof(*np));
        if (!np)
            return -1;
        r->paths = np;
        *cap = c;
    }
    if (!(r->paths[r->n] = strndup(path, len)))
        return -1;
    r->n++;
    return 0;
}

static int parse_index(br_gitrepo_t *r, const unsigned char *d, size_t len,
                       const char *file, br_err_t *err)
{
    if (len < 12 || memcmp(d, "DIRC", 4) != 0)
        return br_errf(err, EINVAL, "%s is not a git index", file);
    uint32_t version = be32(d + 4), count = be32(d + 8);
    if (version < 2 || version > 4)
        return br_errf(err, ENOTSUP, "%s: git index version %u is not one bramble reads",
                       file, version);
    size_t hash = r->sha256 ? 32 : 20, cap = 0;
    const unsigned char *p = d + 12, *end = d + len;
    char last[PATH_MAX] = "";
    size_t last_len = 0;
    for (uint32_t i = 0; i < count; i++) {
        const unsigned char *entry = p;
        size_t fixed = 40 + hash + 2;
        if ((size_t)(end - p) < fixed)
            return br_errf(err, EINVAL, "%s ends inside entry %u", file, i);
        uint32_t mode = be32(p + 24);
        unsigned flags = (unsigned)p[40 + hash] << 8 | p[40 + hash + 1];
        if (flags & 0x4000) {
            if (version < 3 || (size_t)(end - p) < fixed + 2)
                return br_errf(err, EINVAL, "%s: entry %u is damaged", file, i);
            fixed += 2;
        }
        p += fixed;
        size_t name_len;
        if (version == 4) {
            uint64_t drop;
            if (varint(&p, end, &drop) < 0 || drop > last_len)
                return br_errf(err, EINVAL, "%s: entry %u is damaged", file, i);
            const unsigned char *nul = memchr(p, '\0', (size_t)(end - p));
            if (!nul || (last_len - drop) + (size_t)(nul - p) >= sizeof(last))
                return br_errf(err, EINVAL, "%s: entry %u is damaged", file, i);
            last_len -= drop;
            memcpy(last + last_len, p, (size_t)(nul - p));
            last_len += (size_t)(nul - p);
            last[last_len] = '\0';
            p = nul + 1;
            name_len = last_len;
        } else {
            const unsigned char *nul = memchr(p, '\0', (size_t)(end - p));
            if (!nul || (size_t)(nul - p) >= sizeof(last))
                return br_errf(err, EINVAL, "%s: entry %u is damaged", file, i);
            name_len = (size_t)(nul - p);
            memcpy(last, p, name_len);
            last[name_len] = '\0';
            size_t size = (fixed + name_len + 8) & ~(size_t)7; /* padded with NULs */
            if ((size_t)(end - entry) < size)
                return br_errf(err, EINVAL, "%s ends inside entry %u", file, i);
            p = entry + size;
        }
        if ((mode & 0170000) == 0040000) /* a sparse index's directory */
            continue;
        if ((r->n && strcmp(r->paths[r->n - 1], last) == 0)) /* another merge stage */
            continue;
        if (add_path(r, &cap, last, name_len) < 0)
            return br_errf(err, ENOMEM, "out of memory");
    }
    if (r->n > 1) /* the index is sorted; sorted again in this program's byte order */
        qsort(r->paths, r->n, sizeof(*r->paths), by_text);
    return 0;
}

static int read_index(br_gitrepo_t *r, br_err_t *err)
{
    char path[PATH_MAX + 8];
    snprintf(path, sizeof(path), "%s/index", r->gitdir);
    size_t len = 0;
    br_err_t e = {0};
    unsigned char *d = (unsigned char *)br_read_file(path, (size_t)GIT_INDEX_MAX, &len, &e);
    if (!d)
        return e.errnum == ENOENT ? 0 : br_errf(err, e.errnum, "%s", e.text);
    int rc = parse_index(r, d, len, path, err);
    free(d);
    return rc;
}

/* --- the object -------------------------------------------------------------------- */

int br_gitrepo_open(const char *dir, br_gitrepo_t **repo, br_err_t *err)
{
    *repo = NULL;
    br_gitrepo_t *r = calloc(1, sizeof(*r));
    if (!r)
        return br_errf(err, ENOMEM, "out of memory");
    char at[PATH_MAX];
    snprintf(at, sizeof(at), "%s", dir);
    int found = 0;
    for (;;) {
        if ((found = git_dir_at(r, *at ? at : "/")))
            break;
        char *slash = strrchr(at, '/');
        if (!slash || !*at)
            break;
        *slash = '\0';
    }
    if (!found) {
        free(r);
        return 0;
    }
    if (!*r->top) /* the file system's root */
        snprintf(r->top, sizeof(r->top), "/");
    snprintf(r->info_exclude, sizeof(r->info_exclude), "%.*s/info/exclude",
             PATH_MAX - 16, r->common);
    read_configs(r);
    if (read_index(r, err) < 0) {
        br_gitrepo_destroy(&r);
        return -1;
    }
    *repo = r;
    return 1;
}

void br_gitrepo_destroy(br_gitrepo_t **rp)
{
    if (!rp || !*rp)
        return;
    int saved = errno;
    br_gitrepo_t *r = *rp;
    for (size_t i = 0; i < r->n; i++)
        free(r->paths[i]);
    free(r->paths);
    free(r->excludes_file);
    free(r);
    *rp = NULL;
    errno = saved;
}

const char *br_gitrepo_top(const br_gitrepo_t *r)
{
    return r->top;
}

const char *br_gitrepo_info_exclude(const br_gitrepo_t *r)
{
    return r->info_exclude;
}

const char *br_gitrepo_excludes_file(const br_gitrepo_t *r)
{
    return r->excludes_file;
}

size_t br_gitrepo_tracked(const br_gitrepo_t *r)
{
    return r->n;
}

/* The first tracked path not before key. */
static size_t lower_bound(const br_gitrepo_t *r, const char *key)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(r->paths[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int br_gitrepo_tracks(const br_gitrepo_t *r, const char *path)
{
    size_t i = lower_bound(r, path);
    return i < r->n && strcmp(r->paths[i], path) == 0;
}

int br_gitrepo_tracks_below(const br_gitrepo_t *r, const char *dir)
{
    if (!*dir)
        return r->n > 0;
    char key[PATH_MAX];
    int n = snprintf(key, sizeof(key), "%s/", dir);
    if (n < 0 || n >= (int)sizeof(key))
        return 0;
    size_t i = lower_bound(r, key);
    return i < r->n && strncmp(r->paths[i], key, (size_t)n) == 0;
}
