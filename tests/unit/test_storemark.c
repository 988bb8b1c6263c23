/* test_storemark.c - the store's high-water mark, DIR/store.mark (storemark.h): a
 * missing mark is written at start; it follows the highest job and event ids after
 * each commit, in place and at one fixed width; a store that knows fewer ids than
 * the mark says (its WAL lost, an older copy put back) is refused with words that
 * say what was lost and how to go on, and the mark is left as it was, so the next
 * start is refused too; a mark that is not one is refused naming the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>

#include "store.h"
#include "storemark.h"
#include "util.h"

typedef struct {
    char dir[64];
    char db[128];
    char mark[128];
} world_t;

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    snprintf(w->dir, sizeof(w->dir), "/tmp/test_storemark.XXXXXX");
    if (!mkdtemp(w->dir))
        return -1;
    snprintf(w->db, sizeof(w->db), "%s/bramble.db", w->dir);
    snprintf(w->mark, sizeof(w->mark), "%s/store.mark", w->dir);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    br_rm_tree(AT_FDCWD, w->dir);
    free(w);
    return 0;
}

static br_store_t *open_store(const char *path)
{
    br_err_t err = {0};
    br_store_t *s = br_store_open(path, &err);
    if (!s)
        fail_msg("store %s: %s", path, err.text);
    return s;
}

static int64_t add_job(br_store_t *s, const char *name)
{
    br_err_t err = {0};
    json_t *job =
        json_pack("{s:s, s:s, s:s, s:s, s:{s:s}, s:s, s:I}", "name", name, "kind",
                  "job", "state", "pending", "owner", "ann", "spec", "command", "true",
                  "spec_yaml", "command: true\n", "submitted", (json_int_t)1000);
    int64_t id = br_store_job_add(s, job, &err);
    json_decref(job);
    if (id <= 0)
        fail_msg("job %s: %s", name, err.text);
    return id;
}

static int64_t add_event(br_store_t *s, int64_t job)
{
    br_err_t err = {0};
    int64_t id = br_store_event_add(s, 2000, job, NULL, "pending", "submitted", &err);
    if (id <= 0)
        fail_msg("event: %s", err.text);
    return id;
}

/* The mark's text (whole file), into buf. */
static const char *mark_text(const world_t *w, char *buf, size_t len)
{
    FILE *f = fopen(w->mark, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* What the mark says. */
static void mark_says(const world_t *w, long long *jobs, long long *events)
{
    char text[128];
    mark_text(w, text, sizeof(text));
    if (sscanf(text, "jobs %lld events %lld", jobs, events) != 2)
        fail_msg("store.mark: '%s'", text);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A store without a mark (a data dir from before marks, or a first start): the
 * mark is written now, saying what the store holds, as one line of fixed width. */
static void test_missing_mark_is_written(void **state)
{
    world_t *w = *state;
    br_store_t *s = open_store(w->db);
    int64_t j1 = add_job(s, "a"), j2 = add_job(s, "b");
    int64_t e1 = add_event(s, j1);
    (void)j2;
    br_err_t err = {0};
    assert_int_equal(access(w->mark, F_OK), -1);
    br_storemark_t *m = br_storemark_new(w->dir, s, &err);
    assert_non_null(m);
    long long jobs, events;
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, j2);
    assert_int_equal(events, e1);
    char text[128];
    mark_text(w, text, sizeof(text));
    /* "jobs " + 19 digits + " events " + 19 digits + "\n": rewritten in place */
    assert_int_equal(strlen(text), 5 + 19 + 8 + 19 + 1);
    assert_int_equal(text[strlen(text) - 1], '\n');
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", w->mark);
    assert_int_equal(access(tmp, F_OK), -1); /* renamed into place, none left over */
    br_storemark_destroy(&m);
    assert_null(m);
    br_storemark_destroy(&m); /* twice: no harm */
    br_store_destroy(&s);
}

/* After commits that issued ids the mark follows them, in place (same size); an
 * update with no change to the store leaves the file alone. */
static void test_update_follows_commits(void **state)
{
    world_t *w = *state;
    br_store_t *s = open_store(w->db);
    br_err_t err = {0};
    br_storemark_t *m = br_storemark_new(w->dir, s, &err);
    assert_non_null(m);
    long long jobs, events;
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, 0);
    assert_int_equal(events, 0);
    struct stat before, after;
    assert_int_equal(stat(w->mark, &before), 0);

    assert_int_equal(br_store_begin(s, &err), 0);
    int64_t id = add_job(s, "a");
    int64_t ev = add_event(s, id);
    assert_int_equal(br_store_commit(s, &err), 0);
    br_storemark_update(m, s);
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, id);
    assert_int_equal(events, ev);
    assert_int_equal(stat(w->mark, &after), 0);
    assert_int_equal(after.st_size, before.st_size);
    assert_int_equal(after.st_ino, before.st_ino); /* written in place, not replaced */

    /* nothing changed in the store since: the mark is not written again (a line
     * put there by hand stays) */
    write_file(w->mark, "jobs 0000000000000000042 events 0000000000000000042\n");
    br_storemark_update(m, s);
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, 42);

    /* a change that issues no new id (an update of a row) does not move the mark */
    write_file(w->mark, "jobs 0000000000000000042 events 0000000000000000042\n");
    assert_int_equal(br_store_job_set_reason(s, id, "waiting", &err), 0);
    br_storemark_update(m, s);
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, 42); /* the ids the mark last wrote are the same */

    /* one that does: written with the store's ids */
    int64_t id2 = add_job(s, "b");
    br_storemark_update(m, s);
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, id2);
    assert_int_equal(events, ev);
    br_storemark_destroy(&m);
    br_store_destroy(&s);
}

