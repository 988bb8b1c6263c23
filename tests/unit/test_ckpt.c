/* test_ckpt.c - the checkpoint watcher (agent/ckpt.c) on real directories. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "err.h"
#include "util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define STABLE 2000       /* BR_CKPT_STABLE_MS, what the agent passes */
#define LONG_STABLE 60000 /* marker tests: far longer than any rescan interval */
#define MAX_SEEN 64

typedef struct {
    char path[PATH_MAX];
    int64_t step, size, mtime_ms;
} seen_t;

typedef struct {
    char root[64];      /* mkdtemp */
    char dir[PATH_MAX]; /* the watched directory, root/ckpt unless a test moves it */
    int64_t now;        /* the fake monotonic clock handed to br_ckpt_poll */
    br_ckpt_t *w;
    seen_t seen[MAX_SEEN];
    int n;
} fix_t;

/* ---- fixture and helpers ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->root, sizeof(f->root), "/tmp/test_ckpt.XXXXXX");
    if (!mkdtemp(f->root)) {
        free(f);
        return -1;
    }
    snprintf(f->dir, sizeof(f->dir), "%s/ckpt", f->root);
    if (mkdir(f->dir, 0755) < 0) {
        rm_tree(f->root);
        free(f);
        return -1;
    }
    /* the baseline in br_ckpt_new reads the real clock: start the fake one there */
    f->now = br_mono_ms();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    br_ckpt_destroy(&f->w);
    rm_tree(f->root);
    free(f);
    return 0;
}

static void on_ckpt(void *arg, const char *path, int64_t step, int64_t size,
                    int64_t mtime_ms)
{
    fix_t *f = arg;
    if (f->n == MAX_SEEN)
        fail_msg("more than %d checkpoints reported", MAX_SEEN);
    seen_t *s = &f->seen[f->n++];
    br_strlcpy(s->path, path, sizeof(s->path));
    s->step = step;
    s->size = size;
    s->mtime_ms = mtime_ms;
}

static void watch(fix_t *f, const char *pattern, const char *complete, int64_t stable)
{
    br_err_t err = {0};
    f->w = br_ckpt_new(f->dir, pattern, complete, stable, &err);
    if (!f->w)
        fail_msg("br_ckpt_new(%s): %s", f->dir, err.text);
}

/* Advance the fake clock by dt ms and poll. */
static void at(fix_t *f, int64_t dt)
{
    f->now += dt;
    br_ckpt_poll(f->w, f->now, on_ckpt, f);
}

/* Poll every step ms for ms in all. */
static void quiet_for(fix_t *f, int64_t ms, int64_t step)
{
    for (int64_t t = 0; t < ms; t += step)
        at(f, step);
}

static void path_of(const fix_t *f, const char *rel, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", f->dir, rel);
}

static void mk(const fix_t *f, const char *rel)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    if (mkdir(p, 0755) < 0)
        fail_msg("mkdir %s: %s", p, strerror(errno));
}

static void write_bytes(const fix_t *f, const char *rel, size_t bytes, int flags)
{
    char p[PATH_MAX], buf[4096];
    path_of(f, rel, p, sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
    if (fd < 0)
        fail_msg("open %s: %s", p, strerror(errno));
    memset(buf, 'x', sizeof(buf));
    while (bytes > 0) {
        size_t k = bytes < sizeof(buf) ? bytes : sizeof(buf);
        assert_int_equal(write(fd, buf, k), (ssize_t)k);
        bytes -= k;
    }
    assert_int_equal(close(fd), 0);
}

/* Create (or truncate) a file of that many bytes. */
static void put(const fix_t *f, const char *rel, size_t bytes)
{
    write_bytes(f, rel, bytes, O_TRUNC);
}

/* Append bytes to a file. */
static void add(const fix_t *f, const char *rel, size_t bytes)
{
    write_bytes(f, rel, bytes, O_APPEND);
}

static void rm_rel(const fix_t *f, const char *rel)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    rm_tree(p);
    assert_int_equal(access(p, F_OK), -1);
}

/* How often the entry rel was reported. */
static int reported(const fix_t *f, const char *rel)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    int k = 0;
    for (int i = 0; i < f->n; i++)
        k += strcmp(f->seen[i].path, p) == 0;
    return k;
}

static const seen_t *report_of(const fix_t *f, const char *rel)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->seen[i].path, p) == 0)
            return &f->seen[i];
    fail_msg("%s was not reported", p);
    return NULL;
}

/* ---- steps ---- */

static void test_step(void **state)
{
    static const struct {
        const char *name;
        int64_t step;
    } cases[] = {
        {"checkpoint-500", 500},
        {"epoch=3-step=1200.ckpt", 1200},
        {"checkpoint_7", 7},
        {"ckpt", -1},
        {"a1b22", 22},
        {"", -1},
        {"0", 0},
        {"checkpoint_0", 0},
        {"step-007", 7},
        {"checkpoint-500.tmp", 500},
        {"last.ckpt", -1},
        {"last-v1.ckpt", 1}, /* the last number wins, whatever it means */
        {"999999999999999999", 999999999999999999}, /* 18 digits */
        {"1234567890123456789", -1},                /* 19 digits */
        {"checkpoint-99999999999999999999999", -1}, /* 23 digits */
        {"step5-1234567890123456789", -1},          /* the last run counts */
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        int64_t got = br_ckpt_step(cases[i].name);
        if (got != cases[i].step)
            fail_msg("br_ckpt_step(\"%s\") = %lld, expected %lld", cases[i].name,
                     (long long)got, (long long)cases[i].step);
    }
}

/* ---- construction ---- */

