/* ckpt.c - watches one attempt's checkpoint directory for complete checkpoints. */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

/*
 * Cost bounds. The directory is the user's choice: it may be huge, slow (a network
 * file system) or a kernel tree. So
 *   - /proc, /sys and /dev (by path, and by file system type once opened, which
 *     catches a symlink into them) are never scanned;
 *   - a pass over the directory is spread over several polls: each poll spends at
 *     most SCAN_BUDGET units (a directory entry read, or a file stat'ed for an
 *     entry's signature) and the next one goes on where it stopped;
 *   - with br_ckpt_set_user, every scan runs as the job's user (fsid.h), so the
 *     agent lists and stats only what that user could.
 * The baseline at br_ckpt_new (what is there before the attempt starts) runs as the
 * agent, reads names only, and stops after BASELINE_BUDGET entries; a bigger
 * directory finishes its baseline in the following polls.
 */
#define SCAN_BUDGET 4096
#define BASELINE_BUDGET 20000

#define MAX_ENTRIES 1024     /* entries tracked in the directory */
#define MAX_FILES 20000      /* files summed for one entry's signature */
#define MAX_DEPTH 4          /* how deep an entry's signature looks */
#define RESCAN_BUSY_MS 200   /* while some entry is not complete yet */
#define RESCAN_IDLE_MS 1000  /* otherwise */
#define MIN_SCAN_GAP_MS 50   /* inotify wakes at most this often */
#define MARKER_SETTLE_MS 500 /* a marker no event said was closed counts once this old */

static const char *const markers[] = {"trainer_state.json", ".metadata"};

typedef struct {
    char name[NAME_MAX + 1];
    int64_t step;
    int64_t size, mtime_ms, files; /* signature at the last scan */
    int64_t quiet_since;           /* monotonic ms the signature last changed */
    int done;                      /* reported, or complete before we started */
    int seen;                      /* still there at this scan */
    int wd;                        /* inotify watch inside it while incomplete, or -1 */
    int marked;                    /* a marker was closed in it: consider it now */
} entry_t;

