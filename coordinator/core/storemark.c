/* storemark.c - the store's high-water mark beside it (see storemark.h). */
#include "storemark.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The mark is one line of a fixed width, so that it is rewritten in place (one
 * small write into the file's first block, never torn) after each commit: a new
 * file renamed over it each time cost a block allocation and, on ext4, a wait
 * for its writeback (a sixth of the coordinator's time under a burst of
 * submissions). Only the first is written whole and renamed into place. */
#define MARK_FMT "jobs %019" PRId64 " events %019" PRId64 "\n"

struct br_storemark {
    char path[1100];
    int fd;               /* the mark, open for writing in place; -1: none */
    int64_t jobs, events; /* what the mark says */
    int64_t changes;      /* the store's change count when it was last written */
};

static int read_mark(const char *path, int64_t *jobs, int64_t *events, br_err_t *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? 0 : br_errf(err, errno, "%s: %s", path, strerror(errno));
    long long j = -1, e = -1;
    int n = fscanf(f, "jobs %lld events %lld", &j, &e);
    fclose(f);
    if (n != 2 || j < 0 || e < 0)
        return br_errf(err, EINVAL, "%s: not a store mark (expected 'jobs N events M'); "
                                    "remove it to start from this store as it is", path);
    *jobs = j;
    *events = e;
    return 1;
}

static void write_mark(br_storemark_t *m, int64_t jobs, int64_t events)
{
    char line[80];
    int n = snprintf(line, sizeof(line), MARK_FMT, jobs, events);
    if (m->fd >= 0) { /* in place */
        if (pwrite(m->fd, line, (size_t)n, 0) != n) {
            fprintf(stderr, "brambled: %s: %s\n", m->path, strerror(errno));
            return;
        }
    } else {
        char tmp[1200];
        snprintf(tmp, sizeof(tmp), "%s.tmp", m->path);
        FILE *f = fopen(tmp, "we");
        int ok = f && fputs(line, f) >= 0;
        if (f && fclose(f) != 0)
            ok = 0;
        if (!ok || rename(tmp, m->path) < 0) {
            fprintf(stderr, "brambled: %s: %s\n", m->path, strerror(errno));
            unlink(tmp);
            return;
        }
        m->fd = open(m->path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    m->jobs = jobs;
    m->events = events;
}

br_storemark_t *br_storemark_new(const char *dir, br_store_t *store, br_err_t *err)
{
    br_storemark_t *m = calloc(1, sizeof(*m));
    if (!m)
        return br_errp(err, ENOMEM, "out of memory");
    snprintf(m->path, sizeof(m->path), "%s/store.mark", dir);
    m->fd = -1;
    int64_t jobs, events, mjobs = 0, mevents = 0;
    int had = read_mark(m->path, &mjobs, &mevents, err);
    if (had < 0 || br_store_high_ids(store, &jobs, &events, err) < 0)
        goto fail;
    if (had && (jobs < mjobs || events < mevents)) {
        fprintf(stderr,
                "brambled: %s/bramble.db knows jobs up to %lld and events up to %lld, but "
                "its mark %s says %lld and %lld were committed: was bramble.db-wal "
                "deleted, or bramble.db replaced by an older copy? Acknowledged work "
                "would be lost and job ids issued again. Restore the files, or remove "
                "the mark to start from this store as it is.\n",
                dir, (long long)jobs, (long long)events, m->path, (long long)mjobs,
                (long long)mevents);
        br_errf(err, EIO, "the store is behind its mark (store.mark): %lld of %lld jobs, "
                          "%lld of %lld events",
                (long long)jobs, (long long)mjobs, (long long)events, (long long)mevents);
        goto fail;
    }
    m->changes = -1;
    write_mark(m, jobs, events);
    m->changes = br_store_changes(store);
    return m;
fail:
    free(m);
    return NULL;
}

void br_storemark_destroy(br_storemark_t **m)
{
    if (m && *m) {
        if ((*m)->fd >= 0)
            close((*m)->fd);
        free(*m);
        *m = NULL;
    }
}

void br_storemark_update(br_storemark_t *m, br_store_t *store)
{
    int64_t changes = br_store_changes(store), jobs, events;
    if (changes == m->changes)
        return;
    m->changes = changes;
    br_err_t err;
    if (br_store_high_ids(store, &jobs, &events, &err) < 0) {
        fprintf(stderr, "brambled: store mark: %s\n", err.text);
        return;
    }
    if (jobs != m->jobs || events != m->events)
        write_mark(m, jobs, events);
}