static void test_new_refuses_relative_dir(void **state)
{
    br_err_t err = {0};
    assert_null(br_ckpt_new("ckpt", NULL, NULL, STABLE, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_true(err.text[0] != '\0');
    err = (br_err_t){0};
    assert_null(br_ckpt_new(NULL, NULL, NULL, STABLE, &err));
    assert_int_equal(err.errnum, EINVAL);
    br_ckpt_destroy(NULL); /* harmless */
}

static void test_fd(void **state)
{
    fix_t *f = *state;
    watch(f, NULL, NULL, STABLE);
    assert_true(br_ckpt_fd(f->w) >= 0); /* Linux: inotify */
    br_ckpt_destroy(&f->w);
    assert_null(f->w);
}

/* ---- Hugging Face Trainer: checkpoint-<step>/ with trainer_state.json ---- */

static void test_hf_marker(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", "trainer_state.json", STABLE);
    at(f, 0);
    mk(f, "checkpoint-500");
    put(f, "checkpoint-500/model.safetensors", 3000);
    put(f, "checkpoint-500/optimizer.pt", 1000);
    quiet_for(f, 3600 * 1000, 1000); /* an hour without change: still no marker */
    assert_int_equal(f->n, 0);

    put(f, "checkpoint-500/trainer_state.json", 20);
    at(f, 1000);
    assert_int_equal(f->n, 1);
    const seen_t *s = report_of(f, "checkpoint-500");
    assert_int_equal(s->step, 500);
    assert_int_equal(s->size, 4020);

    quiet_for(f, 10000, 500); /* exactly once */
    put(f, "checkpoint-500/rng_state.pth", 10);
    quiet_for(f, 10000, 500);
    assert_int_equal(f->n, 1);
}

/* A marker counts once it is written: the moment it is created (open for writing,
 * as Python's open("w") and Hugging Face do) it is empty, and a checkpoint counted
 * then has an empty trainer_state.json in its manifest and its copies. */
static void test_marker_counts_once_written(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", "trainer_state.json", STABLE);
    at(f, 0);
    mk(f, "checkpoint-9");
    put(f, "checkpoint-9/model.bin", 100);
    at(f, 1000); /* seen, and watched inside */
    char p[PATH_MAX];
    path_of(f, "checkpoint-9/trainer_state.json", p, sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    quiet_for(f, 2 * STABLE, 100); /* created, still empty and open: not yet */
    assert_int_equal(reported(f, "checkpoint-9"), 0);
    assert_int_equal(write(fd, "{\"global_step\": 9}", 19), 19);
    assert_int_equal(close(fd), 0);
    at(f, 1); /* closed: at once */
    assert_int_equal(reported(f, "checkpoint-9"), 1);
}

/* Without complete_file, trainer_state.json is a known marker: no stability wait. */
static void test_hf_autodetect(void **state)
{
    fix_t *f = *state;
    watch(f, NULL, NULL, LONG_STABLE);
    at(f, 0);
    mk(f, "checkpoint-700");
    put(f, "checkpoint-700/model.safetensors", 100);
    put(f, "checkpoint-700/trainer_state.json", 10);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-700"), 1);
    assert_int_equal(f->seen[0].step, 700);
    quiet_for(f, 5000, 1000);
    assert_int_equal(f->n, 1);
}

/* Documented: a known marker only speeds completion up; without complete_file a
 * directory that lacks it is still complete once quiet for stable_ms. */
static void test_known_marker_does_not_hold_back(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", NULL, STABLE);
    at(f, 0);
    mk(f, "checkpoint-100");
    put(f, "checkpoint-100/model.safetensors", 100);
    at(f, 1000);
    at(f, 900);
    assert_int_equal(f->n, 0);
    at(f, 1200);
    assert_int_equal(reported(f, "checkpoint-100"), 1);
}

/* complete_file is looked for inside the entry: a plain file never holds it. */
static void test_complete_file_needs_directory(void **state)
{
    fix_t *f = *state;
    watch(f, "*.ckpt", "trainer_state.json", STABLE);
    at(f, 0);
    put(f, "step=100.ckpt", 100);
    quiet_for(f, 20000, 1000);
    assert_int_equal(f->n, 0);
}

/* ---- PyTorch Lightning: *.ckpt files, by stability ---- */

static void test_lightning_stability(void **state)
{
    fix_t *f = *state;
    watch(f, "*.ckpt", NULL, STABLE);
    at(f, 0);
    put(f, "epoch=0-step=100.ckpt", 1000);
    at(f, 0); /* first seen now */
    assert_int_equal(f->n, 0);
    at(f, 1500);
    add(f, "epoch=0-step=100.ckpt", 500); /* still being written */
    at(f, 50); /* scans are at least 50 ms apart */
    assert_int_equal(f->n, 0);
    at(f, 1000);
    assert_int_equal(f->n, 0);
    at(f, 900); /* quiet 1900 ms since the change was seen */
    assert_int_equal(f->n, 0);
    at(f, 1000); /* quiet 2900 ms */
    assert_int_equal(f->n, 1);
    const seen_t *s = report_of(f, "epoch=0-step=100.ckpt");
    assert_int_equal(s->step, 100);
    assert_int_equal(s->size, 1500);
    quiet_for(f, 10000, 1000);
    assert_int_equal(f->n, 1);
}

/* A file written a little every second is never complete, however long it takes. */
static void test_lightning_never_while_changing(void **state)
{
    fix_t *f = *state;
    watch(f, "*.ckpt", NULL, STABLE);
    at(f, 0);
    put(f, "epoch=1-step=200.ckpt", 10);
    for (int i = 0; i < 30; i++) {
        at(f, 1000);
        add(f, "epoch=1-step=200.ckpt", 10);
        at(f, 0);
    }
    assert_int_equal(f->n, 0);
    quiet_for(f, 3000, 500);
    assert_int_equal(reported(f, "epoch=1-step=200.ckpt"), 1);
    assert_int_equal(f->seen[0].size, 310);
}

/* ---- torch.distributed.checkpoint: folders complete once .metadata exists ---- */

static void test_dcp_metadata(void **state)
{
    fix_t *f = *state;
    watch(f, NULL, NULL, LONG_STABLE);
    at(f, 0);
    mk(f, "step-300");
    put(f, "step-300/__0_0.distcp", 4096);
    at(f, 1000);
    put(f, "step-300/__1_0.distcp", 4096);
    at(f, 1000);
    assert_int_equal(f->n, 0);
    put(f, "step-300/.metadata", 64); /* written last by dcp.save */
    at(f, 1000);                      /* far less than stable_ms */
    assert_int_equal(reported(f, "step-300"), 1);
    assert_int_equal(f->seen[0].step, 300);
    assert_int_equal(f->seen[0].size, 4096 * 2 + 64);
    quiet_for(f, 120000, 5000);
    assert_int_equal(f->n, 1);
}

/* ---- Accelerate: checkpoint_<n>/ (automatic_checkpoint_naming), by stability ---- */

static void test_accelerate(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint_*", NULL, STABLE);
    at(f, 0);
    mk(f, "checkpoint_0");
    put(f, "checkpoint_0/model.safetensors", 2000);
    at(f, 0);
    at(f, 1000);
    put(f, "checkpoint_0/optimizer.bin", 1000);
    at(f, 1000);
    put(f, "checkpoint_0/random_states_0.pkl", 100);
    at(f, 1000);
    at(f, 1000);
    assert_int_equal(f->n, 0);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint_0"), 1);
    assert_int_equal(f->seen[0].step, 0); /* step 0 is a step */
    assert_int_equal(f->seen[0].size, 3100);

    mk(f, "checkpoint_1");
    put(f, "checkpoint_1/model.safetensors", 2000);
    at(f, 1000);
    assert_int_equal(f->n, 1);
    quiet_for(f, 3000, 1000);
    assert_int_equal(reported(f, "checkpoint_1"), 1);
    assert_int_equal(f->seen[1].step, 1);
    quiet_for(f, 5000, 1000);
    assert_int_equal(f->n, 2);
}

/* ---- pattern ---- */

static void test_pattern(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", NULL, STABLE);
    at(f, 0);
    mk(f, "checkpoint-50");
    mk(f, "runs-20");
    mk(f, "tmp-checkpoint-30");
    mk(f, "checkpoint-40");
    put(f, "checkpoint-40/.metadata", 1);
    put(f, "other-50.ckpt", 1);
    at(f, 1000);
    put(f, "checkpoint-50/.metadata", 1); /* 40 had one: 50 needs one too */
    quiet_for(f, 5000, 1000);
    assert_int_equal(f->n, 2);
    assert_int_equal(reported(f, "checkpoint-50"), 1);
    assert_int_equal(reported(f, "checkpoint-40"), 1);
}

/* "*" (also NULL or ""): everything with a number, but not hidden names. */
static void test_pattern_default_skips_hidden(void **state)
{
    static const char *const patterns[] = {NULL, "", "*"};
    fix_t *f = *state;
    for (size_t i = 0; i < NELEM(patterns); i++) {
        f->n = 0;
        rm_tree(f->dir);
        assert_int_equal(mkdir(f->dir, 0755), 0);
        watch(f, patterns[i], NULL, STABLE);
        at(f, 0);
        put(f, "ckpt-30.pt", 10);
        put(f, ".ckpt-40.pt.tmp", 10);
        mk(f, ".tmp-50");
        put(f, ".tmp-50/.metadata", 1);
        quiet_for(f, 5000, 1000);
        assert_int_equal(f->n, 1);
        assert_int_equal(reported(f, "ckpt-30.pt"), 1);
        br_ckpt_destroy(&f->w);
    }
}

static void test_pattern_suffix(void **state)
{
    fix_t *f = *state;
    watch(f, "*.ckpt", NULL, STABLE);
    at(f, 0);
    put(f, "step=50.ckpt", 10);
    put(f, "step=60.ckpt.tmp", 10);
    put(f, "step=70.pt", 10);
    quiet_for(f, 5000, 1000);
    assert_int_equal(f->n, 1);
    assert_int_equal(reported(f, "step=50.ckpt"), 1);
}

/* ---- names without a number ---- */

static void test_no_number_ignored(void **state)
{
    fix_t *f = *state;
    watch(f, NULL, NULL, STABLE);
    at(f, 0);
    put(f, "last.ckpt", 100);
    mk(f, "latest");
    put(f, "latest/trainer_state.json", 1);
    mk(f, "final");
    put(f, "final/.metadata", 1);
    quiet_for(f, 10000, 1000);
    assert_int_equal(f->n, 0);
}

/* ---- baseline: what is there before the attempt starts ---- */

static void test_baseline_not_reported(void **state)
{
    fix_t *f = *state;
    mk(f, "checkpoint-1");
    put(f, "checkpoint-1/model.bin", 10);
    mk(f, "checkpoint-2");
    put(f, "checkpoint-2/trainer_state.json", 10);
    put(f, "epoch=0-step=3.ckpt", 10);
    mk(f, "step-4");
    put(f, "step-4/.metadata", 10);
    watch(f, NULL, NULL, STABLE);
    quiet_for(f, 10000, 1000);
    put(f, "checkpoint-1/late.bin", 10); /* touched again: still not ours */
    quiet_for(f, 10000, 1000);
    assert_int_equal(f->n, 0);

    mk(f, "checkpoint-5");
    put(f, "checkpoint-5/model.bin", 10);
    put(f, "checkpoint-5/trainer_state.json", 10); /* earlier ones had markers */
    quiet_for(f, 3000, 500);
    assert_int_equal(f->n, 1);
    assert_int_equal(reported(f, "checkpoint-5"), 1);
}

/* With complete_file, an entry that lacked the marker at the baseline may still be
 * completed by this attempt; one that had it never counts. */
static void test_baseline_marker_missing(void **state)
{
    fix_t *f = *state;
    mk(f, "checkpoint-100");
    put(f, "checkpoint-100/model.bin", 10);
    put(f, "checkpoint-100/trainer_state.json", 10);
    mk(f, "checkpoint-200");
    put(f, "checkpoint-200/model.bin", 10);
    watch(f, "checkpoint-*", "trainer_state.json", STABLE);
    quiet_for(f, 30000, 1000);
    assert_int_equal(f->n, 0);

    put(f, "checkpoint-200/trainer_state.json", 10);
    at(f, 1000);
    assert_int_equal(f->n, 1);
    assert_int_equal(reported(f, "checkpoint-200"), 1);
    assert_int_equal(f->seen[0].step, 200);
    quiet_for(f, 10000, 1000);
    assert_int_equal(f->n, 1);
    assert_int_equal(reported(f, "checkpoint-100"), 0);
}

/* ---- the directory ---- */

static void test_dir_created_later(void **state)
{
    fix_t *f = *state;
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s/late", f->root);
    snprintf(f->dir, sizeof(f->dir), "%s/ckpt", parent);
    watch(f, "checkpoint-*", "trainer_state.json", STABLE);
    quiet_for(f, 5000, 1000);
    assert_int_equal(f->n, 0);

    assert_int_equal(mkdir(parent, 0755), 0);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    mk(f, "checkpoint-5");
    put(f, "checkpoint-5/trainer_state.json", 10);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-5"), 1);

    /* watched from now on: inotify wakes the next poll, before the rescan is due */
    mk(f, "checkpoint-6");
    put(f, "checkpoint-6/trainer_state.json", 10);
    at(f, 60); /* past the 50 ms gap between scans, far before a rescan is due */
    assert_int_equal(reported(f, "checkpoint-6"), 1);
    assert_int_equal(f->n, 2);
}

static void test_inotify_wakes(void **state)
{
    fix_t *f = *state;
    watch(f, NULL, NULL, LONG_STABLE);
    at(f, 0); /* scans; the next rescan is not due for a while */
    mk(f, "step-300");
    put(f, "step-300/.metadata", 10);
    at(f, 60); /* past the 50 ms gap between scans, far before a rescan is due */
    assert_int_equal(reported(f, "step-300"), 1);
}

/* The job empties its checkpoint dir by removing and re-creating it. */
static void test_dir_recreated(void **state)
{
    fix_t *f = *state;
    watch(f, NULL, NULL, LONG_STABLE);
    at(f, 0);
    rm_tree(f->dir);
    at(f, 1000);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    mk(f, "step-9");
    put(f, "step-9/.metadata", 10);
    at(f, 1000); /* the rescan finds it */
    assert_int_equal(reported(f, "step-9"), 1);

    /* and inotify still wakes it, as for the original directory */
    mk(f, "step-10");
    put(f, "step-10/.metadata", 10);
    at(f, 60); /* past the 50 ms gap between scans, far before a rescan is due */
    assert_int_equal(reported(f, "step-10"), 1);
}

/* ---- removal ---- */

static void test_removal(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", NULL, STABLE);
    at(f, 0);
    mk(f, "checkpoint-10");
    put(f, "checkpoint-10/.metadata", 1);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-10"), 1);

    /* steps at or below one already counted are not tracked: they can never be
     * the newest, and a long run's directory stays cheap */
    mk(f, "checkpoint-1");
    mk(f, "checkpoint-2");
    put(f, "checkpoint-1/.metadata", 1);
    put(f, "checkpoint-2/a", 2);
    quiet_for(f, 3000, 500);
    assert_int_equal(reported(f, "checkpoint-1"), 0);
    assert_int_equal(reported(f, "checkpoint-2"), 0);

    /* three pending above it, the first removed: the others are still tracked right */
    mk(f, "checkpoint-11");
    mk(f, "checkpoint-12");
    mk(f, "checkpoint-13");
    put(f, "checkpoint-11/a", 1);
    put(f, "checkpoint-12/a", 2);
    put(f, "checkpoint-13/a", 3);
    at(f, 1000);
    rm_rel(f, "checkpoint-11");
    rm_rel(f, "checkpoint-10");
    at(f, 1000);
    put(f, "checkpoint-12/.metadata", 1); /* markers are required: 10 had one */
    put(f, "checkpoint-13/.metadata", 1);
    at(f, 500);
    quiet_for(f, 2000, 500);
    assert_int_equal(reported(f, "checkpoint-11"), 0);
    assert_int_equal(reported(f, "checkpoint-12"), 1);
    assert_int_equal(reported(f, "checkpoint-13"), 1);
    assert_int_equal(report_of(f, "checkpoint-12")->size, 3);
    assert_int_equal(report_of(f, "checkpoint-13")->size, 4);
    assert_int_equal(f->n, 3);

    /* a new step after the removals */
    mk(f, "checkpoint-20");
    put(f, "checkpoint-20/.metadata", 1);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-20"), 1);
    assert_int_equal(report_of(f, "checkpoint-20")->step, 20);

    /* removed everything, then written again under an old, lower name: not newer
     * than what was counted, so not reported again; a higher one is */
    rm_rel(f, "checkpoint-12");
    rm_rel(f, "checkpoint-13");
    rm_rel(f, "checkpoint-20");
    at(f, 1000);
    mk(f, "checkpoint-10");
    put(f, "checkpoint-10/.metadata", 1);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-10"), 1);
    mk(f, "checkpoint-30");
    put(f, "checkpoint-30/.metadata", 1);
    quiet_for(f, 5000, 1000);
    assert_int_equal(reported(f, "checkpoint-30"), 1);
    assert_int_equal(f->n, 5);
}

/* ---- size and time ---- */

static int64_t mtime_ms_of(const char *p)
{
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    return (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
}

static void test_size_and_mtime(void **state)
{
    static const char *const parts[] = {
        "checkpoint-42",          "checkpoint-42/model.safetensors",
        "checkpoint-42/opt.pt",   "checkpoint-42/shards",
        "checkpoint-42/shards/0", "checkpoint-42/trainer_state.json",
    };
    fix_t *f = *state;
    watch(f, "checkpoint-*", "trainer_state.json", STABLE);
    at(f, 0);
    mk(f, "checkpoint-42");
    put(f, "checkpoint-42/model.safetensors", 100000);
    put(f, "checkpoint-42/opt.pt", 250);
    mk(f, "checkpoint-42/shards");
    put(f, "checkpoint-42/shards/0", 50);
    put(f, "checkpoint-42/trainer_state.json", 2);
    at(f, 1000);
    const seen_t *s = report_of(f, "checkpoint-42");
    assert_int_equal(s->size, 100000 + 250 + 50 + 2);
    int64_t newest = 0;
    for (size_t i = 0; i < NELEM(parts); i++) {
        char p[PATH_MAX];
        path_of(f, parts[i], p, sizeof(p));
        int64_t m = mtime_ms_of(p);
        newest = m > newest ? m : newest;
    }
    assert_int_equal(s->mtime_ms, newest);
}

/* ---- many checkpoints kept ---- */

/* A long run that keeps every checkpoint (HF save_total_limit unset): a new one is
 * reported however many older ones the directory holds. */
static void test_many_entries(void **state)
{
    fix_t *f = *state;
    for (int i = 1; i <= 1100; i++) {
        char name[64];
        snprintf(name, sizeof(name), "step=%d.ckpt", i * 10);
        put(f, name, 1);
    }
    watch(f, "*.ckpt", NULL, STABLE);
    at(f, 0);
    put(f, "step=20000.ckpt", 10);
    quiet_for(f, 3000, 500);
    assert_int_equal(reported(f, "step=20000.ckpt"), 1);
    assert_int_equal(f->n, 1);
}


/* ---- directories the watcher must not scan, and reported paths ---- */

static void test_refuses_kernel_dirs(void **state)
{
    (void)state;
    static const char *const bad[] = {"/proc", "/proc/self", "/sys", "/sys/fs", "/dev",
                                      "/dev/shm"};
    for (size_t i = 0; i < NELEM(bad); i++) {
        br_err_t err = {0};
        br_ckpt_t *w = br_ckpt_new(bad[i], NULL, NULL, STABLE, &err);
        if (w)
            fail_msg("%s was accepted", bad[i]);
        assert_non_null(strstr(err.text, "/proc, /sys and /dev"));
    }
}

/* A symlink into /proc is not followed by the scans: nothing is reported, at once. */
static void test_symlink_into_proc_not_scanned(void **state)
{
    fix_t *f = *state;
    snprintf(f->dir, sizeof(f->dir), "%s/link", f->root);
    assert_int_equal(symlink("/proc", f->dir), 0);
    int64_t t0 = br_mono_ms();
    watch(f, NULL, NULL, 1);
    quiet_for(f, 3000, 500);
    assert_int_equal(f->n, 0);
    assert_true(br_mono_ms() - t0 < 2000);
}

/* A baseline too big for one go goes on in the following polls, and still reports
 * nothing that was there before. */
static void test_big_baseline(void **state)
{
    fix_t *f = *state;
    for (int i = 1; i <= 21000; i++) {
        char name[64];
        snprintf(name, sizeof(name), "c-%d", i);
        put(f, name, 0);
    }
    watch(f, "c-*", NULL, STABLE);
    quiet_for(f, 3000, 500);
    assert_int_equal(f->n, 0);
    put(f, "c-30000", 1);
    quiet_for(f, 12000, 500); /* a pass takes a few polls here */
    assert_int_equal(reported(f, "c-30000"), 1);
    assert_int_equal(f->n, 1);
}

/* A symlink out of the directory is never a checkpoint; one inside it is. */
static void test_symlink_entries(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", NULL, STABLE);
    char p[PATH_MAX];
    path_of(f, "checkpoint-7", p, sizeof(p));
    assert_int_equal(symlink("/etc", p), 0);
    mk(f, "real-8");
    put(f, "real-8/w", 4);
    path_of(f, "checkpoint-8", p, sizeof(p));
    assert_int_equal(symlink("real-8", p), 0);
    quiet_for(f, 6000, 500);
    assert_int_equal(reported(f, "checkpoint-7"), 0);
    assert_int_equal(reported(f, "checkpoint-8"), 1);
}

static void test_inspect(void **state)
{
    fix_t *f = *state;
    char p[PATH_MAX], outside[PATH_MAX];
    br_err_t err = {0};
    int64_t size = -1, mtime = -1;
    mk(f, "checkpoint-1");
    put(f, "checkpoint-1/w", 10);
    path_of(f, "checkpoint-1", p, sizeof(p));
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, p, &size, &mtime, &err), 0);
    assert_int_equal(size, 10);
    assert_true(mtime > 0);
    /* no dir: any path */
    assert_int_equal(br_ckpt_inspect(NULL, NULL, p, &size, &mtime, &err), 0);
    /* outside the dir, or the dir itself */
    snprintf(outside, sizeof(outside), "%s/elsewhere", f->root);
    put(f, "../elsewhere", 3);
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, outside, &size, &mtime, &err), -1);
    assert_non_null(strstr(err.text, "not inside the job's checkpoint dir"));
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, f->dir, &size, &mtime, &err), -1);
    snprintf(outside, sizeof(outside), "%sx/checkpoint-1", f->dir);
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, outside, &size, &mtime, &err), -1);
    /* a symlink out of it */
    path_of(f, "checkpoint-2", p, sizeof(p));
    assert_int_equal(symlink("/etc", p), 0);
    path_of(f, "checkpoint-2/passwd", p, sizeof(p));
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, p, &size, &mtime, &err), -1);
    assert_int_equal(err.errnum, EXDEV);
    assert_non_null(strstr(err.text, "leads out of the checkpoint dir"));
    /* a symlink that stays inside is fine */
    path_of(f, "checkpoint-3", p, sizeof(p));
    assert_int_equal(symlink("checkpoint-1", p), 0);
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, p, &size, &mtime, &err), 0);
    assert_int_equal(size, 10);
    /* the dir named through a symlink: the resolved path counts as inside */
    char alias[PATH_MAX];
    snprintf(alias, sizeof(alias), "%s/alias", f->root);
    assert_int_equal(symlink(f->dir, alias), 0);
    path_of(f, "checkpoint-1", p, sizeof(p));
    assert_int_equal(br_ckpt_inspect(alias, NULL, p, &size, &mtime, &err), 0);
    snprintf(p, sizeof(p), "%s/checkpoint-1", alias);
    assert_int_equal(br_ckpt_inspect(alias, NULL, p, &size, &mtime, &err), 0);
    /* /proc never */
    assert_int_equal(br_ckpt_inspect(NULL, NULL, "/proc/self/status", &size, &mtime, &err), -1);
    assert_non_null(strstr(err.text, "/proc"));
    /* as another user: what it cannot reach is refused */
    if (geteuid() != 0)
        return;
    br_fsid_t *nobody = br_fsid_new(65534, 65534, &err);
    assert_non_null(nobody);
    assert_int_equal(chmod(f->root, 0755), 0);
    mk(f, "private");
    path_of(f, "private", p, sizeof(p));
    assert_int_equal(chmod(p, 0700), 0);
    put(f, "private/checkpoint-9", 5);
    path_of(f, "private/checkpoint-9", p, sizeof(p));
    assert_int_equal(br_ckpt_inspect(f->dir, nobody, p, &size, &mtime, &err), -1);
    assert_int_equal(err.errnum, EACCES);
    path_of(f, "checkpoint-1", p, sizeof(p));
    assert_int_equal(br_ckpt_inspect(f->dir, nobody, p, &size, &mtime, &err), 0);
    /* and the agent is itself again afterwards */
    path_of(f, "private/checkpoint-9", p, sizeof(p));
    assert_int_equal(br_ckpt_inspect(f->dir, NULL, p, &size, &mtime, &err), 0);
    br_fsid_destroy(&nobody);
}

