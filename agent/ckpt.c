/* ckpt.c - watches one attempt's checkpoint directory for complete checkpoints. */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define MAX_ENTRIES 1024     /* entries tracked in the directory */
#define MAX_FILES 20000      /* files summed for one entry's signature */
#define MAX_DEPTH 4          /* how deep an entry's signature looks */
#define RESCAN_BUSY_MS 200   /* while some entry is not complete yet */
#define RESCAN_IDLE_MS 1000  /* otherwise */
#define MIN_SCAN_GAP_MS 50   /* inotify wakes at most this often */

static const char *const markers[] = {"trainer_state.json", ".metadata"};

typedef struct {
    char name[NAME_MAX + 1];
    int64_t step;
    int64_t size, mtime_ms, files; /* signature at the last scan */
    int64_t quiet_since;           /* monotonic ms the signature last changed */
    int done;                      /* reported, or complete before we started */
    int seen;                      /* still there at this scan */
} entry_t;

struct br_ckpt {
    char dir[PATH_MAX];
    char pattern[256];
    char complete_file[NAME_MAX + 1];
    int64_t stable_ms;
    int ifd, wd;
    int64_t next_scan, last_scan;
    int64_t done_step; /* highest step counted (or there before we started) */
    entry_t *e;
    int n;
};

static void signature(const char *path, int depth, int64_t *size, int64_t *mtime,
                      int64_t *files);

int64_t br_ckpt_size(const char *path)
{
    int64_t size = 0, mtime = 0, files = 0;
    signature(path, 0, &size, &mtime, &files);
    return size;
}

int64_t br_ckpt_step(const char *name)
{
    const char *end = NULL, *start = NULL;
    for (const char *p = name; *p; p++) {
        if (*p >= '0' && *p <= '9') {
            if (!end || p != end)
                start = p;
            end = p + 1;
        }
    }
    if (!start || end - start > 18)
        return -1;
    int64_t v = 0;
    for (const char *p = start; p < end; p++)
        v = v * 10 + (*p - '0');
    return v;
}

/* Sum sizes and the newest mtime under path (bounded). */
static void signature(const char *path, int depth, int64_t *size, int64_t *mtime,
                      int64_t *files)
{
    struct stat st;
    if (lstat(path, &st) < 0 || *files >= MAX_FILES)
        return;
    int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (mt > *mtime)
        *mtime = mt;
    (*files)++;
    if (!S_ISDIR(st.st_mode)) {
        *size += st.st_size;
        return;
    }
    DIR *d = depth < MAX_DEPTH ? opendir(path) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < (int)sizeof(sub))
            signature(sub, depth + 1, size, mtime, files);
    }
    if (d)
        closedir(d);
}

static int has_file(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* Complete: the configured marker, else a known one, else quiet long enough. */
static int complete(const br_ckpt_t *w, const char *path, const entry_t *e, int isdir,
                    int64_t now)
{
    if (w->complete_file[0])
        return isdir && has_file(path, w->complete_file);
    for (size_t i = 0; isdir && i < sizeof(markers) / sizeof(markers[0]); i++)
        if (has_file(path, markers[i]))
            return 1;
    return now - e->quiet_since >= w->stable_ms;
}

static void watch_dir(br_ckpt_t *w)
{
    if (w->ifd >= 0 && w->wd < 0)
        w->wd = inotify_add_watch(w->ifd, w->dir,
                                  IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE |
                                      IN_ATTRIB | IN_MODIFY);
}

static entry_t *find_or_add(br_ckpt_t *w, const char *name, int64_t step, int64_t now)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return &w->e[i];
    if (w->n == MAX_ENTRIES)
        return NULL;
    entry_t *e = &w->e[w->n++];
    memset(e, 0, sizeof(*e));
    br_strlcpy(e->name, name, sizeof(e->name));
    e->step = step;
    e->size = e->mtime_ms = e->files = -1;
    e->quiet_since = now;
    return e;
}

/* Update one entry's signature; report it when it became complete. At the baseline
 * (fn NULL) nothing is reported: what is already there belongs to earlier attempts,
 * unless a marker is required and still missing (it may yet be completed). */