struct br_ckpt {
    br_fsid_t *fsid; /* whom to scan as; NULL: the agent itself */
    DIR *pass;       /* a pass over the directory in progress, or NULL */
    int baseline;    /* the pass in progress is the baseline: report nothing */
    int pending;     /* some entry of this pass is not complete yet */
    int refused;     /* the directory is in a kernel file system: not scanned */
    char dir[PATH_MAX];
    char pattern[256];
    char complete_file[NAME_MAX + 1];
    int learned; /* some entry has shown a known marker: one is required from now */
    int64_t stable_ms;
    int ifd, wd;
    int64_t next_scan, last_scan;
    int64_t done_step; /* highest step counted (or there before we started) */
    int64_t settle_by; /* br_ckpt_settle: the attempt ended; 0 before */
    int settled;       /* br_ckpt_settle said so: nothing more to look at */
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

void br_ckpt_signature(const char *path, int64_t *size, int64_t *mtime_ms,
                       int64_t *files)
{
    *size = *mtime_ms = *files = 0;
    signature(path, 0, size, mtime_ms, files);
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

/* 1 when path (a directory) holds a known marker; once one has, an entry without
 * one is never complete, however quiet: the layout has markers, and a torn
 * checkpoint of a writer that died must not count. */
static int learn(br_ckpt_t *w, const char *path)
{
    for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
        if (has_file(path, markers[i]))
            return w->learned = 1;
    return 0;
}

/* name in dir is there and written. A marker is created before it is written
 * (open, write, close: trainer_state.json is written so), so the moment it appears
 * it is empty: it counts once its writer closed it (closed: the entry's watch said
 * so), once it holds something (seen by a scan), or, empty (`touch DONE`), once it
 * has not changed for MARKER_SETTLE_MS. */
static int has_marker(const char *dir, const char *name, int closed, int64_t *mtime_ms)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    if (stat(p, &st) < 0)
        return 0;
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (mtime_ms)
        *mtime_ms = mtime;
    return closed || st.st_size > 0 || br_now_ms() - mtime >= MARKER_SETTLE_MS;
}

/* The written marker (has_marker) that makes the directory path complete: the
 * configured one, else a known one; its mtime into *mtime_ms (may be NULL). 1, or 0
 * when it has none. */
static int marked(br_ckpt_t *w, const char *path, int closed, int64_t *mtime_ms)
{
    if (w->complete_file[0])
        return has_marker(path, w->complete_file, closed, mtime_ms);
    if (learn(w, path))
        for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
            if (has_marker(path, markers[i], closed, mtime_ms))
                return 1;
    return 0;
}

/* Complete: the configured marker, else a known one (required once one was seen),
 * else quiet long enough; a marker written (has_marker). */
static int complete(br_ckpt_t *w, const char *path, const entry_t *e, int isdir,
                    int64_t now, int closed)
{
    if (w->complete_file[0] || (isdir && learn(w, path)))
        return isdir && marked(w, path, closed, NULL);
    return !w->learned && now - e->quiet_since >= w->stable_ms;
}

/* A marker's name: the configured one, else a known one. */
static int is_marker(const br_ckpt_t *w, const char *name)
{
    if (w->complete_file[0])
        return strcmp(name, w->complete_file) == 0;
    for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
        if (strcmp(name, markers[i]) == 0)
            return 1;
    return 0;
}

/* Watch inside an incomplete directory entry, so its marker is seen the moment it
 * is written (closed, or renamed into place), not at the next rescan (entries
 * that are symlinks go by rescans). */
static void watch_entry(br_ckpt_t *w, entry_t *e, const char *path)
{
    if (w->ifd >= 0 && e->wd < 0)
        e->wd = inotify_add_watch(
            w->ifd, path, IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW);
}

static void unwatch_entry(br_ckpt_t *w, entry_t *e)
{
    if (e->wd >= 0 && e->wd != w->wd) /* a watch on the dir itself is the dir's */
        inotify_rm_watch(w->ifd, e->wd);
    e->wd = -1;
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
    e->wd = -1;
    e->size = e->mtime_ms = e->files = -1;
    e->quiet_since = now;
    return e;
}

/* Update one entry's signature; report it when it became complete. At the baseline
 * (fn NULL) nothing is reported: what is already there belongs to earlier attempts,
 * unless a marker is required and still missing (it may yet be completed). */
static const char *beneath(const char *dir, const char *path);

/* An entry that is a symlink counts only when it leads to somewhere inside the
 * directory: one out of it is not this job's checkpoint. */
static int link_stays_inside(const br_ckpt_t *w, const char *path)
{
    char target[PATH_MAX], dir[PATH_MAX];
    return realpath(path, target) && realpath(w->dir, dir) && beneath(dir, target);
}

static void consider(br_ckpt_t *w, entry_t *e, int64_t now, br_ckpt_fn fn, void *arg)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", w->dir, e->name);
    if (lstat(path, &st) < 0 ||
        (S_ISLNK(st.st_mode) && (!link_stays_inside(w, path) || stat(path, &st) < 0)))
        return;
    e->seen = 1;
    int closed = e->marked;
    e->marked = 0;
    if (!fn) { /* the baseline: names and markers only, no signature (a marker there
                * is an earlier attempt's: written, whatever its age) */
        e->done =
            !w->complete_file[0] || complete(w, path, e, S_ISDIR(st.st_mode), now, 1);
        if (e->done && e->step > w->done_step)
            w->done_step = e->step;
        if (!e->done && S_ISDIR(st.st_mode))
            watch_entry(w, e, path);
        return;
    }
    if (!e->done && S_ISDIR(st.st_mode)) /* before the marker is looked for: no race */
        watch_entry(w, e, path);
    int64_t size = 0, mtime = 0, files = 0;
    signature(path, 0, &size, &mtime, &files);
    if (size != e->size || mtime != e->mtime_ms || files != e->files) {
        e->size = size;
        e->mtime_ms = mtime;
        e->files = files;
        e->quiet_since = now;
    }
    if (!e->done && complete(w, path, e, S_ISDIR(st.st_mode), now, closed)) {
        e->done = 1;
        fn(arg, path, e->step, e->size, e->mtime_ms);
    }
    if (e->done)
        unwatch_entry(w, e);
    if (e->done && e->step > w->done_step)
        w->done_step = e->step;
}