/* ---- once a marker was seen, markers are required ---- */

/* The writer died in the middle of checkpoint-30: no trainer_state.json, quiet for
 * ever. Its siblings had the marker, so it never counts; once finished, it does. */
static void test_marker_learned(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", NULL, STABLE);
    at(f, 0);
    mk(f, "checkpoint-20");
    put(f, "checkpoint-20/model.safetensors", 100);
    put(f, "checkpoint-20/trainer_state.json", 10);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-20"), 1);

    mk(f, "checkpoint-30");
    put(f, "checkpoint-30/model.safetensors", 60); /* torn */
    quiet_for(f, 3600 * 1000, 1000);
    assert_int_equal(reported(f, "checkpoint-30"), 0);
    put(f, "checkpoint-30/trainer_state.json", 10);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-30"), 1);
}

/* The case: attempt 2 starts beside checkpoint-10 and -20 (both marked) of
 * attempt 1, and a torn checkpoint-30 it rewrites... or a torn checkpoint-40 of its
 * own: neither counts without the marker. */
static void test_marker_learned_from_earlier_attempt(void **state)
{
    fix_t *f = *state;
    mk(f, "checkpoint-10");
    put(f, "checkpoint-10/trainer_state.json", 10);
    mk(f, "checkpoint-20");
    put(f, "checkpoint-20/trainer_state.json", 10);
    mk(f, "checkpoint-30");
    put(f, "checkpoint-30/model.safetensors", 60);
    watch(f, "checkpoint-*", NULL, STABLE);
    mk(f, "checkpoint-40");
    put(f, "checkpoint-40/model.safetensors", 60);
    quiet_for(f, 60000, 1000);
    assert_int_equal(f->n, 0);
    put(f, "checkpoint-40/trainer_state.json", 10);
    at(f, 1000);
    assert_int_equal(reported(f, "checkpoint-40"), 1);
    assert_int_equal(f->n, 1);
}

