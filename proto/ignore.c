/* ignore.c - git's ignore rules: its wildmatch, and pattern lists stacked by a walk. */
#include "ignore.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* --- wildmatch ------------------------------------------------------------------ */

/*
 * What matching the rest of a pattern against the rest of a text can say. Besides
 * yes and no, it can tell a `*` that tries later starts not to bother: STOP when no
 * later start can match (the text ran out under a literal), STOP_SEG when none can
 * within this path segment (a single `*` came to a slash). They only save time: a
 * `*` that went on trying would find nothing more.
 */
enum { M_YES, M_NO, M_STOP, M_STOP_SEG };

/* The POSIX class name of len bytes at s: 1 when c belongs to it, 0 when not,
 * -1 for a name that is none. */
static int in_class(const unsigned char *s, size_t len, unsigned char c)
{
    static const struct {
        const char *name;
        int (*is)(int);
    } classes[] = {
        {"alnum", isalnum}, {"alpha", isalpha}, {"blank", isblank}, {"cntrl", iscntrl},
        {"digit", isdigit}, {"graph", isgraph}, {"lower", islower}, {"print", isprint},
        {"punct", ispunct}, {"space", isspace}, {"upper", isupper}, {"xdigit", isxdigit},
    };
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
        if (strlen(classes[i].name) == len && memcmp(classes[i].name, s, len) == 0)
            return c < 128 && classes[i].is(c) ? 1 : 0;
    return -1;
}

/* The bracket expression whose first byte (after `[`) is at *pp: whether c is in
 * it; *pp is left on its closing `]`. -1 for one never closed or naming an unknown
 * class: such a pattern matches nothing. */
static int bracket(const unsigned char **pp, unsigned char c)
{
    const unsigned char *p = *pp;
    int negated = 0, in = 0;
    if (*p == '!' || *p == '^') {
        negated = 1;
        p++;
    }
    unsigned char prev = 0; /* the last single byte listed: where a range starts */
    int first = 1;          /* a `]` first in the list is itself listed */
    for (;; p++, first = 0) {
        unsigned char ch = *p;
        if (!ch)
            return -1;
        if (ch == ']' && !first)
            break;
        if (ch == '\\') {
            if (!(ch = *++p))
                return -1;
            in |= c == ch;
            prev = ch;
        } else if (ch == '-' && prev && p[1] && p[1] != ']') {
            unsigned char hi = *++p;
            if (hi == '\\' && !(hi = *++p))
                return -1;
            in |= c >= prev && c <= hi;
            prev = 0;
        } else if (ch == '[' && p[1] == ':') {
            const unsigned char *name = p + 2, *end = name;
            while (*end && *end != ']')
                end++;
            if (!*end)
                return -1;
            if (end == name || end[-1] != ':') { /* no ":]": a plain `[` */
                in |= c == '[';
                prev = '[';
                continue;
            }
            int k = in_class(name, (size_t)(end - name - 1), c);
            if (k < 0)
                return -1;
            in |= k;
            p = end;
            prev = 0;
        } else {
            in |= c == ch;
            prev = ch;
        }
    }
    *pp = p;
    return in != negated;
}

static int match_from(const unsigned char *start, const unsigned char *p,
                      const unsigned char *t, int pathname);

/* The `*`s at p (p's first byte is one), matched against t: start is where the
 * whole pattern starts (a `**` must begin it or follow a `/`). */
static int match_stars(const unsigned char *start, const unsigned char *p,
                       const unsigned char *t, int pathname)
{
    const unsigned char *before = p - 1;
    int stars = 0;
    while (*p == '*') {
        p++;
        stars++;
    }
    int any = !pathname; /* whether the stars may cross a `/` */
    if (pathname && stars > 1 && (before < start || *before == '/') &&
        (*p == '\0' || *p == '/' || (p[0] == '\\' && p[1] == '/'))) {
        any = 1;
        /* `**` then `/` may stand for no directory at all: a/(**)/b is a/b too */
        if (*p == '/' && match_from(start, p + 1, t, pathname) == M_YES)
            return M_YES;
    }
    if (*p == '\0') /* the stars end the pattern: they take the rest of the text */
        return any || !strchr((const char *)t, '/') ? M_YES : M_NO;
    if (!any && *p == '/') { /* one `*` then `/`: the rest of this segment */
        const char *slash = strchr((const char *)t, '/');
        return slash ? match_from(start, p, (const unsigned char *)slash, pathname)
                     : M_NO;
    }
    for (; *t; t++) {
        int m = match_from(start, p, t, pathname);
        if (m == M_YES || m == M_STOP || (m == M_STOP_SEG && !any))
            return m;
        if (m == M_NO && !any && *t == '/')
            return M_STOP_SEG;
    }
    return M_STOP;
}

static int match_from(const unsigned char *start, const unsigned char *p,
                      const unsigned char *t, int pathname)
{
    for (; *p; p++, t++) {
        if (*p == '*')
            return match_stars(start, p, t, pathname);
        if (!*t)
            return M_STOP;
        switch (*p) {
        case '?':
            if (pathname && *t == '/')
                return M_NO;
            break;
        case '[': {
            p++;
            int in = bracket(&p, *t);
            if (in < 0)
                return M_STOP;
            if (!in || (pathname && *t == '/'))
                return M_NO;
            break;
        }
        case '\\': /* the byte after it, literally; one at the very end: nothing */
            if (!p[1] || *++p != *t)
                return M_NO;
            break;
        default:
            if (*p != *t)
                return M_NO;
        }
    }
    return *t ? M_NO : M_YES;
}

int br_wildmatch(const char *pattern, const char *text, int pathname)
{
    const unsigned char *p = (const unsigned char *)pattern;
    return match_from(p, p, (const unsigned char *)text, pathname) == M_YES;
}