/* /proc, /sys, /dev or below (path text). */
static int kernel_path(const char *p)
{
    static const char *const roots[] = {"/proc", "/sys", "/dev"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
        size_t n = strlen(roots[i]);
        if (strncmp(p, roots[i], n) == 0 && (p[n] == '\0' || p[n] == '/'))
            return 1;
    }
    return 0;
}

/* Whether the open fd is in a kernel file system or (after symlinks) under /proc,
 * /sys or /dev. */
static int kernel_fd(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) == 0) {
        switch ((unsigned long)sf.f_type) {
        case PROC_SUPER_MAGIC: case SYSFS_MAGIC: case DEVPTS_SUPER_MAGIC:
        case CGROUP_SUPER_MAGIC: case CGROUP2_SUPER_MAGIC: case DEBUGFS_MAGIC:
        case SECURITYFS_MAGIC: case TRACEFS_MAGIC: case BPF_FS_MAGIC:
            return 1;
        default:
            break;
        }
    }
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    if (n <= 0)
        return 0;
    real[n] = '\0';
    return kernel_path(real);
}

/* Start a pass: open the directory (as the job user, when set). 0 when there is
 * nothing to scan. */
static int pass_open(br_ckpt_t *w)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return 0;
    if (kernel_fd(dirfd(d))) {
        if (!w->refused)
            fprintf(stderr, "bramble-agent: checkpoint dir %s is in /proc, /sys or /dev "
                            "(or a kernel file system): not watched\n", w->dir);
        w->refused = 1;
        closedir(d);
        return 0;
    }
    w->refused = 0;
    watch_dir(w);
    for (int i = 0; i < w->n; i++)
        w->e[i].seen = 0;
    w->pass = d;
    w->pending = 0;
    return 1;
}

/* Go on with the pass in progress for up to budget units. 1 when it is not over
 * yet, 0 when it is (w->pending then says whether some entry is incomplete). */
static int pass_step(br_ckpt_t *w, int64_t now, br_ckpt_fn fn, void *arg, int64_t budget)
{
    struct dirent *de;
    while (budget > 0 && (de = readdir(w->pass))) {
        budget--;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fnmatch(w->pattern, de->d_name, FNM_PERIOD) != 0)
            continue;
        if (w->baseline && !w->complete_file[0] && !w->learned) {
            /* earlier siblings teach which marker a complete checkpoint has */
            char path[PATH_MAX];
            if (snprintf(path, sizeof(path), "%s/%s", w->dir, de->d_name) <
                (int)sizeof(path))
                learn(w, path);
        }
        /* a step at or below one already counted can never be the newest: not
         * tracked, which also bounds what a long run's directory costs */
        int64_t step = br_ckpt_step(de->d_name);
        entry_t *e = step > w->done_step ? find_or_add(w, de->d_name, step, now) : NULL;
        if (!e)
            continue;
        consider(w, e, now, w->baseline ? NULL : fn, arg);
        budget -= e->files > 0 ? e->files : 0;
        w->pending |= !e->done;
    }
    if (budget <= 0)
        return 1;
    closedir(w->pass);
    w->pass = NULL;
    w->baseline = 0;
    for (int i = 0; i < w->n; i++) /* forget entries that went away */
        if (!w->e[i].seen) {
            unwatch_entry(w, &w->e[i]);
            w->e[i--] = w->e[--w->n];
        }
    return 0;
}

/* Some of a pass (a whole one when it fits in budget); 1 while one is in progress. */
static int scan(br_ckpt_t *w, int64_t now, br_ckpt_fn fn, void *arg, int64_t budget)
{
    if (!w->pass && !pass_open(w))
        return 0;
    return pass_step(w, now, fn, arg, budget);
}

br_ckpt_t *br_ckpt_new(const char *dir, const char *pattern, const char *complete_file,
                       int64_t stable_ms, br_err_t *err)
{
    if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX)
        return br_errp(err, EINVAL, "checkpoint dir must be an absolute path");
    if (kernel_path(dir))
        return br_errp(err, EINVAL, "checkpoint dir %s: /proc, /sys and /dev are not "
                                    "watched", dir);
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
    w->baseline = 1;
    if (scan(w, br_mono_ms(), NULL, NULL, BASELINE_BUDGET) == 0)
        w->baseline = 0; /* nothing there, or done: later passes report */
    return w;
}