/* A marker created inside a checkpoint directory is seen through inotify at once:
 * no rescan (0.2 s apart) and no 50 ms gap between scans is waited for. */
static void test_marker_inotify(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", "done", LONG_STABLE);
    at(f, 0);
    mk(f, "checkpoint-7");
    put(f, "checkpoint-7/weights.bin", 10);
    at(f, 60); /* a scan: the entry is tracked now, and incomplete */
    at(f, 60);
    assert_int_equal(f->n, 0);
    put(f, "checkpoint-7/done", 0);
    at(f, 1); /* 1 ms later */
    assert_int_equal(reported(f, "checkpoint-7"), 1);
}

/* ---- a resuming attempt's look for a newer checkpoint (br_ckpt_newer) ---- */

/* Set the modification time of rel to ago_ms before now. */
static void age(const fix_t *f, const char *rel, int64_t ago_ms)
{
    char p[PATH_MAX];
    path_of(f, rel, p, sizeof(p));
    int64_t t = br_now_ms() - ago_ms;
    struct timespec at = {t / 1000, (t % 1000) * 1000000}, ts[2] = {at, at};
    if (utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW) < 0)
        fail_msg("utimensat %s: %s", p, strerror(errno));
}

/* A checkpoint directory rel with a data file and, unless marker is NULL, that
 * marker (bytes long) written last. */