static void consider(br_ckpt_t *w, entry_t *e, int64_t now, br_ckpt_fn fn, void *arg)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", w->dir, e->name);
    if (stat(path, &st) < 0)
        return;
    e->seen = 1;
    int64_t size = 0, mtime = 0, files = 0;
    signature(path, 0, &size, &mtime, &files);
    if (size != e->size || mtime != e->mtime_ms || files != e->files) {
        e->size = size;
        e->mtime_ms = mtime;
        e->files = files;
        e->quiet_since = now;
    }
    if (!fn) {
        e->done = !w->complete_file[0] || complete(w, path, e, S_ISDIR(st.st_mode), now);
    } else if (!e->done && complete(w, path, e, S_ISDIR(st.st_mode), now)) {
        e->done = 1;
        fn(arg, path, e->step, e->size, e->mtime_ms);
    }
    if (e->done && e->step > w->done_step)
        w->done_step = e->step;
}

/* One pass over the directory. fn NULL: the baseline at start (mark, report none). */
static int scan(br_ckpt_t *w, int64_t now, br_ckpt_fn fn, void *arg)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return 0;
    watch_dir(w);
    for (int i = 0; i < w->n; i++)
        w->e[i].seen = 0;
    int pending = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fnmatch(w->pattern, de->d_name, FNM_PERIOD) != 0)
            continue;
        /* a step at or below one already counted can never be the newest: not
         * tracked, which also bounds what a long run's directory costs */
        int64_t step = br_ckpt_step(de->d_name);
        entry_t *e = step > w->done_step ? find_or_add(w, de->d_name, step, now) : NULL;
        if (!e)
            continue;
        consider(w, e, now, fn, arg);
        pending |= !e->done;
    }
    closedir(d);
    for (int i = 0; i < w->n; i++) /* forget entries that went away */
        if (!w->e[i].seen)
            w->e[i--] = w->e[--w->n];
    return pending;
}

br_ckpt_t *br_ckpt_new(const char *dir, const char *pattern, const char *complete_file,
                       int64_t stable_ms, br_err_t *err)
{
    if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX)
        return br_errp(err, EINVAL, "checkpoint dir must be an absolute path");
    br_ckpt_t *w = calloc(1, sizeof(*w));
    if (w)
        w->e = calloc(MAX_ENTRIES, sizeof(entry_t));
    if (!w || !w->e) {
        free(w);
        return br_errp(err, ENOMEM, "out of memory");
    }
    br_strlcpy(w->dir, dir, sizeof(w->dir));
    br_strlcpy(w->pattern, pattern && *pattern ? pattern : "*", sizeof(w->pattern));
    br_strlcpy(w->complete_file, complete_file ? complete_file : "",
               sizeof(w->complete_file));
    w->stable_ms = stable_ms;
    w->wd = -1;
    w->done_step = -1;
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC); /* -1: rescans only */
    scan(w, br_mono_ms(), NULL, NULL);
    return w;
}

void br_ckpt_destroy(br_ckpt_t **w)
{
    if (w && *w) {
        if ((*w)->ifd >= 0)
            close((*w)->ifd);
        free((*w)->e);
        free(*w);
        *w = NULL;
    }
}

int br_ckpt_fd(const br_ckpt_t *w)
{
    return w->ifd;
}

/* Drain inotify; 1 when something happened. A watch the kernel dropped (the
 * directory was removed) is forgotten, so the next scan adds it again. */
static int drain_events(br_ckpt_t *w)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int woken = 0;
    ssize_t n;
    while (w->ifd >= 0 && (n = read(w->ifd, buf, sizeof(buf))) > 0) {
        woken = 1;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->wd == w->wd && (ev->mask & IN_IGNORED))
                w->wd = -1;
            p += sizeof(*ev) + ev->len;
        }
    }
    return woken;
}

void br_ckpt_poll(br_ckpt_t *w, int64_t now_ms, br_ckpt_fn fn, void *arg)
{
    /* events bring the next scan forward, a burst of them still makes one scan */
    if (drain_events(w) && w->next_scan > w->last_scan + MIN_SCAN_GAP_MS)
        w->next_scan = w->last_scan + MIN_SCAN_GAP_MS;
    if (now_ms < w->next_scan)
        return;
    int pending = scan(w, now_ms, fn, arg);
    w->last_scan = now_ms;
    w->next_scan = now_ms + (pending ? RESCAN_BUSY_MS : RESCAN_IDLE_MS);
}
