/* trash.c - trees removed off the agent's loop (trash.h). */
#include "trash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "workq.h"

typedef struct {
    br_wqnode_t node;
    char path[]; /* the tree, set aside */
} doomed_t;

struct br_trash {
    br_workq_t q;
    unsigned next; /* numbers the names set aside */
};

static void work(void *owner, br_wqnode_t *job)
{
    br_trash_t *t = owner;
    br_rm_tree_until(AT_FDCWD, BR_WQ_JOB(job, doomed_t, node)->path, &t->q.w.cancel);
}

static int finish(void *owner, br_wqnode_t *job)
{
    (void)owner;
    free(BR_WQ_JOB(job, doomed_t, node)); /* nobody waits for it */
    return 0;
}

static void drop(br_wqnode_t *job)
{
    free(BR_WQ_JOB(job, doomed_t, node));
}

static const br_workq_ops_t ops = {NULL, work, finish, drop};

br_trash_t *br_trash_new(br_err_t *err)
{
    br_trash_t *t = calloc(1, sizeof(*t));
    if (!t)
        return br_errp(err, ENOMEM, "out of memory");
    if (br_workq_init(&t->q, "trash", &ops, t, err) < 0 || br_workq_start(&t->q, err) < 0) {
        br_workq_fini(&t->q);
        free(t);
        return NULL;
    }
    return t;
}

void br_trash_destroy(br_trash_t **tp)
{
    br_trash_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    br_workq_fini(&t->q);
    free(t);
    *tp = NULL;
}

int br_trash_tree(br_trash_t *t, const char *dir, const char *name, br_err_t *err)
{
    char from[4200], to[4300];
    snprintf(from, sizeof(from), "%s/%s", dir, name);
    pthread_mutex_lock(&t->q.w.mu);
    unsigned n = t->next++;
    pthread_mutex_unlock(&t->q.w.mu);
    snprintf(to, sizeof(to), "%s/%s%s-%u-%u", dir, BR_TRASH_PREFIX, name, (unsigned)getpid(), n);
    if (rename(from, to) < 0) {
        if (errno == ENOENT)
            return 1;
        return br_errf(err, errno, "%s: cannot set it aside: %s", from, strerror(errno));
    }
    size_t len = strlen(to) + 1;
    doomed_t *d = malloc(sizeof(*d) + len);
    if (!d)
        return br_errf(err, ENOMEM, "%s: out of memory (left for the next start)", to);
    memcpy(d->path, to, len);
    pthread_mutex_lock(&t->q.w.mu);
    br_workq_add(&t->q, NULL, &d->node);
    pthread_mutex_unlock(&t->q.w.mu);
    return 0;
}