static void ckpt_dir(const fix_t *f, const char *rel, const char *marker, size_t bytes)
{
    char p[PATH_MAX];
    mk(f, rel);
    snprintf(p, sizeof(p), "%s/model.bin", rel);
    put(f, p, 100);
    if (marker) {
        snprintf(p, sizeof(p), "%s/%s", rel, marker);
        put(f, p, bytes);
    }
}

/* 1 with *got when br_ckpt_newer finds one above above, written since after_ms. */
static int newer(const fix_t *f, const char *pattern, const char *complete, int64_t above,
                 int64_t after_ms, br_ckpt_found_t *got)
{
    br_err_t err = {0};
    int rc = br_ckpt_newer(f->dir, pattern, complete, above, after_ms, NULL, got, &err);
    if (rc < 0)
        fail_msg("br_ckpt_newer(%s): %s", f->dir, err.text);
    return rc;
}

/* The newest complete one above the step it was given: not a torn one, not one
 * whose marker is older than after_ms (an older run's leftover), not one the
 * pattern leaves out, not a plain file. */
static void test_newer_complete_file(void **state)
{
    fix_t *f = *state;
    int64_t started = br_now_ms() - 10000; /* the previous attempt's start */
    ckpt_dir(f, "checkpoint-10", "DONE", 1);
    ckpt_dir(f, "checkpoint-20", "DONE", 1);
    ckpt_dir(f, "checkpoint-30", "DONE", 1);
    ckpt_dir(f, "checkpoint-40", NULL, 0); /* torn: its writer died before DONE */
    ckpt_dir(f, "checkpoint-90", "DONE", 1); /* an older run's */
    age(f, "checkpoint-90/DONE", 3600 * 1000);
    age(f, "checkpoint-90/model.bin", 3600 * 1000);
    ckpt_dir(f, "other-50", "DONE", 1);         /* not the pattern's */
    put(f, "checkpoint-60", 10);                /* a file cannot hold the marker */
    ckpt_dir(f, "checkpoint-70", "trainer_state.json", 10); /* not the marker named */
    br_ckpt_found_t got;
    assert_int_equal(newer(f, "checkpoint-*", "DONE", 20, started, &got), 1);
    char want[PATH_MAX];
    path_of(f, "checkpoint-30", want, sizeof(want));
    assert_string_equal(got.path, want);
    assert_int_equal(got.step, 30);
    assert_int_equal(got.size, 101);
    assert_true(got.mtime_ms >= started);
    /* nothing above 30 qualifies; none above 90 at all */
    assert_int_equal(newer(f, "checkpoint-*", "DONE", 30, started, &got), 0);
    assert_int_equal(got.step, -1);
    assert_int_equal(newer(f, "checkpoint-*", "DONE", 90, started, &got), 0);
    /* judged by time: with no previous start to go by, the older run's counts too */
    assert_int_equal(newer(f, "checkpoint-*", "DONE", 30, 0, &got), 1);
    assert_int_equal(got.step, 90);
    /* nothing was counted yet (-1): any step */
    assert_int_equal(newer(f, "checkpoint-*", "DONE", -1, started, &got), 1);
    assert_int_equal(got.step, 30);
}