/* --- pattern lists --------------------------------------------------------------- */

typedef struct {
    char *pat;     /* without `!`, a trailing `/`, or (anchored) a leading `/` */
    int negate;    /* `!`: a match says "not ignored" */
    int dir_only;  /* a trailing `/`: only directories match */
    int base_name; /* no `/` at all: matched against the last component anywhere */
} pattern_t;

typedef struct {
    char *base; /* "" or a directory, no trailing slash */
    size_t base_len;
    int bramble;
    pattern_t *p;
    size_t n;
} list_t;

struct br_ignore {
    list_t *l;
    size_t n, cap;
};

br_ignore_t *br_ignore_new(br_err_t *err)
{
    br_ignore_t *ig = calloc(1, sizeof(*ig));
    return ig ? ig : br_errp(err, ENOMEM, "out of memory");
}

static void list_free(list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->p[i].pat);
    free(l->p);
    free(l->base);
}

void br_ignore_destroy(br_ignore_t **igp)
{
    if (!igp || !*igp)
        return;
    int saved = errno;
    br_ignore_pop_to(*igp, 0);
    free((*igp)->l);
    free(*igp);
    *igp = NULL;
    errno = saved;
}

size_t br_ignore_depth(const br_ignore_t *ig)
{
    return ig->n;
}

void br_ignore_pop_to(br_ignore_t *ig, size_t n)
{
    while (ig->n > n)
        list_free(&ig->l[--ig->n]);
}

/* One line of an ignore file (no newline) made a pattern: 1 added, 0 a line that
 * holds none (blank, a comment), -1 out of memory. */
static int add_line(list_t *l, size_t *cap, char *line, size_t len)
{
    if (len && line[len - 1] == '\r')
        len--;
    if (!len || line[0] == '#')
        return 0;
    size_t keep = 0; /* trailing spaces go, unless a `\` keeps one */
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '\\' && i + 1 < len)
            keep = ++i + 1;
        else if (line[i] != ' ')
            keep = i + 1;
    }
    len = keep;
    pattern_t pt = {0};
    if (len && line[0] == '!') {
        pt.negate = 1;
        line++;
        len--;
    }
    if (len && line[len - 1] == '/') {
        pt.dir_only = 1;
        len--;
    }
    if (!len)
        return 0;
    pt.base_name = memchr(line, '/', len) == NULL;
    if (!pt.base_name && line[0] == '/') {
        line++;
        len--;
    }
    if (l->n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        pattern_t *np = realloc(l->p, c * sizeof(*np));
        if (!np)
            return -1;
        l->p = np;
        *cap = c;
    }
    if (!(pt.pat = strndup(line, len)))
        return -1;
    l->p[l->n++] = pt;
    return 1;
}

int br_ignore_push(br_ignore_t *ig, const char *base, const char *text, size_t len,
                   int bramble, br_err_t *err)
{
    if (ig->n == ig->cap) {
        size_t c = ig->cap ? 2 * ig->cap : 16;
        list_t *nl = realloc(ig->l, c * sizeof(*nl));
        if (!nl)
            return br_errf(err, ENOMEM, "out of memory");
        ig->l = nl;
        ig->cap = c;
    }
    list_t l = {.bramble = bramble};
    size_t cap = 0;
    if (!(l.base = strdup(base)))
        return br_errf(err, ENOMEM, "out of memory");
    l.base_len = strlen(base);
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) { /* a byte order mark */
        text += 3;
        len -= 3;
    }
    char *copy = len ? malloc(len) : NULL;
    int rc = len && !copy ? -1 : 0;
    if (copy)
        memcpy(copy, text, len);
    for (size_t at = 0; rc >= 0 && at < len;) {
        char *nl = memchr(copy + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - copy) : len;
        rc = add_line(&l, &cap, copy + at, end - at);
        at = end + 1;
    }
    free(copy);
    if (rc < 0) {
        list_free(&l);
        return br_errf(err, ENOMEM, "out of memory");
    }
    ig->l[ig->n++] = l;
    return 0;
}

#define IGNORE_FILE_MAX (16 << 20)

int br_ignore_push_file(br_ignore_t *ig, const char *base, const char *path, int bramble,
                        br_err_t *err)
{
    size_t len = 0;
    br_err_t e = {0};
    char *text = br_read_file(path, IGNORE_FILE_MAX, &len, &e);
    if (!text && e.errnum != ENOENT && e.errnum != ENOTDIR)
        return br_errf(err, e.errnum, "%s", e.text);
    int rc = br_ignore_push(ig, base, text ? text : "", text ? len : 0, bramble, err);
    free(text);
    return rc;
}

/* What list l says of path: 1 ignored, 0 not, -1 nothing matches. */
static int list_match(const list_t *l, const char *path, const char *name, int is_dir)
{
    const char *rel = path;
    if (l->base_len) {
        if (strncmp(path, l->base, l->base_len) != 0 || path[l->base_len] != '/')
            return -1;
        rel = path + l->base_len + 1;
    }
    for (size_t i = l->n; i-- > 0;) {
        const pattern_t *pt = &l->p[i];
        if (pt->dir_only && !is_dir)
            continue;
        if (pt->base_name ? br_wildmatch(pt->pat, name, 0)
                          : br_wildmatch(pt->pat, rel, 1))
            return !pt->negate;
    }
    return -1;
}

int br_ignore_match(const br_ignore_t *ig, const char *path, int is_dir, int bramble_only)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    for (size_t i = ig->n; i-- > 0;) {
        if (bramble_only && !ig->l[i].bramble)
            continue;
        int m = list_match(&ig->l[i], path, name, is_dir);
        if (m >= 0)
            return m;
    }
    return 0;
}