void br_ckpt_destroy(br_ckpt_t **w)
{
    if (w && *w) {
        if ((*w)->ifd >= 0)
            close((*w)->ifd);
        if ((*w)->pass)
            closedir((*w)->pass);
        br_fsid_destroy(&(*w)->fsid);
        free((*w)->e);
        free(*w);
        *w = NULL;
    }
}

int br_ckpt_fd(const br_ckpt_t *w)
{
    return w->ifd;
}

/* One event on an entry's own watch: a marker written in it marks it (1). */
static int entry_event(br_ckpt_t *w, const struct inotify_event *ev)
{
    for (int i = 0; i < w->n; i++) {
        entry_t *e = &w->e[i];
        if (e->wd != ev->wd)
            continue;
        if (ev->mask & IN_IGNORED)
            e->wd = -1; /* removed: the kernel dropped the watch */
        else if (ev->len && !e->done && is_marker(w, ev->name))
            return e->marked = 1;
    }
    return 0;
}

/* Drain inotify; 1 when something happened in the directory itself, 2 when (also)
 * a marker appeared inside an entry. A watch the kernel dropped (the directory was
 * removed) is forgotten, so the next scan adds it again. */
static int drain_events(br_ckpt_t *w)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int woken = 0;
    ssize_t n;
    while (w->ifd >= 0 && (n = read(w->ifd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->wd == w->wd && (ev->mask & IN_IGNORED))
                w->wd = -1;
            if (ev->wd == w->wd || ev->wd < 0) /* the dir's own, or an overflow */
                woken |= 1;
            else if (entry_event(w, ev))
                woken |= 2;
            p += sizeof(*ev) + ev->len;
        }
    }
    return woken;
}

/* Entries whose marker just appeared, considered at once rather than at the next
 * scan: the report follows the marker by what inotify takes. */
static void consider_marked(br_ckpt_t *w, int64_t now, br_ckpt_fn fn, void *arg)
{
    br_err_t err;
    if (w->baseline || br_fsid_enter(w->fsid, &err) < 0)
        return; /* the next scan does it */
    for (int i = 0; i < w->n; i++)
        if (w->e[i].marked && !w->e[i].done)
            consider(w, &w->e[i], now, fn, arg);
    br_fsid_leave(w->fsid);
}

void br_ckpt_poll(br_ckpt_t *w, int64_t now_ms, br_ckpt_fn fn, void *arg)
{
    /* events bring the next scan forward, a burst of them still makes one scan */
    int woken = drain_events(w);
    if (woken & 2)
        consider_marked(w, now_ms, fn, arg);
    if ((woken & 1) && w->next_scan > w->last_scan + MIN_SCAN_GAP_MS)
        w->next_scan = w->last_scan + MIN_SCAN_GAP_MS;
    if (!w->pass && now_ms < w->next_scan)
        return;
    br_err_t err;
    if (br_fsid_enter(w->fsid, &err) < 0) {
        fprintf(stderr, "bramble-agent: checkpoint dir %s: %s\n", w->dir, err.text);
        w->next_scan = now_ms + RESCAN_IDLE_MS;
        return;
    }
    int more = scan(w, now_ms, fn, arg, SCAN_BUDGET);
    br_fsid_leave(w->fsid);
    if (more)
        return; /* the pass goes on at the next poll */
    w->last_scan = now_ms;
    w->next_scan = now_ms + (w->pending ? RESCAN_BUSY_MS : RESCAN_IDLE_MS);
}

/* A whole pass now, whatever the gap since the last one: the rest of a pass in
 * progress (it may have read past an entry before that entry was finished) and then
 * a fresh one. 0, or -1 when the job's user could not be taken on. */
static int full_pass(br_ckpt_t *w, int64_t now, br_ckpt_fn fn, void *arg)
{
    br_err_t err;
    if (br_fsid_enter(w->fsid, &err) < 0) {
        fprintf(stderr, "bramble-agent: checkpoint dir %s: %s\n", w->dir, err.text);
        return -1;
    }
    for (int fresh = 0; fresh < 2; fresh++) {
        if (fresh && !w->pass && !pass_open(w))
            break;
        while (w->pass && pass_step(w, now, fn, arg, SCAN_BUDGET))
            ;
    }
    br_fsid_leave(w->fsid);
    w->last_scan = now;
    w->next_scan = now + (w->pending ? RESCAN_BUSY_MS : RESCAN_IDLE_MS);
    return 0;
}