/* Without complete_file: a known marker makes one complete; stability never does
 * here (a quiet directory without a marker may be a writer's last, torn one). */
static void test_newer_known_markers(void **state)
{
    fix_t *f = *state;
    int64_t started = br_now_ms() - 10000;
    ckpt_dir(f, "checkpoint-5", "trainer_state.json", 10);
    ckpt_dir(f, "checkpoint-6", ".metadata", 10);
    ckpt_dir(f, "checkpoint-9", NULL, 0);
    age(f, "checkpoint-9/model.bin", 60000); /* long quiet */
    br_ckpt_found_t got;
    assert_int_equal(newer(f, "checkpoint-*", NULL, -1, started, &got), 1);
    assert_int_equal(got.step, 6);
    assert_int_equal(newer(f, NULL, NULL, 6, started, &got), 0);
    /* a layout with no marker at all: nothing is ever taken */
    rm_rel(f, "checkpoint-5");
    rm_rel(f, "checkpoint-6");
    assert_int_equal(newer(f, "checkpoint-*", NULL, -1, 0, &got), 0);
}

/* A marker just created and still empty is not written yet (it may be opened and
 * not filled); one that holds something, or has stayed empty for a while, is. */
static void test_newer_marker_written(void **state)
{
    fix_t *f = *state;
    int64_t started = br_now_ms() - 10000;
    ckpt_dir(f, "checkpoint-1", "DONE", 0);
    age(f, "checkpoint-1/DONE", 5000); /* `touch DONE`, a while ago */
    ckpt_dir(f, "checkpoint-2", "DONE", 0); /* created this instant, empty */
    br_ckpt_found_t got;
    assert_int_equal(newer(f, "checkpoint-*", "DONE", -1, started, &got), 1);
    assert_int_equal(got.step, 1);
    put(f, "checkpoint-2/DONE", 3);
    assert_int_equal(newer(f, "checkpoint-*", "DONE", -1, started, &got), 1);
    assert_int_equal(got.step, 2);
}

