/* watchers.h - clients waiting for news (event.watch): `bramble submit --wait`,
 * `events --follow`, `logs -f`. Each watcher is a client connection (its ROUTER
 * route) and what it watches: one job or every job, events only or log output too.
 * The coordinator notes what each wake changed; once the wake is over it sends each
 * watcher with news one small "event.news" message, which tells the client to ask
 * again (event.list, job.show, job.logs), so what a client sees always comes through
 * the ordinary, authorised requests. A watcher lives BR_WATCH_TTL_MS unless its
 * client renews it; at most BR_WATCH_MAX exist. */
#ifndef BRAMBLE_WATCHERS_H
#define BRAMBLE_WATCHERS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define BR_WATCH_MAX 1024
#define BR_WATCH_TTL_MS 30000
#define BR_WATCH_ROUTE_MAX 256

typedef struct br_watchers br_watchers_t;

/* Whose watcher: the admin sees every job; a user only the jobs they own. */
typedef struct {
    int admin;
    int64_t owner; /* the principal's id */
} br_watch_who_t;

br_watchers_t *br_watchers_new(void);
void br_watchers_destroy(br_watchers_t **w);

/* Add, or renew (same route and job), a watcher of job (0: every job and the
 * nodes' events); logs: also news of the job's output. -1 with EBUSY when
 * BR_WATCH_MAX are in use, EINVAL for a bad route. */
int br_watchers_add(br_watchers_t *w, const void *route, size_t route_len, int64_t job,
                    int logs, const br_watch_who_t *who, int64_t now_ms, br_err_t *err);

/* Something happened: an event of job (0: a node's) whose owner is owner (-1 when
 * unknown or none), or (is_log) output of job. Marks the watchers it concerns. */
void br_watchers_note(br_watchers_t *w, int64_t job, int64_t owner, int is_log);

/* Whether any watcher exists (callers skip the owner lookup when none). */
size_t br_watchers_count(const br_watchers_t *w);
/* Whether a watcher of every job by a user (who must own a job to hear of it) exists. */
int br_watchers_need_owner(const br_watchers_t *w);

/* For every watcher with news: fn(arg, route, route_len, job) once; the news is
 * cleared. Watchers older than their TTL are dropped first. fn returns -1 when the
 * route is gone (the watcher is dropped). */
typedef int (*br_watch_send_fn)(void *arg, const void *route, size_t route_len,
                                int64_t job);
void br_watchers_flush(br_watchers_t *w, int64_t now_ms, br_watch_send_fn fn, void *arg);

#endif
