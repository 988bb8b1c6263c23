/* watchers.c - clients waiting for news of jobs, told once per wake. */
#include "watchers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char route[BR_WATCH_ROUTE_MAX];
    size_t route_len;
    int64_t job;
    int logs;
    br_watch_who_t who;
    int64_t expires_ms;
    int news;
} watcher_t;

struct br_watchers {
    watcher_t *v;
    size_t n, cap;
    size_t all_by_users; /* watchers of every job held by users */
};

br_watchers_t *br_watchers_new(void)
{
    return calloc(1, sizeof(br_watchers_t));
}

void br_watchers_destroy(br_watchers_t **wp)
{
    if (!wp || !*wp)
        return;
    free((*wp)->v);
    free(*wp);
    *wp = NULL;
}

static void recount(br_watchers_t *w)
{
    w->all_by_users = 0;
    for (size_t i = 0; i < w->n; i++)
        w->all_by_users += w->v[i].job == 0 && !w->v[i].who.admin;
}

int br_watchers_add(br_watchers_t *w, const void *route, size_t route_len, int64_t job,
                    int logs, const br_watch_who_t *who, int64_t now_ms, br_err_t *err)
{
    if (!route || route_len == 0 || route_len > BR_WATCH_ROUTE_MAX || job < 0)
        return br_errf(err, EINVAL, "event.watch: bad route or job");
    for (size_t i = 0; i < w->n; i++) {
        watcher_t *x = &w->v[i];
        if (x->job == job && x->route_len == route_len &&
            memcmp(x->route, route, route_len) == 0) {
            x->expires_ms = now_ms + BR_WATCH_TTL_MS;
            x->logs |= logs;
            return 0;
        }
    }
    if (w->n == BR_WATCH_MAX)
        return br_errf(err, EBUSY, "event.watch: %d clients wait for news already; try "
                                   "again later", BR_WATCH_MAX);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        watcher_t *v = realloc(w->v, cap * sizeof(*v));
        if (!v)
            return br_errf(err, ENOMEM, "out of memory");
        w->v = v;
        w->cap = cap;
    }
    watcher_t *x = &w->v[w->n++];
    memset(x, 0, sizeof(*x));
    memcpy(x->route, route, route_len);
    x->route_len = route_len;
    x->job = job;
    x->logs = logs;
    x->who = *who;
    x->expires_ms = now_ms + BR_WATCH_TTL_MS;
    recount(w);
    return 0;
}

void br_watchers_note(br_watchers_t *w, int64_t job, int64_t owner, int is_log)
{
    for (size_t i = 0; i < w->n; i++) {
        watcher_t *x = &w->v[i];
        if (is_log && !x->logs)
            continue;
        if (x->job ? x->job == job
                   : x->who.admin || job == 0 || (owner >= 0 && owner == x->who.owner))
            x->news = 1;
    }
}

size_t br_watchers_count(const br_watchers_t *w)
{
    return w->n;
}

int br_watchers_need_owner(const br_watchers_t *w)
{
    return w->all_by_users > 0;
}

static void drop(br_watchers_t *w, size_t i)
{
    w->v[i] = w->v[--w->n];
}

void br_watchers_flush(br_watchers_t *w, int64_t now_ms, br_watch_send_fn fn, void *arg)
{
    size_t before = w->n;
    for (size_t i = 0; i < w->n;) {
        watcher_t *x = &w->v[i];
        if (now_ms >= x->expires_ms) {
            drop(w, i);
            continue;
        }
        if (x->news) {
            x->news = 0;
            if (fn(arg, x->route, x->route_len, x->job) < 0) {
                drop(w, i);
                continue;
            }
        }
        i++;
    }
    if (w->n != before)
        recount(w);
}