/* An entry that is a symlink counts only when it stays inside the directory; one
 * whose marker was written before after_ms is an older run's, even when files in it
 * are newer (the previous attempt began to overwrite it and died). */
static void test_newer_links_and_old_markers(void **state)
{
    fix_t *f = *state;
    int64_t started = br_now_ms() - 10000;
    char out[PATH_MAX], link[PATH_MAX], in[PATH_MAX];
    snprintf(out, sizeof(out), "%s/elsewhere-8", f->root);
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(link, sizeof(link), "%s/DONE", out);
    int fd = open(link, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "1", 1), 1); /* written: complete but for where it is */
    assert_int_equal(close(fd), 0);
    path_of(f, "checkpoint-8", link, sizeof(link));
    assert_int_equal(symlink(out, link), 0);
    br_ckpt_found_t got;
    ckpt_dir(f, "checkpoint-3", "DONE", 1);
    assert_int_equal(newer(f, "checkpoint-*", "DONE", -1, 0, &got), 1);
    assert_int_equal(got.step, 3);
    ckpt_dir(f, "real-4", "DONE", 1);
    path_of(f, "real-4", in, sizeof(in));
    path_of(f, "checkpoint-4", link, sizeof(link));
    assert_int_equal(symlink(in, link), 0);
    assert_int_equal(newer(f, "checkpoint-*", "DONE", -1, 0, &got), 1);
    assert_int_equal(got.step, 4);
    ckpt_dir(f, "checkpoint-5", "DONE", 1);
    age(f, "checkpoint-5/DONE", 3600 * 1000);
    put(f, "checkpoint-5/model.bin", 200); /* rewritten now */
    assert_int_equal(newer(f, "checkpoint-*", "DONE", -1, started, &got), 1);
    assert_int_equal(got.step, 4);
}