int br_ckpt_settle(br_ckpt_t *w, int64_t now_ms, int clean, br_ckpt_fn fn, void *arg)
{
    if (w->settled) /* (the exit waits for the hashing of what it found) */
        return 1;
    if (!w->settle_by) { /* the first call: look at everything now */
        /* a marker is needed (set, or learned): only an empty one may still settle */
        int64_t wait = w->complete_file[0] || w->learned || w->stable_ms < MARKER_SETTLE_MS
                           ? MARKER_SETTLE_MS
                           : w->stable_ms;
        w->settle_by = now_ms + (clean ? wait + MIN_SCAN_GAP_MS : 0);
        drain_events(w); /* markers closed meanwhile: the pass considers them */
        if (full_pass(w, now_ms, fn, arg) < 0)
            return w->settled = 1;
    } else if (now_ms >= w->settle_by) { /* the last look */
        full_pass(w, now_ms, fn, arg);
        return w->settled = 1;
    } else {
        br_ckpt_poll(w, now_ms, fn, arg);
    }
    return w->settled = w->pass == NULL && (!w->pending || now_ms >= w->settle_by);
}

int br_ckpt_set_user(br_ckpt_t *w, uid_t uid, gid_t gid, br_err_t *err)
{
    br_fsid_t *f = br_fsid_new(uid, gid, err);
    if (!f)
        return -1;
    br_fsid_destroy(&w->fsid);
    w->fsid = f;
    if (w->pass) { /* a pass the agent opened: start it again as the user */
        closedir(w->pass);
        w->pass = NULL;
    }
    return 0;
}

const br_fsid_t *br_ckpt_user(const br_ckpt_t *w)
{
    return w->fsid;
}

const char *br_ckpt_dir(const br_ckpt_t *w)
{
    return w->dir;
}

/* Entries br_ckpt_newer reads at most: a directory bigger than that is looked at
 * only in part (in the order readdir gives). */
#define NEWER_MAX_ENTRIES 100000

int br_ckpt_newer(const char *dir, const char *pattern, const char *complete_file,
                  int64_t above_step, int64_t after_ms, br_fsid_t *fsid,
                  br_ckpt_found_t *found, br_err_t *err)
{
    if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX || kernel_path(dir))
        return br_errf(err, EINVAL, "checkpoint dir must be an absolute path outside "
                                    "/proc, /sys and /dev");
    br_ckpt_t w = {.ifd = -1, .wd = -1}; /* the rules only: no watch, no entries */
    br_strlcpy(w.dir, dir, sizeof(w.dir));
    br_strlcpy(w.pattern, pattern && *pattern ? pattern : "*", sizeof(w.pattern));
    br_strlcpy(w.complete_file, complete_file ? complete_file : "",
               sizeof(w.complete_file));
    memset(found, 0, sizeof(*found));
    found->step = -1;
    if (br_fsid_enter(fsid, err) < 0)
        return -1;
    DIR *d = opendir(dir); /* not there, or not ours to read: nothing newer */
    if (d && kernel_fd(dirfd(d))) {
        closedir(d);
        d = NULL;
    }
    struct dirent *de;
    for (int n = 0; d && n < NEWER_MAX_ENTRIES && (de = readdir(d)); n++) {
        int64_t step = br_ckpt_step(de->d_name);
        char path[PATH_MAX];
        struct stat st;
        int64_t marker_ms = 0;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fnmatch(w.pattern, de->d_name, FNM_PERIOD) != 0 || step <= above_step ||
            step <= found->step ||
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
            continue;
        if (lstat(path, &st) < 0 ||
            (S_ISLNK(st.st_mode) && (!link_stays_inside(&w, path) || stat(path, &st) < 0)) ||
            !S_ISDIR(st.st_mode))
            continue;
        /* a marker, written since after_ms: stability alone never does here */
        if (!marked(&w, path, 0, &marker_ms) || marker_ms < after_ms)
            continue;
        br_strlcpy(found->path, path, sizeof(found->path));
        found->step = step;
    }
    if (d)
        closedir(d);
    int64_t files = 0;
    if (found->step >= 0)
        br_ckpt_signature(found->path, &found->size, &found->mtime_ms, &files);
    br_fsid_leave(fsid);
    return found->step >= 0;
}