/* The store was replaced by an older copy (here: an empty one) after jobs were
 * acknowledged: refused with EIO, the numbers in the words, and the mark kept as it
 * was so that a second start is refused as well. */
static void test_store_behind_mark_is_refused(void **state)
{
    world_t *w = *state;
    br_store_t *s = open_store(w->db);
    br_err_t err = {0};
    br_storemark_t *m = br_storemark_new(w->dir, s, &err);
    assert_non_null(m);
    int64_t a = add_job(s, "a");
    add_job(s, "b");
    int64_t last = add_job(s, "c");
    int64_t ev = add_event(s, a);
    br_storemark_update(m, s);
    br_storemark_destroy(&m);
    br_store_destroy(&s);
    char before[128], text[128];
    mark_text(w, before, sizeof(before));

    /* bramble.db (and its WAL) gone, a new empty store in its place */
    char side[160];
    unlink(w->db);
    snprintf(side, sizeof(side), "%s-wal", w->db);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", w->db);
    unlink(side);
    s = open_store(w->db);
    for (int i = 0; i < 2; i++) {
        memset(&err, 0, sizeof(err));
        assert_null(br_storemark_new(w->dir, s, &err));
        assert_int_equal(err.errnum, EIO);
        char want[200];
        snprintf(want, sizeof(want), "0 of %lld jobs, 0 of %lld events",
                 (long long)last, (long long)ev);
        if (!strstr(err.text, "behind its mark") || !strstr(err.text, want))
            fail_msg("refusal: '%s'", err.text);
        assert_string_equal(mark_text(w, text, sizeof(text)), before);
    }

    /* the store knows more events but fewer jobs: refused too */
    int64_t j = add_job(s, "x");
    for (int i = 0; i < 5; i++)
        add_event(s, j);
    memset(&err, 0, sizeof(err));
    assert_null(br_storemark_new(w->dir, s, &err));
    assert_int_equal(err.errnum, EIO);

    /* the way on that the words give: remove the mark, start from the store as it is */
    unlink(w->mark);
    m = br_storemark_new(w->dir, s, &err);
    assert_non_null(m);
    long long jobs, events;
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, j);
    br_storemark_destroy(&m);
    br_store_destroy(&s);
}

/* A store ahead of its mark (the mark is written after commits: a crash between
 * the two leaves it behind) is fine, and the mark catches up at once. */
static void test_store_ahead_of_mark_is_taken(void **state)
{
    world_t *w = *state;
    br_store_t *s = open_store(w->db);
    add_job(s, "a");
    int64_t b = add_job(s, "b");
    int64_t ev = add_event(s, b);
    write_file(w->mark, "jobs 1 events 0\n"); /* an older mark, not even full width */
    br_err_t err = {0};
    br_storemark_t *m = br_storemark_new(w->dir, s, &err);
    assert_non_null(m);
    long long jobs, events;
    mark_says(w, &jobs, &events);
    assert_int_equal(jobs, b);
    assert_int_equal(events, ev);
    br_storemark_destroy(&m);

    /* equal to the mark: taken */
    m = br_storemark_new(w->dir, s, &err);
    assert_non_null(m);
    br_storemark_destroy(&m);
    br_store_destroy(&s);
}

/* A file that is not a mark is refused (EINVAL), naming it and the way on; it is
 * not overwritten. */
static void test_bad_mark_is_refused(void **state)
{
    world_t *w = *state;
    br_store_t *s = open_store(w->db);
    static const char *const bad[] = {
        "",
        "hello\n",
        "jobs 5\n",
        "jobs x events 3\n",
        "jobs -1 events 0\n",
        "jobs 1 events -4\n",
        "events 1 jobs 2\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(w->mark, bad[i]);
        br_err_t err = {0};
        br_storemark_t *m = br_storemark_new(w->dir, s, &err);
        if (m)
            fail_msg("mark '%s' was taken", bad[i]);
        assert_int_equal(err.errnum, EINVAL);
        if (!strstr(err.text, w->mark) || !strstr(err.text, "not a store mark") ||
            !strstr(err.text, "remove it"))
            fail_msg("mark '%s': '%s'", bad[i], err.text);
        char text[128];
        assert_string_equal(mark_text(w, text, sizeof(text)), bad[i]);
    }
    br_store_destroy(&s);
}

/* A data dir the mark cannot be read in: the error names the file. */
static void test_unreadable_mark(void **state)
{
    world_t *w = *state;
    br_store_t *s = open_store(w->db);
    char dir[160];
    snprintf(dir, sizeof(dir), "%s/nodir", w->dir);
    write_file(dir, "x"); /* a file where the data dir should be: ENOTDIR */
    br_err_t err = {0};
    assert_null(br_storemark_new(dir, s, &err));
    assert_int_equal(err.errnum, ENOTDIR);
    assert_non_null(strstr(err.text, "nodir/store.mark"));
    br_store_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_missing_mark_is_written, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_follows_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_behind_mark_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_ahead_of_mark_is_taken, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_mark_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreadable_mark, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