/* A directory that is not there has nothing newer; a bad one is an error. */
static void test_newer_bad_dirs(void **state)
{
    fix_t *f = *state;
    br_ckpt_found_t got;
    br_err_t err = {0};
    char gone[PATH_MAX];
    snprintf(gone, sizeof(gone), "%s/not-there", f->root);
    assert_int_equal(br_ckpt_newer(gone, NULL, "DONE", -1, 0, NULL, &got, &err), 0);
    assert_int_equal(br_ckpt_newer("relative/dir", NULL, NULL, -1, 0, NULL, &got, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_ckpt_newer(NULL, NULL, NULL, -1, 0, NULL, &got, &err), -1);
    assert_int_equal(br_ckpt_newer("/proc/self", NULL, NULL, -1, 0, NULL, &got, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
}

/* ---- how soon a marker is reported ---- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The agent's loop as it runs with jobs: poll the inotify fd for at most 50 ms, then
 * br_ckpt_poll with the real clock. Measures the time from the marker's creation to
 * the report, for a checkpoint directory written a while before its marker. Printed,
 * not asserted: a loaded machine is slower. */
static void test_marker_report_delay(void **state)
{
    fix_t *f = *state;
    enum { ROUNDS = 20 };
    int64_t delay_us[ROUNDS];
    watch(f, "checkpoint-*", "trainer_state.json", STABLE);
    for (int r = 0; r < ROUNDS; r++) {
        char name[64], file[96];
        snprintf(name, sizeof(name), "checkpoint-%d", r + 1);
        mk(f, name);
        snprintf(file, sizeof(file), "%s/model.safetensors", name);
        put(f, file, 4096);
        /* the loop goes on for a while (a varied phase against the rescans) */
        int64_t until = br_mono_ms() + 300 + 37 * r % 200;
        while (br_mono_ms() < until) {
            struct pollfd p = {br_ckpt_fd(f->w), POLLIN, 0};
            poll(&p, 1, 50);
            br_ckpt_poll(f->w, br_mono_ms(), on_ckpt, f);
        }
        assert_int_equal(f->n, r);
        snprintf(file, sizeof(file), "%s/trainer_state.json", name);
        int64_t t0 = br_mono_us();
        put(f, file, 20);
        while (f->n == r && br_mono_us() - t0 < 5000000) {
            struct pollfd p = {br_ckpt_fd(f->w), POLLIN, 0};
            poll(&p, 1, 50);
            br_ckpt_poll(f->w, br_mono_ms(), on_ckpt, f);
        }
        assert_int_equal(f->n, r + 1);
        delay_us[r] = br_mono_us() - t0;
    }
    qsort(delay_us, ROUNDS, sizeof(delay_us[0]), cmp_i64);
    print_message("marker to report, %d rounds: median %.1f ms, max %.1f ms\n", ROUNDS,
                  (double)delay_us[ROUNDS / 2] / 1000.0,
                  (double)delay_us[ROUNDS - 1] / 1000.0);
}

/* br_ckpt_settle with clean, until it says nothing is left to wait for (at most
 * limit ms of the fake clock, step ms apart): how long that took. */
static int64_t settle(fix_t *f, int clean, int64_t step, int64_t limit)
{
    int64_t t0 = f->now;
    while (!br_ckpt_settle(f->w, f->now, clean, on_ckpt, f)) {
        if (f->now - t0 > limit)
            fail_msg("still settling after %lld ms", (long long)limit);
        f->now += step;
    }
    return f->now - t0;
}

/* A job that finishes a checkpoint and exits at once: the next scan is not due
 * yet, so polling alone does not see it; settling (before the exit is reported)
 * does, at once, whatever the exit. */
static void test_settle_counts_the_last_one(void **state)
{
    fix_t *f = *state;
    watch(f, "checkpoint-*", "DONE", STABLE);
    at(f, 0);
    mk(f, "checkpoint-3");
    put(f, "checkpoint-3/w.bin", 500);
    put(f, "checkpoint-3/DONE", 1);
    at(f, 1); /* the directory's event makes the next scan come 50 ms after the last */
    assert_int_equal(f->n, 0);
    assert_int_equal(settle(f, 0, 100, 0), 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(report_of(f, "checkpoint-3")->size, 501);
    assert_int_equal(settle(f, 0, 100, 0), 0); /* once */
    assert_int_equal(f->n, 1);
    mk(f, "checkpoint-4"); /* settled: nothing is looked at again */
    put(f, "checkpoint-4/DONE", 1);
    f->now += 5000;
    assert_int_equal(settle(f, 0, 100, 0), 0);
    assert_int_equal(f->n, 1);
}

/* Without a marker, an entry counts once quiet for stable_ms. After a clean exit
 * that quiet time is waited for, as if the job still ran; after a failure the exit
 * is not held for it (a crash may have torn it). */
static void test_settle_waits_quiet_time_after_clean_exit(void **state)
{
    fix_t *f = *state;
    watch(f, "step-*", NULL, STABLE);
    at(f, 0);
    mk(f, "step-7");
    put(f, "step-7/w.bin", 100);
    int64_t took = settle(f, 1, 100, 2 * STABLE);
    assert_true(took >= STABLE);
    assert_int_equal(f->n, 1);
    assert_int_equal(report_of(f, "step-7")->step, 7);
}

static void test_settle_after_failure_takes_only_complete(void **state)
{
    fix_t *f = *state;
    watch(f, "step-*", NULL, STABLE);
    at(f, 0);
    mk(f, "step-7");
    put(f, "step-7/w.bin", 100);
    assert_int_equal(settle(f, 0, 100, 0), 0);
    assert_int_equal(f->n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_new_refuses_relative_dir),
        cmocka_unit_test(test_refuses_kernel_dirs),
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_fd),
        T(test_hf_marker),
        T(test_marker_counts_once_written),
        T(test_hf_autodetect),
        T(test_known_marker_does_not_hold_back),
        T(test_complete_file_needs_directory),
        T(test_lightning_stability),
        T(test_lightning_never_while_changing),
        T(test_dcp_metadata),
        T(test_accelerate),
        T(test_pattern),
        T(test_pattern_default_skips_hidden),
        T(test_pattern_suffix),
        T(test_no_number_ignored),
        T(test_baseline_not_reported),
        T(test_baseline_marker_missing),
        T(test_dir_created_later),
        T(test_inotify_wakes),
        T(test_dir_recreated),
        T(test_removal),
        T(test_size_and_mtime),
        T(test_many_entries),
        T(test_symlink_into_proc_not_scanned),
        T(test_big_baseline),
        T(test_inspect),
        T(test_symlink_entries),
        T(test_marker_learned),
        T(test_marker_learned_from_earlier_attempt),
        T(test_marker_inotify),
        T(test_marker_report_delay),
        T(test_newer_complete_file),
        T(test_newer_known_markers),
        T(test_newer_marker_written),
        T(test_newer_links_and_old_markers),
        T(test_newer_bad_dirs),
        T(test_settle_counts_the_last_one),
        T(test_settle_waits_quiet_time_after_clean_exit),
        T(test_settle_after_failure_takes_only_complete),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