static long sys_openat2(int dfd, const char *path, const struct open_how *how)
{
    return syscall(SYS_openat2, dfd, path, how, sizeof(*how));
}

/* path relative to dir when path names something strictly inside it (by text),
 * else NULL. */
static const char *beneath(const char *dir, const char *path)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n == 1) /* "/" */
        return path[0] == '/' && path[1] ? path + 1 : NULL;
    if (strncmp(path, dir, n) != 0 || path[n] != '/' || !path[n + 1])
        return NULL;
    return path + n + 1;
}

/* Open path (with flags) inside dir without leaving it, following symlinks only
 * while they stay beneath it; or, without dir, as it is. */
static int open_checked(const char *dir, const char *path, int flags, br_err_t *err)
{
    if (!dir) {
        int fd = open(path, flags);
        return fd >= 0 ? fd : br_errf(err, errno, "checkpoint %s: %s", path,
                                      strerror(errno));
    }
    /* inside the dir as the spec names it, or as symlinks resolve it (what a job's
     * `bramble checkpoint` sends: realpath(3) of what it was given) */
    char real[PATH_MAX];
    const char *rel = beneath(dir, path);
    if (!rel && realpath(dir, real))
        rel = beneath(real, path);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (!rel)
        return br_errf(err, EACCES, "checkpoint %s is not inside the job's checkpoint "
                                    "dir %.*s", path, (int)n, dir);
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return br_errf(err, errno, "checkpoint dir %.*s: %s", (int)n, dir, strerror(errno));
    struct open_how how = {.flags = (uint64_t)flags,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    int fd = (int)sys_openat2(dfd, rel, &how);
    int e = errno;
    if (fd < 0 && e == ENOSYS) { /* before Linux 5.6: compare the real paths */
        char rd[PATH_MAX], rp[PATH_MAX];
        size_t k;
        e = EXDEV;
        if (!realpath(dir, rd) || !realpath(path, rp))
            e = errno;
        else if ((k = strlen(rd)) && strncmp(rp, rd, k) == 0 && (rp[k] == '/' || k == 1))
            e = (fd = open(rp, flags)) < 0 ? errno : 0;
    }
    close(dfd);
    if (fd >= 0)
        return fd;
    if (e == EXDEV || e == ELOOP)
        return br_errf(err, EXDEV, "checkpoint %s leads out of the checkpoint dir %.*s "
                                   "(a symlink out of it?)", path, (int)n, dir);
    return br_errf(err, e, "checkpoint %s: %s", path, strerror(e));
}

int br_ckpt_open(const char *dir, const char *path, int flags, br_err_t *err)
{
    int fd = open_checked(dir, path, flags | O_CLOEXEC, err);
    if (fd >= 0 && kernel_fd(fd)) {
        close(fd);
        return br_errf(err, EACCES, "checkpoint %s is in /proc, /sys or /dev", path);
    }
    return fd;
}

int br_ckpt_inspect(const char *dir, br_fsid_t *fsid, const char *path, int64_t *size,
                    int64_t *mtime_ms, br_err_t *err)
{
    if (br_fsid_enter(fsid, err) < 0)
        return -1;
    int rc = -1, fd = br_ckpt_open(dir, path, O_PATH, err);
    struct stat st;
    char link[64], real[PATH_MAX];
    ssize_t n = -1;
    if (fd < 0)
        goto out;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    if ((n = readlink(link, real, sizeof(real) - 1)) <= 0) {
        br_errf(err, EACCES, "checkpoint %s is in /proc, /sys or /dev", path);
        goto out;
    }
    real[n] = '\0';
    if (fstat(fd, &st) < 0) {
        br_errf(err, errno, "checkpoint %s: %s", path, strerror(errno));
        goto out;
    }
    *mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    *size = br_ckpt_size(real);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    br_fsid_leave(fsid);
    return rc;
}
